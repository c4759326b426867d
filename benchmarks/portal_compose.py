"""CPU of composing a team's list again after a write, in the portal's own process, at fleet scale.

The fleet (either generator) is stored and planned straight into a portal database; a portal app is built in this
process (no HTTP, no writer process), the background replan held back so that every write stays pending (the case
between two replans, most writes), and then `--writes` times: one of team-0's ModelDeployments is written (PUT,
in-process) and team-0's list composed, the composing thread's CPU time measured (`time.thread_time`). The first
`--warm-up` writes are not counted. Prints the first and the median composition; asserts nothing.

    .venv/bin/python benchmarks/portal_compose.py                          # fleet_gen, 2,000 x 500
    .venv/bin/python benchmarks/portal_compose.py --generator plan_bench
"""

from __future__ import annotations

import argparse
import copy
import json
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from automation.portal.app import create_app  # noqa: E402
from automation.portal.auth import TokensFile  # noqa: E402
from automation.portal.store import Store  # noqa: E402
from benchmarks.fleet_scale import GENERATORS  # noqa: E402
from benchmarks.portal_scale import TEAM, TOKENS, seed  # noqa: E402
from tests.portal_server import write_tokens  # noqa: E402


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--generator", choices=sorted(GENERATORS), default="fleet_gen")
    parser.add_argument("--deployments", type=int, default=2000)
    parser.add_argument("--clusters", type=int, default=500)
    parser.add_argument("--writes", type=int, default=60)
    parser.add_argument("--warm-up", type=int, default=20)
    args = parser.parse_args()
    objects = GENERATORS[args.generator](args.deployments, args.clusters)
    mine = [o for o in objects if o["kind"] == "ModelDeployment" and o["metadata"]["namespace"] == TEAM]
    with tempfile.TemporaryDirectory() as name:
        folder = Path(name)
        seed(folder, objects)
        store = Store(f"sqlite:///{(folder / 'data' / 'portal.db').resolve()}")
        app = create_app(store, TokensFile(write_tokens(folder, TOKENS)), False)
        portal = app.state.portal
        app.state.replanner._gather = 10_000.0  # no background replan while measuring: the writes stay pending
        portal.reads._listed_now("ModelDeployment", TEAM, None)
        seconds = []
        for i in range(args.writes):
            body = copy.deepcopy(mine[i % len(mine)])
            body["spec"]["replicas"] = 1 + i % 5
            portal.writes.put("ModelDeployment", TEAM, body["metadata"]["name"], json.dumps(body).encode())
            started = time.thread_time()
            portal.reads._listed_now("ModelDeployment", TEAM, None)
            seconds.append(time.thread_time() - started)
    counted = sorted(seconds[args.warm_up:])
    print(f"{args.generator} {args.deployments}x{args.clusters}: {TEAM}'s list of {len(mine)} deployments composed "
          f"after each write, CPU ms: first {seconds[0] * 1000:.2f}, median of {len(counted)} "
          f"{counted[len(counted) // 2] * 1000:.2f}")


if __name__ == "__main__":
    main()
