"""ModelService (one model as callers see it), ModelEndpoint (one backend of it) and ModelRoute (one service on one
v0.5 gateway), in the reference's two shapes.

ModelService: v0.5 names every entry (`name`, the list's key), widens `priority` to 0..63 failover tiers, and adds
`timeouts`; an entry without a name is the v0.3.1 shape, where `priority` is this project's addition (0 serves, 1
is overflow). ModelEndpoint: v0.3.1 has `url` and `rewritePath`; v0.5 has `origin`, `api`, `model` and `credential`
(`ModelEndpointSpec` and `EndpointSpec`). The keys decide the shape; one object cannot mix them. ModelRoute is new in
v0.5 and machine-generated (a ModelService composes one per gateway that serves it): read as observed state.

Whatever the shape, downstream reads an endpoint through `ModelEndpoint.url` and `.rewrite_path` (the v0.3.1
composition's terms, derived for v0.5 in `EndpointSpec.rewrite_path`) and a service's entries as they are.
"""

from __future__ import annotations

import re
from typing import Annotated, Any, ClassVar, Literal, Union

from pydantic import ConfigDict, Discriminator, Field, Tag, field_validator
from pydantic.json_schema import JsonDict

from fleet.api.common import (one_shape, SHAPE_KEY, SHAPE_V031, SHAPE_V05, Int, RequiredMatchLabels, Resource, Rule,
                              SelectorLabels, Str, Strict, secret_reference_rules, shape_tag, unique)

# Gateway API's Duration, which the v0.5 XRDs' timeouts use: 1 to 4 groups of up to 5 digits and a unit.
DURATION = r"^([0-9]{1,5}(h|m|s|ms)){1,4}$"
ENTRY_NAME = r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$"
MAX_ENTRIES = 32  # v0.5: spec.endpoints maxItems
MAX_V031_PRIORITY = 1  # the v0.3.1 shape's addition: 0 serves, 1 is overflow


V05_ONLY: JsonDict = {SHAPE_KEY: SHAPE_V05}  # a field of the v0.5 shape alone (fleet/json_schema.py)


class ServiceEndpoint(Strict):
    model_config = ConfigDict(json_schema_extra={"x-modelplane-required": {SHAPE_V05: ["name"]}})

    # v0.5: a stable handle for the entry, unique in the service (the list's map key); absent in v0.3.1
    name: Annotated[str, Str(1, 63, ENTRY_NAME)] | None = Field(None, json_schema_extra=V05_ONLY, description=(
        "A stable name for this entry, unique within the service (stable, canary, a provider's name)."))
    weight: Annotated[int, Int(1, 1_000_000)] = 1
    selector: RequiredMatchLabels
    # v0.5: failover tiers, lower preferred. v0.3.1 (an addition here): 0 serves; 1 is overflow, used only when no
    # priority-0 endpoint can take a request (every one unhealthy, or saturated: 429). Under a v0.3.1 gateway it
    # needs backend Envoy (workloads/fleet_data_plane.py), which serves tiers 0 and 1.
    priority: Annotated[int, Int(0, 63)] = 0


class ServiceTimeouts(Strict):
    request: Annotated[str, Field(pattern=DURATION)] = "300s"  # end to end, retries included
    idle: Annotated[str, Field(pattern=DURATION)] = "60s"  # the longest silence from an endpoint; 0s disables


class ModelServiceSpec(Strict):
    endpoints: list[ServiceEndpoint] = Field(min_length=1)
    # v0.5; when absent there, its defaults apply (`effective_timeouts`)
    timeouts: ServiceTimeouts | None = Field(None, json_schema_extra=V05_ONLY, description=(
        "How long a gateway waits on this service's endpoints (default request 300s, idle 60s)."))

    @property
    def shape(self) -> str:
        named = any(entry.name is not None for entry in self.endpoints)
        return SHAPE_V05 if named or self.timeouts is not None else SHAPE_V031

    @property
    def effective_timeouts(self) -> ServiceTimeouts:
        """The v0.5 timeouts with the XRD's defaults (`timeouts: {}` by default, then 300s and 60s)."""
        return self.timeouts or ServiceTimeouts()


class ModelService(Resource):
    kind: Literal["ModelService"]
    spec: ModelServiceSpec
    status: dict[str, Any] | None = None

    @property
    def shape(self) -> str:
        return self.spec.shape


# ---- ModelEndpoint -------------------------------------------------------------------------------

class ModelEndpointSpec(Strict):
    """The v0.3.1 shape."""

    url: Annotated[str, Str(1)]
    rewritePath: str | None = None

    shape: ClassVar[str] = SHAPE_V031
    model_config = ConfigDict(json_schema_extra={SHAPE_KEY: SHAPE_V031})

    @property
    def rewrite_path(self) -> str | None:
        return self.rewritePath


