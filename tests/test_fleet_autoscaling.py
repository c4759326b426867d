"""Fleet autoscaling: a ModelDeployment's spec.replicas scaled by KEDA on the control plane (fleet/autoscaling.py,
workloads/fleet_autoscaling.py), and the scale subresource driven the way KEDA's scale client drives it."""

from __future__ import annotations

import copy
import pathlib

import pytest

from fleet.autoscaling import FLEET_PREFIX, FLEET_PROMETHEUS, parse, parse_fleet
from automation.cli import main
from tests import pulumi_double
from fleet.validate import Fleet
from tests.manifests import cluster, deployment, gpu_class, run
from tests.rendering import rendered
from tests.portal_server import ADMIN, API, TEAM_A, ThreadServer
from tests.test_portal import seed_fleet
from workloads.aggregated_api import PREFIX as AGGREGATED
from workloads.fleet_autoscaling import default_query, scaled_objects
from workloads.schemas import check

ON = {FLEET_PREFIX: "keda", f"{FLEET_PREFIX}-max-replicas": "4"}
GATEWAY = {"apiVersion": "modelplane.ai/v1alpha1", "kind": "InferenceGateway",
           "metadata": {"name": "default", "annotations": {
               AGGREGATED: "enabled", f"{AGGREGATED}-image": "example/modelplane:1",
               f"{AGGREGATED}-executor": "operator",  # the portal KEDA scales applies what it stores
               FLEET_PROMETHEUS: "http://thanos-query.monitoring.svc:9090"}},
           "spec": {"backend": "Traefik", "traefik": {"version": "40.2.0"}}}


def fleet_of(*docs: dict) -> Fleet:
    loaded = run(*[copy.deepcopy(d) for d in docs])
    assert not loaded.errors, [str(e) for e in loaded.errors]
    return loaded.fleet


def annotated(annotations: dict, name: str = "qwen", namespace: str = "ml-team") -> dict:
    md = deployment(name, namespace=namespace)
    md["metadata"]["annotations"] = annotations
    return md


@pytest.mark.parametrize("annotations,wrong", [
    ({FLEET_PREFIX: "hpa", f"{FLEET_PREFIX}-max-replicas": "4"}, FLEET_PREFIX),
    ({f"{FLEET_PREFIX}-max-replicas": "4"}, FLEET_PREFIX),
    ({FLEET_PREFIX: "keda"}, f"{FLEET_PREFIX}-max-replicas"),
    ({**ON, f"{FLEET_PREFIX}-max-replicas": "11"}, f"{FLEET_PREFIX}-max-replicas"),  # spec.replicas is 1..10
    ({**ON, f"{FLEET_PREFIX}-min-replicas": "11"}, f"{FLEET_PREFIX}-min-replicas"),  # 0..10, as spec.replicas
    ({**ON, f"{FLEET_PREFIX}-max-replicas": "0"}, f"{FLEET_PREFIX}-max-replicas"),  # never above 0: serves nothing
    ({**ON, f"{FLEET_PREFIX}-min-replicas": "5"}, f"{FLEET_PREFIX}-min-replicas"),
    ({**ON, f"{FLEET_PREFIX}-threshold": "nan"}, f"{FLEET_PREFIX}-threshold"),
    ({**ON, f"{FLEET_PREFIX}-query": " "}, f"{FLEET_PREFIX}-query"),
    ({**ON, f"{FLEET_PREFIX}-maximum": "4"}, f"{FLEET_PREFIX}-maximum"),
])
def test_a_wrong_fleet_policy_is_refused_at_validation_naming_its_annotation(annotations, wrong):
    settings, errors = parse_fleet(annotations)
    assert settings is None and wrong in [key for key, _ in errors]
    loaded = run(annotated(annotations))
    assert any(f"metadata.annotations[{wrong}]:" in str(e) for e in loaded.errors), [str(e) for e in loaded.errors]


def test_both_axes_are_read_apart():
    both = {**ON, "modelplane.ai/autoscaling": "keda", "modelplane.ai/autoscaling-max-copies": "3"}
    fleet_axis, errors = parse_fleet(both)
    copies, copy_errors = parse(both)
    assert not errors and not copy_errors
    assert (fleet_axis.min_replicas, fleet_axis.max_replicas) == (1, 4) and copies.max_copies == 3


