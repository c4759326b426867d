"""Live capacity: the devices each cluster publishes and has free, as its API server says, per node of each pool.

Declared capacity (fleet/inventory.py) is what a pool's class says its nodes offer. On a shared cluster other
workloads hold some of those devices, nodes are cordoned or down, a GPU has failed: a replica "placed" on declared
capacity then sits Pending while another cluster has room. Live capacity is read from three kinds (one LIST each,
automation/capacity/):

- Nodes: a pool's nodes are those labelled `modelplane.ai/pool: <pool>` (the label every platform stack and the
  local fleet give them, and that every replica's pods select). A node that is not Ready, is cordoned, or carries a
  NoSchedule/NoExecute taint that neither the GPU taint nor the cluster's declared taints account for, offers no
  new capacity.
- ResourceSlices: the devices each node's DRA drivers publish (newest generation of each driver's pool), matched
  to the pool class's devices by driver and the class's declared attributes. A node is never counted above what
  its class declares (the ledger's shapes are the class's), so a live read only ever lowers capacity.
- ResourceClaims with an allocation: the devices taken, and by whom. A claim owned by a pod of this fleet's
  replicas (label `modelplane.ai/replica`) is ours; any other is another workload's.

A node's free devices are published minus taken by others: a kept replica's own devices stay counted as free, and
the scheduler charges them to the replica as it always does, so a live read never moves a running replica by
itself. A node that offers no new capacity (cordoned, not Ready) keeps exactly the devices our replicas hold on it,
so a replica already there stays, and nothing new lands there. A pool that autoscales (`maxNodeCount`) may still
grow: its missing nodes count as full nodes, as declared capacity counts them.

Pure: Kubernetes objects as plain dicts in, typed capacity out. A snapshot (`to_json`/`from_json`) is what CI
saves and reuses, and what the portal's worker holds between reads.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING, Any, Iterable

from fleet.capacity import ClusterCapacity, LiveCapacity, NodeCapacity, PoolCapacity, declared, pairs
from fleet.inventory import ClusterView, PoolDevice, PoolView

if TYPE_CHECKING:
    from fleet.validate import Fleet

POOL_LABEL = "modelplane.ai/pool"
REPLICA_LABEL = "modelplane.ai/replica"
GPU_TAINT = "nvidia.com/gpu"  # every GPU pool's taint, which every replica tolerates (workloads/pods.py)


# ---- from a cluster's objects ---------------------------------------------------------------------------------


def _ready(node: dict) -> bool:
    return any(c.get("type") == "Ready" and c.get("status") == "True"
               for c in (node.get("status") or {}).get("conditions") or [])


def _why_unusable(node: dict, tolerated: set[str]) -> str | None:
    spec = node.get("spec") or {}
    if spec.get("unschedulable"):
        return "cordoned"
    if not _ready(node):
        return "not Ready"
    for taint in spec.get("taints") or []:
        if taint.get("effect") in ("NoSchedule", "NoExecute") and taint.get("key") not in tolerated:
            value = f"={taint['value']}" if taint.get("value") else ""
            return f"taint {taint.get('key')}{value}:{taint.get('effect')}"
    return None


def _attribute(published: dict, driver: str, key: str) -> tuple[str, Any] | None:
    value = published.get(key) or published.get(f"{driver}/{key}")
    if not isinstance(value, dict) or len(value) != 1:
        return None
    kind, v = next(iter(value.items()))
    return kind, v


def _matches(device: PoolDevice, driver: str, attributes: dict) -> bool:
    if device.facts.driver != driver:
        return False
    return all(_attribute(attributes, driver, key) == (kind, value)
               for key, (kind, value) in device.facts.attributes)


def _tainted(device: dict) -> bool:
    return any(t.get("effect") in ("NoSchedule", "NoExecute") for t in device.get("taints") or [])


def observe(view: ClusterView, autoscaling: dict[str, int | None], nodes: list[dict], slices: list[dict],
            claims: list[dict], pods: list[dict], read_at: str) -> ClusterCapacity:
    """The live capacity of one cluster from its objects. `autoscaling`: each pool's maxNodeCount (None when the
    pool does not autoscale). `pods`: the pods of this fleet's replicas (those labelled `modelplane.ai/replica`)."""
    kinds = {p.name: p.kind.devices for p in view.pools}
    tolerated = {GPU_TAINT, *(t.key for t in view.taints)}
    pool_of: dict[str, str] = {}
    usable: dict[str, str | None] = {}
    for node in nodes:
        meta = node.get("metadata") or {}
        pool = (meta.get("labels") or {}).get(POOL_LABEL)
        if pool in kinds:
            pool_of[meta["name"]] = pool
            usable[meta["name"]] = _why_unusable(node, tolerated)
    # each driver's pool of slices at its newest generation (older ones are being replaced)
    newest: dict[tuple[str, str], int] = {}
    for s in slices:
        spec = s.get("spec") or {}
        key = (spec.get("driver", ""), (spec.get("pool") or {}).get("name", ""))
        newest[key] = max(newest.get(key, 0), int((spec.get("pool") or {}).get("generation") or 0))
    published: dict[str, Counter] = {n: Counter() for n in pool_of}
    where: dict[tuple[str, str, str], tuple[str, str]] = {}  # (driver, pool, device) -> (node, class device)
    for s in slices:
        spec = s.get("spec") or {}
        driver, dra_pool = spec.get("driver", ""), (spec.get("pool") or {}).get("name", "")
        on = str(spec.get("nodeName") or "")
        if on not in pool_of or int((spec.get("pool") or {}).get("generation") or 0) != newest[driver, dra_pool]:
            continue
        for device in spec.get("devices") or []:
            if _tainted(device):
                continue
            match = next((d for d in kinds[pool_of[on]] if d.claimable and
                          _matches(d, driver, device.get("attributes") or {})), None)
            if match is not None:
                published[on][match.name] += 1
                where[driver, dra_pool, device.get("name", "")] = (on, match.name)
    replica_pods = {(p["metadata"].get("namespace"), p["metadata"]["name"]) for p in pods
                    if REPLICA_LABEL in (p["metadata"].get("labels") or {})}
    ours: dict[str, Counter] = {n: Counter() for n in pool_of}
    others: dict[str, Counter] = {n: Counter() for n in pool_of}
    for claim in claims:
        meta = claim.get("metadata") or {}
        owners = {(meta.get("namespace"), o.get("name")) for o in meta.get("ownerReferences") or []
                  if o.get("kind") == "Pod"}
        mine = bool(owners & replica_pods)
        allocation = (claim.get("status") or {}).get("allocation") or {}
        for result in (allocation.get("devices") or {}).get("results") or []:
            found = where.get((result.get("driver", ""), result.get("pool", ""), result.get("device", "")))
            if found is not None:
                holder, device_name = found
                (ours if mine else others)[holder][device_name] += 1
    pools = []
    for p in view.pools:
        members = sorted(n for n, pool in pool_of.items() if pool == p.name)
        node_caps = tuple(NodeCapacity(n, pairs(published[n]), pairs(ours[n]), pairs(others[n]), usable[n])
                          for n in members)
        ceiling = autoscaling.get(p.name)
        pools.append(PoolCapacity(p.name, node_caps, max(0, ceiling - len(members)) if ceiling is not None else 0))
    return ClusterCapacity(view.name, "live", read_at, None, tuple(pools))


