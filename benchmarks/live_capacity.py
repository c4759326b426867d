"""Live capacity at fleet scale (issue 63): `plan` from a snapshot of every cluster's live capacity against the same
`plan` on declared capacity, and live reads of a running local fleet.

- `plan --capacity FILE` on a fleet_gen fleet (default 2,000 deployments x 500 clusters) with a snapshot where every
  pool's nodes publish what their class declares and other workloads hold a device on about one node in five: within
  1.2x `plan` on declared capacity (median of paired runs, as benchmarks/fleet_scale.py pairs them);
- with `--local`: `modelplane capacity save` against the running local fleet (`modelplane local up`), whose clusters
  are read in parallel, four LISTs each: its seconds, and the slowest single cluster's, over `--reads` runs.

Prints one table; asserts nothing.

    .venv/bin/python benchmarks/live_capacity.py
    .venv/bin/python benchmarks/live_capacity.py --deployments 200 --clusters 50 --local local-fleet/
"""

from __future__ import annotations

import argparse
import random
import sys
import tempfile
import time
from pathlib import Path

import yaml

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from benchmarks.fleet_gen import realistic  # noqa: E402
from benchmarks.fleet_scale import BIN, compile_project, cpu_probe, line, measure, paired  # noqa: E402


def snapshot(objects: list[dict], seed: int = 63, taken: float = 0.2,
             ours: dict[tuple[str, str], int] | None = None) -> str:
    """A capacity snapshot of the generated fleet: each pool's nodes publish their class's devices; another workload
    holds one device on about a `taken` share of the nodes; `ours`: devices this fleet's replicas hold per (cluster,
    pool), laid on its nodes in order (tests/test_live_capacity.py's properties)."""
    from fleet.capacity import ClusterCapacity, LiveCapacity, NodeCapacity, PoolCapacity

    rnd = random.Random(seed)
    classes = {o["metadata"]["name"]: o for o in objects if o["kind"] == "InferenceClass"}
    clusters = {}
    for o in objects:
        if o["kind"] != "InferenceCluster":
            continue
        name = o["metadata"]["name"]
        pools = []
        for pool in o["spec"].get("nodePools") or []:
            devices = [(d["name"], d.get("count", 1)) for d in classes[pool["className"]]["spec"]["devices"]
                       if d.get("claim", "DRA") == "DRA"]
            mine = (ours or {}).get((name, pool["name"]), 0)
            nodes = []
            for i in range(pool.get("maxNodeCount") or pool.get("nodeCount", 1)):
                held = ()
                if devices and mine:
                    n = min(mine, devices[0][1])
                    held, mine = ((devices[0][0], n),), mine - n
                others = tuple((d, 1) for d, _ in devices[:1]) if not held and rnd.random() < taken else ()
                nodes.append(NodeCapacity(f"{pool['name']}-{i}", tuple(devices), held, others))
            pools.append(PoolCapacity(pool["name"], tuple(nodes)))
        clusters[name] = ClusterCapacity(name, "live", "2026-12-07T00:00:00+00:00", None, tuple(pools))
    return LiveCapacity(clusters).to_json()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--deployments", type=int, default=2000)
    parser.add_argument("--clusters", type=int, default=500)
    parser.add_argument("--local", metavar="MANIFESTS", default=None,
                        help="also time `capacity save` against the running local fleet of these manifests")
    parser.add_argument("--reads", type=int, default=5)
    args = parser.parse_args()
    compile_project()
    print(cpu_probe())
    size = f"{args.deployments}x{args.clusters}"
    with tempfile.TemporaryDirectory() as folder:
        objects = realistic(args.deployments, args.clusters)
        fleet, snap = Path(folder) / "fleet.yaml", Path(folder) / "capacity.json"
        fleet.write_text(yaml.safe_dump_all(objects, sort_keys=False))
        snap.write_text(snapshot(objects))
        cli = [str(BIN / "modelplane"), "plan", "-f", str(fleet), "-o", "json", "--fresh"]
        pair = paired(cli, [*cli, "--capacity", str(snap)])
        line("fleet_gen", size, "plan (declared)", *pair.floor[:2], None, "", pair.floor[2])
        line("fleet_gen", size, "plan --capacity FILE", *pair.run[:2], pair.floor[0], "<=1.2x", pair.run[2], pair.ratio)
    if args.local:
        from automation.capacity.read import kube_reader, kubeconfig_paths, read_capacity
        from fleet.validate import load_fleet

        local = load_fleet((args.local,)).fleet
        kubeconfigs = kubeconfig_paths(local, {}, ROOT / ".modelplane")
        names = sorted(kubeconfigs)
        runs = []
        for _ in range(args.reads):
            runs.append(measure([str(BIN / "modelplane"), "capacity", "save", "-f", args.local, "-o", "-"]))
        runs.sort()
        seconds, peak, code = runs[len(runs) // 2]
        line("local", f"{len(names)} clusters", "capacity save", seconds, peak, None, "", code)
        read = kube_reader(kubeconfigs)
        for name in names:  # in process: one cluster's four LISTs, without the interpreter's start
            times = []
            for _ in range(args.reads):
                start = time.perf_counter()
                read_capacity(local, read, clusters=[name])
                times.append(time.perf_counter() - start)
            line("local", name, "one cluster's read (in process)", sorted(times)[len(times) // 2], "", None, "")
        start = time.perf_counter()
        read_capacity(local, read)
        line("local", f"{len(names)} clusters", "all, in parallel (in process)", time.perf_counter() - start, "",
             None, "")


if __name__ == "__main__":
    main()