def test_a_scaled_object_targets_the_deployment_through_the_aggregated_api_and_is_valid_for_keda():
    md = annotated({**ON, f"{FLEET_PREFIX}-min-replicas": "2", f"{FLEET_PREFIX}-threshold": "7"})
    objects, problems = scaled_objects(fleet_of(GATEWAY, md), lambda ns: f"endpoints-{ns}")
    assert problems == []
    [scaler] = objects["ml-team"]
    assert scaler["spec"]["scaleTargetRef"] == {"apiVersion": "modelplane.ai/v1alpha1", "kind": "ModelDeployment",
                                                "name": "qwen"}
    assert (scaler["spec"]["minReplicaCount"], scaler["spec"]["maxReplicaCount"]) == (2, 4)
    [trigger] = scaler["spec"]["triggers"]
    assert trigger["metadata"]["serverAddress"] == GATEWAY["metadata"]["annotations"][FLEET_PROMETHEUS]
    assert trigger["metadata"]["threshold"] == "7"
    assert trigger["metadata"]["query"] == default_query("ml-team", "qwen")
    assert check(scaler) == []  # KEDA's own CRD (workloads/crds/upstream/keda.sh_scaledobjects.yaml)
    broken = copy.deepcopy(scaler)
    broken["spec"]["scaleTargetRef"].pop("name")
    assert any("name" in p for p in check(broken))


@pytest.mark.parametrize("annotations,warned", [
    # v0.5's spec.replicas is 0..10 (the reference's PR #454): KEDA may park it, and wakes it only if its query sees
    # demand while no replica runs; the default query reads the deployment's own pods, which are gone at 0
    ({**ON, f"{FLEET_PREFIX}-min-replicas": "0"}, True),
    ({**ON, f"{FLEET_PREFIX}-min-replicas": "0", f"{FLEET_PREFIX}-query": "sum(rate(front_door_requests[2m]))"}, False),
    ({**ON, f"{FLEET_PREFIX}-min-replicas": "1"}, False),
    (ON, False),
], ids=["zero-default-query", "zero-own-query", "one", "default-min"])
def test_min_replicas_zero_parks_the_deployment_and_a_demand_query_lets_keda_wake_it(annotations, warned):
    md = annotated(annotations)
    loaded = run(GATEWAY, gpu_class("l4", 1, "23034Mi"), cluster("c1", pools=(("gpu", "l4", 4),)), md)
    assert not loaded.errors, [str(e) for e in loaded.errors]
    warnings = [str(w) for w in loaded.warnings if f"{FLEET_PREFIX}-min-replicas" in str(w)]
    assert bool(warnings) == warned, warnings
    objects, problems = scaled_objects(loaded.fleet, lambda ns: f"endpoints-{ns}")
    [scaler] = objects["ml-team"]
    # KEDA scales a target at 0 to 1 once the trigger is active, and back to 0 when idle only with min 0
    assert scaler["spec"]["minReplicaCount"] == parse_fleet(annotations)[0].min_replicas
    assert problems == [] and check(scaler) == []  # KEDA's own CRD accepts minReplicaCount 0


def test_the_default_query_sums_over_clusters_and_matches_only_this_deployments_pods():
    import re

    query = default_query("ml-team", "qwen")
    assert query.startswith("sum(") and "cluster" not in query
    pattern = re.search(r'pod=~"([^"]+)"', query).group(1)
    assert re.fullmatch(pattern, "qwen-a02c0-vllm-5d8f-xyz")
    assert not re.fullmatch(pattern, "qwen-big-a02c0-vllm-xyz")  # another deployment sharing the prefix


@pytest.mark.parametrize("drop,missing", [
    (AGGREGATED, "aggregated API"), (FLEET_PROMETHEUS, "fleet's Prometheus"),
    # the in-cluster portal's default, --no-apply: KEDA's new spec.replicas would be stored and never applied
    (f"{AGGREGATED}-executor", f"that portal to apply what KEDA scales (InferenceGateway annotation "
                               f"{AGGREGATED}-executor: operator; with none, the default, it plans only"),
])
def test_without_the_aggregated_api_or_the_fleet_prometheus_render_says_what_is_missing(drop, missing):
    gateway = copy.deepcopy(GATEWAY)
    for key in [k for k in gateway["metadata"]["annotations"] if k.startswith(drop)]:
        del gateway["metadata"]["annotations"][key]
    objects, problems = scaled_objects(fleet_of(gateway, annotated(ON)), lambda ns: f"endpoints-{ns}")
    assert objects == {} and len(problems) == 1
    assert missing in problems[0].message and problems[0].source == "endpoints-ml-team"


