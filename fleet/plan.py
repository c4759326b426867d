"""The scheduler's result: placed replicas, unscheduled shortfalls, dropped replicas and explanations."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Iterable

from fleet.memory import RecordedEngine, RecordedMember, RecordedReplica
from fleet.placement import ReplicaPlacement
from fleet.shapes import EngineShape

@dataclass(frozen=True)
class PlacedReplica:
    namespace: str
    deployment: str
    index: int
    name: str
    cluster: str
    placement: ReplicaPlacement
    backends: tuple[tuple[str, str, str], ...]  # (engine, backend, reason)
    state: str  # "kept" or "new"
    engines: tuple[EngineShape, ...] = ()  # the shape it was placed with

    @property
    def key(self) -> str:
        return f"{self.namespace}/{self.deployment}"

    def recorded(self) -> RecordedReplica:
        """What to remember once this replica's stack applied: the placement memory of the next plan (built once:
        stacks, reservations and comparisons each ask for it, thousands of times at fleet scale)."""
        cached = self.__dict__.get("_recorded")
        if cached is None:
            cached = self._record()
            object.__setattr__(self, "_recorded", cached)
        return cached

    def _record(self) -> RecordedReplica:
        shapes = {e.name: e for e in self.engines}
        engines = []
        for e in self.placement.engines:
            shape = shapes[e.engine]
            members = tuple(
                RecordedMember(m.role, e.pool, s.pods, tuple(sorted((n, c) for n, _, c in m.devices)))
                for m, s in zip(e.members, shape.members)
            )
            engines.append(RecordedEngine(e.engine, shape.copies, members))
        return RecordedReplica(self.namespace, self.deployment, self.name, self.cluster, self.index, tuple(engines),
                               self.dynamo)

    @property
    def dynamo(self) -> bool:
        """Served by Dynamo (a Dynamo graph): its cluster needs the Dynamo platform."""
        return any(backend == "dynamo" for _, backend, _ in self.backends)


@dataclass(frozen=True)
class Unscheduled:
    deployment: str
    missing: int
    reasons: tuple[str, ...]


@dataclass(frozen=True)
class Dropped:
    deployment: str
    name: str
    cluster: str
    index: int
    reason: str


@dataclass
class Plan:
    replicas: list[PlacedReplica] = field(default_factory=list)
    unscheduled: list[Unscheduled] = field(default_factory=list)
    dropped: list[Dropped] = field(default_factory=list)
    explain: dict[str, list[str]] = field(default_factory=dict)
    stats: dict[str, float] = field(default_factory=dict)

    def only(self, namespace: str | None = None, deployment: str | None = None) -> Plan:
        """The same plan, showing only one namespace's (and/or one deployment's) replicas; placement is unchanged."""
        def keep(key: str) -> bool:
            ns, _, name = key.partition("/")
            return (namespace is None or ns == namespace) and (deployment is None or name == deployment or key == deployment)

        return Plan([r for r in self.replicas if keep(r.key)], [u for u in self.unscheduled if keep(u.deployment)],
                    [d for d in self.dropped if keep(d.deployment)], {k: v for k, v in self.explain.items() if keep(k)})


def dynamo_clusters(plan: Plan, recorded: Iterable[RecordedReplica] = ()) -> frozenset[str]:
    """The clusters that need the Dynamo platform for their replicas: where the plan places a Dynamo-served replica,
    and where one is still applied (`recorded`: until its model stack is destroyed, which runs after the platform
    stacks' updates, uninstalling the platform would leave its graphs to a controller that is gone)."""
    return frozenset({r.cluster for r in plan.replicas if r.dynamo} | {r.cluster for r in recorded if r.dynamo})
