"""TeamPolicy GPU budgets: what a placed replica holds, and each team's use charged replica by replica in the
scheduler's order (fleet/team_policy.py says which policy governs a namespace; this module counts against it).

Devices are counted per (device class, product) at the replica's largest: pods already count copies at the
autoscaling maximum. A budget entry counts the kinds it names (every device when it names none), fleet-wide and,
when split, per cluster or tier.
"""

from __future__ import annotations

from collections import Counter, defaultdict
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from fleet.api.policy import GpuBudget, TeamPolicy
from fleet.plan import Cause, Reason
from fleet.team_policy import Policies

if TYPE_CHECKING:
    from fleet.inventory import ClusterView
    from fleet.placement import ReplicaPlacement

PRODUCT_ATTRIBUTE = "productName"

Kind = tuple[str, str]  # (device class, product): what a budget counts
Use = dict[Kind, int]  # devices held, by kind (a plain dict: a plan makes tens of thousands; a Counter costs 5x)


def replica_use(cluster: ClusterView, placement: ReplicaPlacement) -> Use:
    """Devices one placed replica holds at its largest, by (device class, product): pods x devices per pod of every
    member (pods already count copies, at the autoscaling maximum). Placement-only matches count too, under the
    device's class or, without one, its driver."""
    pools = {p.name: p for p in cluster.pools}
    out: Use = {}
    for engine in placement.engines:
        pool = pools.get(engine.pool)
        devices = pool.kind.devices if pool is not None else ()
        for member in engine.members:
            for _, device_class, count in member.devices:
                kind = (device_class, _product(devices, device_class))
                out[kind] = out.get(kind, 0) + member.pods * count
            for request, count in member.synthetic:
                found = next((d for d in devices if not d.claimable), None)
                cls = (found.device_class or found.facts.driver) if found else request
                kind = (cls, _product(devices, cls))
                out[kind] = out.get(kind, 0) + member.pods * count
    return out


def _product(devices, device_class: str) -> str:
    for d in devices:
        if (d.device_class or d.facts.driver) == device_class:
            for key, (_, value) in d.facts.attributes:
                if key.rsplit("/", 1)[-1] == PRODUCT_ATTRIBUTE:
                    return str(value)
    return ""


def _counts(budget: GpuBudget, kind: Kind) -> bool:
    cls, product = kind
    return (budget.deviceClassName in (None, cls)) and (budget.productName in (None, product))


def budget_name(budget: GpuBudget) -> str:
    if budget.productName:
        return f"{budget.productName} ({budget.deviceClassName or 'any class'})"
    return budget.deviceClassName or "devices of any class"


def proportional_caps(budget: GpuBudget, clusters: list[ClusterView]) -> dict[str, int]:
    """The budget split over clusters in proportion to each one's devices of its kind (largest remainder: the caps
    sum to the count); a cluster with none gets none."""
    have: dict[str, int] = {}
    for c in clusters:
        total = 0
        for pool in c.pools:
            for d in pool.kind.devices:
                if _counts(budget, (d.device_class or d.facts.driver, _product((d,), d.device_class or d.facts.driver))):
                    total += d.count * pool.nodes
        have[c.name] = total
    whole = sum(have.values())
    if whole == 0:
        return {c.name: 0 for c in clusters}
    exact = {name: budget.count * n / whole for name, n in have.items()}
    caps = {name: int(x) for name, x in exact.items()}
    left = budget.count - sum(caps.values())
    for name in sorted(exact, key=lambda n: (-(exact[n] - caps[n]), n))[:left]:
        caps[name] += 1
    return caps


@dataclass
class _Use:
    total: int = 0
    by_cluster: Counter[str] = field(default_factory=Counter)
    by_tier: Counter[str] = field(default_factory=Counter)


