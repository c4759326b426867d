"""The pull-request workflow of docs/ci/ run end to end: its review step's script, as Actions runs it, against a base
and a head for each case a pull request meets; the comment it writes is checked, and kept in docs/ci/examples/.

Regenerate the examples with `MODELPLANE_WRITE_CI_EXAMPLES=1 pytest tests/test_ci_workflow.py`.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from automation.checks.review import MARKER

ROOT = Path(__file__).resolve().parent.parent
CI = ROOT / "docs" / "ci"
WORKFLOW = yaml.safe_load((CI / "fleet-preview.yml").read_text())
WITH_RECORD = yaml.safe_load((CI / "fleet-preview-with-record.yml").read_text())
COMMENTER = yaml.safe_load((CI / "fleet-preview-comment.yml").read_text())
STEPS = {s.get("name") or s["uses"]: s for s in WORKFLOW["jobs"]["preview"]["steps"]}
RECORD_STEPS = {s.get("name") or s["uses"]: s for s in WITH_RECORD["jobs"]["preview"]["steps"]}


def actions_expressions(script: str, values: dict[str, str]) -> str:
    """`${{ expr }}` replaced as Actions does before the shell runs the script."""
    return re.sub(r"\$\{\{\s*([^}]+?)\s*\}\}", lambda m: values[m.group(1)], script)


def run_step(name: str, folder: Path, values: dict[str, str], steps: dict | None = None,
             unset: tuple[str, ...] = ()) -> subprocess.CompletedProcess:
    step = (steps or STEPS)[name]
    script = actions_expressions(step["run"], values)
    env = {**{k: v for k, v in os.environ.items() if k not in unset},
           "PATH": f"{Path(sys.executable).parent}:{os.environ['PATH']}", "HOME": str(folder),
           "GITHUB_OUTPUT": str(folder / "github-output"), "MODELPLANE_CACHE_DIR": str(folder / "cache"),
           **{k: actions_expressions(str(v), values) for k, v in (step.get("env") or {}).items()}}
    return subprocess.run(["bash", "-e", "-c", script], cwd=folder, env=env, capture_output=True, text=True,
                          timeout=600)


def outputs(folder: Path) -> dict[str, str]:
    lines = (folder / "github-output").read_text().splitlines()
    return dict(line.split("=", 1) for line in lines)


# ---- the cases ----------------------------------------------------------------------------------------------------

def _edit(path: Path, change) -> None:
    docs = list(yaml.safe_load_all(path.read_text()))
    path.write_text(yaml.safe_dump_all([d for d in (change(d) for d in docs) if d is not None], sort_keys=False))


def model_moved(fleet: Path) -> None:
    """qwen3-8b now needs 40Gi GPUs: its replica on GKE's 24Gi L4s moves to an H100 cluster."""
    path = fleet / "models" / "qwen3-8b.yaml"
    path.write_text(path.read_text().replace('quantity("20Gi")', 'quantity("40Gi")'))


def model_added(fleet: Path) -> None:
    text = (fleet / "models" / "qwen3-8b.yaml").read_text().replace("name: qwen3-8b", "name: qwen3-8b-canary", 1)
    (fleet / "models" / "qwen3-8b-canary.yaml").write_text(text)


def cluster_removed(fleet: Path) -> None:
    _edit(fleet / "platform" / "clusters.yaml",
          lambda doc: None if doc["metadata"]["name"] == "byo-eu" else doc)


def validation_failure(fleet: Path) -> None:
    def change(doc):
        if doc["kind"] == "ModelDeployment":
            doc["spec"]["replicas"] = "two"
            doc["spec"]["template"]["spec"]["enginez"] = []
        return doc
    _edit(fleet / "models" / "qwen3-coder.yaml", change)


NO_RECORD = "> **Warning:** the record of what is applied holds no stack in the default backend"
CASES = {  # case -> (how the head differs, the review's exit code, what the comment must say)
    # with no record to check them against, moves are possible, not certain, and the comment says why first
    # the replica the manifests observe on GKE is remembered: its move is certain
    "model-moved": (model_moved, "0", [NO_RECORD, "**Replicas moved**", "`ml-team/qwen3-8b`", "`gke-us-central` -> ",
                                       "Deployability check: ", "0 violations"]),
    "model-added": (model_added, "0", ["**Replicas added**", "`ml-team/qwen3-8b-canary`", "| `model-ml-team.qwen3-8b-canary` | create |"]),
    # no record: qwen3-8b's replica on EKS, placed afresh on both sides, may move or not; byo-eu's may too
    "cluster-removed": (cluster_removed, "0", ["**Replicas that may move**", "- `ml-team/qwen3-8b` `qwen3-8b-9b1c7`",
                                               "**Warning: merging this destroys cluster `byo-eu`** and its GPU pools",
                                               "`--prune --yes-destroy-clusters`", "| `platform-byo-eu` | delete |"]),
    "validation-failure": (validation_failure, "1", ["**Error: the manifests do not validate** (2 error(s))",
                                                     "head/fleet/models/qwen3-coder.yaml:"]),
}


