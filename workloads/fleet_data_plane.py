"""The fleet data plane on Envoy Gateway (InferenceGateway `backend: Envoy`).

What the front door does for every ModelService, with Envoy Gateway's own objects (the v1.6.2 CRDs every fleet
cluster runs; bundled in workloads/crds/upstream and checked in tests), and why each piece has the shape it has
(the sources are cited in docs/composition.md, "Fleet data plane"):

- **One rule, one Envoy cluster.** Envoy Gateway turns an HTTPRoute rule whose backends share one address type
  into one Envoy cluster whose backendRefs are localities; outlier detection, retries and priorities work inside
  it. So a service is one rule (`serve`) over all its endpoints.
- **Every endpoint is a `Backend` with an FQDN.** Priorities need `Backend` (`fallback: true` is priority 1),
  and a rule that mixes IP and FQDN endpoints is split into weighted clusters, which have no priorities; an IP
  is refused as an FQDN. So a replica is reached through its `ep-<name>` Service's cluster DNS name (the Service
  and EndpointSlice the endpoints stack already owns), and an external endpoint through its own host name.
- **The endpoint's Host picks the replica.** Envoy Gateway refuses per-backend path rewrites (only header
  modifiers are allowed on a backendRef), so the rule rewrites `/<ns>/<service>/` to `/` once, and the
  `HTTPRouteFilter` `urlRewrite.hostname.type: Backend` sets each request's Host to its endpoint's `hostname`:
  `<replica>.<ns>.fleet.modelplane.internal`, which the replica's cluster gateway routes to the replica
  (workloads/routing.py `fleet_host_route`), or the external endpoint's own host.
- **Health is passive.** Envoy Gateway sends one Host for a rule's active probes (the route's hostname), so a
  probe cannot name one replica behind a cluster gateway it shares with others, and a probe of the gateway
  alone would un-eject an endpoint whose engine fails (Envoy un-ejects on a passing active check). Outlier
  detection on real requests ejects the failing endpoint inline, and the retries below mean the requests that
  found it failing were not lost when it failed before reaching an engine.
"""

from __future__ import annotations

from dataclasses import dataclass

from fleet.api.gateway import Access, Envoy
from fleet.names import bounded
from workloads.front_door_mtls import client_certificate_ref
from workloads.routing import fleet_host
from workloads.service_routing import FLEET_GATEWAY, Endpoint, address_type, distribute_weights

EG = "gateway.envoyproxy.io/v1alpha1"
RULE = "serve"
TEAM_HEADER = "x-modelplane-team"
# Where the token counter leaves a response's token count for the rate limiter to charge.
USAGE_METADATA = {"namespace": "io.modelplane.usage", "key": "total_tokens"}
# A retry is safe only when the engine never saw the request: Envoy retries any method (it has no idempotency
# filter), so the triggers are the failures that happen before a request reaches an engine, and 429 (a
# saturated replica refuses before it starts). Not 5xx, 503 or `reset`: those can follow a generation that ran.
RETRY_TRIGGERS = ["connect-failure", "reset-before-request", "refused-stream", "retriable-status-codes"]
RETRY_STATUSES = [429]
REQUEST_BUFFER = "8Mi"  # a request body Envoy can still retry: prompts of a few hundred thousand tokens


@dataclass(frozen=True)
class Tiered:
    endpoint: Endpoint
    weight: int
    priority: int  # 0 serves, 1 is overflow

    @property
    def backend_name(self) -> str:
        return backend_name(self.endpoint, self.priority)


def backend_name(ep: Endpoint, priority: int) -> str:
    """`ep-<endpoint>` (as its Service), or `overflow-<endpoint>`: no endpoint name makes one the other."""
    return bounded(f"overflow-{ep.name}" if priority else f"ep-{ep.name}", 63)


def external_name(ep: Endpoint) -> str | None:
    """An external endpoint's host name; None for a replica (its address is its cluster gateway's) or an IP."""
    return ep.host if not ep.composed and address_type(ep.host) == "FQDN" else None


