"""The v0.5 fleet gateway (an InferenceGateway with `clusterName`), composed as Modelplane v0.5.0 composes it, on
the Envoy front door this project already runs for `backend: Envoy` (workloads/fleet_data_plane.py: the Gateway on
the host's Envoy Gateway, the endpoints' FQDN `Backend`s, the mutually authenticated hop of
workloads/front_door_mtls.py). What v0.5 changes is the routing: by model name, through Envoy AI Gateway
(`aigateway.envoyproxy.io`, the v0.5.0 CRDs bundled in workloads/crds/upstream), instead of by path.

Per (gateway, service), the ModelRoute's objects (docs/shared reference §3.2, §3.5, §3.6, §3.8):
- one `AIGatewayRoute`, named after the service in its namespace, with one rule matching the header
  `x-ai-eg-model` (Envoy AI Gateway's ext_proc copies the body's `model` into it) exactly to `<ns>/<service>`,
  attached to the gateway's `http` listener, or `https` when it has TLS; its request timeout is the service's
  `timeouts.request` (always set: AI Gateway would default to 60 s); `modelsOwnedBy` the namespace, so `GET
  /v1/models` lists the service as upstream's does; token counts as request costs (which also has the gateway ask
  for usage on streams);
- per usable endpoint a backendRef with its priority (renumbered over the tiers that have an endpoint), its weight
  (spread within its tier as upstream spreads them) and its `model` as `modelNameOverride`.
Per endpoint (its namespace's endpoints stack, one owner however many services route to it): an `AIServiceBackend`
(schema, prefix; the caller header removed for a backend Modelplane does not operate) over the endpoint's `Backend`,
and with a credential a `BackendSecurityPolicy` (`APIKey`, or `AnthropicAPIKey` for an Anthropic backend).
Per gateway (the gateway stack): failover, the request buffer, `/healthz`, with TLS the redirect to HTTPS, with
auth the API-key `SecurityPolicy` (`gateway_objects`).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

from fleet.api.gateway import FleetGatewaySpec
from fleet.api.service import EndpointSpec
from fleet.names import bounded
from fleet.secrets import SecretRef
from workloads.fleet_data_plane import EG, Tiered, backend_name, external_name
from workloads.service_routing import FLEET_GATEWAY, Endpoint, distribute_weights

if TYPE_CHECKING:
    from fleet.validate import Fleet

AIGW = "aigateway.envoyproxy.io/v1alpha1"
MODEL_HEADER = "x-ai-eg-model"  # where Envoy AI Gateway's ext_proc puts the request body's `model`
CALLER_HEADER = "x-modelplane-caller"  # the caller's identity: the matching key's entry name
MANAGED = {"app.kubernetes.io/managed-by": "modelplane"}
# [T-IG] the failover BackendTrafficPolicy: 3 retries, 2 attempts per priority, on these triggers and codes; an
# endpoint ejected after 5 consecutive 5xx (interval 5 s, base ejection 30 s, up to 100 %); panic mode off.
RETRY_TRIGGERS = ["connect-failure", "refused-stream", "reset", "retriable-status-codes"]
RETRY_STATUSES = [429, 503]
RETRIES, ATTEMPTS_PER_PRIORITY = 3, 2
EJECT_AFTER_5XX, EJECTION_INTERVAL, BASE_EJECTION = 5, "5s", "30s"
REQUEST_BUFFER = "50Mi"  # [T-IG] the ClientTrafficPolicy's buffer: a whole request can be retried
# [F-MRT] token counts as route request costs, under these metadata keys (the usage record reads them)
REQUEST_COSTS = [{"metadataKey": "input_tokens", "type": "InputToken"},
                 {"metadataKey": "output_tokens", "type": "OutputToken"},
                 {"metadataKey": "total_tokens", "type": "TotalToken"}]
AI_METADATA = "io.envoy.ai_gateway"  # the dynamic-metadata namespace Envoy AI Gateway writes request costs to
HEALTHZ = "modelplane-healthz"
PROXY_SERVICE = "modelplane-fleet-gateway"  # the front door's load balancer Service (components/fleet_gateway.py)
API_KEY = "apiKey"  # the Secret key Envoy AI Gateway's BackendSecurityPolicy reads


@dataclass(frozen=True)
class Routed:
    """One endpoint of one service's route: its (renumbered) priority, its weight within that tier, and its v0.5
    spec (None for a replica's composed endpoint, or a v0.3.1 ModelEndpoint)."""

    endpoint: Endpoint
    weight: int
    priority: int
    spec: EndpointSpec | None = None

    @property
    def backend(self) -> str:
        """The name of the endpoint's Backend and AIServiceBackend (`ep-<endpoint>`)."""
        return backend_name(self.endpoint, 0)

    @property
    def served_model(self) -> str | None:
        """What the request's model becomes on the way out: the endpoint's `model`; for a replica, `<ns>/<deployment>`,
        the name upstream's engines serve (`MODELPLANE_SERVED_MODEL_NAME`)."""
        if self.spec is not None:
            return self.spec.model
        deployment = self.endpoint.labels.get("modelplane.ai/deployment")
        return f"{self.endpoint.namespace}/{deployment}" if self.endpoint.composed and deployment else None


def serves(gateway: FleetGatewaySpec, labels: dict[str, str] | None) -> bool:
    """Whether the gateway's `serviceSelector` matches a service's own labels (absent: every service)."""
    wanted = gateway.serviceSelector.matchLabels if gateway.serviceSelector else {}
    return all((labels or {}).get(k) == v for k, v in wanted.items())


def tiers(service, groups: list[tuple[int, list[Endpoint]]], specs: dict[tuple[str, str], EndpointSpec]) -> list[Routed]:
    """[F-MRT] Priorities renumbered to 0..N-1 over the tiers that have an endpoint (gaps and empty tiers
    collapse); within a tier each entry's weight spread over its endpoints (`distribute_weights`)."""
    by_priority: dict[int, list[tuple[int, list[Endpoint]]]] = {}
    for (weight, endpoints), entry in zip(groups, service.spec.endpoints):
        if endpoints:
            by_priority.setdefault(entry.priority, []).append((weight, endpoints))
    out: list[Routed] = []
    for level, priority in enumerate(sorted(by_priority)):
        out += [Routed(ep, weight, level, specs.get((ep.namespace, ep.name)))
                for ep, weight in distribute_weights(by_priority[priority])]
    return out


def backend_tier(routed: Routed) -> Tiered:
    """The endpoint's Envoy Gateway `Backend` (workloads/fleet_data_plane.py `backend_object`): priority 0, since
    the AIGatewayRoute's backendRef carries the priority (it overrides the Backend's `fallback`)."""
    return Tiered(routed.endpoint, 1, 0)


def endpoint_problems(routed: list[Routed]) -> list[str]:
    """What the v0.5 gateway cannot route to, said once per endpoint."""
    out = []
    for r in routed:
        ep = r.endpoint
        if not ep.composed and external_name(ep) is None:
            out.append(f"ModelEndpoint {ep.name} is addressed by IP ({ep.host}): Envoy AI Gateway keeps routing to an "
                       "IP but silently stops applying the model rewrite, credential and priority failover; give its "
                       "origin a host name")
        credential = r.spec.credential if r.spec is not None else None
        if credential is not None and credential.apiKey is not None and credential.apiKey.secretRef.key != API_KEY:
            ref = credential.apiKey.secretRef
            out.append(f"ModelEndpoint {ep.name}: credential key {ref.key!r} of Secret {ref.name}: Envoy AI Gateway "
                       f"reads the key {API_KEY!r}, and this project does not republish the Secret under it yet; "
                       f"store the key as {API_KEY!r}")
    return out


def listener(gateway: FleetGatewaySpec) -> str:
    return "https" if gateway.tls is not None else "http"


def route_object(service, routed: list[Routed], gateway_name: str, gateway: FleetGatewaySpec,
                 timeouts) -> dict:
    """The service's AIGatewayRoute on this gateway (with no usable endpoint: a rule with no backend, so the model
    is still matched and answered with an error rather than passed to another rule)."""
    name, namespace = service.name, service.namespace
    rule: dict = {
        "matches": [{"headers": [{"type": "Exact", "name": MODEL_HEADER, "value": f"{namespace}/{name}"}]}],
        "timeouts": {"request": timeouts.request},
        "modelsOwnedBy": namespace,
    }
    refs = []
    for r in routed:
        ref: dict = {"name": r.backend, "priority": r.priority, "weight": r.weight}
        if r.served_model is not None:
            ref["modelNameOverride"] = r.served_model
        refs.append(ref)
    rule["backendRefs"] = refs
    labels = {"modelplane.ai/service": bounded(name, 63), "modelplane.ai/gateway": bounded(gateway_name, 63),
              "modelplane.ai/cluster": bounded(gateway.clusterName, 63)}
    return {"apiVersion": AIGW, "kind": "AIGatewayRoute",
            "metadata": {"name": name, "namespace": namespace, "labels": labels},
            "spec": {"parentRefs": [{**FLEET_GATEWAY, "sectionName": listener(gateway)}], "rules": [rule],
                     "llmRequestCosts": [dict(c) for c in REQUEST_COSTS]}}


def endpoint_objects(routed: Routed) -> list[dict]:
    """The endpoint's AIServiceBackend over its Backend, and its credential's BackendSecurityPolicy."""
    ep, spec = routed.endpoint, routed.spec
    schema = spec.api.schema_ if spec is not None else "OpenAI"
    prefix = ep.parsed.path or "/v1"  # origin + prefix, or a replica's path on its cluster gateway + v1
    backend: dict = {"schema": {"name": schema, "prefix": prefix},
                     "backendRef": {"group": "gateway.envoyproxy.io", "kind": "Backend", "name": routed.backend}}
    if not ep.composed:  # a provider is not told the tenant; a replica keeps the caller ([F-MRT])
        backend["headerMutation"] = {"remove": [CALLER_HEADER]}
    meta = {"name": routed.backend, "namespace": ep.namespace,
            "labels": {"modelplane.ai/endpoint": bounded(ep.name, 63)}}
    out = [{"apiVersion": AIGW, "kind": "AIServiceBackend", "metadata": meta, "spec": backend}]
    credential = spec.credential if spec is not None else None
    if credential is not None and credential.apiKey is not None:
        kind = "AnthropicAPIKey" if schema == "Anthropic" else "APIKey"  # x-api-key, else Authorization: Bearer
        field = "anthropicAPIKey" if kind == "AnthropicAPIKey" else "apiKey"
        out.append({"apiVersion": AIGW, "kind": "BackendSecurityPolicy", "metadata": dict(meta), "spec": {
            "type": kind, field: {"secretRef": {"name": credential.apiKey.secretRef.name, "namespace": ep.namespace}},
            "targetRefs": [{"group": "aigateway.envoyproxy.io", "kind": "AIServiceBackend", "name": routed.backend}]}})
    return out


def credentials(fleet: Fleet) -> dict[tuple[str, str], str]:
    """[F-ME] Each v0.5 ModelEndpoint with a credential -> "" when its Secret has the key (a Secret manifest of the
    fleet, or wherever else the secret store reads it from), else upstream's EndpointReady message: "Secret <n> does
    not exist" or "Secret <n> has no key <k>". Names and keys only, never a value."""
    out = {}
    for me in fleet.of("ModelEndpoint"):
        spec = me.spec
        if not isinstance(spec, EndpointSpec) or spec.credential is None or spec.credential.apiKey is None:
            continue
        ref = spec.credential.apiKey.secretRef
        values = fleet.secrets.manifests.get((me.namespace, ref.name))
        if (values is not None and ref.key in values) or \
                fleet.secrets.given_elsewhere(SecretRef(me.namespace, ref.name, ref.key)) is not None:
            out[(me.namespace, me.name)] = ""
        elif values is not None:
            out[(me.namespace, me.name)] = f"Secret {ref.name} has no key {ref.key}"
        else:
            out[(me.namespace, me.name)] = f"Secret {ref.name} does not exist"
    return out


def listeners(gateway: FleetGatewaySpec) -> list[dict]:
    """[T-IG] `http` on 80 always (`/healthz` is plain HTTP even with TLS), and with TLS `https` on 443 terminating
    the referenced certificates (the proxy picks one by SNI)."""
    allowed = {"namespaces": {"from": "All"}}
    out = [{"name": "http", "port": 80, "protocol": "HTTP", "allowedRoutes": allowed}]
    if gateway.tls is not None:
        out.append({"name": "https", "port": 443, "protocol": "HTTPS", "allowedRoutes": allowed, "tls": {
            "mode": "Terminate",
            "certificateRefs": [{"group": "", "kind": "Secret", "name": ref.name} for ref in gateway.tls.certificateRefs]}})
    return out


def gateway_objects(gateway: FleetGatewaySpec, caller_secrets: list[str], namespace: str = FLEET_GATEWAY["namespace"]
                    ) -> list[dict]:
    """The gateway's own policies, on its Gateway: the request buffer, failover, `/healthz` (exempt from caller
    auth), with TLS the redirect of everything else on port 80, and with auth the API-key check. `caller_secrets`:
    the names of the Secrets `auth.apiKey.secretSelector` selects (none: every request is refused)."""
    meta = {"namespace": namespace, "labels": dict(MANAGED)}
    gateway_ref = [{"group": "gateway.networking.k8s.io", "kind": "Gateway", "name": FLEET_GATEWAY["name"]}]
    objects: list[dict] = [
        {"apiVersion": EG, "kind": "ClientTrafficPolicy", "metadata": {"name": "modelplane-front-door", **meta},
         "spec": {"targetRefs": gateway_ref, "connection": {"bufferLimit": REQUEST_BUFFER}}},
        {"apiVersion": EG, "kind": "BackendTrafficPolicy", "metadata": {"name": "modelplane-failover", **meta},
         "spec": failover(gateway_ref)},
        {"apiVersion": EG, "kind": "HTTPRouteFilter", "metadata": {"name": HEALTHZ, **meta}, "spec": {"directResponse": {
            "statusCode": 200, "contentType": "application/json",
            "body": {"type": "Inline", "inline": '{"status":"ok"}'}}}},
        {"apiVersion": "gateway.networking.k8s.io/v1", "kind": "HTTPRoute", "metadata": {"name": HEALTHZ, **meta},
         "spec": {"parentRefs": [{**FLEET_GATEWAY, "sectionName": "http"}], "rules": [{
             "matches": [{"path": {"type": "Exact", "value": "/healthz"}}],
             "filters": [{"type": "ExtensionRef", "extensionRef": {
                 "group": "gateway.envoyproxy.io", "kind": "HTTPRouteFilter", "name": HEALTHZ}}]}]}},
    ]
    if gateway.tls is not None:  # everything else on port 80 moves to HTTPS
        objects.append({"apiVersion": "gateway.networking.k8s.io/v1", "kind": "HTTPRoute",
                        "metadata": {"name": "modelplane-https-redirect", **meta},
                        "spec": {"parentRefs": [{**FLEET_GATEWAY, "sectionName": "http"}], "rules": [{
                            "matches": [{"path": {"type": "PathPrefix", "value": "/"}}],
                            "filters": [{"type": "RequestRedirect",
                                         "requestRedirect": {"scheme": "https", "statusCode": 301}}]}]}})
    if gateway.auth is not None:
        objects.append({"apiVersion": EG, "kind": "SecurityPolicy", "metadata": {"name": "modelplane-callers", **meta},
                        "spec": {"targetRefs": gateway_ref, "apiKeyAuth": api_key_auth(caller_secrets)}})
        # a route's own SecurityPolicy replaces the Gateway's: /healthz answers without a key
        objects.append({"apiVersion": EG, "kind": "SecurityPolicy", "metadata": {"name": HEALTHZ, **meta},
                        "spec": {"targetRefs": [{"group": "gateway.networking.k8s.io", "kind": "HTTPRoute",
                                                 "name": HEALTHZ}],
                                 "authorization": {"defaultAction": "Allow"}}})
    return objects


def caller_secret_objects(secrets: dict[str, tuple[dict[str, str], list[str]]],
                          namespace: str = FLEET_GATEWAY["namespace"]) -> list[dict]:
    """[T-IG] the selected caller Secrets, copied to the gateway's cluster: placeholder Secrets (name -> (labels,
    keys)) whose values the gateway stack's program fills from the fleet's secret store, never rendered. Each key
    is a caller's identity, each value its key."""
    return [_copied_secret(name, namespace, labels, keys, "Opaque") for name, (labels, keys) in sorted(secrets.items())]


TLS_KEYS = ("tls.crt", "tls.key")  # what a `kubernetes.io/tls` Secret holds


def certificate_secret_objects(secrets: dict[str, list[str]], namespace: str = FLEET_GATEWAY["namespace"]) -> list[dict]:
    """[X-IG] the Secrets `tls.certificateRefs` names (name -> keys), copied to the gateway's cluster as
    `kubernetes.io/tls` placeholder Secrets the gateway stack's program fills, as the caller Secrets."""
    return [_copied_secret(name, namespace, {}, keys, "kubernetes.io/tls") for name, keys in sorted(secrets.items())]


def _copied_secret(name: str, namespace: str, labels: dict[str, str], keys: list[str], type_: str) -> dict:
    from workloads.cache import SECRET_SOURCE_ANNOTATION

    return {"apiVersion": "v1", "kind": "Secret", "type": type_,
            "metadata": {"name": name, "namespace": namespace, "labels": {**labels, **MANAGED}, "annotations": {
                "modelplane.ai/placeholder": f"values come from the Secret {namespace}/{name}, as Pulumi secrets",
                SECRET_SOURCE_ANNOTATION: f"{namespace}/{name}"}},
            "stringData": {key: "<secret: set at apply time, never rendered>" for key in keys}}


def certificate_problems(gateway: FleetGatewaySpec, given: dict[tuple[str, str], list[str]],
                         namespace: str = FLEET_GATEWAY["namespace"]) -> list[tuple[tuple, str]]:
    """(path, message) for each `tls.certificateRefs` entry the gateway stack cannot copy: its Secret is not among
    the fleet's Secret manifests in `namespace` (`given`: (namespace, name) -> keys), or lacks a TLS key."""
    out: list[tuple[tuple, str]] = []
    for i, ref in enumerate(gateway.tls.certificateRefs if gateway.tls is not None else []):
        path = ("spec", "tls", "certificateRefs", i, "name")
        keys = given.get((namespace, ref.name))
        if keys is None:
            out.append((path, f"Secret {namespace}/{ref.name} is not among the fleet's Secret manifests: give it with "
                              f"-f (a v1/Secret of type kubernetes.io/tls with {' and '.join(TLS_KEYS)}), for the "
                              f"gateway stack to copy to the gateway's cluster {gateway.clusterName}"))
        elif missing := [k for k in TLS_KEYS if k not in keys]:
            out.append((path, f"Secret {namespace}/{ref.name} has no {' or '.join(missing)}: a TLS certificate "
                              f"Secret holds {' and '.join(TLS_KEYS)}"))
    return out


def api_key_auth(caller_secrets: list[str]) -> dict:
    """[T-IG, D-IG] The presented key, from `Authorization` (OpenAI clients) or `x-api-key` (Anthropic clients),
    checked against every selected Secret's entries; the matching entry's name set as the caller (Envoy replaces any
    value the caller sent) and the key removed from the request (`sanitize`), never forwarded."""
    return {"credentialRefs": [{"group": "", "kind": "Secret", "name": name} for name in caller_secrets],
            "extractFrom": [{"headers": ["Authorization"]}, {"headers": ["x-api-key"]}],
            "forwardClientIDHeader": CALLER_HEADER, "sanitize": True}


def failover(target_refs: list[dict]) -> dict:
    """[T-IG] One BackendTrafficPolicy on the gateway's Gateway."""
    return {
        "targetRefs": target_refs,
        "retry": {"numRetries": RETRIES, "numAttemptsPerPriority": ATTEMPTS_PER_PRIORITY,
                  "retryOn": {"triggers": list(RETRY_TRIGGERS), "httpStatusCodes": list(RETRY_STATUSES)}},
        "healthCheck": {"passive": {"consecutive5XxErrors": EJECT_AFTER_5XX, "interval": EJECTION_INTERVAL,
                                    "baseEjectionTime": BASE_EJECTION, "maxEjectionPercent": 100},
                        "panicThreshold": 0},
    }


def usage_record_format() -> dict:
    """[T-IG] The JSON access-log line per request, with upstream's fields; token counts from the route's request
    costs (AI_METADATA). A request refused at the door logs its caller, service and status with no tokens."""
    def costs(key: str) -> str:
        return f"%DYNAMIC_METADATA({AI_METADATA}:{key})%"

    return {"caller": f"%REQ({CALLER_HEADER})%", "service": f"%REQ({MODEL_HEADER})%",
            "endpoint": "%UPSTREAM_CLUSTER%", "served_model": f"%DYNAMIC_METADATA({AI_METADATA}:model_name_override)%",
            "response_model": f"%DYNAMIC_METADATA({AI_METADATA}:response_model)%",
            "input_tokens": costs("input_tokens"), "output_tokens": costs("output_tokens"),
            "total_tokens": costs("total_tokens"), "status": "%RESPONSE_CODE%", "duration_ms": "%DURATION%",
            "start_time": "%START_TIME%"}


def proxy_spec(service_name: str) -> dict:
    """The gateway's EnvoyProxy: [T-IG] 2 replicas, a PodDisruptionBudget of one, a 300 s drain, the usage records."""
    return {"provider": {"type": "Kubernetes", "kubernetes": {
                "envoyService": {"name": service_name, "externalTrafficPolicy": "Cluster"},
                "envoyDeployment": {"replicas": 2}, "envoyPDB": {"maxUnavailable": 1}}},
            "shutdown": {"drainTimeout": "300s"},
            "telemetry": {"accessLog": {"settings": [{
                "format": {"type": "JSON", "json": usage_record_format()},
                "sinks": [{"type": "File", "file": {"path": "/dev/stdout"}}]}]}}}


def base_urls(address: str | None, tls: bool) -> dict[str, str] | None:
    """`status.endpoints`: `http://<address>/v1` and `http://<address>/anthropic/v1` (an IPv6 address bracketed),
    published only without TLS (callers then use their own name)."""
    if not address or tls:
        return None
    host = f"[{address}]" if ":" in address and not address.startswith("[") else address
    return {"openAI": f"http://{host}/v1", "anthropic": f"http://{host}/anthropic/v1"}
