"""`modelplane up` through the real CLI and provider, on a local fleet of two Existing clusters with different GPUs
(local-fleet/: local-a with L4 nodes hosts the front door, local-b with an H100 node). One fleet per module: the
tests run in order, each starting from what the one before applied, as a platform team's day goes."""

from __future__ import annotations


from tests.realengine.conftest import FLEET, wait_for

STACKS = {"platform-local-a", "platform-local-b", "gateway", "team-ml-team.local-a", "team-ml-team.local-b",
          "model-ml-team.qwen3-8b", "model-ml-team.llama-70b", "endpoints-ml-team", "service-ml-team.qwen3-8b"}


def running_pods(api, namespace: str, prefix: str) -> list[dict]:
    pods = api.list("v1", "Pod", namespace)
    return [p for p in pods if p["metadata"]["name"].startswith(prefix)
            and (p.get("status") or {}).get("phase") == "Running"
            and any(c["type"] == "Ready" and c["status"] == "True" for c in p["status"].get("conditions", []))]


def test_the_first_up_applies_every_stack_and_the_model_pods_run_on_simulated_gpus(local_fleet):
    local_fleet.modelplane("up", "-f", str(FLEET))
    for stack in STACKS:  # the backend holds every stack, with the resources its program registered
        deployment = local_fleet.checkpoint(stack)["deployment"]
        assert len(deployment.get("resources") or []) > 1, stack
    a, b = local_fleet.api("local-a"), local_fleet.api("local-b")
    qwen = wait_for("qwen3-8b's pod running on local-a", lambda: running_pods(a, "ml-team", "qwen3-8b"))
    llama = wait_for("llama-70b's pod running on local-b", lambda: running_pods(b, "ml-team", "llama-70b"))
    assert qwen[0]["spec"]["nodeName"].startswith("l4-") and llama[0]["spec"]["nodeName"] == "h100-0"
    # the scheduler bound them with their DRA claims allocated from the simulated slices
    claims = b.list("resource.k8s.io/v1", "ResourceClaim", "ml-team")
    allocated = [c for c in claims if (c.get("status") or {}).get("allocation")]
    assert allocated and len(allocated[0]["status"]["allocation"]["devices"]["results"]) == 2
    assert {r["device"] for r in allocated[0]["status"]["allocation"]["devices"]["results"]} <= {
        f"gpu-{i}" for i in range(8)}
