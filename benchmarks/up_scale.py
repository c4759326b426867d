"""`modelplane up` at fleet scale, against the program-running Pulumi CLI double (tests/pulumi_double.py).

Every `up` here is the real command in a fresh process; the double on PATH answers as the Pulumi CLI does and runs
each stack's program (providers mocked: nothing is deployed anywhere). Prints, for a fleet of each generator:

- the first `up` (every stack created), and how many stacks it ran;
- a no-op `up` right after it (this machine wrote the record of what it applied without the backend's update
  stamps, so every stack's outputs are read back once), then a no-op `up` with the record cached: each must run
  no engine (issue 31: within 2x `plan` with the same record);
- `up` after changing K deployments (a new image each: exactly their K model stacks), for each K and each
  `--parallel`, with the stacks it ran checked against the K expected.

Asserts nothing; a row whose stacks are not the expected ones says so in its last column.

    .venv/bin/python benchmarks/up_scale.py                     # 200 x 500, both generators
    .venv/bin/python benchmarks/up_scale.py --deployments 2000 --generator plan_bench   # about an hour here
    .venv/bin/python benchmarks/up_scale.py --deployments 50 --clusters 20 --changes 1 4 --parallel 1 2 4
"""

from __future__ import annotations

import argparse
import json
import os
import signal
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

MODELPLANE = str(Path(sys.executable).parent / "modelplane")
ENGINE_VERBS = ("up", "preview", "destroy", "refresh")


class Fleet:
    """A working folder with the double on PATH, the fleet's manifests and its Existing clusters' kubeconfigs."""

    def __init__(self, folder: Path, objects: list[dict]):
        self.folder, self.objects = folder, objects
        bin_dir = pulumi_double.install(folder)
        self.work = folder / "work"
        self.work.mkdir()
        kubeconfigs = self.work / ".modelplane" / "kubeconfigs"
        kubeconfigs.mkdir(parents=True)
        for o in objects:
            existing = o["kind"] == "InferenceCluster" and (o["spec"]["cluster"].get("existing") or {})
            if existing:
                (kubeconfigs / existing["secretRef"]["name"]).write_text("apiVersion: v1\nkind: Config\n")
        self.env = {**os.environ, "PATH": f"{bin_dir}{os.pathsep}{os.environ['PATH']}",
                    "PULUMI_DOUBLE_DIR": str(folder / "double"), "PULUMI_CONFIG_PASSPHRASE": "up-scale-benchmark"}
        self.write()

    def write(self) -> None:
        (self.work / "fleet.yaml").write_text(yaml.safe_dump_all(self.objects, sort_keys=False))

    def calls(self) -> list[dict]:
        return pulumi_double.calls(self.folder / "double")

    def run(self, *args: str) -> tuple[float, list[str], int, str]:
        """(seconds, stacks an engine ran on, exit code, last error line) of one modelplane command."""
        mark = len(self.calls())
        seconds, code, error = command(self.work, self.env, args)
        verbs = ([a for a in c["argv"] if a != "--non-interactive"][:1] for c in self.calls()[mark:])
        engines = [c["stack"] for c, verb in zip(self.calls()[mark:], verbs) if verb and verb[0] in ENGINE_VERBS]
        return seconds, engines, code, error


def command(work: Path, env: dict[str, str], args: tuple[str, ...], timeout: float | None = None,
            files: tuple[str, ...] = ("-f", "fleet.yaml"), stderr_to: Path | None = None) -> tuple[float, int, str]:
    """(seconds, exit code, last error line) of one `modelplane ARGS -f fleet.yaml` run in `work`; its standard error
    also written to `stderr_to` when given. Past `timeout` the command and what it started (its own session) are
    interrupted, then killed: exit code -1."""
    start = time.perf_counter()
    process = subprocess.Popen([MODELPLANE, *args, *files], cwd=work, env=env, stdout=subprocess.DEVNULL,
                               stderr=subprocess.PIPE, text=True, start_new_session=True)
    try:
        _, stderr = process.communicate(timeout=timeout)
        code = process.returncode
    except subprocess.TimeoutExpired:
        os.killpg(process.pid, signal.SIGINT)  # a clean stop first: the engines write their state
        try:
            _, stderr = process.communicate(timeout=120)
        except subprocess.TimeoutExpired:
            os.killpg(process.pid, signal.SIGKILL)
            _, stderr = process.communicate()
        code, stderr = -1, f"{stderr}\nerror: timed out after {timeout:.0f} s"
    seconds = time.perf_counter() - start
    if stderr_to is not None:
        stderr_to.write_text(stderr)
    lines = [line.strip() for line in stderr.splitlines() if line.strip()]
    error = next((line for line in reversed(lines) if line.startswith("error")), lines[-1] if code and lines else "")
    return seconds, code, error


