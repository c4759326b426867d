"""The fleet data plane (InferenceGateway `backend: Envoy`), proved offline.

No Envoy installs here, so each failure case is a claim about the rendered objects that Envoy Gateway's and
Envoy's own documentation turns into behaviour. Each case cites where: [EG] is envoyproxy/gateway at v1.6.2 (the
release every fleet cluster runs, components/versions.py), [ENVOY] envoyproxy/envoy's API docs. Every object is
also checked against the v1.6.2 CRDs (workloads/crds/upstream), and the Lua token counter runs under LuaJIT,
the Lua Envoy embeds.
"""

from __future__ import annotations

import json

import pytest

from fleet.api.gateway import InferenceGateway
from tests.manifests import cluster, deployment, endpoint, errors, example_files, gateway, service
from tests.rendering import find, one, rendered
from tests.test_workloads import L4
from fleet.names import replica_name
from workloads import fleet_data_plane
from workloads.schemas import check

READY = {"conditions": [{"type": "Ready", "status": "True"}]}
TEAM_KEYS = "team-api-keys"


def envoy_gateway(**envoy):
    gw = gateway()
    gw["spec"] = {"backend": "Envoy", **({"envoy": envoy} if envoy else {})}
    return gw


def with_access(limits=None, **identity):
    return envoy_gateway(access={**(identity or {"apiKeys": {"secretName": TEAM_KEYS}}), "limits": limits or [
        {"team": "search", "requestsPerMinute": 600, "tokensPerHour": 1_000_000,
         "models": [{"service": "ml-team/qwen", "tokensPerHour": 50_000}]}]})


def external(name: str, url: str, rewrite_path: str | None = "/") -> dict:
    """A ModelEndpoint labelled provider=<name>, which a service entry selects."""
    ext = endpoint(name)
    ext["metadata"]["labels"] = {"provider": name}
    ext["spec"] = {"url": url, **({"rewritePath": rewrite_path} if rewrite_path else {})}
    return ext


def only_external(name: str) -> dict:
    """A ModelService `qwen` whose one entry selects the external endpoint `name`."""
    svc = service("qwen")
    svc["spec"]["endpoints"] = [{"selector": {"matchLabels": {"provider": name}}}]
    return svc


def two_clusters_and_overflow(gw=None, overflow=True):
    """A ModelService on two clusters (one replica each, gateways known) with an external overflow endpoint."""
    svc = service("qwen")
    svc["spec"]["endpoints"] = [{"selector": {"matchLabels": {"modelplane.ai/deployment": "qwen"}}}]
    objects = [L4, cluster("a", status={"gateway": {"address": "34.1.2.3"}, **READY}),
               cluster("b", status={"gateway": {"address": "35.1.2.3"}, **READY}),
               deployment("qwen", replicas=2), svc, gw or envoy_gateway()]
    if overflow:
        svc["spec"]["endpoints"].append({"priority": 1, "selector": {"matchLabels": {"provider": "together"}}})
        objects.append(external("together", "https://api.together.xyz/v1"))
    _, result = rendered(*objects)
    assert result.problems == [], [str(p) for p in result.problems]
    return result


def policy(result) -> dict:
    return one(result, "BackendTrafficPolicy", stack="service-ml-team.qwen")["spec"]


def backends(result) -> dict[str, dict]:
    return {b["metadata"]["name"]: b["spec"] for b in find(result, "Backend")}


# ---- the objects are what the cluster's API server takes ----

def test_every_data_plane_object_is_valid_against_the_envoy_gateway_1_6_crds():
    result = two_clusters_and_overflow(with_access())
    kinds = set()
    for _, _, obj in result.objects():
        assert check(obj) == [], (obj["kind"], obj["metadata"]["name"], check(obj))
        kinds.add(obj["kind"])
    ig = InferenceGateway.model_validate(with_access())
    front = fleet_data_plane.front_door_objects(ig.envoy)
    for obj in front:
        assert check(obj) == [], (obj["kind"], check(obj))
    assert {"HTTPRoute", "HTTPRouteFilter", "Backend", "BackendTrafficPolicy"} <= kinds
    assert [o["kind"] for o in front] == ["ClientTrafficPolicy", "SecurityPolicy", "BackendTrafficPolicy",
                                          "EnvoyExtensionPolicy"]


def test_a_mistyped_policy_field_is_refused_by_the_bundled_crd():
    """The check would catch a field Envoy Gateway 1.6 does not have (retryBudget is 1.8's)."""
    spec = policy(two_clusters_and_overflow())
    bad = {"apiVersion": fleet_data_plane.EG, "kind": "BackendTrafficPolicy",
           "metadata": {"name": "qwen", "namespace": "ml-team"},
           "spec": {**spec, "circuitBreaker": {"retryBudget": {"percent": {"numerator": 20}}}}}
    assert any("retryBudget" in p for p in check(bad))


# ---- one rule over FQDN Backends: what priorities and per-endpoint Hosts need ----

