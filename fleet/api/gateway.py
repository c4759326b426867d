"""InferenceGateway: the fleet's front door (a singleton named `default`).

`backend: Traefik` is the reference's. `backend: Envoy` (an addition) serves the front door with the Envoy
Gateway every fleet cluster already runs, and adds the fleet data plane (workloads/fleet_data_plane.py):
health checks per endpoint, retries on another cluster, overflow to external endpoints, and per-team keys and
limits. Every default below is documented, with what it controls, in docs/composition.md ("Fleet data plane").
"""

from __future__ import annotations

from typing import Annotated, Any, ClassVar, Literal

from fleet.api.common import Int, Resource, Rule, Str, Strict

# Gateway API's Duration, which Envoy Gateway's policies use too: 1 to 4 groups of up to 5 digits and a unit.
DURATION = r"^([0-9]{1,5}(h|m|s|ms)){1,4}$"
Duration = Annotated[str, Str(2, 32, DURATION)]
# A DNS label: a team's name is a key of the API-key Secret and a value of the team header.
TEAM = r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$"


class MetalLB(Strict):
    addressPool: Annotated[str, Str(1)]


class Traefik(Strict):
    version: Annotated[str, Str(1)]
    loadBalancer: Literal["MetalLB"] | None = None
    metallb: MetalLB | None = None


class Ejection(Strict):
    """Passive health checking (Envoy's outlier detection) on the answers to real requests: an endpoint that
    fails this many requests in a row is taken out at once, for `baseEjectionTime` times the number of times
    it has been taken out, then tried again."""

    consecutiveGatewayErrors: Annotated[int, Int(1, 100)] = 3  # 502, 503, 504 and failures to connect
    consecutive5xxErrors: Annotated[int, Int(1, 100)] = 5
    baseEjectionTime: Duration = "30s"


class Retries(Strict):
    """A request that never reached an engine (refused, reset before it was sent, or answered 429) is retried on
    another endpoint; `attempts` such retries in the fleet, then one on the overflow endpoints if the service
    has any. `maxParallel` bounds the retries in flight per service: the budget that keeps retries from
    doubling the load on a fleet that is already failing."""

    attempts: Annotated[int, Int(0, 3)] = 1
    perTryTimeout: Duration | None = None
    maxParallel: Annotated[int, Int(1, 1_000_000)] = 32


class ModelLimit(Strict):
    service: Annotated[str, Str(3, 127, r"^[a-z0-9][-a-z0-9]*/[a-z0-9][-a-z0-9.]*$")]  # <namespace>/<ModelService>
    tokensPerHour: Annotated[int, Int(1, 4_294_967_295)] | None = None
    requestsPerMinute: Annotated[int, Int(1, 4_294_967_295)] | None = None


class TeamLimit(Strict):
    team: Annotated[str, Str(1, 63, TEAM)]
    requestsPerMinute: Annotated[int, Int(1, 4_294_967_295)] | None = None
    tokensPerHour: Annotated[int, Int(1, 4_294_967_295)] | None = None
    models: list[ModelLimit] = []


class ApiKeys(Strict):
    """An Opaque Secret in `modelplane-system`, one entry per team: the key is the team's name, the value its API
    key. The gateway reads it where it runs; modelplane only names it, so a key never passes through a plan,
    a render or a log, and revoking one is deleting its entry."""

    secretName: Annotated[str, Str(1, 253)]
    header: Annotated[str, Str(1, 256)] = "Authorization"


class Jwt(Strict):
    issuer: Annotated[str, Str(1)]
    jwksUri: Annotated[str, Str(9, 2048, r"^https://")]
    audiences: list[Annotated[str, Str(1)]] = []
    teamClaim: Annotated[str, Str(1, 253)] = "team"


class DefaultLimit(Strict):
    """Each team not listed in `limits`, counted per team (a team with its own entry has only its own)."""

    requestsPerMinute: Annotated[int, Int(1, 4_294_967_295)] | None = None
    tokensPerHour: Annotated[int, Int(1, 4_294_967_295)] | None = None


# A rate-limit rule's selectors hold 8 x 16 header matches: the per-team one, and one exclusion per listed team.
MAX_LISTED_WITH_DEFAULT = 8 * 16 - 1
MAX_RULES = 128  # Envoy Gateway's global rate-limit rules per policy (its CRD's maxItems)


