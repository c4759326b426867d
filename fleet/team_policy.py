"""What a TeamPolicy allows: the one place every road asks (pure: no Pulumi, no I/O).

- Residency: which clusters a namespace's replicas, caches and routes may use, failing closed (a cluster without
  a label the selector names is never allowed).
- External origins: which ModelEndpoint origins a namespace may name.
- GPU budgets: fleet/budgets.py counts them (it reads placements and clusters, which fleet/validate.py, asking
  this module, cannot import): devices per (device class, product) at each replica's autoscaling maximum.
- Token budgets: the front door's per-team and per-service limits.

A namespace is governed by the TeamPolicy named after it, else by the one with `spec.defaultForNamespaces`, else
by none (no limit: the fleet without policies plans exactly as before).
"""

from __future__ import annotations

from typing import Any, Iterable, Protocol
from urllib.parse import urlsplit

from fleet.api.gateway import Access, DefaultLimit, ModelLimit, TeamLimit
from fleet.api.policy import ClusterSelector, TeamPolicy



class HasObjects(Protocol):
    """What the policies are read from: a Fleet (fleet/validate.py, which asks this module: it is not imported here)."""

    def of(self, kind: str) -> list[Any]: ...

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
    def of(cls, fleet: HasObjects) -> Policies:
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
