"""One record, one road: what is applied is read from the Pulumi backend by every entry point.

Through the real CLI, orchestrator, PulumiRunner and programs, against the Pulumi CLI double
(tests/pulumi_double.py), which runs each program and keeps its outputs in the backend folder.
Nothing is deployed.
"""

from __future__ import annotations

import json
import os
import pathlib
import shutil
import subprocess
from collections import Counter

import pytest
import yaml

from automation.cli import main
from automation.projects import PLATFORM_PROJECT
from tests.test_lifecycle import ROOT, applied_driver, make_driver, recorded_in


@pytest.fixture
def double(tmp_path, monkeypatch):
    return make_driver(tmp_path, monkeypatch)


@pytest.fixture
def applied(tmp_path_factory, monkeypatch, capsys):
    return applied_driver(tmp_path_factory, monkeypatch, capsys)


def _plan(args: list[str], capsys) -> dict:
    capsys.readouterr()
    assert main(["plan", *args, "-o", "json"]) == 0
    return json.loads(capsys.readouterr().out)


def _placements(document: dict) -> dict[str, str]:
    return {r["name"]: r["cluster"] for r in document["replicas"]}


def test_the_platform_project_is_the_repositorys_pulumi_project():
    assert yaml.safe_load((ROOT / "Pulumi.yaml").read_text())["name"] == PLATFORM_PROJECT


def test_a_fresh_clone_with_only_the_backend_plans_the_applied_placements(applied, capsys, tmp_path, monkeypatch):
    here = _plan(["-f", applied.fleet()], capsys)
    backend = applied.work / ".modelplane" / "backend"
    fresh = tmp_path / "ci-clone"
    fresh.mkdir()
    shutil.copy(applied.fleet(), fresh / "fleet.yaml")
    monkeypatch.chdir(fresh)  # no .modelplane here: only the backend, as a CI runner has it
    monkeypatch.setenv("PULUMI_BACKEND_URL", f"file://{backend}")
    there = _plan(["-f", "fleet.yaml"], capsys)
    assert _placements(there) == _placements(here) and there["replicas"]
    # a change planned against the base in CI says the same as on the machine that applied it
    docs = list(yaml.safe_load_all((fresh / "fleet.yaml").read_text()))
    kimi = next(d for d in docs if d["kind"] == "ModelDeployment" and d["metadata"]["name"] == "kimi-k2")
    kimi["spec"]["replicas"] = 2
    (fresh / "head.yaml").write_text(yaml.safe_dump_all(docs))
    capsys.readouterr()
    assert main(["plan", "-f", "head.yaml", "--against", "fleet.yaml", "-o", "markdown", "--no-cache"]) == 0
    in_ci = capsys.readouterr()
    assert "could not be read" not in in_ci.out + in_ci.err
    monkeypatch.chdir(applied.work)
    monkeypatch.delenv("PULUMI_BACKEND_URL")
    shutil.copy(fresh / "head.yaml", applied.work / "head.yaml")
    assert main(["plan", "-f", "head.yaml", "--against", applied.fleet(), "-o", "markdown", "--no-cache"]) == 0
    assert capsys.readouterr().out == in_ci.out
    # the local folder is a cache: deleting it changes no result
    shutil.rmtree(applied.work / ".modelplane" / "stacks")
    for cached in (applied.work / ".modelplane").glob("record.*"):  # record.json and its journal
        cached.unlink()
    again = _plan(["-f", applied.fleet(), "--backend", f"file://{backend}"], capsys)
    assert _placements(again) == _placements(here)


def test_a_plan_that_cannot_read_the_record_says_it_guessed(applied, capsys, monkeypatch):
    docs = list(yaml.safe_load_all(pathlib.Path(applied.fleet()).read_text()))
    (applied.work / "head.yaml").write_text(yaml.safe_dump_all(docs))
    monkeypatch.setenv("PATH", "/nonexistent")  # no Pulumi CLI
    # and a stack written since this machine read it, so the record cannot be read without the CLI (the listing of
    # the checkpoints and the cache need none)
    os.utime(applied.work / ".modelplane" / "backend" / ".pulumi" / "stacks" / "modelplane" / "gateway.json")
    capsys.readouterr()
    assert main(["plan", "-f", "head.yaml", "--against", applied.fleet(), "-o", "markdown", "--no-cache"]) == 0
    said = capsys.readouterr()
    assert "could not be read" in said.err and "**Warning:**" in said.out and "record.json" in said.out


