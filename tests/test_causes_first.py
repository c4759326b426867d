"""Everyday use, round four (issue 66), the command line: the root cause first, what will fail said early, a
pull-request comment that says what it knows, and help that says what the options do.

The fleet with a root cause is the example fleet whose GKE cluster names no Google Cloud project: its platform
program fails, and what runs after it on that cluster misses what it would have created."""

from __future__ import annotations

import json
import pathlib
import re
import shutil

import pytest
import yaml

from automation.cli import main
from automation.checks.deployability import Violation
from tests.test_deployability import k, stack

ROOT = pathlib.Path(__file__).resolve().parent.parent
CAUSE = "platform-gke-us-central: -: program: OfflineRunError: InferenceCluster/gke-us-central: spec.cluster.gke.project"


@pytest.fixture
def no_project(tmp_path) -> pathlib.Path:
    fleet = tmp_path / "fleet"
    shutil.copytree(ROOT / "examples", fleet)
    clusters = fleet / "platform" / "clusters.yaml"
    text = clusters.read_text()
    assert "      project: my-gcp-project\n" in text
    clusters.write_text(text.replace("      project: my-gcp-project\n", ""))
    return fleet


@pytest.fixture
def no_cli(tmp_path, monkeypatch):
    monkeypatch.setenv("PATH", str(tmp_path / "bin"))  # no pulumi
    monkeypatch.delenv("PULUMI_HOME", raising=False)
    monkeypatch.delenv("PULUMI_CONFIG_PASSPHRASE", raising=False)
    monkeypatch.delenv("PULUMI_BACKEND_URL", raising=False)
    monkeypatch.chdir(tmp_path)


# ---- causes before consequences -----------------------------------------------------------------------------------

def test_what_follows_from_a_failed_program_is_what_runs_after_it_on_its_cluster():
    from automation.checks.deployability import by_cause

    previews = [stack("platform-a", [], cluster="a", error="boom"), stack("platform-b", [], cluster="b"),
                stack("model-m", [k("v1", "Service", "svc", "t", cluster="a"), k("v1", "Service", "other", "t",
                                                                                 cluster="b")],
                      depends_on=("platform-a", "platform-b")),
                stack("service-s", [k("v1", "Service", "far", "t", cluster="a")], depends_on=("model-m",)),
                stack("model-n", [k("v1", "Service", "own", "t", cluster="a")])]
    cause = Violation("platform-a", "-", "program", "boom")
    on_a = Violation("model-m", "t/svc", "namespace", "namespace 't' on a is not created")
    on_b = Violation("model-m", "t/other", "namespace", "namespace 't' on b is not created")
    later = Violation("service-s", "t/far", "crd", "no CRD on a")  # two stacks after it, on its cluster
    unrelated = Violation("model-n", "t/own", "namespace", "namespace 't' on a is not created")  # not after it
    found = by_cause([on_a, on_b, cause, later, unrelated], previews)
    assert found.causes == [(cause, [on_a, later])] and found.others == [on_b, unrelated]
    assert len(found) == 5 and found.summary() == "5 deployability violation(s), 2 of them because platform-a cannot run"
    assert [v for v, _ in found.ordered()] == [cause, on_a, later, on_b, unrelated]
    assert found.lines()[:2] == [str(cause), "  + 2 violation(s) that follow from it: what runs after platform-a "
                                             "misses what it would create (--verbose lists them)"]
    assert found.lines(every=True)[:3] == [str(cause), f"  - {on_a}", f"  - {later}"]


def test_preview_offline_leads_with_the_failed_program_and_counts_what_follows(no_project, capsys):
    assert main(["preview", "--offline", "-f", str(no_project)]) == 1
    err = capsys.readouterr().err.strip().splitlines()
    assert err[0].startswith(CAUSE)
    assert "--config gcp:project=PROJECT" in err[0]  # the cause names the way out, as `validate` does
    assert re.fullmatch(r"  \+ (\d+) violation\(s\) that follow from it: what runs after platform-gke-us-central "
                        r"misses what it would create \(--verbose or -o json lists them\)", err[1])
    followed = int(err[1].split()[1])
    assert followed >= 3 and len(err) == 3  # every violation follows from the one cause here
    assert err[2] == (f"{followed + 1} deployability violation(s), {followed} of them because platform-gke-us-central "
                      "cannot run: a real first apply would fail; nothing was applied")
    assert main(["preview", "--offline", "-f", str(no_project), "-o", "json", "--verbose"]) == 1
    out, err = capsys.readouterr()
    violations = json.loads(out)["violations"]
    assert violations[0]["rule"] == "program" and "because" not in violations[0]
    assert len(violations) == followed + 1
    assert {v.get("because") for v in violations[1:]} == {"platform-gke-us-central"}
    listed = err.strip().splitlines()
    assert listed[0].startswith(CAUSE) and [line[:4] for line in listed[1:-1]] == ["  - "] * followed


