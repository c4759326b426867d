"""`--executor operator`: the fleet's stacks handed to the Pulumi Kubernetes Operator through a Kubernetes API
double (tests/fake_kube.py) that refuses what a real API server refuses, with a scripted operator. These tests
prove what the executor asks of the cluster and how it reads the operator's answers; nothing here claims a
real cluster or operator ran."""

from __future__ import annotations

import copy
import dataclasses
import json
import pathlib
import shutil
import time

import pytest
import yaml

from automation.cli import main
from automation.execution.kube import KubeClient, KubeError
from automation.operator.export import ExportOptions, object_name
from automation.operator.runner import verdict
from tests.fake_kube import TOKEN, FakeKube, stack_name, wait_until
from tests.manifests import example_files

COMMIT = "0123456789abcdef0123456789abcdef01234567"
ROOT = pathlib.Path(__file__).resolve().parent.parent
NS = "modelplane-stacks"


def _any_tree(monkeypatch) -> None:
    """These tests plan from folders no commit holds: the check that this tree is gitRef's clean commit is tested
    on real git repositories (tests/test_git_source.py) and stands aside here."""
    monkeypatch.setattr("automation.operator.git_source.local_tree_problem", lambda *args: None)


@pytest.fixture
def kube(tmp_path, monkeypatch):
    _any_tree(monkeypatch)
    fake = FakeKube(tmp_path)
    yield fake
    fake.close()


@pytest.fixture
def fleet(tmp_path):
    folder = tmp_path / "fleet"
    shutil.copytree(ROOT / "examples", folder)
    return folder


def run(kube, tmp_path, command, *args, fleet=None, state="state", capsys=None, **settings):
    argv = [command, "-f", str(fleet or ROOT / "examples"), "--executor", "operator",
            "--operator-settings", str(kube.settings(tmp_path, **settings)), "--state", str(tmp_path / state), *args]
    return main(argv)


def applied(kube, kind="Stack"):
    return [stack_name(r.body) for r in kube.cluster.writes("PATCH") if r.body["kind"] == kind]


def O(stack: str) -> str:  # noqa: E743 - the object a stack's Stack and Program are named
    return object_name(stack)


def test_up_hands_every_stack_to_the_operator_in_the_planners_order(kube, tmp_path, capsys):
    assert run(kube, tmp_path, "up", "--parallel", "8") == 0  # with the deployability check
    out = capsys.readouterr()
    assert "up: 15 of 15 stack(s) succeeded" in out.err + out.out
    assert TOKEN not in out.out + out.err
    for request in kube.cluster.writes():  # every write is a server-side apply by modelplane
        assert request.method == "PATCH" and request.content_type == "application/apply-patch+yaml"
        assert request.query["fieldManager"] == ["modelplane"] and request.query["force"] == ["true"]
    kinds = [r.body["kind"] for r in kube.cluster.writes()]
    assert kinds[:3] == ["Namespace", "ServiceAccount", "ClusterRoleBinding"]  # what the stacks share, first
    stacks = kube.cluster.stacks()
    assert len(stacks) == 15
    # the operator ran each stack after its prerequisites, which are the planner's dependencies
    ran = [O(name) for name, kind in kube.cluster.runs]
    for name, stack in stacks.items():
        for prerequisite in stack["spec"].get("prerequisites", []):
            assert ran.index(prerequisite["name"]) < ran.index(O(name))
    # a Program is applied before the Stack that runs it
    order = [(r.body["kind"], r.body["metadata"]["name"]) for r in kube.cluster.writes()]
    assert order.index(("Program", O("model-ml-team.qwen3-8b"))) < order.index(("Stack", O("model-ml-team.qwen3-8b")))
    assert not (tmp_path / "state" / "state.json").exists()  # the Stacks are the record; nothing is kept here
    model = stacks["model-ml-team.qwen3-8b"]["metadata"]["annotations"]
    assert {p["name"] for p in json.loads(model["modelplane.ai/placements"])} == {
        r["name"] for r in json.loads(_plan_json(kube, tmp_path, "state"))["replicas"] if r["deployment"] == "ml-team/qwen3-8b"}


