"""The fleet scheduler: a pure function of (desired specs, observed clusters, recorded placements).

For the whole fleet at once, with one device ledger:

1. Retain: each recorded replica of a deployment (identity: namespace/deployment,
   cluster, index) stays where it is unless its cluster is gone, no longer selected or
   draining (NoExecute), it duplicates another, or its template no longer matches its
   pools. Degraded clusters keep their replicas.
2. Scale down: the highest tier loses a replica first, then the most loaded cluster, then
   the later cluster name, then the highest index.
3. Charge kept replicas to the ledger at their current shape, unchanged ones first; a
   replica whose shape grew and no longer fits where it is gets re-placed. Nothing is
   ever overcommitted.
4. Fill, one replica per deployment per round (larger deployments first in a round, so
   scarce capacity is shared and big gangs are not starved by crumbs): each new replica
   goes to the ready, selected, untainted cluster of the lowest tier (spec.placement.tier)
   with room, then with the fewest replicas of its deployment, then the tightest fit, then
   the cluster name. So new replicas spill upward only when the lower tiers are full; a
   kept replica never moves up because a lower tier has room or lacks it.
5. Fold back: a kept replica of a deployment that has all its replicas placed moves to a
   cluster of a strictly lower tier that has room (best by the fill's rank), at most
   spec.placement.foldBack.maxPerPlan replicas leaving each cluster per plan (default 1),
   deployments in fill order, then the highest tier, the cluster name and the index first.
   The new replica is placed first and the old one is dropped (FOLDED_BACK), so the
   deployment never has fewer replicas than before. Hysteresis: a fold-back is made only if
   the target still has room for one more replica of the same shape after it, so lower-tier
   capacity that hovers within one replica of the boundary never moves a replica back and
   forth (it spills a new replica up at most once, and never folds it back).

Every replica that cannot be placed gets reasons per cluster; every dropped replica gets
the reason it moved.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import hashlib
import heapq
from collections import Counter, defaultdict
from dataclasses import dataclass, field

from fleet.api.deployment import ModelDeployment
from fleet.api.policy import TeamPolicy
from fleet.backends import BACKEND_ANNOTATION, NVIDIA_DRIVER, dynamo_framework, on_dynamo_stack
from fleet.device_selectors import KeptEvaluator, SelectorEvaluator
from fleet.inventory import ClusterView, PoolView, build_clusters
from fleet.live_capacity import with_live
from fleet.names import replica_name
from fleet.memory import RecordedReplica, recorded_from_model_replica
from fleet.ledger import PoolState
from fleet.placement import MAX_ASSIGNMENTS, UNKNOWN, Placer, ReplicaPlacement, one_engine_replica
from fleet.plan import (Cause, Dropped, PlacedReplica, Plan, Reason, Unscheduled, blocked, cluster_gone, folded_back,
                        scaled_down)
from fleet.shapes import EngineShape, engine_shapes
from fleet.taints import describe, untolerated
from fleet.budgets import BudgetLedger, Use, replica_use
from fleet.team_policy import Policies, not_resident, policy_text

if TYPE_CHECKING:
    from fleet.validate import Fleet

# ---- the scheduler -------------------------------------------------------------------------

Kept = list[tuple[RecordedReplica, dict[str, str]]]  # kept replicas, each with its engines' pools (pins)


@dataclass
class Deployment:
    key: str
    namespace: str
    name: str
    md: ModelDeployment
    engines: tuple[EngineShape, ...]
    mode: str
    selector: dict[str, str]
    tolerations: tuple
    blocked: str | None  # why no new replica may be placed (cache missing, selector conflict)
    size: int  # DRA devices per replica, for ordering
    shape_id: int = 0  # interned engines: cheap cache keys
    backends: tuple = ()
    dynamo_images: bool = False  # every engine image is a Dynamo runtime (fleet/backends.on_dynamo_stack)
    requested: str | None = None  # the modelplane.ai/backend annotation
    cache: str | None = None  # "ns/name" of the ModelCache its pods mount
    source: str = ""  # the ModelDeployment as JSON: everything the deployment's placement depends on, as a key
    policy: TeamPolicy | None = None  # the TeamPolicy governing its namespace (fleet/team_policy.py)

    @property
    def residency(self) -> str:
        """What its candidates depend on of its policy, as a key ("" without residency)."""
        p = self.policy
        return p.name + p.spec.residency.model_dump_json() if p is not None and p.spec.residency else ""

    @property
    def budgeted(self) -> bool:
        return self.policy is not None and bool(self.policy.spec.gpus)


def _selector_text(labels: dict[str, str]) -> str:
    return ",".join(f"{k}={v}" for k, v in sorted(labels.items()))


def _resolve_selector(md, caches) -> tuple[dict[str, str], str | None]:
    """The deployment's cluster selector intersected with its cache's footprint."""
    spec = md.spec.template.spec
    own = dict(spec.clusterSelector.matchLabels or {}) if spec.clusterSelector else {}
    if not spec.modelCacheRef:
        return own, None
    cache = caches.get((md.namespace, spec.modelCacheRef.name))
    if cache is None:
        return own, f"waiting for ModelCache {md.namespace}/{spec.modelCacheRef.name}, which does not exist"
    theirs = dict(cache.spec.clusterSelector.matchLabels or {}) if cache.spec.clusterSelector else {}
    clashes = sorted(k for k in own.keys() & theirs.keys() if own[k] != theirs[k])
    if clashes:
        detail = "; ".join(f"{k}={own[k]} vs {k}={theirs[k]}" for k in clashes)
        return own, (f"clusterSelector and ModelCache {cache.name}'s clusterSelector select no cluster in common "
                     f"({detail})")
    return {**own, **theirs}, None


def _size(engines: tuple[EngineShape, ...]) -> int:
    return sum(e.copies * m.pods * sum(r.count for r in m.requests) for e in engines for m in e.members)


def _selected(cluster: ClusterView, selector: dict[str, str]) -> bool:
    labels = cluster.labels
    return all(labels.get(k) == v for k, v in selector.items())


def _not_selected(cluster: ClusterView, selector: dict[str, str]) -> str | None:
    """Why the cluster's labels do not satisfy the selector, e.g. "region=eu, wants region=us"; None if they do."""
    wrong = sorted(k for k, v in selector.items() if cluster.labels.get(k) != v)
    if not wrong:
        return None
    has = ",".join(f"{k}={cluster.labels[k]}" if k in cluster.labels else f"no {k}" for k in wrong)
    wants = ",".join(f"{k}={selector[k]}" for k in wrong)
    return f"{has}, wants {wants}"


LISTED = 3  # places named in full per reason; beyond that, a reason says how many places share it


def summarise(found: list[tuple[str, str, str]]) -> list[str]:
    """One line per place for a reason few places share; one line per reason shared more widely, with a count and
    the first places, as the Kubernetes scheduler says "0/500 nodes are available: 300 Insufficient gpu". At 500
    clusters an unplaceable deployment would otherwise get a line for each of its 2,000 pools. Reasons keep the
    order they were first seen in."""
    places: dict[str, list[tuple[str, str]]] = {}
    for at, why, detail in found:
        places.setdefault(why, []).append((at, detail))
    lines: list[str] = []
    for why, sharing in places.items():
        if len(sharing) <= LISTED:
            lines += [f"{at}: {why}" + (f" ({detail})" if detail else "") for at, detail in sharing]
            continue
        pools = sum("/" in at for at, _ in sharing)
        noun = "pools" if pools == len(sharing) else "clusters" if pools == 0 else "places"
        shown = ", ".join(at for at, _ in sharing[:LISTED])
        lines.append(f"{len(sharing)} {noun} ({shown}, ...): {why}")
    return list(dict.fromkeys(lines))


