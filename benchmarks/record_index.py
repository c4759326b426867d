"""`modelplane plan` at fleet scale against a bucket-like backend: the record read through the index
(automation/record/index.py) against today's read (`stack ls`, which loads every checkpoint, then `stack output`
per stack the cache lacks).

The backend is a file:// folder of synthetic checkpoints in the DIY layout, one per stack of the generated fleet
(platform-<cluster> with --platform-kb of padding resources, as a platform stack's CRDs; model, team, endpoints and
gateway stacks with --other-kb), each with a `modelplane` record output and a succeeded update in its history. The
Pulumi CLI is the double (tests/pulumi_double.py), which loads a checkpoint as the DIY backend does; the bucket is
a latency shim: every request (a listing, an object read, the index's get and put) waits --latency seconds plus its
bytes at --bandwidth bytes/s, in the double (PULUMI_DOUBLE_LATENCY, PULUMI_DOUBLE_BANDWIDTH) and in the index's
store alike. The synthetic record has no placements and its fingerprints match nothing, so `plan` places every
replica as new either way: the rows differ only by the record read.

Each row is `modelplane plan -f <fleet> -o json` in a fresh process, timed from outside:
  fresh           `plan --fresh`: no record read at all (the floor)
  today cold      today's read, no local cache (a CI clone)
  today warm      today's read, the cache of the run before (`stack ls` still loads every checkpoint)
  index missing   the index read on a backend an older modelplane wrote: every stack read, the index written
  index cold      the index present, no local cache: one listing per project and the index
  index warm      the index and the local cache: the listings only
  s3 index cold   `index cold` from an S3 API (moto's server on loopback, the folder's objects and index uploaded):
                  obstore's listing and get over HTTP (automation/record/bucket.py), no latency shim
  s3 index warm   the same with the local cache
Asserts nothing.

    nice -n 10 .venv/bin/python benchmarks/record_index.py                       # 2,000 x 500
    .venv/bin/python benchmarks/record_index.py --deployments 50 --clusters 20   # a quick look
    .venv/bin/python benchmarks/record_index.py --rows "index cold" "s3 index cold" "s3 index warm"
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import yaml

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from benchmarks.fleet_scale import GENERATORS  # noqa: E402
from tests import pulumi_double  # noqa: E402

CHILD = """
import os, sys, time
sys.path.insert(0, {root!r})
from automation.record import index
latency, bandwidth = float(os.environ["BENCH_LATENCY"]), float(os.environ["BENCH_BANDWIDTH"])
if os.environ.get("BENCH_TODAY"):
    index.CheckpointFolder.of = classmethod(lambda cls, backend: None)
get, put = index.CheckpointFolder.get_index, index.CheckpointFolder.put_index
def wait(size): time.sleep(latency + size / bandwidth)
index.CheckpointFolder.request = lambda self: wait(0)
def get_index(self, fleet):
    path = self._index_path(fleet)
    time.sleep(path.stat().st_size / bandwidth if path.exists() else 0)
    return get(self, fleet)
index.CheckpointFolder.get_index = get_index
from automation.cli import main
sys.exit(main(sys.argv[1:]))
"""


def stacks_of(docs: list[dict]) -> dict[str, str]:
    """stack -> project, for the fleet's clusters, deployments and namespaces (a team stack per namespace and
    cluster its deployments name; every cluster when they name none)."""
    clusters = [d["metadata"]["name"] for d in docs if d.get("kind") == "InferenceCluster"]
    out = {f"platform-{c}": "modelplane" for c in clusters}
    out["gateway"] = "modelplane"
    for d in docs:
        if d.get("kind") == "ModelDeployment":
            ns = d["metadata"].get("namespace", "default")
            out[f"model-{ns}.{d['metadata']['name']}"] = "modelplane-workloads"
            out[f"endpoints-{ns}"] = "modelplane-workloads"
    deployments = [d for d in docs if d.get("kind") == "ModelDeployment"]
    for i, d in enumerate(deployments):  # a team namespace on the cluster its first replica lands on, roughly
        out[f"team-{d['metadata'].get('namespace', 'default')}.{clusters[i % len(clusters)]}"] = "modelplane-workloads"
    return out


def seed_index(backend: Path, url: str | None = None) -> None:
    """The index a previous read wrote, built from the listing and the outputs written (what `index missing`
    writes, without reading every stack through the CLI first, which takes hours at 2,000 x 500 here); in the
    store of `url` (the folder by default), with that store's stamps."""
    from automation.projects import LEGACY_PLATFORM_PROJECT, PROJECTS
    from automation.record.backend import checkpoint_store

    store = checkpoint_store(url or f"file://{backend}")
    assert store is not None
    wanted = {}
    for project in (*PROJECTS, LEGACY_PLATFORM_PROJECT):
        for listed in store.list(project):
            content = json.loads((backend / ".pulumi" / "stacks" / project / f"{listed.stack}.json").read_text())
            root = content["checkpoint"]["latest"]["resources"][0]
            wanted[listed.key] = {"stamp": listed.stamp, "lastUpdate": content["history"][-1]["endTime"],
                                  "outputs": root["outputs"]}
    store.put_index(None, wanted)


