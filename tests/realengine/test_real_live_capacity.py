"""Live capacity and tiers on real API servers (docs/scheduling.md "Live capacity", "Tiers"): `modelplane plan
--capacity live` reads each local cluster's Nodes, ResourceSlices and ResourceClaims as the real scheduler's DRA
plugin allocated them, and `up --capacity live` applies what it placed. The fleet is local-fleet/ with local-b (the
H100 cluster) on tier 1, as a cloud beside an on-premise local-a; the foreign workload is another team's pods claiming
L4s through the real scheduler. Plans are read from `plan -o json` (the stable machine interface), the rest from the
API servers and the backend. The tests run in order, each from what the one before left."""

from __future__ import annotations

import json
import shutil

import pytest

from automation.execution.kube import KubeError
from tests.realengine.conftest import FLEET, started, wait_for
from tests.realengine.test_real_up import running_pods

MANIFESTS: list[str] = []  # the tiered copy's folder, once the module's fleet is up


@pytest.fixture(scope="module")
def local_fleet(tmp_path_factory):
    manifests = tmp_path_factory.mktemp("tiered") / "fleet"
    shutil.copytree(FLEET, manifests)
    path = manifests / "fleet.yaml"
    text = path.read_text()
    anchor = "        name: local-b-kubeconfig\n"
    assert text.count(anchor) == 1
    path.write_text(text.replace(anchor, anchor + "  placement:\n    tier: 1\n"))
    MANIFESTS[:] = [str(manifests)]
    yield from started(tmp_path_factory, manifests)

RESOURCE = "resource.k8s.io/v1"
OTHERS = "other-team"


