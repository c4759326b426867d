"""`modelplane up` through the real CLI and provider, on a local fleet of two Existing clusters with different GPUs
(local-fleet/: local-a with L4 nodes hosts the front door, local-b with an H100 node). One fleet per module: the
tests run in order, each starting from what the one before applied, as a platform team's day goes."""

from __future__ import annotations


from tests.realengine.conftest import FLEET, wait_for

STACKS = {"platform-local-a", "platform-local-b", "gateway", "team-ml-team.local-a", "team-ml-team.local-b",
          "model-ml-team.qwen3-8b", "model-ml-team.llama-70b", "endpoints-ml-team", "service-ml-team.qwen3-8b"}


def running_pods(api, namespace: str, prefix: str) -> list[dict]:
    """The running engine pods of a deployment: those that claim devices (its endpoint picker claims none)."""
    pods = api.list("v1", "Pod", namespace)
    return [p for p in pods if p["metadata"]["name"].startswith(prefix) and p["spec"].get("resourceClaims")
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
    # the Dynamo platform goes only where a placed replica is Dynamo-served (none here), not to every cluster with an
    # NVIDIA pool (both are): no platform stack installs its release, and neither API server has its namespace
    for cluster, api in (("local-a", a), ("local-b", b)):
        resources = local_fleet.checkpoint(f"platform-{cluster}")["deployment"]["resources"]
        charts = [str(r["inputs"].get("chart")) for r in resources if r["type"] == "kubernetes:helm.sh/v3:Release"]
        assert charts and not [c for c in charts if "dynamo" in c], charts
        assert "dynamo-system" not in {n["metadata"]["name"] for n in api.list("v1", "Namespace", None)}


def test_the_engine_made_what_each_model_pod_needs_before_its_workload(local_fleet):
    """A Deployment's step waits for its pods, which cannot be made before their ServiceAccount and claim templates:
    started first, two such steps held both of `--parallel 2`'s slots of a model stack for its hour-long readiness
    timeout. The backend's checkpoint holds the order the engine kept (each Deployment's dependencies)."""
    for stack in ("model-ml-team.qwen3-8b", "model-ml-team.llama-70b"):
        resources = local_fleet.checkpoint(stack)["deployment"]["resources"]
        urns = {(r["type"].rsplit(":", 1)[-1], r["inputs"]["metadata"]["name"]): r["urn"] for r in resources
                if r["type"].startswith("kubernetes:") and "metadata" in (r.get("inputs") or {})}
        deployments = [r for r in resources if r["type"] == "kubernetes:apps/v1:Deployment"]
        assert len(deployments) == 2, stack  # the engine's and its endpoint picker's
        for deployment in deployments:
            pod = deployment["inputs"]["spec"]["template"]["spec"]
            needs = {("ServiceAccount", pod.get("serviceAccountName")), *(
                ("ResourceClaimTemplate", c["resourceClaimTemplateName"]) for c in pod.get("resourceClaims") or []), *(
                ("ConfigMap", v["configMap"]["name"]) for v in pod.get("volumes") or [] if "configMap" in v)}
            needed = {urns[n] for n in needs if n in urns}
            assert needed and needed <= set(deployment.get("dependencies") or []), deployment["urn"]


def test_a_second_up_with_nothing_changed_runs_no_engine(local_fleet):
    before = {stack: local_fleet.history(stack) for stack in STACKS}
    local_fleet.modelplane("up", "-f", str(FLEET))
    assert {stack: local_fleet.history(stack) for stack in STACKS} == before


def edited_fleet(tmp_path, edit) -> str:
    """local-fleet/ copied, its models file changed by `edit` (text -> text)."""
    import shutil

    fleet = tmp_path / "fleet"
    shutil.copytree(FLEET, fleet, dirs_exist_ok=True)
    models = fleet / "models.yaml"
    models.write_text(edit(models.read_text()))
    return str(fleet)


def test_one_deployment_changed_runs_exactly_its_stacks_and_its_pods_roll(local_fleet, tmp_path):
    a = local_fleet.api("local-a")
    old = {p["metadata"]["name"] for p in running_pods(a, "ml-team", "qwen3-8b")}
    fleet = edited_fleet(tmp_path, lambda text: text.replace('"--max-model-len=16384"', '"--max-model-len=8192"'))
    before = {stack: local_fleet.history(stack) for stack in STACKS}
    local_fleet.modelplane("up", "-f", fleet)
    after = {stack: local_fleet.history(stack) for stack in STACKS}
    assert {stack for stack in STACKS if after[stack] != before[stack]} == {"model-ml-team.qwen3-8b"}
    rolled = wait_for("qwen3-8b's new pod running", lambda: [
        p for p in running_pods(a, "ml-team", "qwen3-8b") if p["metadata"]["name"] not in old])
    assert "--max-model-len=8192" in rolled[0]["spec"]["containers"][0]["args"]


def test_scaling_to_two_places_a_second_replica_and_back_to_one_removes_it(local_fleet, tmp_path):
    two = edited_fleet(tmp_path, lambda text: text.replace("name: qwen3-8b\n  namespace: ml-team\nspec:\n  replicas: 1",
                                                           "name: qwen3-8b\n  namespace: ml-team\nspec:\n  replicas: 2"))
    local_fleet.modelplane("up", "-f", two)
    a, b = local_fleet.api("local-a"), local_fleet.api("local-b")

    def engines() -> list[dict]:
        return running_pods(a, "ml-team", "qwen3-8b") + running_pods(b, "ml-team", "qwen3-8b")

    pods = wait_for("two qwen3-8b engine pods", lambda: (lambda p: p if len(p) == 2 else None)(engines()))
    assert all(p["spec"]["nodeName"].startswith(("l4-", "h100-")) for p in pods)  # each on a simulated GPU node
    local_fleet.modelplane("up", "-f", str(FLEET), "--prune")
    wait_for("back to one engine pod", lambda: len(engines()) == 1)


def test_a_removed_deployment_leaves_the_api_server_and_nothing_else_runs(local_fleet, tmp_path):
    fleet = edited_fleet(tmp_path, lambda text: "---\n".join(d for d in text.split("---\n") if "name: llama-70b" not in d))
    before = {stack: local_fleet.history(stack) for stack in STACKS}
    local_fleet.modelplane("up", "-f", fleet, "--prune")
    b = local_fleet.api("local-b")
    wait_for("llama-70b's Deployment gone from local-b", lambda: not [
        d for d in b.list("apps/v1", "Deployment", "ml-team") if d["metadata"]["name"].startswith("llama-70b")])
    wait_for("its pods gone", lambda: not b.list("v1", "Pod", "ml-team") or all(
        not p["metadata"]["name"].startswith("llama-70b") for p in b.list("v1", "Pod", "ml-team")))
    after = {stack: local_fleet.history(stack) for stack in STACKS}
    changed = {stack for stack in STACKS if after[stack] != before[stack]}
    # the model's stack and its team's stack on local-b (no replica of the team is left there) are destroyed and
    # leave the backend; nothing else ran
    assert changed == {"model-ml-team.llama-70b", "team-ml-team.local-b"}, changed
    assert after["model-ml-team.llama-70b"] is None and after["team-ml-team.local-b"] is None
    # the next `up --prune` has nothing left to destroy, and runs nothing
    local_fleet.modelplane("up", "-f", fleet, "--prune")
    assert {stack: local_fleet.history(stack) for stack in STACKS} == after
    # the other model still runs where it was
    assert running_pods(local_fleet.api("local-a"), "ml-team", "qwen3-8b")


def test_destroy_leaves_nothing_of_ours_and_keeps_the_crds_another_workload_uses(local_fleet):
    a = local_fleet.api("local-a")
    # another team's Gateway, not ours, on the CRDs our platform stack adopted
    a.apply({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "other-team"}})
    a.apply({"apiVersion": "gateway.networking.k8s.io/v1", "kind": "Gateway",
             "metadata": {"name": "theirs", "namespace": "other-team"},
             "spec": {"gatewayClassName": "theirs", "listeners": [{"name": "http", "port": 80, "protocol": "HTTP"}]}})
    local_fleet.modelplane("destroy", "-f", str(FLEET), "--yes")
    for cluster in ("local-a", "local-b"):
        api = local_fleet.api(cluster)
        wait_for(f"the model Deployments gone from {cluster}", lambda api=api: not api.list("apps/v1", "Deployment",
                                                                                            "ml-team"))
        assert api.get("apiextensions.k8s.io/v1", "CustomResourceDefinition", None,
                       "gateways.gateway.networking.k8s.io") is not None
    assert a.get("gateway.networking.k8s.io/v1", "Gateway", "other-team", "theirs") is not None
    assert a.get("gateway.networking.k8s.io/v1", "Gateway", "modelplane-system", "inference-gateway") is None