def _plan_json(kube, tmp_path, state: str, fleet=None, *extra: str) -> str:
    argv = ["plan", "-f", str(fleet or ROOT / "examples"), "-o", "json", "--executor", "operator",
            "--operator-settings", str(kube.settings(tmp_path)), "--state", str(tmp_path / state), *extra]
    import contextlib
    import io

    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        assert main(argv) == 0
    return out.getvalue()


def test_a_fresh_machine_keeps_running_replicas_where_they_are_when_a_cluster_is_added(kube, tmp_path, fleet, capsys):
    """The placements are the Stacks' too: planning on a machine with no local state, a new cluster that would
    attract replicas with no memory moves none."""
    assert run(kube, tmp_path, "up", "--skip-check", fleet=fleet) == 0
    before = {r["name"]: r["cluster"] for r in json.loads(_plan_json(kube, tmp_path, "state", fleet))["replicas"]}
    clusters = fleet / "platform" / "clusters.yaml"
    docs = list(yaml.safe_load_all(clusters.read_text()))
    extra = copy.deepcopy(next(d for d in docs if d and d["metadata"]["name"] == "eks-us-west"))
    extra["metadata"]["name"] = "eks-a-new-one"  # first by name: a fresh plan without memory would prefer it
    clusters.write_text(yaml.safe_dump_all([*docs, extra]))
    forgetful = json.loads(_plan_json(kube, tmp_path, "fresh", fleet, "--fresh"))["replicas"]
    assert any(r["cluster"] == "eks-a-new-one" for r in forgetful)  # without the record, replicas would move
    fresh = {r["name"]: r["cluster"] for r in json.loads(_plan_json(kube, tmp_path, "fresh", fleet))["replicas"]}
    assert fresh == before
    writes = len(kube.cluster.writes())
    capsys.readouterr()
    assert run(kube, tmp_path, "up", "--skip-check", fleet=fleet, state="fresh") == 0
    changed = {stack_name(r.body) for r in kube.cluster.writes()[writes:] if r.body["kind"] == "Stack"}
    assert not any(name.startswith("model-") for name in changed), changed


def test_the_cluster_is_the_record_a_fresh_machine_changes_nothing_and_a_change_runs_only_its_stacks(
        kube, tmp_path, fleet, capsys):
    assert run(kube, tmp_path, "up", "--skip-check", fleet=fleet) == 0
    before = len(kube.cluster.writes())
    capsys.readouterr()
    # a CI runner with no local state: the Stacks say what is applied, so nothing is written
    assert run(kube, tmp_path, "up", "--skip-check", fleet=fleet, state="fresh") == 0
    assert "every stack is up to date" in capsys.readouterr().out
    assert len(kube.cluster.writes()) == before
    # one deployment changes: only its stacks are applied again, and the run reads the new Program revision
    path = fleet / "models" / "qwen3-8b.yaml"
    path.write_text(path.read_text().replace("--max-model-len=16384", "--max-model-len=8192"))
    generation = kube.cluster.objects[("pulumi.com/v1", "Program", NS, O("model-ml-team.qwen3-8b"))]["metadata"]["generation"]
    assert run(kube, tmp_path, "up", "--skip-check", fleet=fleet, state="fresh") == 0
    changed = {stack_name(r.body) for r in kube.cluster.writes()[before:] if r.body["kind"] == "Stack"}
    assert changed == {"model-ml-team.qwen3-8b"}
    program = kube.cluster.objects[("pulumi.com/v1", "Program", NS, O("model-ml-team.qwen3-8b"))]
    assert program["metadata"]["generation"] == generation + 1
    stack = kube.cluster.stacks()["model-ml-team.qwen3-8b"]
    assert stack["status"]["lastUpdate"]["lastAttemptedCommit"] == str(generation + 1)
    # --force runs an unchanged stack again, through the operator's reconcile-request protocol
    runs = len(kube.cluster.runs)
    assert run(kube, tmp_path, "up", "--skip-check", "--force", "gateway", fleet=fleet, state="fresh") == 0
    assert kube.cluster.runs[runs:] == [("gateway", "up")]