def test_up_says_the_cause_then_everything_else_it_lacks_one_line_each(no_project, no_cli, capsys):
    assert main(["up", "-f", str(no_project)]) == 1
    err = capsys.readouterr().err.strip().splitlines()
    assert err[0].startswith(CAUSE) and err[1].startswith("  + ")
    assert "of them because platform-gke-us-central cannot run; nothing was applied" in err[2]
    assert "--skip-check to apply anyway" in err[2]
    assert re.fullmatch(r"`up` also needs \d thing\(s\) not given here:", err[3])
    assert err[4].startswith("  - the Pulumi CLI is not installed: ")  # said, not hidden behind the violations
    missing = err[4:]
    assert all(line.startswith("  - ") and ";" not in line.split(": ", 1)[0] for line in missing)
    assert any("InferenceCluster/gke-us-central is GKE and names no Google Cloud project" in line for line in missing)
    assert any(line.startswith("  - set PULUMI_CONFIG_PASSPHRASE") for line in missing)


def test_a_real_preview_suggests_no_option_it_does_not_take(no_project, no_cli, capsys):
    assert main(["preview", "-f", str(no_project)]) == 1
    err = capsys.readouterr().err
    assert err.startswith(CAUSE) and "`preview` also needs" in err and "--skip-check" not in err


