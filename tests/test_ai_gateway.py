"""The v0.5 fleet gateway (workloads/ai_gateway.py): `up` through the program-running double applies it on the
cluster it names and `status` prints its base URLs; its objects are held to Envoy AI Gateway's and Envoy Gateway's
CRDs; each runtime behaviour is held, case by case, to the reference's cited upstream source
(/work/shared/reference/modelplane-v0.5.md: [T-IG] the gateway's composition test, [F-MRT] the ModelRoute
function, [F-MS] the ModelService function)."""

from __future__ import annotations

import json

import pytest

from tests.manifests import mutate, run

GATEWAY = "kubernetes:gateway.networking.k8s.io/v1:Gateway"


def v05_gateway(name="public", cluster_name="byo-eu", **spec) -> dict:
    return {"apiVersion": "modelplane.ai/v1alpha1", "kind": "InferenceGateway", "metadata": {"name": name},
            "spec": {"clusterName": cluster_name, **spec}}


def _config_objects(resources: list[dict]) -> list[dict]:
    return [o for r in resources if r["type"] == "kubernetes:yaml/v2:ConfigGroup" for o in r["inputs"]["objs"]]


# ---- the done-when path: up through the program-running double, then status -------------------------------

def test_up_applies_a_v05_gateway_on_its_existing_cluster_and_status_prints_its_base_urls(tmp_path, monkeypatch,
                                                                                           capsys):
    from automation.cli import main
    from tests import pulumi_double
    from tests.test_lifecycle import make_driver

    driver = make_driver(tmp_path, monkeypatch)
    driver.docs = [v05_gateway() if d["kind"] == "InferenceGateway" else d for d in driver.docs]
    driver.control(resourceOutputs={"gateway": {GATEWAY: {"status": {"addresses": [{"value": "203.0.113.7"}]}}}})
    assert driver.up() == 0, capsys.readouterr().err
    backend = driver.work / ".modelplane" / "backend"
    gateway = pulumi_double.resources(backend, "modelplane", "gateway")
    [front] = [r["inputs"] for r in gateway if r["type"] == GATEWAY]
    assert front["spec"]["gatewayClassName"] == "envoy"
    assert [listener["name"] for listener in front["spec"]["listeners"]] == ["http"]  # no tls: plain HTTP
    applied = {o["kind"] for o in _config_objects(gateway)}
    assert {"ClientTrafficPolicy", "BackendTrafficPolicy", "HTTPRouteFilter", "HTTPRoute"} <= applied
    [proxy] = [r["inputs"] for r in gateway if r["type"].endswith(":EnvoyProxy")]
    assert proxy["spec"]["telemetry"]["accessLog"]["settings"][0]["format"]["type"] == "JSON"
    # the gateway runs on the cluster it names: its platform stack is the gateway stack's host (the only one with
    # trust-manager, which publishes the client CA), and every cluster's fleet listener accepts that CA
    assert driver.recorded()["gateway"]["outputs"]["address"] == "203.0.113.7"
    for c in ("eks-us-west", "gke-us-central", "byo-eu"):
        platform = pulumi_double.resources(backend, "modelplane", f"platform-{c}")
        [cluster_gateway] = [r["inputs"] for r in platform if r["type"] == GATEWAY]
        assert [listener["name"] for listener in cluster_gateway["spec"]["listeners"]] == ["http", "fleet"], c
    # one AIGatewayRoute per service, matching its model name exactly, on the gateway's http listener
    route = [o for o in _config_objects(pulumi_double.resources(backend, "modelplane-workloads", "service-ml-team.qwen3-8b"))
             if o["kind"] == "AIGatewayRoute"]
    assert len(route) == 1 and route[0]["spec"]["rules"][0]["matches"] == [
        {"headers": [{"type": "Exact", "name": "x-ai-eg-model", "value": "ml-team/qwen3-8b"}]}]
    assert route[0]["spec"]["parentRefs"] == [{"name": "modelplane", "namespace": "modelplane-system",
                                               "sectionName": "http"}]
    endpoints = _config_objects(pulumi_double.resources(backend, "modelplane-workloads", "endpoints-ml-team"))
    backends = {o["metadata"]["name"] for o in endpoints if o["kind"] == "AIServiceBackend"}
    assert backends == {ref["name"] for ref in route[0]["spec"]["rules"][0]["backendRefs"]} | {
        ref["name"] for s in ("kimi-k2", "qwen3-coder") for o in _config_objects(pulumi_double.resources(
            backend, "modelplane-workloads", f"service-ml-team.{s}")) if o["kind"] == "AIGatewayRoute"
        for ref in o["spec"]["rules"][0]["backendRefs"]}
    capsys.readouterr()
    assert main(["status", "-f", driver.fleet(), "-o", "json"]) == 0
    shown = json.loads(capsys.readouterr().out)
    assert shown["controlPlane"] == "byo-eu"
    assert shown["gateways"] == [{"name": "public", "cluster": "byo-eu", "address": "203.0.113.7", "endpoints": {
        "openAI": "http://203.0.113.7/v1", "anthropic": "http://203.0.113.7/anthropic/v1"}}]
    assert {s["name"]: s["address"] for s in shown["services"]}["ml-team/qwen3-8b"] == "http://203.0.113.7/v1"
    assert main(["status", "-f", driver.fleet()]) == 0
    assert ("gateway public on byo-eu: openAI http://203.0.113.7/v1, anthropic http://203.0.113.7/anthropic/v1"
            in capsys.readouterr().out)


