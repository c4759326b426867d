"""One deployment placed against the fleet's ledger, without planning the fleet again.

The portal answers a write to one ModelDeployment inside the request. It keeps a `FleetLedger`: every
reservation charged to its cluster exactly as the scheduler's charge phase would charge it (the same
retain rules, the same order), cluster by cluster. A write takes the deployment's replicas off the clusters
they were on, retains and charges them again under the new spec, and fills what is missing against the
ledger, with the scheduler's own rules (lowest tier with room, then fewest replicas of the deployment, then
tightest fit, then name), then folds the deployment's replicas back to lower tiers with the scheduler's own
fold-back (`Scheduler.place_one`; each write counts `foldBack.maxPerPlan` afresh, where a whole plan counts it
across every deployment: the background replan is the authority).

That is the full plan's answer for the deployment whenever no other deployment competes for what the write
frees: the full plan fills the others first only when they are larger, and they could only take capacity
they failed to get before. tests/test_incremental_placement.py holds both to each other on random fleets,
and holds the ledger after any sequence of writes to a ledger built afresh from the same reservations. The
portal's background replan is still the authority: it plans the whole fleet and reconciles.
"""

from __future__ import annotations

from collections import defaultdict, deque
from typing import TYPE_CHECKING

from fleet.api.deployment import ModelDeployment
from fleet.memory import RecordedReplica
from fleet.plan import Plan
from fleet.scheduler import Deployment, Kept, PlanMemo, Scheduler, memo_state_limit
from fleet.budgets import BudgetLedger, replica_use

if TYPE_CHECKING:
    from fleet.validate import Fleet

LEDGER_STATES_PER_CLUSTER = 4  # ledger states a write may intern, per cluster, beyond those at the start


def ledger_state_limit(at_start: int, clusters: int) -> int:
    """Interned ledger states past which the ledger lets go of them: those it started with (a plan's worth, reused
    by every write) and a few per cluster for the writes since (past it, a write recomputes its places once)."""
    return min(at_start + LEDGER_STATES_PER_CLUSTER * clusters, memo_state_limit(clusters))


CHARGES_KEPT = 4  # charged ledgers the memo keeps per cluster: the current one and the few a write may return to