def test_up_lists_what_it_lacks_one_line_each(no_cli, capsys):
    assert main(["up", "-f", str(ROOT / "examples")]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert re.fullmatch(r"error: `up` needs 4 thing\(s\) not given here:", err[0])
    assert [line.split(":")[0] for line in err[1:]] == [
        "  - the Pulumi CLI is not installed", "  - set PULUMI_CONFIG_PASSPHRASE (or PULUMI_CONFIG_PASSPHRASE_FILE)",
        "  - InferenceCluster/byo-eu is Existing", "  - cache-ml-team.qwen3-coder"]
    assert not any("; set PULUMI" in line or "; InferenceCluster" in line for line in err)  # none joined


# ---- validate warns of what will certainly fail later -------------------------------------------------------------

def test_validate_warns_of_a_gke_cluster_without_a_project_naming_the_flag(no_project, capsys):
    assert main(["validate", "-f", str(no_project)]) == 0
    out, err = capsys.readouterr()
    [line] = [line for line in err.splitlines() if "project" in line]
    assert line.startswith(f"{no_project}/platform/clusters.yaml:12: InferenceCluster/gke-us-central: "
                           "spec.cluster.gke: warning: names no Google Cloud project")
    assert "--config gcp:project=PROJECT" in line and "spec.cluster.gke.project" in line
    assert out.strip().endswith("17 objects valid, 1 warning(s)")
    assert main(["validate", "-f", str(no_project), "-o", "json"]) == 0
    problems = json.loads(capsys.readouterr().out)["problems"]
    assert [(p["object"], p["path"], p["severity"]) for p in problems] == [
        ("InferenceCluster/gke-us-central", "spec.cluster.gke", "warning")]
    assert main(["validate", "-f", str(ROOT / "examples")]) == 0  # a cluster that names its project: no warning
    assert "project" not in capsys.readouterr().err


def test_up_given_the_project_as_config_does_not_say_it_is_missing(no_project, no_cli, capsys):
    assert main(["preview", "--offline", "-f", str(no_project), "-o", "json", "--config", "gcp:project=p-1"]) == 0
    needs = json.loads(capsys.readouterr().out)["needs"]
    assert needs and not [n for n in needs if "project" in n]


# ---- status says what cannot run as declared ----------------------------------------------------------------------

def test_status_says_which_pending_stacks_cannot_run_as_declared(no_project, no_cli, capsys):
    assert main(["status", "-f", str(no_project), "-o", "json"]) == 0
    rows = {row["name"]: row for row in json.loads(capsys.readouterr().out)["stacks"]}
    assert [line.split(":")[0] for line in rows["platform-gke-us-central"]["cannotRun"]] == [
        "InferenceCluster/gke-us-central is GKE and names no Google Cloud project"]
    assert rows["platform-byo-eu"]["cannotRun"][0].startswith("InferenceCluster/byo-eu is Existing: give its kubeconfig")
    assert rows["cache-ml-team.qwen3-coder"]["cannotRun"] == [
        "Secret ml-team/hf-token key 'HF_TOKEN' has no value: give a v1/Secret ml-team/hf-token with key 'HF_TOKEN' "
        "given with -f, or $MODELPLANE_SECRET_ML_TEAM__HF_TOKEN__HF_TOKEN"]
    assert rows["model-ml-team.qwen3-8b"]["cannotRun"] == [] and \
        rows["model-ml-team.qwen3-8b"]["waitsFor"] == ["platform-gke-us-central"]
    assert "cannotRun" not in rows["platform-eks-us-west"] and "cannotRun" not in rows["model-ml-team.kimi-k2"]
    assert main(["status", "-f", str(no_project)]) == 0
    out = capsys.readouterr().out.splitlines()
    [row] = [line for line in out if line.startswith("model-ml-team.qwen3-8b ")]
    assert row.endswith("not applied yet; waits for platform-gke-us-central, which cannot run as declared")
    start = next(i for i, line in enumerate(out) if line.startswith("cannot run as declared"))
    assert out[start + 1].startswith("  platform-byo-eu: InferenceCluster/byo-eu is Existing")
    assert out[start + 2].startswith("  platform-gke-us-central: InferenceCluster/gke-us-central is GKE")


# ---- the pull-request comment -------------------------------------------------------------------------------------

def _sides(tmp_path) -> tuple[str, str]:
    base, head = tmp_path / "base", tmp_path / "head"
    shutil.copytree(ROOT / "examples", base)
    shutil.copytree(ROOT / "examples", head)
    path = head / "platform" / "clusters.yaml"
    docs = [d for d in yaml.safe_load_all(path.read_text()) if d["metadata"]["name"] != "byo-eu"]
    path.write_text(yaml.safe_dump_all(docs, sort_keys=False))
    return str(head), str(base)


def test_review_takes_a_backend_and_leads_with_the_warning_plan_gives_when_it_cannot_read_it(tmp_path, no_cli,
                                                                                             capsys):
    head, base = _sides(tmp_path)
    args = ["-f", head, "--against", base, "--backend", "s3://fleet-state/record", "--no-cache"]
    assert main(["plan", *args, "-o", "markdown"]) == 0
    planned = capsys.readouterr().out.splitlines()
    assert planned[0].startswith("> **Warning:** the record of what is applied could not be read")
    assert main(["review", *args]) == 0
    comment = capsys.readouterr().out.splitlines()
    assert comment[3] == planned[0]  # after the marker, the title and a blank line: the same warning, first
    assert "**Replicas moved**" not in comment and "**Replicas that may move** (not checked against the record" in \
        "\n".join(comment)  # what it could not check is possible, not certain


def test_review_names_only_options_it_takes(tmp_path, capsys, monkeypatch):
    monkeypatch.chdir(tmp_path)
    head, base = _sides(tmp_path)
    for command in (["review", "-f", head, "--against", base],
                    ["preview", "--offline", "-f", head, "--changed-against", base, "-o", "json"]):
        main(command)
        capsys.readouterr()
        main(command)  # the base is read as summarised: the note names a way out only if the command takes it
        err = capsys.readouterr().err
        assert "read as summarised before" in err, err
        from automation.cli import cli

        taken = {o for p in cli.commands[command[0]].params for o in p.opts}
        named = set(re.findall(r"(?<![\w-])--[a-z][\w-]*", err))
        assert named <= taken, (command[0], named - taken)
    assert main(["review", "-f", head, "--against", base, "--no-cache"]) == 0
    assert "read as summarised" not in capsys.readouterr().err


# ---- help that says what the options do ---------------------------------------------------------------------------

def test_preview_help_says_prune_previews_destroys(capsys):
    assert main(["preview", "--help"]) == 0
    text = " ".join(capsys.readouterr().out.split())
    prune = text[text.index("--prune"):text.index("--prune") + 200]
    assert "Also destroy" not in prune and "preview destroying" in prune and "destroys nothing" in prune


def test_serve_help_documents_the_tokens_file_mapping_form_with_quotas(capsys):
    from automation.portal.auth import Quota, TokenEntry, TokensDocument

    assert main(["serve", "--help"]) == 0
    text = " ".join(capsys.readouterr().out.split())
    tokens = text[text.index("--tokens FILE"):text.index("--database URL")]
    for field in [*TokenEntry.model_fields, *TokensDocument.model_fields, *Quota.model_fields]:
        assert field in tokens, field


@pytest.mark.parametrize("how", [[], ["--fresh"]])
def test_plan_against_markdown_leads_with_the_same_record_warning_as_review(tmp_path, no_cli, capsys, how):
    """No backend given and nothing recorded in the default one (a runner, or a first try), or --fresh: the comment's
    parts, run one at a time as docs/ci/README.md shows, say first what `review` says first."""
    head, base = _sides(tmp_path)
    args = ["-f", head, "--against", base, "--no-cache", *how]
    assert main(["review", *args]) == 0
    comment = capsys.readouterr().out.splitlines()
    assert comment[3].startswith("> **Warning:** ") and "listed as possible, not certain" in comment[3]
    assert main(["plan", *args, "-o", "markdown"]) == 0
    assert capsys.readouterr().out.splitlines()[0] == comment[3]