def test_the_service_is_one_rule_over_fqdn_backends_with_the_endpoint_host_set_per_backend():
    result = two_clusters_and_overflow()
    route = one(result, "HTTPRoute", stack="service-ml-team.qwen")
    [rule] = route["spec"]["rules"]
    ra, rb = replica_name("qwen", "a", 0), replica_name("qwen", "b", 0)
    assert rule["name"] == "serve" and rule["timeouts"] == {"request": "0s"}
    # [EG] HTTPRoute backendRef filters: only header modifiers (a per-backend path rewrite is refused,
    # envoyproxy/gateway#9131), so the rule rewrites once, and the Host comes from each Backend.
    assert rule["filters"][0] == {"type": "URLRewrite", "urlRewrite": {
        "path": {"type": "ReplacePrefixMatch", "replacePrefixMatch": "/"}}}
    # the token counter reads plain bodies: no endpoint may compress them
    assert rule["filters"][1] == {"type": "RequestHeaderModifier", "requestHeaderModifier": {"remove": ["Accept-Encoding"]}}
    host_filter = one(result, "HTTPRouteFilter")
    assert rule["filters"][2]["extensionRef"]["name"] == host_filter["metadata"]["name"]
    # [EG] internal/xds/translator/route.go: hostname type Backend is Envoy's auto_host_rewrite, which takes the
    # chosen endpoint's hostname ([ENVOY] Endpoint.hostname: "can be used for ... auto_host_rewrite").
    assert host_filter["spec"] == {"urlRewrite": {"hostname": {"type": "Backend"}}}
    assert all(ref["kind"] == "Backend" and "filters" not in ref for ref in rule["backendRefs"])
    specs = backends(result)
    # [EG] a rule whose backends mix IP and FQDN endpoints becomes weighted clusters, which have no priorities:
    # every endpoint is an FQDN, a replica's the cluster DNS name of its Service
    assert all(list(ep) == ["fqdn", "hostname"] for s in specs.values() for ep in s["endpoints"])
    assert specs[f"ep-{ra}"]["endpoints"][0] == {
        "fqdn": {"hostname": f"ep-{ra}.ml-team.svc.cluster.local", "port": 443},
        "hostname": f"{ra}.ml-team.fleet.modelplane.internal"}
    # the cluster gateway's fleet listener: the front door's client certificate, SNI the fleet Host (issue 65)
    assert specs[f"ep-{ra}"]["tls"] == {
        "sni": f"{ra}.ml-team.fleet.modelplane.internal", "insecureSkipVerify": True,
        "clientCertificateRef": {"group": "", "kind": "Secret", "name": "modelplane-front-door-client",
                                 "namespace": "modelplane-system"}}
    assert specs["overflow-together"]["endpoints"][0] == {
        "fqdn": {"hostname": "api.together.xyz", "port": 443}, "hostname": "api.together.xyz"}
    assert specs["overflow-together"]["tls"] == {"sni": "api.together.xyz", "wellKnownCACertificates": "System"}
    # the replica's cluster gateway routes its fleet Host to it, at any path
    fleet_routes = {r["spec"]["hostnames"][0]: r for r in find(result, "HTTPRoute") if r["spec"].get("hostnames")}
    assert set(fleet_routes) == {f"{ra}.ml-team.fleet.modelplane.internal", f"{rb}.ml-team.fleet.modelplane.internal"}
    route_a = fleet_routes[f"{ra}.ml-team.fleet.modelplane.internal"]
    assert route_a["spec"]["rules"][0]["backendRefs"] == [
        {"group": "inference.networking.k8s.io", "kind": "InferencePool", "name": f"{ra}-pool"}]
    assert [t for s, t, o in result.objects() if o is route_a] == ["a"]


def test_a_replica_service_follows_its_gateway_address_an_external_name_for_a_hostname():
    """kube-proxy serves a ClusterIP Service only from IP slices: an EKS gateway (a hostname) needs ExternalName."""
    elb = "k8s-abc-123.elb.us-west-2.amazonaws.com"
    _, result = rendered(L4, cluster("a", status={"gateway": {"address": "34.1.2.3"}, **READY}),
                         cluster("b", status={"gateway": {"address": elb}, **READY}),
                         deployment("qwen", replicas=2), service("qwen"), envoy_gateway())
    services = {s["metadata"]["name"]: s for s in find(result, "Service", stack="endpoints-ml-team")}
    ra, rb = replica_name("qwen", "a", 0), replica_name("qwen", "b", 0)
    assert services[f"ep-{ra}"]["metadata"]["annotations"] == {"modelplane.ai/gateway-of": "a"}
    assert services[f"ep-{ra}"]["spec"] == {"ports": [{"name": "backend", "port": 443, "targetPort": 443,
                                                        "protocol": "TCP"}]}
    assert services[f"ep-{rb}"]["spec"]["type"] == "ExternalName" and services[f"ep-{rb}"]["spec"]["externalName"] == elb
    # either way Envoy resolves the Service's name
    assert backends(result)[f"ep-{rb}"]["endpoints"][0]["fqdn"]["hostname"] == f"ep-{rb}.ml-team.svc.cluster.local"
    assert not find(result, "BackendTLSPolicy")  # the Backend carries TLS


def test_an_external_endpoint_addressed_by_ip_has_no_hostname_and_https_by_ip_is_refused():
    """[EG] backend.go validateHostname refuses an IP as a Backend's hostname, and SNI then comes from the Host
    (here the Service's cluster DNS name), which no certificate of an IP-addressed server has."""
    _, result = rendered(L4, cluster("a"), only_external("x"), external("x", "http://10.1.2.3:8080/v1"), envoy_gateway())
    assert result.problems == []
    assert backends(result)["ep-x"] == {"endpoints": [{"fqdn": {"hostname": "ep-x.ml-team.svc.cluster.local",
                                                                "port": 8080}}]}
    _, result = rendered(L4, cluster("a"), only_external("x"), external("x", "https://10.1.2.3:8443/v1"),
                         envoy_gateway())
    [problem] = result.problems
    assert problem.object == "ModelService/qwen" and "https by IP (10.1.2.3)" in problem.message


def test_weights_split_traffic_within_each_priority():
    svc = service("qwen")
    svc["spec"]["endpoints"] = [{"weight": 3, "selector": {"matchLabels": {"modelplane.ai/deployment": "qwen"}}},
                                {"priority": 1, "weight": 3, "selector": {"matchLabels": {"provider": "big"}}},
                                {"priority": 1, "weight": 1, "selector": {"matchLabels": {"provider": "small"}}}]
    extra = [external(name, f"https://{name}.example.com/v1") for name in ("big", "small")]
    _, result = rendered(L4, cluster("a", status={"gateway": {"address": "34.1.2.3"}, **READY}),
                         deployment("qwen"), svc, *extra, envoy_gateway())
    rule = one(result, "HTTPRoute", stack="service-ml-team.qwen")["spec"]["rules"][0]
    # the fleet's weight is alone in priority 0 (reduced to 1); overflow's 3:1 stays 3:1 among overflow
    assert {r["name"]: r["weight"] for r in rule["backendRefs"]} == {
        f"ep-{replica_name('qwen', 'a', 0)}": 1, "overflow-big": 3, "overflow-small": 1}


