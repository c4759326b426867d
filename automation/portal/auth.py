"""Bearer tokens: who is calling, which namespaces they own, whether they are an admin, their teams' quotas.

The tokens file is YAML, either a list of entries or `{tokens: [entries], quotas: {namespace: quota}}`:

    tokens:
      - {name: platform, tokenSha256: <hex sha256 of the token>, admin: true}
      - {name: team-a, token: <the token>, namespaces: [team-a]}
    quotas:
      team-a: {maxGPUs: 16, maxDeployments: 10}

It is parsed with a strict schema: booleans are booleans (`admin: "false"` is an error, not an
admin), unknown keys, empty or duplicate tokens, duplicate names, malformed `tokenSha256` and entries
with both `token` and `tokenSha256` are errors naming the entry. Prefer `tokenSha256`: then the file holds no
usable secret. Tokens are compared in constant time; a token is never logged or returned.
`TokensFile` reloads the file when it changes (or on SIGHUP); a bad reload keeps the old tokens.
"""

from __future__ import annotations

import hashlib
import hmac
import logging
import os
import stat
import threading
from dataclasses import dataclass
from pathlib import Path
from typing import Annotated

import yaml
from pydantic import BaseModel, ConfigDict, Field, StrictBool, StrictStr, ValidationError, model_validator

from fleet.errors import ModelplaneError

log = logging.getLogger("modelplane.portal")

NAMESPACE = r"^[a-z0-9]([-a-z0-9]{0,61}[a-z0-9])?$"


class TokensFileError(ModelplaneError):
    pass


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", strict=True)


class TokenEntry(_Strict):
    name: Annotated[StrictStr, Field(min_length=1, max_length=253)]
    token: Annotated[StrictStr, Field(min_length=16, max_length=4096)] | None = None
    tokenSha256: Annotated[StrictStr, Field(pattern=r"^[0-9a-fA-F]{64}$")] | None = None
    namespaces: list[Annotated[StrictStr, Field(pattern=NAMESPACE)]] = []
    admin: StrictBool = False

    @model_validator(mode="after")
    def _one_secret(self) -> TokenEntry:
        if (self.token is None) == (self.tokenSha256 is None):
            raise ValueError("give exactly one of token and tokenSha256")
        return self


class Quota(_Strict):
    maxGPUs: Annotated[int, Field(ge=0)] | None = None
    maxDeployments: Annotated[int, Field(ge=0)] | None = None


class TokensDocument(_Strict):
    tokens: Annotated[list[TokenEntry], Field(min_length=1)]
    quotas: dict[Annotated[StrictStr, Field(pattern=NAMESPACE)], Quota] = {}


@dataclass(frozen=True)
class Principal:
    name: str
    namespaces: frozenset[str]
    admin: bool

    def can_see(self, namespace: str) -> bool:
        return self.admin or namespace in self.namespaces

    def can_write(self, namespace: str | None) -> bool:
        """namespace None: a cluster-scoped object (fleet kinds), which only admins change."""
        return self.admin if namespace is None else (self.admin or namespace in self.namespaces)


def digest(token: str) -> str:
    return hashlib.sha256(token.encode()).hexdigest()


def _entry_label(data: object, index: int) -> str:
    items = data.get("tokens") if isinstance(data, dict) else data
    item = items[index] if isinstance(items, list) and index < len(items) else None
    name = item.get("name") if isinstance(item, dict) else None
    return f"entry {index} ({name})" if isinstance(name, str) else f"entry {index}"


