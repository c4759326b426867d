"""Status and conditions as the reference's tools read them: computed from the plan and how stacks stand, never
invented; composed ModelReplicas and ModelEndpoints are readable; ModelDeployment has a scale subresource."""

from __future__ import annotations

import json

import pytest
import yaml

from automation.cli import main
from automation.planning.conditions import Observed, standing
from tests.manifests import deployment, endpoint, service
from tests.portal_server import API, TEAM_A, TEAM_B, one_cluster_server

NS = API + "/namespaces/team-a"
SNAP = {"fingerprints": {"model-a.x": "f2"}}


@pytest.mark.parametrize("observed,expected", [
    (Observed({"model-a.x": {"fingerprint": "f2", "appliedAt": "t"}}), ("True", "Applied")),
    (Observed({}, {"model-a.x": {"status": "running", "fingerprint": "f2"}}), ("False", "Deploying")),
    (Observed({}, {"model-a.x": {"status": "queued", "fingerprint": "f2"}}), ("False", "Deploying")),
    (Observed({}, {"model-a.x": {"status": "failed", "fingerprint": "f2", "log": "boom\nquota exceeded\n"}}),
     ("False", "Failed")),
    (Observed({"model-a.x": {"fingerprint": "f1"}}), ("Unknown", "PendingUpdate")),
    (Observed({}, {"model-a.x": {"status": "failed", "fingerprint": "f1"}}), ("Unknown", "NotApplied")),  # stale run
    (Observed(), ("Unknown", "NotApplied")),
], ids=["applied", "running", "queued", "failed", "older-applied", "failed-older-fingerprint", "never"])
def test_a_stack_stands_only_on_what_is_known(observed, expected):
    st = standing("model-a.x", SNAP, observed)
    assert (st.status, st.reason) == expected
    if st.reason == "Failed":
        assert st.message.endswith("quota exceeded")


@pytest.fixture
def portal(tmp_path):
    with one_cluster_server(tmp_path, gpus=3) as server:
        yield server


def conditions_of(obj: dict) -> dict[str, tuple[str, str]]:
    return {c["type"]: (c["status"], c["reason"]) for c in obj["status"]["conditions"]}


def test_deployment_and_service_conditions_through_the_api(portal):
    with portal.client(TEAM_A) as team:
        assert team.put(f"{NS}/modeldeployments/qwen", json=deployment("qwen", namespace="team-a", replicas=2)).status_code == 201
        assert team.put(f"{NS}/modelservices/chat", json=service("chat", namespace="team-a")).status_code == 201
        md = team.get(f"{NS}/modeldeployments/qwen").json()
        assert conditions_of(md) == {"ReplicasScheduled": ("True", "ReplicasCreated"),
                                     "ReplicasReady": ("Unknown", "NotApplied")}  # plan-only portal: not known
        assert md["status"]["replicas"] == {"desired": 2, "placed": 2, "total": 2, "ready": 0}
        assert all(c["observedGeneration"] == 1 for c in md["status"]["conditions"])
        ms = team.get(f"{NS}/modelservices/chat").json()
        assert conditions_of(ms)["EndpointsResolved"] == ("True", "Resolved")
        assert "Matched 2 endpoint(s)" in ms["status"]["conditions"][0]["message"]
        big = team.put(f"{NS}/modeldeployments/big", json=deployment("big", namespace="team-a", replicas=5))
        assert conditions_of(big.json())["ReplicasScheduled"] == ("False", "InsufficientCapacity")
        assert "Scheduled 1 of 5 replicas" in big.json()["status"]["conditions"][0]["message"]


def test_an_endpoint_is_routed_only_by_a_service_of_its_own_namespace():
    """Composed endpoints' RoutingReady is read from the snapshot's routes, indexed once per snapshot: the same
    endpoint name in another namespace is not routed by this namespace's service."""
    from automation.planning.conditions import composed

    def ep(namespace: str, name: str) -> dict:
        return {"namespace": namespace, "name": name, "url": f"http://g/{namespace}/{name}/v1", "rewritePath": "/",
                "labels": {}, "composed": True}

    snap = {"fingerprints": {}, "routes": {"team-a/chat": ["r1"], "team-b/chat": ["r2"]},
            "endpoints": [ep("team-a", "r1"), ep("team-a", "r2"), ep("team-b", "r2")]}
    found = {(o["metadata"]["namespace"], o["metadata"]["name"]): conditions_of(o)["RoutingReady"][1]
             for o in composed(None, snap, Observed())}
    assert found == {("team-a", "r1"): "NotApplied", ("team-a", "r2"): "NotRouted", ("team-b", "r2"): "NotApplied"}
    assert [o["metadata"]["name"] for o in composed("team-b", snap, Observed())] == ["r2"]


