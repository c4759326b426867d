"""The portal at fleet scale: write latency, reads during writes, and the page, at 500 clusters x N deployments.

The fleet (plan_bench's generator) is stored straight into the portal's database and planned once, as if it had
been accepted over time; then a real portal (`modelplane serve --no-apply`, its own process, SQLite) answers:
- writes: PUT of one existing ModelDeployment with 1 to 5 replicas, one after another (each is validated,
  stored, quota-checked, placed and schema-checked before it is acknowledged); the first after start-up is
  shown on its own;
- reads: a team's ModelDeployments listed in a loop, alone, while the writes run back to back, and while
  as many writes come 5 a second;
- how long after the last write the background replan has planned the fleet (no reservation pending);
- the page: GET / for a team and for the platform admin, first page.
Prints figures; asserts nothing.

    .venv/bin/python benchmarks/portal_scale.py                    # 2,000 deployments on 500 clusters
    .venv/bin/python benchmarks/portal_scale.py --deployments 200
    .venv/bin/python benchmarks/portal_scale.py --memory-writes 10000   # memory every 1,000 writes
"""

from __future__ import annotations

import argparse
import copy
import http.client
import subprocess
import sys
import tempfile
import threading
import time
import urllib.parse
from contextlib import contextmanager
from pathlib import Path
from typing import Iterator

import httpx

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from automation.portal.service import replan  # noqa: E402
from automation.portal.store import Store  # noqa: E402
from benchmarks.plan_bench import generate  # noqa: E402
from benchmarks.portal_load import percentile, run_for  # noqa: E402
from tests.portal_server import ADMIN, API, free_port, start_process  # noqa: E402

TEAM = "team-0"
TOKENS = [{"name": "platform", "token": ADMIN, "admin": True},
          {"name": TEAM, "token": "team-0-token-0001", "namespaces": [TEAM]}]


def seed(folder: Path, objects: list[dict]) -> float:
    """Store every object and plan once; seconds taken."""
    (folder / "data").mkdir(mode=0o700, parents=True)
    store = Store(f"sqlite:///{(folder / 'data' / 'portal.db').resolve()}")
    started = time.perf_counter()
    with store.write() as conn:
        for obj in objects:
            namespace = obj["metadata"].get("namespace", "")
            store.put(conn, obj["kind"], namespace, copy.deepcopy(obj), None)
        replan(store, conn, False)
    return time.perf_counter() - started


def reader(url: str, token: str, stop: threading.Event, out: list[float]) -> None:
    """One client listing the team's ModelDeployments on one kept-alive connection, reading each whole answer, plain
    (as curl asks by default).

    The standard library's client, not httpx: the readers share this process's interpreter and this machine's
    cores with the portal, and httpx (which also asked for gzip and unzipped each answer, in Python) took 2.1 ms of
    CPU per 1 MB list (fleet_gen's team) against the portal's 0.7 ms to serve it, so 20 httpx readers measured
    themselves (p50 36 ms, where these readers see 10-13 ms of the same portal). Plain, not gzip: unzipping a
    megabyte per answer in this one process needs more CPU than the portal spends (asking for gzip, the readers
    took 1.1 cores and the portal 0.6, p50 21 ms); kubectl unzips in processes of its own."""
    address = urllib.parse.urlsplit(url)
    connection = http.client.HTTPConnection(address.hostname, address.port, timeout=120)
    headers = {"Authorization": f"Bearer {token}"}
    try:
        while not stop.is_set():
            started = time.perf_counter()
            connection.request("GET", f"{API}/namespaces/{TEAM}/modeldeployments", headers=headers)
            response = connection.getresponse()
            body = response.read()
            if response.status != 200 or not body.startswith(b"{"):
                raise RuntimeError(f"list answered {response.status}")
            out.append(time.perf_counter() - started)
    finally:
        connection.close()


def reads_for(url: str, token: str, seconds: float) -> list[float]:
    stop, out = threading.Event(), []
    thread = threading.Thread(target=reader, args=(url, token, stop, out))
    thread.start()
    time.sleep(seconds)
    stop.set()
    thread.join()
    return out