def test_a_failed_update_keeps_the_record_of_the_last_one_and_a_rerun_converges(applied, capsys):
    before = applied.recorded()["model-ml-team.qwen3-8b"]
    engine = applied.deployment("qwen3-8b")["spec"]["template"]["spec"]["engines"][0]
    engine["members"][0]["template"]["spec"]["containers"][0]["image"] = "vllm/vllm-openai:v0.11.1"
    applied.control(replaceOn={"kubernetes:yaml/v2:ConfigGroup": ["objs"]},  # its objects fail to be created
                   failOn={"model-ml-team.qwen3-8b": {"resource": "kubernetes:yaml/v2:ConfigGroup",
                                                      "error": "quota exceeded"}})
    assert applied.up() != 0
    assert "model-ml-team.qwen3-8b" in applied.ran("up")
    after = applied.recorded()["model-ml-team.qwen3-8b"]
    assert after["fingerprint"] == before["fingerprint"] and after["placements"] == before["placements"]
    applied.control()
    assert applied.up() == 0 and applied.ran("up") == ["model-ml-team.qwen3-8b"]
    assert applied.recorded()["model-ml-team.qwen3-8b"]["fingerprint"] != before["fingerprint"]
    assert applied.up() == 0 and applied.ran("up") == []


def _laptop_project(double, tmp_path) -> pathlib.Path:
    """The repository as a laptop has it: its Pulumi.yaml (project `modelplane`, main infra/) and its code."""
    laptop = tmp_path / "laptop"
    laptop.mkdir()
    for entry in ROOT.iterdir():
        if entry.name not in ("Pulumi.yaml", ".modelplane", ".git") and not entry.name.startswith("Pulumi."):
            (laptop / entry.name).symlink_to(entry)
    shutil.copy(ROOT / "Pulumi.yaml", laptop / "Pulumi.yaml")
    return laptop


def test_a_laptop_pulumi_up_and_modelplane_up_operate_the_same_platform_stack(applied, capsys, tmp_path):
    backend = applied.work / ".modelplane" / "backend"
    stack = backend / ".pulumi" / "stacks" / PLATFORM_PROJECT / "platform-byo-eu.json"
    history = len(json.loads(stack.read_text())["history"])
    laptop = _laptop_project(applied, tmp_path)
    # the stack's config as the automation layer keeps it (its encryption salt), and the fleet the laptop has
    shutil.copy(applied.work / ".modelplane" / "stacks" / "platform-byo-eu" / "Pulumi.platform-byo-eu.yaml", laptop)
    shutil.copy(applied.fleet(), laptop / "fleet.yaml")
    env = {**os.environ, "PULUMI_BACKEND_URL": f"file://{backend}"}

    def pulumi(*args: str) -> subprocess.CompletedProcess:
        return subprocess.run(["pulumi", *args], cwd=laptop, env=env, capture_output=True, text=True, timeout=600)

    assert pulumi("config", "set", "--stack", "platform-byo-eu", "modelplane:fleet", "fleet.yaml").returncode == 0
    done = pulumi("up", "--stack", "platform-byo-eu", "--yes", "--skip-preview")
    assert done.returncode == 0, done.stdout + done.stderr
    content = json.loads(stack.read_text())
    assert len(content["history"]) == history + 1  # the same stack, updated once more
    assert content["history"][-1]["resourceChanges"].get("create", 0) == 0  # no second cluster
    assert content["history"][-1]["resourceChanges"].get("delete", 0) == 0
    assert not (backend / ".pulumi" / "stacks" / "modelplane-platform").exists()
    # and what the laptop applied is what `modelplane up` would: nothing left to do. The stack the laptop updated
    # is read back from the backend; the others are this machine's own updates, known by their update's window
    assert applied.up() == 0 and applied.ran("up") == []
    assert _outputs_read(applied) == ["platform-byo-eu"]


def _outputs_read(driver) -> list[str]:
    """The stacks whose outputs the record read back from the backend since the driver's last `up` began: not
    the automation API's own reads after each `pulumi up` (a masked and a `--show-secrets` read, as a pair)."""
    reads = [c for c in driver.calls()[driver.mark:] if [a for a in c["argv"] if a != "--non-interactive"][:2]
             == ["stack", "output"]]
    masked = Counter(c["stack"] for c in reads if "--show-secrets" not in c["argv"])
    return sorted((masked - Counter(c["stack"] for c in reads if "--show-secrets" in c["argv"])).elements())