def test_a_failed_stack_fails_the_command_and_its_dependents_are_never_handed_over(kube, tmp_path, capsys):
    kube.cluster.outcomes["model-ml-team.qwen3-8b"] = ("failed", "error: quota exceeded for nvidia-l4 in us-central1")
    assert run(kube, tmp_path, "up", "--skip-check") == 1
    out = capsys.readouterr()
    assert "model-ml-team.qwen3-8b] failed: up failed on the operator: error: quota exceeded" in out.err
    assert "not run: depends on model-ml-team.qwen3-8b, which failed" in out.err
    assert "service-ml-team.qwen3-8b" not in applied(kube)  # never reaches the operator
    assert "model-ml-team.qwen3-coder" in applied(kube)  # the rest goes on
    from automation.operator.runner import applied_fingerprint
    assert applied_fingerprint(kube.cluster.stacks()["model-ml-team.qwen3-8b"]) == ""  # not recorded as applied
    # status shows where the operator is with it, from the Stack's status
    capsys.readouterr()
    assert run(kube, tmp_path, "status", "-o", "json") == 0
    rows = {r["name"]: r for r in json.loads(capsys.readouterr().out)["stacks"]}
    assert rows["model-ml-team.qwen3-8b"]["change"] == "update"
    assert rows["model-ml-team.qwen3-8b"]["operator"].startswith("up failed on the operator: error: quota exceeded")
    assert rows["service-ml-team.qwen3-8b"]["operator"] == "no Stack object"
    assert rows["gateway"]["operator"] == "succeeded" and rows["gateway"]["change"] == "none"


def test_ctrl_c_hands_no_more_stacks_to_the_operator(kube, tmp_path, capsys):
    """Two platform Stacks are handed over and watched (--parallel 2), the third waits for a slot; the operator is
    busy. A real SIGINT, as a terminal's Ctrl-C, reaches the CLI: the two stop being watched, the third is never
    applied and is listed as skipped."""
    import os
    import signal
    import threading

    kube.cluster.operator_running = False
    running = {"platform-byo-eu", "platform-eks-us-west"}

    def ctrl_c() -> None:
        assert wait_until(lambda: set(kube.cluster.stacks()) == running, timeout=60)
        os.kill(os.getpid(), signal.SIGINT)  # to the main thread, which waits in the CLI's run_interruptibly

    threading.Thread(target=ctrl_c, daemon=True).start()
    assert run(kube, tmp_path, "up", "--skip-check", "--parallel", "2") == 130
    err = capsys.readouterr().err
    assert set(kube.cluster.stacks()) == running
    assert not [r for r in kube.cluster.writes() if (r.body or {}).get("metadata", {}).get("name") ==
                O("platform-gke-us-central")]  # neither its Program nor its Stack
    assert all(f"cancelled: {stack}" in err for stack in running) and "stopped waiting" in err
    assert "skipped: platform-gke-us-central: not started: cancelled" in err


def test_a_stack_cancelled_before_it_is_written_never_reaches_the_operator():
    """Ctrl-C can fall after a stack's run began (its live Stack read) and before its Program and Stack are
    applied: neither is applied then."""
    from automation.operator.runner import OperatorRunner
    from automation.planning.stacks import desired_state
    from fleet.scheduler import schedule
    from tests.manifests import run as load

    fleet = load(*[d for f in example_files() for d in yaml.safe_load_all(f.read_text())
                   if d]).fleet
    schedule(fleet)
    spec = desired_state(fleet).specs["model-ml-team.qwen3-8b"]

    class CancelledOnRead:  # the API as the stack sees it: Ctrl-C lands while its live Stack is read
        def __init__(self) -> None:
            self.applied: list[str] = []

        def get(self, *_):
            runner.cancel(spec.name)
            return None

        def apply(self, obj):
            self.applied.append(obj["kind"])
            return {**obj, "metadata": {**obj["metadata"], "generation": 1}}

    api = CancelledOnRead()
    runner = OperatorRunner(api, ExportOptions(backend="s3://b", git_url="https://g/x", git_ref=COMMIT),
                            poll=0, sleep=lambda _: None)
    result = runner.run("up", spec, lambda event: None)
    assert not result.ok and "interrupted: not handed to the operator" in (result.error or "")
    assert "Stack" not in api.applied and "Program" not in api.applied


def test_a_stalled_stack_is_a_failure_with_the_operators_reason(kube, tmp_path, capsys):
    kube.cluster.stalls["gateway"] = ("SpecInvalid", "invalid backend URL")
    assert run(kube, tmp_path, "up", "--skip-check") == 1
    assert "[gateway] failed: stalled: SpecInvalid: invalid backend URL" in capsys.readouterr().err