class _PoolSource:
    """A shape of one engine's places on the fleet's pools, tightest first: buckets of (fit key, [(nodes the fit
    takes, places of a group of alike pools)]) in fit order, each listed (pools with those nodes, by cluster and
    pool name) the first time a ranking reaches it, then kept: the entries of `_Ranking`."""

    def __init__(self, buckets: list[tuple[tuple, list[tuple[int, list[tuple]]]]]):
        self.buckets = buckets
        self._listed: dict[int, list[tuple]] = {}

    def bucket(self, i: int) -> list[tuple]:
        listed = self._listed.get(i)
        if listed is None:
            fit, groups = self.buckets[i]
            listed = self._listed[i] = sorted((fit, name, pool, cluster) for need, places in groups
                                              for nodes, name, pool, cluster in places if nodes >= need)
        return listed


@dataclass
class _PoolGroup:
    """The fleet's pools of one kind, problem and class (Scheduler._pool_groups): the places of them all as (nodes,
    cluster name, pool name, cluster), and the same split by the kinds of their cluster's pools (kinds -> one
    cluster and pool of them, and their places)."""

    places: list[tuple] = field(default_factory=list)
    by_kinds: dict[frozenset, tuple[ClusterView, PoolView, list[tuple]]] = field(default_factory=dict)


class _Ranking:
    """The feasible places for deployments of one shape and the same candidate clusters, tightest fit first.

    Equivalent to trying every candidate for every replica (what `explain` still does, to list them all), but
    cheaper: a place's score (its fit when empty, fleet/placement.py) is known before anything is placed, so the
    ranking holds each place under a lower bound of its score and places onto the ledger only at the head of the
    ranking, when asked. A place that no longer fits never fits again while the fill runs (the fill only takes
    capacity), so it is let go; a place whose score on the ledger as it is exceeds its bound (a shape of several
    engines whose best assignment is taken) goes back under its score.

    A shape of one engine is ranked per pool (`per_pool`): one engine runs on one pool, so a replica's placement
    on a cluster is its tightest candidate pool, then the pool's name, and ordering (score, cluster, pool) entries
    orders clusters as their best pools do; its places come from the shape's `_PoolSource` one bucket of equal
    fit at a time, as the heap runs out (a fill takes a few of a shape's thousands of places). Other shapes are
    ranked per cluster (pool "").

    Entries are (score bound, cluster name, pool, cluster).
    """

    def __init__(self, scheduler: Scheduler, d: Deployment, clusters: list[ClusterView], per_pool: bool):
        self.scheduler, self.d, self.per_pool = scheduler, d, per_pool
        placer = scheduler.placer
        # the bounds are static: a plan of the same platform in this process (the head after the base, the
        # portal's next replan) starts from the same entries
        self.key = key = (d.engines, per_pool, tuple(c.name for c in clusters))
        self.heap: list[tuple] = []
        self.source: _PoolSource | None = None
        self.wanted: set[str] | None = None
        self.taken = 0  # the source's buckets moved into the heap so far
        found = placer.rankings.get(key)
        if per_pool:
            # the fleet's pools the engine fits, tightest first, cut to the candidates as the fill reaches them
            self.source = found if found is not None else scheduler.pool_source(d)
            self.wanted = {c.name for c in clusters} if len(clusters) < len(scheduler.clusters) else None
            placer.rankings[key] = self.source
            return
        if found is not None:
            self.heap = list(found)
            return
        for c in clusters:
            bound = placer.empty_replica_score(d.engines, c)
            if bound is not None:
                self.heap.append((bound, c.name, "", c))
        self.heap.sort()  # a sorted list is a heap
        placer.rankings[key] = tuple(self.heap)

    def _more(self) -> bool:
        """Move the source's next bucket of places that are candidates into the (empty) heap; False when none is
        left. Every place of a later bucket ranks after every place taken before, so a sorted bucket keeps the heap
        a heap."""
        source = self.source
        while source is not None and self.taken < len(source.buckets):
            entries = source.bucket(self.taken)
            self.taken += 1
            if self.wanted is not None:
                entries = [e for e in entries if e[1] in self.wanted]
            if entries:
                self.heap.extend(entries)
                return True
        return False

    def _current(self, cluster: ClusterView, pool: str):
        """(placement, nodes) on the ledger as it is, or None when it does not fit there."""
        s = self.scheduler
        if not pool:
            placement, nodes = s._place(self.d, cluster)
            return (placement, nodes) if placement is not None else None
        engine, nodes = s.placer.place_engine(self.d.engines[0], s.pool_views[cluster.name, pool],
                                              s.states[cluster.name][pool])
        return one_engine_replica(cluster.name, engine, pool, nodes) if engine is not None else None

    def best(self, load: Counter, accept=None) -> tuple | None:
        """(rank, cluster, placement, nodes) of the best rank ((tier,) replicas of the deployment here, score, name);
        `_fill` asks one ranking per tier, lowest first, so the tier is the cluster's, never compared here.
        `accept(cluster, placement)`: False sets a place aside for this answer only (a team's budget refuses it; the
        ranking is shared with deployments of other teams), so the answer is the best place it accepts."""
        heap = self.heap
        loaded = []
        aside = []
        found = None
        while heap or self._more():
            bound, name, pool, cluster = heap[0]
            if load[name]:
                loaded.append(heapq.heappop(heap))
                continue
            current = self._current(cluster, pool)
            if current is None:
                heapq.heappop(heap)
                continue
            score = current[0].score.key()
            if score != bound:
                heapq.heapreplace(heap, (score, name, pool, cluster))
                continue
            if accept is not None and not accept(cluster, current[0]):
                aside.append(heapq.heappop(heap))
                continue
            found = (score, name, pool, cluster, *current)
            break
        for entry in loaded + aside:
            heapq.heappush(heap, entry)
        if found is None and loaded:  # every place that fits already has a replica of the deployment
            fitting = []
            for bound, name, pool, cluster in loaded:
                current = self._current(cluster, pool)
                if current is not None and (accept is None or accept(cluster, current[0])):
                    fitting.append((current[0].score.key(), name, pool, cluster, *current))
            if fitting:
                found = min(fitting, key=lambda e: (load[e[1]], e[0], e[1], e[2]))
        if found is None:
            return None
        score, name, _, cluster, placement, nodes = found
        return (cluster.tier, load[name], score, name), cluster, placement, nodes


PLATFORM_KINDS = ("InferenceClass", "InferenceCluster", "ModelCache")  # what placement reads besides deployments
# fold back only where room for one more replica of the same shape remains after the move (the hysteresis: capacity
# hovering within one replica of a boundary never moves a replica back and forth); off only to show why it is there
FOLD_BACK_HEADROOM = True
REASONS_KEPT = 256  # answers of `Scheduler._reasons` kept (a plan of 10,000 x 2,000 computes about 60)
MEMO_STATES_PER_CLUSTER = 40  # distinct cluster ledger states a memo keeps, per cluster, before it lets go of them
MIN_MEMO_STATES = 20_000  # (and never fewer): one plan of 2,000 x 500 interns 5,000 to 10,000


def memo_state_limit(clusters: int) -> int:
    """How many ledger states a memo may hold: every write or plan interns the states it passes through, and a
    portal that lives for months must not keep them all."""
    return max(MIN_MEMO_STATES, MEMO_STATES_PER_CLUSTER * clusters)


def platform_digest(fleet) -> str:
    digest = hashlib.sha256()
    for kind in PLATFORM_KINDS:
        for obj in fleet.of(kind):
            digest.update(fleet.text_of(obj).encode() + b"\0")
    if fleet.live is not None:  # the capacity read from the clusters: a plan of other free devices is another plan
        digest.update(fleet.live.digest().encode())
    return digest.hexdigest()


