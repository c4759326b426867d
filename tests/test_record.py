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

import pytest
import yaml

from automation.cli import main
from automation.execution.projects import PLATFORM_PROJECT
from tests.test_lifecycle import ROOT, make_driver, recorded_in


@pytest.fixture
def double(tmp_path, monkeypatch):
    return make_driver(tmp_path, monkeypatch)


def _plan(args: list[str], capsys) -> dict:
    capsys.readouterr()
    assert main(["plan", *args, "-o", "json"]) == 0
    return json.loads(capsys.readouterr().out)


def _placements(document: dict) -> dict[str, str]:
    return {r["name"]: r["cluster"] for r in document["replicas"]}


def test_the_platform_project_is_the_repositorys_pulumi_project():
    assert yaml.safe_load((ROOT / "Pulumi.yaml").read_text())["name"] == PLATFORM_PROJECT


def test_a_fresh_clone_with_only_the_backend_plans_the_applied_placements(double, capsys, tmp_path, monkeypatch):
    assert double.up() == 0
    here = _plan(["-f", double.fleet()], capsys)
    backend = double.work / ".modelplane" / "backend"
    fresh = tmp_path / "ci-clone"
    fresh.mkdir()
    shutil.copy(double.fleet(), fresh / "fleet.yaml")
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
    monkeypatch.chdir(double.work)
    monkeypatch.delenv("PULUMI_BACKEND_URL")
    shutil.copy(fresh / "head.yaml", double.work / "head.yaml")
    assert main(["plan", "-f", "head.yaml", "--against", double.fleet(), "-o", "markdown", "--no-cache"]) == 0
    assert capsys.readouterr().out == in_ci.out
    # the local folder is a cache: deleting it changes no result
    shutil.rmtree(double.work / ".modelplane" / "stacks")
    (double.work / ".modelplane" / "record.json").unlink()
    again = _plan(["-f", double.fleet(), "--backend", f"file://{backend}"], capsys)
    assert _placements(again) == _placements(here)


def test_a_plan_that_cannot_read_the_record_says_it_guessed(double, capsys, monkeypatch):
    assert double.up() == 0
    docs = list(yaml.safe_load_all(pathlib.Path(double.fleet()).read_text()))
    (double.work / "head.yaml").write_text(yaml.safe_dump_all(docs))
    monkeypatch.setenv("PATH", "/nonexistent")  # no Pulumi CLI
    capsys.readouterr()
    assert main(["plan", "-f", "head.yaml", "--against", double.fleet(), "-o", "markdown", "--no-cache"]) == 0
    said = capsys.readouterr()
    assert "could not be read" in said.err and "**Warning:**" in said.out and "record.json" in said.out


def test_a_failed_update_keeps_the_record_of_the_last_one_and_a_rerun_converges(double, capsys):
    assert double.up() == 0
    before = double.recorded()["model-ml-team.qwen3-8b"]
    engine = double.deployment("qwen3-8b")["spec"]["template"]["spec"]["engines"][0]
    engine["members"][0]["template"]["spec"]["containers"][0]["image"] = "vllm/vllm-openai:v0.11.1"
    double.control(replaceOn={"kubernetes:yaml/v2:ConfigGroup": ["objs"]},  # its objects fail to be created
                   failOn={"model-ml-team.qwen3-8b": {"resource": "kubernetes:yaml/v2:ConfigGroup",
                                                      "error": "quota exceeded"}})
    assert double.up() != 0
    assert "model-ml-team.qwen3-8b" in double.ran("up")
    after = double.recorded()["model-ml-team.qwen3-8b"]
    assert after["fingerprint"] == before["fingerprint"] and after["placements"] == before["placements"]
    double.control()
    assert double.up() == 0 and double.ran("up") == ["model-ml-team.qwen3-8b"]
    assert double.recorded()["model-ml-team.qwen3-8b"]["fingerprint"] != before["fingerprint"]
    assert double.up() == 0 and double.ran("up") == []


def _laptop_project(double, tmp_path) -> pathlib.Path:
    """The repository as a laptop has it: its Pulumi.yaml (project `modelplane`, main infra/) and its code."""
    laptop = tmp_path / "laptop"
    laptop.mkdir()
    for entry in ROOT.iterdir():
        if entry.name not in ("Pulumi.yaml", ".modelplane", ".git") and not entry.name.startswith("Pulumi."):
            (laptop / entry.name).symlink_to(entry)
    shutil.copy(ROOT / "Pulumi.yaml", laptop / "Pulumi.yaml")
    return laptop


