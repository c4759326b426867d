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

from fleet.api.gateway import Access, DefaultLimit, ModelLimit, TeamLimit
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
        self._matching: dict[tuple[str, Kind], tuple[int, ...]] = {}  # (policy, kind) -> budgets that count it

    def _asked(self, policy: TeamPolicy, budgets: list[GpuBudget], use: Counter[Kind]) -> list[int]:
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

    def refusal(self, namespace: str, cluster: ClusterView, use: Counter[Kind]) -> Reason | None:
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

    def charge(self, namespace: str, cluster: ClusterView, use: Counter[Kind], sign: int = 1) -> None:
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


# ---- token budgets at the front door --------------------------------------------------------------------------
# The team at the front door is the caller's identity (an API key's name, a JWT's team claim), which is the
# namespace's name; so a namespace's policy is its callers' budget, whatever services they call.


def front_door_teams(policies: Policies, served: Iterable[str]) -> list[tuple[str, TeamPolicy]]:
    """(team, its policy) for each team whose policy sets tokens: every named policy's namespace, and the namespaces
    with ModelServices (`served`) the default policy governs."""
    named = [(ns, p) for ns, p in sorted(policies.by_namespace.items()) if p.spec.tokens is not None]
    default = policies.default
    if default is None or default.spec.tokens is None:
        return named
    return sorted(named + [(ns, default) for ns in set(served) if ns not in policies.by_namespace])


def front_door_access(access: Access, policies: Policies, served: Iterable[str]) -> Access:
    """The front door's access with each governed team's token budget from its TeamPolicy: spec.tokens.perHour is
    the team's tokensPerHour, spec.tokens.services[] its per-service (`<ns>/<service>`) ones. A team the policy
    adds to `limits` keeps the default's request limit (a listed team is counted apart from the default); a default
    policy's perHour is also the default limit's tokensPerHour, for callers the fleet knows no namespace of. What
    the InferenceGateway already sets for a team's tokens is refused by `token_conflicts`; here the policy wins."""
    teams = front_door_teams(policies, served)
    if not teams:
        return access
    limits = {limit.team: limit for limit in access.limits}
    default = access.defaultLimit
    for team, policy in teams:
        tokens = policy.spec.tokens
        assert tokens is not None
        given = limits.get(team)
        limit = given.model_copy(deep=True) if given is not None else TeamLimit(
            team=team, requestsPerMinute=default.requestsPerMinute if default else None,
            tokensPerHour=default.tokensPerHour if default else None)
        if tokens.perHour is not None:
            limit = limit.model_copy(update={"tokensPerHour": tokens.perHour})
        models = {m.service: m for m in limit.models}
        for service in tokens.services:
            key = f"{team}/{service.name}"
            models[key] = models[key].model_copy(update={"tokensPerHour": service.perHour}) if key in models \
                else ModelLimit(service=key, tokensPerHour=service.perHour)
        limits[team] = limit.model_copy(update={"models": list(models.values())})
    updated = access.model_copy(update={"limits": [limits[t] for t in sorted(limits)]})
    fallback = policies.default
    if fallback is not None and fallback.spec.tokens is not None and fallback.spec.tokens.perHour is not None:
        updated = updated.model_copy(update={"defaultLimit": (default or DefaultLimit()).model_copy(
            update={"tokensPerHour": fallback.spec.tokens.perHour})})
    return updated


def token_conflicts(access: Access, policies: Policies, served: Iterable[str]) -> list[tuple[tuple, str]]:
    """(InferenceGateway field path, message) for each token budget both the gateway's access and a TeamPolicy
    give: one place for a team's budget, the policy."""
    out: list[tuple[tuple, str]] = []
    teams = dict(front_door_teams(policies, served))
    base = ("spec", "envoy", "access")
    for i, limit in enumerate(access.limits):
        policy = teams.get(limit.team)
        tokens = policy.spec.tokens if policy is not None else None
        if policy is None or tokens is None:
            continue
        if limit.tokensPerHour is not None and tokens.perHour is not None:
            out.append((base + ("limits", i, "tokensPerHour"), (
                f"team {limit.team}'s token budget is TeamPolicy {policy.name} spec.tokens.perHour "
                f"({tokens.perHour}); a team's budget has one place, its policy: remove this one")))
        services = {f"{limit.team}/{s.name}": j for j, s in enumerate(tokens.services)}
        for j, model in enumerate(limit.models):
            if model.tokensPerHour is not None and model.service in services:
                out.append((base + ("limits", i, "models", j, "tokensPerHour"), (
                    f"service {model.service}'s token budget for team {limit.team} is TeamPolicy {policy.name} "
                    f"spec.tokens.services[{services[model.service]}].perHour; a team's budget has one place, its "
                    f"policy: remove this one")))
    fallback = policies.default
    if (access.defaultLimit is not None and access.defaultLimit.tokensPerHour is not None and fallback is not None
            and fallback.spec.tokens is not None and fallback.spec.tokens.perHour is not None):
        out.append((base + ("defaultLimit", "tokensPerHour"), (
            f"the default token budget is TeamPolicy {fallback.name} spec.tokens.perHour (defaultForNamespaces); a "
            f"team's budget has one place, its policy: remove this one")))
    return out