def test_composed_replicas_and_endpoints_are_listed_read_only(portal):
    with portal.client(TEAM_A) as team:
        assert team.put(f"{NS}/modeldeployments/qwen", json=deployment("qwen", namespace="team-a", replicas=2)).status_code == 201
        assert team.put(f"{NS}/modelservices/chat", json=service("chat", namespace="team-a")).status_code == 201
        assert team.put(f"{NS}/modelendpoints/ext", json=endpoint("ext", namespace="team-a")).status_code == 201
        replicas = team.get(f"{NS}/modelreplicas").json()["items"]
        assert len(replicas) == 2 and {r["spec"]["clusterName"] for r in replicas} == {"c1"}
        assert conditions_of(replicas[0]) == {"ModelAccepted": ("Unknown", "NotApplied"),
                                              "ModelReady": ("Unknown", "NotApplied")}
        name = replicas[0]["metadata"]["name"]
        assert team.get(f"{NS}/modelreplicas/{name}").json()["metadata"]["labels"]["modelplane.ai/deployment"] == "qwen"
        refused = team.put(f"{NS}/modelreplicas/{name}", json=replicas[0])
        assert refused.status_code == 405 and refused.headers["Allow"] == "GET" and refused.json()["kind"] == "Status"
        assert team.delete(f"{NS}/modelreplicas/{name}").status_code == 405
        endpoints = {e["metadata"]["name"]: e for e in team.get(f"{NS}/modelendpoints").json()["items"]}
        assert set(endpoints) == {"ext", *(r["metadata"]["name"] for r in replicas)}
        assert endpoints[name]["spec"]["url"].endswith(f"/team-a/{name}/v1")
        assert conditions_of(endpoints["ext"])["RoutingReady"] == ("False", "NotRouted")  # no service selects it
        clash = team.put(f"{NS}/modelendpoints/{name}", json=endpoint(name, namespace="team-a"))
        assert clash.status_code == 409 and "composed for a replica" in clash.json()["message"]
    with portal.client(TEAM_B) as other:
        assert other.get(f"{NS}/modelreplicas").status_code == 404  # another team's replicas are not visible


def test_kubectl_scale_through_the_scale_subresource(portal):
    with portal.client(TEAM_A) as team:
        assert team.put(f"{NS}/modeldeployments/qwen", json=deployment("qwen", namespace="team-a")).status_code == 201
        scale = team.get(f"{NS}/modeldeployments/qwen/scale").json()
        assert scale["kind"] == "Scale" and scale["spec"]["replicas"] == 1 and scale["status"]["replicas"] == 1
        assert scale["status"]["selector"] == "modelplane.ai/deployment=qwen"
        scale["spec"]["replicas"] = 3
        scaled = team.put(f"{NS}/modeldeployments/qwen/scale", json=scale)
        assert scaled.status_code == 200 and scaled.json()["spec"]["replicas"] == 3
        assert scaled.json()["status"]["replicas"] == 3
        md = team.get(f"{NS}/modeldeployments/qwen").json()
        assert md["spec"]["replicas"] == 3 and md["metadata"]["generation"] == 2
        stale = team.put(f"{NS}/modeldeployments/qwen/scale", json=scale)  # the old resourceVersion
        assert stale.status_code == 409
        assert team.put(f"{NS}/modeldeployments/qwen/scale", json={"spec": {"replicas": -1}}).status_code == 422
        parked = team.put(f"{NS}/modeldeployments/qwen/scale", json={"spec": {"replicas": 0}})  # v0.5: 0..10
        assert parked.status_code == 200 and parked.json()["status"]["replicas"] == 0, parked.text
    with portal.client(TEAM_B) as other:
        assert other.put(f"{NS}/modeldeployments/qwen/scale", json={"spec": {"replicas": 1}}).status_code == 403


