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