@pytest.mark.parametrize("case", sorted(CASES))
def test_the_workflow_comments_every_case(tmp_path, case):
    change, exit_code, says = CASES[case]
    shutil.copytree(ROOT / "examples", tmp_path / "base" / "fleet")
    shutil.copytree(ROOT / "examples", tmp_path / "head" / "fleet")
    change(tmp_path / "head" / "fleet")
    done = run_step("Review the change", tmp_path, {"github.event.pull_request.number": "42"})
    assert done.returncode == 0, done.stderr  # the step itself never fails: the comment must be posted first
    assert outputs(tmp_path)["exit"] == exit_code, done.stderr
    assert (tmp_path / "pull-request-number").read_text().strip() == "42"
    comment = (tmp_path / "comment.md").read_text()
    assert comment.startswith(MARKER + "\n")
    for text in says:
        assert text in comment, comment
    if exit_code == "0":  # what it could not know leads, before the changes
        assert comment.index(NO_RECORD) < comment.index("stack(s) change**")
    else:  # nothing was planned, and the comment does not say it was
        assert "Planned" not in comment and "previewed offline" not in comment
    assert "Traceback" not in comment + done.stderr
    # the last step (its condition: steps.review.outputs.exit != '0') fails the job when the review refused it
    if exit_code != "0":
        failed = run_step("Fail when the change is invalid or refused", tmp_path,
                          {"steps.review.outputs.exit": exit_code})
        assert failed.returncode == 1 and "see the comment" in failed.stderr
    example = CI / "examples" / f"{case}.md"
    if os.environ.get("MODELPLANE_WRITE_CI_EXAMPLES"):
        example.parent.mkdir(exist_ok=True)
        example.write_text(comment)
    assert example.read_text() == comment, f"{example} is out of date: regenerate (see this file's docstring)"


def test_the_comment_is_posted_whatever_the_review_says_and_is_one_comment():
    comment_step = STEPS["Comment on the pull request (one comment, updated on every push)"]
    assert comment_step["if"].startswith("always()")
    assert STEPS["Keep the comment (fleet-preview-comment.yml posts it for forks)"]["if"] == "always()"
    assert STEPS["Fail when the change is invalid or refused"]["if"] == "steps.review.outputs.exit != '0'"
    for script in (comment_step["with"]["script"], COMMENTER["jobs"]["comment"]["steps"][-1]["with"]["script"]):
        assert f"'{MARKER}'" in script and "updateComment" in script  # the one sticky comment, found by its marker
    # forks: posted from the base repository's context, from the artifact only (no checkout of the fork's code)
    # PyYAML reads the key `on` as YAML 1.1's true
    assert COMMENTER[True] == {"workflow_run": {"workflows": [WORKFLOW["name"]], "types": ["completed"]}}
    assert not [s for s in COMMENTER["jobs"]["comment"]["steps"] if s.get("uses", "").startswith("actions/checkout")]
    # no preview output that nothing reads: the review writes the comment and nothing else
    assert "preview.json" not in (CI / "fleet-preview.yml").read_text()


def test_the_workflow_uses_current_action_majors_and_caches_the_install():
    used = {s["uses"] for job in (WORKFLOW, COMMENTER, WITH_RECORD)
            for s in job["jobs"][next(iter(job["jobs"]))]["steps"] if "uses" in s}
    assert used == {"actions/checkout@v5", "actions/setup-python@v6", "actions/cache@v5", "actions/upload-artifact@v5",
                    "actions/github-script@v8", "actions/download-artifact@v6", "pulumi/actions@v7"}
    setup = STEPS["actions/setup-python@v6"]["with"]
    assert setup["cache"] == "pip" and setup["cache-dependency-path"] == "head/modelplane/pyproject.toml"