def test_a_laptop_pulumi_up_and_modelplane_up_operate_the_same_platform_stack(double, capsys, tmp_path):
    assert double.up() == 0
    backend = double.work / ".modelplane" / "backend"
    stack = backend / ".pulumi" / "stacks" / PLATFORM_PROJECT / "platform-byo-eu.json"
    history = len(json.loads(stack.read_text())["history"])
    laptop = _laptop_project(double, tmp_path)
    # the stack's config as the automation layer keeps it (its encryption salt), and the fleet the laptop has
    shutil.copy(double.work / ".modelplane" / "stacks" / "platform-byo-eu" / "Pulumi.platform-byo-eu.yaml", laptop)
    shutil.copy(double.fleet(), laptop / "fleet.yaml")
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
    # and what the laptop applied is what `modelplane up` would: nothing left to do
    assert double.up() == 0 and double.ran("up") == []


def test_platform_stacks_of_the_old_project_move_into_the_one_project(double, capsys):
    from tests.pulumi_engine import Backend

    assert double.up() == 0
    backend_dir = double.work / ".modelplane" / "backend"
    backend = Backend(f"file://{backend_dir}")
    for name in ("platform-byo-eu", "gateway"):  # as the release before this one made them
        backend.rename(PLATFORM_PROJECT, name, name, "modelplane-platform")
    assert main(["status", "-f", double.fleet()]) == 0
    assert double.up() == 0, capsys.readouterr().err
    moved = [c["argv"] for c in double.calls()[double.mark:] if "rename" in c["argv"]]
    assert sorted(a[a.index("rename") + 1] for a in moved) == ["organization/modelplane/gateway", "organization/modelplane/platform-byo-eu"]
    assert double.ran("up") == [] and double.ran("destroy") == []  # moved, not recreated
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


def test_stacks_applied_before_the_record_keep_their_replicas_and_record_them_at_their_next_update(double, capsys):
    """A release before this one kept placements only in .modelplane/state.json: they are read from it once, and
    the next `up` runs those stacks so that their programs write the record (nothing else changes)."""
    from tests.pulumi_engine import Backend

    assert double.up() == 0
    backend_dir = double.work / ".modelplane" / "backend"
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
    (double.work / ".modelplane" / "record.json").unlink()
    (double.work / ".modelplane" / "state.json").write_text(json.dumps(old_state))
    # a new cluster first by name would attract replicas planned without memory
    extra = {**next(d for d in double.docs if d["kind"] == "InferenceCluster" and d["metadata"]["name"] == "eks-us-west")}
    extra = json.loads(json.dumps(extra))
    extra["metadata"]["name"] = "eks-a-new-one"
    double.docs.append(extra)
    assert double.up() == 0, capsys.readouterr().err
    assert {"model-ml-team.kimi-k2", "model-ml-team.qwen3-8b"} <= set(double.ran("up"))
    after = recorded_in(backend_dir)
    for name in ("model-ml-team.kimi-k2", "model-ml-team.qwen3-8b"):
        assert after[name]["placements"] == before[name]["placements"]  # the replicas stayed where they were


def test_the_offline_preview_of_a_pull_request_plans_with_the_record(double, capsys):
    """`preview --offline --changed-against` (CI's deployability road) plans as `plan` and `up` do: with the
    applied placements, so a new cluster changes its own stacks, never the running replicas'."""
    assert double.up() == 0
    base = double.fleet()
    extra = json.loads(json.dumps(next(d for d in double.docs if d["kind"] == "InferenceCluster"
                                       and d["metadata"]["name"] == "eks-us-west")))
    extra["metadata"]["name"] = "eks-a-new-one"
    head = double.work / "head.yaml"
    head.write_text(yaml.safe_dump_all([*double.docs, extra]))
    shutil.copy(base, double.work / "base.yaml")
    capsys.readouterr()
    assert main(["preview", "--offline", "-f", str(head), "--changed-against", str(double.work / "base.yaml"),
                 "-o", "json", "--jobs", "1"]) == 0
    said = capsys.readouterr()
    assert "applied replica(s) read from the Pulumi backend" in said.err
    changed = {c["name"] for c in json.loads(said.out)["changes"]}
    assert "platform-eks-a-new-one" in changed and not any(name.startswith("model-") for name in changed)
