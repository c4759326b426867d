"""What a TeamPolicy allows: the one place every road asks (pure: no Pulumi, no I/O).

- Residency: which clusters a namespace's replicas, caches and routes may use, failing closed (a cluster without
  a label the selector names is never allowed).
- External origins: which ModelEndpoint origins a namespace may name.
- GPU budgets: devices per (device class, product), counted at each replica's autoscaling maximum, fleet-wide
  and split per cluster or tier; `BudgetLedger` charges replicas in the scheduler's order and says why the next
  one would not fit.
- Token budgets: the front door's per-team and per-service limits.

A namespace is governed by the TeamPolicy named after it, else by the one with `spec.defaultForNamespaces`, else
by none (no limit: the fleet without policies plans exactly as before).
"""

from __future__ import annotations

from collections import Counter, defaultdict
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Iterable
from urllib.parse import urlsplit

from fleet.api.policy import ClusterSelector, GpuBudget, TeamPolicy
from fleet.plan import Cause, Reason

if TYPE_CHECKING:
    from fleet.inventory import ClusterView
    from fleet.placement import ReplicaPlacement
    from fleet.validate import Fleet

PRODUCT_ATTRIBUTE = "productName"


class Policies:
    """The fleet's TeamPolicies, by the namespace each governs."""

    def __init__(self, policies: Iterable[TeamPolicy]):
        self.by_namespace: dict[str, TeamPolicy] = {}
        self.default: TeamPolicy | None = None
        for p in sorted(policies, key=lambda p: p.name):
            if p.spec.defaultForNamespaces:
                self.default = self.default or p
            else:
                self.by_namespace[p.name] = p

    @classmethod
    def of(cls, fleet: Fleet) -> Policies:
        return cls(fleet.of("TeamPolicy"))

    def __bool__(self) -> bool:
        return bool(self.by_namespace) or self.default is not None

    def for_namespace(self, namespace: str) -> TeamPolicy | None:
        return self.by_namespace.get(namespace, self.default)

    def governed(self, namespaces: Iterable[str]) -> list[tuple[str, TeamPolicy]]:
        """(namespace, its policy) for each namespace that has one, sorted."""
        return [(ns, p) for ns in sorted(set(namespaces)) if (p := self.for_namespace(ns)) is not None]


def policy_text(policy: TeamPolicy | None) -> str:
    """What a deployment's placement depends on of its policy, as a key (the planner's memo)."""
    return policy.spec.model_dump_json() if policy is not None else ""


# ---- residency ------------------------------------------------------------------------------------------------


def _requirement_text(selector: ClusterSelector) -> str:
    parts = [f"{k}={v}" for k, v in sorted(selector.matchLabels.items())]
    for req in selector.matchExpressions:
        parts.append(req.key if req.operator == "Exists" else f"{req.key} {req.operator.lower()} ({','.join(req.values)})")
    return ", ".join(parts)


def not_resident(policy: TeamPolicy | None, labels: dict[str, str]) -> str | None:
    """Why a cluster with `labels` is outside the policy's residency (naming the policy and the field); None when
    it is inside, or the policy has no residency. Fails closed: a label the selector names and the cluster lacks
    is outside, whatever the operator."""
    wrong = residency_misses(policy, labels)
    if not wrong:
        return None
    assert policy is not None and policy.spec.residency is not None
    selector = policy.spec.residency.clusterSelector
    return (f"outside TeamPolicy {policy.name} spec.residency.clusterSelector ({', '.join(wrong)}; "
            f"wants {_requirement_text(selector)})")


