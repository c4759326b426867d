"""TeamPolicy: what one team (a namespace) may take from the fleet, and where its data may go.

An addition to the reference's API (modelplane.ai/v1alpha1), cluster-scoped and written by the platform team.
`metadata.name` is the namespace it governs; one with `spec.defaultForNamespaces: true` governs every namespace
that has none of its own. What a policy allows is decided in one place, fleet/team_policy.py, which every road
(the scheduler, the front door, the deployability check, the preview and the portal) asks.
"""

from __future__ import annotations

from typing import Annotated, ClassVar, Literal

from pydantic import Field

from fleet.api.common import Int, Resource, Rule, Str, Strict, is_dns_label, key_problem, unique

Operator = Literal["In", "NotIn", "Exists"]  # DoesNotExist is refused: it would select clusters with no label


class Requirement(Strict):
    key: Annotated[str, Str(1, 317)]
    operator: Operator
    values: list[Annotated[str, Str(1, 63)]] = []


class ClusterSelector(Strict):
    """A label selector over InferenceClusters' placement labels. Fail closed: every key it names must be on the
    cluster, so a cluster with no label at all is never selected (NotIn too: unlike Kubernetes' selector)."""

    matchLabels: dict[str, Annotated[str, Str(0, 63)]] = {}
    matchExpressions: list[Requirement] = []


class GpuSplit(Strict):
    """How a GPU budget is divided: explicit caps per cluster or per tier, or in proportion to each cluster's
    devices of the budget's kind. Caps are upper bounds; the fleet-wide count still holds."""

    clusters: dict[Annotated[str, Str(1, 253)], Annotated[int, Int(0, 1_000_000)]] = {}
    tiers: dict[Annotated[str, Str(1, 1, r"^[0-9]$")], Annotated[int, Int(0, 1_000_000)]] = {}
    proportional: bool = False


class GpuBudget(Strict):
    """At most `count` devices, counted at every replica's autoscaling maximum, of the DRA device class (all classes
    when unset) and of the product (the device's `productName` attribute; any when unset)."""

    deviceClassName: Annotated[str, Str(1, 253)] | None = None
    productName: Annotated[str, Str(1, 253)] | None = None
    count: Annotated[int, Int(0, 1_000_000)]
    split: GpuSplit | None = None


class ServiceTokens(Strict):
    name: Annotated[str, Str(1, 253)]  # a ModelService of the team's namespace
    perHour: Annotated[int, Int(1, 4_294_967_295)]


class Tokens(Strict):
    """The front door's token budget for the team, fleet-wide and per service (Envoy's global rate limit)."""

    perHour: Annotated[int, Int(1, 4_294_967_295)] | None = None
    services: list[ServiceTokens] = []


class Residency(Strict):
    clusterSelector: ClusterSelector
    # https origins a ModelEndpoint of the team may name (scheme://host[:port]); none: no external endpoint at all
    externalOrigins: list[Annotated[str, Str(1, 2048)]] = []


class TeamPolicySpec(Strict):
    defaultForNamespaces: bool = False
    gpus: list[GpuBudget] = Field(default=[], max_length=32)
    maxDeployments: Annotated[int, Int(0, 100_000)] | None = None
    tokens: Tokens | None = None
    residency: Residency | None = None


class TeamPolicy(Resource):
    kind: Literal["TeamPolicy"]
    spec: TeamPolicySpec
    status: dict | None = None

    namespaced: ClassVar[bool] = False


def _origin_problem(origin: str) -> str | None:
    from urllib.parse import urlsplit

    parts = urlsplit(origin)
    if parts.scheme not in ("https", "http") or not parts.hostname or parts.path not in ("", "/") \
            or parts.query or parts.fragment or parts.username:
        return f"{origin[:80]!r} is not an origin (scheme://host[:port], nothing after)"
    return None


def team_policy_rules(policy: TeamPolicy) -> Rule:
    spec = policy.spec
    if not spec.defaultForNamespaces and not is_dns_label(policy.name):
        yield ("metadata", "name"), (f"{policy.name!r} is not a namespace name: a TeamPolicy is named after the "
                                     "namespace it governs (or sets spec.defaultForNamespaces)")
    yield from unique(spec.gpus, lambda g: (g.deviceClassName or "*", g.productName or "*"), ("spec", "gpus"),
                      "budget (deviceClassName, productName)")
    for i, budget in enumerate(spec.gpus):
        split = budget.split
        if split is None:
            continue
        ways = bool(split.clusters) + bool(split.tiers) + split.proportional
        if ways != 1:
            yield ("spec", "gpus", i, "split"), "give one of clusters, tiers or proportional"
    if spec.tokens is not None:
        yield from unique(spec.tokens.services, lambda s: s.name, ("spec", "tokens", "services"), "service")
    if spec.residency is not None:
        selector = spec.residency.clusterSelector
        path = ("spec", "residency", "clusterSelector")
        if not selector.matchLabels and not selector.matchExpressions:
            yield path, "selects every cluster: name at least one label (residency fails closed on it)"
        for key in selector.matchLabels:
            if problem := key_problem(key):
                yield path + ("matchLabels", key), problem
        for j, req in enumerate(selector.matchExpressions):
            if problem := key_problem(req.key):
                yield path + ("matchExpressions", j, "key"), problem
            if req.operator == "Exists" and req.values:
                yield path + ("matchExpressions", j, "values"), "must be empty for Exists"
            if req.operator != "Exists" and not req.values:
                yield path + ("matchExpressions", j, "values"), f"{req.operator} needs at least one value"
        for j, origin in enumerate(spec.residency.externalOrigins):
            if problem := _origin_problem(origin):
                yield ("spec", "residency", "externalOrigins", j), problem