class BudgetLedger:
    """Each governed namespace's use of each of its GPU budgets, charged replica by replica in the scheduler's
    order: what is charged first keeps its devices, so a kept replica is never pushed out by a new one."""

    def __init__(self, policies: Policies, clusters: list[ClusterView]):
        self.policies = policies
        self.clusters = {c.name: c for c in clusters}
        self._caps: dict[tuple[str, int], dict[str, int]] = {}
        self._all = clusters
        self.use: dict[str, list[_Use]] = defaultdict(list)
        self._matching: dict[tuple[str, Kind], tuple[int, ...]] = {}  # (policy, kind) -> budgets that count it

    def _asked(self, policy: TeamPolicy, budgets: list[GpuBudget], use: Use) -> list[int]:
        """Devices of `use` each budget counts (a kind's budgets found once per policy: plans ask thousands of
        times)."""
        asked = [0] * len(budgets)
        for kind, n in use.items():
            key = (policy.name, kind)
            found = self._matching.get(key)
            if found is None:
                found = self._matching[key] = tuple(i for i, b in enumerate(budgets) if _counts(b, kind))
            for i in found:
                asked[i] += n
        return asked

    def _budgets(self, namespace: str) -> tuple[TeamPolicy | None, list[GpuBudget]]:
        policy = self.policies.for_namespace(namespace)
        return policy, (policy.spec.gpus if policy is not None else [])

    def _uses(self, namespace: str, n: int) -> list[_Use]:
        uses = self.use[namespace]
        while len(uses) < n:
            uses.append(_Use())
        return uses

    def refusal(self, namespace: str, cluster: ClusterView, use: Use) -> Reason | None:
        """Why a replica holding `use` on `cluster` would take the namespace over a budget (budget, use, request,
        naming the policy and field); None when it fits every budget."""
        policy, budgets = self._budgets(namespace)
        if policy is None or not budgets:
            return None
        uses = self._uses(namespace, len(budgets))
        for i, asked in enumerate(self._asked(policy, budgets, use)):
            if not asked:
                continue
            budget, held = budgets[i], uses[i]
            field_path = f"TeamPolicy {policy.name} spec.gpus[{i}]"
            if held.total + asked > budget.count:
                return Reason(Cause.OVER_BUDGET, (
                    f"over {field_path}: budget {budget.count} {budget_name(budget)}, in use {held.total}, "
                    f"this replica asks {asked}"))
            cap, where = self._cap(policy, i, budget, cluster)
            if cap is not None:
                key = cluster.name if where == "cluster" else str(cluster.tier)
                now = held.by_cluster[key] if where == "cluster" else held.by_tier[key]
                if now + asked > cap:
                    return Reason(Cause.OVER_BUDGET, (
                        f"over {field_path}.split on {where} {key}: budget {cap} {budget_name(budget)}, in use {now}, "
                        f"this replica asks {asked}"))
        return None

    def refusal_anywhere(self, namespace: str, devices: int) -> Reason | None:
        """Why a replica of `devices` devices (all of them, of whatever class) would take the namespace over a
        budget wherever it is placed: a budget that counts every device and is not split. Asked before the fill
        searches for a place, so a team at its budget costs no search."""
        policy, budgets = self._budgets(namespace)
        if policy is None:
            return None
        uses = self._uses(namespace, len(budgets))
        for i, budget in enumerate(budgets):
            if budget.deviceClassName is None and budget.productName is None and budget.split is None \
                    and devices and uses[i].total + devices > budget.count:
                return Reason(Cause.OVER_BUDGET, (
                    f"over TeamPolicy {policy.name} spec.gpus[{i}]: budget {budget.count} {budget_name(budget)}, "
                    f"in use {uses[i].total}, this replica asks {devices}"))
        return None

    def _cap(self, policy: TeamPolicy, i: int, budget: GpuBudget, cluster: ClusterView) -> tuple[int | None, str]:
        split = budget.split
        if split is None:
            return None, ""
        if split.proportional:
            key = (policy.name, i)
            if key not in self._caps:
                self._caps[key] = proportional_caps(budget, self._all)
            return self._caps[key].get(cluster.name, 0), "cluster"
        if split.clusters:
            return split.clusters.get(cluster.name, 0), "cluster"
        return split.tiers.get(str(cluster.tier), 0), "tier"

    def charge(self, namespace: str, cluster: ClusterView, use: Use, sign: int = 1) -> None:
        policy, budgets = self._budgets(namespace)
        if policy is None or not budgets:
            return
        uses = self._uses(namespace, len(budgets))
        for i, asked in enumerate(self._asked(policy, budgets, use)):
            asked *= sign
            if asked:
                uses[i].total += asked
                uses[i].by_cluster[cluster.name] += asked
                uses[i].by_tier[str(cluster.tier)] += asked


@dataclass(frozen=True)
class BudgetRow:
    namespace: str
    policy: str
    field: str  # spec.gpus[i]
    what: str
    budget: int
    used: int


def budget_rows(policies: Policies, clusters: list[ClusterView], replicas) -> list[BudgetRow]:
    """Each governed namespace's use of each budget by `replicas` (a plan's PlacedReplicas): the preview's table."""
    ledger = BudgetLedger(policies, clusters)
    by_name = {c.name: c for c in clusters}
    namespaces = set(policies.by_namespace)
    for r in replicas:
        namespaces.add(r.namespace)
        cluster = by_name.get(r.cluster)
        if cluster is not None:
            ledger.charge(r.namespace, cluster, replica_use(cluster, r.placement))
    rows = []
    for ns, policy in policies.governed(namespaces):
        uses = ledger.use.get(ns, [])
        for i, budget in enumerate(policy.spec.gpus):
            used = uses[i].total if i < len(uses) else 0
            rows.append(BudgetRow(ns, policy.name, f"spec.gpus[{i}]", budget_name(budget), budget.count, used))
    return rows