def residency_misses(policy: TeamPolicy | None, labels: dict[str, str]) -> list[str]:
    """What a cluster with `labels` lacks of the policy's residency ("no KEY", "KEY=VALUE" it has wrong); [] when it
    is inside, or the policy has no residency."""
    if policy is None or policy.spec.residency is None:
        return []
    selector = policy.spec.residency.clusterSelector
    wrong = []
    for key, value in sorted(selector.matchLabels.items()):
        if labels.get(key) != value:
            wrong.append(f"{key}={labels[key]}" if key in labels else f"no {key}")
    for req in selector.matchExpressions:
        have = labels.get(req.key)
        if have is None:
            wrong.append(f"no {req.key}")
        elif (req.operator == "In" and have not in req.values) or (req.operator == "NotIn" and have in req.values):
            wrong.append(f"{req.key}={have}")
    return wrong


def residency_reason(policy: TeamPolicy | None, cluster: str, labels: dict[str, str]) -> Reason | None:
    why = not_resident(policy, labels)
    return None if why is None else Reason(Cause.RESIDENCY, f"cluster {cluster} is {why}")


def origin_refused(policy: TeamPolicy | None, origin: str) -> str | None:
    """Why a ModelEndpoint of the policy's namespace may not name `origin`; None when it may (no residency: any)."""
    if policy is None or policy.spec.residency is None:
        return None
    allowed = {_normal_origin(o) for o in policy.spec.residency.externalOrigins}
    if _normal_origin(origin) in allowed:
        return None
    listed = ", ".join(sorted(allowed)) or "none"
    return (f"origin {origin!r} is not in TeamPolicy {policy.name} spec.residency.externalOrigins "
            f"(allowed: {listed})")


def _normal_origin(origin: str) -> str:
    parts = urlsplit(origin.strip())
    port = parts.port
    default = {"https": 443, "http": 80}.get(parts.scheme)
    host = (parts.hostname or "").lower()
    return f"{parts.scheme}://{host}" + (f":{port}" if port and port != default else "")


# ---- GPU budgets ----------------------------------------------------------------------------------------------

Kind = tuple[str, str]  # (device class, product): what a budget counts


def replica_use(cluster: ClusterView, placement: ReplicaPlacement) -> Counter[Kind]:
    """Devices one placed replica holds at its largest, by (device class, product): pods x devices per pod of every
    member (pods already count copies, at the autoscaling maximum). Placement-only matches count too, under the
    device's class or, without one, its driver."""
    pools = {p.name: p for p in cluster.pools}
    out: Counter[Kind] = Counter()
    for engine in placement.engines:
        pool = pools.get(engine.pool)
        devices = pool.kind.devices if pool is not None else ()
        for member in engine.members:
            for _, device_class, count in member.devices:
                out[(device_class, _product(devices, device_class))] += member.pods * count
            for request, count in member.synthetic:
                found = next((d for d in devices if not d.claimable), None)
                cls = (found.device_class or found.facts.driver) if found else request
                out[(cls, _product(devices, cls))] += member.pods * count
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

    def _budgets(self, namespace: str) -> tuple[TeamPolicy | None, list[GpuBudget]]:
        policy = self.policies.for_namespace(namespace)
        return policy, (policy.spec.gpus if policy is not None else [])

    def _uses(self, namespace: str, n: int) -> list[_Use]:
        uses = self.use[namespace]
        while len(uses) < n:
            uses.append(_Use())
        return uses

    def refusal(self, namespace: str, cluster: ClusterView, use: Counter[Kind]) -> Reason | None:
        """Why a replica holding `use` on `cluster` would take the namespace over a budget (budget, use, request,
        naming the policy and field); None when it fits every budget."""
        policy, budgets = self._budgets(namespace)
        if policy is None or not budgets:
            return None
        uses = self._uses(namespace, len(budgets))
        for i, budget in enumerate(budgets):
            asked = sum(n for kind, n in use.items() if _counts(budget, kind))
            if not asked:
                continue
            held = uses[i]
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

    def charge(self, namespace: str, cluster: ClusterView, use: Counter[Kind], sign: int = 1) -> None:
        _, budgets = self._budgets(namespace)
        uses = self._uses(namespace, len(budgets))
        for i, budget in enumerate(budgets):
            asked = sum(n for kind, n in use.items() if _counts(budget, kind)) * sign
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
