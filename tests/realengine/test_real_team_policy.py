"""TeamPolicy on real API servers (docs/teams.md "Team policy"): the real Pulumi CLI applies what the policy lets the
scheduler place, and nothing else. local-fleet/ with a policy for ml-team: resident in `region: us` (local-b, the
H100 cluster; local-a is `region: eu`) with a budget of 3 GPUs. Then the platform team lowers the budget, and then
local-b loses its label while the team's replicas run there: each change shows its moves in `plan`, `up` refuses
them without `--yes`, and with it the pods go. The tests run in order, each from what the one before left."""

from __future__ import annotations

import json
import shutil

import pytest

from tests.realengine.conftest import FLEET, started, wait_for
from tests.realengine.test_real_up import running_pods

MANIFESTS: list[str] = []

POLICY = """\
apiVersion: modelplane.ai/v1alpha1
kind: TeamPolicy
metadata:
  name: ml-team
spec:
  gpus:
    - deviceClassName: gpu.nvidia.com
      count: {count}
  residency:
    clusterSelector:
      matchLabels: {{region: us}}
"""


def write_policy(count: int) -> None:
    with open(f"{MANIFESTS[0]}/policy.yaml", "w") as f:
        f.write(POLICY.format(count=count))


@pytest.fixture(scope="module")
def local_fleet(tmp_path_factory):
    manifests = tmp_path_factory.mktemp("policy") / "fleet"
    shutil.copytree(FLEET, manifests)
    MANIFESTS[:] = [str(manifests)]
    write_policy(3)
    yield from started(tmp_path_factory, manifests)


def plan(fleet) -> dict:
    return json.loads(fleet.modelplane("plan", "-f", MANIFESTS[0], "-o", "json").stdout)


def on(document: dict) -> dict[str, str]:
    return {r["deployment"]: r["cluster"] for r in document["replicas"]}


def test_up_runs_the_team_only_in_its_jurisdiction_and_no_foreign_front_door_serves_it(local_fleet):
    document = plan(local_fleet)
    # qwen3-8b would take an L4 on local-a (its tightest fit) without the policy; local-a is region eu
    assert on(document) == {"ml-team/qwen3-8b": "local-b", "ml-team/llama-70b": "local-b"}
    done = local_fleet.modelplane("up", "-f", MANIFESTS[0])
    b = local_fleet.api("local-b")
    for name in ("qwen3-8b", "llama-70b"):
        wait_for(f"{name} running on local-b", lambda: running_pods(b, "ml-team", name))
    a = local_fleet.api("local-a")
    assert not running_pods(a, "ml-team", "qwen3-8b") and not running_pods(a, "ml-team", "llama-70b")
    # the fleet's front door runs on local-a (eu): the service is applied without a route through it, and `up` says
    # why (withheld, not refused: the rest of the fleet applies)
    assert "ModelService/qwen3-8b" in done.stderr and "no gateway may serve it" in done.stderr, done.stderr
    status = local_fleet.modelplane("status", "-f", MANIFESTS[0]).stdout
    assert "model-ml-team.qwen3-8b" in status and "service-ml-team.qwen3-8b" not in status, status


def test_a_lowered_budget_shows_the_move_and_up_needs_yes_to_apply_it(local_fleet):
    write_policy(2)
    document = plan(local_fleet)
    assert on(document) == {"ml-team/llama-70b": "local-b"}  # the larger deployment is charged first
    dropped = [d for d in document["dropped"] if d["deployment"] == "ml-team/qwen3-8b"]
    assert dropped and "over TeamPolicy ml-team spec.gpus[0]: budget 2" in dropped[0]["reason"], document["dropped"]
    refused = local_fleet.modelplane("up", "-f", MANIFESTS[0], check=False)
    assert refused.returncode != 0 and "--yes" in refused.stderr, refused.stderr
    b = local_fleet.api("local-b")
    assert running_pods(b, "ml-team", "qwen3-8b")  # nothing was applied
    local_fleet.modelplane("up", "-f", MANIFESTS[0], "--yes")
    wait_for("qwen3-8b's pod gone from local-b", lambda: not running_pods(b, "ml-team", "qwen3-8b"))
    assert running_pods(b, "ml-team", "llama-70b")


def test_a_cluster_that_loses_its_label_loses_the_team_and_nothing_goes_elsewhere(local_fleet):
    path = f"{MANIFESTS[0]}/fleet.yaml"
    with open(path) as f:
        text = f.read()
    assert text.count("    region: us\n") == 1
    with open(path, "w") as f:
        f.write(text.replace("    region: us\n", "    team: shared\n"))
    document = plan(local_fleet)
    assert on(document) == {}  # local-a is eu; local-b has no region: fails closed
    dropped = {d["deployment"]: d["reason"] for d in document["dropped"]}
    assert "cluster local-b is outside TeamPolicy ml-team spec.residency.clusterSelector (no region" in \
        dropped["ml-team/llama-70b"], dropped
    local_fleet.modelplane("up", "-f", MANIFESTS[0], "--yes")
    b, a = local_fleet.api("local-b"), local_fleet.api("local-a")
    wait_for("llama-70b's pod gone from local-b", lambda: not running_pods(b, "ml-team", "llama-70b"))
    assert not running_pods(a, "ml-team", "llama-70b") and not running_pods(a, "ml-team", "qwen3-8b")