class FleetLedger:
    def __init__(self, fleet: Fleet, reserved: list[RecordedReplica], memo: PlanMemo | None = None):
        """`reserved`: every deployment's reservations (the last plan's replicas, as recorded)."""
        self._s = s = Scheduler(fleet, reserved, memo=memo or PlanMemo())
        self._caches = {(c.namespace, c.name): c for c in fleet.of("ModelCache")}
        self._built: dict[str, Deployment] = {d.key: d for d in s.deployments}
        self._items: dict[str, list[tuple]] = defaultdict(list)  # cluster -> [(order, d, r, pins)], in charge order
        self._results: dict[str, dict[tuple[str, str], tuple]] = {}  # cluster -> (deployment, replica) -> charged
        self._on: dict[str, set[str]] = defaultdict(set)  # deployment -> clusters its kept replicas are on
        # the memo's charged ledgers, newest last per cluster: a write adds one per cluster it touches, and the
        # oldest beyond CHARGES_KEPT is let go, so a portal's memory does not grow with its writes
        self._charges: dict[str, deque[tuple]] = defaultdict(lambda: deque(maxlen=CHARGES_KEPT))
        for d in s.deployments:
            kept, _ = s.retain(d)
            self._hold(d, kept)
        for cluster in list(self._items):
            self._charge(cluster)
        assert s.memo is not None  # what an earlier ledger or plan charged that this one does not hold is let go
        s.memo.charged = {key: s.memo.charged[key] for recent in self._charges.values() for key in recent}
        self._states_limit = ledger_state_limit(len(s.memo.state_ids), len(s.clusters))

    # ---- what the ledger holds ---------------------------------------------------------------------

    def states(self) -> dict[str, tuple]:
        """Each cluster's charged pools, comparable between ledgers."""
        return {name: tuple((pool, state.key()) for pool, state in pools.items())
                for name, pools in sorted(self._s.states.items())}

    def reserved(self, key: str) -> list[RecordedReplica]:
        return list(self._s.recorded.get(key, ()))

    # ---- writes -------------------------------------------------------------------------------------

    def place(self, md: ModelDeployment) -> Plan:
        """Place one created or changed deployment; its reservations become the result's replicas. The plan holds
        this deployment's replicas (kept and new), what could not be placed and what was dropped, with reasons."""
        s = self._s
        assert s.memo is not None
        if len(s.memo.state_ids) > self._states_limit:  # the ledger lives as long as the portal
            s.forget_states()
            self._states_limit = ledger_state_limit(len(s.memo.state_ids), len(s.clusters))
        s.plan = Plan()
        d = s.build(md, self._caches)
        self._built[d.key] = d
        touched = self._release(d.key)
        kept, drops = s.retain(d)
        for r, reason in drops:
            s.drop(d, r, reason)
        touched |= self._hold(d, kept)
        for cluster in touched:
            self._charge(cluster)
        placed = []
        for r, _ in kept:
            placement, detail = self._results[r.cluster][(d.key, r.name)]
            if placement is None:
                s.drop_unfit(d, r, detail)
            else:
                placed.append((r, placement))
        s.start_budget(self._budget_of_others(d))
        s.place_one(d, placed)
        self.reserve(d.key, [r.recorded() for r in s.plan.replicas])
        plan, s.plan = s.plan, Plan()
        plan.replicas.sort(key=lambda r: (r.cluster, r.index))
        plan.dropped.sort(key=lambda x: (x.cluster, x.index, x.name))
        return plan

    def remove(self, key: str) -> None:
        """A deleted deployment: its reservations are let go."""
        for cluster in self._release(key):
            self._charge(cluster)
        self._s.recorded.pop(key, None)
        self._built.pop(key, None)

    def reserve(self, key: str, replicas: list[RecordedReplica]) -> None:
        """The deployment's reservations are now `replicas` (a placement, or the full plan reconciling it); a
        deployment the ledger does not hold (deleted since) holds nothing."""
        s = self._s
        d = self._built.get(key)
        if d is None:
            self.remove(key)
            return
        touched = self._release(key)
        s.recorded[key] = sorted(replicas, key=lambda r: (r.name, r.cluster, r.index))
        kept, _ = s.retain(d)
        touched |= self._hold(d, kept)
        for cluster in touched:
            self._charge(cluster)

    def saved(self, key: str) -> tuple:
        """What `restore` needs to take back a write to the deployment (its request failed after placing it)."""
        return self._built.get(key), self.reserved(key)

    def restore(self, key: str, saved: tuple) -> None:
        built, reserved = saved
        if built is None:
            self.remove(key)
            return
        self._built[key] = built
        self.reserve(key, reserved)

    # ---- how ---------------------------------------------------------------------------------------

    def _budget_of_others(self, d: Deployment) -> BudgetLedger:
        """The team budgets charged with what the namespace's other deployments hold (their reservations), so one
        write is held to its team's budget as the whole plan holds it (deployments in the whole plan's order are
        charged first there: the background replan is the authority)."""
        s = self._s
        ledger = BudgetLedger(s.policies, s.clusters)
        if d.budgeted:
            for cluster, results in self._results.items():
                view = s.by_name[cluster]
                for (key, _), (placement, _) in results.items():
                    if placement is not None and key != d.key and key.split("/", 1)[0] == d.namespace:
                        ledger.charge(d.namespace, view, replica_use(view, placement))
        return ledger


    def _release(self, key: str) -> set[str]:
        clusters = self._on.pop(key, set())
        for cluster in clusters:
            self._items[cluster] = [item for item in self._items[cluster] if item[1].key != key]
        return clusters

    def _hold(self, d: Deployment, kept: Kept) -> set[str]:
        touched = set()
        for r, pins in kept:
            self._items[r.cluster].append((self._s.hold_order(d, r), d, r, pins))
            touched.add(r.cluster)
        for cluster in touched:
            self._items[cluster].sort(key=lambda item: item[0])
        self._on[d.key] |= touched
        return touched

    def _charge(self, cluster: str) -> None:
        """Charge the cluster's kept replicas from empty pools, in order (from the memo when it saw them before)."""
        memo = self._s.memo
        assert memo is not None
        items = [item[1:] for item in self._items[cluster]]
        key, results = self._s.charge_from_empty(cluster, items)
        recent = self._charges[cluster]
        if key in recent:
            recent.remove(key)
        elif len(recent) == recent.maxlen:
            memo.charged.pop(recent[0], None)
        recent.append(key)
        self._results[cluster] = {(d.key, r.name): result for (d, r, _), result in zip(items, results)}
