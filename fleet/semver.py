"""Semantic versions with blang/semver v4 rules, as DRA `version` attributes use them.

Strict parsing wants exactly MAJOR.MINOR.PATCH, no leading `v`, no leading zeros.
`parse_semver(s, normalize=True)` first strips a leading `v`, strips leading zeros from
each core part and pads a short version with `.0` (a short version may not carry a
prerelease or build). Build metadata is validated and then ignored: equality and
ordering are by precedence.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from functools import total_ordering

from fleet.errors import ModelplaneError

_NUMERIC = re.compile(r"^(0|[1-9][0-9]*)$")
_DIGITS = re.compile(r"^[0-9]+$")
_ALNUM = re.compile(r"^[0-9A-Za-z-]+$")


class SemverError(ModelplaneError, ValueError):
    pass


@total_ordering
@dataclass(frozen=True, eq=False)
class Semver:
    major: int
    minor: int
    patch: int
    prerelease: tuple[int | str, ...] = ()

    def __eq__(self, other: object) -> bool:
        return isinstance(other, Semver) and self.compare_to(other) == 0

    def __hash__(self) -> int:
        return hash((self.major, self.minor, self.patch, self.prerelease))

    def __lt__(self, other: Semver) -> bool:
        return self.compare_to(other) < 0

    def compare_to(self, other: Semver) -> int:
        if not isinstance(other, Semver):
            raise SemverError("compareTo needs a semver")
        mine = (self.major, self.minor, self.patch)
        theirs = (other.major, other.minor, other.patch)
        if mine != theirs:
            return -1 if mine < theirs else 1
        return _compare_prerelease(self.prerelease, other.prerelease)

    def __str__(self) -> str:
        core = f"{self.major}.{self.minor}.{self.patch}"
        return core + ("-" + ".".join(map(str, self.prerelease)) if self.prerelease else "")


def _compare_prerelease(a: tuple, b: tuple) -> int:
    if a == b:
        return 0
    if not a:  # a release outranks any prerelease
        return 1
    if not b:
        return -1
    for x, y in zip(a, b):
        if x == y:
            continue
        if isinstance(x, int) and isinstance(y, int):
            return -1 if x < y else 1
        if isinstance(x, int):  # numeric identifiers sort before alphanumeric ones
            return -1
        if isinstance(y, int):
            return 1
        return -1 if x.encode() < y.encode() else 1
    return -1 if len(a) < len(b) else 1


def parse_semver(text: str, normalize: bool = False) -> Semver:
    if not isinstance(text, str):
        raise SemverError("version must be a string")
    if normalize:
        text = _normalize(text)
    parts = text.split(".", 2)
    if len(parts) != 3:
        raise SemverError(f"{text!r} is not MAJOR.MINOR.PATCH")
    major, minor, rest = parts
    build_at = rest.find("+")
    if build_at >= 0:
        for ident in rest[build_at + 1 :].split("."):
            if not _ALNUM.match(ident):
                raise SemverError(f"{text!r} has an invalid build identifier {ident!r}")
        rest = rest[:build_at]
    prerelease: tuple[int | str, ...] = ()
    pre_at = rest.find("-")
    if pre_at >= 0:
        prerelease = tuple(_prerelease_ident(text, p) for p in rest[pre_at + 1 :].split("."))
        rest = rest[:pre_at]
    return Semver(_core(text, major), _core(text, minor), _core(text, rest), prerelease)


def is_semver(text: str, normalize: bool = False) -> bool:
    try:
        parse_semver(text, normalize)
    except SemverError:
        return False
    return True


def _core(text: str, part: str) -> int:
    if not _NUMERIC.match(part):
        raise SemverError(f"{text!r}: {part!r} is not a number without leading zeros")
    return int(part)


def _prerelease_ident(text: str, ident: str) -> int | str:
    if ident == "" or not _ALNUM.match(ident):
        raise SemverError(f"{text!r} has an invalid prerelease identifier {ident!r}")
    if _DIGITS.match(ident):
        if not _NUMERIC.match(ident):
            raise SemverError(f"{text!r}: prerelease {ident!r} has a leading zero")
        return int(ident)
    return ident


def _normalize(text: str) -> str:
    if text.startswith("v"):
        text = text[1:]
    cut = min((i for i in (text.find("-"), text.find("+")) if i >= 0), default=len(text))
    core, tail = text[:cut], text[cut:]
    parts = core.split(".")
    if len(parts) < 3 and tail:
        raise SemverError(f"{text!r}: a short version may not carry a prerelease or build")
    parts = [p.lstrip("0") or "0" if _DIGITS.match(p) else p for p in parts]
    while len(parts) < 3:
        parts.append("0")
    return ".".join(parts) + tail