class Tokens:
    def __init__(self, entries: list[tuple[str, Principal]], quotas: dict[str, Quota] | None = None):
        self._entries = entries  # (sha256 hex, principal)
        self.quotas = dict(quotas or {})

    @classmethod
    def parse(cls, text: str, path: str | Path = "tokens") -> Tokens:
        try:
            data = yaml.load(text, Loader=_NoAliasLoader)
        except yaml.YAMLError as exc:
            raise TokensFileError(f"{path}: not readable as YAML: {' '.join(str(exc).split())[:200]}") from None
        document = {"tokens": data} if isinstance(data, list) else data
        try:
            parsed = TokensDocument.model_validate(document)
        except ValidationError as exc:
            if not isinstance(data, list) and not isinstance(data, dict):
                raise TokensFileError(f"{path}: expected a list of tokens or {{tokens: [...], quotas: {{...}}}}") from None
            said = []  # every bad entry, so that one round of fixes is enough
            for error in exc.errors()[:10]:
                where = list(error["loc"])
                if len(where) >= 2 and where[0] == "tokens" and isinstance(where[1], int):
                    field = ".".join(str(p) for p in where[2:]) or "entry"
                    said.append(f"{_entry_label(data, where[1])}: {field}: {error['msg']}")
                else:
                    said.append(f"{'.'.join(str(p) for p in where) or 'file'}: {error['msg']}")
            more = f"; and {exc.error_count() - 10} more" if exc.error_count() > 10 else ""
            raise TokensFileError(f"{path}: " + "; ".join(said) + more) from None
        entries: list[tuple[str, Principal]] = []
        seen: dict[str, str] = {}
        names: dict[str, int] = {}
        for index, entry in enumerate(parsed.tokens):
            if entry.name in names:  # logs, revocation and quotas name a caller: one name must be one caller
                raise TokensFileError(f"{path}: entry {index} ({entry.name}): the name {entry.name!r} is taken by "
                                      f"entry {names[entry.name]}; names must be unique")
            names[entry.name] = index
            secret = (entry.tokenSha256 or digest(entry.token or "")).lower()
            if secret in seen:
                raise TokensFileError(f"{path}: entry {entry.name}: the same token as entry {seen[secret]}")
            seen[secret] = entry.name
            entries.append((secret, Principal(entry.name, frozenset(entry.namespaces), entry.admin)))
        return cls(entries, parsed.quotas)

    @classmethod
    def load(cls, path: str | Path) -> Tokens:
        try:
            text = Path(path).read_text()
        except (OSError, UnicodeDecodeError) as exc:
            raise TokensFileError(f"{path}: cannot read tokens file: {exc}") from None
        tokens = cls.parse(text, path)
        if tokens.has_plaintext(text) and readable_by_others(path):
            log.warning("%s holds plaintext tokens and is readable by other users: chmod 600 it, or use tokenSha256",
                        path)
        return tokens

    @staticmethod
    def has_plaintext(text: str) -> bool:
        data = yaml.load(text, Loader=_NoAliasLoader)
        items = data.get("tokens") if isinstance(data, dict) else data
        return any(isinstance(i, dict) and "token" in i for i in items or [])

    def resolve(self, token: str | None) -> Principal | None:
        return self.by_digest(digest(token)) if token else None

    def by_digest(self, candidate: str) -> Principal | None:
        found = None
        for secret, principal in self._entries:  # compare against every entry: no timing hint about which matched
            if hmac.compare_digest(secret, candidate):
                found = principal
        return found


def readable_by_others(path: str | Path) -> bool:
    try:
        return bool(os.stat(path).st_mode & (stat.S_IRGRP | stat.S_IROTH))
    except OSError:
        return False


class _NoAliasLoader(yaml.SafeLoader):
    """The tokens file needs no anchors or aliases; refusing them closes the alias-expansion attack."""

    def compose_node(self, parent, index):
        if self.check_event(yaml.AliasEvent):
            event = self.peek_event()
            raise yaml.composer.ComposerError(None, None, "aliases are not allowed in the tokens file",
                                              event.start_mark)
        return super().compose_node(parent, index)


class TokensFile:
    """The current tokens of a file: reloaded when the file changes (looked at once a second) or on SIGHUP.
    A reload that fails keeps the tokens in force and logs why, so a typo never locks everyone out."""

    def __init__(self, path: str | Path, check_every: float = 1.0):
        import time

        self.path = Path(path)
        self._clock = time.monotonic
        self._check_every = check_every
        self._lock = threading.Lock()
        self._current = Tokens.load(self.path)
        self._stamp = self._stat()
        self._checked = self._clock()
        self.last_error: str | None = None

    def _stat(self) -> tuple[int, int, int] | None:
        try:
            info = os.stat(self.path)
            return info.st_mtime_ns, info.st_size, info.st_ino
        except OSError:
            return None

    def reload(self) -> bool:
        """Load the file now; True when the new tokens are in force."""
        with self._lock:
            self._stamp, self._checked = self._stat(), self._clock()
            try:
                self._current = Tokens.load(self.path)
            except TokensFileError as exc:
                self.last_error = str(exc)
                log.error("tokens not reloaded, the previous ones stay in force: %s", exc)
                return False
            self.last_error = None
            log.warning("tokens reloaded from %s", self.path)
            return True

    def current(self) -> Tokens:
        if self._clock() - self._checked >= self._check_every:
            self._checked = self._clock()
            if self._stat() != self._stamp:
                self.reload()
        return self._current

    def resolve(self, token: str | None) -> Principal | None:
        return self.current().resolve(token)

    def by_digest(self, candidate: str) -> Principal | None:
        return self.current().by_digest(candidate)

    @property
    def quotas(self) -> dict[str, Quota]:
        return self.current().quotas
