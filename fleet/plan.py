"""The scheduler's result: placed replicas, unscheduled shortfalls, dropped replicas and explanations."""

from __future__ import annotations

from dataclasses import dataclass, field
from enum import Enum
from typing import Iterable

from fleet.memory import RecordedEngine, RecordedMember, RecordedReplica
from fleet.placement import ReplicaPlacement
from fleet.shapes import EngineShape


class Cause(str, Enum):
    """Why a replica is dropped, moved or not placed: what code asks of a Reason (its text is for people)."""

    DUPLICATE = "duplicate"  # a second recorded replica on one cluster and index
    CLUSTER_GONE = "cluster-gone"
    NOT_SELECTED = "not-selected"  # the deployment's selector no longer selects the cluster
    NO_CACHE_STORAGE = "no-cache-storage"  # the cluster cannot stage the deployment's ModelCache
    DRAINING = "draining"  # a NoExecute taint the deployment does not tolerate
    TEMPLATE_CHANGED = "template-changed"  # engines, members or pools changed under the replica
    SPLIT = "split"  # an engine recorded across pools
    POOL_GONE = "pool-gone"
    SCALED_DOWN = "scaled-down"
    NO_LONGER_FITS = "no-longer-fits"
    BLOCKED = "blocked"  # no new replica may be placed (cache missing, selector conflict)
    NO_PLACE = "no-place"  # no candidate cluster has room (one Reason per cluster or pool)
    NO_CLUSTERS = "no-clusters"
    DEPLOYMENT_REMOVED = "deployment-removed"  # a comparison's: the deployment is gone from the head
    PLANNED_AFRESH = "planned-afresh"  # a comparison's: no record kept the replica where it was
    FOLDED_BACK = "folded-back"  # moved down to a cluster of a lower tier that has room again (its replacement named)
    RESIDENCY = "residency"  # the cluster is outside the namespace's TeamPolicy residency (fleet/team_policy.py)
    OVER_BUDGET = "over-budget"  # the replica would take the namespace over a TeamPolicy GPU budget


class Reason(str):
    """A reason as people read it (it is its text: plans, comparisons and JSON show it unchanged), with its
    `cause` for code to ask, never the text."""

    cause: Cause

    def __new__(cls, cause: Cause, text: str) -> Reason:
        made = super().__new__(cls, text)
        made.cause = cause
        return made

    def __getnewargs__(self) -> tuple[Cause, str]:  # type: ignore[override]  # pickled with its cause
        return self.cause, str(self)


def cluster_gone(cluster: str) -> Reason:
    return Reason(Cause.CLUSTER_GONE, f"cluster {cluster} no longer exists")


def scaled_down(replicas: int) -> Reason:
    return Reason(Cause.SCALED_DOWN, f"scaled down to {replicas} replica(s)")


def blocked(why: str) -> Reason:
    return Reason(Cause.BLOCKED, why)


def folded_back(replacement: str, cluster: str, tier: int, was: int) -> Reason:
    return Reason(Cause.FOLDED_BACK, f"folded back from tier {was} to {cluster} (tier {tier}), which has room again, "
                                     f"as replica {replacement}")


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
    reasons: tuple[Reason, ...]


@dataclass(frozen=True)
class Dropped:
    deployment: str
    name: str
    cluster: str
    index: int
    reason: Reason
    replacement: str = ""  # the replica placed in its stead, when it moved within the plan (folded back)


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
