"""The reference's v0.5 shapes of InferenceGateway, ModelService and ModelEndpoint, and ModelRoute, beside v0.3.1's.

Rules are table rows as in test_validation_rules.py: (base manifest, field path, new value, expected), expected None
when the mutated manifest must validate, else (field path, message fragment) of an error it must produce. Messages in
quotes with a final period are upstream's CEL messages (shared/schemas/modelplane/v0.5/*.yaml), verbatim.
"""

from __future__ import annotations

import json
import pathlib

import pytest
import yaml

from automation.cli import main
from fleet.api.gateway import fleet_gateway_transition_rules
from fleet.api.service import origin_problems
from fleet.migrate import migrate_text
from fleet.validate import load_fleet
from tests.manifests import (
    DELETE, V031_DIR, cluster, errors, example_files, gateway, mutate, run, service,
)

ROOT = pathlib.Path(__file__).resolve().parent.parent
REFERENCE_V05 = ROOT / "tests" / "data" / "reference_v05"
REFERENCE_V031 = ROOT / "tests" / "data" / "reference"
API = "modelplane.ai/v1alpha1"


def v05_gateway(name="public", cluster_name="gke-us-central", **spec):
    return {"apiVersion": API, "kind": "InferenceGateway", "metadata": {"name": name},
            "spec": {"clusterName": cluster_name, **spec}}


def full_gateway():
    return v05_gateway(tls={"certificateRefs": [{"name": "front-tls"}]},
                       auth={"method": "APIKey", "apiKey": {"secretSelector": {"matchLabels": {"keys": "ours"}}}},
                       serviceSelector={"matchLabels": {"region": "eu"}})


def v05_service():
    return {"apiVersion": API, "kind": "ModelService", "metadata": {"name": "qwen", "namespace": "ml-team"},
            "spec": {"endpoints": [{"name": "stable", "selector": {"matchLabels": {"modelplane.ai/deployment": "qwen"}}},
                                   {"name": "together", "priority": 1,
                                    "selector": {"matchLabels": {"provider": "together"}}}],
                     "timeouts": {"request": "5m", "idle": "0s"}}}


def v05_endpoint():
    return {"apiVersion": API, "kind": "ModelEndpoint", "metadata": {"name": "together", "namespace": "ml-team"},
            "spec": {"origin": "https://api.together.xyz", "api": {"schema": "OpenAI", "prefix": "/v1"},
                     "model": "Qwen/Qwen3-8B",
                     "credential": {"method": "APIKey", "apiKey": {"secretRef": {"name": "together-key"}}}}}


def route():
    return {"apiVersion": API, "kind": "ModelRoute", "metadata": {"name": "qwen-1a2b3", "namespace": "ml-team"},
            "spec": {"gatewayName": "public", "serviceName": "qwen",
                     "endpoints": [{"name": "stable", "selector": {"matchLabels": {"app": "qwen"}}}],
                     "timeouts": {"request": "300s", "idle": "60s"}}}


LABELS_17 = {f"k{i}": "v" for i in range(17)}
ENTRIES_33 = [{"name": f"e{i}", "selector": {"matchLabels": {"a": str(i)}}} for i in range(33)]
ONLY = "scheme and host only; put the API's path in spec.api.prefix."