def test_a_tls_front_door_listens_only_on_https_and_services_have_https_addresses():
    from components.fleet_gateway import envoy_listener

    assert envoy_listener("front-door-cert") == {
        "name": "websecure", "port": 443, "protocol": "HTTPS", "allowedRoutes": {"namespaces": {"from": "All"}},
        "tls": {"mode": "Terminate", "certificateRefs": [{"group": "", "kind": "Secret", "name": "front-door-cert"}]}}
    assert envoy_listener(None)["protocol"] == "HTTP"
    _, result = rendered(L4, cluster("a"), deployment("qwen"), service("qwen"),
                         envoy_gateway(tls={"certificateSecretName": "front-door-cert"}))
    assert result.addresses["service-ml-team.qwen"] == "https://fleet-gateway.pending.modelplane.invalid/ml-team/qwen"


def test_without_access_the_front_door_only_sets_its_request_buffer():
    """[EG] ClientTrafficPolicy connection.bufferLimit: Envoy retries only a request it buffered whole, and the
    default buffer is 32 KiB."""
    [client] = fleet_data_plane.front_door_objects(InferenceGateway.model_validate(envoy_gateway()).envoy)
    assert client["kind"] == "ClientTrafficPolicy" and client["spec"]["connection"] == {"bufferLimit": "8Mi"}
    assert "headers" not in client["spec"]


# ---- the failure cases ----

def test_one_cluster_down_is_ejected_on_its_third_failure_and_its_requests_go_elsewhere():
    spec = policy(two_clusters_and_overflow(overflow=False))
    passive = spec["healthCheck"]["passive"]
    # [ENVOY] outlier detection: consecutive gateway failures (502/503/504, and a failed connect, a local-origin
    # failure counted with them unless split) eject the host inline, on the Nth failure, for baseEjectionTime x
    # the number of ejections; [EG] BTP healthCheck.passive fields.
    assert passive["consecutiveGatewayErrors"] == 3 and passive["baseEjectionTime"] == "30s"
    assert "splitExternalLocalOriginErrors" not in passive
    # [ENVOY] max_ejection_percent defaults to 10%: with two clusters it would eject neither.
    assert passive["maxEjectionPercent"] == 100
    # [ENVOY] panic threshold (default 50%): below it Envoy sends to ejected hosts too.
    assert spec["healthCheck"]["panicThreshold"] == 0
    # the requests that found it down are retried: a refused connection never reached an engine
    assert "connect-failure" in spec["retry"]["retryOn"]["triggers"]
    # no active probe: [EG] sends one Host per rule (the route's hostname), so it cannot reach one replica
    # behind a shared cluster gateway, and [ENVOY] a passing active check un-ejects an outlier
    assert "active" not in spec["healthCheck"]


def test_a_request_that_never_reached_an_engine_is_retried_once_on_another_endpoint():
    spec = policy(two_clusters_and_overflow(overflow=False))
    retry = spec["retry"]
    assert retry["numRetries"] == 1 and "numAttemptsPerPriority" not in retry
    # [ENVOY] RetryPolicy has no method filter: POST completions are retried on any trigger, so only the failures
    # before an engine saw the request, and 429 (refused before work), are triggers; never 5xx, 503 or reset.
    assert retry["retryOn"] == {"triggers": ["connect-failure", "reset-before-request", "refused-stream",
                                             "retriable-status-codes"], "httpStatusCodes": [429]}
    # [EG] route.go buildRetryPolicy adds envoy.retry_host_predicates.previous_hosts to every retry policy:
    # the retry goes to another endpoint. The budget: retries in flight per service.
    assert spec["circuitBreaker"] == {"maxParallelRetries": 32}
    # [EG] BTP targetRefs sectionName names a route rule
    assert spec["targetRefs"] == [{"group": "gateway.networking.k8s.io", "kind": "HTTPRoute", "name": "qwen",
                                   "sectionName": "serve"}]


def test_when_every_replica_is_saturated_requests_overflow_to_the_external_endpoint():
    result = two_clusters_and_overflow()
    specs = backends(result)
    # [EG] Backend.spec.fallback: priority 1, used when the others' health falls below 72% (overprovisioning 1.4)
    assert specs["overflow-together"]["fallback"] is True
    assert not any(s.get("fallback") for name, s in specs.items() if name != "overflow-together")
    retry = policy(result)["retry"]
    # [EG] retry.numAttemptsPerPriority -> [ENVOY] previous_priorities with update_frequency 2: a 429 on one
    # cluster is retried on the other, and a 429 there goes to priority 1, the overflow endpoint.
    assert retry["numAttemptsPerPriority"] == 2 and retry["numRetries"] == 2
    assert 429 in retry["retryOn"]["httpStatusCodes"]


def test_a_team_over_its_token_budget_is_answered_429():
    ig = InferenceGateway.model_validate(with_access())
    client, security, limits, usage = fleet_data_plane.front_door_objects(ig.envoy)
    rules = limits["spec"]["rateLimit"]["global"]["rules"]
    team = {"name": "x-modelplane-team", "type": "Exact", "value": "search"}
    tokens = [r for r in rules if r.get("cost") and len(r["clientSelectors"][0]) == 1]
    # shared: a Gateway policy's rule counts per route otherwise ([EG] RateLimitRule.shared), and a team's
    # limit spans every service it calls
    assert tokens == [{"clientSelectors": [{"headers": [team]}], "limit": {"requests": 1_000_000, "unit": "Hour"},
                       "shared": True,
                       # [EG] cost.request 0: checking charges nothing; cost.response from metadata is charged when
                       # the response ends, so a team already over is refused with 429 (global rate limit task)
                       "cost": {"request": {"from": "Number", "number": 0},
                                "response": {"from": "Metadata", "metadata": {"namespace": "io.modelplane.usage",
                                                                              "key": "total_tokens"}}}}]
    per_model = [r for r in rules if r["clientSelectors"][0].get("path")]
    assert per_model[0]["clientSelectors"][0]["path"] == {"type": "PathPrefix", "value": "/ml-team/qwen/"}
    assert per_model[0]["limit"] == {"requests": 50_000, "unit": "Hour"} and "shared" not in per_model[0]
    requests = [r for r in rules if "cost" not in r]
    assert requests == [{"clientSelectors": [{"headers": [team]}], "limit": {"requests": 600, "unit": "Minute"},
                         "shared": True}]
    # [EG] global limits need the EnvoyGateway rate-limit backend: the host's platform stack gets a store
    assert limits["spec"]["rateLimit"]["type"] == "Global"
    # the team header is the authenticated caller's: [EG] apiKeyAuth forwardClientIDHeader ([ENVOY]
    # api_key_auth sets it, replacing the caller's), and the caller's copy is removed before any filter
    # ([EG] ClientTrafficPolicy headers.earlyRequestHeaders), since [ENVOY] jwt_authn claim_to_headers appends
    assert security["spec"]["apiKeyAuth"]["forwardClientIDHeader"] == "x-modelplane-team"
    assert client["spec"]["headers"] == {"earlyRequestHeaders": {"remove": ["x-modelplane-team"]}}
    # the token count comes from the Lua counter, into the metadata the limit reads
    assert usage["spec"]["lua"][0]["inline"] == fleet_data_plane.TOKEN_COUNTER
    assert '"io.modelplane.usage", "total_tokens"' in fleet_data_plane.TOKEN_COUNTER