def measure(deployments: int, clusters: int, writes: int) -> dict:
    """Figures of one portal run: seconds (lists of seconds for writes and reads)."""
    objects = generate(deployments, clusters)
    mine = [o for o in objects if o["kind"] == "ModelDeployment" and o["metadata"]["namespace"] == TEAM]
    with tempfile.TemporaryDirectory() as name:
        folder = Path(name)
        seeded = seed(folder, objects)
        port = free_port()
        process = start_process(folder, port, ["--no-apply"], tokens=TOKENS)
        url = f"http://127.0.0.1:{port}"
        try:
            quiet = reads_for(url, TOKENS[1]["token"], 3)
            with httpx.Client(base_url=url, headers={"Authorization": f"Bearer {ADMIN}"}, timeout=300) as admin:
                timed, during = writes_with_reads(admin, url, mine, range(writes + 1), None)
                caught_up(folder)
                paced, during_paced = writes_with_reads(admin, url, mine, range(writes + 1, 2 * writes + 1), PACE)
            settled = caught_up(folder)
            pages = {}
            for who, token in (("team", TOKENS[1]["token"]), ("admin", ADMIN)):
                with httpx.Client(base_url=url, headers={"Authorization": f"Bearer {token}"}, timeout=120) as c:
                    c.get("/").raise_for_status()
                    started = time.perf_counter()
                    c.get("/").raise_for_status()
                    pages[who] = time.perf_counter() - started
        finally:
            process.terminate()
            process.wait(30)
    return {"seeded": seeded, "first_write": timed[0], "writes": timed[1:], "quiet": quiet, "during": during,
            "during_paced": during_paced, "paced_writes": paced, "pages": pages, "settled": settled}


def rss_mb(pid: int) -> float:
    """Resident memory of a process, MB (from /proc)."""
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    return 0.0


def readers_for(url: str, count: int, seconds: float) -> list[float]:
    """`count` clients listing the team's ModelDeployments in a loop for `seconds`: every read's seconds."""
    stop, out = threading.Event(), []
    run_for([threading.Thread(target=reader, args=(url, TOKENS[1]["token"], stop, out)) for _ in range(count)],
            seconds, stop)
    return out


def write_one(admin: httpx.Client, mine: list[dict], i: int) -> None:
    """The i-th write: PUT of one of the team's deployments with 1 to 5 replicas (within the schema's 10)."""
    body = copy.deepcopy(mine[i % len(mine)])
    body["spec"]["replicas"] = 1 + i % 5
    admin.put(f"{API}/namespaces/{TEAM}/modeldeployments/{body['metadata']['name']}", json=body).raise_for_status()


def descendants(pid: int) -> list[int]:
    """The processes `pid` started, and theirs: the portal's writer (automation/portal/writer.py, with the ledger and
    the background replanner), the writer's replan worker, multiprocessing's resource tracker."""
    found = []
    for task in Path(f"/proc/{pid}/task").iterdir():
        for child in (task / "children").read_text().split():
            found += [int(child), *descendants(int(child))]
    return found