def node_free(node: NodeCapacity, devices: tuple[PoolDevice, ...]) -> tuple[int, ...]:
    """Free devices per device of the class, as the ledger counts them (never above what the class declares)."""
    published, ours, others = dict(node.published), dict(node.ours), dict(node.others)
    vector = []
    for d in devices:
        if not d.claimable:  # nothing publishes or allocates a synthetic device: the class's word
            vector.append(d.count if node.unusable is None or any(ours.values()) else 0)
            continue
        if node.unusable is not None:
            vector.append(min(d.count, ours.get(d.name, 0)))
            continue
        vector.append(max(0, min(d.count, published.get(d.name, 0)) - others.get(d.name, 0)))
    return tuple(vector)


# ---- into the scheduler's view ---------------------------------------------------------------------------------


def free_nodes(pool: PoolView, capacity: PoolCapacity) -> tuple[tuple[tuple[int, ...], int], ...]:
    """The pool's nodes as the ledger holds them ({free vector: nodes}), from live capacity."""
    counted: Counter = Counter()
    for node in capacity.nodes:  # a node with nothing free still counts, so a rejection says "2 node(s), free: 0"
        counted[node_free(node, pool.kind.devices)] += 1
    if capacity.growable:
        counted[pool.kind.full] += capacity.growable
    return tuple(sorted(counted.items())) if pool.kind.devices else ()


def with_live(views: list[ClusterView], live: LiveCapacity | None) -> list[ClusterView]:
    """The clusters with live capacity where it was read: each pool's nodes are its free vectors."""
    if live is None:
        return views
    out = []
    for view in views:
        found = live.clusters.get(view.name)
        if found is None or not found.live:
            out.append(view)
            continue
        by_pool = {p.name: p for p in found.pools}
        pools = []
        for p in view.pools:
            capacity = by_pool.get(p.name, PoolCapacity(p.name))
            free = free_nodes(p, capacity)
            pools.append(replace(p, nodes=sum(n for _, n in free), free=free))
        out.append(replace(view, pools=tuple(pools)))
    return out