def endpoint_host(ep: Endpoint) -> str | None:
    """The Host a request for this endpoint carries: what the replica's cluster gateway routes on, or the
    external endpoint's own host name (its server's virtual host and TLS name). None for an endpoint addressed
    by IP (Envoy Gateway refuses an IP as a Backend's hostname): its Host is then its Service's DNS name."""
    return fleet_host(ep.namespace, ep.name) if ep.composed else external_name(ep)


def dns_name(ep: Endpoint) -> str:
    """The name Envoy resolves: the external host itself, or, for a replica or an IP address, the endpoint's
    Service in the cluster's DNS."""
    return external_name(ep) or f"{ep.service_name}.{ep.namespace}.svc.cluster.local"


def backend_object(tiered: Tiered) -> dict:
    ep = tiered.endpoint
    host = endpoint_host(ep)
    spec: dict = {"endpoints": [{"fqdn": {"hostname": dns_name(ep), "port": ep.port},
                                 **({"hostname": host} if host else {})}]}
    if ep.composed:
        # the cluster gateway's fleet listener: the front door's client certificate, SNI its fleet Host. Its
        # serving certificate is not verified (workloads/front_door_mtls.py says why)
        spec["tls"] = {"sni": host, "insecureSkipVerify": True, "clientCertificateRef": client_certificate_ref()}
    elif ep.tls:  # SNI is a host name, never an IP (RFC 6066)
        spec["tls"] = {**({"sni": host} if host else {}), "wellKnownCACertificates": "System"}
    if tiered.priority:
        spec["fallback"] = True
    return {"apiVersion": EG, "kind": "Backend",
            "metadata": {"name": tiered.backend_name, "namespace": ep.namespace,
                         "labels": {"modelplane.ai/endpoint": bounded(ep.name, 63)}},
            "spec": spec}


def tiers(service, groups: list[tuple[int, list[Endpoint]]]) -> list[Tiered]:
    """Weights within each priority (a tier's weights split its traffic; overflow's only among overflow)."""
    out: list[Tiered] = []
    for priority in (0, 1):
        chosen = [(weight, eps) for (weight, eps), entry in zip(groups, service.spec.endpoints)
                  if entry.priority == priority]
        out += [Tiered(ep, weight, priority) for ep, weight in distribute_weights(chosen)]
    return out


def endpoint_problems(service, tiered: list[Tiered]) -> list[tuple[str, str]]:
    """(field, message) for what Envoy Gateway cannot express: a path rewrite that differs per endpoint, and TLS
    to an endpoint addressed by IP."""
    out = []
    for t in tiered:
        ep = t.endpoint
        if not ep.composed and ep.tls and external_name(ep) is None:
            out.append(("spec.endpoints", (
                f"ModelEndpoint {ep.name} is https by IP ({ep.host}): Envoy Gateway takes SNI from a host name (an "
                f"IP is refused as one), so no certificate would match; address it by a name its certificate has")))
        if not ep.composed and ep.rewrite_path != "/":
            has = f"rewritePath {ep.rewrite_path!r}" if ep.rewrite_path else "no rewritePath"
            out.append(("spec.endpoints", (
                f"ModelEndpoint {ep.name} has {has}: backend Envoy rewrites every endpoint of a service to '/' in "
                f"one rule (Envoy Gateway refuses per-backend path rewrites, envoyproxy/gateway#9131); give it "
                f"rewritePath '/' (and serve it there) or use backend Traefik")))
    return out