def test_render_puts_the_scaled_object_in_the_namespaces_endpoints_stack_with_its_namespace():
    _, result = rendered(GATEWAY, gpu_class("l4", 1, "23034Mi"), cluster("c1", pools=(("gpu", "l4", 4),)),
                         annotated(ON))
    assert not result.problems, [str(p) for p in result.problems]
    endpoints = result.stacks["endpoints-ml-team"]["control-plane"]
    assert [o["kind"] for o in endpoints] == ["ScaledObject"]
    team = result.stacks["team-ml-team.c1"]["c1"]
    assert any(o["kind"] == "Namespace" and o["metadata"]["name"] == "ml-team" for o in team)


def test_keda_drives_the_scale_subresource_as_its_scale_client_does(tmp_path):
    """KEDA's scale client GETs the Scale (autoscaling/v1) to read spec.replicas, then PUTs it back with the new
    spec.replicas and the resourceVersion it read; the deployment follows, and a stale Scale is a 409."""
    with ThreadServer(tmp_path) as server:
        seed_fleet(server, gpus=8)
        with server.client(TEAM_A) as team:
            md = annotated(ON, namespace="team-a")
            refused = team.put(f"{API}/namespaces/team-a/modeldeployments/qwen", json=md)
            assert refused.status_code == 422 and "fleet autoscaling needs" in refused.text  # no aggregated API yet
            planning_only = copy.deepcopy(GATEWAY)
            del planning_only["metadata"]["annotations"][f"{AGGREGATED}-executor"]
            with server.client(ADMIN) as admin:
                assert admin.put(f"{API}/inferencegateways/default", json=planning_only).status_code == 201
            refused = team.put(f"{API}/namespaces/team-a/modeldeployments/qwen", json=md)
            assert refused.status_code == 422 and f"{AGGREGATED}-executor: operator" in refused.text, refused.text
            with server.client(ADMIN) as admin:
                gateway = admin.get(f"{API}/inferencegateways/default").json()
                gateway["metadata"]["annotations"] = GATEWAY["metadata"]["annotations"]
                assert admin.put(f"{API}/inferencegateways/default", json=gateway).status_code == 200
            created = team.put(f"{API}/namespaces/team-a/modeldeployments/qwen", json=md)
            assert created.status_code == 201, created.text
            url = f"{API}/namespaces/team-a/modeldeployments/qwen/scale"
            scale = team.get(url)
            assert scale.status_code == 200, scale.text
            body = scale.json()
            assert (body["apiVersion"], body["kind"], body["spec"]["replicas"]) == ("autoscaling/v1", "Scale", 1)
            body["spec"]["replicas"] = 3
            put = team.put(url, json=body)
            assert put.status_code == 200, put.text
            assert put.json()["spec"]["replicas"] == 3 and put.json()["apiVersion"] == "autoscaling/v1"
            assert team.get(f"{API}/namespaces/team-a/modeldeployments/qwen").json()["spec"]["replicas"] == 3
            stale = team.put(url, json=body)  # the resourceVersion KEDA read is gone: it reads again, as client-go
            assert stale.status_code == 409, stale.text
            again = team.get(url).json()
            again["spec"]["replicas"] = 11  # past spec.replicas' bound: refused, nothing stored
            assert team.put(url, json=again).status_code == 422
            assert team.get(url).json()["spec"]["replicas"] == 3
            # parked by KEDA (min-replicas 0) and woken again from zero, as its scale client does both
            for replicas in (0, 1):
                body = team.get(url).json()
                body["spec"]["replicas"] = replicas
                moved = team.put(url, json=body)
                assert moved.status_code == 200 and moved.json()["spec"]["replicas"] == replicas, moved.text
                assert moved.json()["status"]["replicas"] == replicas  # placed: status.replicas.total


def test_the_endpoints_stack_with_a_scaled_object_runs_after_the_gateway_stack_that_serves_its_target():
    from automation.planning.stacks import desired_state

    fleet = fleet_of(GATEWAY, gpu_class("l4", 1, "23034Mi"), cluster("c1", pools=(("gpu", "l4", 4),)), annotated(ON))
    specs = desired_state(fleet, control_plane="c1").specs
    assert "gateway" in specs["endpoints-ml-team"].depends_on  # the APIService KEDA scales through
    plain = fleet_of(GATEWAY, gpu_class("l4", 1, "23034Mi"), cluster("c1", pools=(("gpu", "l4", 4),)), annotated({}))
    endpoints = desired_state(plain, control_plane="c1").specs.get("endpoints-ml-team")
    assert endpoints is None or "gateway" not in endpoints.depends_on