def test_the_workflow_installs_modelplane_as_the_readme_does_from_no_placeholder():
    """The pinned modelplane (a submodule of the fleet's repository) is installed with `make install`, the README's
    way; no step installs from a URL someone must edit first."""
    for path in ("fleet-preview.yml", "fleet-preview-with-record.yml"):
        text = (CI / path).read_text()
        assert "your-org" not in text and "pip install" not in text and "git+" not in text
    assert WORKFLOW["jobs"]["preview"]["steps"][0]["with"] == {"path": "head", "submodules": True}
    install = STEPS["Install modelplane (as its README does, into head/modelplane/.venv)"]["run"]
    assert install.splitlines()[0] == "make -C head/modelplane install"
    assert "make install" in (ROOT / "README.md").read_text()
    # the target is there, and installs into .venv what the README's `make demo` does
    done = subprocess.run(["make", "-n", "install"], cwd=ROOT, capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr


def test_the_variant_that_reads_the_record_is_the_workflow_with_the_cli_and_the_backend():
    """fleet-preview-with-record.yml differs from fleet-preview.yml only where reading the record needs it: the
    Pulumi CLI, and the backend (with read access) given to the review."""
    added = [name for name in RECORD_STEPS if name not in STEPS]
    assert added == ["Install the Pulumi CLI (it reads the record of what is applied)"]
    assert RECORD_STEPS[added[0]]["uses"] == "pulumi/actions@v7" and "with" not in RECORD_STEPS[added[0]]
    for name, step in STEPS.items():
        if name != "Review the change":
            assert RECORD_STEPS[name] == step, name
    review = RECORD_STEPS["Review the change"]
    assert review["env"] == {"MODELPLANE_BACKEND": "${{ vars.MODELPLANE_BACKEND }}",
                             "PULUMI_ACCESS_TOKEN": "${{ secrets.PULUMI_ACCESS_TOKEN }}"}
    assert review["run"].replace(' ${MODELPLANE_BACKEND:+--backend "$MODELPLANE_BACKEND"}', "") == \
        STEPS["Review the change"]["run"]
    assert {k: v for k, v in WITH_RECORD.items() if k != "jobs"} == {k: v for k, v in WORKFLOW.items() if k != "jobs"}


def test_the_variant_reads_the_record_and_shows_only_the_moves_up_would_make(tmp_path_factory, monkeypatch, capsys):
    """Removing byo-eu, read against the record `up` wrote (the Pulumi CLI double's backend, with no passphrase, as
    CI has none): no unrelated replica is shown moving, as without the record one was."""
    from tests.test_lifecycle import applied_driver

    applied = applied_driver(tmp_path_factory, monkeypatch, capsys)
    folder = tmp_path_factory.mktemp("ci")
    docs = list(yaml.safe_load_all(Path(applied.fleet()).read_text()))
    for side, kept in (("base", docs), ("head", [d for d in docs if d["metadata"]["name"] != "byo-eu"])):
        (folder / side / "fleet").mkdir(parents=True)
        (folder / side / "fleet" / "fleet.yaml").write_text(yaml.safe_dump_all(kept, sort_keys=False))
    backend = f"file://{applied.work / '.modelplane' / 'backend'}"
    done = run_step("Review the change", folder, {"github.event.pull_request.number": "7",
                                                  "vars.MODELPLANE_BACKEND": backend,
                                                  "secrets.PULUMI_ACCESS_TOKEN": ""}, RECORD_STEPS,
                    unset=("PULUMI_CONFIG_PASSPHRASE", "PULUMI_CONFIG_PASSPHRASE_FILE", "PULUMI_BACKEND_URL"))
    assert done.returncode == 0, done.stderr
    comment = (folder / "comment.md").read_text()
    assert "**Warning:**" not in comment, comment
    # with the record, up keeps every applied replica where it is: nothing moves (byo-eu's replica has no room
    # elsewhere, so it is removed and unscheduled), and no unrelated replica is shown moving
    assert "Replicas moved" not in comment and "Replicas that may move" not in comment
    assert "- `ml-team/qwen3-coder` `qwen3-coder-49398` on `byo-eu` (cluster byo-eu no longer exists)" in comment
    assert "_Planned with the record of what is applied (" in comment
    # the same step with no backend to read: the comment says so first, and the move is only possible
    done = run_step("Review the change", folder, {"github.event.pull_request.number": "7",
                                                  "vars.MODELPLANE_BACKEND": "", "secrets.PULUMI_ACCESS_TOKEN": ""},
                    RECORD_STEPS, unset=("PULUMI_BACKEND_URL",))
    comment = (folder / "comment.md").read_text()
    assert comment.split("\n")[3].startswith(NO_RECORD)
    # planned afresh on both sides, qwen3-8b's replica on EKS lands elsewhere: shown, but only as possible
    may_move = comment.split("**Replicas that may move**")[1].split("\n\n")[1]
    assert "- `ml-team/qwen3-8b` `qwen3-8b-9b1c7`: `eks-us-west` -> " in may_move
