"""The stacks of a multi-pod model and its cache on the real engine: a ModelCache staged on local-a's filer, and a
Leader and Worker served by llm-d (a LeaderWorkerSet). The real LeaderWorkerSet controller runs in the local fleet
(automation/local/control_plane.py `start_lws`): it makes the group's pods and reports the Available condition the
model stack waits for, so a model stack that succeeds here has been waited on by the real producer of that condition.
"""

from __future__ import annotations

import shutil

from tests.realengine.conftest import FLEET, wait_for
from tests.realengine.test_real_up import running_pods

GANG = FLEET.parents[0] / "tests" / "realengine" / "data" / "gang-and-cache.yaml"


def with_gang(tmp_path) -> str:
    fleet = tmp_path / "fleet"
    shutil.copytree(FLEET, fleet, dirs_exist_ok=True)
    shutil.copy(GANG, fleet / "gang-and-cache.yaml")
    return str(fleet)


def condition(obj: dict, kind: str) -> str | None:
    return next((c["status"] for c in (obj.get("status") or {}).get("conditions", []) if c["type"] == kind), None)


def test_a_cache_and_a_leader_worker_model_apply_and_their_pods_run(local_fleet, tmp_path):
    local_fleet.modelplane("up", "-f", with_gang(tmp_path))
    for stack in ("cache-ml-team.qwen3-32b", "model-ml-team.qwen3-32b"):
        assert len(local_fleet.checkpoint(stack)["deployment"].get("resources") or []) > 1, stack
    a = local_fleet.api("local-a")
    # the cache's claim is bound by the real PersistentVolume controller to one of the filer's volumes
    claims = [c for c in a.list("v1", "PersistentVolumeClaim", "ml-team")]
    assert claims and all(c["status"]["phase"] == "Bound" for c in claims), claims
    assert all(c["spec"]["volumeName"].startswith("local-filer-") for c in claims)
    # the LeaderWorkerSet the model stack waited for is Available, as its real controller reports it
    sets = a.list("leaderworkerset.x-k8s.io/v1", "LeaderWorkerSet", "ml-team")
    assert len(sets) == 1 and condition(sets[0], "Available") == "True", sets
    # its controller made the leader's and the worker's pods; each runs on its own L4 node with a device allocated,
    # and mounts the cache's volume
    pods = wait_for("the leader's and the worker's pods running", lambda: (
        lambda p: p if len(p) == 2 else None)(running_pods(a, "ml-team", "qwen3-32b")))
    assert {p["spec"]["nodeName"] for p in pods} == {"l4-0", "l4-1"}
    assert all(p["metadata"]["labels"].get("leaderworkerset.sigs.k8s.io/name") for p in pods)
    worker = [p for p in pods if p["metadata"]["labels"].get("leaderworkerset.sigs.k8s.io/worker-index") == "1"]
    assert worker, [p["metadata"]["labels"] for p in pods]  # labelled by the controller's pod webhook
    mounted = {v["persistentVolumeClaim"]["claimName"] for p in pods for v in p["spec"].get("volumes", [])
               if "persistentVolumeClaim" in v}
    assert mounted == {c["metadata"]["name"] for c in claims}
    allocated = [c for c in a.list("resource.k8s.io/v1", "ResourceClaim", "ml-team")
                 if (c.get("status") or {}).get("allocation") and c["metadata"]["name"].startswith("qwen3-32b")]
    assert len(allocated) == 2


def test_removing_the_gang_removes_its_set_and_pods_and_keeps_the_cache(local_fleet, tmp_path):
    fleet = with_gang(tmp_path)
    gang = tmp_path / "fleet" / "gang-and-cache.yaml"
    gang.write_text(gang.read_text().split("---\n")[0])  # the cache stays, the deployment goes
    local_fleet.modelplane("up", "-f", fleet, "--prune")
    a = local_fleet.api("local-a")
    wait_for("the LeaderWorkerSet gone", lambda: not a.list("leaderworkerset.x-k8s.io/v1", "LeaderWorkerSet",
                                                              "ml-team"))
    wait_for("its pods gone", lambda: not [p for p in a.list("v1", "Pod", "ml-team")
                                          if p["metadata"]["name"].startswith("qwen3-32b")])
    assert local_fleet.history("model-ml-team.qwen3-32b") is None
    assert [c for c in a.list("v1", "PersistentVolumeClaim", "ml-team") if c["status"]["phase"] == "Bound"]
