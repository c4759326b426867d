"""Placing one replica on one cluster: each engine as a gang on one pool, pods onto nodes.

- Engine on pool: every member must match the pool's devices, at least one member must
  claim a DRA device there, and a member that claims on another pool of the cluster must
  not be stranded here on synthetic devices only. Pods are then placed one at a time on
  the best-fitting node (tightest score), largest members first; members that claim
  nothing cost nothing and ride along. The placement's score, which ranks pools and
  clusters, is the engine's fit on the pool when empty: where a replica goes never
  depends on where other deployments went, only whether it still fits.
- Engines to pools: an exact search over the (few) engines and pools of the cluster
  that finds every feasible assignment (up to a bound) and keeps the tightest, ties
  broken by pool names. Engines are taken by name, so written order does not matter.

Every result is cached on (shape, pool kinds, pool states): equal clusters in equal
states are computed once.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from typing import Any

from fleet.backends import NVIDIA_DRIVER
from fleet.device_selectors import SelectorEvaluator
from fleet.inventory import ClusterView, PoolKind, PoolView
from fleet.ledger import ZERO, PoolState, Score, pod_score
from fleet.matching import MemberMatch, assign, claims, demand, match_member
from fleet.shapes import EngineShape, MemberShape

EMPTY_PROBE = ""  # the name of the pool an engine's fit on empty nodes is measured on (real pools have names)
MAX_ASSIGNMENTS = 512  # complete engine->pool assignments compared per replica and cluster
UNKNOWN: Any = object()  # a cache's "not computed yet" (None is a computed answer)


@dataclass(frozen=True)
class MemberPlacement:
    role: str
    pods: int  # pods placed: pods per copy x copies
    devices: tuple[tuple[str, str, int], ...]  # claimed (DRA) requests: (request, deviceClassName, count per pod)
    synthetic: tuple[tuple[str, int], ...] = ()  # placement-only matches: (request, count per pod)


@dataclass(frozen=True)
class EnginePlacement:
    engine: str
    pool: str
    members: tuple[MemberPlacement, ...]  # in the engine's written member order
    score: Score


@dataclass(frozen=True)
class ReplicaPlacement:
    cluster: str
    engines: tuple[EnginePlacement, ...]  # in written engine order
    score: Score


@dataclass
class Rejection:
    """Why a replica does not fit on a cluster: one reason per pool (or for the cluster: pool ""), for people."""

    cluster: str
    # (pool, why, detail): `why` is the same wherever the same thing is missing, `detail` is this pool's state
    reasons: list[tuple[str, str, str]] = field(default_factory=list)

    def located(self) -> list[tuple[str, str, str]]:
        """(cluster or cluster/pool, why, detail) per reason."""
        return [(f"{self.cluster}/{pool}" if pool else self.cluster, why, detail) for pool, why, detail in self.reasons]

    @property
    def lines(self) -> list[str]:
        return [f"{where}: {why}" + (f" ({detail})" if detail else "") for where, why, detail in self.located()]


class Placer:
    """Placement with caches that live for one plan."""

    def __init__(self, cel: SelectorEvaluator):
        self.cel = cel
        self._matches: dict[tuple[int, int], MemberMatch] = {}  # (member, pool kind) by uid
        self._choices: dict[tuple, tuple | None] = {}  # (member, kind, free vector) -> its pod's choice there
        self._members: dict[tuple, tuple] = {}  # (engine, kind) -> its members as placed (`_members_on`)
        self._engines: dict[tuple, tuple] = {}
        self._replicas: dict[tuple, tuple] = {}
        self._static: dict[tuple, tuple] = {}  # (engines, pool layout, pinned) -> candidate pools, static reasons
        self._layouts: dict[str, int] = {}  # cluster -> its pools' names, kinds and problems, numbered
        self._layout_ids: dict[tuple, int] = {}
        self._kinds: dict[str, frozenset[PoolKind]] = {}  # cluster -> its pools' kinds
        self._empty: dict[tuple, tuple[Score, int] | None] = {}  # (engine, pool kind) -> its fit on empty nodes
        self._problems: dict[tuple, str | None] = {}  # (engine, pool but its name, claims elsewhere) -> problem
        self._elsewhere: dict[tuple, tuple[bool, ...]] = {}  # (engine, the cluster's pool kinds) -> per member
        self._reads_elsewhere: dict[tuple[int, int], bool] = {}  # (engine, pool kind) by uid -> see reads_elsewhere
        self._empty_options: dict[tuple, tuple] = {}  # (engines, pool layout) -> see _empty_options_for
        # the scheduler's rankings as they start, per (engines, per pool?, candidate clusters): fleet/scheduler.py
        self.rankings: dict[tuple, Any] = {}
        self.stats = {"engine_evaluations": 0, "replica_evaluations": 0}

    def forget_states(self) -> None:
        """Let go of what was computed for particular ledger states (pool states, interned state ids); what holds
        for shapes and pool kinds stays. A long-lived memo calls this when it has seen too many states."""
        self._choices.clear()
        self._engines.clear()
        self._replicas.clear()

    # ---- static matching -------------------------------------------------------------

    def match(self, member: MemberShape, kind: PoolKind) -> MemberMatch:
        key = (member.uid, kind.uid)
        found = self._matches.get(key)
        if found is None:
            found = self._matches[key] = match_member(member, kind, self.cel)
        return found

    def member_claims(self, member: MemberShape, kind: PoolKind) -> bool:
        m = self.match(member, kind)
        return m.fits and claims(member, kind, m.node)

    def static_problem(self, engine: EngineShape, pool: PoolView, claim_elsewhere: tuple[bool, ...]) -> str | None:
        """Why the engine can never run on this pool, capacity aside; None if it can."""
        if pool.problem:
            return pool.problem
        if not pool.kind.devices:
            return "the pool publishes no devices"
        claiming = False
        for i, member in enumerate(engine.members):
            m = self.match(member, pool.kind)
            if not m.fits:
                return f"engine {engine.name}, {member.role.lower()}: {m.reason}"
            if claims(member, pool.kind, m.node):
                claiming = True
            elif member.requests and claim_elsewhere[i]:
                return (f"engine {engine.name}, {member.role.lower()}: matches only placement-only devices here, "
                        "but claims GPUs on another pool")
        if not claiming:
            return f"engine {engine.name}: no member claims a DRA device on this pool"
        if engine.needs_nvlink_domain and not pool.kind.nvlink_domain:
            return (f"engine {engine.name} is packed into one NVLink domain (NVLinkDomain), but class "
                    f"{pool.class_name or '?'} of this pool declares none (spec.topology.nvlinkDomainLabel)")
        if engine.needs_nvidia:
            drivers = sorted({pool.kind.devices[e].facts.driver for m in engine.members
                              for e in (self.match(m, pool.kind).empty_node or ()) if pool.kind.devices[e].claimable})
            if any(d != NVIDIA_DRIVER for d in drivers):
                return (f"engine {engine.name} is served by Dynamo, which needs NVIDIA devices ({NVIDIA_DRIVER}); "
                        f"this pool's are {', '.join(drivers)}")
        return None

    # ---- one engine on one pool -----------------------------------------------------------

    def _pod_choice(self, member: MemberShape, kind: PoolKind, vector: tuple[int, ...]) -> tuple | None:
        """(score key, devices taken, score) of one pod of the member on a node with `vector` free, or None when it
        does not fit there: what a pod's node is chosen by, the same each time the node is seen."""
        key = (member.uid, kind.uid, vector)
        found = self._choices.get(key, UNKNOWN)
        if found is UNKNOWN:
            a = assign(member, self.match(member, kind).candidates, vector)
            if a is None:
                found = None
            else:
                used = demand(member, kind, a)
                score = pod_score(kind, vector, used)
                found = (score.key(), used, score)
            self._choices[key] = found
        return found

    def _members_on(self, engine: EngineShape, kind: PoolKind) -> tuple:
        """Per member, in the order they are placed (the most devices per pod first, then written order): (its
        index, its match, its claimed and placement-only requests, whether it claims a device). What placing the
        engine on a pool of the kind reads before its nodes."""
        key = (engine.uid, kind.uid)
        found = self._members.get(key)
        if found is None:
            rows = []
            for i, member in enumerate(engine.members):
                m = self.match(member, kind)
                dra = tuple((r.name, kind.devices[e].device_class or "", r.count)
                            for r, e in zip(member.requests, m.node) if kind.devices[e].claimable)
                synthetic = tuple((r.name, r.count) for r, e in zip(member.requests, m.node)
                                  if not kind.devices[e].claimable)
                rows.append((-sum(demand(member, kind, m.node)), i, m, dra, synthetic, claims(member, kind, m.node)))
            found = self._members[key] = tuple(row[1:] for row in sorted(rows, key=lambda row: row[:2]))
        return found

    def place_engine(self, engine: EngineShape, pool: PoolView, state: PoolState):
        """(EnginePlacement, new state nodes) or (None, reason). The given state is not changed.

        Computed once per engine and pool state (the state holds the pool's kind): pools of one kind in one state,
        whatever their names, place an engine alike (a third of fleet_gen's evaluations were such repeats), and
        the answer is said of this pool."""
        key = (engine.uid, state.key(), pool.name == EMPTY_PROBE)
        cached = self._engines.get(key)
        if cached is not None:
            placement = cached[0]
            if placement is not None and placement.pool != pool.name:
                return EnginePlacement(placement.engine, pool.name, placement.members, placement.score), cached[1]
            return cached
        self.stats["engine_evaluations"] += 1
        kind = pool.kind
        trial = state.copy()
        total = ZERO
        placed: dict[int, MemberPlacement] = {}
        result: tuple[EnginePlacement | None, Any] | None = None
        choice = self._pod_choice
        for i, m, dra, synthetic, claiming in self._members_on(engine, kind):
            member = engine.members[i]
            pods = member.pods * engine.copies
            if not claiming:
                placed[i] = MemberPlacement(member.role, pods, (), synthetic)
                continue
            for n in range(pods):
                best = None  # (score key, vector, devices taken, score): the tightest node, then the lowest vector
                for vector in trial.vectors():
                    found = choice(member, kind, vector)
                    if found is not None and (best is None or (found[0], vector) < (best[0], best[1])):
                        best = (found[0], vector, found[1], found[2])
                if best is None:
                    need = ", ".join(f"{c} {kind.devices[e].name}" for c, e in
                                     _per_entry(member, kind, m.node))
                    result = (None, (f"engine {engine.name} needs {pods} {member.role.lower()} pod(s) with {need} "
                                     f"on one node each; {n} fit in the free capacity", _free_text(state)))
                    break
                trial.take(best[1], best[2])
                total = total + best[3]
            if result is not None:
                break
            placed[i] = MemberPlacement(member.role, pods, dra, synthetic)
        if result is None:
            members = tuple(placed[i] for i in range(len(engine.members)))
            result = (EnginePlacement(engine.name, pool.name, members, self._static_score(engine, pool, state, total)),
                      trial.nodes)
        self._engines[key] = result
        return result

    def _static_score(self, engine: EngineShape, pool: PoolView, state: PoolState, total: Score) -> Score:
        """The score that ranks places: the engine's fit on the pool when empty. Nodes are still chosen tightest
        first on the ledger as it is, but which cluster and pool a replica goes to must not depend on where other
        deployments' replicas went: then adding a replica moves no other replica unless it takes the capacity that
        replica needed (docs/scheduling.md, "Stability")."""
        if pool.name == EMPTY_PROBE:  # this is the fit on empty nodes being measured
            return total
        fit = self._empty_fit(engine, pool.kind)
        return fit[0] if fit is not None else total

    def _empty_fit(self, engine: EngineShape, kind: PoolKind) -> tuple[Score, int] | None:
        """(score, nodes it takes) of the engine on empty nodes of this kind, None if no number of nodes fits it.
        The same on every pool of the kind with at least that many nodes: pods go tightest first either way."""
        key = (engine.uid, kind.uid)
        found = self._empty.get(key, UNKNOWN)
        if found is UNKNOWN:
            pods = sum(m.pods for m in engine.members) * engine.copies
            empty = PoolState(kind, max(pods, 1))
            placement, nodes = self.place_engine(engine, PoolView("", EMPTY_PROBE, max(pods, 1), kind), empty)
            found = self._empty[key] = None if placement is None else (
                placement.score, sum(n for v, n in nodes.items() if v != kind.full))
        return found

    def empty_fit_key(self, engine: EngineShape, kind: PoolKind) -> tuple[tuple, int] | None:
        """`_empty_fit` with the score as its key: (score key, nodes it takes) on empty nodes of the kind, what
        ranks a pool of the kind that has those nodes (Scheduler.pool_entries)."""
        fit = self._empty_fit(engine, kind)
        return (fit[0].key(), fit[1]) if fit is not None else None

    def empty_replica_score(self, engines: tuple[EngineShape, ...], cluster: ClusterView) -> tuple | None:
        """A lower bound of the replica's score key on the cluster as it is, or None if it never fits there. A
        placement's score is the sum of its engines' fits on their pools when empty, so the bound is each engine's
        best pool's, taken alone (its best assignment there may be taken, or engines may not fit together)."""
        key = (tuple(e.uid for e in engines), self._layout(cluster))
        options = self._empty_options.get(key)
        if options is None:
            options = self._empty_options[key] = self._empty_options_for(engines, cluster)
        total = ZERO
        pools = cluster.pools
        for fits in options:
            for score, nodes, i in fits:  # the tightest fit the pool has the nodes for
                if pools[i].nodes >= nodes:
                    total = total + score
                    break
            else:
                return None
        return total.key()

    def _empty_options_for(self, engines: tuple[EngineShape, ...], cluster: ClusterView) -> tuple:
        """Per engine, its fits on the candidate pools of clusters of this layout, tightest first: (score, nodes the
        fit takes, the pool's index in the cluster's pools). What `empty_replica_score` reads besides the pools'
        node counts, which differ between clusters of one layout."""
        pools = {p.name: (i, p.kind) for i, p in enumerate(cluster.pools)}
        options = []
        for engine, names in self.candidate_pools(engines, cluster).items():
            shape = self._engine(engines, engine)
            fits = [(fit[0], fit[1], pools[n][0]) for n in names
                    if (fit := self._empty_fit(shape, pools[n][1])) is not None]
            options.append(tuple(sorted(fits, key=lambda fit: fit[0].key())))
        return tuple(options)

    @staticmethod
    def _engine(engines: tuple[EngineShape, ...], name: str) -> EngineShape:
        return next(e for e in engines if e.name == name)

    # ---- one replica on one cluster --------------------------------------------------------

    def place_replica(self, engines: tuple[EngineShape, ...], cluster: ClusterView, states: dict[str, PoolState],
                      pinned: dict[str, str] | None = None, key: tuple | None = None):
        """(ReplicaPlacement, {pool: new nodes}) or (None, Rejection).

        `pinned` fixes engines to pools (a kept replica stays on its pools). `key`, when
        given, must identify (engines, the cluster's pools and their states, pinned): the
        scheduler passes small interned integers so the hot loop hashes nothing deep.
        """
        if key is None:
            key = (engines, tuple((p.name, states[p.name].key()) for p in cluster.pools),
                   tuple(sorted((pinned or {}).items())))
        cached = self._replicas.get(key)
        if cached is not None:  # computed for a cluster in the same state: the answer, said of this cluster
            return _said_of(cached, cluster.name)
        pools = {p.name: p for p in cluster.pools}
        self.stats["replica_evaluations"] += 1
        candidates, reasons = self._static_for(engines, cluster, pinned)
        rejection = Rejection(cluster.name, list(reasons))
        result: tuple[ReplicaPlacement | None, Any]
        if any(not names for names in candidates.values()):
            result = (None, rejection)
            self._replicas[key] = result
            return result

        if len(engines) == 1:
            result = self._place_one_engine(engines[0], cluster, pools, states, candidates, rejection)
            self._replicas[key] = result
            return result
        ordered = sorted(engines, key=lambda e: e.name)
        best: tuple | None = None
        explored = 0
        capacity_lines: dict[str, tuple[str, str, str]] = {}

        def search(k: int, trial: dict[str, PoolState], chosen: list[EnginePlacement], score: Score):
            nonlocal best, explored
            if explored >= MAX_ASSIGNMENTS:
                return
            if k == len(ordered):
                explored += 1
                rank = (score.key(), tuple(p.pool for p in chosen))
                if best is None or rank < best[0]:
                    best = (rank, list(chosen), {name: s.nodes for name, s in trial.items()})
                return
            engine = ordered[k]
            for name in candidates[engine.name]:
                placement, nodes = self.place_engine(engine, pools[name], trial[name])
                if placement is None:
                    capacity_lines.setdefault(name + engine.name, (name, *nodes))
                    continue
                before = trial[name]
                trial[name] = PoolState(before.kind, 0, nodes)
                chosen.append(placement)
                search(k + 1, trial, chosen, score + placement.score)
                chosen.pop()
                trial[name] = before

        search(0, dict(states), [], ZERO)
        if best is None:
            rejection.reasons.extend(capacity_lines.values())
            if not capacity_lines:  # pragma: no cover - every failure records a line
                rejection.reasons.append(("", "engines do not fit together", ""))
            elif len(ordered) > 1 and all(self._fits_alone(e, cluster, states, candidates) for e in ordered):
                rejection.reasons.append(("", "each engine fits alone, but not all together", ""))
            result = (None, rejection)
        else:
            _, chosen, nodes = best
            by_name = {p.engine: p for p in chosen}
            engines_out = tuple(by_name[e.name] for e in engines)
            total = ZERO
            for p in engines_out:
                total = total + p.score
            touched = {p.pool for p in engines_out}
            result = (ReplicaPlacement(cluster.name, engines_out, total), {n: nodes[n] for n in touched})
        self._replicas[key] = result
        return result

    def _place_one_engine(self, engine: EngineShape, cluster: ClusterView, pools: dict[str, PoolView],
                          states: dict[str, PoolState], candidates: dict[str, list[str]], rejection: Rejection):
        """What the search gives for one engine (most shapes), without its bookkeeping: the tightest of the first
        MAX_ASSIGNMENTS pools it fits, then the pool name; else a capacity line per candidate pool."""
        best: tuple | None = None
        fitted = 0
        for name in candidates[engine.name]:
            placement, nodes = self.place_engine(engine, pools[name], states[name])
            if placement is None:
                rejection.reasons.append((name, *nodes))
                continue
            if fitted < MAX_ASSIGNMENTS and (best is None or (placement.score.key(), name) < best[0]):
                best = ((placement.score.key(), name), placement, nodes)
            fitted += 1
        if best is None:
            return None, rejection
        (_, pool), placement, nodes = best
        return one_engine_replica(cluster.name, placement, pool, nodes)

    def candidate_pools(self, engines: tuple[EngineShape, ...], cluster: ClusterView) -> dict[str, list[str]]:
        """Per engine, the pools of the cluster it could ever run on, capacity aside, in name order."""
        return self._static_for(engines, cluster, None)[0]

    def _static_for(self, engines: tuple[EngineShape, ...], cluster: ClusterView, pinned: dict[str, str] | None):
        key = (tuple(e.uid for e in engines), self._layout(cluster), tuple(sorted((pinned or {}).items())))
        static = self._static.get(key)
        if static is None:
            static = self._static[key] = self._static_candidates(engines, cluster, pinned)
        return static

    def _layout(self, cluster: ClusterView) -> int:
        """The cluster's pools without its name (what static matching depends on, shared by alike clusters), as a
        number: a key of names, kinds and problems was hashed again on every lookup."""
        layout = self._layouts.get(cluster.name)
        if layout is None:
            pools = tuple((p.name, p.kind.uid, p.problem) for p in cluster.pools)
            layout = self._layouts[cluster.name] = self._layout_ids.setdefault(pools, len(self._layout_ids))
        return layout

    def _static_candidates(self, engines: tuple[EngineShape, ...], cluster: ClusterView,
                           pinned: dict[str, str] | None) -> tuple[dict[str, list[str]], tuple[tuple[str, str, str], ...]]:
        """Per engine, the pools it could ever run on (capacity aside), and why each other pool cannot host it."""
        pools = {p.name: p for p in cluster.pools}
        reasons: list[tuple[str, str, str]] = []
        candidates: dict[str, list[str]] = {}
        for engine in sorted(engines, key=lambda e: e.name):
            elsewhere = self.claims_elsewhere(engine, cluster)
            names = [pinned[engine.name]] if pinned and engine.name in pinned else sorted(pools)
            ok = []
            for name in names:
                pool = pools.get(name)
                if pool is None:
                    reasons.append((name, "pool no longer exists", ""))
                    continue
                problem = self.pool_problem(engine, pool, elsewhere)
                if problem:
                    reasons.append((name, problem, ""))
                else:
                    ok.append(name)
            candidates[engine.name] = ok
        return candidates, tuple(reasons)

    def cluster_kinds(self, cluster: ClusterView) -> frozenset[PoolKind]:
        """The kinds of the cluster's pools (one object per cluster: a cluster's pools do not change in a plan)."""
        kinds = self._kinds.get(cluster.name)
        if kinds is None:
            kinds = self._kinds[cluster.name] = frozenset(p.kind for p in cluster.pools)
        return kinds

    def claims_elsewhere(self, engine: EngineShape, cluster: ClusterView) -> tuple[bool, ...]:
        """Per member, whether it claims a DRA device on some pool of the cluster (any pool, any order)."""
        kinds = self.cluster_kinds(cluster)
        elsewhere = self._elsewhere.get((engine.uid, kinds))
        if elsewhere is None:
            elsewhere = self._elsewhere[engine.uid, kinds] = tuple(any(self.member_claims(m, k) for k in kinds)
                                                               for m in engine.members)
        return elsewhere

    def reads_elsewhere(self, engine: EngineShape, kind: PoolKind) -> bool:
        """Whether the engine's `static_problem` on a pool of this kind can depend on the other pools of its cluster
        (`claims_elsewhere`): only through a member that matches here, claims no device here and has requests.
        When it cannot, the answer is the same for the kind's pools on every cluster."""
        key = (engine.uid, kind.uid)
        found = self._reads_elsewhere.get(key)
        if found is None:
            found = self._reads_elsewhere[key] = any(
                member.requests and (m := self.match(member, kind)).fits and not claims(member, kind, m.node)
                for member in engine.members)
        return found

    def pool_problem(self, engine: EngineShape, pool: PoolView, elsewhere: tuple[bool, ...]) -> str | None:
        """`static_problem`, cached on what it reads (the pool but its name and cluster)."""
        key = (engine.uid, pool.kind.uid, pool.problem, pool.class_name, elsewhere)
        found = self._problems.get(key, UNKNOWN)  # one lookup: the shapes' hash is a Python call
        if found is UNKNOWN:
            found = self._problems[key] = self.static_problem(engine, pool, elsewhere)
        return found

    def _fits_alone(self, engine, cluster, states, candidates) -> bool:
        pools = {p.name: p for p in cluster.pools}
        return any(self.place_engine(engine, pools[n], states[n])[0] is not None for n in candidates[engine.name])


