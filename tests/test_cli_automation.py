"""CLI of the automation layer: plan --against (the CI preview), offline previews of every stack, status."""

import io
import json
import pathlib
import shutil
import sys

import pytest
import yaml

from automation.cli import main
from tests.manifests import example_files

ROOT = pathlib.Path(__file__).resolve().parent.parent


def pr(tmp_path):
    base = tmp_path / "base"
    head = tmp_path / "head"
    shutil.copytree(ROOT / "examples", base)
    shutil.copytree(ROOT / "examples", head)
    path = head / "models" / "qwen3-8b.yaml"
    path.write_text(path.read_text().replace("replicas: 2", "replicas: 3"))
    path = head / "platform" / "clusters.yaml"
    docs = list(yaml.safe_load_all(path.read_text()))
    docs = [d for d in docs if d["metadata"]["name"] != "byo-eu"]  # retire the on-prem cluster...
    eks = next(d for d in docs if d["metadata"]["name"] == "eks-us-west")
    eks["spec"]["nodePools"][0]["maxNodeCount"] = 6  # ...and give EKS room for what ran there
    path.write_text(yaml.safe_dump_all(docs))
    return base, head


def test_plan_against_json_lists_every_stack_and_replica_moves(tmp_path, capsys):
    base, head = pr(tmp_path)
    assert main(["plan", "-f", str(head), "--against", str(base), "-o", "json"]) == 0
    out = json.loads(capsys.readouterr().out)
    stacks = {s["name"]: s["change"] for s in out["stacks"]}
    assert stacks["platform-byo-eu"] == "delete" and stacks["platform-gke-us-central"] == "none"
    assert stacks["platform-eks-us-west"] == "update" and stacks["model-ml-team.kimi-k2"] == "none"
    assert stacks["model-ml-team.qwen3-8b"] == "update" and stacks["model-ml-team.qwen3-coder"] == "update"
    assert set(out) >= {"replicas", "unscheduled", "stacks", "changes"}
    # the plan's own contract holds: `replicas` is the head's placements, as `plan -o json` prints them
    assert isinstance(out["replicas"], list) and {r["deployment"] for r in out["replicas"]} >= {"ml-team/qwen3-8b"}
    assert out["changes"]["stacks"] == out["stacks"]
    moved = out["changes"]["replicas"]["moved"]
    assert [(m["deployment"], m["cluster"], m["to"]) for m in moved] == [("ml-team/qwen3-coder", "byo-eu", "eks-us-west")]
    assert moved[0]["reason"] == "cluster byo-eu no longer exists"
    assert [a["deployment"] for a in out["changes"]["replicas"]["added"]] == ["ml-team/qwen3-8b"]


def test_plan_against_markdown_is_a_pr_comment(tmp_path, capsys):
    base, head = pr(tmp_path)
    assert main(["plan", "-f", str(head), "--against", str(base), "-o", "markdown"]) == 0
    text = capsys.readouterr().out
    # nothing is recorded here: the comment first says it was planned as if nothing were applied, as `review`'s does
    assert text.startswith("> **Warning:** the record of what is applied holds no stack")
    assert "\n\n### modelplane: fleet change preview\n" in text
    assert "| `platform-byo-eu` | delete |" in text
    assert "`ml-team/qwen3-coder`" in text and "`byo-eu` -> `eks-us-west` (cluster byo-eu no longer exists)" in text
    assert "nothing was applied" in text


def test_markdown_needs_a_base(capsys):
    assert main(["plan", "-f", str(ROOT / "examples"), "-o", "markdown"]) == 2
    assert "--against" in capsys.readouterr().err


class _Unread:
    """Standard input that must not be read."""

    @property
    def buffer(self):
        return self

    def read(self, *_):
        raise AssertionError("standard input was read")


@pytest.mark.parametrize("argv", [["plan", "-f", "-", "--against", "-"],
                                  ["review", "-f", "-", "--against", "-"],
                                  ["preview", "--offline", "-f", "-", "--changed-against", "-"]])
def test_the_head_and_the_base_are_not_both_standard_input(argv, capsys, monkeypatch):
    # the first read would take it all, and the other side would be empty: refused before anything is read
    monkeypatch.setattr(sys, "stdin", _Unread())
    assert main(argv) == 2
    assert f"-f - and {argv[-2]} - both read standard input" in capsys.readouterr().err


def test_either_side_alone_may_be_standard_input(capsys, monkeypatch):
    text = "\n---\n".join(p.read_text() for p in example_files())
    for head, base in (("-", str(ROOT / "examples")), (str(ROOT / "examples"), "-")):
        monkeypatch.setattr(sys, "stdin", io.TextIOWrapper(io.BytesIO(text.encode())))
        assert main(["plan", "-f", head, "--against", base]) == 0
        assert "0 stack(s) change" in capsys.readouterr().out


