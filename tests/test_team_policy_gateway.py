"""A TeamPolicy at the front door and at the edges a team could reach past it: external origins, the gateway that
serves a resident team's services, the caches it stages, the replicas its services select, and its token budget
in the front door's rate-limit rules. Each refusal names the policy and the field."""

from __future__ import annotations

import copy

from components.args import gateway_args
from fleet.api.gateway import InferenceGateway
from fleet.scheduler import schedule
from tests.manifests import cache, cluster, deployment, endpoint, gpu_class, run, service
from workloads import fleet_data_plane
from workloads.render import render, service_stack

API = "modelplane.ai/v1alpha1"
US = {"region": "us"}
EU = {"region": "eu"}


def team_policy(name="ml-team", regions=("us",), origins=(), tokens=None, **spec) -> dict:
    body: dict = {"residency": {"clusterSelector": {"matchExpressions": [
        {"key": "region", "operator": "In", "values": list(regions)}]}, "externalOrigins": list(origins)}, **spec}
    if tokens is not None:
        body["tokens"] = tokens
    return {"apiVersion": API, "kind": "TeamPolicy", "metadata": {"name": name}, "spec": body}


def v05_gateway(cluster_name: str, selector=None) -> dict:
    spec: dict = {"clusterName": cluster_name}
    if selector:
        spec["serviceSelector"] = {"matchLabels": selector}
    return {"apiVersion": API, "kind": "InferenceGateway", "metadata": {"name": "public"}, "spec": spec}


def envoy_gateway(limits=None, default=None) -> dict:
    access: dict = {"apiKeys": {"secretName": "team-keys"}, "limits": limits or []}
    if default:
        access["defaultLimit"] = default
    return {"apiVersion": API, "kind": "InferenceGateway", "metadata": {"name": "default"},
            "spec": {"backend": "Envoy", "envoy": {"access": access}}}


def two_regions(*objects, gateway: dict, host: str | None = None):
    """ml-team's `qwen` on cluster `us` (its residency), a cluster `eu` beside it, and `gateway`."""
    loaded = run(gpu_class(), cluster("us", pools=(("gpu", "l4", 2),), labels=US),
                 cluster("eu", pools=(("gpu", "l4", 2),), labels=EU),
                 deployment("qwen"), service("qwen"), gateway, *objects)
    return loaded


def problems(loaded, errors=True) -> list[str]:
    return [str(p) for p in (loaded.errors if errors else loaded.warnings)]


# ---- external origins ----------------------------------------------------------------------------------------


def test_an_endpoint_to_an_origin_the_policy_does_not_allow_is_refused_naming_the_policy_and_field():
    ext = endpoint("leak")
    ext["spec"]["url"] = "https://exfil.example.net/v1"
    loaded = run(team_policy(origins=["https://api.example.com"]), ext)
    [error] = problems(loaded)
    assert "ModelEndpoint/leak" in error and "spec.url" in error
    assert "TeamPolicy ml-team spec.residency.externalOrigins" in error and "exfil.example.net" in error
    # the v0.5 shape names spec.origin; an allowed origin (any port spelling of it) passes
    v05 = {"apiVersion": API, "kind": "ModelEndpoint", "metadata": {"name": "leak", "namespace": "ml-team"},
           "spec": {"origin": "https://exfil.example.net:443", "api": {"prefix": "/v1"}}}
    [error] = problems(run(team_policy(origins=["https://api.example.com"]), v05))
    assert "spec.origin" in error and "TeamPolicy ml-team spec.residency.externalOrigins" in error
    v05["spec"]["origin"] = "https://API.example.com:443"
    assert problems(run(team_policy(origins=["https://api.example.com"]), v05)) == []
    # another namespace, which the policy does not govern, may name any origin
    other = copy.deepcopy(ext)
    other["metadata"]["namespace"] = "search"
    assert problems(run(team_policy(), other)) == []


# ---- the gateway that serves a resident team -----------------------------------------------------------------


def test_a_v05_gateway_outside_the_residency_does_not_serve_the_team_and_validation_names_the_policy():
    loaded = two_regions(team_policy(regions=("us",)), gateway=v05_gateway("eu"))
    [error] = problems(loaded)
    assert "ModelService/qwen" in error and "metadata.namespace" in error
    assert "InferenceGateway public" in error and "TeamPolicy ml-team spec.residency.clusterSelector" in error
    # the render, asked anyway (the portal's preview of a fleet with errors), routes nothing through it
    result = render(loaded.fleet, schedule(loaded.fleet), "eu")
    assert service_stack("ml-team", "qwen") not in result.stacks
    assert not [o for _, _, o in result.objects() if o["kind"] == "AIGatewayRoute"]
    assert any("TeamPolicy ml-team" in p.message and p.object == "ModelService/qwen" for p in result.problems)


