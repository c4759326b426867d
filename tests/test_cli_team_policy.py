"""Team policies in the preview (`plan --explain`, `plan -o json`, `plan --against -o markdown`, `review`) and
`up`'s confirmation of the moves a policy change forces on running replicas. The examples' observed ModelReplica
(examples/observed/) is the running replica: qwen3-8b's on gke-us-central (cloud=gcp)."""

from __future__ import annotations

import json
import pathlib
import shutil

import pytest

from automation.cli import main

ROOT = pathlib.Path(__file__).resolve().parent.parent
GCP_OUT = "- {key: cloud, operator: In, values: [aws, onprem]}"


def run(capsys, *args: str) -> tuple[int, str, str]:
    code = main(list(args))
    out, err = capsys.readouterr()
    assert "Traceback" not in out + err
    return code, out, err


@pytest.fixture
def change(tmp_path) -> tuple[pathlib.Path, pathlib.Path]:
    """A pull request that halves ml-team's GPU budget and takes gcp out of its residency."""
    base, head = tmp_path / "base", tmp_path / "head"
    shutil.copytree(ROOT / "examples", base)
    shutil.copytree(ROOT / "examples", head)
    policy = head / "teams" / "ml-team.yaml"
    text = policy.read_text()
    assert "count: 40 " in text and "values: [us, eu]}" in text
    policy.write_text(text.replace("count: 40 ", "count: 20 ").replace(
        "values: [us, eu]}", "values: [us, eu]}\n        " + GCP_OUT))
    return base, head


def test_explain_says_each_deployment_s_residency_and_json_adds_a_policies_key(change, capsys):
    _, head = change
    code, out, _ = run(capsys, "plan", "-f", str(head), "--explain")
    assert code == 0
    explained = out.split("explain ml-team/qwen3-8b:")[1]
    assert explained.splitlines()[1] == ("  - residency: TeamPolicy ml-team allows clusters byo-eu, eks-us-west; "
                                         "refuses gke-us-central (cloud=gcp)")
    assert "team budgets" in out and "spec.gpus[0]" in out
    code, out, _ = run(capsys, "plan", "-f", str(head), "-o", "json")
    document = json.loads(out)
    budgets = {b["field"]: b for b in document["policies"]["budgets"]}
    assert budgets["spec.gpus[0]"] == {"namespace": "ml-team", "policy": "ml-team", "field": "spec.gpus[0]",
                                       "what": "gpu.nvidia.com", "budget": 20, "used": 18}
    assert budgets["spec.maxDeployments"]["used"] == 3
    [team] = document["policies"]["residency"]  # one entry per namespace: its deployments share the decision
    assert team["namespace"] == "ml-team" and "qwen3-8b" in team["deployments"]
    assert team["allowed"] == ["byo-eu", "eks-us-west"] and team["refused"] == {"gke-us-central": "cloud=gcp"}
    # the plan's own keys are unchanged by it: the same replicas, unscheduled and dropped as before
    assert set(document) == {"replicas", "unscheduled", "dropped", "policies"}


def test_a_fleet_without_policies_has_no_policies_key(tmp_path, capsys):
    fleet = tmp_path / "fleet"
    shutil.copytree(ROOT / "examples", fleet)
    (fleet / "teams" / "ml-team.yaml").unlink()
    code, out, _ = run(capsys, "plan", "-f", str(fleet), "-o", "json")
    assert code == 0 and "policies" not in json.loads(out)


