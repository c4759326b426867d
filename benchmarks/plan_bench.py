"""Plan a large generated fleet and print the time per phase.

Target (issue: the fleet scheduler): 2,000 deployments (about 4,000 replicas) on
500 clusters x 4 pools in under 10 s on the 2-core development machine, with cost that
grows linearly with the number of deployments. This prints figures; it asserts nothing.

    .venv/bin/python benchmarks/plan_bench.py                 # the target size
    .venv/bin/python benchmarks/plan_bench.py --scaling       # 500, 1000, 2000, 4000 deployments
"""

from __future__ import annotations

import argparse
import random
import sys
import time
from pathlib import Path

import yaml

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from fleet.loader import parse_text  # noqa: E402
from fleet.scheduler import schedule  # noqa: E402
from fleet.validate import validate_documents  # noqa: E402

CLASSES = [  # name, GPUs per node, memory, architecture
    ("l4-1x", 1, "23034Mi", "Ada"), ("l4-8x", 8, "23034Mi", "Ada"),
    ("a100-8x", 8, "40960Mi", "Ampere"), ("h100-8x", 8, "81559Mi", "Hopper"),
]
REGIONS = ["us-east", "us-west", "eu-west", "eu-north", "ap-south"]


def generate(deployments: int, clusters: int, seed: int = 7) -> list[dict]:
    rnd = random.Random(seed)
    objects: list[dict] = []
    for name, count, memory, arch in CLASSES:
        objects.append({"apiVersion": "modelplane.ai/v1alpha1", "kind": "InferenceClass", "metadata": {"name": name},
                        "spec": {"devices": [{"name": "gpu", "driver": "gpu.nvidia.com", "deviceClassName": "gpu.nvidia.com",
                                              "count": count, "attributes": {"architecture": {"string": arch}},
                                              "capacity": {"memory": {"value": memory}}}]}})
    for i in range(clusters):
        pools = [{"name": name.split("-")[0] + f"-{j}", "className": name, "nodeCount": rnd.randint(2, 10)}
                 for j, (name, *_rest) in enumerate(CLASSES)]
        objects.append({"apiVersion": "modelplane.ai/v1alpha1", "kind": "InferenceCluster",
                        "metadata": {"name": f"cluster-{i:04d}", "labels": {"region": REGIONS[i % len(REGIONS)]}},
                        "spec": {"cluster": {"source": "Existing", "existing": {"secretRef": {"name": f"kc-{i}"}}},
                                 "nodePools": pools}})

    def member(role: str, gpus: int, memory_gi: int, nodes: int | None = None) -> dict:
        m = {"role": role, "nodeSelector": {"devices": [{"name": "gpu", "count": gpus, "selectors": [
            {"cel": f'device.capacity["gpu.nvidia.com"].memory.compareTo(quantity("{memory_gi}Gi")) >= 0'}]}]},
             "template": {"spec": {"containers": [{"name": "engine", "image": "vllm/vllm-openai:v0.11.0"}]}}}
        if nodes:
            m["worker"] = {"nodes": nodes}
        return m

    for i in range(deployments):
        kind = rnd.random()
        if kind < 0.6:
            engines = [{"name": "vllm", "members": [member("Standalone", 1, rnd.choice([16, 20]))]}]
        elif kind < 0.75:
            engines = [{"name": "vllm", "members": [member("Standalone", rnd.choice([2, 4]), 35)]}]
        elif kind < 0.9:
            engines = [{"name": "vllm", "members": [member("Standalone", 8, 70)]}]
        else:
            engines = [{"name": "sglang", "members": [member("Leader", 8, 70), member("Worker", 8, 70, 1)]}]
        spec = {"engines": engines}
        if rnd.random() < 0.5:
            spec["clusterSelector"] = {"matchLabels": {"region": rnd.choice(REGIONS)}}
        objects.append({"apiVersion": "modelplane.ai/v1alpha1", "kind": "ModelDeployment",
                        "metadata": {"name": f"model-{i:05d}", "namespace": f"team-{i % 20}"},
                        "spec": {"replicas": rnd.choice([1, 2, 2, 3]), "template": {"spec": spec}}})
    return objects


def run(deployments: int, clusters: int) -> dict[str, float]:
    t0 = time.perf_counter()
    text = yaml.safe_dump_all(generate(deployments, clusters), sort_keys=False)
    t1 = time.perf_counter()
    docs, problems = parse_text(text, "generated.yaml")
    t2 = time.perf_counter()
    loaded = validate_documents(docs)
    assert not problems and not loaded.errors, (problems + loaded.errors)[:3]
    t3 = time.perf_counter()
    plan = schedule(loaded.fleet)
    t4 = time.perf_counter()
    replicas = len(plan.replicas)
    missing = sum(u.missing for u in plan.unscheduled)
    return {"deployments": deployments, "clusters": clusters, "replicas": replicas, "unscheduled": missing,
            "generate_s": t1 - t0, "parse_s": t2 - t1, "validate_s": t3 - t2, "plan_s": t4 - t3,
            **{k: v for k, v in plan.stats.items()}}


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--deployments", type=int, default=2000)
    parser.add_argument("--clusters", type=int, default=500)
    parser.add_argument("--scaling", action="store_true", help="also run 500, 1000 and 4000 deployments")
    args = parser.parse_args()
    sizes = [500, 1000, 2000, 4000] if args.scaling else [args.deployments]
    print(f"{'deploy':>7} {'clusters':>8} {'replicas':>8} {'unsched':>7} {'parse s':>8} {'validate s':>10} "
          f"{'plan s':>7} {'plan ms/deploy':>14} {'CEL evals':>9} {'replica evals':>13}")
    for n in sizes:
        r = run(n, args.clusters)
        print(f"{r['deployments']:>7} {r['clusters']:>8} {r['replicas']:>8} {r['unscheduled']:>7} {r['parse_s']:>8.2f} "
              f"{r['validate_s']:>10.2f} {r['plan_s']:>7.2f} {1000 * r['plan_s'] / n:>14.2f} "
              f"{r['cel_evaluations']:>9} {r['replica_evaluations']:>13}")


if __name__ == "__main__":
    main()
