"""Live capacity on real API servers (docs/scheduling.md "Live capacity"): `modelplane plan --capacity live` reads
each local cluster's Nodes, ResourceSlices and ResourceClaims as the real scheduler's DRA plugin allocated them.
The foreign workload here is another team's pods claiming L4s through the real scheduler; the plan is read from
`plan -o json` (the stable machine interface), what it read from `capacity show -o json`."""

from __future__ import annotations

import json

from automation.execution.kube import KubeError
from tests.realengine.conftest import FLEET, wait_for

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


def plan(fleet, *args: str) -> dict:
    done = fleet.modelplane("plan", "-f", str(FLEET), "--fresh", "-o", "json", *args)
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


def test_a_snapshot_saved_where_the_clusters_are_reached_plans_the_same_elsewhere(local_fleet, tmp_path):
    snapshot = tmp_path / "capacity.json"
    local_fleet.modelplane("capacity", "save", "-f", str(FLEET), "-o", str(snapshot))
    assert "client-key" not in snapshot.read_text() and "BEGIN" not in snapshot.read_text()  # no credential
    from_file = plan(local_fleet, "--capacity", str(snapshot))
    assert placed(from_file, "ml-team/qwen3-8b") == ["local-b:h100"]


def test_the_other_team_leaving_frees_the_l4s_again(local_fleet):
    a = local_fleet.api("local-a")
    for name in ("theirs-0", "theirs-1"):
        a.delete("v1", "Pod", OTHERS, name)
        a.delete(RESOURCE, "ResourceClaim", OTHERS, name)
    wait_for("the other team's claims gone", lambda: not a.list(RESOURCE, "ResourceClaim", OTHERS))
    live = plan(local_fleet, "--capacity", "live")
    assert pool(live, "local-a", "l4")["free"] == {"gpu": 2}
    assert placed(live, "ml-team/qwen3-8b") == ["local-a:l4"]


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