def test_the_pr_comment_says_first_what_the_change_breaks_then_budgets_before_and_after(change, capsys):
    base, head = change
    code, out, _ = run(capsys, "plan", "-f", str(head), "--against", str(base), "-o", "markdown", "--no-cache")
    assert code == 0
    breaks = out.index("**Error: the change breaks a team policy**")
    assert breaks < out.index("| stack | change |")  # before the stacks table
    said = out[breaks:out.index("| stack | change |")]
    assert ("- `ml-team/qwen3-coder`: 1 replica(s) unscheduled: over TeamPolicy ml-team spec.gpus[0]: budget 20 "
            "gpu.nvidia.com, in use 16, this replica asks 16") in said
    assert ("- `ml-team/qwen3-8b` `qwen3-8b-a02c0` moved `gke-us-central` -> `eks-us-west`: cluster gke-us-central is "
            "outside TeamPolicy ml-team spec.residency.clusterSelector (cloud=gcp;") in said
    assert "| ml-team | ml-team | `spec.gpus[0]` | gpu.nvidia.com | 40 -> 20 | 34 -> 18 |" in out
    assert "| ml-team | ml-team | `spec.gpus[1]` | NVIDIA H100 80GB HBM3 (gpu.nvidia.com) | 36 | 33 -> 18 |" in out
    # json: the same budgets with their use before
    code, out, _ = run(capsys, "plan", "-f", str(head), "--against", str(base), "-o", "json")
    budget = next(b for b in json.loads(out)["policies"]["budgets"] if b["field"] == "spec.gpus[0]")
    assert (budget["budgetBefore"], budget["budget"], budget["usedBefore"], budget["used"]) == (40, 20, 34, 18)


def test_a_change_that_breaks_no_policy_says_nothing_of_it_first(tmp_path, capsys):
    base, head = tmp_path / "base", tmp_path / "head"
    shutil.copytree(ROOT / "examples", base)
    shutil.copytree(ROOT / "examples", head)
    code, out, _ = run(capsys, "plan", "-f", str(head), "--against", str(base), "-o", "markdown", "--no-cache")
    assert code == 0 and "breaks a team policy" not in out
    assert "| ml-team | ml-team | `spec.gpus[0]` | gpu.nvidia.com | 40 | 34 |" in out


def test_review_leads_with_the_policy_breaks(change, capsys, tmp_path):
    base, head = change
    comment = tmp_path / "comment.md"
    run(capsys, "review", "-f", str(head), "--against", str(base), "--out", str(comment), "--no-cache")
    text = comment.read_text()
    assert text.index("**Error: the change breaks a team policy**") < text.index("| stack | change |")
    assert "| ml-team | ml-team | `spec.gpus[0]` | gpu.nvidia.com | 40 -> 20 | 34 -> 18 |" in text
    assert "`ml-team` residency (3 deployment(s)): TeamPolicy ml-team allows clusters byo-eu, eks-us-west; refuses " \
           "gke-us-central (cloud=gcp)" in text


def test_up_refuses_the_moves_a_policy_forces_on_running_replicas_without_yes(change, capsys, tmp_path):
    _, head = change
    code, _, err = run(capsys, "up", "-f", str(head), "--state", str(tmp_path / "state"))
    assert code == 2
    assert ("  ml-team/qwen3-8b qwen3-8b-a02c0: moves gke-us-central -> eks-us-west (cluster gke-us-central is "
            "outside TeamPolicy ml-team spec.residency.clusterSelector") in err
    assert err.strip().splitlines()[-1] == ("error: a TeamPolicy moves or stops 1 running replica(s); nothing was "
                                            "applied: pass --yes to confirm")
    assert not (tmp_path / "state" / "stacks").exists() or not any((tmp_path / "state" / "stacks").iterdir())


def test_up_yes_confirms_the_moves(change, tmp_path):
    from automation.cli.applying import _confirm_policy_moves
    from automation.cli.base import record_for_plan
    from automation.cli.stack_options import StackRun
    from automation.execution.session import prepare
    from fleet.validate import load_fleet

    _, head = change
    fleet = load_fleet((str(head),)).fleet
    prepared = prepare(fleet, record_for_plan(str(tmp_path / "state"), None, None, "local",
                                              "modelplane-operator.yaml", False))
    assert any(d.reason.cause.value == "residency" for d in prepared.plan.dropped)
    _confirm_policy_moves(prepared, StackRun("up", (str(head),), yes=True))  # no exit: confirmed
    with pytest.raises(SystemExit) as refused:
        _confirm_policy_moves(prepared, StackRun("up", (str(head),)))
    assert refused.value.code == 2
