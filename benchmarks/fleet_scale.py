"""Every command at fleet scale, as a user runs it: wall time and peak memory, each against its floor.

Each figure is one `modelplane` command run in a subprocess on a generated fleet (plan_bench's generator:
500 clusters x 4 pools, N deployments), so interpreter start-up and imports count, as they do for users.
The floor, `plan`, a warm `plan --against` and `render` are each run three times and their median run shown.
The floor of `plan` is parsing the same manifests with PyYAML's C loader in a fresh interpreter; the floor
of `plan --against` (one deployment changed; measured first with no cached base, then as every later pull
request against the same base runs it) and of `render` is `plan`. Then the portal (benchmarks/portal_scale.py:
write latency, reads alone and during writes, the page) and, last, `plan`'s peak memory at 10,000 deployments.
`--out-dir` puts render's output elsewhere (e.g. /dev/shm, to take a slow disk out of the figure).
Prints one table; asserts nothing.

    .venv/bin/python benchmarks/fleet_scale.py                      # 200 and 2,000 deployments
    .venv/bin/python benchmarks/fleet_scale.py --deployments 2000   # one size
"""

from __future__ import annotations

import argparse
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import yaml

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from benchmarks.plan_bench import generate  # noqa: E402

BIN = Path(sys.executable).parent
PARSE = ("import sys, yaml\n"
         "list(yaml.load_all(open(sys.argv[1]).read(), Loader=getattr(yaml, 'CSafeLoader', yaml.SafeLoader)))\n")


def measure(argv: list[str], env: dict[str, str] | None = None) -> tuple[float, float, int]:
    """(seconds, peak resident MB, exit code) of one command."""
    start = time.perf_counter()
    process = subprocess.Popen(argv, cwd=ROOT, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                               env={**os.environ, **(env or {})})
    _, status, usage = os.wait4(process.pid, 0)
    process.returncode = os.waitstatus_to_exitcode(status)
    return time.perf_counter() - start, usage.ru_maxrss / 1024, process.returncode


RUNS = 3  # the quick commands are run this many times and their median run is shown: one run moves by 10-30% here