class EndpointApi(Strict):
    # `schema` is a BaseModel method's name: the field is spelled so in manifests, `schema_` here
    schema_: Literal["OpenAI", "Anthropic"] = Field("OpenAI", alias="schema")
    prefix: Annotated[str, Str(1, 512)] = "/v1"


class SecretKeyRef(Strict):
    name: Annotated[str, Str(1, 253)]
    key: Annotated[str, Str(1, 253)] = "apiKey"


class ApiKeyCredential(Strict):
    secretRef: SecretKeyRef


class EndpointCredential(Strict):
    method: Literal["APIKey"]
    apiKey: ApiKeyCredential | None = None


class EndpointSpec(Strict):
    """The v0.5 shape: where the backend is (origin), the API it speaks under which path, the model name it knows,
    and the credential the gateway attaches."""

    origin: Annotated[str, Str(1, 2048)] = Field(description="Scheme and host of the backend (and a non-default "
                                                 "port), no path; the host is a name, not an IP address.")
    api: EndpointApi = Field(EndpointApi.model_validate({}), description="The API the backend speaks, and the path it serves it under.")
    model: Annotated[str, Str(1, 253)] | None = Field(None, description="The name the backend knows the model by; "
                                                      "the gateway rewrites the request's model to it.")
    credential: EndpointCredential | None = Field(None, description="The credential the gateway attaches on the "
                                                  "way out.")

    shape: ClassVar[str] = SHAPE_V05
    model_config = ConfigDict(json_schema_extra={SHAPE_KEY: SHAPE_V05})

    @property
    def url(self) -> str:
        """Where the API is: origin and prefix (the v0.3.1 shape's `url`)."""
        return self.origin + self.api.prefix

    @property
    def rewrite_path(self) -> str | None:
        """The v0.3.1 composition's per-backend path: a caller's `/<ns>/<service>/v1/...` becomes `<prefix>/...`
        by replacing `/<ns>/<service>/` with the prefix less its last `v1` (`/v1` -> `/`, `/openai/v1` ->
        `/openai/`). None when the prefix does not end in `/v1`: that path cannot be reached by a prefix rewrite."""
        prefix = self.api.prefix
        return prefix[:-2] if prefix.endswith("/v1") else None


V031_ENDPOINT_KEYS = ("url", "rewritePath")
V05_ENDPOINT_KEYS = ("origin", "api", "model", "credential")


def endpoint_shape(value: Any) -> str:
    if isinstance(value, Strict):
        return shape_tag(getattr(value, "shape", SHAPE_V05))
    has_v031 = isinstance(value, dict) and any(k in value for k in V031_ENDPOINT_KEYS)
    return shape_tag(SHAPE_V031 if has_v031 else SHAPE_V05)


EndpointSpecs = Annotated[Union[Annotated[ModelEndpointSpec, Tag(shape_tag(SHAPE_V031))],
                                Annotated[EndpointSpec, Tag(shape_tag(SHAPE_V05))]], Discriminator(endpoint_shape)]


class ModelEndpoint(Resource):
    kind: Literal["ModelEndpoint"]
    spec: EndpointSpecs
    status: dict[str, Any] | None = None

    @field_validator("spec", mode="before")
    @classmethod
    def _one_shape(cls, value: Any) -> Any:
        return one_shape(value, V031_ENDPOINT_KEYS, V05_ENDPOINT_KEYS, "a ModelEndpoint")

    @property
    def shape(self) -> str:
        return self.spec.shape

    @property
    def v05(self) -> EndpointSpec | None:
        return self.spec if isinstance(self.spec, EndpointSpec) else None

    @property
    def url(self) -> str:
        return self.spec.url

    @property
    def rewrite_path(self) -> str | None:
        return self.spec.rewrite_path


# ---- ModelRoute (v0.5, machine-generated) ----------------------------------------------------------

class RouteEndpoint(Strict):
    name: Annotated[str, Str(1, 63, ENTRY_NAME)]
    priority: Annotated[int, Int(0, 63)] = 0
    weight: Annotated[int, Int(1, 1_000_000)] = 1
    selector: SelectorLabels


class RouteTimeouts(Strict):
    request: Annotated[str, Field(pattern=DURATION)]
    idle: Annotated[str, Field(pattern=DURATION)]


class ModelRouteSpec(Strict):
    gatewayName: Annotated[str, Str(1, 253)]
    serviceName: Annotated[str, Str(1, 253)]
    endpoints: Annotated[list[RouteEndpoint], Field(min_length=1, max_length=MAX_ENTRIES)]
    timeouts: RouteTimeouts