# ---- what a plan shows of it -----------------------------------------------------------------------------------


def _sum(pairs: Iterable[tuple[str, int]], into: Counter) -> None:
    for name, n in pairs:
        into[name] += n


def capacity_to_dict(fleet: Fleet, live: LiveCapacity) -> list[dict[str, Any]]:
    """Per cluster: where its capacity came from (live, read when; or declared, and why) and per pool the devices
    free for new replicas, with, when live, what the nodes publish, what this fleet's replicas and others hold,
    and which nodes offer nothing new. `plan -o json`'s `capacity` and the table under the plan."""
    from fleet.inventory import build_clusters

    out = []
    for view in build_clusters(fleet):
        found = live.clusters.get(view.name) or declared(view.name, "not in the snapshot")
        entry: dict[str, Any] = {"cluster": view.name, "source": found.source}
        if found.live:
            entry["readAt"] = found.read_at
        if found.problem:
            entry["problem"] = found.problem
        by_pool = {p.name: p for p in found.pools}
        pools = []
        for p in view.pools:
            pool: dict[str, Any] = {"name": p.name}
            if found.live:
                capacity = by_pool.get(p.name, PoolCapacity(p.name))
                published: Counter = Counter()
                ours: Counter = Counter()
                others: Counter = Counter()
                free: Counter = Counter()
                for node in capacity.nodes:
                    _sum(node.published, published)
                    _sum(node.ours, ours)
                    _sum(node.others, others)
                    if node.unusable is None:
                        _sum(zip((d.name for d in p.kind.devices), node_free(node, p.kind.devices)), free)
                _sum(((d.name, d.count * capacity.growable) for d in p.kind.devices), free)
                pool.update({"nodes": len(capacity.nodes), "published": dict(published), "ours": dict(ours),
                             "others": dict(others), "free": {d.name: free[d.name] for d in p.kind.devices}})
                if capacity.growable:
                    pool["growable"] = capacity.growable
                unusable = {n.name: n.unusable for n in capacity.nodes if n.unusable}
                if unusable:
                    pool["unusable"] = unusable
            else:
                pool.update({"nodes": p.nodes, "free": {d.name: d.count * p.nodes for d in p.kind.devices}})
            pools.append(pool)
        entry["pools"] = pools
        out.append(entry)
    return out


@dataclass(frozen=True)
class CapacityRow:
    """One pool's capacity as people read it: the table under `plan`, the pull-request comment, the portal page."""

    cluster: str
    source: str  # "live, read <time>", or "declared (why)"
    pool: str
    nodes: str  # "2", or "1 (+2 it may add)"
    free: str  # "gpu=0"
    others: str  # "gpu=2"; "-" when declared
    not_counted: str  # "l4-0: cordoned"; "-" when every node counts
    free_total: int
    others_total: int


def capacity_rows(capacity: list[dict[str, Any]]) -> list[CapacityRow]:
    """`capacity_to_dict`'s clusters as a row per pool (a cluster without pools: one row with none)."""
    def devices(counts: dict) -> str:
        return ",".join(f"{k}={v}" for k, v in sorted(counts.items())) or "-"

    rows = []
    for c in capacity:
        live = c["source"] == "live"
        source = f"live, read {c['readAt']}" if live else f"declared ({c.get('problem', '')})"
        for p in c["pools"] or [{"name": "-", "nodes": 0, "free": {}}]:
            others = p.get("others") or {}
            rows.append(CapacityRow(
                c["cluster"], source, p["name"],
                str(p["nodes"]) + (f" (+{p['growable']} it may add)" if p.get("growable") else ""),
                devices(p["free"]), devices(others) if live else "-",
                ", ".join(f"{n}: {why}" for n, why in sorted((p.get("unusable") or {}).items())) or "-",
                sum(p["free"].values()), sum(others.values())))
    return rows


def capacity_markdown(capacity: list[dict[str, Any]]) -> str:
    """The capacity a plan was made on, for a pull-request comment (`plan --against -o markdown --capacity ...`)."""
    lines = ["", "<details><summary>Capacity the plan was made on</summary>", "",
             "| cluster | source | pool | nodes | free | held by others | not counted |", "|---|---|---|---|---|---|---|"]
    lines += [f"| {r.cluster} | {r.source} | {r.pool} | {r.nodes} | {r.free} | {r.others} | {r.not_counted} |"
              for r in capacity_rows(capacity)]
    return "\n".join(lines + ["", "</details>", ""])