def test_a_team_not_listed_gets_the_default_limit_counted_per_team():
    listed = [{"team": f"team-{i:02d}", "requestsPerMinute": 10} for i in range(20)]
    gw = with_access(listed)
    gw["spec"]["envoy"]["access"]["defaultLimit"] = {"requestsPerMinute": 60, "tokensPerHour": 100_000}
    ig = InferenceGateway.model_validate(gw)
    front = fleet_data_plane.front_door_objects(ig.envoy)
    assert all(check(o) == [] for o in front)
    rules = front[2]["spec"]["rateLimit"]["global"]["rules"]
    defaults = [r for r in rules if r["clientSelectors"][0]["headers"][0]["type"] == "Distinct"]
    assert [(r["limit"], "cost" in r, r["shared"]) for r in defaults] == [
        ({"requests": 60, "unit": "Minute"}, False, True), ({"requests": 100_000, "unit": "Hour"}, True, True)]
    # [EG] header matches in a selector and selectors in a rule are ANDed; Distinct counts per header value, and
    # an inverted Exact match excludes one listed team: 20 teams spill into a second selector (16 per selector)
    selectors = defaults[0]["clientSelectors"]
    assert [len(s["headers"]) for s in selectors] == [16, 5]
    excluded = [h["value"] for s in selectors for h in s["headers"] if h.get("invert")]
    assert excluded == [f"team-{i:02d}" for i in range(20)]
    assert front[3]["kind"] == "EnvoyExtensionPolicy"  # the default's token limit needs the counter too


def test_a_revoked_key_is_refused_without_a_new_apply_and_no_key_is_ever_rendered():
    ig = InferenceGateway.model_validate(with_access())
    objects = fleet_data_plane.front_door_objects(ig.envoy)
    auth = objects[1]["spec"]["apiKeyAuth"]
    # [EG] apiKeyAuth: keys come from the Secret (one entry per client id) where the gateway runs, answering 401
    # for a missing or unknown key: deleting a team's entry revokes it; modelplane only names the Secret.
    assert auth["credentialRefs"] == [{"group": "", "kind": "Secret", "name": TEAM_KEYS}]
    assert auth["sanitize"] is True  # the key is not sent on to the endpoints
    assert not [o for o in objects if o["kind"] == "Secret"]
    assert not {"data", "stringData", "credentials"} & set(_keys(objects))


def _keys(node) -> list[str]:
    if isinstance(node, dict):
        return [k for k, v in node.items() for k in [k, *_keys(v)]]
    return [k for v in node for k in _keys(v)] if isinstance(node, list) else []


def test_jwt_callers_get_their_team_from_a_claim():
    ig = InferenceGateway.model_validate(with_access(jwt={"issuer": "https://idp.example.com",
                                                          "jwksUri": "https://idp.example.com/jwks", "teamClaim": "grp"}))
    [provider] = fleet_data_plane.front_door_objects(ig.envoy)[1]["spec"]["jwt"]["providers"]
    assert provider["claimToHeaders"] == [{"header": "x-modelplane-team", "claim": "grp"}]
    assert provider["remoteJWKS"] == {"uri": "https://idp.example.com/jwks"}


# ---- what Envoy Gateway cannot express is refused with the field that asks for it ----

def test_an_external_endpoint_with_its_own_path_is_refused_under_envoy():
    ext = external("x", "https://api.example.com/openai/v1", "/openai/")
    _, result = rendered(L4, cluster("a"), only_external("x"), ext, envoy_gateway())
    [problem] = result.problems
    assert problem.object == "ModelService/qwen" and "rewritePath '/openai/'" in problem.message
    assert "envoyproxy/gateway#9131" in problem.message


def test_overflow_under_traefik_is_refused_naming_the_field():
    svc = service("qwen")
    svc["spec"]["endpoints"] = [{"selector": {"matchLabels": {"modelplane.ai/deployment": "qwen"}}},
                                {"priority": 1, "selector": {"matchLabels": {"provider": "x"}}}]
    _, result = rendered(L4, cluster("a"), deployment("qwen"), svc, gateway())
    [problem] = result.problems
    assert problem.path == "spec.endpoints[1].priority" and "backend Envoy" in problem.message