def test_offline_preview_covers_every_stack(capsys):
    assert main(["preview", "--offline", "-f", str(ROOT / "examples"), "-o", "json"]) == 0
    stacks = {s["name"]: s for s in json.loads(capsys.readouterr().out)["stacks"]}
    assert {"gateway", "cache-ml-team.qwen3-coder", "model-ml-team.qwen3-8b", "service-ml-team.qwen3-8b"} <= set(stacks)
    model = stacks["model-ml-team.qwen3-8b"]["resources"]
    groups = [r for r in model if r["type"] == "kubernetes:yaml/v2:ConfigGroup"]
    assert sorted(g["name"] for g in groups) == ["model-ml-team.qwen3-8b-eks-us-west", "model-ml-team.qwen3-8b-gke-us-central"]
    deployments = [r for r in model if r["type"] == "kubernetes:apps/v1:Deployment"]
    assert {d["parent"] for d in deployments} == {g["name"] for g in groups}  # per target cluster
    providers = [r for r in model if r["type"] == "pulumi:providers:kubernetes"]
    assert providers and all(p["inputs"]["kubeconfig"] == "[secret]" for p in providers)
    cache = stacks["cache-ml-team.qwen3-coder"]["resources"]
    secret = [r for r in cache if r["type"] == "kubernetes:core/v1:Secret"]
    assert secret and all(s["inputs"]["stringData"] == "[secret]" for s in secret)


def test_status_without_any_backend(tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)
    assert main(["status", "-f", str(ROOT / "examples"), "-o", "json"]) == 0
    rows = json.loads(capsys.readouterr().out)["stacks"]
    assert rows and all(r["change"] == "create" and r["appliedAt"] is None for r in rows)


def test_plan_against_prints_the_same_from_its_cache_and_without_it(tmp_path, capsys, monkeypatch):
    monkeypatch.setenv("MODELPLANE_CACHE_DIR", str(tmp_path / "cache"))
    base, head = pr(tmp_path)
    printed = []
    for extra in ([], [], ["--no-cache"]):  # computes and stores the base's summary, reads it back, ignores it
        for output in ("json", "markdown"):
            assert main(["plan", "-f", str(head), "--against", str(base), "-o", output, *extra]) == 0
            printed.append(capsys.readouterr().out)
    assert printed[0:2] == printed[2:4] == printed[4:6]
    assert len(list((tmp_path / "cache" / "plans").glob("*.json"))) == 1


@pytest.mark.parametrize("argv, says", [
    (["--forget", "byo-eu"], "it needs --prune"),
    (["--prune", "--forget", "byo-eu"], "InferenceCluster/byo-eu is in the manifests"),
    (["--prune", "--forget", "retired"], "the record has no stack of a cluster retired"),
])
def test_forget_names_only_a_recorded_cluster_that_left_the_manifests(argv, says, tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)
    monkeypatch.delenv("PULUMI_BACKEND_URL", raising=False)
    assert main(["up", "-f", str(ROOT / "examples"), "--state", str(tmp_path / "state"), *argv]) == 2
    err = capsys.readouterr().err
    assert says in err and "Traceback" not in err


def test_the_command_that_forgets_a_cluster_is_the_run_s_own():
    from automation.cli.forgetting import forget_command
    from automation.cli.stack_options import StackRun

    run = StackRun("up", ("fleet dir", "models.yaml"), state="/srv/state", backend="s3://b/fleet", fleet_name="prod",
                   kubeconfig=("byo-eu=/k/eu",), prune=True)
    assert forget_command(run, ["byo-eu"]) == (
        "modelplane up -f 'fleet dir' -f models.yaml --prune --yes-destroy-clusters --state /srv/state --backend "
        "s3://b/fleet --fleet prod --kubeconfig byo-eu=/k/eu --forget byo-eu")


def test_a_modelplane_error_no_command_said_is_its_one_line_and_exit_2_not_an_internal_error(capsys):
    """main() maps a ModelplaneError that escapes a command once, as fleet/errors.py says: its line and the usage
    exit code. It used to print "internal error ... (please report this)" with exit 3."""
    from automation.cli.base import cli
    from automation.portal.store import StoreError

    @cli.command("raises-for-a-test")
    def raises() -> None:
        raise StoreError("the portal database at /nowhere cannot be opened")

    try:
        assert main(["raises-for-a-test"]) == 2
    finally:
        cli.commands.pop("raises-for-a-test")
    err = capsys.readouterr().err
    assert err == "error: the portal database at /nowhere cannot be opened\n"