def route_objects(service, tiered: list[Tiered], envoy: Envoy) -> list[dict]:
    """The service's HTTPRoute, its Host filter and its BackendTrafficPolicy (all in the service's namespace)."""
    name, namespace = service.name, service.namespace
    host_filter = bounded(f"{name}-endpoint-host", 63)
    rule: dict = {
        "name": RULE,
        "matches": [{"path": {"type": "PathPrefix", "value": f"/{namespace}/{name}/"}}],
        "filters": [
            {"type": "URLRewrite", "urlRewrite": {"path": {"type": "ReplacePrefixMatch", "replacePrefixMatch": "/"}}},
            # the token counter reads plain bodies: an endpoint must not compress them
            {"type": "RequestHeaderModifier", "requestHeaderModifier": {"remove": ["Accept-Encoding"]}},
            {"type": "ExtensionRef", "extensionRef": {"group": "gateway.envoyproxy.io", "kind": "HTTPRouteFilter",
                                                      "name": host_filter}},
        ],
        "timeouts": {"request": "0s"},  # generations stream for minutes: no request timeout
    }
    if tiered:
        rule["backendRefs"] = [{"group": "gateway.envoyproxy.io", "kind": "Backend", "name": t.backend_name,
                                "weight": t.weight} for t in tiered]
    labels = {"modelplane.ai/service": name}
    route = {"apiVersion": "gateway.networking.k8s.io/v1", "kind": "HTTPRoute",
             "metadata": {"name": name, "namespace": namespace, "labels": labels},
             "spec": {"parentRefs": [dict(FLEET_GATEWAY)], "rules": [rule]}}
    filter_object = {"apiVersion": EG, "kind": "HTTPRouteFilter",
                     "metadata": {"name": host_filter, "namespace": namespace, "labels": labels},
                     "spec": {"urlRewrite": {"hostname": {"type": "Backend"}}}}
    policy = {"apiVersion": EG, "kind": "BackendTrafficPolicy",
              "metadata": {"name": name, "namespace": namespace, "labels": labels},
              "spec": traffic_policy(name, envoy, overflow=any(t.priority for t in tiered))}
    return [route, filter_object, policy]


def traffic_policy(route: str, envoy: Envoy, overflow: bool) -> dict:
    """Outlier detection, retries and their budget for one service's rule."""
    ejection, retries = envoy.ejection, envoy.retries
    retry: dict = {"numRetries": retries.attempts + (1 if overflow else 0),
                   "retryOn": {"triggers": list(RETRY_TRIGGERS), "httpStatusCodes": list(RETRY_STATUSES)}}
    if overflow:
        # Envoy's previous_priorities: after `attempts + 1` tries in the fleet, the next try goes to overflow.
        retry["numAttemptsPerPriority"] = retries.attempts + 1
    if retries.perTryTimeout:
        retry["perRetry"] = {"timeout": retries.perTryTimeout}
    return {
        "targetRefs": [{"group": "gateway.networking.k8s.io", "kind": "HTTPRoute", "name": route, "sectionName": RULE}],
        "mergeType": "StrategicMerge",  # the front door's per-team limits (a Gateway policy) still apply
        "healthCheck": {
            "passive": {"consecutiveGatewayErrors": ejection.consecutiveGatewayErrors,
                        "consecutive5XxErrors": ejection.consecutive5xxErrors, "interval": "1s",
                        "baseEjectionTime": ejection.baseEjectionTime, "maxEjectionPercent": 100},
            # Envoy's default (50) spreads traffic over ejected endpoints once half are out: never here.
            "panicThreshold": 0,
        },
        "retry": retry,
        "circuitBreaker": {"maxParallelRetries": retries.maxParallel},
    }