# ---- what a route renders, case by case ------------------------------------------------------------------------

API = "modelplane.ai/v1alpha1"


def external(name, origin="https://api.together.xyz", labels=None, **spec) -> dict:
    return {"apiVersion": API, "kind": "ModelEndpoint",
            "metadata": {"name": name, "namespace": "ml-team", "labels": labels or {"provider": name}},
            "spec": {"origin": origin, **spec}}


def v05_service(name="qwen", entries=None, labels=None, **spec) -> dict:
    return {"apiVersion": API, "kind": "ModelService",
            "metadata": {"name": name, "namespace": "ml-team", **({"labels": labels} if labels else {})},
            "spec": {"endpoints": entries or [{"name": "stable",
                                               "selector": {"matchLabels": {"modelplane.ai/deployment": "qwen"}}}],
                     **spec}}


def entry(name, priority=0, weight=1, **labels) -> dict:
    return {"name": name, "priority": priority, "weight": weight,
            "selector": {"matchLabels": labels or {"provider": name}}}


def rendered(*objects, gateway=None, replicas=2):
    from fleet.scheduler import schedule
    from tests.manifests import cluster, deployment, gpu_class
    from workloads.render import render

    loaded = run(gpu_class(), cluster("c1", pools=(("gpu", "l4", 4),)), deployment("qwen", replicas=replicas),
                 gateway or v05_gateway(cluster_name="c1"), *objects)
    assert loaded.errors == [], [str(p) for p in loaded.errors]
    return render(loaded.fleet, schedule(loaded.fleet), "c1")


def of_kind(result, kind: str) -> list[dict]:
    return [o for _, _, o in result.objects() if o["kind"] == kind]


def the_route(result, name="qwen") -> dict:
    [route] = [o for o in of_kind(result, "AIGatewayRoute") if o["metadata"]["name"] == name]
    return route


def refs(result, name="qwen") -> dict[str, dict]:
    return {r["name"]: r for r in the_route(result, name)["spec"]["rules"][0]["backendRefs"]}