ROWS = [
    # --- InferenceGateway (v0.5) -----------------------------------------------------------------
    ("gateway minimal", v05_gateway, "spec.clusterName", "gke-us-central", None),
    ("gateway with everything", full_gateway, "metadata.name", "eu", None),
    ("gateway cluster required", v05_gateway, "spec.clusterName", DELETE, ("spec.clusterName", "required field is missing")),
    ("gateway cluster empty", v05_gateway, "spec.clusterName", "", ("spec.clusterName", "at least 1 character")),
    ("gateway cluster too long", v05_gateway, "spec.clusterName", "c" * 254, ("spec.clusterName", "at most 253 characters")),
    ("gateway tls needs refs", full_gateway, "spec.tls", {}, ("spec.tls.certificateRefs", "required field is missing")),
    ("gateway tls no refs", full_gateway, "spec.tls.certificateRefs", [], ("spec.tls.certificateRefs", "at least 1 item")),
    ("gateway tls 9 refs", full_gateway, "spec.tls.certificateRefs", [{"name": f"c{i}"} for i in range(9)],
     ("spec.tls.certificateRefs", "at most 8 items")),
    ("gateway tls 8 refs", full_gateway, "spec.tls.certificateRefs", [{"name": f"c{i}"} for i in range(8)], None),
    ("gateway tls ref key", full_gateway, "spec.tls.certificateRefs", [{"name": "a"}, {"name": "a"}],
     ("spec.tls.certificateRefs[1]", "duplicate name 'a'")),
    ("gateway tls ref empty", full_gateway, "spec.tls.certificateRefs[0].name", "",
     ("spec.tls.certificateRefs[0].name", "at least 1 character")),
    ("gateway auth method enum", full_gateway, "spec.auth.method", "OIDC", ("spec.auth.method", "'APIKey'")),
    ("gateway auth method required", full_gateway, "spec.auth.method", DELETE, ("spec.auth.method", "required")),
    ("gateway auth CEL", full_gateway, "spec.auth.apiKey", DELETE,
     ("spec.auth", "spec.auth.apiKey must be set when spec.auth.method is APIKey, and only then.")),
    ("gateway auth selector required", full_gateway, "spec.auth.apiKey", {}, ("spec.auth.apiKey.secretSelector", "required")),
    ("gateway auth no labels", full_gateway, "spec.auth.apiKey.secretSelector.matchLabels", {},
     ("spec.auth.apiKey.secretSelector.matchLabels", "at least 1 item")),
    ("gateway auth 17 labels", full_gateway, "spec.auth.apiKey.secretSelector.matchLabels", LABELS_17,
     ("spec.auth.apiKey.secretSelector.matchLabels", "at most 16 items")),
    ("gateway auth long value", full_gateway, "spec.auth.apiKey.secretSelector.matchLabels", {"k": "v" * 64},
     ("spec.auth.apiKey.secretSelector.matchLabels.k", "at most 63 characters")),
    ("gateway selector needs labels", full_gateway, "spec.serviceSelector", {},
     ("spec.serviceSelector.matchLabels", "required")),
    ("gateway selector 17 labels", full_gateway, "spec.serviceSelector.matchLabels", LABELS_17,
     ("spec.serviceSelector.matchLabels", "at most 16 items")),
    ("gateway unknown field", v05_gateway, "spec.hostname", "ai.example.com", ("spec.hostname", "unknown field")),
    ("gateway both shapes", v05_gateway, "spec.backend", "Traefik",
     ("spec", "has backend (the v0.3.1 shape) and clusterName (the v0.5 shape)")),
    ("gateway v0.3.1 typo", gateway, "spec.backnd", "Traefik", ("spec.backnd", "did you mean 'backend'?")),
    # --- ModelService (v0.5) ---------------------------------------------------------------------
    ("service v0.5 ok", v05_service, "spec.timeouts", {}, None),
    ("service name required with others", v05_service, "spec.endpoints[1].name", DELETE,
     ("spec.endpoints[1].name", "required field is missing (this service is in the v0.5 shape")),
    ("service name required with timeouts", service, "spec.timeouts", {"request": "60s"},
     ("spec.endpoints[0].name", "required field is missing")),
    ("service name pattern", v05_service, "spec.endpoints[0].name", "Stable_1", ("spec.endpoints[0].name", "pattern")),
    ("service name too long", v05_service, "spec.endpoints[0].name", "a" * 64, ("spec.endpoints[0].name", "at most 63")),
    ("service name key", v05_service, "spec.endpoints[1].name", "stable", ("spec.endpoints[1]", "duplicate entry name 'stable'")),
    ("service 33 entries", v05_service, "spec.endpoints", ENTRIES_33, ("spec.endpoints", "at most 32 items")),
    ("service 32 entries", v05_service, "spec.endpoints", ENTRIES_33[:32], None),
    ("service priority 63", v05_service, "spec.endpoints[1].priority", 63, None),
    ("service priority 64", v05_service, "spec.endpoints[1].priority", 64, ("spec.endpoints[1].priority", "less than or equal to 63")),
    ("service priority negative", v05_service, "spec.endpoints[1].priority", -1,
     ("spec.endpoints[1].priority", "greater than or equal to 0")),
    ("service weight zero", v05_service, "spec.endpoints[0].weight", 0, ("spec.endpoints[0].weight", "greater than or equal to 1")),
    ("service no labels", v05_service, "spec.endpoints[0].selector.matchLabels", {},
     ("spec.endpoints[0].selector.matchLabels", "at least 1 item")),
    ("service 17 labels", v05_service, "spec.endpoints[0].selector.matchLabels", LABELS_17,
     ("spec.endpoints[0].selector.matchLabels", "at most 16 items")),
    ("service timeout pattern", v05_service, "spec.timeouts.request", "5 minutes", ("spec.timeouts.request", "pattern")),
    ("service timeout compound", v05_service, "spec.timeouts.request", "1h30m", None),
    ("service v0.3.1 priority 2", service, "spec.endpoints[0].priority", 2,
     ("spec.endpoints[0].priority", "less than or equal to 1 in the v0.3.1 shape")),
    ("service v0.3.1 any labels", service, "spec.endpoints[0].selector.matchLabels", LABELS_17, None),
    # --- ModelEndpoint (v0.5) --------------------------------------------------------------------
    ("endpoint minimal", v05_endpoint, "spec", {"origin": "https://api.together.xyz"}, None),
    ("endpoint origin required", v05_endpoint, "spec.origin", DELETE, ("spec.origin", "required field is missing")),
    ("endpoint origin too long", v05_endpoint, "spec.origin", "https://" + "a" * 2041, ("spec.origin", "at most 2048")),
    ("endpoint origin scheme", v05_endpoint, "spec.origin", "ftp://files.example.com",
     ("spec.origin", "spec.origin must start with http:// or https://.")),
    ("endpoint origin path", v05_endpoint, "spec.origin", "https://api.together.xyz/v1", ("spec.origin", ONLY)),
    ("endpoint origin trailing slash", v05_endpoint, "spec.origin", "https://api.together.xyz/", ("spec.origin", ONLY)),
    ("endpoint origin no host", v05_endpoint, "spec.origin", "https://", ("spec.origin", "spec.origin must include a host.")),
    ("endpoint origin port", v05_endpoint, "spec.origin", "https://api.together.xyz:8443", None),
    ("endpoint origin port zero", v05_endpoint, "spec.origin", "https://api.together.xyz:0",
     ("spec.origin", "spec.origin's port must be a number from 1 to 65535.")),
    ("endpoint origin port big", v05_endpoint, "spec.origin", "https://api.together.xyz:65536",
     ("spec.origin", "spec.origin's port must be a number from 1 to 65535.")),
    ("endpoint origin port word", v05_endpoint, "spec.origin", "https://api.together.xyz:https",
     ("spec.origin", "spec.origin's port must be a number from 1 to 65535.")),
    ("endpoint origin ipv4", v05_endpoint, "spec.origin", "http://10.0.0.1:8000",
     ("spec.origin", "spec.origin host must be a name, not an IP address.")),
    ("endpoint origin ipv6", v05_endpoint, "spec.origin", "http://[::1]:8000",
     ("spec.origin", "spec.origin host must be a name, not an IP address.")),
    ("endpoint schema enum", v05_endpoint, "spec.api.schema", "Gemini", ("spec.api.schema", "'OpenAI' or 'Anthropic'")),
    ("endpoint anthropic", v05_endpoint, "spec.api.schema", "Anthropic", None),
    ("endpoint prefix slash", v05_endpoint, "spec.api.prefix", "v1",
     ("spec.api.prefix", "spec.api.prefix must start with a slash.")),
    ("endpoint prefix empty", v05_endpoint, "spec.api.prefix", "", ("spec.api.prefix", "at least 1 character")),
    ("endpoint prefix too long", v05_endpoint, "spec.api.prefix", "/" + "p" * 512, ("spec.api.prefix", "at most 512")),
    ("endpoint model empty", v05_endpoint, "spec.model", "", ("spec.model", "at least 1 character")),
    ("endpoint model too long", v05_endpoint, "spec.model", "m" * 254, ("spec.model", "at most 253")),
    ("endpoint credential CEL", v05_endpoint, "spec.credential.apiKey", DELETE,
     ("spec.credential", "spec.credential.apiKey must be set when spec.credential.method is APIKey, and only then.")),
    ("endpoint credential method", v05_endpoint, "spec.credential.method", "Bearer", ("spec.credential.method", "'APIKey'")),
    ("endpoint credential secret name", v05_endpoint, "spec.credential.apiKey.secretRef", {"key": "k"},
     ("spec.credential.apiKey.secretRef.name", "required")),
    ("endpoint credential key empty", v05_endpoint, "spec.credential.apiKey.secretRef.key", "",
     ("spec.credential.apiKey.secretRef.key", "at least 1 character")),
    ("endpoint both shapes", v05_endpoint, "spec.url", "https://api.together.xyz/v1",
     ("spec", "has url (the v0.3.1 shape) and origin, api, model, credential (the v0.5 shape)")),
    # --- ModelRoute --------------------------------------------------------------------------------
    ("route ok", route, "spec.endpoints[0].priority", 3, None),
    ("route timeouts have no defaults", route, "spec.timeouts", {"request": "300s"}, ("spec.timeouts.idle", "required")),
    ("route gateway required", route, "spec.gatewayName", DELETE, ("spec.gatewayName", "required")),
    ("route entry name required", route, "spec.endpoints[0].name", DELETE, ("spec.endpoints[0].name", "required")),
    ("route 17 labels", route, "spec.endpoints[0].selector.matchLabels", LABELS_17,
     ("spec.endpoints[0].selector.matchLabels", "at most 16 items")),
]


