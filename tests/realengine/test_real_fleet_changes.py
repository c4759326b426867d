"""A fleet's life beyond one machine and one set of clusters, on the real engine (local-fleet/: local-a with L4 nodes
hosts the front door, local-b with an H100 node): clusters that already hold what a platform stack installs, a
second operator who has only the backend, and a cluster whose API server is gone, removed from the fleet. One local
fleet for the module; the tests run in order, each from what the one before left."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

from automation.execution.kube import KubeError
from automation.local import control_plane
from automation.local.standin_charts import crd
from components import crds
from components.versions import CHARTS
from tests.realengine.conftest import FLEET, Fleet, qualified, wait_for
from tests.realengine.test_real_up import STACKS, running_pods

CLUSTERS = ("local-a", "local-b")
OWNER = "platform-team"  # the field manager and labels of another owner of the cluster (kubectl, a GitOps tool)
THEIRS = {"app.kubernetes.io/managed-by": OWNER, "platform.example.com/owner": OWNER}
CRD = ("apiextensions.k8s.io/v1", "CustomResourceDefinition", None)
CERT_MANAGER = CHARTS["cert-manager"]


def chart_crds(key: str) -> list[dict]:
    """The CRDs of a chart as its stand-in installs them, labelled as another owner's instead (the stand-in's own
    label would say the chart installed them)."""
    spec = CHARTS[key]
    out = []
    for group, kind in spec.crds:
        doc = crd(group, kind, [s.rpartition("/")[2] for s in spec.serves if s.rpartition("/")[0] == group])
        doc["metadata"]["labels"] = dict(THEIRS)
        out.append(doc)
    return out


def owned_by_them(doc: dict) -> dict:
    return {**doc, "metadata": {**doc["metadata"], "labels": {**(doc["metadata"].get("labels") or {}), **THEIRS}}}


def theirs() -> tuple[list[dict], list[dict], list[dict]]:
    """The CRDs another owner applies before the first `up`: the Gateway API's, the LWS CRD, cert-manager's."""
    return [owned_by_them(doc) for doc in crds.gateway_api()], chart_crds("lws"), chart_crds("cert-manager")


def crd_named(api, name: str) -> dict:
    found = api.get(*CRD, name)
    assert found is not None, f"CRD {name} is gone"
    return found


def last_result(fleet: Fleet, stack: str) -> str | None:
    done = fleet.pulumi("stack", "history", "--json", "--page-size", "1", "--stack", qualified(stack))
    assert done.returncode == 0, done.stderr
    return ((json.loads(done.stdout or "[]") or [{}])[0]).get("result")


def test_crds_already_on_the_clusters_stop_the_first_up_at_the_release_that_templates_them(local_fleet):
    """Before the first `up`, each cluster holds CRDs of another owner: the Gateway API's (which `local up` installs,
    as GKE ships them) taken over by that owner's manager and labels, the LeaderWorkerSet CRD, and cert-manager's
    (applied as `kubectl apply -f cert-manager.crds.yaml` does). docs/platform.md: the bundled Gateway API CRDs
    are adopted; a chart's crds/ (LWS 0.10.0's) leaves an existing CRD alone; a templated CRD (cert-manager's) not
    owned by the release is refused by Helm, until its owner hands it over with Helm's ownership metadata."""
    gateway_api, lws, cert_manager = theirs()
    for cluster in CLUSTERS:
        api = local_fleet.api(cluster)
        for doc in gateway_api + lws + cert_manager:
            api.apply(doc, manager=OWNER)

    first = local_fleet.modelplane("up", "-f", str(FLEET), check=False)
    assert first.returncode == 1, first.stderr[-3000:]
    for cluster in CLUSTERS:  # each platform stack stopped at the cert-manager release
        assert last_result(local_fleet, f"platform-{cluster}") == "failed"
        api = local_fleet.api(cluster)
        for doc in cert_manager:  # and nothing took the CRDs over
            found = crd_named(api, doc["metadata"]["name"])
            assert found["metadata"]["labels"] == THEIRS
            assert "meta.helm.sh/release-name" not in (found["metadata"].get("annotations") or {})
    assert local_fleet.history("model-ml-team.qwen3-8b") is None  # nothing ran on a cluster whose platform failed


def test_once_their_owner_hands_cert_manager_s_crds_to_the_release_up_applies_every_stack(local_fleet):
    gateway_api, lws, cert_manager = theirs()
    release = {"meta.helm.sh/release-name": f"mp-{CERT_MANAGER.key}",
               "meta.helm.sh/release-namespace": CERT_MANAGER.namespace}
    for cluster in CLUSTERS:  # their owner hands cert-manager's CRDs to the release (Helm's adoption)
        api = local_fleet.api(cluster)
        for doc in cert_manager:  # the whole CRD, as its owner applied it: a field left out of an apply is dropped
            api.apply({**doc, "metadata": {"name": doc["metadata"]["name"], "annotations": release,
                                           "labels": {**THEIRS, "app.kubernetes.io/managed-by": "Helm"}}},
                      manager=OWNER)

    local_fleet.modelplane("up", "-f", str(FLEET))
    for stack in STACKS:
        assert len(local_fleet.checkpoint(stack)["deployment"].get("resources") or []) > 1, stack
    for cluster in CLUSTERS:
        api = local_fleet.api(cluster)
        for doc in gateway_api:  # adopted: applied by our provider over theirs, their labels and fields kept
            found = crd_named(api, doc["metadata"]["name"])
            assert found["metadata"]["annotations"].get("pulumi.com/patchForce") == "true"
            assert THEIRS.items() <= found["metadata"]["labels"].items()
            managers = {m["manager"] for m in found["metadata"]["managedFields"]}
            assert OWNER in managers and any(m.startswith("pulumi-kubernetes") for m in managers), managers
        for doc in lws:  # left alone: the release's crds/ is skipped when the CRD exists
            found = crd_named(api, doc["metadata"]["name"])
            assert found["metadata"]["labels"] == THEIRS and not found["metadata"].get("annotations")
        for doc in cert_manager:  # the release's now: its template applied, and says keep
            found = crd_named(api, doc["metadata"]["name"])
            assert found["metadata"]["annotations"].get("helm.sh/resource-policy") == "keep"
            assert found["metadata"]["labels"].get("modelplane.ai/stand-in") == "true"
    wait_for("llama-70b's pod running on local-b", lambda: running_pods(local_fleet.api("local-b"), "ml-team",
                                                                         "llama-70b"))


def a_second_operator(local_fleet: Fleet, tmp_path) -> tuple[Fleet, Path]:
    """What a second operator has: a checkout of the repository (the fleet's files), the backend (here a copy of
    `<state>/backend`; a team shares one bucket), the passphrase, and the clusters' kubeconfigs where `up` finds
    an Existing cluster's (`<state>/kubeconfigs/<existing.secretRef.name>`). No other file of the first machine's
    state folder, and a cache folder of their own. Returns their fleet and checkout."""
    checkout = tmp_path / "checkout"
    shutil.copytree(FLEET, checkout / "local-fleet")
    state = checkout / ".modelplane"
    shutil.copytree(local_fleet.state / "backend", state / "backend")
    (state / "kubeconfigs").mkdir(parents=True)
    for cluster in CLUSTERS:
        shutil.copy(local_fleet.state / "local" / cluster / "kubeconfig", state / "kubeconfigs" / f"{cluster}-kubeconfig")
    return Fleet(state, {**local_fleet.env, "MODELPLANE_CACHE_DIR": str(tmp_path / "their-cache")}), checkout


def test_a_second_operator_with_only_the_backend_reads_the_record_and_runs_nothing(local_fleet, tmp_path):
    """`a_second_operator`: the same record read, and nothing to run."""
    other, checkout = a_second_operator(local_fleet, tmp_path)
    before = {stack: other.history(stack) for stack in STACKS}
    assert None not in before.values()

    mine = json.loads(local_fleet.modelplane("status", "-f", str(FLEET), "-o", "json").stdout)
    seen = json.loads(other.modelplane("status", "-f", str(checkout / "local-fleet"), "-o", "json").stdout)
    assert seen == mine
    other.modelplane("up", "-f", str(checkout / "local-fleet"))
    assert {stack: other.history(stack) for stack in STACKS} == before  # no stack ran


def recorded_under_its_legacy_name(state, stack: str) -> str:
    """Puts a stack of a file:// backend back as the first stack-name encoding recorded it: the stack under its legacy
    name, and every resource's name (derived from the stack's) with it, in the backend's own checkpoint file."""
    from automation.projects import project_of
    from fleet.stack_id import StackId

    id_ = StackId.parse(stack)
    legacy = id_.legacy_name()
    assert legacy
    stacks = state / "backend" / ".pulumi" / "stacks" / project_of(id_.kind)
    checkpoint = (stacks / f"{stack}.json").read_text()
    assert checkpoint.count(f"::{stack}-") > 3  # resources named after the stack
    (stacks / f"{legacy}.json").write_text(checkpoint.replace(stack, legacy))
    for old in stacks.glob(f"{stack}.json*"):
        old.unlink()
    shutil.rmtree(state / "backend" / ".pulumi" / "history" / project_of(id_.kind) / stack, ignore_errors=True)
    return legacy


def test_a_stack_recorded_under_its_legacy_name_is_renamed_and_its_objects_kept(local_fleet, tmp_path):
    """A stack applied before the one-to-one stack names (`model-ml-team-qwen3-8b`, its resources named after it) is
    renamed in the backend by the next `up` (automation/execution/migration.py), and its resources keep their
    identity through the aliases the programs give them: the first update after the rename changes the Deployment
    in place, creating and deleting nothing. A second operator's copy of the backend, so the module's record stays
    the first machine's."""
    stack = "model-ml-team.qwen3-8b"
    other, checkout = a_second_operator(local_fleet, tmp_path)
    legacy = recorded_under_its_legacy_name(other.state, stack)
    assert other.history(stack) is None and other.history(legacy) is not None
    a = local_fleet.api("local-a")
    uids = {d["metadata"]["name"]: d["metadata"]["uid"] for d in a.list("apps/v1", "Deployment", "ml-team")
            if d["metadata"]["name"].startswith("qwen3-8b")}
    assert uids
    models = checkout / "local-fleet" / "models.yaml"
    models.write_text(models.read_text().replace('"--max-model-len=16384"', '"--max-model-len=8192"'))
    other.modelplane("up", "-f", str(checkout / "local-fleet"))
    assert other.pulumi("stack", "ls", "--all", "--json").stdout.count(f'"{legacy}"') == 0
    done = other.pulumi("stack", "history", "--json", "--page-size", "1", "--stack", qualified(stack))
    last = json.loads(done.stdout)[0]
    assert last["result"] == "succeeded" and last["resourceChanges"].get("update", 0) >= 1, last
    # nothing created, deleted or replaced ("discard": a read of an object by its old name left the state; a read
    # never touches the cluster)
    assert not {k for k in last["resourceChanges"] if k not in ("same", "update", "discard")}, last["resourceChanges"]
    urns = [r["urn"] for r in other.checkpoint(stack)["deployment"]["resources"]]
    assert not [u for u in urns if legacy in u] and [u for u in urns if f"::{stack}-" in u]
    now = {d["metadata"]["name"]: d["metadata"]["uid"] for d in a.list("apps/v1", "Deployment", "ml-team")
           if d["metadata"]["name"].startswith("qwen3-8b")}
    assert now == uids  # the same objects, updated: never deleted and made anew
    assert [d for d in a.list("apps/v1", "Deployment", "ml-team")
            if "--max-model-len=8192" in json.dumps(d["spec"]["template"])]  # the change applied


def without_local_b(tmp_path) -> str:
    """The fleet's files with InferenceCluster/local-b removed, as its platform team would (llama-70b, which only
    local-b's H100s fit, stays: its developers own it; it is unscheduled until a cluster fits it)."""
    fleet = tmp_path / "fleet"
    shutil.copytree(FLEET, fleet)
    clusters = fleet / "fleet.yaml"
    clusters.write_text("---\n".join(d for d in clusters.read_text().split("---\n")
                                     if "kind: InferenceCluster\nmetadata:\n  name: local-b\n" not in d))
    return str(fleet)


GONE = {"platform-local-b", "team-ml-team.local-b", "model-ml-team.llama-70b"}
BEFORE: dict[str, int | None] = {}  # every stack's history before local-b went


def test_a_cluster_whose_api_server_is_gone_removed_from_the_fleet_keeps_its_stacks_and_says_how_to_forget_them(
        local_fleet, tmp_path):
    BEFORE.update({stack: local_fleet.history(stack) for stack in STACKS})
    local = control_plane.LocalFleet.load(control_plane.local_folder(local_fleet.state))
    assert control_plane.stop_cluster(local, "local-b")
    b = local_fleet.api("local-b")

    def gone() -> bool:
        try:
            b.list("v1", "Node", None)
        except KubeError:
            return True
        return False

    wait_for("local-b's API server gone", gone, 30)
    fleet = without_local_b(tmp_path)

    first = local_fleet.modelplane("up", "-f", fleet, "--prune", "--yes-destroy-clusters", check=False)
    # its stacks cannot be destroyed, and are not dropped unasked: the run says how to forget them
    assert first.returncode == 1, first.stderr[-3000:]
    assert all(local_fleet.history(stack) is not None for stack in GONE)
    assert "--forget local-b" in first.stderr, first.stderr[-3000:]


def test_forgetting_it_takes_its_stacks_out_of_the_backend_and_leaves_the_rest_alone(local_fleet, tmp_path):
    fleet = without_local_b(tmp_path)
    local_fleet.modelplane("up", "-f", fleet, "--prune", "--yes-destroy-clusters", "--forget", "local-b")
    after = {stack: local_fleet.history(stack) for stack in STACKS}
    assert all(after[stack] is None for stack in GONE), after
    changed = {stack for stack in STACKS - GONE if after[stack] != BEFORE[stack]}
    assert changed <= {"endpoints-ml-team"}, changed  # llama-70b's endpoints leave the front door's cluster
    assert running_pods(local_fleet.api("local-a"), "ml-team", "qwen3-8b")
    # the next `up --prune` has nothing to destroy or forget
    local_fleet.modelplane("up", "-f", fleet, "--prune")
    assert {stack: local_fleet.history(stack) for stack in STACKS} == after


def test_what_a_forgotten_cluster_held_is_still_on_it_when_it_comes_back(local_fleet):
    local_fleet.modelplane("local", "up", "-f", str(FLEET), timeout=400)
    assert wait_for("llama-70b's Deployment on local-b", lambda: [
        d for d in local_fleet.api("local-b").list("apps/v1", "Deployment", "ml-team")
        if d["metadata"]["name"].startswith("llama-70b")])


def test_destroy_leaves_the_crds_that_were_there_before(local_fleet, tmp_path):
    fleet = without_local_b(tmp_path)
    local_fleet.modelplane("destroy", "-f", fleet, "--yes")
    a = local_fleet.api("local-a")
    wait_for("our Deployments gone from local-a", lambda: not a.list("apps/v1", "Deployment", "ml-team"))
    for doc in crds.gateway_api() + chart_crds("lws"):
        assert THEIRS.items() <= crd_named(a, doc["metadata"]["name"])["metadata"]["labels"].items()
    for doc in chart_crds("cert-manager"):  # the release's since the hand-over, kept by its keep policy
        crd_named(a, doc["metadata"]["name"])
    assert all(local_fleet.history(stack) is None for stack in STACKS)