def one_engine_replica(cluster: str, placement: EnginePlacement, pool: str, nodes) -> tuple[ReplicaPlacement, dict]:
    """A replica of one engine placed on `pool`: (ReplicaPlacement, {pool: new nodes}), as `place_replica` gives."""
    return ReplicaPlacement(cluster, (placement,), ZERO + placement.score), {pool: nodes}


def _said_of(result: tuple, cluster: str) -> tuple:
    """A cached placement or rejection, naming `cluster` (clusters whose pools are in the same state share it)."""
    answer, detail = result
    if answer is not None:
        return (answer if answer.cluster == cluster else replace(answer, cluster=cluster)), detail
    return None, (detail if detail.cluster == cluster else replace(detail, cluster=cluster))


def _per_entry(member: MemberShape, kind: PoolKind, assignment: tuple[int, ...]) -> list[tuple[int, int]]:
    used = demand(member, kind, assignment)
    return [(c, e) for e, c in enumerate(used) if c]


def _free_text(state: PoolState) -> str:
    free = state.free_devices()
    nodes = sum(state.nodes.values())
    if not nodes:
        return "the pool has 0 nodes"
    parts = ", ".join(f"{n} {name}" for name, n in free.items())
    return f"{nodes} node(s), {state.idle_nodes()} idle; free: {parts}"