@pytest.mark.parametrize("factory,path,value,expected", [r[1:] for r in ROWS], ids=[r[0] for r in ROWS])
def test_rule(factory, path, value, expected):
    base = factory()
    assert errors(base) == [], "the base manifest itself must be valid"
    found = errors(mutate(base, path, value))
    if expected is None:
        assert found == []
    else:
        field, fragment = expected
        assert [f for f in found if f.startswith(field + ":") and fragment in f], \
            f"expected an error at {field} containing {fragment!r}, got {found}"


def test_the_origin_rules_are_all_evaluated_as_the_api_server_does():
    # one origin breaking three rules gets the three messages, in the XRD's order
    assert origin_problems("https://10.0.0.1:99999/v1") == [
        "spec.origin must be scheme and host only; put the API's path in spec.api.prefix.",
        "spec.origin's port must be a number from 1 to 65535.",
        "spec.origin host must be a name, not an IP address."]
    assert origin_problems("api.example.com") == ["spec.origin must start with http:// or https://."]


def test_the_xrd_defaults_are_read():
    loaded = run(mutate(v05_endpoint(), "spec", {"origin": "https://api.together.xyz",
                                                  "credential": {"method": "APIKey",
                                                                 "apiKey": {"secretRef": {"name": "k"}}}}),
                 mutate(v05_service(), "spec.timeouts", DELETE))
    me, ms = loaded.fleet.of("ModelEndpoint")[0], loaded.fleet.of("ModelService")[0]
    assert me.v05 is not None and (me.v05.api.schema_, me.v05.api.prefix) == ("OpenAI", "/v1")
    assert me.v05.credential.apiKey.secretRef.key == "apiKey"
    assert (ms.spec.effective_timeouts.request, ms.spec.effective_timeouts.idle) == ("300s", "60s")
    assert [e.priority for e in ms.spec.endpoints] == [0, 1] and ms.spec.endpoints[0].weight == 1