@dataclass
class PlanMemo:
    """What one plan computed that the next plan can reuse in the same process: the portal's replan worker plans
    the fleet after every write, and one write changes one deployment. Each entry is keyed by everything it was
    computed from (a deployment by its JSON, a cluster's charged ledger by its replicas in charge order,
    placements by interned ledger states), so a plan made with a memo is the plan made without one
    (tests/test_scheduler_properties.py). Nothing carries over when clusters, classes or caches change, and
    entries the latest plan did not use are let go."""

    platform: str = ""
    clusters: list[ClusterView] = field(default_factory=list)
    placer: Placer | None = None
    state_ids: dict[tuple, int] = field(default_factory=dict)
    shape_ids: dict[tuple, tuple[int, tuple]] = field(default_factory=dict)  # engines -> (id, the shared engines)
    deployments: dict[str, Deployment] = field(default_factory=dict)  # ModelDeployment JSON -> built
    retained: dict[tuple, tuple] = field(default_factory=dict)  # (JSON, its recorded replicas) -> kept, dropped
    charged: dict[tuple, tuple] = field(default_factory=dict)  # (cluster, its kept replicas in order) -> ledger

    def start(self, fleet, cel: SelectorEvaluator | None) -> None:
        platform = platform_digest(fleet)
        if platform != self.platform or len(self.state_ids) > memo_state_limit(len(self.clusters)):
            fresh = PlanMemo(platform, with_live(build_clusters(fleet), fleet.live), Placer(cel or KeptEvaluator()))
            self.__dict__.update(fresh.__dict__)

    def forget_states(self) -> None:
        """Let go of every interned ledger state and what was computed for them (a caller holding state ids
        interns its states again)."""
        self.state_ids.clear()
        if self.placer is not None:
            self.placer.forget_states()