def test_every_v05_gateway_object_is_valid_against_the_envoy_ai_gateway_and_envoy_gateway_crds():
    from components.args import gateway_args
    from tests.manifests import cluster, gpu_class
    from workloads.schemas import check

    anthropic = external("claude", "https://api.anthropic.com", api={"schema": "Anthropic"},
                         credential={"method": "APIKey", "apiKey": {"secretRef": {"name": "anthropic"}}})
    together = external("together", model="Qwen/Qwen3-8B",
                        credential={"method": "APIKey", "apiKey": {"secretRef": {"name": "together"}}})
    gw = v05_gateway(cluster_name="c1", tls={"certificateRefs": [{"name": "a"}, {"name": "b"}]},
                     auth={"method": "APIKey", "apiKey": {"secretSelector": {"matchLabels": {"team": "x"}}}})
    # the certificates, given with the fleet (the gateway stack copies them to c1)
    certificates = [{"apiVersion": "v1", "kind": "Secret", "type": "kubernetes.io/tls",
                     "metadata": {"name": n, "namespace": "modelplane-system"},
                     "stringData": {"tls.crt": "pem", "tls.key": "pem"}} for n in ("a", "b")]
    result = rendered(v05_service(entries=[entry("stable", **{"modelplane.ai/deployment": "qwen"}),
                                           entry("together", 1), entry("claude", 2)]),
                      anthropic, together, *certificates, gateway=gw)
    assert result.problems == [], [str(p) for p in result.problems]
    kinds = {o["kind"] for _, _, o in result.objects()}
    assert {"AIGatewayRoute", "AIServiceBackend", "BackendSecurityPolicy", "Backend"} <= kinds
    assert [m for _, _, o in result.objects() for m in check(o)] == []
    loaded = run(gpu_class(), cluster("c1"), gw, *certificates)
    args = gateway_args(loaded.fleet, "c1")
    assert args is not None and [m for o in args.front_door for m in check(o)] == []
    assert {o["kind"] for o in args.front_door} == {"ClientTrafficPolicy", "BackendTrafficPolicy", "HTTPRouteFilter",
                                                    "HTTPRoute", "SecurityPolicy", "Secret"}
    # a mistyped field is refused by the bundled CRD: the check reads Envoy AI Gateway's schema
    route = the_route(result)
    assert check(mutate(route, "spec.rules[0].backendRefs[0].priority", -1))
    assert check(mutate(route, "spec.rules[0].matches[0].headers[0].type", "Prefix"))


def test_the_route_matches_the_model_name_exactly_and_lists_the_service_under_its_namespace():
    """[F-MRT] one rule, header x-ai-eg-model Exact <ns>/<service>; [X-IG] /v1/models lists it, owned_by its ns."""
    rule = the_route(rendered(v05_service()))["spec"]["rules"][0]
    assert rule["matches"] == [{"headers": [{"type": "Exact", "name": "x-ai-eg-model", "value": "ml-team/qwen"}]}]
    assert rule["modelsOwnedBy"] == "ml-team"


def test_token_counts_are_the_routes_request_costs():
    """[F-MRT, D-FG] InputToken, OutputToken, TotalToken: the usage record's counts, streams included."""
    costs = the_route(rendered(v05_service()))["spec"]["llmRequestCosts"]
    assert costs == [{"metadataKey": "input_tokens", "type": "InputToken"},
                     {"metadataKey": "output_tokens", "type": "OutputToken"},
                     {"metadataKey": "total_tokens", "type": "TotalToken"}]


@pytest.mark.parametrize("timeouts, request_timeout", [
    (None, "300s"),  # [X-MS] the defaults apply: AI Gateway would otherwise default to 60 s
    ({"request": "90s"}, "90s"),
    ({"request": "1h30m", "idle": "0s"}, "1h30m"),
])
def test_the_request_timeout_is_the_services(timeouts, request_timeout):
    spec = {"timeouts": timeouts} if timeouts is not None else {}
    rule = the_route(rendered(v05_service(**spec)))["spec"]["rules"][0]
    assert rule["timeouts"] == {"request": request_timeout}


@pytest.mark.parametrize("priorities, expected", [
    ((0, 1), {"a": 0, "b": 1}),
    ((3, 7), {"a": 0, "b": 1}),  # [F-MRT] gaps collapse
    ((0, 0), {"a": 0, "b": 0}),
    ((5, 2), {"a": 1, "b": 0}),
    ((63, 0), {"a": 1, "b": 0}),
])
def test_priorities_are_renumbered_over_the_tiers_that_have_an_endpoint(priorities, expected):
    entries = [entry("a", priorities[0]), entry("b", priorities[1]), entry("empty", 10)]  # no endpoint: no tier
    result = rendered(v05_service(entries=entries), external("a", "https://a.example.com"),
                      external("b", "https://b.example.com"))
    assert {name.removeprefix("ep-"): r["priority"] for name, r in refs(result).items()} == expected


