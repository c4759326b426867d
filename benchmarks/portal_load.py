"""The portal under load: read latency with and without concurrent writers, write throughput.

A real portal on loopback (`modelplane serve --no-apply` in its own process, SQLite in a temporary folder,
so the load generator does not share its interpreter) with a 20-cluster fleet.
Readers list a namespace's ModelDeployments in a loop; writers PUT ModelDeployments (each is placed in its
request; the fleet is replanned in the background). Prints p50/p99 per phase and the ratio the security model promises (read p50 with 4 writers
within 2x of read-only p50). Asserts nothing. Run: .venv/bin/python benchmarks/portal_load.py
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
import threading
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from tests.manifests import cluster, deployment, gpu_class  # noqa: E402
import httpx  # noqa: E402

from tests.portal_server import ADMIN, API, TEAM_A, TEAM_B, free_port, start_process  # noqa: E402


class Portal:
    """A portal process and clients for it."""

    def __init__(self, folder: Path):
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.process = start_process(folder, self.port, ["--no-apply"])

    def client(self, token: str) -> httpx.Client:
        return httpx.Client(base_url=self.url, headers={"Authorization": f"Bearer {token}"}, timeout=60)

    def close(self) -> None:
        self.process.terminate()
        self.process.wait(10)

    def __enter__(self) -> Portal:
        return self

    def __exit__(self, *_: object) -> None:
        self.close()


def run_for(threads: list[threading.Thread], seconds: float, stop: threading.Event) -> None:
    """Start the threads, let them run for `seconds`, then set `stop` and wait for each."""
    for thread in threads:
        thread.start()
    time.sleep(seconds)
    stop.set()
    for thread in threads:
        thread.join()


def percentile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))]


def seed(portal, clusters: int) -> None:
    with portal.client(ADMIN) as admin:
        admin.put(f"{API}/inferenceclasses/l4", json=gpu_class("l4", 1, "23034Mi")).raise_for_status()
        for i in range(clusters):
            admin.put(f"{API}/inferenceclusters/c{i}", json=cluster(f"c{i}", pools=(("gpu", "l4", 8),))).raise_for_status()
    with portal.client(TEAM_A) as team:
        for i in range(20):
            path = f"{API}/namespaces/team-a/modeldeployments/seed{i}"
            team.put(path, json=deployment(f"seed{i}", namespace="team-a")).raise_for_status()


def phase(portal, seconds: float, readers: int, writers: int) -> dict:
    stop = threading.Event()
    reads: list[float] = []
    writes: list[float] = []
    busy = [0]
    lock = threading.Lock()

    def reader():
        with portal.client(TEAM_A) as client:
            while not stop.is_set():
                started = time.perf_counter()
                client.get(f"{API}/namespaces/team-a/modeldeployments").raise_for_status()
                with lock:
                    reads.append(time.perf_counter() - started)

    def writer(index: int):
        with portal.client(TEAM_B) as client:
            n = 0
            while not stop.is_set():
                n += 1
                name = f"w{index}-{n % 25}"
                started = time.perf_counter()
                response = client.put(f"{API}/namespaces/team-b/modeldeployments/{name}",
                                      json=deployment(name, namespace="team-b"))
                with lock:
                    if response.status_code in (429, 503):  # shed (queue full or waited too long) or lock busy
                        busy[0] += 1
                    else:
                        response.raise_for_status()
                        writes.append(time.perf_counter() - started)

    threads = [threading.Thread(target=reader) for _ in range(readers)]
    threads += [threading.Thread(target=writer, args=(i,)) for i in range(writers)]
    run_for(threads, seconds, stop)
    return {"reads": reads, "writes": writes, "busy": busy[0], "seconds": seconds}


def show(name: str, result: dict) -> None:
    reads, writes = result["reads"], result["writes"]
    line = f"{name:<28} reads {len(reads) / result['seconds']:7.1f}/s  p50 {percentile(reads, .5) * 1000:6.1f} ms  " \
           f"p99 {percentile(reads, .99) * 1000:6.1f} ms"
    if writes:
        line += f" | writes {len(writes) / result['seconds']:5.1f}/s  p50 {percentile(writes, .5) * 1000:6.1f} ms  " \
                f"p99 {percentile(writes, .99) * 1000:6.1f} ms  shed (429/503) {result['busy']}"
    print(line)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seconds", type=float, default=8)
    parser.add_argument("--clusters", type=int, default=20)
    parser.add_argument("--readers", type=int, default=4)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as folder, Portal(Path(folder)) as portal:
        run(portal, args)


def run(portal: Portal, args) -> None:
    if True:
        seed(portal, args.clusters)
        quiet = phase(portal, args.seconds, args.readers, 0)
        show(f"{args.readers} readers", quiet)
        busy = phase(portal, args.seconds, args.readers, 4)
        show(f"{args.readers} readers + 4 writers", busy)
        only_writes = phase(portal, args.seconds, 0, 4)
        print(f"{'4 writers alone':<28} writes {len(only_writes['writes']) / args.seconds:5.1f}/s  "
              f"p50 {percentile(only_writes['writes'], .5) * 1000:6.1f} ms  shed (429/503) {only_writes['busy']}")
        ratio = statistics.median(busy["reads"]) / statistics.median(quiet["reads"])
        print(f"read p50 with 4 writers / read-only p50: {ratio:.2f}x (target: at most 2x)")


if __name__ == "__main__":
    main()