def write_backend(folder: Path, stacks: dict[str, str], platform_kb: int, other_kb: int) -> int:
    """The DIY layout the double reads; returns the bytes written."""
    meta = folder / ".pulumi"
    meta.mkdir(parents=True)
    (meta / "meta.yaml").write_text("version: 1\n")
    now = time.time()
    when = time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(now))
    total = 0
    for i, (name, project) in enumerate(sorted(stacks.items())):
        pad_kb = platform_kb if name.startswith("platform-") else other_kb
        urn = f"urn:pulumi:{name}::{project}::"
        resources = [{"urn": f"{urn}pulumi:pulumi:Stack::{project}-{name}", "type": "pulumi:pulumi:Stack",
                      "custom": False, "inputs": {},
                      "outputs": {"modelplane": {"fingerprint": f"synthetic-{i}", "placements": [], "versions": {}},
                                  **({"gatewayAddress": f"10.0.{i // 250}.{i % 250}"}
                                     if name.startswith("platform-") else {})}}]
        blob = "x" * 1000
        for j in range(pad_kb):
            resources.append({"urn": f"{urn}kubernetes:apiextensions.k8s.io/v1:CustomResourceDefinition::crd-{j}",
                              "type": "kubernetes:apiextensions.k8s.io/v1:CustomResourceDefinition", "custom": True,
                              "id": f"crd-{j}", "inputs": {}, "outputs": {"spec": blob}})
        content = {"version": 3, "checkpoint": {"stack": f"organization/{project}/{name}",
                                                "latest": {"manifest": {"time": f"{when}.000Z"},
                                                           "resources": resources}},
                   "history": [{"version": 0, "kind": "update", "startTime": f"{when}.000Z",
                                "endTime": f"{when}.000Z", "result": "succeeded",
                                "resourceChanges": {"create": len(resources)}}]}
        path = meta / "stacks" / project / f"{name}.json"
        path.parent.mkdir(parents=True, exist_ok=True)
        text = json.dumps(content)
        path.write_text(text)
        total += len(text)
    return total


def s3_backend(backend: Path) -> tuple[str, object]:
    """An S3 API on loopback holding the folder backend's objects (checkpoints, meta.yaml, the index), and the URL
    the CLI and the record read open it with. Returns (url, server)."""
    import urllib.request

    import obstore
    from moto.server import ThreadedMotoServer
    from obstore.store import S3Store

    import logging

    logging.getLogger("werkzeug").setLevel(logging.ERROR)  # not a line per request
    server = ThreadedMotoServer(ip_address="127.0.0.1", port=0, verbose=False)
    server.start()
    host, port = server.get_host_and_port()
    urllib.request.urlopen(urllib.request.Request(f"http://{host}:{port}/fleet-state", method="PUT"))
    store = S3Store("fleet-state", prefix="fleet", config={"endpoint": f"http://{host}:{port}", "region": "us-east-1"},
                    client_options={"allow_http": True})
    for path in backend.rglob("*"):
        if path.is_file():
            obstore.put(store, path.relative_to(backend).as_posix(), path.read_bytes())
    return (f"s3://fleet-state/fleet?endpoint={host}:{port}&disableSSL=true&s3ForcePathStyle=true&region=us-east-1",
            server)