def test_reference_v05_manifests_validate():
    loaded = load_fleet([str(REFERENCE_V05)])
    assert loaded.errors == []
    assert sorted((o.kind, o.name, o.shape) for o in loaded.fleet.objects) == [
        ("InferenceGateway", "eu", "v0.5"), ("InferenceGateway", "public", "v0.5"),
        ("ModelEndpoint", "qwen3-8b-a02c0", "v0.5"), ("ModelEndpoint", "together", "v0.5"),
        ("ModelRoute", "qwen3-8b-1f2e3", "v0.5"), ("ModelService", "qwen3-8b", "v0.5")]


def test_the_reference_v031_manifests_are_read_as_v031():
    loaded = load_fleet([str(REFERENCE_V031)])
    shapes = {o.kind: o.shape for o in loaded.fleet.objects if o.kind in ("InferenceGateway", "ModelService",
                                                                           "ModelEndpoint")}
    assert shapes == {"InferenceGateway": "v0.3.1", "ModelService": "v0.3.1", "ModelEndpoint": "v0.3.1"}


def test_a_fleet_of_mixed_gateway_shapes_is_refused_with_the_way_to_migrate():
    found = errors(gateway(), v05_gateway())
    assert found == ["spec: is the v0.3.1 shape, and this fleet's InferenceGateway public the v0.5 shape: a fleet's "
                     "gateways are all of one shape; `modelplane migrate -f FILE` rewrites v0.3.1 gateways, services "
                     "and endpoints in the v0.5 shape (--gateway-cluster NAME says where this one runs)"]