@pytest.mark.parametrize("weights, expected", [
    ((1, 1), {"a1": 1, "a2": 1, "b": 2}),  # [F-MRT] an entry's weight spread over its endpoints
    ((3, 1), {"a1": 2, "a2": 1, "b": 1}),  # the remainder to the first by name: a's share stays 3 to b's 1
    ((1, 3), {"a1": 1, "a2": 1, "b": 6}),
])
def test_weights_spread_each_entrys_share_over_its_endpoints(weights, expected):
    entries = [entry("a", weight=weights[0], group="a"), entry("b", weight=weights[1], group="b")]
    result = rendered(v05_service(entries=entries), external("a1", "https://a1.example.com", {"group": "a"}),
                      external("a2", "https://a2.example.com", {"group": "a"}),
                      external("b", "https://b.example.com", {"group": "b"}))
    assert {name.removeprefix("ep-"): r["weight"] for name, r in refs(result).items()} == expected


def test_each_backend_gets_its_model_prefix_and_schema():
    """[F-MRT, X-ME] modelNameOverride = the endpoint's model (unset: passed through; a replica: <ns>/<deployment>);
    AIServiceBackend schema and prefix; the caller header removed for a backend Modelplane does not operate."""
    groq = external("groq", "https://api.groq.com", api={"prefix": "/openai/v1"}, model="llama-3.3-70b")
    claude = external("claude", "https://api.anthropic.com", api={"schema": "Anthropic"})
    result = rendered(v05_service(entries=[entry("stable", **{"modelplane.ai/deployment": "qwen"}), entry("groq", 1),
                                           entry("claude", 2)]), groq, claude)
    found = refs(result)
    replicas = [n for n in found if n.startswith("ep-qwen-")]
    assert len(replicas) == 2 and all(found[n]["modelNameOverride"] == "ml-team/qwen" for n in replicas)
    assert found["ep-groq"]["modelNameOverride"] == "llama-3.3-70b" and "modelNameOverride" not in found["ep-claude"]
    backends = {o["metadata"]["name"]: o["spec"] for o in of_kind(result, "AIServiceBackend")}
    assert backends["ep-groq"]["schema"] == {"name": "OpenAI", "prefix": "/openai/v1"}
    assert backends["ep-claude"]["schema"] == {"name": "Anthropic", "prefix": "/v1"}
    assert backends["ep-groq"]["headerMutation"] == {"remove": ["x-modelplane-caller"]}
    for name in replicas:  # a replica: its path on its cluster gateway, the caller kept
        assert backends[name]["schema"]["prefix"] == f"/ml-team/{name.removeprefix('ep-')}/v1"
        assert "headerMutation" not in backends[name]


@pytest.mark.parametrize("schema, kind, field", [("OpenAI", "APIKey", "apiKey"),
                                                 ("Anthropic", "AnthropicAPIKey", "anthropicAPIKey")])
def test_a_credential_is_attached_as_the_backends_schema_expects(schema, kind, field):
    """[F-MRT] Authorization: Bearer for OpenAI, x-api-key for Anthropic (Envoy AI Gateway's two policy types)."""
    ext = external("p", "https://p.example.com", api={"schema": schema},
                   credential={"method": "APIKey", "apiKey": {"secretRef": {"name": "p-key"}}})
    [policy] = of_kind(rendered(v05_service(entries=[entry("p")]), ext), "BackendSecurityPolicy")
    assert policy["spec"] == {"type": kind, field: {"secretRef": {"name": "p-key", "namespace": "ml-team"}},
                              "targetRefs": [{"group": "aigateway.envoyproxy.io", "kind": "AIServiceBackend",
                                              "name": "ep-p"}]}


def test_a_credential_under_another_key_is_refused_with_the_reason():
    keyed = external("p", "https://p.example.com",
                     credential={"method": "APIKey", "apiKey": {"secretRef": {"name": "p-key", "key": "token"}}})
    found = [str(p) for p in rendered(v05_service(entries=[entry("p")]), keyed).problems]
    assert any("credential key 'token' of Secret p-key" in p for p in found), found