def seed_today_cache(work: Path, backend: Path, env: dict[str, str]) -> None:
    """Today's warm cache: every stack's `stack ls` stamp and its outputs, as a previous read left it (built from
    one `stack ls` per project without the bucket's latency, not from thousands of `stack output` calls)."""
    from automation.projects import LEGACY_PLATFORM_PROJECT, PROJECTS
    from automation.record.backend import PulumiRecord, ours

    quiet = {k: v for k, v in env.items() if not k.startswith(("PULUMI_DOUBLE_LATENCY", "PULUMI_DOUBLE_BANDWIDTH"))}
    saved = dict(os.environ)
    os.environ.clear()
    os.environ.update(quiet)
    try:
        from pulumi import automation as auto

        record = PulumiRecord(work / ".modelplane", f"file://{backend}")
        record.command = auto.PulumiCommand()
        entries = {}
        for project in (*PROJECTS, LEGACY_PLATFORM_PROJECT):
            for summary in record._workspace(project).list_stacks():
                name = ours(summary.name, None)
                content = json.loads((backend / ".pulumi" / "stacks" / project / f"{summary.name}.json").read_text())
                if name and summary.last_update:
                    entries[name] = {"lastUpdate": summary.last_update.isoformat(),
                                     "outputs": content["checkpoint"]["latest"]["resources"][0]["outputs"]}
        record.cache.save(entries)
    finally:
        os.environ.clear()
        os.environ.update(saved)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--deployments", type=int, default=2000)
    parser.add_argument("--clusters", type=int, default=500)
    parser.add_argument("--generator", choices=sorted(GENERATORS), default="plan_bench")
    parser.add_argument("--platform-kb", type=int, default=300)
    parser.add_argument("--other-kb", type=int, default=8)
    parser.add_argument("--latency", type=float, default=0.02, help="seconds per bucket request")
    parser.add_argument("--bandwidth", type=float, default=100e6, help="bytes/s of one request's body")
    parser.add_argument("--rows", nargs="*", default=["fresh", "index cold", "index warm", "today warm"],
                        help="also: 'index missing', 'today cold' (every stack through the CLI: slow)")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="record-index-") as tmp:
        folder = Path(tmp)
        docs = GENERATORS[args.generator](args.deployments, args.clusters)
        fleet = folder / "fleet.yaml"
        fleet.write_text(yaml.safe_dump_all(docs, sort_keys=False))
        stacks = stacks_of(docs)
        backend = folder / "backend"
        size = write_backend(backend, stacks, args.platform_kb, args.other_kb)
        bin_dir = pulumi_double.install(folder)
        env = {**os.environ, "PATH": f"{bin_dir}{os.pathsep}{os.environ['PATH']}",
               "PULUMI_DOUBLE_DIR": str(folder / "double"), "PULUMI_CONFIG_PASSPHRASE": "bench",
               "PULUMI_BACKEND_URL": f"file://{backend}", "BENCH_LATENCY": str(args.latency),
               "BENCH_BANDWIDTH": str(args.bandwidth), "PULUMI_DOUBLE_LATENCY": str(args.latency),
               "PULUMI_DOUBLE_BANDWIDTH": str(args.bandwidth), "PYTHONPATH": str(ROOT)}
        print(f"{args.generator} {args.deployments} x {args.clusters}: {len(stacks)} stacks, "
              f"{size / 1e6:.0f} MB of checkpoints; bucket {args.latency * 1000:.0f} ms + "
              f"{args.bandwidth / 1e6:.0f} MB/s per request")
        child = CHILD.format(root=str(ROOT))
        s3_url = None
        for row in args.rows:
            if row.startswith("s3") and s3_url is None:
                os.environ.update(AWS_ACCESS_KEY_ID="bench", AWS_SECRET_ACCESS_KEY="bench")
                s3_url, _server = s3_backend(backend)
                seed_index(backend, s3_url)  # the bucket's stamps (ETags), not the folder's
                env.update(PULUMI_BACKEND_URL=s3_url, AWS_ACCESS_KEY_ID="bench", AWS_SECRET_ACCESS_KEY="bench",
                           BENCH_LATENCY="0")
                print("(the backend and its index uploaded to an S3 API on loopback)")
            work = folder / ("today" if row.startswith("today") else "s3" if row.startswith("s3") else "index")
            work.mkdir(exist_ok=True)
            run_env = {**env, **({"BENCH_TODAY": "1"} if row.startswith("today") else {})}
            if row.endswith("cold") or row == "index missing":
                (work / ".modelplane").mkdir(parents=True, exist_ok=True)
                for name in ("record.json", "record.journal"):
                    (work / ".modelplane" / name).unlink(missing_ok=True)
            if row == "index missing":
                for path in (backend / ".modelplane").rglob("*.json"):
                    path.unlink()
            if row == "today warm" and not (work / ".modelplane" / "record.json").exists():
                seed_today_cache(work, backend, env)
                print("(today's cache seeded from one `stack ls` per project and the synthetic outputs)")
            if row == "index cold" and not (backend / ".modelplane" / "index" / "_.json").exists():
                seed_index(backend)
                print("(index seeded from the synthetic outputs)")
            argv = ["plan", "-f", str(fleet), "-o", "json", *(["--fresh"] if row == "fresh" else [])]
            calls = len(pulumi_double.calls(folder / "double"))
            start = time.perf_counter()
            done = subprocess.run([sys.executable, "-c", child, *argv], cwd=work, env=run_env,
                                  stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
            took = time.perf_counter() - start
            made = len(pulumi_double.calls(folder / "double")) - calls
            said = [line for line in done.stderr.splitlines() if "read from" in line or "error" in line][-1:]
            print(f"{row:<14} {took:7.1f} s  exit {done.returncode}  {made:5d} CLI calls  {' '.join(said)[:150]}",
                  flush=True)
            if done.returncode != 0:
                print(done.stderr[-2000:])


if __name__ == "__main__":
    main()