def test_services_and_endpoints_of_both_shapes_may_share_a_fleet():
    assert errors(gateway(), service(), mutate(v05_service(), "metadata.name", "qwen-v05"), v05_endpoint(),
                  {**v05_endpoint(), "metadata": {"name": "old", "namespace": "ml-team"},
                   "spec": {"url": "https://api.example.com/v1", "rewritePath": "/"}}) == []


def test_several_v05_gateways_at_most_one_per_cluster():
    c1, c2 = cluster("c1"), cluster("c2")
    assert errors(c1, c2, v05_gateway("a", "c1"), v05_gateway("b", "c2")) == []
    # upstream's rule: one that has an address keeps the cluster, else the alphabetically lowest name
    assert errors(c1, v05_gateway("a", "c1"), v05_gateway("b", "c1")) == [
        "spec.clusterName: InferenceCluster c1 already hosts InferenceGateway a"]
    addressed = {**v05_gateway("b", "c1"), "status": {"address": "203.0.113.9"}}
    assert errors(c1, v05_gateway("a", "c1"), addressed) == [
        "spec.clusterName: InferenceCluster c1 already hosts InferenceGateway b"]
    warnings = [str(p) for p in run(v05_gateway("a", "nowhere")).warnings]
    assert any("InferenceCluster 'nowhere' is not among the given manifests" in w for w in warnings), warnings


def test_cluster_name_is_immutable():
    old, moved = (run(v05_gateway("a", c)).fleet.of("InferenceGateway")[0] for c in ("c1", "c2"))
    assert list(fleet_gateway_transition_rules(old, moved)) == [(("spec", "clusterName"), "spec.clusterName is immutable.")]
    assert list(fleet_gateway_transition_rules(old, old)) == []


def test_validate_json_says_each_objects_shape(capsys):
    assert main(["validate", "-f", str(REFERENCE_V05), "-f", str(REFERENCE_V031 / "concepts.yaml"), "-o", "json"]) == 1
    out = json.loads(capsys.readouterr().out)  # mixed gateways: refused, the others listed with their shapes
    shapes = {(o["kind"], o["name"]): o["shape"] for o in out["objects"]}
    assert shapes[("ModelService", "qwen3-8b")] in ("v0.5", "v0.3.1")  # the same name in both files: one kept
    assert shapes[("ModelRoute", "qwen3-8b-1f2e3")] == "v0.5" and shapes[("ModelEndpoint", "together")] == "v0.5"
    assert shapes[("ModelEndpoint", "kimi-k2-together")] == "v0.3.1"
    assert shapes[("InferenceClass", "gke-l4-1x-g2")] == "both"
    assert main(["validate", "-f", str(REFERENCE_V05), "-o", "json"]) == 0
    assert {o["shape"] for o in json.loads(capsys.readouterr().out)["objects"]} == {"v0.5"}


def test_explain_and_the_portals_openapi_show_the_v05_fields(capsys):
    from automation.portal.routes.openapi import definitions

    assert main(["explain", "InferenceGateway.spec"]) == 0
    out = capsys.readouterr().out
    assert "clusterName <string> (v0.5 shape, required there) (length >= 1, length <= 253)" in out
    assert "backend <one of 'Traefik', 'Envoy'> (v0.3.1 shape, required there)" in out
    assert main(["explain", "ModelEndpoint.spec.credential.apiKey.secretRef"]) == 0
    assert "key <string> (length >= 1, length <= 253, default 'apiKey')" in capsys.readouterr().out
    assert main(["explain", "ModelService.spec.endpoints"]) == 0
    assert "name <string> (v0.5 shape, required there)" in capsys.readouterr().out
    for v3 in (True, False):  # kubectl explain reads these (v3 JSON; v2 as protobuf for old kubectl)
        schemas = definitions(v3)
        gateway_spec = schemas["ai.modelplane.v1alpha1.InferenceGateway"]["properties"]["spec"]
        assert {"clusterName", "tls", "auth", "serviceSelector", "backend"} <= set(gateway_spec["properties"])
        assert "oneOf" not in json.dumps(gateway_spec)
        endpoint_spec = schemas["ai.modelplane.v1alpha1.ModelEndpoint"]["properties"]["spec"]["properties"]
        assert endpoint_spec["api"]["properties"]["schema"]["enum"] == ["OpenAI", "Anthropic"]
        service_spec = schemas["ai.modelplane.v1alpha1.ModelService"]["properties"]["spec"]["properties"]
        assert {"name", "priority"} <= set(service_spec["endpoints"]["items"]["properties"])
        assert "timeouts" in service_spec