def test_status_yaml_prints_every_object_with_its_conditions(capsys, tmp_path):
    import pathlib

    examples = pathlib.Path(__file__).resolve().parent.parent / "examples"
    assert main(["status", "-f", str(examples), "-o", "yaml", "--state", str(tmp_path / "state")]) == 0
    document = yaml.safe_load(capsys.readouterr().out)
    assert document["kind"] == "List"
    kinds = {o["kind"] for o in document["items"]}
    assert kinds == {"InferenceClass", "InferenceCluster", "InferenceGateway", "ModelCache", "ModelDeployment",
                     "ModelEndpoint", "ModelService", "ModelReplica", "TeamPolicy"}
    for obj in document["items"]:
        assert obj["status"]["conditions"], obj["metadata"]["name"]
        for c in obj["status"]["conditions"]:
            assert c["status"] in ("True", "False", "Unknown") and c["reason"] and c["message"]
    clusters = [o for o in document["items"] if o["kind"] == "InferenceCluster"]
    assert all(conditions_of(c)["ClusterReady"] == ("Unknown", "NotApplied") for c in clusters)  # nothing applied
    json.dumps(document)  # plain data only


# ---- scale to zero (the reference's v0.5, its PR #454) --------------------------------------------------------------

def _parked_fleet(replicas: int):
    from tests.manifests import cluster, gpu_class, run

    loaded = run(gpu_class("l4", 1, "23034Mi"), cluster("c1", pools=(("gpu", "l4", 2),)),
                 deployment("qwen", namespace="team-a", replicas=replicas))
    assert not loaded.errors, [str(e) for e in loaded.errors]
    return loaded.fleet


@pytest.mark.parametrize("recorded,scheduled,ready", [
    # nothing of it applied: parked, and Ready as upstream's XR (both conditions True, reason ScaledToZero)
    (False, ("True", "ScaledToZero"), ("True", "ScaledToZero")),
    # its model stack still in the record: its replicas run until `up` destroys it
    (True, ("True", "ScaledToZero"), ("Unknown", "PendingUpdate")),
], ids=["nothing-applied", "stack-still-applied"])
def test_a_deployment_scaled_to_zero_composes_nothing_and_reads_ready(recorded, scheduled, ready):
    from automation.planning.conditions import snapshot, with_status
    from automation.planning.stacks import desired_state

    desired = desired_state(_parked_fleet(0))
    assert desired.plan.replicas == [] and desired.plan.unscheduled == []
    assert not [s for s in desired.specs if s.startswith("model-")]  # no model stack, no replica objects
    assert not [ep for ep in desired.rendered.endpoints if ep.composed]  # no composed endpoint
    applied = {"model-team-a.qwen": {"fingerprint": "f1", "appliedAt": "t"}} if recorded else {}
    md = deployment("qwen", namespace="team-a", replicas=0)
    status = with_status(md, snapshot(desired), Observed(applied), [])["status"]
    assert conditions_of({"status": status}) == {"ReplicasScheduled": scheduled, "ReplicasReady": ready}
    assert status["conditions"][0]["message"] == "0 replicas desired"  # upstream's message
    assert status["replicas"]["total"] == 0 and status["replicas"]["ready"] == 0  # what the scale subresource reads
    assert status["placement"] == [] and status["unscheduled"] is None


def test_up_destroys_a_parked_deployments_model_stack_without_prune_and_keeps_other_removed_stacks():
    from automation.execution.session import prepare, selected
    from automation.record.applied import Applied, AppliedStack

    running = desired_state_of(_parked_fleet(1))
    record = Applied({name: AppliedStack(spec.fingerprint) for name, spec in running.specs.items()}
                     | {"model-team-a.gone": AppliedStack("f0")}, "memory")
    prepared = prepare(_parked_fleet(0), record)
    chosen = {c.name: str(c.change) for c in selected(prepared, "up")}
    assert chosen.get("model-team-a.qwen") == "delete"  # the input asks for no replica: destroyed by `up`
    assert "model-team-a.gone" not in chosen  # not in this input: kept unless --prune, as before
    kept = {c.name for c in prepared.kept_by_default("up", prune=False)}
    assert "model-team-a.gone" in kept and "model-team-a.qwen" not in kept
    assert selected(prepared, "up", prune=True)[-1].change == "delete"


def desired_state_of(fleet):
    from automation.planning.stacks import desired_state

    return desired_state(fleet)


def test_a_parked_deployment_through_the_api_lists_no_replica(portal):
    with portal.client(TEAM_A) as team:
        created = team.put(f"{NS}/modeldeployments/qwen", json=deployment("qwen", namespace="team-a", replicas=0))
        assert created.status_code == 201, created.text
        assert conditions_of(created.json()) == {"ReplicasScheduled": ("True", "ScaledToZero"),
                                                 "ReplicasReady": ("True", "ScaledToZero")}
        assert team.get(f"{NS}/modelreplicas").json()["items"] == []
        assert team.get(f"{NS}/modeldeployments/qwen/scale").json()["status"]["replicas"] == 0
