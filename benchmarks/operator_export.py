"""`modelplane operator export` at fleet scale: how long each phase takes for 500 clusters x 2,000 deployments.

Uses plan_bench's generated fleet (no services or caches). Prints figures; asserts nothing. The target is
the whole export under 30 s on the development machine. Run: .venv/bin/python benchmarks/operator_export.py
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import time
from pathlib import Path

import yaml

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from automation.operator.export import ExportOptions, export, write  # noqa: E402
from automation.operator.validation import problems  # noqa: E402
from automation.planning.stacks import desired_state  # noqa: E402
from benchmarks.plan_bench import generate  # noqa: E402
from fleet.loader import parse_text  # noqa: E402
from fleet.validate import validate_documents  # noqa: E402


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--deployments", type=int, default=2000)
    parser.add_argument("--clusters", type=int, default=500)
    args = parser.parse_args()
    text = yaml.safe_dump_all(generate(args.deployments, args.clusters), sort_keys=False)
    marks = [("start", time.perf_counter())]
    docs, _ = parse_text(text, "generated.yaml")
    loaded = validate_documents(docs)
    marks.append(("parse + validate", time.perf_counter()))
    desired = desired_state(loaded.fleet)
    marks.append(("plan + render", time.perf_counter()))
    rendered_problems = desired.problems
    marks.append(("check rendered objects", time.perf_counter()))
    files = export(desired, ExportOptions(backend="s3://bucket/fleet", git_url="https://github.com/acme/fleet",
                                          secrets=("cloud",)))
    marks.append(("compose operator objects", time.perf_counter()))
    found = problems(files)
    marks.append(("check operator objects", time.perf_counter()))
    with tempfile.TemporaryDirectory() as out:
        count = write(files, Path(out) / "operator")
    marks.append(("write YAML", time.perf_counter()))
    print(f"{args.clusters} clusters x {args.deployments} deployments: {len(desired.specs)} stacks, "
          f"{len(desired.plan.replicas)} replicas, {count} operator objects "
          f"({len(rendered_problems)} rendered and {len(found)} operator problems)")
    for (_, before), (name, after) in zip(marks, marks[1:]):
        print(f"  {name:<26} {after - before:7.2f} s")
    print(f"  {'total':<26} {marks[-1][1] - marks[0][1]:7.2f} s (target: under 30 s)")


if __name__ == "__main__":
    main()