# ---- downstream: what composing does with each shape -----------------------------------------------------

def _v05_fleet_folder(tmp_path, *gateways) -> pathlib.Path:
    fleet = tmp_path / "fleet"
    fleet.mkdir()
    for f in example_files():
        if f.name != "gateway.yaml":
            target = fleet / f.relative_to(ROOT / "examples")
            target.parent.mkdir(parents=True, exist_ok=True)
            target.write_text(f.read_text())
    (fleet / "gateway.yaml").write_text(yaml.safe_dump_all(gateways))
    return fleet


def test_a_v05_gateway_validates_plans_renders_and_previews(tmp_path, capsys):
    fleet = _v05_fleet_folder(tmp_path, v05_gateway("public", "gke-us-central"))
    assert main(["validate", "-f", str(fleet)]) == 0
    assert main(["plan", "-f", str(fleet), "--fresh", "-o", "json"]) == 0
    capsys.readouterr()
    assert main(["render", "-f", str(fleet), "--out", str(tmp_path / "out"), "--fresh"]) == 0, capsys.readouterr().err
    routes = [d for p in (tmp_path / "out").rglob("*.yaml") for d in yaml.safe_load_all(p.read_text())
              if isinstance(d, dict) and d.get("kind") == "AIGatewayRoute"]
    assert sorted(r["metadata"]["name"] for r in routes) == ["kimi-k2", "qwen3-8b", "qwen3-coder"]
    assert main(["preview", "--offline", "-f", str(fleet)]) == 0, capsys.readouterr().err


def test_a_second_v05_gateway_stops_render_and_up_in_one_message(tmp_path, capsys):
    fleet = _v05_fleet_folder(tmp_path, v05_gateway("public", "gke-us-central"), v05_gateway("west", "eks-us-west"))
    assert main(["validate", "-f", str(fleet)]) == 0
    capsys.readouterr()
    for command in (["render", "-f", str(fleet), "--out", "-", "--fresh"],
                    ["render", "-f", str(fleet), "--out", str(tmp_path / "out"), "--fresh"],
                    ["preview", "--offline", "-f", str(fleet)]):
        assert main(command) == 1, command
        out, err = capsys.readouterr()
        said = [line for line in err.splitlines() if "one v0.5 InferenceGateway per fleet" in line]
        assert len(said) == 1 and said[0].startswith(f"{fleet / 'gateway.yaml'}:") and \
            "InferenceGateway/west: spec.clusterName: this project composes one v0.5 InferenceGateway per fleet yet " \
            "(InferenceGateway/public, on gke-us-central)" in said[0], err
        assert not (tmp_path / "out").exists()


@pytest.mark.parametrize("chosen, host, refused", [
    (None, "gke-us-central", None),
    ("gke-us-central", "gke-us-central", None),
    # the gateway runs on its spec.clusterName: another --control-plane is refused, not silently obeyed
    ("eks-us-west", None, "InferenceGateway/public runs on InferenceCluster gke-us-central (its spec.clusterName), "
                          "not on 'eks-us-west'"),
])
def test_a_v05_gateways_cluster_is_the_control_planes_host(tmp_path, capsys, chosen, host, refused):
    from components.args import control_plane_cluster

    fleet_dir = _v05_fleet_folder(tmp_path, v05_gateway("public", "gke-us-central"))
    fleet = load_fleet([str(fleet_dir)]).fleet
    if refused is None:
        assert control_plane_cluster(fleet, chosen) == host
        return
    with pytest.raises(ValueError, match=refused.replace("(", r"\(").replace(")", r"\)")):
        control_plane_cluster(fleet, chosen)
    capsys.readouterr()
    assert main(["preview", "--offline", "-f", str(fleet_dir), "--control-plane", chosen]) == 2
    assert f"error: --control-plane: {refused}" in capsys.readouterr().err