def test_removed_stacks_are_deleted_so_the_operator_destroys_them_program_last(kube, tmp_path, fleet, capsys):
    assert run(kube, tmp_path, "up", "--skip-check", fleet=fleet) == 0
    (fleet / "models" / "qwen3-8b.yaml").unlink()
    services = yaml.safe_load_all((fleet / "models" / "services.yaml").read_text())
    kept = [s for s in services if s and s["metadata"]["name"] != "qwen3-8b"]
    (fleet / "models" / "services.yaml").write_text(yaml.safe_dump_all(kept))
    capsys.readouterr()
    assert run(kube, tmp_path, "up", "--skip-check", "--prune", fleet=fleet, state="fresh") == 0
    deletes = [r.path.rsplit("/", 2)[-2:] for r in kube.cluster.writes("DELETE")]
    assert ["stacks", O("service-ml-team.qwen3-8b")] in deletes and ["stacks", O("model-ml-team.qwen3-8b")] in deletes
    # the service goes before the model it routes to; each Program only once its Stack is gone (destroy needs it)
    assert deletes.index(["stacks", O("service-ml-team.qwen3-8b")]) < deletes.index(["stacks", O("model-ml-team.qwen3-8b")])
    assert deletes.index(["stacks", O("model-ml-team.qwen3-8b")]) < deletes.index(["programs", O("model-ml-team.qwen3-8b")])
    assert ("model-ml-team.qwen3-8b", "destroy") in kube.cluster.runs
    assert "model-ml-team.qwen3-8b" not in kube.cluster.stacks()
    assert ("pulumi.com/v1", "Program", NS, O("model-ml-team.qwen3-8b")) not in kube.cluster.objects


def test_a_failed_destroy_is_reported_and_the_stack_is_kept(kube, tmp_path, fleet, capsys):
    assert run(kube, tmp_path, "up", "--skip-check", fleet=fleet) == 0
    kube.cluster.outcomes["service-ml-team.qwen3-8b:destroy"] = ("failed", "error: the route is still referenced")
    capsys.readouterr()
    assert run(kube, tmp_path, "destroy", "--yes", fleet=fleet) == 1
    err = capsys.readouterr().err
    assert "[service-ml-team.qwen3-8b] failed: destroy failed on the operator: error: the route is still referenced" in err
    assert "service-ml-team.qwen3-8b" in kube.cluster.stacks()
    assert ("pulumi.com/v1", "Program", NS, O("service-ml-team.qwen3-8b")) in kube.cluster.objects  # still needed
    assert "platform-byo-eu" in kube.cluster.stacks()  # its dependents did not all go: clusters stay


def test_platform_stacks_are_destroyed_only_on_purpose(kube, tmp_path, fleet, capsys):
    assert run(kube, tmp_path, "up", "--skip-check", fleet=fleet) == 0
    assert kube.cluster.stacks()["platform-byo-eu"]["spec"]["destroyOnFinalize"] is False
    assert run(kube, tmp_path, "destroy", fleet=fleet) == 2  # not on a terminal: --yes is needed
    assert not kube.cluster.writes("DELETE")
    assert run(kube, tmp_path, "destroy", "--yes", "--unprotect", fleet=fleet) == 0
    assert kube.cluster.stacks() == {}
    platform = [r.body for r in kube.cluster.writes("PATCH") if r.body["metadata"]["name"] == "platform-byo-eu"]
    assert platform[-2]["spec"]["config"]["modelplane:deletionProtection"] == "false"  # lifted, run, then
    assert platform[-1]["spec"]["destroyOnFinalize"] is True  # destroyed with its Stack
    assert ("platform-byo-eu", "destroy") in kube.cluster.runs