@pytest.mark.parametrize("selector, labels, served", [
    (None, None, True),  # [X-IG] absent: every service
    ({"tier": "public"}, {"tier": "public"}, True),
    ({"tier": "public"}, {"tier": "internal"}, False),
    ({"tier": "public"}, None, False),
    ({"tier": "public", "region": "eu"}, {"tier": "public"}, False),
])
def test_the_service_selector_decides_which_services_get_a_route(selector, labels, served):
    gw = v05_gateway(cluster_name="c1", **({"serviceSelector": {"matchLabels": selector}} if selector else {}))
    result = rendered(v05_service(labels=labels), gateway=gw)
    assert bool(of_kind(result, "AIGatewayRoute")) == served
    assert ("service-ml-team.qwen" in result.stacks) == served


def test_a_route_attaches_to_https_only_when_the_gateway_has_tls():
    """[F-MRT] the http listener, or https when the gateway has TLS."""
    for tls, section in ((None, "http"), ({"certificateRefs": [{"name": "cert"}]}, "https")):
        gw = v05_gateway(cluster_name="c1", **({"tls": tls} if tls else {}))
        assert the_route(rendered(v05_service(), gateway=gw))["spec"]["parentRefs"][0]["sectionName"] == section


# ---- the gateway's own objects -----------------------------------------------------------------------------

def _gateway_args(gw, *objects):
    from components.args import gateway_args
    from tests.manifests import cluster, gpu_class

    loaded = run(gpu_class(), cluster("c1"), gw, *objects)
    assert loaded.errors == [], [str(p) for p in loaded.errors]
    args = gateway_args(loaded.fleet, "c1")
    assert args is not None
    return args


def _front(args, kind, name=None) -> dict:
    [found] = [o for o in args.front_door if o["kind"] == kind and (name is None or o["metadata"]["name"] == name)]
    return found


def test_failover_is_upstreams():
    """[T-IG] 3 retries, 2 per priority, on connect-failure, refused-stream, reset and 429/503; ejection after 5
    consecutive 5xx (interval 5 s, base 30 s, up to 100 %); panic mode off."""
    spec = _front(_gateway_args(v05_gateway(cluster_name="c1")), "BackendTrafficPolicy")["spec"]
    assert spec["retry"] == {"numRetries": 3, "numAttemptsPerPriority": 2, "retryOn": {
        "triggers": ["connect-failure", "refused-stream", "reset", "retriable-status-codes"],
        "httpStatusCodes": [429, 503]}}
    assert spec["healthCheck"] == {"passive": {"consecutive5XxErrors": 5, "interval": "5s", "baseEjectionTime": "30s",
                                               "maxEjectionPercent": 100}, "panicThreshold": 0}
    assert spec["targetRefs"] == [{"group": "gateway.networking.k8s.io", "kind": "Gateway", "name": "modelplane"}]


def test_healthz_answers_ok_on_plain_http_without_a_key():
    """[T-IG] a /healthz direct response (200, {"status":"ok"}) on the http listener, exempt from caller auth."""
    gw = v05_gateway(cluster_name="c1", tls={"certificateRefs": [{"name": "cert"}]},
                     auth={"method": "APIKey", "apiKey": {"secretSelector": {"matchLabels": {"callers": "yes"}}}})
    args = _gateway_args(gw)
    assert _front(args, "HTTPRouteFilter")["spec"]["directResponse"] == {
        "statusCode": 200, "contentType": "application/json", "body": {"type": "Inline", "inline": '{"status":"ok"}'}}
    route = _front(args, "HTTPRoute", "modelplane-healthz")["spec"]
    assert route["parentRefs"][0]["sectionName"] == "http"
    assert route["rules"][0]["matches"] == [{"path": {"type": "Exact", "value": "/healthz"}}]
    exempt = _front(args, "SecurityPolicy", "modelplane-healthz")["spec"]
    assert exempt["targetRefs"][0]["name"] == "modelplane-healthz" and "apiKeyAuth" not in exempt
    # with TLS everything else on port 80 is redirected to HTTPS (301)
    redirect = _front(args, "HTTPRoute", "modelplane-https-redirect")["spec"]["rules"][0]["filters"]
    assert redirect == [{"type": "RequestRedirect", "requestRedirect": {"scheme": "https", "statusCode": 301}}]
    assert [(li["name"], li["port"], li["protocol"]) for li in args.listeners] == [("http", 80, "HTTP"),
                                                                                 ("https", 443, "HTTPS")]
    assert args.listeners[1]["tls"]["certificateRefs"] == [{"group": "", "kind": "Secret", "name": "cert"}]