class Scheduler:
    def __init__(self, fleet, recorded: list[RecordedReplica] | None = None, cel: SelectorEvaluator | None = None,
                 explain: bool = False, memo: PlanMemo | None = None):
        """`memo`: reuse what earlier plans in this process computed (not with `explain`, which notes every step)."""
        self.fleet = fleet
        self.explain = explain
        self.memo = None if explain else memo
        if self.memo is not None:
            self.memo.start(fleet, cel)
            assert self.memo.placer is not None
            self.placer = self.memo.placer
            self.clusters = self.memo.clusters
        else:
            self.placer = Placer(cel or KeptEvaluator())
            self.clusters = with_live(build_clusters(fleet), fleet.live)
        self.by_name = {c.name: c for c in self.clusters}
        self.states: dict[str, dict[str, PoolState]] = {
            c.name: {p.name: PoolState(p.kind, p.nodes, p.empty_nodes()) for p in c.pools} for c in self.clusters
        }
        # Each cluster's pools and states, interned to an integer that changes when the cluster's ledger does.
        self._state_ids: dict[tuple, int] = self.memo.state_ids if self.memo else {}
        self.state_id: dict[str, int] = {c.name: self._intern_state(c.name) for c in self.clusters}
        self.pool_views = {(c.name, p.name): p for c in self.clusters for p in c.pools}
        self._shape_ids: dict[tuple, tuple[int, tuple]] = self.memo.shape_ids if self.memo else {}
        self._candidate_sets: dict[tuple, list[ClusterView]] = {}  # (selector, tolerations, cache?) -> candidates
        self._tier_groups: dict[int, list[list[ClusterView]]] = {}  # id(candidates) -> them by tier (_by_tier)
        self._unselected_by: dict[tuple, dict[str, str]] = {}  # selector -> cluster -> why it is not selected
        self._reasons_by: dict[tuple, list[Reason]] = {}  # see _reasons; keyed by interned ledger states
        self._pool_sources: dict[int, _PoolSource] = {}  # shape of one engine -> see pool_source (one fill)
        self._groups: dict[tuple, _PoolGroup] | None = None  # see _pool_groups
        caches = {(c.namespace, c.name): c for c in fleet.of("ModelCache")}
        self.policies = Policies.of(fleet)
        self.budget = BudgetLedger(self.policies, self.clusters)
        self._outside: dict[str, dict[str, str]] = {}  # Deployment.residency -> cluster -> why it is outside
        self._no_budget: dict[tuple, Reason] = {}  # (namespace, shape, candidates) -> why no place fits a budget
        self._uses: dict[int, tuple[ReplicaPlacement, Use]] = {}  # id(placement) -> (it, replica_use)
        self.deployments: list[Deployment] = []
        built: dict[str, Deployment] = {}
        for md in fleet.of("ModelDeployment"):
            source = fleet.text_of(md) + policy_text(self.policies.for_namespace(md.namespace)) if self.memo else ""
            d = self.memo.deployments.get(source) if self.memo else None
            if d is None:
                d = self._deployment(md, caches)
                d.source = source
            built[source] = d
            self.deployments.append(d)
        if self.memo:
            self.memo.deployments = built
        # larger replicas first, then by name: content decides, never file order
        self.deployments.sort(key=lambda d: (-d.size, d.key))
        memory = list(recorded or [])
        memory += [r for r in (recorded_from_model_replica(mr) for mr in fleet.of("ModelReplica")) if r]
        self.recorded: dict[str, list[RecordedReplica]] = defaultdict(list)
        for r in sorted(set(memory), key=lambda r: (r.namespace, r.deployment, r.name, r.cluster, r.index)):
            self.recorded[f"{r.namespace}/{r.deployment}"].append(r)
        self.plan = Plan()

    def _deployment(self, md: ModelDeployment, caches: dict) -> Deployment:
        spec = md.spec.template.spec
        selector, blocked = _resolve_selector(md, caches)
        # deployments of equal shapes share one shape object: cache keys then compare by identity
        shape = engine_shapes(md)
        shape_id, engines = self._shape_ids.setdefault(shape, (len(self._shape_ids), shape))
        d = Deployment(f"{md.namespace}/{md.name}", md.namespace, md.name, md, engines, spec.mode, selector,
                        tuple(spec.tolerations or ()), blocked, _size(engines))
        d.shape_id = shape_id
        d.backends = tuple((e.name, e.backend, e.backend_reason) for e in engines)
        d.dynamo_images = all(dynamo_framework(c.image) for e in spec.engines for m in e.members
                              for c in m.template.spec.containers)
        d.requested = (md.metadata.annotations or {}).get(BACKEND_ANNOTATION)
        d.cache = f"{md.namespace}/{spec.modelCacheRef.name}" if spec.modelCacheRef else None
        d.policy = self.policies.for_namespace(md.namespace)
        return d

    # ---- helpers ---------------------------------------------------------------------------

    def _note(self, d: Deployment, line: str) -> None:
        if self.explain:
            self.plan.explain.setdefault(d.key, []).append(line)

    def _drop(self, d: Deployment, r: RecordedReplica, reason: Reason) -> None:
        self.plan.dropped.append(Dropped(d.key, r.name, r.cluster, r.index, reason))
        self._note(d, f"replica {r.name} ({r.cluster}#{r.index}) dropped: {reason}")

    def _backends(self, d: Deployment, cluster: str, placement) -> tuple[tuple[str, str, str], ...]:
        """The replica's serving paths on that cluster: the deployment's, unless the cluster's stack is Dynamo."""
        view = self.by_name.get(cluster)
        if view is None or view.stack != "Dynamo":
            return d.backends
        pools = {p.name: p for p in view.pools}
        nvidia = all(dev.facts.driver == NVIDIA_DRIVER for e in placement.engines if e.pool in pools
                     for dev in pools[e.pool].kind.devices if dev.claimable)
        gang = any(tuple(m.role for m in e.members) != ("Standalone",) for e in d.engines)
        return on_dynamo_stack(d.backends, gang, d.dynamo_images, nvidia, d.requested)

    def forget_states(self) -> None:
        """The memo lets go of the ledger states it has seen; this scheduler's clusters are interned again."""
        assert self.memo is not None
        self.memo.forget_states()
        self._reasons_by.clear()  # its keys hold state ids, which are numbered afresh
        self.state_id = {name: self._intern_state(name) for name in self.states}

    def _intern_state(self, cluster: str) -> int:
        key = tuple((name, state.key()) for name, state in self.states[cluster].items())
        return self._state_ids.setdefault(key, len(self._state_ids))

    def _place(self, d: Deployment, cluster: ClusterView, pinned: dict[str, str] | None = None):
        key = (d.shape_id, self.state_id[cluster.name], tuple(sorted(pinned.items())) if pinned else None)
        return self.placer.place_replica(d.engines, cluster, self.states[cluster.name], pinned, key)

    def _retain_problem(self, d: Deployment, r: RecordedReplica) -> tuple[Reason | None, dict[str, str]]:
        cluster = self.by_name.get(r.cluster)
        if cluster is None:
            return cluster_gone(r.cluster), {}
        if (outside := not_resident(d.policy, cluster.labels)) is not None:
            return Reason(Cause.RESIDENCY, f"cluster {cluster.name} is {outside}"), {}
        if (why := _not_selected(cluster, d.selector)) is not None:
            return Reason(Cause.NOT_SELECTED, f"cluster {cluster.name} is no longer selected ({why})"), {}
        if d.cache and not cluster.cache_storage_class:
            return Reason(Cause.NO_CACHE_STORAGE,
                          f"cluster {cluster.name} cannot stage ModelCache {d.cache} (no RWX storage class)"), {}
        if draining := untolerated(cluster.taints, d.tolerations, ("NoExecute",)):
            return Reason(Cause.DRAINING,
                          f"cluster {cluster.name} is draining: taint {describe(draining[0])} is not tolerated"), {}
        wanted = {e.name: e for e in d.engines}
        if len(r.engines) != len(d.engines) or any(e.name not in wanted for e in r.engines):
            return Reason(Cause.TEMPLATE_CHANGED, "template changed: engines are now " + ",".join(sorted(wanted))
                          + ", were " + ",".join(sorted(e.name for e in r.engines))), {}
        pins: dict[str, str] = {}
        for observed in r.engines:
            engine = wanted[observed.name]
            if [m.role for m in observed.members] != [m.role for m in engine.members]:
                return Reason(Cause.TEMPLATE_CHANGED, f"template changed: members of engine {engine.name} changed"), {}
            pools = {m.pool for m in observed.members}
            if len(pools) != 1:
                return Reason(Cause.SPLIT, f"engine {engine.name} was split across pools {','.join(sorted(pools))}"), {}
            pins[engine.name] = pools.pop()
        return None, pins

    def _shape_unchanged(self, d: Deployment, r: RecordedReplica) -> bool:
        recorded = {e.name: e for e in r.engines}
        for engine in d.engines:
            seen = recorded[engine.name]
            if seen.copies != engine.copies:
                return False
            for now, was in zip(engine.members, seen.members):
                counts = {q.name: q.count for q in now.requests}
                # the record lists claimed (DRA) requests only; placement-only ones are not compared
                if now.pods != was.pods or any(counts.get(name) != count for name, count in was.requests):
                    return False
        return True

    def _apply(self, cluster: str, nodes: dict) -> None:
        for pool, counter in nodes.items():
            state = self.states[cluster][pool]
            self.states[cluster][pool] = PoolState(state.kind, 0, Counter(counter))
        self.state_id[cluster] = self._intern_state(cluster)

    # ---- phases ----------------------------------------------------------------------------

    def _retain(self) -> list[tuple[Deployment, RecordedReplica, dict[str, str]]]:
        kept_all = []
        memo = self.memo
        retained: dict[tuple, tuple] = {}
        for d in self.deployments:
            key = (d.source, tuple(self.recorded.get(d.key, ())))
            found = memo.retained.get(key) if memo else None
            if found is None:
                found = self._retain_one(d)
            if memo:
                retained[key] = found
            kept, drops = found
            for r, reason in drops:
                self._drop(d, r, reason)
            kept_all += [(d, r, pins) for r, pins in kept]
        if memo:
            memo.retained = retained
        return kept_all

    def _retain_one(self, d: Deployment) -> tuple[list[tuple[RecordedReplica, dict[str, str]]],
                                                  list[tuple[RecordedReplica, Reason]]]:
        """The recorded replicas of `d` that stay where they are, and those dropped with the reason."""
        kept: list[tuple[RecordedReplica, dict[str, str]]] = []
        drops: list[tuple[RecordedReplica, Reason]] = []
        seen: dict[tuple[str, int], str] = {}
        for r in self.recorded.get(d.key, []):
            identity = (r.cluster, r.index)
            if identity in seen:
                drops.append((r, Reason(Cause.DUPLICATE, f"duplicate of replica {seen[identity]} (same cluster and index)")))
                continue
            seen[identity] = r.name
            problem, pins = self._retain_problem(d, r)
            if problem is None:
                cluster = self.by_name[r.cluster]
                for engine in d.engines:
                    pool = next((p for p in cluster.pools if p.name == pins[engine.name]), None)
                    elsewhere = tuple(any(self.placer.member_claims(m, p.kind) for p in cluster.pools)
                                      for m in engine.members)
                    if pool is None:
                        problem = Reason(Cause.POOL_GONE, f"pool {r.cluster}/{pins[engine.name]} no longer exists")
                    elif why := self.placer.static_problem(engine, pool, elsewhere):
                        problem = Reason(Cause.TEMPLATE_CHANGED, f"template or pool changed: {r.cluster}/{pool.name}: {why}")
                    if problem:
                        break
            if problem:
                drops.append((r, problem))
            else:
                kept.append((r, pins))
        # scale down: highest tier first, then most loaded cluster, then later cluster name, then highest index
        while len(kept) > d.md.spec.replicas:
            load = Counter(r.cluster for r, _ in kept)
            victim = max(kept, key=lambda item: (self.by_name[item[0].cluster].tier, load[item[0].cluster],
                                                 item[0].cluster, item[0].index))
            kept.remove(victim)
            drops.append((victim[0], scaled_down(d.md.spec.replicas)))
        return kept, drops

    def _charge_order(self, d: Deployment, r: RecordedReplica) -> tuple:
        """Kept replicas are charged unchanged ones first, then in deployment order (larger first, then by name)."""
        return (not self._shape_unchanged(d, r), -d.size, d.key, r.name)

    def _no_longer_fits(self, d: Deployment, r: RecordedReplica, detail) -> Reason:
        grew = "" if self._shape_unchanged(d, r) else " after its shape grew"
        return Reason(Cause.NO_LONGER_FITS, f"no longer fits on {r.cluster}{grew}: " + "; ".join(detail.lines))

    def _charge_kept(self, kept) -> dict[str, list[tuple[RecordedReplica, ReplicaPlacement]]]:
        kept.sort(key=lambda item: self._charge_order(item[0], item[1]))
        # A kept replica is charged to its own cluster's ledger only, so each cluster's charges are computed (or
        # read from the memo) on their own, in the same order; outcomes are then taken in the global order.
        by_cluster: dict[str, list] = defaultdict(list)
        for item in kept:
            by_cluster[item[1].cluster].append(item)
        outcome: dict[int, tuple] = {}
        charged: dict[tuple, tuple] = {}
        for cluster, items in by_cluster.items():
            for item, result in zip(items, self._charge_cluster(cluster, items, charged)):
                outcome[id(item)] = result
        if self.memo:
            self.memo.charged = charged
        placed: dict[str, list] = defaultdict(list)
        for item in kept:
            d, r, _ = item
            placement, detail = outcome[id(item)]
            if placement is None:
                self._drop(d, r, self._no_longer_fits(d, r, detail))
                continue
            placed[d.key].append((r, placement))
        return placed

    @staticmethod
    def charge_key(cluster: str, items: list) -> tuple:
        """A charge depends on the deployments' shapes, their pools and the ledger before it, not on which replica
        it is."""
        return cluster, tuple((d.source, tuple(sorted(pins.items()))) for d, _, pins in items)

    def _charge_cluster(self, cluster: str, items: list, charged: dict[tuple, tuple],
                        key: tuple | None = None) -> list[tuple]:
        """(placement or None, nodes or rejection) per kept replica on `cluster`, charging its ledger in order.
        `key`: charge_key(cluster, items), when the caller has it."""
        memo = self.memo
        if key is None:
            key = self.charge_key(cluster, items) if memo else ()
        found = memo.charged.get(key) if memo else None
        if found is not None:
            states, results = found
            self.states[cluster] = dict(states)
            self.state_id[cluster] = self._intern_state(cluster)
        else:
            results = []
            view = self.by_name[cluster]
            for d, r, pins in items:
                placement, detail = self._place(d, view, pins)
                if placement is not None:
                    self._apply(cluster, detail)
                results.append((placement, detail))
        if memo:
            charged[key] = (dict(self.states[cluster]), results)
        return results

    def _candidates(self, d: Deployment) -> list[ClusterView]:
        key = (tuple(sorted(d.selector.items())), tuple(t.model_dump_json() for t in d.tolerations), bool(d.cache),
               d.residency)
        if key not in self._candidate_sets:
            self._candidate_sets[key] = self._find_candidates(d)
        return self._candidate_sets[key]

    def _find_candidates(self, d: Deployment) -> list[ClusterView]:
        outside = self._outside_of(d)
        return [c for c in self.clusters if c.ready and _selected(c, d.selector)
                and (c.cache_storage_class or not d.cache) and c.name not in outside
                and not (c.taints and untolerated(c.taints, d.tolerations, ("NoSchedule", "NoExecute")))]

    def _outside_of(self, d: Deployment) -> dict[str, str]:
        """Why each cluster outside the deployment's residency is, by name ({} without residency): once per policy."""
        if not d.residency:
            return {}
        found = self._outside.get(d.residency)
        if found is None:
            found = self._outside[d.residency] = {c.name: why for c in self.clusters
                                                  if (why := not_resident(d.policy, c.labels)) is not None}
        return found

    def _by_tier(self, candidates: list[ClusterView]) -> list[list[ClusterView]]:
        """The candidates in groups of one tier, lowest first: the candidates themselves when they share one (every
        fleet without tiers), so the fill ranks them exactly as before tiers."""
        found = self._tier_groups.get(id(candidates))  # candidate lists are shared and live as long as the plan
        if found is None:
            tiers = sorted({c.tier for c in candidates})
            found = [candidates] if len(tiers) <= 1 else [[c for c in candidates if c.tier == t] for t in tiers]
            self._tier_groups[id(candidates)] = found
        return found

    def _ranking(self, d: Deployment, candidates: list[ClusterView], rankings: dict[tuple, _Ranking]) -> _Ranking:
        key = (d.shape_id, id(candidates))  # candidate lists are shared per (selector, tolerations, cache?)
        ranking = rankings.get(key)
        if ranking is None:
            # ranked per pool when the shape is one engine and no cluster has more pools than a search compares
            per_pool = len(d.engines) == 1 and all(len(c.pools) <= MAX_ASSIGNMENTS for c in candidates)
            ranking = rankings[key] = _Ranking(self, d, candidates, per_pool)
        return ranking

    def pool_source(self, d: Deployment) -> _PoolSource:
        """The places of every pool of the fleet that a shape of one engine fits when empty, tightest first, in
        buckets of one fit (`_PoolSource`): computed once per shape, then cut to each candidate set (teams' selectors
        make many sets of one shape). A fit is computed once per group of alike pools (`_pool_groups`): a pool of
        a group fits when it has the nodes the fit takes. Only the buckets a fill reaches are ever listed: most
        shapes place a few replicas on their tightest pools."""
        found = self._pool_sources.get(d.shape_id)
        if found is not None:
            return found
        placer, engine = self.placer, d.engines[0]
        fits: dict[tuple, tuple | None] = {}
        elsewhere_by_kinds: dict[frozenset, tuple[bool, ...]] = {}
        buckets: dict[tuple, list[tuple[int, list[tuple]]]] = {}

        def fit_on(kinds: frozenset, cluster: ClusterView, pool: PoolView) -> tuple | None:
            elsewhere = elsewhere_by_kinds.get(kinds)
            if elsewhere is None:
                elsewhere = elsewhere_by_kinds[kinds] = placer.claims_elsewhere(engine, cluster)
            alike = (pool.kind.uid, pool.problem, pool.class_name, elsewhere)
            fit = fits.get(alike, UNKNOWN)
            if fit is UNKNOWN:
                fit = fits[alike] = None if placer.pool_problem(engine, pool, elsewhere) else \
                    placer.empty_fit_key(engine, pool.kind)
            return fit

        for (kind, _, _), group in self._pool_groups().items():
            # one fit for the kind's pools on every cluster, unless the engine's fit reads the cluster's other pools
            if placer.reads_elsewhere(engine, kind):
                parts = list(group.by_kinds.items())
            else:  # any one of them answers for them all
                kinds, (cluster, pool, _) = next(iter(group.by_kinds.items()))
                parts = [(kinds, (cluster, pool, group.places))]
            for kinds, (cluster, pool, places) in parts:
                fit = fit_on(kinds, cluster, pool)
                if fit is not None:
                    buckets.setdefault(fit[0], []).append((fit[1], places))
        found = self._pool_sources[d.shape_id] = _PoolSource(sorted(buckets.items()))
        return found

    def _pool_groups(self) -> dict[tuple, _PoolGroup]:
        """The fleet's pools grouped by what an engine's fit on them reads: its kind, problem and class, then the
        kinds of its cluster's pools (which only some engines' fits read: Placer.reads_elsewhere)."""
        if self._groups is None:
            groups: dict[tuple, _PoolGroup] = {}
            for c in self.clusters:
                kinds = self.placer.cluster_kinds(c)
                for pool in c.pools:
                    group = groups.setdefault((pool.kind, pool.problem, pool.class_name), _PoolGroup())
                    place = (pool.nodes, c.name, pool.name, c)
                    group.places.append(place)
                    group.by_kinds.setdefault(kinds, (c, pool, []))[2].append(place)
            self._groups = groups
        return self._groups

    def _unselected(self, selector: dict[str, str]) -> dict[str, str]:
        """Why each cluster the selector does not select is not, by cluster name (deployments of a team that does
        not fit share their selector: each is told why for every cluster)."""
        key = tuple(sorted(selector.items()))
        found = self._unselected_by.get(key)
        if found is None:
            found = self._unselected_by[key] = {c.name: why for c in self.clusters
                                                if (why := _not_selected(c, selector)) is not None}
        return found

    def _reasons(self, d: Deployment) -> list[Reason]:
        """Why the deployment has no place on each cluster, summarised. The same for deployments of one shape, one
        candidate set and one cache while the candidates' ledgers stay as they were: the deployments of a team
        whose region is full are told once (at 10,000 x 2,000, this was a quarter of the plan)."""
        candidates = self._candidates(d)
        key = (d.shape_id, id(candidates), d.cache, tuple(self.state_id[c.name] for c in candidates))
        found = self._reasons_by.get(key)
        if found is None:
            if len(self._reasons_by) >= REASONS_KEPT:  # a ledger that lives for months (the portal's) keeps few
                self._reasons_by.clear()
            found = self._reasons_by[key] = self._reasons_now(d)
        return list(found)

    def _reasons_now(self, d: Deployment) -> list[Reason]:
        found: list[tuple[str, str, str]] = []  # (cluster or cluster/pool, why, detail)
        unselected = self._unselected(d.selector)
        outside_of = self._outside_of(d)
        for c in self.clusters:
            if (outside := outside_of.get(c.name)) is not None:
                found.append((c.name, outside, ""))
            elif (why := unselected.get(c.name)) is not None:
                found.append((c.name, f"not selected ({why})", ""))
            elif not c.ready:
                found.append((c.name, f"not ready ({c.not_ready})", ""))
            elif d.cache and not c.cache_storage_class:
                hint = ("set spec.cluster.existing.cache.storageClassName" if c.source == "Existing"
                        else f"this project provisions none on {c.source}")
                found.append((c.name, f"cannot stage ModelCache {d.cache} (no RWX storage class: {hint})", ""))
            elif blocking := untolerated(c.taints, d.tolerations, ("NoSchedule", "NoExecute")):
                found.append((c.name, f"taint {describe(blocking[0])} is not tolerated", ""))
            else:
                placement, detail = self._place(d, c)
                if placement is None:
                    found.extend(detail.located())
        if not self.clusters:
            return [Reason(Cause.NO_CLUSTERS, "the fleet has no InferenceCluster")]
        return [Reason(Cause.NO_PLACE, line) for line in summarise(found)]

    # ---- team budgets (fleet/team_policy.py) ----------------------------------------------------------------

    def _use(self, cluster: ClusterView, placement: ReplicaPlacement) -> Use:
        """`replica_use`, once per placement object (the placer hands out the same ones; each is kept with its use,
        so its id is not reused while the plan runs)."""
        found = self._uses.get(id(placement))
        if found is None or found[0] is not placement:
            found = self._uses[id(placement)] = (placement, replica_use(cluster, placement))
        return found[1]

    def _over_budget(self, d: Deployment, cluster: ClusterView, placement: ReplicaPlacement) -> Reason | None:
        return self.budget.refusal(d.namespace, cluster, self._use(cluster, placement)) if d.budgeted else None

    def _charge_budget(self, d: Deployment, cluster: ClusterView, placement: ReplicaPlacement, sign: int = 1) -> None:
        if d.budgeted:
            self.budget.charge(d.namespace, cluster, self._use(cluster, placement), sign)

    def start_budget(self, ledger: BudgetLedger) -> None:
        """Charge budgets from `ledger` from now on (a one-deployment write: what the team's others hold)."""
        self.budget = ledger
        self._no_budget.clear()  # what found no place was for the use before
        self._uses.clear()  # the portal's ledger lives for months: a write's placements are let go after it

    def _budget_kept(self, kept_by_deployment: dict) -> dict:
        """Charge kept replicas to their teams' GPU budgets in fill order (larger deployments, then by name, then by
        index); one that would take its team over a budget (the policy was lowered) is dropped with why. Its devices
        stay charged in this plan's ledger: it runs until it is removed."""
        if not any(d.budgeted for d in self.deployments):
            return kept_by_deployment
        out = {}
        for d in self.deployments:
            kept = []
            for r, placement in sorted(kept_by_deployment.get(d.key, []), key=lambda item: item[0].index):
                cluster = self.by_name[r.cluster]
                if (refused := self._over_budget(d, cluster, placement)) is not None:
                    self._drop(d, r, refused)
                    continue
                self._charge_budget(d, cluster, placement)
                kept.append((r, placement))
            out[d.key] = kept
        return out

    def _within_budget(self, d: Deployment, over: list[Reason]):
        """A ranking's test of a place: True when it keeps `d`'s team within its budgets; else False, with the
        budget's refusal added to `over`."""
        def accept(cluster: ClusterView, placement: ReplicaPlacement) -> bool:
            why = self._over_budget(d, cluster, placement)
            if why is not None:
                over.append(why)
            return why is None
        return accept

    def _with_pool_ranking(self, d: Deployment, candidates: list[ClusterView]) -> list[tuple[ClusterView, bool]]:
        """Each candidate, and whether the fill ranks its pools one by one (`_Ranking.per_pool`, decided per tier)."""
        return [(c, self._per_pool(d, group)) for group in self._by_tier(candidates) for c in group]

    @staticmethod
    def _per_pool(d: Deployment, clusters: list[ClusterView]) -> bool:
        return len(d.engines) == 1 and all(len(c.pools) <= MAX_ASSIGNMENTS for c in clusters)

    def _in_budget(self, d: Deployment, c: ClusterView, placement: ReplicaPlacement, nodes, per_pool: bool,
                   over: list[Reason]):
        """`placement` (the cluster's best) when it keeps the team within its budgets; else, where the fill ranks
        pools one by one, the cluster's best pool that does (a team over its H100 budget takes the A100 pool of the
        same cluster), as the ranking finds it; else (None, None), the budget's refusal added to `over`."""
        why = self._over_budget(d, c, placement)
        if why is None:
            return placement, nodes
        over.append(why)
        if not per_pool:
            return None, None
        options = []
        elsewhere = self.placer.claims_elsewhere(d.engines[0], c)
        for pool in c.pools:
            if self.placer.pool_problem(d.engines[0], pool, elsewhere) or \
                    self.placer.empty_fit_key(d.engines[0], pool.kind) is None:  # what the ranking's places skip
                continue
            engine, taken = self.placer.place_engine(d.engines[0], pool, self.states[c.name][pool.name])
            if engine is None:
                continue
            option, option_nodes = one_engine_replica(c.name, engine, pool.name, taken)
            if self._over_budget(d, c, option) is None:
                options.append((option.score.key(), pool.name, option, option_nodes))
        if not options:
            return None, None
        _, _, best, best_nodes = min(options, key=lambda o: (o[0], o[1]))
        return best, best_nodes

    def _best_in_budget(self, d: Deployment, candidates: list[ClusterView], load: Counter):
        """The fill's best place for `d` that keeps its team within its budgets (every candidate tried, lowest tier
        first: asked only when the best place by rank is over a budget), and the budget's refusal when none is. A
        search that found none is not made again in this plan for the namespace, shape and candidates: use only
        grows and free capacity only shrinks while the plan fills."""
        failed = (d.namespace, d.shape_id, id(candidates))
        if failed in self._no_budget:
            return None, self._no_budget[failed]
        over: list[Reason] = []
        for group in self._by_tier(candidates):
            best = None
            per_pool = self._per_pool(d, group)
            for c in group:
                placement, nodes = self._place(d, c)
                if placement is None:
                    continue
                placement, nodes = self._in_budget(d, c, placement, nodes, per_pool, over)
                if placement is None:
                    continue
                rank = (c.tier, load[c.name], placement.score.key(), c.name)
                if best is None or rank < best[0]:
                    best = (rank, c, placement, nodes)
            if best is not None:
                return best, None
        refused = over[0] if over else None
        if refused is not None:
            self._no_budget[failed] = refused
        return None, refused

    def _fill(self, kept_by_deployment) -> None:
        loads: dict[str, Counter] = {d.key: Counter() for d in self.deployments}
        indices: dict[str, dict[str, set[int]]] = {d.key: defaultdict(set) for d in self.deployments}
        need: dict[str, int] = {}
        for d in self.deployments:
            for r, placement in kept_by_deployment.get(d.key, []):
                loads[d.key][r.cluster] += 1
                indices[d.key][r.cluster].add(r.index)
                self.plan.replicas.append(PlacedReplica(d.namespace, d.name, r.index, r.name, r.cluster, placement,
                                                        self._backends(d, r.cluster, placement), "kept", d.engines))
                self._note(d, f"replica {r.name} kept on {r.cluster}#{r.index}")
            missing = d.md.spec.replicas - len(kept_by_deployment.get(d.key, []))
            if missing <= 0:
                continue
            if d.blocked:
                self.plan.unscheduled.append(Unscheduled(d.key, missing, (blocked(d.blocked),)))
                self._note(d, f"no new replica placed: {d.blocked}")
                continue
            need[d.key] = missing
        candidates = {d.key: self._candidates(d) for d in self.deployments if d.key in need}
        rankings: dict[tuple, _Ranking] = {}
        active = [d for d in self.deployments if d.key in need]
        explained: set[str] = set()
        while active:
            still = []
            for d in active:
                best = None
                tried = []
                refused: list[tuple[ClusterView, object]] = []  # candidates without room, for the explanation
                load = loads[d.key]
                over: list[Reason] = []  # budgets that refused a place with room, the first one first
                if self.explain:  # every candidate's rank, for the explanation
                    for c, per_pool in self._with_pool_ranking(d, candidates[d.key]):
                        placement, detail = self._place(d, c)
                        if placement is None:
                            refused.append((c, detail))
                            continue
                        if d.budgeted:
                            placement, detail = self._in_budget(d, c, placement, detail, per_pool, over)
                            if placement is None:
                                continue
                        rank = (c.tier, load[c.name], placement.score.key(), c.name)
                        if best is None or rank < best[0]:
                            best = (rank, c, placement, detail)
                        tried.append(rank)
                elif d.budgeted and (refusal := self.budget.refusal_anywhere(d.namespace, d.size)) is not None:
                    self.plan.unscheduled.append(Unscheduled(d.key, need[d.key], (refusal,)))
                    continue
                else:  # the lowest tier with room wins: one ranking per tier (one in a fleet of one tier)
                    accept = self._within_budget(d, over) if d.budgeted else None
                    for group in self._by_tier(candidates[d.key]):
                        best = self._ranking(d, group, rankings).best(load, accept)
                        if best is not None:
                            break
                if best is None and over:
                    self.plan.unscheduled.append(Unscheduled(d.key, need[d.key], (over[0],)))
                    self._note(d, f"{need[d.key]} replica(s) not placed: {over[0]}")
                    continue
                if best is None:
                    reasons = self._reasons(d)
                    self.plan.unscheduled.append(Unscheduled(d.key, need[d.key], tuple(reasons)))
                    self._note(d, f"{need[d.key]} replica(s) could not be placed")
                    continue
                _, cluster, placement, nodes = best
                ineligible = self._reasons(d) if self.explain and d.key not in explained else []
                self._apply(cluster.name, nodes)
                self._charge_budget(d, cluster, placement)
                used = indices[d.key][cluster.name]
                index = next(i for i in range(len(used) + 1) if i not in used)
                used.add(index)
                loads[d.key][cluster.name] += 1
                name = replica_name(d.name, cluster.name, index)
                self.plan.replicas.append(PlacedReplica(d.namespace, d.name, index, name, cluster.name, placement,
                                                        self._backends(d, cluster.name, placement), "new", d.engines))
                if self.explain:
                    self._explain_choice(d, name, cluster.name, best[0], sorted(tried))
                    self._explain_lower_tiers(d, name, cluster, refused)
                    explained.add(d.key)
                    for reason in ineligible:
                        self._note(d, f"not eligible: {reason}")
                need[d.key] -= 1
                if need[d.key] > 0:
                    still.append(d)
            active = still
        self._pool_sources.clear()  # the rankings hold the ones they took
        if self.memo:  # the next plan keeps the starting entries this one used, and lets go of the others
            self.placer.rankings = {r.key: self.placer.rankings[r.key] for r in rankings.values()}

    def _fold_back(self) -> None:
        """Phase 5 (the module's doc): deployments in fill order, each cluster letting at most its
        `fold_back_limit` replicas go in the whole plan. Nothing to do in a fleet of one tier."""
        if len({c.tier for c in self.clusters}) < 2:
            return
        short = {u.deployment for u in self.plan.unscheduled}
        by_deployment: dict[str, list[PlacedReplica]] = defaultdict(list)
        for r in self.plan.replicas:
            by_deployment[r.key].append(r)
        left: Counter[str] = Counter()
        for d in self.deployments:
            if d.key not in short:
                self._fold_back_one(d, by_deployment.get(d.key, []), left)

    def _fold_back_one(self, d: Deployment, replicas: list[PlacedReplica], left: Counter) -> None:
        """Move `d`'s kept replicas (`replicas`: all it has placed in this plan) down to lower tiers with room and
        headroom, highest tier first, then by cluster and index; `left`: replicas that left each cluster so far in
        this plan. The new replica is placed and charged before the old one is dropped (the old one's devices stay
        charged: it runs until its replacement does)."""
        if d.blocked or len(replicas) < d.md.spec.replicas:
            return
        candidates = self._candidates(d)
        if not candidates:
            return
        lowest = min(c.tier for c in candidates)
        movable = sorted((r for r in replicas if r.state == "kept" and self.by_name[r.cluster].tier > lowest),
                         key=lambda r: (-self.by_name[r.cluster].tier, r.cluster, r.index))
        load = Counter(r.cluster for r in replicas)
        used: dict[str, set[int]] = defaultdict(set)
        for r in replicas:
            used[r.cluster].add(r.index)
        for r in movable:
            source = self.by_name[r.cluster]
            if left[source.name] >= source.fold_back_limit:
                continue
            self._charge_budget(d, source, r.placement, -1)  # the old one's devices go back to the team with it
            target = self._fold_target(d, source.tier, candidates, load)
            if target is None:  # nor for any later replica: their tiers are no higher, the ledger no emptier
                self._charge_budget(d, source, r.placement)
                return
            cluster, placement = target
            self._charge_budget(d, cluster, placement)
            index = next(i for i in range(len(used[cluster.name]) + 1) if i not in used[cluster.name])
            used[cluster.name].add(index)
            load[cluster.name] += 1
            load[source.name] -= 1
            left[source.name] += 1
            name = replica_name(d.name, cluster.name, index)
            self.plan.replicas.append(PlacedReplica(d.namespace, d.name, index, name, cluster.name, placement,
                                                    self._backends(d, cluster.name, placement), "new", d.engines))
            self.plan.replicas.remove(r)
            reason = folded_back(name, cluster.name, cluster.tier, source.tier)
            self.plan.dropped.append(Dropped(d.key, r.name, r.cluster, r.index, reason, name))
            self._note(d, f"replica {r.name} ({r.cluster}#{r.index}) dropped: {reason}")

    def _fold_target(self, d: Deployment, below: int, candidates: list[ClusterView], load: Counter):
        """The best candidate of a tier below `below` (by the fill's rank) that takes one more replica of `d` and
        would still have room for another after it, with the replica charged there; None when none has. The room
        for another is the hysteresis: capacity within one replica of the boundary never folds a replica back."""
        fitting = []
        for c in candidates:
            if c.tier < below:
                placement, nodes = self._place(d, c)
                if placement is not None and self._over_budget(d, c, placement) is None:
                    fitting.append(((c.tier, load[c.name], placement.score.key(), c.name), c, placement, nodes))
        for _, c, placement, nodes in sorted(fitting, key=lambda f: f[0]):
            before = dict(self.states[c.name]), self.state_id[c.name]
            self._apply(c.name, nodes)
            if not FOLD_BACK_HEADROOM or self._place(d, c)[0] is not None:
                return c, placement
            self.states[c.name], self.state_id[c.name] = before
        return None

    def _explain_choice(self, d: Deployment, name: str, cluster: str, rank, tried) -> None:
        def fmt(r):
            tier, load, (mem, stranded, devices), cname = r
            # the rank, lowest first: the cluster's tier, this deployment's replicas already there (spread), the
            # device memory the replica claims, and what it would leave stranded (memory and devices no other
            # replica shape can use)
            return (f"{cname}, tier {tier} (score: {load} replica(s) of it already there, claims {mem / 2**30:.0f}Gi of "
                    f"device memory, leaves {stranded / 2**30:.0f}Gi and {devices} device(s) stranded)")
        others = [fmt(r) for r in tried if r != rank][:4]
        line = f"replica {name} placed on {fmt(rank)}"
        if others:
            line += "; next best: " + ", ".join(others)
        self._note(d, line)

    def _explain_lower_tiers(self, d: Deployment, name: str, cluster: ClusterView, refused: list) -> None:
        """Why a replica placed above its lowest candidate tier is not lower: each lower tier's candidates had no
        room (the placer's reasons, summarised as an unscheduled replica's are)."""
        below: dict[int, list] = defaultdict(list)
        for c, detail in refused:
            if c.tier < cluster.tier:
                below[c.tier].append((c, detail))
        for tier, refusing in sorted(below.items()):
            names = [c.name for c, _ in refusing]
            shown = ", ".join(names[:LISTED]) + (f", ... ({len(names)} clusters)" if len(names) > LISTED else "")
            why = summarise([found for _, detail in refusing for found in detail.located()])
            self._note(d, f"replica {name} not on tier {tier} ({shown}): no room" + (f": {'; '.join(why)}" if why else ""))

    # ---- one deployment at a time (fleet/incremental.py's FleetLedger) ------------------------------------
    # The ledger keeps each cluster's kept replicas itself and asks the scheduler to build a deployment, retain
    # its recorded replicas, charge one cluster from empty pools and place one deployment's missing replicas: the
    # same rules, in the same order, as a whole plan's phases.

    def build(self, md: ModelDeployment, caches: dict) -> Deployment:
        """The scheduler's view of one deployment (`caches`: the fleet's ModelCaches by (namespace, name))."""
        d = self._deployment(md, caches)
        d.source = md.model_dump_json() + policy_text(d.policy)
        return d

    def retain(self, d: Deployment) -> tuple[Kept, list[tuple[RecordedReplica, Reason]]]:
        """The recorded replicas of `d` that stay where they are (with their pins), and those dropped, with why."""
        return self._retain_one(d)

    def drop(self, d: Deployment, r: RecordedReplica, reason: Reason) -> None:
        """`r` is dropped from this plan, with why."""
        self._drop(d, r, reason)

    def drop_unfit(self, d: Deployment, r: RecordedReplica, rejection) -> None:
        """`r` was kept but no longer fits its cluster's charged ledger (`rejection`: what the placer said)."""
        self._drop(d, r, self._no_longer_fits(d, r, rejection))

    def hold_order(self, d: Deployment, r: RecordedReplica) -> tuple:
        """Where a kept replica is charged among its cluster's: unchanged shapes first, then deployment order."""
        return self._charge_order(d, r)

    def charge_from_empty(self, cluster: str, items: list) -> tuple[tuple, list[tuple]]:
        """Charge `cluster`'s kept replicas (`items`: (deployment, replica, pins), in hold order) from its empty
        pools; returns the charge's key (as the memo keeps it) and (placement or None, nodes or rejection) per item.
        Reads and fills the memo's charged ledgers: the ledger lets go of the old ones."""
        assert self.memo is not None
        self.states[cluster] = {p.name: PoolState(p.kind, p.nodes, p.empty_nodes())
                                for p in self.by_name[cluster].pools}
        self.state_id[cluster] = self._intern_state(cluster)
        key = self.charge_key(cluster, items)
        return key, self._charge_cluster(cluster, items, self.memo.charged, key)

    def place_one(self, d: Deployment, placed: list[tuple[RecordedReplica, ReplicaPlacement]]) -> None:
        """The fill for one deployment, into this scheduler's plan: its kept replicas (`placed`, charged), then each
        missing replica on the candidate of the lowest tier with room, then with the fewest replicas of the
        deployment, then the tightest fit, then the name; what finds no place is unscheduled, with why. Then its
        fold-back, as a whole plan's (`_fold_back_one`), with this write's own per-cluster limits."""
        load: Counter[str] = Counter()
        used: dict[str, set[int]] = defaultdict(set)
        for r, placement in placed:
            if (refused := self._over_budget(d, self.by_name[r.cluster], placement)) is not None:
                self._drop(d, r, refused)
                continue
            self._charge_budget(d, self.by_name[r.cluster], placement)
            load[r.cluster] += 1
            used[r.cluster].add(r.index)
            self.plan.replicas.append(PlacedReplica(d.namespace, d.name, r.index, r.name, r.cluster, placement,
                                                    self._backends(d, r.cluster, placement), "kept", d.engines))
        missing = d.md.spec.replicas - sum(load.values())
        if missing > 0 and d.blocked:
            self.plan.unscheduled.append(Unscheduled(d.key, missing, (blocked(d.blocked),)))
            return
        candidates = self._candidates(d)
        while missing > 0:
            best, refusal = self._best_in_budget(d, candidates, load)
            if best is None:
                reasons = (refusal,) if refusal is not None else tuple(self._reasons(d))
                self.plan.unscheduled.append(Unscheduled(d.key, missing, reasons))
                return
            _, cluster, placement, nodes = best
            self._apply(cluster.name, nodes)
            self._charge_budget(d, cluster, placement)
            index = next(i for i in range(len(used[cluster.name]) + 1) if i not in used[cluster.name])
            used[cluster.name].add(index)
            load[cluster.name] += 1
            self.plan.replicas.append(PlacedReplica(d.namespace, d.name, index, replica_name(d.name, cluster.name, index),
                                                    cluster.name, placement, self._backends(d, cluster.name, placement),
                                                    "new", d.engines))
            missing -= 1
        self._fold_back_one(d, [r for r in self.plan.replicas if r.key == d.key], Counter())

    def run(self) -> Plan:
        kept = self._retain()
        kept_by_deployment = self._budget_kept(self._charge_kept(kept))
        self._fill(kept_by_deployment)
        self._fold_back()
        # a Dynamo-stack cluster may serve a replica otherwise than its deployment says: say which
        other = defaultdict(list)
        for r in self.plan.replicas if self.explain else ():
            other[r.key].append(r)
        for d in self.deployments:
            for engine, backend, reason in d.backends:
                self._note(d, f"engine {engine}: {backend} ({reason})")
            for r in other.get(d.key, ()):
                if r.backends != d.backends:
                    self._note(d, f"replica {r.name} on {r.cluster}: {r.backends[0][1]} ({r.backends[0][2]})")
        self.plan.replicas.sort(key=lambda r: (r.key, r.cluster, r.index))
        self.plan.unscheduled.sort(key=lambda u: u.deployment)
        self.plan.dropped.sort(key=lambda x: (x.deployment, x.cluster, x.index, x.name))
        self.plan.stats = {**self.placer.stats, "cel_evaluations": self.placer.cel.evaluations}
        return self.plan


def schedule(fleet: Fleet, recorded: list[RecordedReplica] | None = None, explain: bool = False,
             cel: SelectorEvaluator | None = None, memo: PlanMemo | None = None) -> Plan:
    return Scheduler(fleet, recorded, cel, explain, memo).run()
