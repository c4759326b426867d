"""A deployment's replica shape: engines, members, pods and per-node device requests.

Hashable, so every placement computation can be cached on (shape, pool kind, pool state):
two deployments that ask for the same thing share the work.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Request:
    name: str
    count: int
    selectors: tuple[str, ...]


@dataclass(frozen=True)
class MemberShape:
    role: str
    pods: int  # per copy: worker.nodes for a Worker, else 1
    requests: tuple[Request, ...]  # sorted by name: written order does not matter


@dataclass(frozen=True)
class EngineShape:
    name: str
    copies: int
    phase: str | None
    members: tuple[MemberShape, ...]  # written order: retained replicas match members by position


def member_shape(member) -> MemberShape:
    requests = ()
    if getattr(member, "nodeSelector", None):
        requests = tuple(sorted(
            (Request(d.name, d.count, tuple(s.cel for s in d.selectors)) for d in member.nodeSelector.devices),
            key=lambda r: r.name,
        ))
    return MemberShape(member.role, member.pods, requests)


def engine_shapes(template_spec) -> tuple[EngineShape, ...]:
    return tuple(
        EngineShape(e.name, e.copies, e.phase, tuple(member_shape(m) for m in e.members))
        for e in template_spec.engines
    )
