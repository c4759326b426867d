"""Capacity as read from the clusters, typed, and its snapshot file: what `modelplane capacity save` writes, CI
reuses and the portal's worker holds between reads. fleet/live_capacity.py makes it from a cluster's objects and
turns it into the scheduler's free devices; this module holds only the values (a Fleet carries one)."""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass, field
from typing import Any, Iterable

SNAPSHOT_VERSION = 1


@dataclass(frozen=True)
class NodeCapacity:
    """One node of a pool: per device of the pool's class (by name), what it publishes and who holds what."""

    name: str
    published: tuple[tuple[str, int], ...] = ()
    ours: tuple[tuple[str, int], ...] = ()
    others: tuple[tuple[str, int], ...] = ()
    unusable: str | None = None  # why it offers nothing new: "cordoned", "not Ready", "taint x=y:NoSchedule"


@dataclass(frozen=True)
class PoolCapacity:
    name: str
    nodes: tuple[NodeCapacity, ...] = ()
    growable: int = 0  # nodes an autoscaling pool may still add (maxNodeCount minus the nodes it has)


@dataclass(frozen=True)
class ClusterCapacity:
    """A cluster's capacity and where it came from: `live` (read at `read_at`, UTC ISO 8601) or `declared` (with
    `problem`: why it was not read)."""

    cluster: str
    source: str  # "live" or "declared"
    read_at: str = ""
    problem: str | None = None
    pools: tuple[PoolCapacity, ...] = ()

    @property
    def live(self) -> bool:
        return self.source == "live"


@dataclass(frozen=True)
class LiveCapacity:
    clusters: dict[str, ClusterCapacity] = field(default_factory=dict)

    def digest(self) -> str:
        """What a plan made with this capacity depends on (the read times are not: a read that finds the same
        devices plans the same)."""
        body = json.dumps([_cluster_json(c, times=False) for _, c in sorted(self.clusters.items())], sort_keys=True)
        return hashlib.sha256(body.encode()).hexdigest()

    def to_json(self) -> str:
        return json.dumps({"version": SNAPSHOT_VERSION,
                           "clusters": [_cluster_json(c) for _, c in sorted(self.clusters.items())]}, indent=1)

    @staticmethod
    def from_json(text: str) -> LiveCapacity:
        """A snapshot as `to_json` wrote it; ValueError naming what is wrong otherwise."""
        try:
            body = json.loads(text)
        except json.JSONDecodeError as exc:
            raise ValueError(f"not JSON: {exc.msg} at line {exc.lineno}") from None
        if not isinstance(body, dict) or body.get("version") != SNAPSHOT_VERSION:
            raise ValueError(f"not a capacity snapshot of version {SNAPSHOT_VERSION} (`modelplane capacity save`)")
        try:
            clusters = [_cluster_from(c) for c in body.get("clusters") or []]
        except (KeyError, TypeError, ValueError, AttributeError) as exc:
            raise ValueError(f"a cluster entry is malformed ({type(exc).__name__}: {exc})") from None
        return LiveCapacity({c.cluster: c for c in clusters})


def _counts(pairs: Iterable[tuple[str, int]]) -> dict[str, int]:
    return {k: v for k, v in pairs if v}


def _cluster_json(c: ClusterCapacity, times: bool = True) -> dict[str, Any]:
    out: dict[str, Any] = {"cluster": c.cluster, "source": c.source}
    if times:
        out["readAt"] = c.read_at
    if c.problem:
        out["problem"] = c.problem
    out["pools"] = [{"name": p.name, "growable": p.growable,
                     "nodes": [{"name": n.name, "published": _counts(n.published), "ours": _counts(n.ours),
                                "others": _counts(n.others), **({"unusable": n.unusable} if n.unusable else {})}
                               for n in p.nodes]} for p in c.pools]
    return out


def pairs(counts: dict) -> tuple[tuple[str, int], ...]:
    return tuple(sorted((str(k), int(v)) for k, v in counts.items() if int(v) > 0))


def _cluster_from(c: dict) -> ClusterCapacity:
    if c["source"] not in ("live", "declared"):
        raise ValueError(f"source {c['source']!r} is neither live nor declared")
    pools = tuple(PoolCapacity(str(p["name"]), tuple(
        NodeCapacity(str(n["name"]), pairs(n.get("published") or {}), pairs(n.get("ours") or {}),
                     pairs(n.get("others") or {}), n.get("unusable")) for n in p.get("nodes") or []),
        int(p.get("growable") or 0)) for p in c.get("pools") or [])
    return ClusterCapacity(str(c["cluster"]), c["source"], str(c.get("readAt") or ""), c.get("problem"), pools)


def declared(cluster: str, problem: str) -> ClusterCapacity:
    """A cluster that was not read: its declared capacity stands, and `problem` says why."""
    return ClusterCapacity(cluster, "declared", "", problem)