def test_a_foreign_v05_gateway_whose_selector_leaves_the_team_out_is_no_problem_and_a_resident_one_serves_it():
    assert problems(two_regions(team_policy(), gateway=v05_gateway("eu", selector={"audience": "eu"}))) == []
    loaded = two_regions(team_policy(), gateway=v05_gateway("us"))
    assert problems(loaded) == []
    result = render(loaded.fleet, schedule(loaded.fleet), "us")
    assert [o["metadata"]["name"] for _, _, o in result.objects() if o["kind"] == "AIGatewayRoute"] == ["qwen"]


def test_the_v031_front_door_on_a_foreign_control_plane_serves_no_resident_service():
    gw = {"apiVersion": API, "kind": "InferenceGateway", "metadata": {"name": "default"},
          "spec": {"backend": "Traefik", "traefik": {"version": "40.2.0"}}}
    loaded = two_regions(team_policy(), gateway=gw)
    assert problems(loaded) == []
    plan = schedule(loaded.fleet)
    foreign = render(loaded.fleet, plan, "eu")
    assert service_stack("ml-team", "qwen") not in foreign.stacks
    [problem] = [p for p in foreign.problems if p.object == "ModelService/qwen"]
    assert "cluster eu" in problem.message and "TeamPolicy ml-team spec.residency.clusterSelector" in problem.message
    home = render(loaded.fleet, plan, "us")
    assert home.problems == [] and service_stack("ml-team", "qwen") in home.stacks


# ---- attacker: a cache on a foreign cluster ------------------------------------------------------------------


def test_a_cache_whose_selector_names_a_foreign_cluster_is_never_staged_there():
    loaded = two_regions(team_policy(), cache("weights", selector={"region": "eu"}), cache("local"),
                         gateway=envoy_gateway())
    [warning] = problems(loaded, errors=False)
    assert "ModelCache/weights" in warning and "spec.clusterSelector" in warning
    assert "eu (outside TeamPolicy ml-team spec.residency.clusterSelector" in warning
    result = render(loaded.fleet, schedule(loaded.fleet), "us")
    assert ("ml-team", "weights") not in result.cache_clusters  # its one selected cluster is foreign: nowhere
    assert result.cache_clusters[("ml-team", "local")] == ["us"]  # no selector: every resident cluster, eu never
    assert not any(t == "eu" for s, t, _ in result.objects() if s.startswith("cache-") or "team-ml-team" in s)


# ---- attacker: a service selecting another team's replicas ---------------------------------------------------


def test_a_service_cannot_select_another_teams_replicas():
    """A service selects among its own namespace's endpoints only (workloads/service_routing.py EndpointIndex): a
    team outside ml-team's policy cannot route its callers to ml-team's resident replicas, nor the reverse."""
    thief = service("qwen", namespace="search")
    loaded = two_regions(team_policy(), thief, gateway=envoy_gateway())
    result = render(loaded.fleet, schedule(loaded.fleet), "us")
    assert result.routes[("search", "qwen")] == []
    assert result.routes[("ml-team", "qwen")] != []


# ---- tokens at the front door --------------------------------------------------------------------------------


def _limits(loaded) -> list[dict]:
    args = gateway_args(loaded.fleet, "us")
    assert args is not None
    [policy] = [o for o in args.front_door if o["metadata"]["name"] == "modelplane-limits"]
    return policy["spec"]["rateLimit"]["global"]["rules"]


def test_the_policys_token_budget_is_the_teams_limit_in_the_rendered_backend_traffic_policy():
    tokens = {"perHour": 5_000_000, "services": [{"name": "qwen", "perHour": 2_000_000}]}
    loaded = two_regions(team_policy(tokens=tokens), gateway=envoy_gateway(
        limits=[{"team": "ml-team", "requestsPerMinute": 600}], default={"requestsPerMinute": 60}))
    assert problems(loaded) == []
    rules = _limits(loaded)
    team = {"name": "x-modelplane-team", "type": "Exact", "value": "ml-team"}
    by_limit = {(r["limit"]["requests"], r["limit"]["unit"]): r for r in rules}
    whole = by_limit[(5_000_000, "Hour")]
    assert whole["clientSelectors"] == [{"headers": [team]}] and whole["shared"] is True and "cost" in whole
    one = by_limit[(2_000_000, "Hour")]
    assert one["clientSelectors"] == [{"headers": [team], "path": {"type": "PathPrefix", "value": "/ml-team/qwen/"}}]
    assert by_limit[(600, "Minute")]["clientSelectors"] == [{"headers": [team]}]  # the gateway's own, kept
    # the rules are what Envoy Gateway's CRD takes
    from workloads.schemas import check
    args = gateway_args(loaded.fleet, "us")
    assert args is not None
    for obj in args.front_door:
        check(obj)