def test_preview_runs_a_separate_preview_stack_on_the_same_backend_stack(kube, tmp_path, fleet, capsys):
    assert run(kube, tmp_path, "up", "--skip-check", fleet=fleet) == 0
    path = fleet / "models" / "qwen3-8b.yaml"
    path.write_text(path.read_text().replace("--max-model-len=16384", "--max-model-len=8192"))
    live = kube.cluster.stacks()["model-ml-team.qwen3-8b"]
    live_program = kube.cluster.objects[("pulumi.com/v1", "Program", NS, O("model-ml-team.qwen3-8b"))]
    before = len(kube.cluster.writes())
    capsys.readouterr()
    assert run(kube, tmp_path, "preview", fleet=fleet, state="fresh") == 0
    assert "[model-ml-team.qwen3-8b] done: preview succeeded on the operator" in capsys.readouterr().out
    proposal = [r.body for r in kube.cluster.writes("PATCH")[before:] if r.body["kind"] in ("Stack", "Program")]
    assert {(p["kind"], p["metadata"]["namespace"], p["metadata"]["name"]) for p in proposal} == {
        ("Program", f"{NS}-preview", O("model-ml-team.qwen3-8b")), ("Stack", f"{NS}-preview", O("model-ml-team.qwen3-8b"))}
    body = next(p for p in proposal if p["kind"] == "Stack")["spec"]
    assert body["preview"] is True and body["destroyOnFinalize"] is False and "prerequisites" not in body
    # the same Pulumi project (a Program's name) and stack as the live one: a diff against what is deployed
    live_run = next(r for r in kube.cluster.backend_runs if r[0] == NS and r[2] == live["spec"]["stack"])
    preview_run = next(r for r in kube.cluster.backend_runs if r[0] == f"{NS}-preview")
    assert preview_run[1:3] == live_run[1:3] and preview_run[3] == "preview"
    assert kube.cluster.stacks()["model-ml-team.qwen3-8b"] == live  # untouched
    assert kube.cluster.objects[("pulumi.com/v1", "Program", NS, O("model-ml-team.qwen3-8b"))] == live_program
    assert kube.cluster.stacks(f"{NS}-preview") == {}  # removed afterwards
    assert ("pulumi.com/v1", "Program", f"{NS}-preview", O("model-ml-team.qwen3-8b")) not in kube.cluster.objects


def test_a_long_stack_name_fits_the_operators_limit_and_stays_unique():
    long = "model-research-inference.deepseek-r1-distill-llama-70b-instruct"
    names = {object_name(long), object_name(long + "x"), object_name(long + "-preview")}
    assert len(names) == 3 and all(len(n) <= 42 for n in names)
    options = ExportOptions(backend="s3://b", git_url="https://g/x", git_ref=COMMIT, fleet_name="eu")
    assert options.object_name("gateway") == "eu-gateway"  # two fleets in one namespace never collide


@pytest.mark.parametrize("settings,message", [
    ({"backend": "ftp://x"}, "backend 'ftp://x': expected s3://"),
    ({"namespace": "Stacks"}, "namespace: Value error, must be a DNS label"),
    ({"namespace": "s" * 56}, "namespace: Value error, must be at most 55 characters"),
    ({"pollSeconds": 0}, "pollSeconds: Input should be greater than 0"),
    ({"colour": "blue"}, "colour: Extra inputs are not permitted"),
    ({"kubeconfig": "/nonexistent/kubeconfig"}, "kubeconfig /nonexistent/kubeconfig: no such file"),
])
def test_bad_settings_are_one_line_and_exit_2(kube, tmp_path, capsys, settings, message):
    assert run(kube, tmp_path, "up", "--skip-check", **settings) == 2
    err = capsys.readouterr().err
    assert message in err and err.count("\n") == 1 and "Traceback" not in err
    assert not kube.cluster.writes()


def test_an_unreachable_or_refusing_cluster_is_one_line_and_nothing_is_applied(kube, tmp_path, capsys):
    config = yaml.safe_load(kube.kubeconfig.read_text())
    config["users"][0]["user"]["token"] = "wrong-token-also-never-printed"
    kube.kubeconfig.write_text(yaml.safe_dump(config))
    assert run(kube, tmp_path, "up", "--skip-check") == 2
    err = capsys.readouterr().err
    assert "401 Unauthorized" in err and "never-printed" not in err
    config["clusters"][0]["cluster"]["server"] = "http://127.0.0.1:9"  # nothing listens there
    kube.kubeconfig.write_text(yaml.safe_dump(config))
    assert run(kube, tmp_path, "status") == 2
    assert "cannot reach the control-plane cluster at http://127.0.0.1:9" in capsys.readouterr().err
    assert not kube.cluster.writes()