def _secret(name, labels, namespace="modelplane-system") -> dict:
    return {"apiVersion": "v1", "kind": "Secret", "metadata": {"name": name, "namespace": namespace, "labels": labels},
            "stringData": {"alice": f"key-of-{name}"}}


def test_api_keys_come_from_the_selected_secrets_and_the_caller_is_the_gateways_to_say():
    """[T-IG, D-IG] keys from Authorization or x-api-key, checked against every selected Secret; the matching entry's
    name set as x-modelplane-caller (Envoy's api_key_auth replaces a value the caller sent); the key removed."""
    gw = v05_gateway(cluster_name="c1", auth={"method": "APIKey", "apiKey": {
        "secretSelector": {"matchLabels": {"modelplane.ai/callers": "public"}}}})
    args = _gateway_args(gw, _secret("team-a", {"modelplane.ai/callers": "public"}),
                         _secret("team-b", {"modelplane.ai/callers": "public", "other": "x"}),
                         _secret("internal", {"modelplane.ai/callers": "internal"}),
                         _secret("elsewhere", {"modelplane.ai/callers": "public"}, namespace="ml-team"))
    auth = _front(args, "SecurityPolicy", "modelplane-callers")["spec"]["apiKeyAuth"]
    assert auth == {"credentialRefs": [{"group": "", "kind": "Secret", "name": "team-a"},
                                       {"group": "", "kind": "Secret", "name": "team-b"}],
                    "extractFrom": [{"headers": ["Authorization"]}, {"headers": ["x-api-key"]}],
                    "forwardClientIDHeader": "x-modelplane-caller", "sanitize": True}
    assert "key-of-" not in json.dumps(args.model_dump())  # only names: a key is never composed


@pytest.mark.parametrize("secrets, warned", [
    ([_secret("team-a", {"callers": "public"})], False),
    ([_secret("team-a", {"callers": "public", "other": "x"})], False),  # matchLabels: a subset of the Secret's labels
    ([], True),
    ([_secret("internal", {"callers": "internal"})], True),
    ([_secret("team-a", {"callers": "public"}, namespace="ml-team")], True),  # only modelplane-system is selected
    ([_secret("team-a", {})], True),
])
def test_a_selector_that_matches_no_caller_secret_is_a_warning_and_the_gateway_still_composes(secrets, warned):
    """[T-IG] upstream warns "spec.auth.apiKey.secretSelector matches no Secret, so no caller could authenticate"
    and still composes the gateway, which then refuses every request."""
    gw = v05_gateway(cluster_name="c1", auth={"method": "APIKey", "apiKey": {
        "secretSelector": {"matchLabels": {"callers": "public"}}}})
    from tests.manifests import cluster, gpu_class

    loaded = run(gpu_class(), cluster("c1"), gw, *secrets)
    said = [(p.object, p.message) for p in loaded.warnings if p.path == "spec.auth.apiKey.secretSelector"]
    assert said == ([("InferenceGateway/public",
                      "matches no Secret, so no caller could authenticate: the gateway refuses every request. It "
                      "selects among the v1/Secret manifests in modelplane-system given with the fleet (-f); give the "
                      "callers' Secret there with the labels callers: 'public'")] if warned else []), said
    assert loaded.errors == []
    policy = _front(_gateway_args(gw, *secrets), "SecurityPolicy", "modelplane-callers")["spec"]["apiKeyAuth"]
    assert bool(policy["credentialRefs"]) is not warned


def test_without_auth_nobody_is_authenticated():
    args = _gateway_args(v05_gateway(cluster_name="c1"))
    assert not [o for o in args.front_door if o["kind"] == "SecurityPolicy"]


