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

from automation.planning.review import MARKER

ROOT = Path(__file__).resolve().parent.parent
CI = ROOT / "docs" / "ci"
WORKFLOW = yaml.safe_load((CI / "fleet-preview.yml").read_text())
COMMENTER = yaml.safe_load((CI / "fleet-preview-comment.yml").read_text())
STEPS = {s.get("name") or s["uses"]: s for s in WORKFLOW["jobs"]["preview"]["steps"]}


def actions_expressions(script: str, values: dict[str, str]) -> str:
    """`${{ expr }}` replaced as Actions does before the shell runs the script."""
    return re.sub(r"\$\{\{\s*([^}]+?)\s*\}\}", lambda m: values[m.group(1)], script)


def run_step(name: str, folder: Path, values: dict[str, str]) -> subprocess.CompletedProcess:
    script = actions_expressions(STEPS[name]["run"], values)
    env = {**os.environ, "PATH": f"{Path(sys.executable).parent}:{os.environ['PATH']}", "HOME": str(folder),
           "GITHUB_OUTPUT": str(folder / "github-output"), "MODELPLANE_CACHE_DIR": str(folder / "cache")}
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


CASES = {  # case -> (how the head differs, the review's exit code, what the comment must say)
    "model-moved": (model_moved, "0", ["**Replicas moved**", "`ml-team/qwen3-8b`", "`gke-us-central` -> ",
                                       "Deployability check: ", "0 violations"]),
    "model-added": (model_added, "0", ["**Replicas added**", "`ml-team/qwen3-8b-canary`", "| `model-ml-team.qwen3-8b-canary` | create |"]),
    "cluster-removed": (cluster_removed, "0", ["**Warning: merging this destroys cluster `byo-eu`** and its GPU pools",
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
    used = {s["uses"] for job in (WORKFLOW, COMMENTER) for s in job["jobs"][next(iter(job["jobs"]))]["steps"]
            if "uses" in s}
    assert used == {"actions/checkout@v5", "actions/setup-python@v6", "actions/cache@v5", "actions/upload-artifact@v5",
                    "actions/github-script@v8", "actions/download-artifact@v6"}
    setup = STEPS["actions/setup-python@v6"]["with"]
    assert setup["cache"] == "pip" and setup["cache-dependency-path"].endswith("fleet-preview.yml")