@pytest.mark.parametrize("envoy,message", [
    ({"access": {"limits": []}}, "exactly one of apiKeys and jwt"),
    ({"access": {"apiKeys": {"secretName": "k"}, "jwt": {"issuer": "i", "jwksUri": "https://i/j"}}}, "exactly one"),
    ({"access": {"apiKeys": {"secretName": "k"}, "limits": [{"team": "a"}]}}, "needs requestsPerMinute"),
    ({"access": {"apiKeys": {"secretName": "k"}, "limits": [{"team": "a", "requestsPerMinute": 1},
                                                            {"team": "a", "requestsPerMinute": 2}]}}, "listed twice"),
    ({"access": {"apiKeys": {"secretName": "k"}, "limits": [{"team": "A", "requestsPerMinute": 1}]}}, "pattern"),
    ({"ejection": {"baseEjectionTime": "30 seconds"}}, "pattern"),
    ({"access": {"apiKeys": {"secretName": "k"}, "defaultLimit": {}}}, "defaultLimit needs requestsPerMinute"),
    ({"access": {"apiKeys": {"secretName": "k"}, "defaultLimit": {"requestsPerMinute": 1},
                 "limits": [{"team": f"t{i}", "requestsPerMinute": 1} for i in range(128)]}}, "at most 127 teams"),
    ({"access": {"apiKeys": {"secretName": "k"}, "defaultLimit": {"requestsPerMinute": 1, "tokensPerHour": 1},
                 "limits": [{"team": f"t{i}", "requestsPerMinute": 1} for i in range(127)]}}, "make 129 rate-limit rules"),
])
def test_bad_access_and_policy_settings_are_refused_with_their_field(envoy, message):
    found = errors(envoy_gateway(**envoy))
    assert any(message in e for e in found), found


@pytest.mark.parametrize("access", [
    {"defaultLimit": {"requestsPerMinute": 1, "tokensPerHour": 2},
     "limits": [{"team": f"t{i:03d}", "requestsPerMinute": 3} for i in range(126)]},
    {"limits": [{"team": f"t{i:02d}", "requestsPerMinute": 3, "tokensPerHour": 4,
                 "models": [{"service": f"ns/s{i}", "tokensPerHour": 5}]} for i in range(42)]},
])
def test_the_most_limits_envoy_gateway_takes_count_as_the_rules_they_make(access):
    """The rule count the validation checks is the rules' count, and a policy at the limit is one the CRD takes."""
    ig = InferenceGateway.model_validate(envoy_gateway(access={"apiKeys": {"secretName": "k"}, **access}))
    assert errors(envoy_gateway(access={"apiKeys": {"secretName": "k"}, **access})) == []
    rules = fleet_data_plane.limit_rules(ig.envoy.access)
    assert len(rules) == ig.envoy.access.rule_count() in (128, 126)
    limits = next(o for o in fleet_data_plane.front_door_objects(ig.envoy) if o["kind"] == "BackendTrafficPolicy")
    assert check(limits) == []


def test_the_envoy_block_belongs_to_backend_envoy():
    gw = gateway()
    gw["spec"]["envoy"] = {}
    assert any("the envoy block is for backend Envoy" in e for e in errors(gw))


# ---- the token counter, run under LuaJIT ----

_HANDLE = """
function(get, replace, body_text, texts, disconnect_after, set, get_metadata, respond)
  local function buffer(text)
    return {text = text, length = function(self) return #self.text end,
            getBytes = function(self, start, n) return string.sub(self.text, start + 1, start + n) end,
            setBytes = function(self, new) self.text = new end}
  end
  local body = body_text and buffer(body_text)
  local chunks = {}
  for i, text in ipairs(texts or {}) do chunks[i] = buffer(text) end
  local metadata = {set = function(self, ns, key, value) set(ns, key, value) end,
                    get = function(self, ns) return get_metadata(ns) end}
  local info = {dynamicMetadata = function(self) return metadata end}
  return {
    headers = function(self) return {get = function(self, name) return get(name) end,
                                     replace = function(self, name, value) replace(name, value) end} end,
    body = function(self) return body end,
    bodyChunks = function(self)
      local i = 0
      return function()
        i = i + 1
        if disconnect_after ~= nil and i > disconnect_after then coroutine.yield() end
        return chunks[i]
      end
    end,
    respond = function(self, h, text) respond(h[":status"], text) end,
    streamInfo = function(self) return info end,
    sent = function(self) return body and body.text end,
  }
end"""


def _door(request: dict | None = None, body: str | None = None, status: str = "200", chunks: list[str] = (),
          disconnect_after: int | None = None) -> tuple[dict, dict, list, str | None]:
    """Runs the front door's Lua filter under LuaJIT on one request and its response: (what the rate limiter
    would read from the request's metadata, the request headers after the filter, its local replies, the body
    sent on). The response phase runs only when the request was not answered by the filter."""
    from lupa import luajit21

    lua = luajit21.LuaRuntime(unpack_returned_tuples=True)
    lua.execute(fleet_data_plane.TOKEN_COUNTER)
    metadata: dict = {}
    replies: list = []
    headers = {k: v for k, v in {"x-modelplane-team": "search", **(request or {})}.items() if v is not None}
    make = lua.eval(_HANDLE)

    def get_metadata(ns):
        found = {k[1]: v for k, v in metadata.items() if k[0] == ns}
        return lua.table_from(found) if found else None

    def handle(values: dict, body, chunks, disconnect_after):
        return make(values.get, values.__setitem__, body, chunks, disconnect_after,
                    lambda ns, key, value: metadata.__setitem__((ns, key), value), get_metadata,
                    lambda status, text: replies.append((status, text)))

    request_handle = handle(headers, body, None, None)
    lua.globals().envoy_on_request(request_handle)
    if not replies:
        response = handle({":status": status}, None, lua.table_from(list(chunks)), disconnect_after)
        lua.eval("function(f, h) coroutine.wrap(f)(h) end")(lua.globals().envoy_on_response, response)
    charged = {key: value for key, value in metadata.items() if key == ("io.modelplane.usage", "total_tokens")}
    return charged, headers, replies, request_handle.sent(request_handle)


def _count_tokens(chunks: list[str], **kwargs) -> dict:
    return _door(chunks=chunks, **kwargs)[0]


def test_the_token_counter_reads_usage_from_a_whole_response():
    body = json.dumps({"id": "x", "choices": [{"message": {"content": "hi"}}],
                       "usage": {"prompt_tokens": 12, "completion_tokens": 30, "total_tokens": 42}})
    assert _count_tokens([body]) == {("io.modelplane.usage", "total_tokens"): 42}


STREAM_EVENTS = [f'data: {json.dumps({"choices": [{"delta": {"content": str(i)}}], "usage": None})}\n\n'
                 for i in range(3)]