# The front door's Lua filter (present whenever teams have limits), on the request:
# - a compressed request body is refused (415): the filter reads bodies, and a body it cannot read would escape
#   the stream check below;
# - a caller with no team (a JWT without the team claim) is refused (403): no rule would count it;
# - a streamed request gets `stream_options.include_usage: true` appended, as upstream AI gateways do, so the
#   engine reports usage (the door's key is the last one: Python's json, which vLLM and SGLang parse with, keeps
#   the last of a duplicate key), and its size is kept as the prompt's estimate (4 bytes a token).
# On the response (not an error answer), the count the rate limiter charges when the stream ends is kept up to
# date as each chunk streams past (no buffering): the engine's `usage.total_tokens` once seen, else the prompt's
# estimate plus one token per streamed event. A client that disconnects (the script is dropped mid-stream) or a
# stream that never reports usage is charged what was streamed so far, never nothing.
TOKEN_COUNTER = """\
function envoy_on_request(handle)
  local headers = handle:headers()
  local encoding = headers:get("content-encoding")
  if encoding ~= nil and not string.match(string.lower(encoding), "^%s*identity%s*$") then
    handle:respond({[":status"] = "415"}, "the gateway reads request bodies: send them uncompressed")
    return
  end
  if headers:get("x-modelplane-team") == nil then
    handle:respond({[":status"] = "403"}, "no team: the caller's credential names none")
    return
  end
  local body = handle:body()
  local size = 0
  if body ~= nil then
    size = body:length()
    local text = body:getBytes(0, size)
    local cut = string.find(text, "}%s*$")
    if cut ~= nil and string.find(text, '"stream"%s*:%s*true') then
      text = string.sub(text, 1, cut - 1) .. ',"stream_options":{"include_usage":true}}'
      body:setBytes(text)
      if headers:get("content-length") ~= nil then
        headers:replace("content-length", tostring(#text))
      end
      size = #text
    end
  end
  handle:streamInfo():dynamicMetadata():set("io.modelplane.usage", "prompt_estimate", math.ceil(size / 4))
end

function envoy_on_response(handle)
  if (tonumber(handle:headers():get(":status")) or 0) >= 400 then
    return
  end
  local metadata = handle:streamInfo():dynamicMetadata()
  local known = metadata:get("io.modelplane.usage") or {}
  local estimate = tonumber(known["prompt_estimate"]) or 0
  local total = nil
  local tail = ""
  metadata:set("io.modelplane.usage", "total_tokens", estimate)
  for chunk in handle:bodyChunks() do
    local bytes = chunk:getBytes(0, chunk:length())
    local text = tail .. bytes
    local _, events = string.gsub(string.sub(tail, -4) .. bytes, "data:", "")
    estimate = estimate + events
    for count in string.gmatch(text, '"total_tokens"%s*:%s*(%d+)') do
      total = tonumber(count)
    end
    tail = string.sub(text, -64)
    metadata:set("io.modelplane.usage", "total_tokens", total or estimate)
  end
end
"""


def front_door_objects(envoy: Envoy, namespace: str = FLEET_GATEWAY["namespace"]) -> list[dict]:
    """The fleet Gateway's own policies: its request buffer, and per-team access (who the caller is, by API key
    or JWT, and what each team may use)."""
    access = envoy.access
    gateway_ref = [{"group": "gateway.networking.k8s.io", "kind": "Gateway", "name": FLEET_GATEWAY["name"]}]
    meta = {"namespace": namespace, "labels": {"app.kubernetes.io/managed-by": "modelplane"}}
    # One ClientTrafficPolicy per Gateway. Envoy retries only a request it could buffer whole, and Envoy
    # Gateway's connection buffer is 32 KiB: a long prompt would get no retry and no overflow.
    client: dict = {"targetRefs": gateway_ref, "connection": {"bufferLimit": REQUEST_BUFFER}}
    if access is not None:
        # The team header is the authentication filter's alone: Envoy's api_key_auth replaces a value the caller
        # sent, but jwt_authn's claim_to_headers appends to it (addCopy), which would let a caller add a second
        # team and escape its limits. So the caller's copy is removed before any filter runs.
        client["headers"] = {"earlyRequestHeaders": {"remove": [TEAM_HEADER]}}
    objects: list[dict] = [{"apiVersion": EG, "kind": "ClientTrafficPolicy",
                            "metadata": {"name": "modelplane-front-door", **meta}, "spec": client}]
    if access is None:
        return objects
    objects.append({"apiVersion": EG, "kind": "SecurityPolicy", "metadata": {"name": "modelplane-access", **meta},
                    "spec": {"targetRefs": gateway_ref, **identity(access)}})
    rules = limit_rules(access)
    if rules:
        objects.append({"apiVersion": EG, "kind": "BackendTrafficPolicy", "metadata": {"name": "modelplane-limits", **meta},
                        "spec": {"targetRefs": gateway_ref, "rateLimit": {"type": "Global", "global": {"rules": rules}}}})
    if rules:  # the counter, and the checks a limit needs (a team, a body it can read)
        objects.append({"apiVersion": EG, "kind": "EnvoyExtensionPolicy", "metadata": {"name": "modelplane-usage", **meta},
                        "spec": {"targetRefs": gateway_ref, "lua": [{"type": "Inline", "inline": TOKEN_COUNTER}]}})
    return objects


