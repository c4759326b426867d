"""The real-engine tier: a local fleet of real control planes (automation/local/), the real Pulumi CLI and the real
Kubernetes provider built by `make toolchain`, driven through the real `modelplane` command. Tests here assert on
what the API servers hold and on the backend's checkpoints, never on modelplane's own log lines.

The toolchain must be built (`make test` builds it first): a missing binary fails the tier, saying what to run;
it is never skipped."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path

import pytest

from automation.execution.kube import KubeClient
from automation.local import toolchain

ROOT = Path(__file__).resolve().parents[2]
FLEET = ROOT / "local-fleet"
MODELPLANE = [sys.executable, "-m", "automation.cli"]


@dataclass
class Fleet:
    """One local fleet and the state folder every command of a test module shares (so its backend is the record)."""

    state: Path
    env: dict[str, str]
    runs: list[subprocess.CompletedProcess] = field(default_factory=list)

    def modelplane(self, *args: str, check: bool = True, timeout: float = 540,
                   input: str | None = None) -> subprocess.CompletedProcess:
        """Runs one command; past `timeout` (inside pytest's 600 s per test, so what it said is kept) it is stopped as
        a CI job would stop it (SIGTERM: modelplane cancels its stacks at a safe point) and the test fails with its
        output and the local fleet's controllers' last log lines."""
        argv = [*MODELPLANE, *args, "--state", str(self.state)]
        process = subprocess.Popen(argv, cwd=self.state.parent, env=self.env, text=True, stdin=subprocess.PIPE,
                                   stdout=subprocess.PIPE, stderr=subprocess.PIPE)
        try:
            out, err = process.communicate(input, timeout=timeout)
        except subprocess.TimeoutExpired:
            process.terminate()
            try:
                out, err = process.communicate(timeout=60)
            except subprocess.TimeoutExpired:
                process.kill()
                out, err = process.communicate()
            raise AssertionError(f"modelplane {' '.join(args)} still ran after {timeout:.0f} s (stopped):\n"
                                 f"{out[-4000:]}\n{err[-4000:]}\n{self.controller_logs()}") from None
        done = subprocess.CompletedProcess(argv, process.returncode, out, err)
        self.runs.append(done)
        if check and done.returncode != 0:
            raise AssertionError(f"modelplane {' '.join(args)} exited {done.returncode}:\n{done.stdout[-4000:]}\n"
                                 f"{done.stderr[-6000:]}")
        return done

    def controller_logs(self, lines: int = 15) -> str:
        """The last lines of the local fleet's own controllers' logs (the LWS controller's, the stand-ins'), which say
        why a workload a stack waits for never became ready."""
        said = []
        for log in sorted((self.state / "local" / "logs").glob("*.log")):
            if "kube-" in log.name or "etcd" in log.name:
                continue
            tail = log.read_text(errors="replace").splitlines()[-lines:]
            said.append(f"--- {log.name}\n" + "\n".join(tail))
        return "\n".join(said)

    def api(self, cluster: str) -> KubeClient:
        return KubeClient(self.state / "local" / cluster / "kubeconfig", timeout=30, cluster=f"local {cluster}")

    def pulumi(self, *args: str) -> subprocess.CompletedProcess:
        return subprocess.run([str(toolchain.find().binary("pulumi")), *args], cwd=self.state.parent, env={
            **self.env, "PULUMI_BACKEND_URL": f"file://{self.state / 'backend'}"}, capture_output=True, text=True,
            timeout=120)

    def checkpoint(self, stack: str) -> dict:
        """The backend's own record of a stack (`pulumi stack export`)."""
        done = self.pulumi("stack", "export", "--stack", qualified(stack))
        assert done.returncode == 0, done.stderr
        return json.loads(done.stdout)

    def history(self, stack: str) -> int | None:
        """How many updates the backend holds for a stack (`pulumi stack history`); None: no such stack."""
        done = self.pulumi("stack", "history", "--json", "--stack", qualified(stack))
        if done.returncode == 6 and "no stack named" in done.stderr:
            return None
        assert done.returncode == 0, done.stderr
        return len(json.loads(done.stdout or "[]"))


def qualified(stack: str) -> str:
    """A stack's name in a file:// backend: its project is the platform's or the workloads' (automation/execution/
    projects.py)."""
    from automation.projects import project_of
    from fleet.stack_id import StackId

    return f"organization/{project_of(StackId.parse(stack).kind)}/{stack}"


def wait_for(what: str, check, seconds: float = 120):
    deadline = time.monotonic() + seconds
    while True:
        value = check()
        if value:
            return value
        if time.monotonic() > deadline:
            raise AssertionError(f"{what}: not within {seconds:.0f} s")
        time.sleep(1)


@pytest.fixture(scope="module")
def local_fleet(tmp_path_factory):
    yield from started(tmp_path_factory, FLEET)


def started(tmp_path_factory, manifests: Path):
    """A local fleet of `manifests` (`modelplane local up`), stopped once the module is done."""
    missing = toolchain.find().missing()
    if missing:
        pytest.fail(f"the real engine is not built ({', '.join(missing)} missing): run `make toolchain`")
    work = tmp_path_factory.mktemp("realengine")
    state = work / ".modelplane"
    fleet = Fleet(state, toolchain.engine_env(os.environ, "real-engine-tier", work / "cache"))
    try:  # a local up that fails midway leaves processes: down stops whatever it recorded
        fleet.modelplane("local", "up", "-f", str(manifests), timeout=400)
        yield fleet
    finally:
        fleet.modelplane("local", "down", check=False, timeout=120)
