"""The CLI, CI and the portal give the same answer on a fleet of three teams' policies (issue 64's done-when): a
team resident in the EU, a team resident in the US with an H100 budget, and every other namespace under a default
policy. The fleet is one folder; the CLI plans it (`plan -o json`), CI plans it against a base with no
deployments (`plan --against -o json`, what the pull-request check runs), and the portal stores it write by write
(in the fill's order, so its one-deployment placements are the whole plan's), refusing each write that would go
over a budget. They must place the same replicas on the same clusters, show the same budget use, and refuse (or
leave unscheduled) the same deployments for the same policy and field."""

from __future__ import annotations

import json
import re

import yaml

from automation.cli import main
from tests.manifests import cluster
from tests.portal_server import ADMIN, API, ThreadServer
from tests.scheduling import H100, L4X8, md, mem

EU, US = {"example.org/jurisdiction": "eu"}, {"example.org/jurisdiction": "us"}


def team_policy(name: str, gpus: list, residency: dict | None = None, default: bool = False) -> dict:
    spec: dict = {"gpus": gpus}
    if residency is not None:
        spec["residency"] = {"clusterSelector": residency}
    if default:
        spec["defaultForNamespaces"] = True
    return {"apiVersion": "modelplane.ai/v1alpha1", "kind": "TeamPolicy", "metadata": {"name": name}, "spec": spec}


PLATFORM = [
    L4X8, H100,
    cluster("fra", pools=(("l4", "l4x8", 1),), labels=EU),
    cluster("par", pools=(("h100", "h100", 1),), labels=EU),
    cluster("ohio", pools=(("l4", "l4x8", 1), ("h100", "h100", 1)), labels=US),
    cluster("lab", pools=(("l4", "l4x8", 1),)),  # no jurisdiction: only the default policy's namespaces may use it
    team_policy("team-eu", [{"count": 10}], {"matchLabels": EU}),
    team_policy("team-us", [{"deviceClassName": "gpu.nvidia.com", "productName": "NVIDIA H100", "count": 8},
                            {"count": 12}],
                {"matchExpressions": [{"key": "example.org/jurisdiction", "operator": "In", "values": ["us"]}]}),
    team_policy("fleet-default", [{"count": 3}], default=True),
]
# in the fill's order (larger first, then by name): each accepted write is placed as the whole plan places it
ACCEPTED = [md("big", namespace="team-eu", gpus=8, cel=mem(70)), md("gen", namespace="team-us", gpus=8, cel=mem(70)),
            md("chat", namespace="team-us", gpus=4), md("mid", namespace="team-eu", gpus=2),
            md("d", namespace="team-x", gpus=2)]
# each over its team's budget once the accepted ones hold theirs: (deployment, the policy's field it breaks)
OVER = [(md("zz", namespace="team-eu", gpus=1), "TeamPolicy team-eu spec.gpus[0]"),
        (md("zz", namespace="team-us", gpus=1), "TeamPolicy team-us spec.gpus[1]"),
        (md("zz", namespace="team-x", gpus=2), "TeamPolicy fleet-default spec.gpus[0]")]


def cli(capsys, *args: str) -> dict:
    code = main(list(args))
    out, err = capsys.readouterr()
    assert code == 0 and "Traceback" not in out + err, err
    return json.loads(out)


def placed(plan: dict) -> list[tuple[str, str]]:
    return sorted((r["deployment"], r["cluster"]) for r in plan["replicas"])


def budgets(plan: dict) -> list[tuple]:
    return sorted((b["namespace"], b["policy"], b["field"], b["budget"], b["used"]) for b in plan["policies"]["budgets"])


def over_budget(plan: dict) -> dict[str, str]:
    """The deployments left unscheduled over a budget, each with the policy and field its reason names."""
    out = {}
    for u in plan["unscheduled"]:
        for reason in u["reasons"]:
            if (found := re.search(r"over (TeamPolicy \S+ spec\.gpus\[\d+\])", reason)):
                out[u["deployment"]] = found.group(1)
    return out


def path_of(obj: dict) -> str:
    plural = {"InferenceClass": "inferenceclasses", "InferenceCluster": "inferenceclusters",
              "TeamPolicy": "teampolicies", "ModelDeployment": "modeldeployments"}[obj["kind"]]
    meta = obj["metadata"]
    return f"{API}/namespaces/{meta['namespace']}/{plural}/{meta['name']}" if "namespace" in meta \
        else f"{API}/{plural}/{meta['name']}"


def test_the_cli_ci_and_the_portal_agree_on_three_teams_policies(tmp_path, capsys):
    fleet, base = tmp_path / "fleet", tmp_path / "base"
    fleet.mkdir()
    base.mkdir()
    (base / "platform.yaml").write_text(yaml.safe_dump_all(PLATFORM, sort_keys=False))
    (fleet / "platform.yaml").write_text(yaml.safe_dump_all(PLATFORM, sort_keys=False))
    (fleet / "models.yaml").write_text(yaml.safe_dump_all(ACCEPTED + [d for d, _ in OVER], sort_keys=False))

    laptop = cli(capsys, "plan", "-f", str(fleet), "-o", "json", "--fresh")
    pull_request = cli(capsys, "plan", "-f", str(fleet), "--against", str(base), "-o", "json", "--no-cache")
    expected_over = {f"{d['metadata']['namespace']}/zz": field for d, field in OVER}
    # the policies decide: nothing of team-eu leaves the EU, nothing of team-us the US, and the budgets bind
    assert placed(laptop) == [("team-eu/big", "par"), ("team-eu/mid", "fra"), ("team-us/chat", "ohio"),
                              ("team-us/gen", "ohio"), ("team-x/d", "fra")]
    assert over_budget(laptop) == expected_over
    assert placed(pull_request) == placed(laptop) and over_budget(pull_request) == expected_over
    assert budgets(pull_request) == budgets(laptop) == [
        ("team-eu", "team-eu", "spec.gpus[0]", 10, 10), ("team-us", "team-us", "spec.gpus[0]", 8, 8),
        ("team-us", "team-us", "spec.gpus[1]", 12, 12), ("team-x", "fleet-default", "spec.gpus[0]", 3, 2)]

    with ThreadServer(tmp_path / "portal", replan_interval=0.05) as server, server.client(ADMIN) as admin:
        for obj in PLATFORM + ACCEPTED:
            answer = admin.put(path_of(obj), json=obj)
            assert answer.status_code == 201, answer.text
        for obj, field in OVER:
            answer = admin.put(path_of(obj), json=obj)
            assert answer.status_code == 403 and f"over {field}" in answer.json()["message"], answer.text
        server.settle()
        portal = admin.get("/plan").json()
    assert placed(portal) == placed(laptop)
    assert budgets(portal) == budgets(laptop)