def identity(access: Access) -> dict:
    """The SecurityPolicy's authentication: the caller's team ends up in TEAM_HEADER (never from the caller)."""
    if access.apiKeys is not None:
        keys = access.apiKeys
        return {"apiKeyAuth": {"credentialRefs": [{"group": "", "kind": "Secret", "name": keys.secretName}],
                               "extractFrom": [{"headers": [keys.header]}], "forwardClientIDHeader": TEAM_HEADER,
                               "sanitize": True}}
    assert access.jwt is not None  # the InferenceGateway rules require exactly one
    jwt = access.jwt
    provider: dict = {"name": "modelplane", "issuer": jwt.issuer, "remoteJWKS": {"uri": jwt.jwksUri},
                      "claimToHeaders": [{"header": TEAM_HEADER, "claim": jwt.teamClaim}]}
    if jwt.audiences:
        provider["audiences"] = list(jwt.audiences)
    return {"jwt": {"providers": [provider]}}


def limit_rules(access: Access) -> list[dict]:
    """Global rate-limit rules: per team, and per team and service. A token limit charges nothing when a
    request starts (it is refused only once the team is already over) and the response's tokens when it ends."""
    rules: list[dict] = []

    def team(name: str) -> dict:
        return {"name": TEAM_HEADER, "type": "Exact", "value": name}

    def add(selectors: list[dict], requests: int, unit: str, tokens: bool, shared: bool) -> None:
        rule: dict = {"clientSelectors": selectors, "limit": {"requests": requests, "unit": unit}}
        if shared:  # a Gateway policy's rule counts per route unless shared: a team's limit spans its services
            rule["shared"] = True
        if tokens:
            rule["cost"] = {"request": {"from": "Number", "number": 0},
                            "response": {"from": "Metadata", "metadata": dict(USAGE_METADATA)}}
        rules.append(rule)

    default = access.defaultLimit
    if default is not None:
        # one counter per team (Distinct), for every team but the listed ones (an inverted match excludes each)
        others = [{"name": TEAM_HEADER, "type": "Exact", "value": limit.team, "invert": True} for limit in access.limits]
        matches = [{"name": TEAM_HEADER, "type": "Distinct"}, *others]
        selectors = [{"headers": matches[i:i + 16]} for i in range(0, len(matches), 16)]
        if default.requestsPerMinute:
            add(selectors, default.requestsPerMinute, "Minute", tokens=False, shared=True)
        if default.tokensPerHour:
            add(selectors, default.tokensPerHour, "Hour", tokens=True, shared=True)
    for limit in access.limits:
        if limit.requestsPerMinute:
            add([{"headers": [team(limit.team)]}], limit.requestsPerMinute, "Minute", tokens=False, shared=True)
        if limit.tokensPerHour:
            add([{"headers": [team(limit.team)]}], limit.tokensPerHour, "Hour", tokens=True, shared=True)
        for model in limit.models:
            selector = [{"headers": [team(limit.team)],
                         "path": {"type": "PathPrefix", "value": f"/{model.service}/"}}]
            if model.requestsPerMinute:
                add(selector, model.requestsPerMinute, "Minute", tokens=False, shared=False)
            if model.tokensPerHour:
                add(selector, model.tokensPerHour, "Hour", tokens=True, shared=False)
    return rules