def test_flags_of_the_local_executor_are_refused_with_the_operator(kube, tmp_path, capsys):
    assert run(kube, tmp_path, "up", "--kubeconfig", "byo-eu=/tmp/k") == 2
    assert "is the Secret named by its existing.secretRef" in capsys.readouterr().err
    assert run(kube, tmp_path, "drift") == 2
    assert "not available with --executor operator" in capsys.readouterr().err


@pytest.mark.parametrize("status,request_,revision,expected", [
    ({}, "r1", None, None),  # the operator has not looked yet
    ({"lastUpdate": {"generation": 1, "reconcileRequest": "r1", "state": "succeeded"}}, "r1", None, None),  # old gen
    ({"lastUpdate": {"generation": 2, "reconcileRequest": "r0", "state": "succeeded"}}, "r1", None, None),  # old ask
    ({"lastUpdate": {"generation": 2, "reconcileRequest": "r1", "state": "succeeded", "lastAttemptedCommit": "3"}},
     "r1", "4", None),  # ran the previous Program revision
    ({"lastUpdate": {"generation": 2, "reconcileRequest": "r1", "state": "succeeded", "lastAttemptedCommit": "4"},
      "outputs": {"address": "10.0.0.1", "kubeconfig": "[secret]"}}, "r1", "4", (True, {"address": "10.0.0.1"})),
    ({"lastUpdate": {"generation": 2, "reconcileRequest": "r1", "state": "failed", "message": "boom"}}, "r1", None,
     (False, {})),
    ({"observedGeneration": 2, "conditions": [{"type": "Stalled", "status": "True", "reason": "SourceUnavailable"}]},
     "r1", None, None),  # the Program's artifact is on its way: the operator retries
    ({"observedGeneration": 2, "conditions": [{"type": "Stalled", "status": "True", "reason": "UpdateFailed"}]},
     "r1", None, (False, {})),
])
def test_the_operators_answer_is_read_for_this_generation_request_and_revision(status, request_, revision, expected):
    found = verdict({"metadata": {"generation": 2}, "status": status}, request_, revision)
    assert (None if found is None else (found.ok, found.outputs)) == expected


