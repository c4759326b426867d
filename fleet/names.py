"""Object names, identical to the reference's so users' selectors and tools keep working."""

from __future__ import annotations

import hashlib

MAX_PREFIX = 57  # 63 - 5 hash characters - 1 dash


def _hash5(text: str) -> str:
    return hashlib.sha256(text.encode()).hexdigest()[:5]


def replica_name(deployment: str, cluster: str, index: int) -> str:
    """The ModelReplica (and ModelEndpoint) name: readable deployment prefix, hash of the placement."""
    return f"{deployment[:MAX_PREFIX].rstrip('-')}-{_hash5(f'{deployment}-{cluster}-{index}')}"


def child_name(*parts: str) -> str:
    """Join parts with '-', always add a 5-character hash, keep the result within 63 characters."""
    joined = "-".join(parts)
    return f"{joined[:MAX_PREFIX].rstrip('-')}-{_hash5(joined)}"


def suffixed(base: str, suffix: str, limit: int = 63) -> str:
    """`<base>-<suffix>` when it fits in `limit` characters, else a hashed name that does.

    The reference appends `-epp` and `-pool` unconditionally, which breaks DNS-label
    limits for long deployment names; short names stay identical to the reference's.
    """
    name = f"{base}-{suffix}"
    if len(name) <= limit:
        return name
    return f"{base[: limit - len(suffix) - 7].rstrip('-')}-{_hash5(name)}-{suffix}"


def bounded(name: str, limit: int) -> str:
    """The name itself when it fits in `limit` characters, else a hashed prefix that does."""
    if len(name) <= limit:
        return name
    return f"{name[: limit - 6].rstrip('-')}-{_hash5(name)}"
