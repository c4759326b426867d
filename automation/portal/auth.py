"""Bearer tokens: who is calling, which namespaces they own, whether they are an admin.

The tokens file is a YAML list of `{name, token | tokenSha256, namespaces, admin}`. Prefer
`tokenSha256` (the hex SHA-256 of the token): then the file holds no usable secret. Tokens are
compared in constant time; a token is never logged or returned.
"""

from __future__ import annotations

import hashlib
import hmac
from dataclasses import dataclass
from pathlib import Path

import yaml


class TokensFileError(Exception):
    pass


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


class Tokens:
    def __init__(self, entries: list[tuple[str, Principal]]):
        self._entries = entries  # (sha256 hex, principal)

    @classmethod
    def load(cls, path: str | Path) -> Tokens:
        try:
            data = yaml.safe_load(Path(path).read_text())
        except (OSError, yaml.YAMLError) as exc:
            raise TokensFileError(f"{path}: cannot read tokens file: {exc}") from None
        if not isinstance(data, list) or not data:
            raise TokensFileError(f"{path}: expected a non-empty YAML list of {{name, token, namespaces, admin}}")
        entries = []
        for i, item in enumerate(data):
            if not isinstance(item, dict) or not isinstance(item.get("name"), str):
                raise TokensFileError(f"{path}: entry {i}: needs a name")
            secret = item.get("tokenSha256") or (digest(item["token"]) if isinstance(item.get("token"), str) else None)
            if not secret or len(secret) != 64:
                raise TokensFileError(f"{path}: entry {item['name']}: needs token or tokenSha256 (64 hex characters)")
            namespaces = item.get("namespaces") or []
            if not isinstance(namespaces, list) or not all(isinstance(n, str) for n in namespaces):
                raise TokensFileError(f"{path}: entry {item['name']}: namespaces must be a list of names")
            entries.append((secret.lower(), Principal(item["name"], frozenset(namespaces), bool(item.get("admin")))))
        return cls(entries)

    def resolve(self, token: str | None) -> Principal | None:
        if not token:
            return None
        candidate = digest(token)
        found = None
        for secret, principal in self._entries:  # compare against every entry: no timing hint about which matched
            if hmac.compare_digest(secret, candidate):
                found = principal
        return found