def change_images(objects: list[dict], count: int, tag: str) -> set[str]:
    """Give the first `count` deployments a new image; the model stacks that must then run."""
    stacks = set()
    for o in [o for o in objects if o["kind"] == "ModelDeployment"][:count]:
        for engine in o["spec"]["template"]["spec"]["engines"]:
            for member in engine["members"]:
                member["template"]["spec"]["containers"][0]["image"] = f"vllm/vllm-openai:{tag}"
        stacks.add(f"model-{o['metadata']['namespace']}.{o['metadata']['name']}")
    return stacks


def row(name: str, seconds: float, stacks: int, floor: float | None, target: str, note: str) -> None:
    ratio = f"{seconds / floor:6.2f}" if floor else f"{'':>6}"
    print(f"{name:<44} {seconds:8.2f} {stacks:>7} {(f'{floor:8.2f}' if floor else ''):>8} {ratio} {target:>7}  {note}",
          flush=True)


def run(generator: str, deployments: int, clusters: int, first_parallel: int = 8,
        changes: tuple[int, ...] = (1, 8, 32), parallel: tuple[int, ...] = (1, 2, 8)) -> None:
    """Print the rows of one fleet (see the module's docstring)."""
    with tempfile.TemporaryDirectory(prefix="up-scale-") as folder:
        fleet = Fleet(Path(folder), GENERATORS[generator](deployments, clusters))
        print(f"{os.cpu_count()} CPUs; python {sys.version.split()[0]}; {generator} {deployments}x{clusters}; "
              "the Pulumi CLI double (programs run, providers mocked)")
        print(f"{'command':<44} {'seconds':>8} {'engines':>7} {'floor s':>8} {'ratio':>6} {'target':>7}  note")
        seconds, engines, code, error = fleet.run("up", "--parallel", str(first_parallel))
        row(f"first up, --parallel {first_parallel}", seconds, len(engines), None, "", f"exit {code} {error}".strip())
        if code:
            return
        after_first = fleet.run("up")  # before anything else reads the record back
        plans = sorted(fleet.run("plan", "-o", "json")[0] for _ in range(3))
        plan = plans[1]
        row("plan -o json (with the record), median of 3", plan, 0, None, "", "")
        for label, (seconds, engines, code, error) in (("no-op up, record read back after the first", after_first),
                                                       ("no-op up, record cached", fleet.run("up"))):
            row(label, seconds, len(engines), plan, "<=2.0x",
                f"exit {code} {error}".strip() + ("" if not engines else f"; ran {len(engines)} engine(s)"))
        round_ = 0
        for count in changes:
            for at_once in parallel:
                round_ += 1
                expected = change_images(fleet.objects, count, f"v0.{20 + round_}.0")
                fleet.write()
                seconds, engines, code, error = fleet.run("up", "--parallel", str(at_once))
                ran = set(engines)
                note = "exactly its stacks" if ran == expected and len(engines) == len(ran) else (
                    f"ran {len(engines)}: {json.dumps(sorted(ran - expected)[:3])} not expected, "
                    f"{json.dumps(sorted(expected - ran)[:3])} missing")
                row(f"up, {count} deployment(s) changed, --parallel {at_once}", seconds, len(engines), None, "",
                    f"exit {code} {error} {note}".strip())


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--deployments", type=int, default=200)
    parser.add_argument("--clusters", type=int, default=500)
    parser.add_argument("--generator", choices=sorted(GENERATORS), action="append",
                        help="fleets of this generator only (default: both)")
    parser.add_argument("--first-parallel", type=int, default=8, help="--parallel of the first up")
    parser.add_argument("--changes", type=int, nargs="+", default=[1, 8, 32], help="deployments changed per row")
    parser.add_argument("--parallel", type=int, nargs="+", default=[1, 2, 8], help="--parallel of the change rows")
    args = parser.parse_args()
    for generator in args.generator or sorted(GENERATORS, reverse=True):
        run(generator, args.deployments, args.clusters, args.first_parallel, tuple(args.changes), tuple(args.parallel))


if __name__ == "__main__":
    main()