def test_the_token_counter_reads_usage_from_a_stream_split_across_chunks():
    final = 'data: {"choices": [], "usage": {"prompt_tokens": 7, "completion_tokens": 1200, "total_tokens": 1207}}\n\n'
    cut = final.index("1207") + 2  # the number itself is split between two chunks
    assert _count_tokens(STREAM_EVENTS + [final[:cut], final[cut:], "data: [DONE]\n\n"]) == {
        ("io.modelplane.usage", "total_tokens"): 1207}


# ---- token limits cannot be escaped (issue 65) ----

def test_a_streamed_request_asks_the_engine_for_usage_and_its_content_length_follows():
    body = json.dumps({"model": "qwen", "stream": True, "stream_options": {"include_usage": False},
                       "messages": [{"role": "user", "content": "hi"}]})
    _, headers, replies, sent = _door({"content-length": str(len(body))}, body)
    assert replies == []
    # the door's key comes last: Python's json (vLLM's, SGLang's) keeps the last of a duplicate key
    assert json.loads(sent)["stream_options"] == {"include_usage": True}
    assert headers["content-length"] == str(len(sent))
    plain = json.dumps({"model": "qwen", "messages": [{"role": "user", "content": "\"stream\": true"}]})
    assert _door({}, plain)[3] == plain  # not a stream: sent as it came (a quoted "stream" in a prompt is escaped)