def median(argv: list[str], env: dict[str, str] | None = None, before=None) -> tuple[float, float, int]:
    """The median run of `measure`; `before()` is called before each run (e.g. to remove render's output)."""
    runs = []
    for _ in range(RUNS):
        if before is not None:
            before()
        runs.append(measure(argv, env))
    return sorted(runs)[RUNS // 2]


def rows(deployments: int, clusters: int, folder: Path, preview: bool, out_dir: Path) -> list[tuple]:
    objects = generate(deployments, clusters)
    head, base = folder / "head.yaml", folder / "base.yaml"
    base.write_text(yaml.safe_dump_all(objects, sort_keys=False))
    changed = next(o for o in objects if o["kind"] == "ModelDeployment")
    changed["spec"]["replicas"] = changed["spec"].get("replicas", 1) + 1  # one deployment gains a replica
    head.write_text(yaml.safe_dump_all(objects, sort_keys=False))
    cli = [str(BIN / "modelplane")]
    parse = median([sys.executable, "-c", PARSE, str(head)])
    plan = median([*cli, "plan", "-f", str(head), "-o", "json", "--fresh"])
    # the first comparison against a base plans it in full and caches its summary; later ones (every other pull
    # request against the same base) read it back and compose only the changed stacks
    cache = {"MODELPLANE_CACHE_DIR": str(folder / "cache")}
    against_argv = [*cli, "plan", "-f", str(head), "--against", str(base), "-o", "json", "--fresh"]
    against_cold = measure(against_argv, cache)
    against = median(against_argv, cache)
    rendered = out_dir / "render"
    render = median([*cli, "render", "-f", str(head), "--out", str(rendered), "--fresh"],
                    before=lambda: shutil.rmtree(rendered, ignore_errors=True))  # a new folder each time
    export = measure([*cli, "operator", "export", "-f", str(head), "--out", str(folder / "operator"), "--fresh",
                      "--backend", "s3://bucket/fleet", "--git-url", "https://github.com/acme/fleet"])
    out = [("parse (C loader)", parse, None, None),
           ("plan -o json", plan, parse, 3.0),
           ("plan --against, first", against_cold, plan, None),
           ("plan --against (1 change)", against, plan, 1.5),
           ("render --out", render, plan, 3.0),
           ("operator export", export, None, None)]
    if preview:
        full = measure([*cli, "preview", "--offline", "-f", str(head), "-o", "json"])
        out.append(("preview --offline", full, None, None))
        out.append(("preview --changed-against", measure([*cli, "preview", "--offline", "-f", str(head),
                                                          "--changed-against", str(base), "-o", "json"], cache),
                    full, None))
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--deployments", type=int, action="append")
    parser.add_argument("--clusters", type=int, default=500)
    parser.add_argument("--preview-up-to", type=int, default=200,
                        help="run preview --offline only for fleets up to this many deployments (minutes beyond)")
    parser.add_argument("--out-dir", default=None, help="where render writes (default: a temporary folder)")
    parser.add_argument("--portal-writes", type=int, default=12,
                        help="writes timed against a real portal per fleet size (0: skip the portal)")
    parser.add_argument("--memory-deployments", type=int, default=10000,
                        help="also measure plan's peak memory at this many deployments (0: skip)")
    args = parser.parse_args()
    print(f"{os.cpu_count()} CPUs; python {sys.version.split()[0]}")
    print(f"{'deployments':>11} {'command':<27} {'seconds':>8} {'peak MB':>8} {'floor s':>8} {'ratio':>6} "
          f"{'target':>7} {'exit':>4}")
    for deployments in args.deployments or [200, 2000]:
        with tempfile.TemporaryDirectory() as folder:
            out_dir = Path(tempfile.mkdtemp(dir=args.out_dir)) if args.out_dir else Path(folder)
            for name, (seconds, peak, code), floor, target in rows(deployments, args.clusters, Path(folder),
                                                                   deployments <= args.preview_up_to, out_dir):
                ratio = f"{seconds / floor[0]:6.1f}" if floor else f"{'':>6}"
                print(f"{deployments:>11} {name:<27} {seconds:8.2f} {peak:8.0f} "
                      f"{(f'{floor[0]:8.2f}' if floor else ''):>8} {ratio} "
                      f"{(f'<={target}x' if target else ''):>7} {code:>4}")
            if args.out_dir:
                shutil.rmtree(out_dir, ignore_errors=True)
    if args.portal_writes:
        from benchmarks.portal_load import percentile
        from benchmarks.portal_scale import measure as portal

        for deployments in args.deployments or [200, 2000]:
            f = portal(deployments, args.clusters, args.portal_writes)
            quiet, during = percentile(f["quiet"], .5), percentile(f["during"], .5)
            for name, seconds, floor, target in (
                    ("portal write p50", percentile(f["writes"], .5), None, "<0.1s"),
                    ("portal write p99", percentile(f["writes"], .99), None, ""),
                    ("portal replan after writes", f["settled"], None, ""),
                    ("portal read p50, alone", quiet, None, ""),
                    ("portal read p50, writing", during, quiet, "~1x"),
                    ("portal read p50, 5 writes/s", percentile(f["during_paced"], .5), quiet, "~1x"),
                    ("portal page (admin)", f["pages"]["admin"], None, "<0.5s")):
                ratio = f"{seconds / floor:6.1f}" if floor else f"{'':>6}"
                print(f"{deployments:>11} {name:<27} {seconds:8.3f} {'':>8} "  # milliseconds matter here
                      f"{(f'{floor:8.3f}' if floor else ''):>8} {ratio} {target:>7} {0:>4}")
    if args.memory_deployments:
        with tempfile.TemporaryDirectory() as folder:
            fleet = Path(folder) / "fleet.yaml"
            fleet.write_text(yaml.safe_dump_all(generate(args.memory_deployments, args.clusters), sort_keys=False))
            seconds, peak, code = measure([str(BIN / "modelplane"), "plan", "-f", str(fleet), "-o", "json", "--fresh"])
            print(f"{args.memory_deployments:>11} {'plan -o json':<27} {seconds:8.2f} {peak:8.0f} {'':>8} {'':>6} "
                  f"{'<1200MB':>7} {code:>4}")


if __name__ == "__main__":
    main()