def memory_curve(url: str, folder: Path, pid: int, mine: list[dict], writes: int) -> dict[str, list[tuple[int, float]]]:
    """Resident memory of the portal (the process that serves) and of its workers together (the writer and its
    replan worker), MB, after 200 warm-up writes and then every tenth of `writes` more, each once the background
    replan has caught up: (writes so far, MB) per sample."""
    curve: dict[str, list[tuple[int, float]]] = {"portal": [], "workers": []}
    with httpx.Client(base_url=url, headers={"Authorization": f"Bearer {ADMIN}"}, timeout=300) as admin:
        def sample(done: int) -> None:
            caught_up(folder)
            curve["portal"].append((done, rss_mb(pid)))
            curve["workers"].append((done, sum(rss_mb(child) for child in descendants(pid))))

        step = max(1, writes // 10)
        for i in range(200 + writes):
            write_one(admin, mine, i)
            if i + 1 >= 200 and (i + 1 - 200) % step == 0:
                sample(i + 1 - 200)
    return curve


def writer(url: str, mine: list[dict], offset: int, stop: threading.Event, out: list[float]) -> None:
    with httpx.Client(base_url=url, headers={"Authorization": f"Bearer {ADMIN}"}, timeout=300) as admin:
        i = offset
        while not stop.is_set():
            started = time.perf_counter()
            write_one(admin, mine, i)
            out.append(time.perf_counter() - started)
            i += 7


@contextmanager
def serving(objects: list[dict]) -> Iterator[tuple[str, Path, subprocess.Popen, list[dict]]]:
    """`modelplane serve --no-apply` on the objects stored and planned: its URL, folder, process, and team-0's
    ModelDeployments."""
    mine = [o for o in objects if o["kind"] == "ModelDeployment" and o["metadata"]["namespace"] == TEAM]
    with tempfile.TemporaryDirectory() as name:
        folder = Path(name)
        seed(folder, objects)
        port = free_port()
        process = start_process(folder, port, ["--no-apply"], tokens=TOKENS)
        try:
            yield f"http://127.0.0.1:{port}", folder, process, mine
        finally:
            process.terminate()
            process.wait(30)


def concurrency(objects: list[dict], readers: int, writers: int, seconds: float, memory_writes: int,
                elsewhere: bool = False) -> dict:
    """Reads by `readers` clients alone, then while `writers` clients write back to back; then the portal's
    resident memory and its replan worker's over `memory_writes` more writes (memory_curve).

    `elsewhere`: also read while the same writers write to a second portal of the same fleet, which shares
    nothing with the one read but this machine's CPUs (its process, writer, replan worker, and the writing
    clients): how much of the slowdown under writes is the machine's, not the portal's."""
    def warm(target: str) -> None:
        """A portal's first writes load its ledger and its writer's imports: made before either write phase."""
        with httpx.Client(base_url=target, headers={"Authorization": f"Bearer {ADMIN}"}, timeout=300) as admin:
            for i in range(writers):
                write_one(admin, mine, i)

    def during_writes(url: str, mine: list[dict], target: str) -> tuple[list[float], list[float]]:
        stop, writes = threading.Event(), []
        threads = [threading.Thread(target=writer, args=(target, mine, w, stop, writes)) for w in range(writers)]
        for thread in threads:
            thread.start()
        reads = readers_for(url, readers, seconds)
        stop.set()
        for thread in threads:
            thread.join()
        return reads, writes

    with serving(objects) as (url, folder, process, mine):
        readers_for(url, readers, 2)  # warm-up: first reads fill caches
        quiet = readers_for(url, readers, seconds)
        found: dict = {"quiet": quiet}
        if elsewhere:
            with serving(objects) as (other, _, _, _):
                warm(other)
                found["elsewhere"], _ = during_writes(url, mine, other)
        warm(url)
        found["during"], found["writes"] = during_writes(url, mine, url)
        found["memory"] = memory_curve(url, folder, process.pid, mine, memory_writes) if memory_writes else {}
    return found


PACE = 5.0  # writes a second for the paced phase: a busy team's rate, not a load generator's


def writes_with_reads(admin: httpx.Client, url: str, mine: list[dict], numbers: range,
                      pace: float | None) -> tuple[list[float], list[float]]:
    """PUT one deployment after another (`pace` a second, else back to back) while a team's list is read in a
    loop; the seconds of each write and of each read."""
    stop, reads, timed = threading.Event(), [], []
    thread = threading.Thread(target=reader, args=(url, TOKENS[1]["token"], stop, reads))
    thread.start()
    for i in numbers:
        started = time.perf_counter()
        write_one(admin, mine, i)
        timed.append(time.perf_counter() - started)
        if pace:
            time.sleep(max(0.0, 1 / pace - timed[-1]))
    stop.set()
    thread.join()
    return timed, reads


def caught_up(folder: Path, limit: float = 300.0) -> float:
    """Seconds until the background replan has planned the fleet after the last write (no row is pending)."""
    store = Store(f"sqlite:///{(folder / 'data' / 'portal.db').resolve()}")
    started = time.perf_counter()
    while time.perf_counter() - started < limit:
        with store.read() as conn:
            if not store.pending_marker(conn)[0]:
                break
        time.sleep(0.05)
    return time.perf_counter() - started


def print_memory(deployments: int, clusters: int, writes: int, generator: str = "plan_bench") -> None:
    from benchmarks.fleet_gen import realistic

    objects = {"plan_bench": generate, "fleet_gen": realistic}[generator](deployments, clusters)
    with serving(objects) as (url, folder, process, mine):
        curve = memory_curve(url, folder, process.pid, mine, writes)
    print(f"{deployments} deployments on {clusters} clusters: resident memory (MB) after 200 warm-up writes and then")
    print(f"{'writes':>8} {'portal':>8} {'workers':>8}")
    for (done, portal), (_, worker) in zip(curve["portal"], curve["workers"]):
        print(f"{done:>8} {portal:8.0f} {worker:8.0f}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--deployments", type=int, default=2000)
    parser.add_argument("--clusters", type=int, default=500)
    parser.add_argument("--writes", type=int, default=20)
    parser.add_argument("--generator", choices=["plan_bench", "fleet_gen"], default="plan_bench",
                        help="the fleet's generator (with --memory-writes)")
    parser.add_argument("--memory-writes", type=int, default=0,
                        help="instead: the portal's and its replan worker's memory over this many writes")
    args = parser.parse_args()
    if args.memory_writes:
        print_memory(args.deployments, args.clusters, args.memory_writes, args.generator)
        return
    f = measure(args.deployments, args.clusters, args.writes)
    rest = f["writes"]
    print(f"{args.deployments} deployments on {args.clusters} clusters (stored and planned in {f['seeded']:.1f} s)")
    print(f"first write after start-up  {f['first_write'] * 1000:8.0f} ms")
    print(f"writes (n={len(rest)})            p50 {percentile(rest, .5) * 1000:6.0f} ms  "
          f"p99 {percentile(rest, .99) * 1000:6.0f} ms   target: p50 < 100 ms")
    for name, key in (("reads alone", "quiet"), ("reads during writes", "during"),
                      (f"reads during {PACE:.0f} writes/s", "during_paced")):
        print(f"{name:<27} p50 {percentile(f[key], .5) * 1000:6.1f} ms  p99 {percentile(f[key], .99) * 1000:6.1f} ms")
    print(f"background replan after the last write {f['settled']:6.1f} s")
    for who, seconds in f["pages"].items():
        print(f"page, {who:<5}                {seconds * 1000:8.0f} ms   target: < 500 ms")


if __name__ == "__main__":
    main()
