"""Team policies at fleet scale (issue 64): `plan` of a fleet_gen fleet (default 2,000 deployments x 500 clusters)
where every one of its 40 teams has a TeamPolicy, against the same fleet without them.

Each policy has a fleet-wide GPU budget of about 60% of what the team's deployments ask (so budgets bind and the
fill's budget-aware search runs), a budget for one product, and, for every other team, residency in the regions of
one cloud (every cluster has a `region` label; the policy's selector is `region In (...)`), allowing the hosted
endpoint's origin. Paired runs, as
benchmarks/fleet_scale.py pairs them; target: within 1.2x the plan without policies. Prints one table; asserts
nothing.

    .venv/bin/python benchmarks/team_policy.py
"""

from __future__ import annotations

import argparse
import random
import sys
import tempfile
from collections import Counter
from pathlib import Path

import yaml

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from benchmarks.fleet_gen import REGIONS, realistic  # noqa: E402
from benchmarks.fleet_scale import BIN, compile_project, cpu_probe, line, paired  # noqa: E402


def policies(objects: list[dict], seed: int = 64) -> list[dict]:
    rnd = random.Random(seed)
    asked: Counter[str] = Counter()
    for o in objects:
        if o["kind"] == "ModelDeployment":
            devices = sum(d.get("count", 1) * (m.get("worker", {}).get("nodes", 1))
                          for e in o["spec"]["template"]["spec"]["engines"] for m in e["members"]
                          for d in (m.get("nodeSelector") or {}).get("devices", []))
            asked[o["metadata"]["namespace"]] += devices * o["spec"]["replicas"]
    out = []
    for i, (team, devices) in enumerate(sorted(asked.items())):
        spec: dict = {"gpus": [{"count": max(1, int(devices * 0.6))},
                               {"deviceClassName": "gpu.nvidia.com", "productName": "NVIDIA H100 80GB HBM3",
                                "count": max(1, devices // 4)}]}
        if i % 2:
            cloud = rnd.choice(sorted(REGIONS))
            spec["residency"] = {"clusterSelector": {"matchExpressions": [
                {"key": "region", "operator": "In", "values": REGIONS[cloud]}]},
                "externalOrigins": ["https://inference.example.com"]}  # the generated hosted endpoint's
        out.append({"apiVersion": "modelplane.ai/v1alpha1", "kind": "TeamPolicy", "metadata": {"name": team},
                    "spec": spec})
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--deployments", type=int, default=2000)
    parser.add_argument("--clusters", type=int, default=500)
    args = parser.parse_args()
    compile_project()
    print(cpu_probe())
    size = f"{args.deployments}x{args.clusters}"
    with tempfile.TemporaryDirectory() as folder:
        objects = realistic(args.deployments, args.clusters)
        plain, governed = Path(folder) / "plain", Path(folder) / "governed"
        plain.mkdir()
        governed.mkdir()
        (plain / "fleet.yaml").write_text(yaml.safe_dump_all(objects, sort_keys=False))
        (governed / "fleet.yaml").write_text(yaml.safe_dump_all(objects, sort_keys=False))
        (governed / "policies.yaml").write_text(yaml.safe_dump_all(policies(objects), sort_keys=False))
        cli = [str(BIN / "modelplane"), "plan", "-o", "json", "--fresh", "-f"]
        pair = paired([*cli, str(plain)], [*cli, str(governed)])
        line("fleet_gen", size, "plan (no policies)", *pair.floor[:2], None, "", pair.floor[2])
        line("fleet_gen", size, "plan (40 team policies)", *pair.run[:2], pair.floor[0], "<=1.2x", pair.run[2],
             pair.ratio)


if __name__ == "__main__":
    main()
