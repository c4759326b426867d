"""InferenceGateway: the fleet's front door, in either of the reference's two shapes.

The v0.3.1 shape (`InferenceGatewaySpec`): one gateway, on the control plane. `backend: Traefik` is the reference's.
`backend: Envoy` (an addition) serves the front door with the Envoy Gateway every fleet cluster already runs, and
adds the fleet data plane (workloads/fleet_data_plane.py): health checks per endpoint, retries on another cluster,
overflow to external endpoints, and per-team keys and limits. Every default below is documented, with what it
controls, in docs/composition.md ("Fleet data plane").

The v0.5 shape (`FleetGatewaySpec`, upstream's `apis/inferencegateways/definition.yaml` of v0.5.0): any number of
gateways, each an Envoy AI Gateway on the InferenceCluster its `clusterName` names (at most one per cluster), with
HTTPS, API-key callers and a service selector. The keys a spec has decide its shape (`gateway_shape`); one spec
cannot mix them, and one fleet's gateways are all of one shape (fleet/validate.py).
"""

from __future__ import annotations

from typing import Annotated, Any, ClassVar, Literal, Union

from pydantic import ConfigDict, Discriminator, Field, Tag, field_validator

from fleet.api.common import (one_shape, SHAPE_KEY, SHAPE_V031, SHAPE_V05, Int, Resource, Rule, SelectorLabels, Str, Strict,
                              shape_tag, unique)

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
    """The v0.3.1 shape."""

    backend: Literal["Traefik", "Envoy"]
    traefik: Traefik | None = None
    envoy: Envoy | None = None

    shape: ClassVar[str] = SHAPE_V031
    model_config = ConfigDict(json_schema_extra={SHAPE_KEY: SHAPE_V031})


# ---- the v0.5 shape -------------------------------------------------------------------------

class CertificateRef(Strict):
    name: Annotated[str, Str(1, 253)]


class GatewayTls(Strict):
    """kubernetes.io/tls Secrets (in modelplane-system), presented by SNI name."""

    certificateRefs: Annotated[list[CertificateRef], Field(min_length=1, max_length=8)]


class ApiKeyAuth(Strict):
    """Selected Secrets: each entry is one caller (its name the caller's identity, its value the key)."""

    secretSelector: SelectorLabels


class GatewayAuth(Strict):
    method: Literal["APIKey"]
    apiKey: ApiKeyAuth | None = None


class FleetGatewaySpec(Strict):
    """The v0.5 shape: the gateway on one InferenceCluster."""

    clusterName: Annotated[str, Str(1, 253)] = Field(description="The InferenceCluster this gateway runs on. "
                                                     "Immutable; a cluster hosts at most one gateway.")
    tls: GatewayTls | None = Field(None, description="Serve callers over HTTPS with these certificates.")
    auth: GatewayAuth | None = Field(None, description="Authenticate callers (absent: nobody is authenticated).")
    serviceSelector: SelectorLabels | None = Field(None, description="The ModelServices this gateway serves, by "
                                                   "their labels (absent: every one).")

    shape: ClassVar[str] = SHAPE_V05
    model_config = ConfigDict(json_schema_extra={SHAPE_KEY: SHAPE_V05})


# The keys only one shape has: any of the v0.3.1 ones (and none of the others) makes a spec v0.3.1; anything else is
# read as the v0.5 shape, upstream's current one (so a spec with neither is told v0.5's required field).
V031_KEYS = ("backend", "traefik", "envoy")
V05_KEYS = ("clusterName", "tls", "auth", "serviceSelector")


def gateway_shape(value: Any) -> str:
    if isinstance(value, Strict):
        return shape_tag(getattr(value, "shape", SHAPE_V05))
    has_v031 = isinstance(value, dict) and any(k in value for k in V031_KEYS)
    return shape_tag(SHAPE_V031 if has_v031 else SHAPE_V05)


GatewaySpec = Annotated[Union[Annotated[InferenceGatewaySpec, Tag(shape_tag(SHAPE_V031))],
                              Annotated[FleetGatewaySpec, Tag(shape_tag(SHAPE_V05))]], Discriminator(gateway_shape)]


class InferenceGateway(Resource):
    kind: Literal["InferenceGateway"]
    spec: GatewaySpec
    status: dict[str, Any] | None = None

    namespaced: ClassVar[bool] = False

    @field_validator("spec", mode="before")
    @classmethod
    def _one_shape(cls, value: Any) -> Any:
        return one_shape(value, V031_KEYS, V05_KEYS, "an InferenceGateway")

    @property
    def shape(self) -> str:
        return self.spec.shape

    @property
    def v031(self) -> InferenceGatewaySpec | None:
        """The spec in the v0.3.1 shape (the front door this project composes), else None."""
        return self.spec if isinstance(self.spec, InferenceGatewaySpec) else None

    @property
    def v05(self) -> FleetGatewaySpec | None:
        """The spec in the v0.5 shape (a gateway on `clusterName`), else None."""
        return self.spec if isinstance(self.spec, FleetGatewaySpec) else None

    @property
    def envoy(self) -> Envoy | None:
        """The data plane's settings when the backend is Envoy (the block may be left out: defaults)."""
        spec = self.v031
        return (spec.envoy or Envoy()) if spec is not None and spec.backend == "Envoy" else None


def inference_gateway_rules(ig: InferenceGateway) -> Rule:
    if ig.v05 is not None:
        yield from fleet_gateway_rules(ig.v05)
        return
    spec = ig.v031
    assert spec is not None
    if spec.backend == "Traefik" and spec.traefik is None:
        yield ("spec", "traefik"), "backend Traefik needs the traefik block"
    if spec.traefik and spec.traefik.loadBalancer == "MetalLB" and spec.traefik.metallb is None:
        yield ("spec", "traefik", "metallb"), "loadBalancer MetalLB needs the metallb block"
    if spec.backend != "Envoy" and spec.envoy is not None:
        yield ("spec", "envoy"), "the envoy block is for backend Envoy"
    if spec.backend != "Traefik" and spec.traefik is not None:
        yield ("spec", "traefik"), "the traefik block is for backend Traefik"
    access = spec.envoy.access if spec.envoy else None
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


def fleet_gateway_rules(spec: FleetGatewaySpec) -> Rule:
    """The v0.5 XRD's rules beyond types and bounds, with its messages."""
    if spec.tls is not None:
        yield from unique(spec.tls.certificateRefs, lambda r: r.name, ("spec", "tls", "certificateRefs"), "name")
    if spec.auth is not None and (spec.auth.apiKey is not None) != (spec.auth.method == "APIKey"):
        yield ("spec", "auth"), "spec.auth.apiKey must be set when spec.auth.method is APIKey, and only then."


def fleet_gateway_transition_rules(old: InferenceGateway, new: InferenceGateway) -> Rule:
    """The XRD's rule on an update (`self == oldSelf`): a v0.5 gateway stays on its cluster."""
    if old.v05 is not None and new.v05 is not None and old.v05.clusterName != new.v05.clusterName:
        yield ("spec", "clusterName"), "spec.clusterName is immutable."