@pytest.mark.parametrize("address, tls, urls", [
    ("203.0.113.7", False, {"openAI": "http://203.0.113.7/v1", "anthropic": "http://203.0.113.7/anthropic/v1"}),
    ("lb.example.com", False, {"openAI": "http://lb.example.com/v1", "anthropic": "http://lb.example.com/anthropic/v1"}),
    ("2001:db8::7", False, {"openAI": "http://[2001:db8::7]/v1", "anthropic": "http://[2001:db8::7]/anthropic/v1"}),
    ("203.0.113.7", True, None),  # [X-IG] published only without TLS
    (None, False, None),
])
def test_status_endpoints_are_built_from_the_address(address, tls, urls):
    from workloads.ai_gateway import base_urls

    assert base_urls(address, tls) == urls


def test_usage_records_are_one_json_line_with_upstreams_fields():
    """[T-IG] caller, service, endpoint, served_model, response_model, input/output/total tokens, status,
    duration_ms, start_time, on the proxy's stdout."""
    args = _gateway_args(v05_gateway(cluster_name="c1"))
    [setting] = args.proxy["telemetry"]["accessLog"]["settings"]
    assert setting["sinks"] == [{"type": "File", "file": {"path": "/dev/stdout"}}]
    assert list(setting["format"]["json"]) == ["caller", "service", "endpoint", "served_model", "response_model",
                                               "input_tokens", "output_tokens", "total_tokens", "status",
                                               "duration_ms", "start_time"]
    assert setting["format"]["json"]["total_tokens"] == "%DYNAMIC_METADATA(io.envoy.ai_gateway:total_tokens)%"
    assert args.proxy["provider"]["kubernetes"]["envoyDeployment"] == {"replicas": 2}
    assert args.proxy["shutdown"] == {"drainTimeout": "300s"}


def test_the_gateways_envoy_proxy_is_valid_against_envoy_gateways_crd_and_a_typo_is_refused():
    from workloads.schemas import check

    proxy = {"apiVersion": "gateway.envoyproxy.io/v1alpha1", "kind": "EnvoyProxy",
             "metadata": {"name": "modelplane-fleet", "namespace": "modelplane-system"},
             "spec": _gateway_args(v05_gateway(cluster_name="c1")).proxy}
    assert check(proxy) == []
    assert check(mutate(proxy, "spec.provider.kubernetes.envoyDeployment", {"replica": 2}))


def test_the_selected_caller_secrets_are_copied_to_the_gateways_cluster_with_values_only_in_the_program(
        tmp_path, monkeypatch, capsys):
    """[T-IG] "with auth, copies of the selected caller Secrets": the gateway stack creates each selected Secret
    (given with the fleet) in modelplane-system on the gateway's cluster; no plan, render or argument holds a key."""
    from automation.cli import main
    from tests import pulumi_double
    from tests.test_lifecycle import make_driver

    driver = make_driver(tmp_path, monkeypatch)
    gw = v05_gateway(auth={"method": "APIKey", "apiKey": {"secretSelector": {"matchLabels": {"callers": "public"}}}})
    driver.docs = [gw if d["kind"] == "InferenceGateway" else d for d in driver.docs]
    driver.docs += [_secret("team-a", {"callers": "public"}), _secret("internal", {"callers": "internal"})]
    assert driver.up() == 0, capsys.readouterr().err
    backend = driver.work / ".modelplane" / "backend"
    gateway = pulumi_double.resources(backend, "modelplane", "gateway")
    [copy] = [r["inputs"] for r in gateway if r["type"] == "kubernetes:core/v1:Secret"]
    assert copy["metadata"]["name"] == "team-a" and copy["metadata"]["namespace"] == "modelplane-system"
    assert copy["metadata"]["labels"]["callers"] == "public"
    assert "key-of-team-a" in json.dumps(copy["stringData"])  # the value, applied as a Pulumi secret
    [policy] = [o for o in _config_objects(gateway) if o["kind"] == "SecurityPolicy"
                and o["metadata"]["name"] == "modelplane-callers"]
    assert policy["spec"]["apiKeyAuth"]["credentialRefs"] == [{"group": "", "kind": "Secret", "name": "team-a"}]
    for call in driver.calls():
        assert not any("key-of-" in arg for arg in call["argv"]), call
    capsys.readouterr()
    assert main(["render", "-f", driver.fleet(), "--out", "-"]) == 0
    assert "key-of-" not in capsys.readouterr().out