def test_a_no_op_up_right_after_an_up_reads_no_stack_back_and_a_stack_changed_since_is_read(applied, capsys):
    """Issue 31: the outputs an `up` returned are the record of the stacks it ran, so the next read takes them
    without `stack output` when the backend's stamp is of that update; any later update (a laptop's, another
    machine's, a refresh) has a stamp outside the window, and that stack is read again."""
    assert applied.up() == 0 and applied.ran("up") == []
    assert _outputs_read(applied) == []  # every stack is the fixture's own `up`
    engine = applied.deployment("qwen3-8b")["spec"]["template"]["spec"]["engines"][0]
    engine["members"][0]["template"]["spec"]["containers"][0]["image"] = "vllm/vllm-openai:v0.11.1"
    assert applied.up() == 0 and applied.ran("up") == ["model-ml-team.qwen3-8b"]
    assert _outputs_read(applied) == []
    assert applied.up() == 0 and applied.ran("up") == [] and _outputs_read(applied) == []
    # updated once more here, then refreshed from elsewhere, in the same second, before this machine reads the
    # record again: the refresh is a later write of the stack's checkpoint, so its outputs are read back
    engine["members"][0]["template"]["spec"]["containers"][0]["image"] = "vllm/vllm-openai:v0.11.2"
    assert applied.up() == 0 and applied.ran("up") == ["model-ml-team.qwen3-8b"]
    work = applied.work / ".modelplane" / "stacks" / "model-ml-team.qwen3-8b"
    env = {**os.environ, "PULUMI_BACKEND_URL": f"file://{applied.work / '.modelplane' / 'backend'}"}
    done = subprocess.run(["pulumi", "refresh", "--stack", "model-ml-team.qwen3-8b", "--yes", "--non-interactive"],
                          cwd=work, env=env, capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stdout + done.stderr
    assert applied.up() == 0 and applied.ran("up") == [] and _outputs_read(applied) == ["model-ml-team.qwen3-8b"]
    assert applied.up() == 0 and _outputs_read(applied) == []


def test_platform_stacks_of_the_old_project_move_into_the_one_project(applied, capsys):
    from tests.pulumi_engine import Backend

    backend_dir = applied.work / ".modelplane" / "backend"
    backend = Backend(f"file://{backend_dir}")
    for name in ("platform-byo-eu", "gateway"):  # as the release before this one made them
        backend.rename(PLATFORM_PROJECT, name, name, "modelplane-platform")
    assert main(["status", "-f", applied.fleet()]) == 0
    assert applied.up() == 0, capsys.readouterr().err
    moved = [c["argv"] for c in applied.calls()[applied.mark:] if "rename" in c["argv"]]
    assert sorted(a[a.index("rename") + 1] for a in moved) == ["organization/modelplane/gateway", "organization/modelplane/platform-byo-eu"]
    assert applied.ran("up") == [] and applied.ran("destroy") == []  # moved, not recreated
    assert {"platform-byo-eu", "gateway"} <= set(recorded_in(backend_dir))
    assert not list((backend_dir / ".pulumi" / "stacks" / "modelplane-platform").glob("*.json"))


def test_the_portal_applies_what_it_shows_and_a_write_that_changes_nothing_queues_nothing(double):
    """Through the portal's HTTP API, its worker and the program-running double: the placements the portal shows
    are the ones its programs record, and its fingerprints are the record's, so rewriting the same manifests (or a
    restart that reads the record again) runs no stack."""
    from automation.portal.worker import Worker
    from tests.manifests import cluster, deployment, gateway, gpu_class, service
    from tests.portal_server import ADMIN, API, ThreadServer

    state = double.work / ".modelplane"
    (state / "kubeconfigs").mkdir(parents=True)
    (state / "kubeconfigs" / "c1-kubeconfig").write_text("apiVersion: v1\nkind: Config\n")
    (double.root / "portal").mkdir(exist_ok=True)
    writes = [(f"{API}/inferenceclasses/l4", gpu_class("l4", 1, "23034Mi")),
              (f"{API}/inferenceclusters/c1", cluster("c1", pools=(("gpu", "l4", 4),))),
              (f"{API}/inferencegateways/default", gateway()),
              (f"{API}/namespaces/team-a/modeldeployments/qwen", deployment("qwen", namespace="team-a", replicas=2)),
              (f"{API}/namespaces/team-a/modelservices/qwen", service("qwen", namespace="team-a"))]
    with ThreadServer(double.root / "portal", apply=True) as server:
        worker = Worker(server.store, state)
        with server.client(ADMIN) as admin:
            for path, body in writes:
                assert admin.put(path, json=body).status_code == 201, path
            server.settle()
            # a cluster first by name joins before anything is applied: a plan without the portal's reservations
            # would put replicas there; the portal keeps them where it placed (and shows) them
            (state / "kubeconfigs" / "a0-kubeconfig").write_text("apiVersion: v1\nkind: Config\n")
            writes.append((f"{API}/inferenceclusters/a0", cluster("a0", pools=(("gpu", "l4", 4),))))
            assert admin.put(writes[-1][0], json=writes[-1][1]).status_code == 201
            server.settle()
            while batch := worker.claim():
                worker.execute(batch)
                server.settle()
            runs = admin.get("/runs").json()["items"]
            assert runs and all(r["status"] == "succeeded" for r in runs), [(r["stack"], r["status"]) for r in runs]
            record = recorded_in(state / "backend")
            assert {"model-team-a.qwen", "endpoints-team-a", "service-team-a.qwen"} <= set(record)
            shown = {r["metadata"]["name"]: r["spec"]["clusterName"]
                     for r in admin.get(f"{API}/namespaces/team-a/modelreplicas").json()["items"]}
            assert shown == {p["name"]: p["cluster"] for p in record["model-team-a.qwen"]["placements"]}
            assert len(shown) == 2 and set(shown.values()) == {"c1"}
            for path, body in writes:  # the same manifests again: accepted, and nothing to apply
                assert admin.put(path, json=body).status_code == 200, path
            server.settle()
            assert worker.claim() == []
            worker.resync()  # as a restarted portal: its copy of the record read again from the backend
            assert admin.put(writes[3][0], json=writes[3][1]).status_code == 200  # the deployment
            server.settle()
            assert worker.claim() == []


def test_stacks_applied_before_the_record_keep_their_replicas_and_record_them_at_their_next_update(applied, capsys):
    """A release before this one kept placements only in .modelplane/state.json: they are read from it once, and
    the next `up` runs those stacks so that their programs write the record (nothing else changes)."""
    from tests.pulumi_engine import Backend

    backend_dir = applied.work / ".modelplane" / "backend"
    before = recorded_in(backend_dir)
    backend = Backend(f"file://{backend_dir}")
    old_state = {"stacks": {}}
    for name in ("model-ml-team.kimi-k2", "model-ml-team.qwen3-8b"):  # as the old release left them
        content = backend.load("modelplane-workloads", name)
        root = next(r for r in content["checkpoint"]["latest"]["resources"] if r["type"] == "pulumi:pulumi:Stack")
        root["outputs"].pop("modelplane")
        backend.save("modelplane-workloads", name, content)
        old_state["stacks"][name] = {"fingerprint": before[name]["fingerprint"], "outputs": {},
                                     "placements": before[name]["placements"]}
    for cached in (applied.work / ".modelplane").glob("record.*"):  # record.json and its journal
        cached.unlink()
    (applied.work / ".modelplane" / "state.json").write_text(json.dumps(old_state))
    # a new cluster first by name would attract replicas planned without memory
    extra = {**next(d for d in applied.docs if d["kind"] == "InferenceCluster" and d["metadata"]["name"] == "eks-us-west")}
    extra = json.loads(json.dumps(extra))
    extra["metadata"]["name"] = "eks-a-new-one"
    applied.docs.append(extra)
    assert applied.up() == 0, capsys.readouterr().err
    assert {"model-ml-team.kimi-k2", "model-ml-team.qwen3-8b"} <= set(applied.ran("up"))
    after = recorded_in(backend_dir)
    for name in ("model-ml-team.kimi-k2", "model-ml-team.qwen3-8b"):
        assert after[name]["placements"] == before[name]["placements"]  # the replicas stayed where they were


def test_the_offline_preview_of_a_pull_request_plans_with_the_record(applied, capsys):
    """`preview --offline --changed-against` (CI's deployability road) plans as `plan` and `up` do: with the
    applied placements, so a new cluster changes its own stacks, never the running replicas'."""
    base = applied.fleet()
    extra = json.loads(json.dumps(next(d for d in applied.docs if d["kind"] == "InferenceCluster"
                                       and d["metadata"]["name"] == "eks-us-west")))
    extra["metadata"]["name"] = "eks-a-new-one"
    head = applied.work / "head.yaml"
    head.write_text(yaml.safe_dump_all([*applied.docs, extra]))
    shutil.copy(base, applied.work / "base.yaml")
    capsys.readouterr()
    assert main(["preview", "--offline", "-f", str(head), "--changed-against", str(applied.work / "base.yaml"),
                 "-o", "json", "--jobs", "1"]) == 0
    said = capsys.readouterr()
    assert "applied replica(s) read from the Pulumi backend" in said.err
    changed = {c["name"] for c in json.loads(said.out)["changes"]}
    assert "platform-eks-a-new-one" in changed and not any(name.startswith("model-") for name in changed)
    # `plan --against` reads the same record (placements and gateway addresses): the same stacks change
    assert main(["plan", "-f", str(head), "--against", str(applied.work / "base.yaml"), "-o", "json"]) == 0
    planned = json.loads(capsys.readouterr().out)["changes"]["stacks"]
    assert {s["name"] for s in planned if s["change"] != "none"} == changed