def test_the_api_double_refuses_what_a_real_api_server_refuses(kube, tmp_path):
    api = KubeClient(kube.kubeconfig)
    stack = {"apiVersion": "pulumi.com/v1", "kind": "Stack",
             "metadata": {"name": "gateway", "namespace": NS}, "spec": {"stack": "gateway", "programRef": {"name": "p"}}}
    with pytest.raises(KubeError, match='404 namespaces "modelplane-stacks" not found'):
        api.apply(stack)
    api.apply({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": NS}})
    long = {**stack, "metadata": {"name": "x" * 43, "namespace": NS}}
    with pytest.raises(KubeError, match="422 .*Stack name must be no more than 42 characters"):
        api.apply(long)
    with pytest.raises(KubeError, match="422 .*'colour' was unexpected"):
        api.apply({**stack, "spec": {**stack["spec"], "colour": "blue"}})
    stored = api.apply(stack)
    assert stored["metadata"]["generation"] == 1
    assert api.apply(stack)["metadata"]["generation"] == 1  # the same content: no new generation
    assert api.apply({**stack, "spec": {**stack["spec"], "stack": "other"}})["metadata"]["generation"] == 2
    code, answer = kube.cluster.handle("PATCH", f"/apis/pulumi.com/v1/namespaces/{NS}/stacks/gateway",
                                       {"fieldManager": ["x"]}, "application/merge-patch+json", stack)
    assert code == 415  # only server-side apply


def test_the_portal_hands_accepted_changes_to_the_operator(kube, tmp_path):
    """The portal host needs no cloud credential: its worker applies Stack objects and reads their status."""
    from automation.portal.worker import Worker, operator_runner
    from tests.manifests import cluster, deployment, gpu_class
    from tests.portal_server import ADMIN, API, ThreadServer

    settings = kube.settings(tmp_path)
    kube.cluster.outputs["platform-c1"] = {"gatewayAddress": "34.1.2.3", "kubeconfig": "[secret]"}
    (tmp_path / "portal").mkdir()
    with ThreadServer(tmp_path / "portal", apply=True) as server:
        worker = Worker(server.store, tmp_path / "state", runner=operator_runner(settings))
        with server.client(ADMIN) as admin:
            assert admin.put(f"{API}/inferenceclasses/l4", json=gpu_class("l4", 1, "23034Mi")).status_code == 201
            assert admin.put(f"{API}/inferenceclusters/c1", json=cluster("c1", pools=(("gpu", "l4", 4),))).status_code == 201
            path = f"{API}/namespaces/team-a/modeldeployments/qwen"
            assert admin.put(path, json=deployment("qwen", namespace="team-a")).status_code == 201
            server.settle()  # the background replan after the write queues its runs
            worker.execute(worker.claim())
            runs = {r["stack"]: r for r in admin.get("/runs").json()["items"]}
            assert {s: r["status"] for s, r in runs.items()} == {
                "platform-c1": "succeeded", "team-team-a.c1": "succeeded", "model-team-a.qwen": "succeeded"}
            assert "succeeded on the operator" in admin.get(f"/runs/{runs['model-team-a.qwen']['id']}").json()["log"]
            assert set(kube.cluster.stacks()) == {"platform-c1", "team-team-a.c1", "model-team-a.qwen"}
            c1 = admin.get(f"{API}/inferenceclusters/c1").json()
            assert {c["type"]: c["status"] for c in c1["status"]["conditions"]}["ClusterReady"] == "True"
            # a failure on the operator is the run's failure, with the operator's message
            kube.cluster.outcomes["model-team-a.qwen"] = ("failed", "error: ImagePullBackOff")
            changed = deployment("qwen", namespace="team-a", replicas=2)
            assert admin.put(path, json=changed).status_code == 200
            server.settle()
            worker.execute(worker.claim())
            runs = {r["stack"]: r for r in sorted(admin.get("/runs").json()["items"], key=lambda r: r["id"])}
            failed = admin.get(f"/runs/{runs['model-team-a.qwen']['id']}").json()
            assert failed["status"] == "failed" and "ImagePullBackOff" in failed["log"]
            # a DELETE becomes a deleted Stack, which the operator destroys
            kube.cluster.outcomes.pop("model-team-a.qwen")
            assert admin.delete(path).status_code == 200
            server.settle()
            worker.execute(worker.claim())
            assert "model-team-a.qwen" not in kube.cluster.stacks()
            assert ("model-team-a.qwen", "destroy") in kube.cluster.runs


def test_the_operator_executor_hands_over_many_stacks_at_once_unless_told(kube, tmp_path, monkeypatch, caplog):
    from automation.execution import orchestrator
    seen = []
    original = orchestrator.Orchestrator.__init__

    def spy(self, runner, store, on_event, parallel=2):
        seen.append(parallel)
        original(self, runner, store, on_event, parallel)

    monkeypatch.setattr(orchestrator.Orchestrator, "__init__", spy)
    assert run(kube, tmp_path, "up", "--skip-check") == 0
    assert run(kube, tmp_path, "up", "--skip-check", "--force", "gateway", "--parallel", "3") == 0
    assert seen == [64, 3]  # the stacks run in the cluster; here they are only watched
    assert not [r for r in caplog.records if "pool is full" in r.getMessage()]  # one connection per watcher
    assert main(["up", "-f", str(ROOT / "examples"), "--parallel", "17", "--skip-check"]) == 2  # local: at most 16


def test_the_fake_operator_is_as_strict_as_pko_about_names_and_follows_a_branch_as_pko_does(kube):
    """What the executor's tests lean on: a Stack whose `<name>-workspace` Service the API server refuses never
    runs; a Stack on a branch runs again whenever the branch moves, one pinned to a commit does not."""
    cluster = kube.cluster

    def put(name: str, source: dict) -> None:
        with cluster.lock:
            cluster.objects[("pulumi.com/v1", "Stack", NS, name)] = {
                "apiVersion": "pulumi.com/v1", "kind": "Stack",
                "metadata": {"name": name, "namespace": NS, "generation": 1},
                "spec": {"stack": name, "projectRepo": "https://github.com/acme/fleet", **source}}

    put("model-ml-team.qwen", {"commit": COMMIT})
    put("on-a-branch", {"branch": "main"})
    put("on-a-commit", {"commit": COMMIT})
    assert wait_until(lambda: {"on-a-branch", "on-a-commit"} <= {name for name, _ in cluster.runs})
    assert "model-ml-team.qwen" not in {name for name, _ in cluster.runs}
    (condition,) = cluster.stacks()["model-ml-team.qwen"]["status"]["conditions"]
    assert "DNS-1035" in condition["message"]
    ran = len(cluster.runs)
    with cluster.lock:
        cluster.heads["main"] = "2" * 40  # someone pushes to main
    assert wait_until(lambda: len(cluster.runs) > ran)
    time.sleep(0.1)  # a few more operator passes
    assert [name for name, _ in cluster.runs[ran:]] == ["on-a-branch"]


def _colliding(monkeypatch, stack: str, taken: str) -> None:
    """Force `stack`'s operator object name to be `taken`'s, as a 32-bit hash collision would."""
    from automation.operator import export

    real = export.object_name
    monkeypatch.setattr(export, "object_name", lambda name: real(taken) if name == stack else real(name))


def test_two_stacks_whose_object_names_collide_are_refused_before_anything_is_written(kube, tmp_path, monkeypatch,
                                                                                      capsys):
    from automation.operator import export

    monkeypatch.setattr(export, "_digest", lambda stack: "0badc0de")  # every hashed name gets the same hash
    with pytest.raises(export.ExportError, match="stacks model-ml-team.qwen and model-ml.team-qwen get the same"):
        export.object_names(ExportOptions(backend="s3://b", git_url="https://g/x", git_ref=COMMIT),
                            ["model-ml-team.qwen", "model-ml.team-qwen"])
    monkeypatch.undo()
    _any_tree(monkeypatch)
    _colliding(monkeypatch, "model-ml-team.qwen3-coder", "model-ml-team.qwen3-8b")
    assert run(kube, tmp_path, "up", "--skip-check") == 2
    err = capsys.readouterr().err
    assert "stacks model-ml-team.qwen3-8b and model-ml-team.qwen3-coder get the same operator object name" in err
    assert kube.cluster.writes() == []


@pytest.mark.parametrize("operation", ["up", "destroy"])
def test_a_live_stack_of_another_name_is_never_written_over_or_deleted(kube, tmp_path, monkeypatch, capsys, operation):
    """A collision with a Stack already in the cluster (another fleet's in the namespace, or one applied before):
    the stack that collides is refused, and the live one is left as it was."""
    from automation.operator.runner import OperatorRunner
    from automation.planning.stacks import desired_state
    from fleet.scheduler import schedule
    from tests.manifests import run as load

    assert run(kube, tmp_path, "up", "--skip-check") == 0
    before = kube.cluster.stacks()["model-ml-team.qwen3-8b"]
    fleet = load(*[d for f in example_files() for d in yaml.safe_load_all(f.read_text())
                   if d]).fleet
    schedule(fleet)
    spec = desired_state(fleet).specs["model-ml-team.qwen3-coder"]
    spec = dataclasses.replace(spec, fingerprint="another-fingerprint")  # so that `up` would apply it
    _colliding(monkeypatch, "model-ml-team.qwen3-coder", "model-ml-team.qwen3-8b")
    runner = OperatorRunner(KubeClient(kube.kubeconfig), ExportOptions(
        backend="s3://acme-fleet-state", git_url="https://github.com/acme/fleet", git_ref=COMMIT), poll=0.01)
    writes = len(kube.cluster.writes())
    result = runner.run(operation, spec, lambda event: None)
    assert not result.ok and "is the live Stack of stack model-ml-team.qwen3-8b" in (result.error or "")
    assert kube.cluster.writes()[writes:] == []
    assert kube.cluster.stacks()["model-ml-team.qwen3-8b"] == before


def test_up_refuses_a_gke_cluster_with_no_workspace_credential_before_writing_anything(kube, tmp_path, capsys):
    """A GKE kubeconfig execs gke-gcloud-auth-plugin, which has no account in a workspace pod: without the
    settings' credentials.gcp every stack on that cluster would fail at its first object (issue 61)."""
    assert run(kube, tmp_path, "up", "--skip-check", credentials={}) == 2
    err = capsys.readouterr().err
    assert "InferenceCluster/gke-us-central" in err and "set credentials.gcp in the operator settings" in err
    assert kube.cluster.writes() == [] and "Traceback" not in err