def _render_problems(*objects) -> list[str]:
    from fleet.scheduler import schedule
    from workloads.render import render

    fleet = run(*objects).fleet
    return [f"{p.object}: {p.path}: {p.message}" for p in render(fleet, schedule(fleet)).problems]


def test_what_the_v031_front_door_cannot_do_for_v05_objects_is_refused_when_routed():
    routed = mutate(v05_service(), "spec.endpoints", [{"name": "together",
                                                       "selector": {"matchLabels": {"provider": "together"}}}])
    endpoint = mutate(v05_endpoint(), "metadata.labels", {"provider": "together"})
    found = _render_problems(gateway(), routed, endpoint)
    assert any("sets model: the v0.3.1 front door does not rewrite" in p for p in found), found
    assert any("sets credential: the v0.3.1 front door attaches no credential" in p for p in found), found
    groq = mutate(mutate(endpoint, "spec", {"origin": "https://api.groq.com", "api": {"prefix": "/openai/v1"}}),
                  "metadata.labels", {"provider": "together"})
    assert _render_problems(gateway(), routed, groq) == []  # a prefix ending in /v1: a path rewrite reaches it
    odd = mutate(groq, "spec.api.prefix", "/api")
    assert any("has api.prefix '/api'" in p for p in _render_problems(gateway(), routed, odd))
    unrouted = mutate(endpoint, "metadata.labels", {"provider": "nobody"})
    assert not any("ModelEndpoint together" in p for p in _render_problems(gateway(), routed, unrouted))
    envoy = mutate(gateway(), "spec", {"backend": "Envoy"})
    tiers = mutate(routed, "spec.endpoints[0].priority", 2)
    assert any("priority 2: the v0.3.1 Envoy front door serves priority 0 and overflow 1" in p
               for p in _render_problems(envoy, tiers, groq))


# ---- migrate ---------------------------------------------------------------------------------------------------

def test_migrated_v031_examples_are_the_v05_examples():
    for old in sorted(V031_DIR.rglob("*.yaml")):
        new = ROOT / "examples" / old.relative_to(V031_DIR)
        result = migrate_text(old.read_text(), str(old), "gke-us-central")
        assert result.problems == []
        if old.name == "gateway.yaml":  # the example gateway stays v0.3.1 until replicas serve <ns>/<deployment>
            assert list(yaml.safe_load_all(result.after)) == [v05_gateway("default", "gke-us-central")]
            continue
        assert list(yaml.safe_load_all(result.after)) == list(yaml.safe_load_all(new.read_text())), old
        # only the changed fields' lines changed: the comments are all still there
        comments = [line for line in old.read_text().splitlines() if line.lstrip().startswith("#")]
        assert all(c in result.after.splitlines() for c in comments)


def test_migrated_reference_manifests_validate_and_route_as_before(tmp_path):
    from fleet.scheduler import schedule
    from workloads.render import render

    text = (REFERENCE_V031 / "concepts.yaml").read_text()
    whole = migrate_text(text, "concepts.yaml", "gke-us-central")
    assert whole.problems == [] and whole.changed
    (tmp_path / "concepts.yaml").write_text(whole.after)
    for f in REFERENCE_V031.glob("*.yaml"):
        if f.name != "concepts.yaml":
            (tmp_path / f.name).write_text(f.read_text())
    migrated = load_fleet([str(tmp_path)])
    assert migrated.errors == []
    assert {o.shape for o in migrated.fleet.objects if o.kind in ("InferenceGateway", "ModelService",
                                                                  "ModelEndpoint")} == {"v0.5"}
    kimi = next(s for s in migrated.fleet.of("ModelService") if s.name == "kimi-k2")
    assert [(e.name, e.weight) for e in kimi.spec.endpoints] == [("kimi-k2", 90), ("together", 10)]
    together = next(e for e in migrated.fleet.of("ModelEndpoint") if e.name == "kimi-k2-together").v05
    assert (together.origin, together.api.prefix) == ("https://api.together.xyz", "/v1")
    # the same meaning: with the v0.3.1 gateway kept (no cluster given), the migrated services and endpoint route
    # exactly as the v0.3.1 ones did
    kept = migrate_text(text, "concepts.yaml", None)
    assert [p.object for p in kept.problems] == ["InferenceGateway/default"]
    assert "give --gateway-cluster NAME" in kept.problems[0].message
    (tmp_path / "concepts.yaml").write_text(kept.after)
    before, after = load_fleet([str(REFERENCE_V031)]).fleet, load_fleet([str(tmp_path)]).fleet
    rendered = [render(f, schedule(f)) for f in (before, after)]
    assert rendered[0].stacks == rendered[1].stacks
    assert rendered[0].routes == rendered[1].routes and rendered[1].problems == rendered[0].problems