def test_status_yaml_gives_the_gateway_and_its_services_v05_status(tmp_path, monkeypatch, capsys):
    """[X-IG, T-IG] address, endpoints, GatewayReady/GatewayProgrammed; [X-MS, F-MS] model, routes, RoutingReady
    (RoutesAccepted, or NoGatewayServesThisService for a service the serviceSelector leaves out)."""
    import yaml

    from automation.cli import main
    from tests.test_lifecycle import make_driver

    driver = make_driver(tmp_path, monkeypatch)
    gw = v05_gateway(serviceSelector={"matchLabels": {"public": "yes"}})
    driver.docs = [gw if d["kind"] == "InferenceGateway" else d for d in driver.docs]
    for d in driver.docs:
        if d["kind"] == "ModelService" and d["metadata"]["name"] != "kimi-k2":
            d["metadata"]["labels"] = {"public": "yes"}
    driver.control(resourceOutputs={"gateway": {GATEWAY: {"status": {"addresses": [{"value": "203.0.113.7"}]}}}})
    assert driver.up() == 0, capsys.readouterr().err
    capsys.readouterr()
    assert main(["status", "-f", driver.fleet(), "-o", "yaml"]) == 0
    items = {(o["kind"], o["metadata"]["name"]): o for o in yaml.safe_load(capsys.readouterr().out)["items"]}
    gateway = items[("InferenceGateway", "public")]["status"]
    assert gateway["address"] == "203.0.113.7"
    assert gateway["endpoints"] == {"openAI": "http://203.0.113.7/v1", "anthropic": "http://203.0.113.7/anthropic/v1"}
    assert [c["type"] for c in gateway["conditions"]] == ["GatewayReady"]
    served = items[("ModelService", "qwen3-8b")]["status"]
    assert served["model"] == "ml-team/qwen3-8b" and served["routes"]["total"] == 1
    assert [c["type"] for c in served["conditions"]] == ["RoutingReady"]
    left_out = items[("ModelService", "kimi-k2")]["status"]
    assert left_out["routes"] == {"total": 0, "ready": 0}
    assert left_out["conditions"][0]["reason"] == "NoGatewayServesThisService"


@pytest.mark.parametrize("applied, address, gateway_reason, service_reason, ready", [
    (True, "203.0.113.7", ("True", "GatewayProgrammed"), ("True", "RoutesAccepted"), 1),
    (True, None, ("False", "WaitingForGateway"), ("False", "WaitingForGateways"), 0),
    (False, "203.0.113.7", ("Unknown", "PendingUpdate"), ("False", "WaitingForRoutes"), 0),
])
def test_gateway_ready_and_routing_ready_follow_the_stacks(applied, address, gateway_reason, service_reason, ready):
    """[T-IG] GatewayProgrammed only with an address (an address alone is not readiness: the stack must have applied);
    [F-MS] RoutesAccepted once the gateway has an address and the route applied, else WaitingForGateways/Routes."""
    from automation.planning.conditions import Observed, with_status

    gw, ms = v05_gateway(), v05_service()
    snap = {"fingerprints": {"gateway": "g1", "service-ml-team.qwen": "s1"}, "routes": {"ml-team/qwen": ["x"]}}
    outputs = {"address": address} if address else {}
    observed = Observed({"gateway": {"fingerprint": "g1" if applied else "old", "outputs": outputs},
                         "service-ml-team.qwen": {"fingerprint": "s1" if applied else "old"}})
    gateway = with_status(gw, snap, observed, [gw])["status"]
    assert (gateway["conditions"][0]["status"], gateway["conditions"][0]["reason"]) == gateway_reason
    service = with_status(ms, snap, observed, [gw])["status"]
    assert (service["conditions"][0]["status"], service["conditions"][0]["reason"]) == service_reason
    assert service["routes"] == {"total": 1, "ready": ready} and service["model"] == "ml-team/qwen"
