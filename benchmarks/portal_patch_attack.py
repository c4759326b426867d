"""Another team's writes while attackers send JSON patches that double an object with each `copy` (issue 65).

A real portal on loopback (`modelplane serve --no-apply` in its own process, with its writer process, SQLite in a
temporary folder) with one cluster. ATTACKERS threads of team-b send, one after the other, a JSON patch of COPIES
copies of `/metadata` into itself (1.4 KB; before the patch budget, 20 of them held the writer 36 s at 2.7 GB),
alternately to a ModelDeployment and to its /scale; meanwhile team-a PUTs its own ModelDeployment in a loop.
Prints team-a's accepted writes with their p50/p99 latency and what else it got, and the attackers' answers.
Asserts nothing. Run: .venv/bin/python benchmarks/portal_patch_attack.py [--seconds 60]
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
import threading
import time
from collections import Counter
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from benchmarks.portal_load import Portal, percentile, run_for  # noqa: E402
from tests.manifests import deployment  # noqa: E402
from tests.portal_server import ADMIN, API, TEAM_A, TEAM_B, seed_one_cluster  # noqa: E402

JSON_PATCH = {"Content-Type": "application/json-patch+json"}


def attack(portal: Portal, seconds: float, attackers: int, copies: int) -> tuple[list[float], Counter, Counter]:
    stop = threading.Event()
    accepted: list[float] = []
    others: Counter = Counter()  # team-a's answers that were not a success
    answers: Counter = Counter()  # the attackers'
    lock = threading.Lock()
    patch = json.dumps([{"op": "copy", "from": "/metadata", "path": f"/metadata/c{i}"} for i in range(copies)])

    def attacker(index: int) -> None:
        target = f"{API}/namespaces/team-b/modeldeployments/target"
        with portal.client(TEAM_B) as client:
            n = 0
            while not stop.is_set():
                n += 1
                try:
                    code = client.patch(target + ("/scale" if n % 2 else ""), content=patch, headers=JSON_PATCH,
                                        timeout=120).status_code
                except Exception as exc:  # a timeout is an answer too
                    code = type(exc).__name__
                with lock:
                    answers[code] += 1

    def victim() -> None:
        with portal.client(TEAM_A) as client:
            n = 0
            while not stop.is_set():
                n += 1
                started = time.perf_counter()
                response = client.put(f"{API}/namespaces/team-a/modeldeployments/web",
                                      json=deployment("web", namespace="team-a", replicas=1 + n % 2), timeout=120)
                with lock:
                    if response.status_code in (200, 201):
                        accepted.append(time.perf_counter() - started)
                    else:
                        others[response.status_code] += 1

    threads = [threading.Thread(target=attacker, args=(i,)) for i in range(attackers)]
    threads.append(threading.Thread(target=victim))
    run_for(threads, seconds, stop)
    return accepted, others, answers


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seconds", type=float, default=60)
    parser.add_argument("--attackers", type=int, default=3)
    parser.add_argument("--copies", type=int, default=20)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as folder, Portal(Path(folder)) as portal:
        with portal.client(ADMIN) as admin:
            seed_one_cluster(admin, gpus=8)
        with portal.client(TEAM_B) as team:
            team.put(f"{API}/namespaces/team-b/modeldeployments/target",
                     json=deployment("target", namespace="team-b")).raise_for_status()
        accepted, others, answers = attack(portal, args.seconds, args.attackers, args.copies)
    print(f"{args.attackers} attackers, {args.copies} copies each patch, {args.seconds:g} s")
    if accepted:
        print(f"team-a: {len(accepted)} writes accepted, p50 {percentile(accepted, .5) * 1000:.1f} ms, "
              f"p99 {percentile(accepted, .99) * 1000:.1f} ms, max {max(accepted) * 1000:.1f} ms; "
              f"not accepted: {dict(others) or 'none'}")
    else:
        print(f"team-a: 0 writes accepted; answers: {dict(others)}")
    print(f"attackers' answers: {dict(sorted(answers.items(), key=str))}")


if __name__ == "__main__":
    main()
