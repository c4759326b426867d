"""A deployment's replica shape: engines, members, pods and per-node device requests.

Hashable, so every placement computation can be cached on (shape, pool kind, pool state):
two deployments that ask for the same thing share the work.
"""

from __future__ import annotations

import itertools
from dataclasses import dataclass
from typing import Callable, TypeVar

K = TypeVar("K")
V = TypeVar("V")


class HashedOnce:
    """A frozen dataclass that keys the placement caches: its nested tuples are hashed once, not on every lookup,
    and it carries `uid`, an integer that equal values share (interned by value, process-wide), for the hottest
    keys: hashing an object is a Python call each time, an integer's is not. A subclass sets `__hash__ = hash_once`
    in its body (dataclass replaces an inherited one). Neither the hash nor the uid is pickled: another interpreter
    hashes strings differently and numbers its values itself."""

    uid: int

    def __post_init__(self) -> None:
        object.__setattr__(self, "uid", _intern(self))

    def __getstate__(self) -> dict:
        return {k: v for k, v in self.__dict__.items() if k not in ("_hash", "uid")}

    def __setstate__(self, state: dict) -> None:
        self.__dict__.update(state)
        object.__setattr__(self, "uid", _intern(self))


def hash_once(self) -> int:
    cached = self.__dict__.get("_hash")
    if cached is None:
        cached = hash(tuple(getattr(self, f) for f in self.__dataclass_fields__))
        object.__setattr__(self, "_hash", cached)
    return cached


_UIDS: dict[HashedOnce, int] = {}
_NEXT_UID = itertools.count()
MAX_INTERNED = 100_000  # values a process keeps numbers for; past it they are numbered afresh (a long-lived portal)


def _kept(table: dict[K, V], key: K, limit: int, make: Callable[[], V]) -> V:
    """`table[key]`, made when missing; a table at its limit is emptied first (a long-lived portal)."""
    found = table.get(key)
    if found is None:
        if len(table) >= limit:
            table.clear()
        found = table[key] = make()
    return found


def _intern(value: HashedOnce) -> int:
    """The number of `value`'s value: the same for equal values while they are kept, never one of another value's
    (numbers are never reused, so a value numbered afresh only misses cache entries, it never takes another's)."""
    return _kept(_UIDS, value, MAX_INTERNED, lambda: next(_NEXT_UID))


@dataclass(frozen=True)
class Request:
    name: str
    count: int
    selectors: tuple[str, ...]


@dataclass(frozen=True)
class MemberShape(HashedOnce):
    role: str
    pods: int  # per copy: worker.nodes for a Worker, else 1
    requests: tuple[Request, ...]  # sorted by name: written order does not matter

    __hash__ = hash_once


@dataclass(frozen=True)
class EngineShape(HashedOnce):
    name: str
    copies: int
    phase: str | None
    members: tuple[MemberShape, ...]  # written order: retained replicas match members by position
    backend: str = "native"
    backend_reason: str = ""
    needs_nvidia: bool = False  # Dynamo-served: only pools whose claimed devices are NVIDIA
    needs_nvlink_domain: bool = False  # packed into one NVLink domain: only pools whose class names one

    __hash__ = hash_once


def member_shape(member) -> MemberShape:
    requests: tuple[Request, ...] = ()
    if getattr(member, "nodeSelector", None):
        requests = tuple(sorted(
            (Request(d.name, d.count, tuple(s.cel for s in d.selectors)) for d in member.nodeSelector.devices),
            key=lambda r: r.name,
        ))
    return MemberShape(member.role, member.pods, requests)


_SHAPES: dict[tuple, tuple[EngineShape, ...]] = {}  # `shape_key` -> the shapes it gives
MAX_SHAPES = 10_000  # distinct deployments' shapes kept; past it they are made afresh (a long-lived portal)


def shape_key(md) -> tuple:
    """Everything `engine_shapes` reads of a deployment, as plain values: its serving mode and annotations (the
    backend asked for, autoscaling), and each engine's name, copies, phase, capabilities and members (role, pods,
    container images, device requests). Fleets repeat a few shapes thousands of times; the key is a third of
    the cost of making them."""
    spec = md.spec.template.spec
    return (spec.mode, tuple(sorted((md.metadata.annotations or {}).items())),
            tuple((e.name, e.copies, e.phase, tuple(e.capabilities or ()),
                   tuple((m.role, m.pods, tuple(c.image for c in m.template.spec.containers),
                          tuple((d.name, d.count, tuple(s.cel for s in d.selectors)) for d in m.nodeSelector.devices)
                          if m.nodeSelector else None)
                         for m in e.members))
                  for e in spec.engines))


def engine_shapes(md) -> tuple[EngineShape, ...]:
    """The engines of a (validated) ModelDeployment, each with its serving path decided; made once per distinct
    `shape_key` in a process."""
    return _kept(_SHAPES, shape_key(md), MAX_SHAPES, lambda: made_shapes(md))


def made_shapes(md) -> tuple[EngineShape, ...]:
    """`engine_shapes`, made from the deployment."""
    from fleet.autoscaling import parse
    from fleet.backends import deployment_decisions

    decisions, errors = deployment_decisions(md)
    if errors:  # validation reports these; a plan never sees an invalid deployment
        raise ValueError(errors[0][1])
    autoscaling, _ = parse(md.metadata.annotations)
    # An autoscaled replica may grow to its maximum copies on its cluster: reserve for that.
    floor = autoscaling.max_copies if autoscaling else 0
    return tuple(
        EngineShape(e.name, max(e.copies, floor), e.phase, tuple(member_shape(m) for m in e.members),
                    d.backend, d.reason, d.needs_nvidia, "NVLinkDomain" in (e.capabilities or ()))
        for e, d in zip(md.spec.template.spec.engines, decisions)
    )


def replica_devices(md) -> int:
    """The devices one replica of a (validated) ModelDeployment claims, at its largest (autoscaled) size."""
    return sum(engine.copies * sum(member.pods * sum(r.count for r in member.requests) for member in engine.members)
               for engine in engine_shapes(md))