def test_migrate_is_idempotent_and_keeps_comments_and_layout():
    text = (V031_DIR / "models" / "services.yaml").read_text().replace(
        "    - selector:", "    - selector:  # by deployment", 1)
    once = migrate_text(text, "s.yaml")
    assert "    - name: qwen3-8b\n      selector:  # by deployment\n" in once.after
    twice = migrate_text(once.after, "s.yaml")
    assert not twice.changed and twice.changes == [] and twice.problems == []


def test_migrate_flow_style_lists_and_what_v05_has_no_field_for():
    text = """\
apiVersion: modelplane.ai/v1alpha1
kind: ModelEndpoint
metadata: {name: groq, namespace: ml-team}
spec: {url: https://api.groq.com/openai/v1, rewritePath: /openai/}   # a comment on a flow line
---
apiVersion: v1
kind: List
items:
- apiVersion: modelplane.ai/v1alpha1
  kind: ModelService
  metadata: {name: s, namespace: ml-team}
  spec:
    endpoints:
    -
      weight: 2
      selector: {matchLabels: {provider: Groq.com}}
    - selector: {matchLabels: {provider: Groq.com}}
---
apiVersion: modelplane.ai/v1alpha1
kind: InferenceGateway
metadata: {name: limited}
spec:
  backend: Envoy
  envoy:
    access:
      apiKeys: {secretName: team-keys}
      limits: [{team: a, tokensPerHour: 10}]
---
apiVersion: modelplane.ai/v1alpha1
kind: ModelEndpoint
metadata: {name: by-ip, namespace: ml-team}
spec: {url: "http://10.0.0.7:8000/v1", rewritePath: /}
"""
    result = migrate_text(text, "f.yaml", "c1")
    docs = list(yaml.safe_load_all(result.after))
    assert docs[0]["spec"] == {"origin": "https://api.groq.com", "api": {"prefix": "/openai/v1"}}
    assert [e["name"] for e in docs[1]["items"][0]["spec"]["endpoints"]] == ["groq-com", "groq-com-2"]
    assert docs[2] == yaml.safe_load(text.split("---\n")[2]) and docs[3] == yaml.safe_load(text.split("---\n")[3])
    assert [(p.object, p.path) for p in result.problems] == [
        ("InferenceGateway/limited", "spec.envoy.access.limits"), ("ModelEndpoint/by-ip", "")]
    assert "spec.origin host must be a name, not an IP address." in result.problems[1].message
    assert any("its comments were not kept" in n.message and n.object == "ModelEndpoint/groq" for n in result.notes)


def test_migrate_command(tmp_path, capsys):
    fleet = tmp_path / "fleet"
    for f in example_files("v0.3.1"):
        target = fleet / f.name
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_text(f.read_text())
    before = {f.name: f.read_text() for f in fleet.iterdir()}
    assert main(["migrate", "-f", str(fleet)]) == 0
    out, err = capsys.readouterr()
    assert "-  url: https://api.example.com/v1\n" in out and "+    - name: qwen3-8b\n" in out
    assert "note: spec.clusterName eks-us-west: the cluster the v0.3.1 front door runs on today" in err
    assert "5 object(s) migrated in 3 file(s) (not written: --write writes them)" in err
    assert {f.name: f.read_text() for f in fleet.iterdir()} == before  # nothing written
    assert main(["migrate", "-f", str(fleet), "--gateway-cluster", "gke-us-central", "--write"]) == 0
    capsys.readouterr()
    migrated = load_fleet([str(fleet)])
    assert migrated.errors == [] and {o.shape for o in migrated.fleet.objects} == {"v0.5", "both"}
    assert migrated.fleet.of("InferenceGateway")[0].v05.clusterName == "gke-us-central"
    assert main(["migrate", "-f", str(fleet)]) == 0
    assert "0 object(s) migrated in 0 file(s)" in capsys.readouterr().err
    assert main(["migrate", "-f", "-", "--write"]) == 2
    assert "--write cannot write standard input back" in capsys.readouterr().err
