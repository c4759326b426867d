"""Placement memory: where replicas were applied, so the next plan keeps them there.

Recorded after a stack applied successfully (by the automation layer), or read back from
observed ModelReplica manifests, which carry the same facts in the reference's shape.
"""

from __future__ import annotations

from dataclasses import dataclass, field

@dataclass(frozen=True)
class RecordedMember:
    role: str
    pool: str
    pods: int
    requests: tuple[tuple[str, int], ...]  # (name, count), sorted


@dataclass(frozen=True)
class RecordedEngine:
    name: str
    copies: int
    members: tuple[RecordedMember, ...]


@dataclass(frozen=True)
class RecordedReplica:
    """Placement memory: a replica that was applied (or observed as a ModelReplica)."""

    namespace: str
    deployment: str
    name: str
    cluster: str
    index: int
    engines: tuple[RecordedEngine, ...]
    # served by Dynamo: its cluster keeps the Dynamo platform while this replica is applied there (not placement:
    # left out of comparisons, and out of the record when false, as records before it were)
    dynamo: bool = field(default=False, compare=False)

    def to_dict(self) -> dict:
        """As dataclasses.asdict gives it (what state files hold), built directly: a fleet has thousands."""
        return {"namespace": self.namespace, "deployment": self.deployment, "name": self.name, "cluster": self.cluster,
                "index": self.index, "engines": [
                    {"name": e.name, "copies": e.copies, "members": [
                        {"role": m.role, "pool": m.pool, "pods": m.pods, "requests": [list(q) for q in m.requests]}
                        for m in e.members]} for e in self.engines], **({"dynamo": True} if self.dynamo else {})}


def recorded_from_model_replica(mr) -> RecordedReplica | None:
    labels = mr.metadata.labels or {}
    deployment = labels.get("modelplane.ai/deployment")
    if not deployment:
        return None
    try:
        index = int(labels.get("modelplane.ai/replica-index", "0"))
    except ValueError:
        index = 0
    engines = []
    for e in mr.spec.engines:
        members = tuple(
            RecordedMember(m.role, m.nodePoolName, m.pods,
                           tuple(sorted((r.name, r.count) for r in m.deviceRequests or [])))
            for m in e.members
        )
        engines.append(RecordedEngine(e.name, e.copies, members))
    return RecordedReplica(mr.namespace, deployment, mr.name, mr.spec.clusterName, max(index, 0), tuple(engines))