def test_a_team_the_policy_adds_keeps_the_default_request_limit():
    loaded = two_regions(team_policy(tokens={"perHour": 1000}), gateway=envoy_gateway(default={"requestsPerMinute": 60}))
    rules = _limits(loaded)
    team = [r for r in rules if r["clientSelectors"] == [{"headers": [
        {"name": "x-modelplane-team", "type": "Exact", "value": "ml-team"}]}]]
    assert sorted((r["limit"]["requests"], r["limit"]["unit"]) for r in team) == [(60, "Minute"), (1000, "Hour")]


def test_a_fleet_without_policies_has_the_gateways_limits_unchanged():
    gw = envoy_gateway(limits=[{"team": "ml-team", "tokensPerHour": 10}])
    loaded = two_regions(gateway=gw)
    args = gateway_args(loaded.fleet, "us")
    ig = InferenceGateway.model_validate(gw)
    assert args is not None and ig.envoy is not None
    assert args.front_door == fleet_data_plane.front_door_objects(ig.envoy)


def test_a_token_budget_given_by_both_the_gateway_and_the_policy_is_refused_naming_both():
    tokens = {"perHour": 5_000_000, "services": [{"name": "qwen", "perHour": 2_000_000}]}
    gw = envoy_gateway(limits=[{"team": "ml-team", "tokensPerHour": 1, "models": [
        {"service": "ml-team/qwen", "tokensPerHour": 1}]}])
    errors = problems(two_regions(team_policy(tokens=tokens), gateway=gw))
    assert len(errors) == 2
    assert "spec.envoy.access.limits[0].tokensPerHour" in errors[0]
    assert "TeamPolicy ml-team spec.tokens.perHour" in errors[0]
    assert "spec.envoy.access.limits[0].models[0].tokensPerHour" in errors[1]
    assert "TeamPolicy ml-team spec.tokens.services[0].perHour" in errors[1]


def test_a_policys_tokens_an_envoy_front_door_cannot_count_are_a_warning_on_the_policy():
    gw = {"apiVersion": API, "kind": "InferenceGateway", "metadata": {"name": "default"}, "spec": {"backend": "Envoy"}}
    [warning] = problems(two_regions(team_policy(tokens={"perHour": 10}), gateway=gw), errors=False)
    assert "TeamPolicy/ml-team" in warning and "spec.tokens" in warning and "no spec.envoy.access" in warning
    [warning] = problems(two_regions(team_policy(tokens={"perHour": 10}), gateway=v05_gateway("us")), errors=False)
    assert "TeamPolicy/ml-team" in warning and "a v0.5 gateway has no per-team limits" in warning
    traefik = {"apiVersion": API, "kind": "InferenceGateway", "metadata": {"name": "default"},
               "spec": {"backend": "Traefik", "traefik": {"version": "37.1.1"}}}
    [warning] = problems(two_regions(team_policy(tokens={"perHour": 10}), gateway=traefik), errors=False)
    assert "spec.tokens" in warning and "a Traefik front door counts no one's tokens" in warning


def test_an_endpoint_to_a_refused_origin_gets_no_route_in_the_render_either():
    """The portal's writes are refused on the render's problems: the render refuses the origin too, and routes
    nothing to it."""
    ext = endpoint("leak")
    ext["spec"]["url"] = "https://exfil.example.net/v1"
    ext["metadata"]["labels"] = {"modelplane.ai/deployment": "qwen"}
    loaded = two_regions(team_policy(), ext, gateway=envoy_gateway())
    result = render(loaded.fleet, schedule(loaded.fleet), "us")
    [problem] = [p for p in result.problems if p.object == "ModelEndpoint/leak"]
    assert problem.path == "spec.url" and "TeamPolicy ml-team spec.residency.externalOrigins" in problem.message
    assert "leak" not in result.routes[("ml-team", "qwen")] and result.routes[("ml-team", "qwen")] != []


def test_a_replica_outside_the_residency_is_never_a_services_endpoint():
    """The scheduler places no replica outside; a plan made before the policy existed may hold one, and the
    front door still routes the team nowhere but its resident clusters."""
    before = two_regions(gateway=envoy_gateway())
    stale = schedule(before.fleet)
    foreign = [r for r in stale.replicas if r.cluster == "eu"]
    if not foreign:  # the policy-less plan put it on us: move it by hand, as an older plan might have
        from dataclasses import replace
        stale = replace(stale, replicas=[replace(r, cluster="eu") for r in stale.replicas])
    after = two_regions(team_policy(), gateway=envoy_gateway())
    result = render(after.fleet, stale, "us")
    assert result.routes[("ml-team", "qwen")] == []
    assert any(p.path == "spec.clusterName" and "TeamPolicy ml-team spec.residency.clusterSelector" in p.message
               for p in result.problems)