def foreign(api, name: str) -> None:
    """Another team's pod holding one GPU of the L4 pool through its own ResourceClaim (nothing of this fleet)."""
    api.apply({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": OTHERS}})
    api.apply({"apiVersion": RESOURCE, "kind": "ResourceClaim", "metadata": {"name": name, "namespace": OTHERS},
               "spec": {"devices": {"requests": [{"name": "gpu", "exactly": {"deviceClassName": "gpu.nvidia.com",
                                                                               "count": 1}}]}}})
    pod = {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": name, "namespace": OTHERS},
           "spec": {"nodeSelector": {"modelplane.ai/pool": "l4"},
                    "tolerations": [{"key": "nvidia.com/gpu", "operator": "Exists"}],
                    "resourceClaims": [{"name": "gpu", "resourceClaimName": name}],
                    "containers": [{"name": "train", "image": "registry.invalid/trainer:1",
                                    "resources": {"claims": [{"name": "gpu"}]}}]}}

    def made() -> bool:  # the namespace's default ServiceAccount comes from the controller-manager, a moment later
        try:
            api.apply(pod)
            return True
        except KubeError as exc:
            if "serviceaccount" in str(exc).lower():
                return False
            raise
    wait_for(f"pod {name} accepted", made, 60)


def allocated(api, name: str) -> bool:
    claim = api.get(RESOURCE, "ResourceClaim", OTHERS, name)
    return bool(claim and (claim.get("status") or {}).get("allocation"))


def plan(fleet, *args: str, fresh: bool = True) -> dict:
    done = fleet.modelplane("plan", "-f", MANIFESTS[0], *(["--fresh"] if fresh else []), "-o", "json", *args)
    return json.loads(done.stdout)


def placed(document: dict, deployment: str) -> list[str]:
    return sorted(f"{r['cluster']}:{r['engines'][0]['members'][0]['pool']}" for r in document["replicas"]
                  if r["deployment"] == deployment)


def pool(document: dict, cluster: str, name: str) -> dict:
    found = next(c for c in document["capacity"] if c["cluster"] == cluster)
    return next(p for p in found["pools"] if p["name"] == name)


def test_free_capacity_read_live_plans_as_declared(local_fleet):
    declared = plan(local_fleet)
    live = plan(local_fleet, "--capacity", "live")
    assert placed(live, "ml-team/qwen3-8b") == placed(declared, "ml-team/qwen3-8b") == ["local-a:l4"]
    for cluster in live["capacity"]:
        assert cluster["source"] == "live" and cluster["readAt"], cluster
    assert pool(live, "local-a", "l4")["free"] == {"gpu": 2}
    assert pool(live, "local-b", "h100")["published"] == {"gpu": 8}


def test_devices_another_team_holds_spill_the_new_replica_to_the_other_cluster(local_fleet):
    a = local_fleet.api("local-a")
    for name in ("theirs-0", "theirs-1"):
        foreign(a, name)
    for name in ("theirs-0", "theirs-1"):
        wait_for(f"claim {name} allocated by the scheduler", lambda: allocated(a, name))
    live = plan(local_fleet, "--capacity", "live")
    assert pool(live, "local-a", "l4")["others"] == {"gpu": 2}
    assert pool(live, "local-a", "l4")["free"] == {"gpu": 0}
    assert placed(live, "ml-team/qwen3-8b") == ["local-b:h100"]
    assert placed(plan(local_fleet), "ml-team/qwen3-8b") == ["local-a:l4"]  # declared capacity does not know
    explained = local_fleet.modelplane("plan", "-f", MANIFESTS[0], "--fresh", "--capacity", "live", "--explain").stdout
    assert "not on tier 0 (local-a)" in explained and "0 fit in the free capacity" in explained, explained


def test_up_on_live_capacity_runs_the_spilled_replica_on_the_tier_1_cluster(local_fleet):
    local_fleet.modelplane("up", "-f", MANIFESTS[0], "--capacity", "live")
    b = local_fleet.api("local-b")
    pods = wait_for("qwen3-8b's pod running on local-b", lambda: running_pods(b, "ml-team", "qwen3-8b"))
    assert pods[0]["spec"]["nodeName"] == "h100-0"
    assert not running_pods(local_fleet.api("local-a"), "ml-team", "qwen3-8b")


def test_a_snapshot_saved_where_the_clusters_are_reached_plans_the_same_elsewhere(local_fleet, tmp_path):
    snapshot = tmp_path / "capacity.json"
    local_fleet.modelplane("capacity", "save", "-f", MANIFESTS[0], "-o", str(snapshot))
    assert "client-key" not in snapshot.read_text() and "BEGIN" not in snapshot.read_text()  # no credential
    from_file = plan(local_fleet, "--capacity", str(snapshot))
    assert placed(from_file, "ml-team/qwen3-8b") == ["local-b:h100"]


def test_the_other_team_leaving_frees_the_l4s_again(local_fleet):
    a = local_fleet.api("local-a")
    for name in ("theirs-0", "theirs-1"):
        a.delete("v1", "Pod", OTHERS, name)
        a.delete(RESOURCE, "ResourceClaim", OTHERS, name)
    wait_for("the other team's claims gone", lambda: not a.list(RESOURCE, "ResourceClaim", OTHERS))
    live = plan(local_fleet, "--capacity", "live", fresh=False)  # with the record: qwen3-8b is kept on local-b
    assert pool(live, "local-a", "l4")["free"] == {"gpu": 2}
    # it folds back to tier 0, the new replica placed before the one it replaces is dropped
    assert placed(live, "ml-team/qwen3-8b") == ["local-a:l4"]
    new = next(r for r in live["replicas"] if r["deployment"] == "ml-team/qwen3-8b")
    dropped = [d for d in live["dropped"] if d["deployment"] == "ml-team/qwen3-8b"]
    assert new["state"] == "new" and len(dropped) == 1 and dropped[0]["cluster"] == "local-b"
    assert dropped[0]["replacement"] == new["name"] and "folded back" in dropped[0]["reason"], dropped


def test_up_folds_the_replica_back_to_the_on_premise_cluster(local_fleet):
    updates = local_fleet.history("model-ml-team.qwen3-8b")
    local_fleet.modelplane("up", "-f", MANIFESTS[0], "--capacity", "live")
    a, b = local_fleet.api("local-a"), local_fleet.api("local-b")
    pods = wait_for("qwen3-8b's pod running on local-a", lambda: running_pods(a, "ml-team", "qwen3-8b"))
    assert pods[0]["spec"]["nodeName"].startswith("l4-")
    wait_for("qwen3-8b's pod gone from local-b", lambda: not [
        p for p in b.list("v1", "Pod", "ml-team") if p["metadata"]["name"].startswith("qwen3-8b")])
    assert local_fleet.history("model-ml-team.qwen3-8b") == (updates or 0) + 1  # one update: new, then old deleted
    # and the next plan moves nothing: the replica's own devices count as its own
    again = plan(local_fleet, "--capacity", "live", fresh=False)
    assert not [d for d in again["dropped"] if d["deployment"] == "ml-team/qwen3-8b"]
    assert [r["state"] for r in again["replicas"] if r["deployment"] == "ml-team/qwen3-8b"] == ["kept"]


def test_a_cordoned_node_stops_counting(local_fleet):
    a = local_fleet.api("local-a")
    a.apply({"apiVersion": "v1", "kind": "Node", "metadata": {"name": "l4-0"}, "spec": {"unschedulable": True}},
            manager="kubectl-cordon")
    try:
        live = plan(local_fleet, "--capacity", "live")
        assert pool(live, "local-a", "l4")["unusable"] == {"l4-0": "cordoned"}
        assert pool(live, "local-a", "l4")["free"] == {"gpu": 1}
    finally:
        a.apply({"apiVersion": "v1", "kind": "Node", "metadata": {"name": "l4-0"}, "spec": {"unschedulable": False}},
                manager="kubectl-cordon")


def test_a_cluster_that_cannot_be_reached_keeps_its_declared_capacity_and_says_so(local_fleet, tmp_path):
    kubeconfig = (local_fleet.state / "local" / "local-b" / "kubeconfig").read_text()
    server = next(line.split("server:", 1)[1].strip() for line in kubeconfig.splitlines() if "server:" in line)
    unreachable = tmp_path / "local-b-unreachable"
    unreachable.write_text(kubeconfig.replace(server, "https://127.0.0.1:1"))  # nothing listens on port 1
    unreachable.chmod(0o600)
    live = plan(local_fleet, "--capacity", "live", "--kubeconfig", f"local-b={unreachable}")
    b = next(c for c in live["capacity"] if c["cluster"] == "local-b")
    assert b["source"] == "declared" and "cannot reach" in b["problem"], b
    assert "readAt" not in b
    assert next(c for c in live["capacity"] if c["cluster"] == "local-a")["source"] == "live"
    assert placed(live, "ml-team/llama-70b") == ["local-b:h100"]  # declared: its H100s count as the manifests say