class Access(Strict):
    apiKeys: ApiKeys | None = None
    jwt: Jwt | None = None
    limits: list[TeamLimit] = []
    defaultLimit: DefaultLimit | None = None

    def rule_count(self) -> int:
        """The rate-limit rules these limits make (workloads/fleet_data_plane.py limit_rules): one per limit set."""
        limits = [self.defaultLimit, *self.limits, *(m for t in self.limits for m in t.models)]
        return sum((limit.requestsPerMinute is not None) + (limit.tokensPerHour is not None)
                   for limit in limits if limit is not None)


class FrontDoorTls(Strict):
    """HTTPS only, on port 443, with this `kubernetes.io/tls` Secret in `modelplane-system` (made by
    cert-manager, say): callers' keys and tokens never cross a network in the clear."""

    certificateSecretName: Annotated[str, Str(1, 253)]


class Envoy(Strict):
    metallb: MetalLB | None = None  # an Existing host cluster: the address pool its gateway takes an address from
    tls: FrontDoorTls | None = None
    ejection: Ejection = Ejection()
    retries: Retries = Retries()
    access: Access | None = None


class InferenceGatewaySpec(Strict):
    backend: Literal["Traefik", "Envoy"]
    traefik: Traefik | None = None
    envoy: Envoy | None = None


class InferenceGateway(Resource):
    kind: Literal["InferenceGateway"]
    spec: InferenceGatewaySpec
    status: dict[str, Any] | None = None

    namespaced: ClassVar[bool] = False

    @property
    def envoy(self) -> Envoy | None:
        """The data plane's settings when the backend is Envoy (the block may be left out: defaults)."""
        return (self.spec.envoy or Envoy()) if self.spec.backend == "Envoy" else None


def inference_gateway_rules(ig: InferenceGateway) -> Rule:
    if ig.spec.backend == "Traefik" and ig.spec.traefik is None:
        yield ("spec", "traefik"), "backend Traefik needs the traefik block"
    if ig.spec.traefik and ig.spec.traefik.loadBalancer == "MetalLB" and ig.spec.traefik.metallb is None:
        yield ("spec", "traefik", "metallb"), "loadBalancer MetalLB needs the metallb block"
    if ig.spec.backend != "Envoy" and ig.spec.envoy is not None:
        yield ("spec", "envoy"), "the envoy block is for backend Envoy"
    if ig.spec.backend != "Traefik" and ig.spec.traefik is not None:
        yield ("spec", "traefik"), "the traefik block is for backend Traefik"
    access = ig.spec.envoy.access if ig.spec.envoy else None
    if access is None:
        return
    if (access.apiKeys is None) == (access.jwt is None):
        yield ("spec", "envoy", "access"), "access needs exactly one of apiKeys and jwt (who the caller's team is)"
    default = access.defaultLimit
    if default is not None and default.requestsPerMinute is None and default.tokensPerHour is None:
        yield ("spec", "envoy", "access", "defaultLimit"), "defaultLimit needs requestsPerMinute or tokensPerHour"
    if default is not None and len(access.limits) > MAX_LISTED_WITH_DEFAULT:
        yield ("spec", "envoy", "access", "defaultLimit"), (
            f"with defaultLimit at most {MAX_LISTED_WITH_DEFAULT} teams can be listed (each is excluded from it by "
            f"one header match of Envoy Gateway's 8 x 16)")
    if access.rule_count() > MAX_RULES:
        yield ("spec", "envoy", "access", "limits"), (
            f"these limits make {access.rule_count()} rate-limit rules; Envoy Gateway takes at most {MAX_RULES} "
            f"(one per requestsPerMinute or tokensPerHour set)")
    seen: set[str] = set()
    for i, limit in enumerate(access.limits):
        if limit.team in seen:
            yield ("spec", "envoy", "access", "limits", i, "team"), f"team {limit.team!r} is listed twice"
        seen.add(limit.team)
        if limit.requestsPerMinute is None and limit.tokensPerHour is None and not limit.models:
            yield ("spec", "envoy", "access", "limits", i), "a limit needs requestsPerMinute, tokensPerHour or models"
        services: set[str] = set()
        for j, model in enumerate(limit.models):
            if model.service in services:
                yield ("spec", "envoy", "access", "limits", i, "models", j, "service"), \
                    f"service {model.service!r} is listed twice for team {limit.team!r}"
            services.add(model.service)
            if model.tokensPerHour is None and model.requestsPerMinute is None:
                yield ("spec", "envoy", "access", "limits", i, "models", j), \
                    "a model limit needs tokensPerHour or requestsPerMinute"
