"""The identity of a stack: what it stands for, rendered as a Pulumi stack name and parsed back.

  platform-<cluster>          StackId("platform", name=cluster)
  gateway                     StackId("gateway")
  team-<namespace>.<cluster>  StackId("team", namespace, cluster) (a team's namespace on one cluster)
  endpoints-<namespace>       StackId("endpoints", namespace)     (the namespace's routable endpoints)
  model-<namespace>.<name>    StackId("model", namespace, name)   (a ModelDeployment)
  service-<namespace>.<name>  StackId("service", namespace, name) (a ModelService)
  cache-<namespace>.<name>    StackId("cache", namespace, name)   (a ModelCache)

One-to-one: a namespace is a DNS label, which has no `.`, so the first `.` after the kind
separates namespace from name; `ml-team/qwen` is `model-ml-team.qwen` and `ml/team-qwen` is
`model-ml.team-qwen`. (The first encoding, `model-<ns>-<name>`, gave both the same stack.)
Names in that first encoding parse as *legacy* ids, which render back unchanged, so stacks
recorded under them can still be found, renamed (automation/execution/migration.py) or destroyed.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from functools import lru_cache
from enum import StrEnum

import yaml

from fleet.errors import ModelplaneError


class StackKind(StrEnum):
    """What a stack stands for. Members are their names' strings (a member equals, hashes and formats as its
    value), so a kind read from a stack name or compared with text is the same kind."""

    platform = "platform"
    gateway = "gateway"
    team = "team"
    cache = "cache"
    model = "model"
    endpoints = "endpoints"
    service = "service"


# YAML output writes an enum member as its word, as JSON does (yaml's safe dumper refuses str subclasses)
for _dumper in (yaml.representer.SafeRepresenter, yaml.SafeDumper, getattr(yaml, "CSafeDumper", yaml.SafeDumper)):
    _dumper.add_multi_representer(StrEnum, lambda dumper, value: dumper.represent_str(str(value)))

KINDS: tuple[StackKind, ...] = tuple(StackKind)
NAMESPACED: tuple[StackKind, ...] = (StackKind.team, StackKind.cache, StackKind.model, StackKind.service)
PER_NAMESPACE: tuple[StackKind, ...] = (StackKind.endpoints,)  # <kind>-<namespace>
ORDER: dict[StackKind, int] = {kind: rank for rank, kind in enumerate(KINDS)}  # the order stacks apply in
_LABEL = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$")
# Pulumi stack names: letters, digits, '-', '_', '.'; at most 100 characters.
MAX_LENGTH = 100


class StackIdError(ModelplaneError, ValueError):
    pass


@dataclass(frozen=True, order=True)
class StackId:
    kind: StackKind
    namespace: str | None = None
    name: str | None = None  # the object's name, or the cluster of a platform stack
    legacy: str | None = None  # a name in the first, ambiguous encoding, kept as written

    @classmethod
    def platform(cls, cluster: str) -> StackId:
        return cls(StackKind.platform, None, cluster)

    @classmethod
    def gateway(cls) -> StackId:
        return cls(StackKind.gateway)

    @classmethod
    def team(cls, namespace: str, cluster: str) -> StackId:
        return cls(StackKind.team, namespace, cluster)

    @classmethod
    def endpoints(cls, namespace: str) -> StackId:
        return cls(StackKind.endpoints, namespace)

    @classmethod
    def model(cls, namespace: str, name: str) -> StackId:
        return cls(StackKind.model, namespace, name)

    @classmethod
    def service(cls, namespace: str, name: str) -> StackId:
        return cls(StackKind.service, namespace, name)

    @classmethod
    def cache(cls, namespace: str, name: str) -> StackId:
        return cls(StackKind.cache, namespace, name)

    @property
    def cluster(self) -> str | None:
        return self.name if self.kind == StackKind.platform else None

    @property
    def rank(self) -> int:
        return ORDER[self.kind]

    def __str__(self) -> str:
        if self.legacy is not None:
            return self.legacy
        if self.kind == StackKind.gateway:
            return "gateway"
        if self.kind == StackKind.platform:
            return f"platform-{self.name}"
        if self.kind in PER_NAMESPACE:
            return f"{self.kind}-{self.namespace}"
        return f"{self.kind}-{self.namespace}.{self.name}"

    def legacy_name(self) -> str | None:
        """The name this stack had in the first encoding (None for platform and gateway stacks: unchanged)."""
        return f"{self.kind}-{self.namespace}-{self.name}" if self.kind in ("cache", "model", "service") else None

    @classmethod
    @lru_cache(maxsize=1 << 16)  # ids are immutable; a plan parses each stack's name several times
    def parse(cls, text: str) -> StackId:
        if text == "gateway":
            return cls.gateway()
        kind, sep, rest = text.partition("-")
        if not sep or not rest or kind not in KINDS or kind == "gateway":
            raise StackIdError(f"{text!r} is not a modelplane stack name")
        typed = StackKind(kind)
        if typed == "platform":
            return cls.platform(rest)
        if typed in PER_NAMESPACE:
            if not _LABEL.match(rest):
                raise StackIdError(f"{text!r} is not a modelplane stack name")
            return cls(typed, rest)
        namespace, dot, name = rest.partition(".")
        if dot and _LABEL.match(namespace) and name:
            return cls(typed, namespace, name)
        if not dot or not _LABEL.match(namespace):  # the first encoding: <kind>-<ns>-<name>, ambiguous
            return cls(typed, legacy=text)
        raise StackIdError(f"{text!r} is not a modelplane stack name")


def backend_name(stack: StackId | str, fleet: str | None = None) -> str:
    """The stack's name in the Pulumi backend: `<fleet>_<stack>` when several fleets share a backend (`--fleet`).

    `_` cannot occur in a DNS name, so the prefix never collides with a stack name of another fleet."""
    if fleet is not None and not _LABEL.match(fleet):
        raise StackIdError(f"fleet name {fleet!r} must be a DNS label (lowercase letters, digits and '-')")
    return f"{fleet}_{stack}" if fleet else str(stack)