class ModelRoute(Resource):
    """One ModelService on one v0.5 InferenceGateway, as a ModelService composes it: given as input (`kubectl get
    -o yaml`), it is observed state, validated and read, never written by a user."""

    kind: Literal["ModelRoute"]
    spec: ModelRouteSpec
    status: dict[str, Any] | None = None

    @property
    def shape(self) -> str:
        return SHAPE_V05


# ---- rules ------------------------------------------------------------------------------------------

def model_service_rules(ms: ModelService) -> Rule:
    entries = ms.spec.endpoints
    if ms.spec.shape == SHAPE_V031:
        for i, entry in enumerate(entries):
            if entry.priority > MAX_V031_PRIORITY:
                yield ("spec", "endpoints", i, "priority"), (
                    f"must be less than or equal to {MAX_V031_PRIORITY} in the v0.3.1 shape (0 serves, 1 is overflow); "
                    "priorities up to 63 are the v0.5 shape's failover tiers, whose entries are named")
        return
    for i, entry in enumerate(entries):
        if entry.name is None:
            yield ("spec", "endpoints", i, "name"), (
                "required field is missing (this service is in the v0.5 shape, where every entry is named: another "
                "entry has a name, or spec.timeouts is set)")
    yield from v05_entry_rules(entries, ("spec", "endpoints"))


def v05_entry_rules(entries: list, path: tuple) -> Rule:
    """The v0.5 list's bounds beyond one entry's: at most 32 entries, unique names, 1 to 16 labels per selector."""
    if len(entries) > MAX_ENTRIES:
        yield path, f"must have at most {MAX_ENTRIES} items"
    yield from unique([e for e in entries if e.name is not None], lambda e: e.name, path, "entry name")
    for i, entry in enumerate(entries):
        labels = entry.selector.matchLabels
        where = path + (i, "selector", "matchLabels")
        if not 1 <= len(labels) <= 16:
            yield where, f"must have at {'least 1 item' if not labels else 'most 16 items'}"
        for key, value in labels.items():
            if len(value) > 63:
                yield where + (key,), "must have at most 63 characters"


_PORT = re.compile(r"^[0-9]{1,5}$")
_IPV4 = re.compile(r"^[0-9]+([.][0-9]+){3}$")


def origin_problems(origin: str) -> list[str]:
    """The v0.5 XRD's five CEL rules on spec.origin, in its order and with its messages (each rule is evaluated,
    as the API server does, so one origin may break several)."""
    out = []
    if not (origin.startswith("http://") or origin.startswith("https://")):
        out.append("spec.origin must start with http:// or https://.")
    rest = origin.split("://")[1] if "://" in origin else None
    if rest is not None and len(rest.split("/")) != 1:
        out.append("spec.origin must be scheme and host only; put the API's path in spec.api.prefix.")
    if rest is not None and rest == "":
        out.append("spec.origin must include a host.")
    if rest is not None and not rest.startswith("[") and ":" in rest:
        parts = rest.split(":")
        if not (len(parts) == 2 and _PORT.match(parts[1]) and 1 <= int(parts[1]) <= 65535):
            out.append("spec.origin's port must be a number from 1 to 65535.")
    if rest is not None and (rest.startswith("[") or _IPV4.match(rest.split(":")[0])):
        out.append("spec.origin host must be a name, not an IP address.")
    return out


def model_endpoint_rules(me: ModelEndpoint) -> Rule:
    spec = me.spec
    if isinstance(spec, ModelEndpointSpec):
        url = spec.url
        if not (url.startswith("http://") or url.startswith("https://")):
            yield ("spec", "url"), f"url {url!r} must start with http:// or https://"
        if spec.rewritePath is not None and not spec.rewritePath.startswith("/"):
            yield ("spec", "rewritePath"), "rewritePath must start with '/'"
        return
    for message in origin_problems(spec.origin):
        yield ("spec", "origin"), message
    if not spec.api.prefix.startswith("/"):
        yield ("spec", "api", "prefix"), "spec.api.prefix must start with a slash."
    credential = spec.credential
    if credential is not None:
        if (credential.apiKey is not None) != (credential.method == "APIKey"):
            yield ("spec", "credential"), ("spec.credential.apiKey must be set when spec.credential.method is "
                                           "APIKey, and only then.")
        if credential.apiKey is not None:
            ref = credential.apiKey.secretRef
            yield from secret_reference_rules(ref.name, ref.key, ("spec", "credential", "apiKey", "secretRef"))


def model_route_rules(mr: ModelRoute) -> Rule:
    yield from v05_entry_rules(mr.spec.endpoints, ("spec", "endpoints"))