@pytest.mark.parametrize("command", ["up", "preview --offline"])
def test_up_and_preview_from_files_refuse_fleet_autoscaling_naming_file_object_and_field(tmp_path, monkeypatch, capsys,
                                                                                        command):
    """KEDA scales the in-cluster portal's copy of a deployment, which `up -f` never writes (and each `up -f` would set
    spec.replicas back to the file's): fleet autoscaling needs the portal as the source of truth, so the files'
    road refuses it, with the reason, and applies nothing. Through the program-running double."""
    import re

    from tests.test_lifecycle import make_driver

    double = make_driver(tmp_path, monkeypatch)
    gateway = next(d for d in double.docs if d["kind"] == "InferenceGateway")
    gateway["metadata"]["annotations"] = dict(GATEWAY["metadata"]["annotations"])
    double.deployment("qwen3-8b")["metadata"].setdefault("annotations", {}).update(ON)
    verb, *extra = command.split()
    assert main([verb, *double.args(*extra)]) == 1
    err = capsys.readouterr().err
    line = re.search(r"fleet\.yaml:(\d+): ModelDeployment/qwen3-8b: metadata\.annotations\[modelplane\.ai/fleet-autoscaling\]: "
                     r"fleet autoscaling needs the control-plane cluster's portal as this deployment's source of truth: "
                     r"KEDA scales the portal's copy \(its aggregated API\), which applying these files never writes", err)
    assert line, err
    text = pathlib.Path(double.fleet()).read_text().splitlines()
    assert text[int(line.group(1)) - 1].strip() == f"{FLEET_PREFIX}: keda"  # the line of the field named
    assert "1 fleet-autoscaled deployment(s) in the files; nothing was applied" in err
    assert double.ran("up", since=0) == [] and double.ran("preview", since=0) == [] and double.recorded() == {}


def test_with_the_portal_as_source_of_truth_a_new_replica_count_from_keda_is_planned_and_applied(tmp_path, monkeypatch):
    """The loop that works: the portal holds the deployment and applies what it stores. KEDA's scale client PUTs a new
    spec.replicas on the scale subresource; the portal plans it (a second replica placed, the model stack changed)
    and its worker applies that stack. Through the program-running double (tests/pulumi_double.py)."""
    from automation.portal.worker import Worker
    from tests.test_lifecycle import make_driver

    double = make_driver(tmp_path, monkeypatch)
    state = double.work / ".modelplane"
    (state / "kubeconfigs").mkdir(parents=True)
    for name in ("c1", "c2"):  # their existing.secretRef
        (state / "kubeconfigs" / f"{name}-kubeconfig").write_text("apiVersion: v1\nkind: Config\n")
    (double.root / "portal").mkdir(exist_ok=True)
    with ThreadServer(double.root / "portal", apply=True) as server:
        worker = Worker(server.store, state)
        with server.client(ADMIN) as admin:
            assert admin.put(f"{API}/inferenceclasses/l4", json=gpu_class("l4", 1, "23034Mi")).status_code == 201
            for name in ("c1", "c2"):
                assert admin.put(f"{API}/inferenceclusters/{name}",
                                 json=cluster(name, pools=(("gpu", "l4", 2),))).status_code == 201
            assert admin.put(f"{API}/inferencegateways/default", json=GATEWAY).status_code == 201
            path = f"{API}/namespaces/team-a/modeldeployments/qwen"
            assert admin.put(path, json=annotated(ON, namespace="team-a")).status_code == 201
            server.settle()
            worker.execute(worker.claim())
            runs = {r["stack"]: r["status"] for r in admin.get("/runs").json()["items"]}
            assert runs and set(runs.values()) == {"succeeded"}, runs
            recorded = double.recorded()
            assert len(recorded["model-team-a.qwen"]["placements"]) == 1
            # the ScaledObject KEDA acts on, applied on the control plane in the team's endpoints stack
            applied = pulumi_double.resources(state / "backend", "modelplane-workloads", "endpoints-team-a")
            scaled = [o for r in applied for o in (r["inputs"].get("objs") or [r["inputs"]])
                      if o.get("kind") == "ScaledObject"]
            assert [o["spec"]["scaleTargetRef"]["name"] for o in scaled] == ["qwen"]
            # KEDA's scale client: GET the Scale, PUT it back with spec.replicas 2
            scale = admin.get(f"{path}/scale").json()
            scale["spec"]["replicas"] = 2
            assert admin.put(f"{path}/scale", json=scale).status_code == 200
            server.settle()
            batch = worker.claim()
            assert "model-team-a.qwen" in {r["stack"] for r in batch}  # a changed plan: its model stack
            mark = len(double.calls())
            worker.execute(batch)
            assert "model-team-a.qwen" in double.ran("up", since=mark)
            placements = double.recorded()["model-team-a.qwen"]["placements"]
            assert len(placements) == 2 and {p["cluster"] for p in placements} == {"c1", "c2"}