def test_a_stream_without_usage_is_charged_what_it_streamed():
    body = json.dumps({"model": "qwen", "stream": True, "messages": [{"role": "user", "content": "x" * 396}]})
    charged, _, _, _ = _door({}, body, chunks=[*STREAM_EVENTS, "data: [DONE]\n\n"])
    prompt = -(-(len(body) + len(',"stream_options":{"include_usage":true}')) // 4)  # 4 bytes a token
    assert charged == {("io.modelplane.usage", "total_tokens"): prompt + 4}  # one per event, [DONE] included


def test_a_client_that_disconnects_before_the_usage_chunk_is_charged_what_it_was_sent():
    body = json.dumps({"model": "qwen", "stream": True, "messages": []})
    usage = 'data: {"choices": [], "usage": {"total_tokens": 900}}\n\n'
    events = [f"data: {i}\n\n" for i in range(50)]
    charged, _, _, _ = _door({}, body, chunks=[*events, usage], disconnect_after=40)
    assert charged[("io.modelplane.usage", "total_tokens")] == -(-(len(body) + 40) // 4) + 40
    # an error answer generated nothing: it is charged nothing
    assert _door({}, body, status="429", chunks=["{}"])[0] == {}


@pytest.mark.parametrize("encoding", ["gzip", "br", "deflate, identity", "GZIP"])
def test_a_compressed_request_body_is_refused_with_415(encoding):
    _, _, replies, _ = _door({"content-encoding": encoding}, "\x1f\x8b...")
    assert [status for status, _ in replies] == ["415"]
    assert _door({"content-encoding": "identity"}, "{}")[2] == []


def test_a_caller_without_a_team_is_refused_when_teams_have_limits():
    _, _, replies, _ = _door({"x-modelplane-team": None}, "{}")
    assert [status for status, _ in replies] == ["403"]
    # a JWT front door with request limits alone still gets the check (it is the same filter)
    ig = InferenceGateway.model_validate(with_access(
        [{"team": "search", "requestsPerMinute": 60}],
        jwt={"issuer": "https://idp.example.com", "jwksUri": "https://idp.example.com/jwks"}))
    usage = [o for o in fleet_data_plane.front_door_objects(ig.envoy) if o["kind"] == "EnvoyExtensionPolicy"]
    assert [u["spec"]["lua"][0]["inline"] for u in usage] == [fleet_data_plane.TOKEN_COUNTER]


# ---- the components: what the gateway and the host's platform stacks register (Pulumi's mock runtime) ----

def _fleet(*objects):
    from tests.manifests import run

    loaded = run(*objects)
    assert loaded.errors == [], [str(p) for p in loaded.errors]
    return loaded.fleet


def test_the_envoy_front_door_is_its_own_gateway_on_the_hosts_envoy_gateway_with_a_rate_limit_store():
    import pulumi

    from components.platform import platform
    from tests.pulumi_mocks import inputs, of_type, registered

    fleet = _fleet(L4, cluster("a"), cluster("b"), with_access())
    exported: dict = {}
    resources = registered(lambda: exported.update(platform(fleet, pulumi.Config("modelplane"))), "p",
                           {"modelplane:controlPlaneCluster": "a", "modelplane:a-kubeconfig": "k",
                            "modelplane:b-kubeconfig": "k"}, ["modelplane:a-kubeconfig", "modelplane:b-kubeconfig"])
    gateways = {inputs(g)["metadata"]["name"]: inputs(g)
                for g in of_type(resources, "kubernetes:gateway.networking.k8s.io/v1:Gateway")}
    front = gateways["modelplane"]
    assert front["spec"]["gatewayClassName"] == "envoy"  # the class the host's platform stack created
    # its own EnvoyProxy: its load balancer Service must not take the workload gateway's name
    assert front["spec"]["infrastructure"] == {"parametersRef": {
        "group": "gateway.envoyproxy.io", "kind": "EnvoyProxy", "name": "modelplane-fleet"}}
    proxies = {inputs(p)["metadata"]["name"]: inputs(p) for p in of_type(
        resources, "kubernetes:gateway.envoyproxy.io/v1alpha1:EnvoyProxy")}
    services = {name: p["spec"]["provider"]["kubernetes"]["envoyService"]["name"] for name, p in proxies.items()}
    assert services["modelplane-fleet"] != services["inference-gateway"]
    assert proxies["modelplane-fleet"]["metadata"]["namespace"] == front["metadata"]["namespace"]
    assert not [r for r in of_type(resources, "kubernetes:helm.sh/v3:Release") if inputs(r)["name"] == "mp-traefik"]
    # every platform stack publishes its replica Services' spec for the operator's Programs
    assert all("gatewayServiceSpec" in exported[c] for c in ("a", "b"))
    # the front door's access objects, applied after the Gateway
    groups = [inputs(g)["objs"] for g in of_type(resources, "kubernetes:yaml/v2:ConfigGroup")
              if any(o.get("kind") == "SecurityPolicy" for o in inputs(g)["objs"])]
    assert [o["kind"] for o in groups[0]] == ["ClientTrafficPolicy", "SecurityPolicy", "BackendTrafficPolicy",
                                              "EnvoyExtensionPolicy"]
    # only the host's Envoy Gateway counts global rate limits, in a store of its own
    eg = {r.name: inputs(r)["values"]["config"]["envoyGateway"] for r in of_type(
        resources, "kubernetes:helm.sh/v3:Release") if inputs(r)["name"] == "mp-envoy-gateway"}
    assert eg["a-serving-envoy-gateway"]["rateLimit"] == {"backend": {"type": "Redis", "redis": {
        "url": "modelplane-rate-limit.envoy-gateway-system.svc.cluster.local:6379"}}}
    assert "rateLimit" not in eg["b-serving-envoy-gateway"]
    [store] = of_type(resources, "kubernetes:apps/v1:Deployment")
    assert inputs(store)["metadata"] == {"name": "modelplane-rate-limit", "namespace": "envoy-gateway-system",
                                         "labels": {"app.kubernetes.io/name": "modelplane-rate-limit"}}
    # no password: only Envoy Gateway's rate-limit pods reach it ([EG] ratelimit/resource.go labels them)
    [policy] = of_type(resources, "kubernetes:networking.k8s.io/v1:NetworkPolicy")
    assert inputs(policy)["spec"]["ingress"] == [{
        "from": [{"podSelector": {"matchLabels": {"app.kubernetes.io/name": "envoy-ratelimit"}}}],
        "ports": [{"protocol": "TCP", "port": 6379}]}]


def test_an_envoy_front_door_on_a_separate_control_plane_cluster_is_refused():
    import pulumi

    from components.platform import platform
    from automation.checks.offline import OfflineRunError
    from tests.pulumi_mocks import registered

    fleet = _fleet(L4, cluster("a"), envoy_gateway())
    with pytest.raises(OfflineRunError, match="backend Envoy serves the front door with the Envoy Gateway"):
        registered(lambda: platform(fleet, pulumi.Config("modelplane")), "g",
                   {"modelplane:gatewayOnly": "true", "modelplane:controlPlaneKubeconfig": "kubeconfig"})


def test_the_documented_example_validates_and_renders_with_the_example_fleet():
    """docs/composition.md's example, in place of the examples' Traefik gateway and qwen3-8b service."""
    import pathlib
    import re

    import yaml

    from tests.manifests import run

    root = pathlib.Path(__file__).resolve().parent.parent
    section = (root / "docs" / "composition.md").read_text().split("## Fleet data plane", 1)[1]
    example = list(yaml.safe_load_all(re.search(r"```yaml\n(.*?)```", section, re.S).group(1)))
    fleet_docs = [d for p in example_files() for d in yaml.safe_load_all(p.read_text())
                  if isinstance(d, dict) and d.get("kind") != "InferenceGateway"
                  and not (d.get("kind") == "ModelService" and d["metadata"]["name"] == "qwen3-8b")]
    loaded = run(*fleet_docs, *example)
    assert loaded.errors == [], [str(p) for p in loaded.errors]
    from components.args import control_plane_cluster
    from fleet.scheduler import schedule
    from workloads.render import render

    result = render(loaded.fleet, schedule(loaded.fleet), control_plane_cluster(loaded.fleet, None))
    assert result.problems == [], [str(p) for p in result.problems]
    overflow = [b for b in find(result, "Backend") if b["spec"].get("fallback")]
    assert [b["metadata"]["name"] for b in overflow] == ["overflow-frontier-api"]
    assert all(check(o) == [] for _, _, o in result.objects())


# ---- through the program-running double: what `up` applies, and an EKS-style gateway address ----

def test_up_applies_the_envoy_front_door_and_a_hostname_gateway_turns_a_replica_service_into_an_external_name(
        tmp_path, monkeypatch, capsys):
    from automation.cli import main
    from tests import pulumi_double
    from tests.test_lifecycle import make_driver, set_gateway_address

    driver = make_driver(tmp_path, monkeypatch)
    front_door = with_access()
    front_door["spec"]["envoy"]["tls"] = {"certificateSecretName": "front-door-cert"}
    driver.docs = [front_door if d["kind"] == "InferenceGateway" else d for d in driver.docs]
    driver.control(resourceOutputs={"gateway": {"kubernetes:gateway.networking.k8s.io/v1:Gateway": {
        "status": {"addresses": [{"value": "203.0.113.7"}]}}}})
    for d in driver.docs:  # qwen3-8b overflows to the examples' external endpoint
        if d["kind"] == "ModelService" and d["metadata"]["name"] == "qwen3-8b":
            d["spec"]["endpoints"].append({"name": "external", "priority": 1, "selector": {"matchLabels": {"provider": "external"}}})
    assert driver.up() == 0, capsys.readouterr().err
    backend = driver.work / ".modelplane" / "backend"
    gateway = pulumi_double.resources(backend, "modelplane", "gateway")
    [front] = [r["inputs"] for r in gateway if r["type"] == "kubernetes:gateway.networking.k8s.io/v1:Gateway"]
    assert front["spec"]["gatewayClassName"] == "envoy"
    applied = [o["kind"] for r in gateway if r["type"] == "kubernetes:yaml/v2:ConfigGroup" for o in r["inputs"]["objs"]]
    assert {"ClientTrafficPolicy", "SecurityPolicy", "BackendTrafficPolicy", "EnvoyExtensionPolicy"} <= set(applied)
    host = next(c for c in ("eks-us-west", "gke-us-central", "byo-eu")
                if any(r["type"] == "kubernetes:apps/v1:Deployment" and r["inputs"]["metadata"]["name"] == "modelplane-rate-limit"
                       for r in pulumi_double.resources(backend, "modelplane", f"platform-{c}")))
    assert host == "eks-us-west"  # the control plane's host, and only it, runs the rate-limit store
    # the gateway stack recorded its client CA, and the platform stacks ran again in the same `up`: every cluster
    # Gateway has its mutually authenticated fleet listener (issue 65)
    for c in ("eks-us-west", "gke-us-central", "byo-eu"):
        platform = pulumi_double.resources(backend, "modelplane", f"platform-{c}")
        [cluster_gateway] = [r["inputs"] for r in platform if r["type"] == "kubernetes:gateway.networking.k8s.io/v1:Gateway"]
        assert [listener["name"] for listener in cluster_gateway["spec"]["listeners"]] == ["http", "fleet"], c
        assert any(r["type"].endswith(":ClientTrafficPolicy") for r in platform), c
    workloads = pulumi_double.resources(backend, "modelplane-workloads", "endpoints-ml-team")
    objs = [o for r in workloads if r["type"] == "kubernetes:yaml/v2:ConfigGroup" for o in r["inputs"]["objs"]]
    assert any(o["kind"] == "Backend" and o["spec"].get("fallback") for o in objs)
    on_gke = [o for o in objs if o["kind"] == "Service"
              and (o["metadata"].get("annotations") or {}).get("modelplane.ai/gateway-of") == "gke-us-central"]
    assert on_gke and all(s["spec"].get("type") is None for s in on_gke)  # an IP: ClusterIP over the slice
    # the cluster's gateway comes back as a hostname (a re-created load balancer): only the endpoints stack runs,
    # and its replica Services become ExternalNames of it
    set_gateway_address(backend, "gke-us-central", "k8s-gke-lb.example.com")
    assert driver.up() == 0, capsys.readouterr().err
    assert driver.ran("up") == ["endpoints-ml-team"]
    workloads = pulumi_double.resources(backend, "modelplane-workloads", "endpoints-ml-team")
    services = [o for r in workloads if r["type"] == "kubernetes:yaml/v2:ConfigGroup" for o in r["inputs"]["objs"]
                if o["kind"] == "Service" and (o["metadata"].get("annotations") or {}).get("modelplane.ai/gateway-of")
                == "gke-us-central"]
    assert services and all(s["spec"]["type"] == "ExternalName" and s["spec"]["externalName"] == "k8s-gke-lb.example.com"
                            for s in services)
    capsys.readouterr()
    assert main(["status", "-f", driver.fleet(), "-o", "json"]) == 0
    services = {s["name"]: s["address"] for s in json.loads(capsys.readouterr().out)["services"]}
    assert services["ml-team/qwen3-8b"] == "https://203.0.113.7/ml-team/qwen3-8b"  # HTTPS only
    assert front["spec"]["listeners"][0]["protocol"] == "HTTPS"


def test_the_operators_programs_take_a_replica_services_spec_from_its_platform_stack(tmp_path):
    """The operator's Programs cannot branch on the address: the platform stack outputs the Service's spec
    (`gatewayServiceSpec`, the same function the laptop's programs apply)."""
    import yaml

    from automation.operator.export import export
    from automation.planning.stacks import desired_state
    from fleet.validate import load_fleet
    from tests.test_operator import OPTIONS, TOKEN, by_stack

    docs = [d for p in example_files() for d in yaml.safe_load_all(p.read_text())
            if d and d.get("kind") != "InferenceGateway"]
    docs += [envoy_gateway(), {"apiVersion": "v1", "kind": "Secret", "metadata": {"name": "hf-token", "namespace": "ml-team"},
                               "stringData": {"HF_TOKEN": TOKEN}}]
    (tmp_path / "fleet.yaml").write_text(yaml.safe_dump_all(docs))
    desired = desired_state(load_fleet([str(tmp_path / "fleet.yaml")]).fleet, control_plane="byo-eu")
    program = by_stack(export(desired, OPTIONS), "Program")["endpoints-ml-team"]["program"]
    services = [o for r in program["resources"].values() if r["type"] == "kubernetes:yaml/v2:ConfigGroup"
                for o in r["properties"]["objs"] if o["kind"] == "Service"
                and "modelplane.ai/gateway-of" in (o["metadata"].get("annotations") or {})]
    assert services
    for s in services:
        cluster = s["metadata"]["annotations"]["modelplane.ai/gateway-of"]
        assert s["spec"] == f'${{{cluster}-gateway.outputs["gatewayServiceSpec"]}}'
        assert f"{cluster}-gateway" in program["resources"]


def test_turning_a_fleet_to_envoy_runs_its_platform_stacks_once_more_and_traefik_fleets_keep_theirs():
    """The operator's Programs read `gatewayServiceSpec` from every platform stack an Envoy fleet's replicas are
    on; a platform stack applied before that output existed must run again, and only then."""
    from automation.planning.stacks import platform_specs

    traefik = _fleet(L4, cluster("a"), cluster("b"), gateway())
    envoy = _fleet(L4, cluster("a"), cluster("b"), envoy_gateway())
    before, after = platform_specs(traefik, "a"), platform_specs(envoy, "a")
    platforms = [name for name in before if name.startswith("platform-")]
    assert platforms == ["platform-a", "platform-b"]
    assert all(before[n].fingerprint != after[n].fingerprint for n in platforms)
    assert all("frontDoor" not in before[n].payload.fingerprinted() for n in platforms)


def test_traefik_fleets_keep_their_gateway_fingerprint_and_model_digests():
    """Adding backend Envoy re-ran nothing of a Traefik fleet: its gateway arguments fingerprint as before, and its
    model stacks' input digests carry no fleet-Host line (an Envoy fleet's do, so their routes get composed)."""
    from components.args import gateway_args
    from fleet.scheduler import schedule
    from workloads.render import model_inputs

    traefik = _fleet(L4, cluster("a"), deployment("qwen"), gateway())
    envoy = _fleet(L4, cluster("a"), deployment("qwen"), envoy_gateway())
    assert set(gateway_args(traefik, "a").fingerprinted()) == {
        "name", "traefik_version", "metallb_address_pool", "load_balancer", "aggregated_api"}
    assert model_inputs(traefik, schedule(traefik)) != model_inputs(envoy, schedule(envoy))
