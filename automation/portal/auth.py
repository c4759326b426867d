"""Bearer tokens: who is calling, which namespaces they own, whether they are an admin, their teams' old quotas.

The tokens file is YAML, either a list of entries or `{tokens: [entries], quotas: {namespace: quota}}`:

    tokens:
      - {name: platform, tokenSha256: <hex sha256 of the token>, admin: true}
      - {name: team-a, token: <the token>, namespaces: [team-a]}
    quotas:
      team-a: {maxGPUs: 16, maxDeployments: 10}

It is parsed with a strict schema: booleans are booleans (`admin: "false"` is an error, not an
admin), unknown keys, empty or duplicate tokens, duplicate names, malformed `tokenSha256` and entries
with both `token` and `tokenSha256` are errors naming the entry. `quotas:` is deprecated: each is read as the
TeamPolicy {gpus: [{count: maxGPUs}], maxDeployments} of its namespace (automation/portal/service.py
`migrated_policies`), unless a stored TeamPolicy governs the namespace. Prefer `tokenSha256`: then the file holds no
usable secret. Tokens are compared in constant time; a token is never logged or returned.
`TokensFile` reloads the file when its bytes change (or on SIGHUP); a file that is gone or does not load grants
nothing until it loads (fail closed). No message quotes the file's text: YAML errors say line, column and problem.
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
from fleet.loader import yaml_problem

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


_FIELDS = {*TokenEntry.model_fields, *TokensDocument.model_fields, *Quota.model_fields}
_TOKEN_MIN = 16  # TokenEntry.token's min_length: anything shorter is no token


def _shown(part: int | str, named: set[str]) -> str:
    """A part of an error's location, unless it could be a token written where a key goes (`{name: a, token
    s3cr3t...}` has the key `token s3cr3t...`): keys the schema knows, short ones and namespaces an entry names."""
    if not isinstance(part, str) or part in _FIELDS or len(part) < _TOKEN_MIN or part in named or part == "[key]":
        return str(part)
    return f"<a key of {len(part)} characters, not shown>"


def _namespaces_named(data: object) -> set[str]:
    items = data.get("tokens") if isinstance(data, dict) else data
    named: set[str] = set()
    for item in items if isinstance(items, list) else []:
        listed = item.get("namespaces") if isinstance(item, dict) else None
        if isinstance(listed, list):
            named.update(n for n in listed if isinstance(n, str))
    return named


class Tokens:
    def __init__(self, entries: list[tuple[str, Principal]], quotas: dict[str, Quota] | None = None):
        self._entries = entries  # (sha256 hex, principal)
        self.quotas = dict(quotas or {})

    @classmethod
    def parse(cls, text: str, path: str | Path = "tokens") -> Tokens:
        try:
            data = yaml.load(text, Loader=_NoAliasLoader)
        except yaml.YAMLError as exc:
            raise TokensFileError(f"{path}: not readable as YAML: {yaml_problem(exc)}") from None
        document = {"tokens": data} if isinstance(data, list) else data
        try:
            parsed = TokensDocument.model_validate(document)
        except ValidationError as exc:
            if not isinstance(data, list) and not isinstance(data, dict):
                raise TokensFileError(f"{path}: expected a list of tokens or {{tokens: [...], quotas: {{...}}}}") from None
            said = []  # every bad entry, so that one round of fixes is enough
            named = _namespaces_named(data)
            for error in exc.errors()[:10]:  # a message never has the input, and keys are shown only when safe
                where = [_shown(p, named) for p in error["loc"]]
                if len(where) >= 2 and where[0] == "tokens" and isinstance(error["loc"][1], int):
                    field = ".".join(where[2:]) or "entry"
                    said.append(f"{_entry_label(data, error['loc'][1])}: {field}: {error['msg']}")
                else:
                    said.append(f"{'.'.join(where) or 'file'}: {error['msg']}")
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
            raw = Path(path).read_bytes()
        except OSError as exc:
            raise TokensFileError(f"{path}: cannot read tokens file: {exc.strerror or type(exc).__name__}") from None
        return cls.from_bytes(raw, path)

    @classmethod
    def from_bytes(cls, raw: bytes, path: str | Path, warn: bool = True) -> Tokens:
        try:
            text = raw.decode()
        except UnicodeDecodeError as exc:
            raise TokensFileError(f"{path}: byte {exc.start + 1} is not UTF-8") from None
        tokens = cls.parse(text, path)
        if warn and tokens.has_plaintext(text) and readable_by_others(path):
            log.warning("%s holds plaintext tokens and is readable by other users: chmod 600 it, or use tokenSha256",
                        path)
        if warn and tokens.quotas:
            log.warning("%s: `quotas:` is deprecated: each is read as the TeamPolicy {gpus: [{count: maxGPUs}], "
                        "maxDeployments} of its namespace, unless a stored TeamPolicy governs the namespace; "
                        "write TeamPolicies instead (docs/portal.md, \"Team budgets\")", path)
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

    def compose_node(self, parent: yaml.Node | None, index: int) -> yaml.Node | None:
        if self.check_event(yaml.AliasEvent):
            event = self.peek_event()
            raise yaml.composer.ComposerError(None, None, "aliases are not allowed in the tokens file",
                                              event.start_mark)
        return super().compose_node(parent, index)


class TokensFile:
    """The current tokens of a file: reloaded when its bytes change (looked at once a second) or on SIGHUP.

    Fail closed: a file that is gone, or that no longer loads, grants nothing (every token is refused, the quotas in
    force stay) until it loads again, and each check says so in an error log line (and /readyz answers 503), so a
    revocation saved with a typo never leaves the revoked token working. docs/portal.md "Tokens" argues the choice.
    The file must load at start (TokensFileError)."""

    def __init__(self, path: str | Path, check_every: float = 1.0):
        import time

        self.path = Path(path)
        self._clock = time.monotonic
        self._check_every = check_every
        self._lock = threading.Lock()
        raw = self._read()
        if raw is None:
            raise TokensFileError(f"{self.path}: cannot read tokens file: no such file, or not readable")
        self._current = Tokens.from_bytes(raw, self.path)
        self._seen: bytes | None = hashlib.sha256(raw).digest()  # the bytes loaded: a change of content, whatever the stat says
        self._checked = self._clock()
        self.last_error: str | None = None

    def _read(self) -> bytes | None:
        try:
            return self.path.read_bytes()
        except OSError:
            return None

    def reload(self) -> bool:
        """Load the file now; True when its tokens are in force."""
        with self._lock:
            return self._load(self._read(), force=True)

    def _load(self, raw: bytes | None, force: bool = False) -> bool:
        seen = hashlib.sha256(raw).digest() if raw is not None else None
        if seen == self._seen and not force:
            if self.last_error is not None:  # still broken: said at every check until it is fixed
                log.error("every token is refused until the tokens file loads: %s", self.last_error)
            return self.last_error is None
        self._seen, self._checked = seen, self._clock()
        try:
            if raw is None:
                raise TokensFileError(f"{self.path}: the tokens file is gone (or not readable)")
            self._current = Tokens.from_bytes(raw, self.path)
        except TokensFileError as exc:
            self._current = Tokens([], self._current.quotas)  # no caller; the quotas in force stay
            self.last_error = str(exc)
            log.error("every token is refused until the tokens file loads: %s", exc)
            return False
        self.last_error = None
        log.warning("tokens reloaded from %s", self.path)
        return True

    def current(self) -> Tokens:
        if self._clock() - self._checked >= self._check_every:
            with self._lock:
                if self._clock() - self._checked >= self._check_every:
                    self._checked = self._clock()
                    self._load(self._read())
        return self._current

    def resolve(self, token: str | None) -> Principal | None:
        return self.current().resolve(token)

    def by_digest(self, candidate: str) -> Principal | None:
        return self.current().by_digest(candidate)

    @property
    def quotas(self) -> dict[str, Quota]:
        return self.current().quotas
