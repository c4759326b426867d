"""Orchestration against a recording fake of the one runner interface.

Ordering, parallel groups, failure isolation, recording only on success, convergence after a
failure, and cancellation. No test here claims anything was deployed: the fake records calls.
"""

import asyncio
import gc
import os
import pathlib
import signal
import threading
import time
import weakref


from automation.execution.orchestrator import Orchestrator
from automation.execution.runner import RunResult
from automation.planning.stacks import desired_state, changes
from automation.record.applied import RECORD_OUTPUT, Applied, AppliedStack, record_output
from automation.planning.payloads import endpoints_fingerprint
from automation.execution.state import WorkdirLock
from fleet.scheduler import schedule
from tests.manifests import run, example_documents

ROOT = pathlib.Path(__file__).resolve().parent.parent
EXAMPLES = example_documents()  # examples/, less its v0.3.1 variant (tests/manifests.py)


class MemoryRecord:
    """The record as the backend would hold it: each succeeded update's outputs (its program's record in them)."""

    def __init__(self):
        self.outputs: dict[str, dict] = {}

    def read(self) -> Applied:
        return Applied({name: AppliedStack.from_outputs(o) for name, o in self.outputs.items()}, "memory")

    def applied(self, stack, outputs, window=None):
        self.outputs[stack] = dict(outputs)

    def destroyed(self, stack):
        self.outputs.pop(stack, None)

    def fingerprints(self):
        return self.read().fingerprints()

    def placements(self):
        return self.read().placements()

    def gateways(self):
        return self.read().gateways()


class FakeRunner:
    """Records (operation, stack) calls; fails the stacks it is told to; can block to test cancel. What it returns
    after an update holds the record as the stack's program exports it (an endpoints stack's fingerprint of the
    gateway addresses `record` holds then, as its program reads them live)."""

    def __init__(self, fail=(), block=None, record: MemoryRecord | None = None):
        self.record = record
        self.calls: list[tuple[str, str]] = []
        self.fail = set(fail)
        self.block = {block} if isinstance(block, str) else set(block or ())  # stacks that wait until cancelled
        self.blocked = 0  # how many of them are waiting
        self.cancelled: list[str] = []
        self.release = threading.Event()
        self.started = threading.Event()
        self.concurrent = 0
        self.max_concurrent = 0
        self._lock = threading.Lock()

    def run(self, operation, stack, on_event):
        with self._lock:
            self.calls.append((operation, stack.name))
            self.concurrent += 1
            self.max_concurrent = max(self.max_concurrent, self.concurrent)
        try:
            on_event({"stack": stack.name, "type": "resource", "op": "create"})
            if stack.name in self.block:
                with self._lock:
                    self.blocked += 1
                self.started.set()
                self.release.wait(5)
                return RunResult(stack.name, operation, False, error="update canceled")
            time.sleep(0.01)
            if stack.name in self.fail:
                return RunResult(stack.name, operation, False, error="provider error: quota exceeded")
            fingerprint = stack.fingerprint
            if stack.kind == "endpoints" and self.record is not None:
                fingerprint = endpoints_fingerprint(stack.payload, self.record.gateways())
            written = record_output(fingerprint, stack.placements)
            return RunResult(stack.name, operation, True, {"create": 1},
                             {"gatewayAddress": "203.0.113.9", RECORD_OUTPUT: written})
        finally:
            with self._lock:
                self.concurrent -= 1

    def cancel(self, stack_name):
        self.cancelled.append(stack_name)
        self.release.set()


def desired(gateways=None):
    loaded = run(*EXAMPLES)
    schedule(loaded.fleet)
    # an on-prem host: its failure reaches the gateway. `gateways`: the addresses recorded by then, as `up` plans
    return desired_state(loaded.fleet, control_plane="byo-eu", gateways=gateways).specs


def test_runs_in_dependency_order_with_bounded_parallelism(tmp_path):
    specs = desired()
    runner, events = FakeRunner(), []
    report = Orchestrator(runner, MemoryRecord(), events.append, parallel=2).execute("up", changes(specs, {}), specs)
    assert report.ok and len(runner.calls) == len(specs)
    order = [name for _, name in runner.calls]
    for spec in specs.values():
        assert all(order.index(d) < order.index(spec.name) for d in spec.depends_on), spec.name
    assert runner.max_concurrent == 2  # independent stacks in parallel, never more than asked
    assert {e["type"] for e in events} >= {"start", "resource", "succeeded"}


def test_records_only_successes_and_isolates_failures(tmp_path):
    specs = desired()
    store = MemoryRecord()
    runner = FakeRunner(fail={"platform-byo-eu"}, record=store)
    report = Orchestrator(runner, store, lambda e: None).execute("up", changes(specs, {}), specs)
    status = {o.stack: o for o in report.outcomes}
    assert status["platform-byo-eu"].status == "failed" and "quota exceeded" in status["platform-byo-eu"].reason
    # byo-eu hosts the gateway and the cache; everything behind them is skipped with the reason
    assert status["gateway"].status == "skipped" and "depends on platform-byo-eu, which failed" in status["gateway"].reason
    assert status["model-ml-team.qwen3-coder"].status == "skipped"
    assert status["service-ml-team.qwen3-8b"].status == "skipped"  # behind the gateway
    # independent stacks went on
    assert status["platform-gke-us-central"].status == "succeeded" and status["model-ml-team.qwen3-8b"].status == "succeeded"
    recorded = store.fingerprints()
    assert "platform-byo-eu" not in recorded and "gateway" not in recorded
    assert recorded["platform-gke-us-central"] == specs["platform-gke-us-central"].fingerprint
    expected = {r.name for stack in ("model-ml-team.qwen3-8b", "model-ml-team.kimi-k2")  # the model stacks that applied
                for r in specs[stack].placements}
    assert {p.name for p in store.placements()} == expected


def test_rerun_converges_after_a_failure(tmp_path):
    specs = desired()
    store = MemoryRecord()
    Orchestrator(FakeRunner(fail={"platform-byo-eu"}, record=store), store, lambda e: None).execute("up", changes(specs, {}), specs)
    pending = [c for c in changes(specs, store.fingerprints()) if c.change != "none"]
    # byo-eu's stacks and what waits for them (the control plane's namespaces and routes); nothing else
    assert {c.name for c in pending} == {"platform-byo-eu", "gateway", "team-ml-team.byo-eu", "cache-ml-team.qwen3-coder",
                                          "model-ml-team.qwen3-coder", "endpoints-ml-team", "service-ml-team.kimi-k2",
                                          "service-ml-team.qwen3-8b", "service-ml-team.qwen3-coder"}
    second = FakeRunner(record=store)
    assert Orchestrator(second, store, lambda e: None).execute("up", pending, specs).ok
    assert {name for _, name in second.calls} == {c.name for c in pending}  # only what had not applied
    # planned again as the next `up` plans, with the gateway addresses now recorded: nothing left to do
    assert all(c.change == "none" for c in changes(desired(store.gateways()), store.fingerprints()))


def test_destroy_forgets_only_what_was_destroyed(tmp_path):
    specs = desired()
    store = MemoryRecord()
    Orchestrator(FakeRunner(), store, lambda e: None).execute("up", changes(specs, {}), specs)
    deletes = changes({}, store.fingerprints())
    runner = FakeRunner(fail={"model-ml-team.kimi-k2"})
    report = Orchestrator(runner, store, lambda e: None).execute("destroy", deletes, {})
    order = [name for _, name in runner.calls]
    assert order.index("service-ml-team.kimi-k2") < order.index("model-ml-team.kimi-k2")
    assert all(op == "destroy" for op, _ in runner.calls)
    # the one that failed stays recorded, and so do the clusters and the gateway: what failed may be on them
    platforms = {name for name in deletes_names(deletes) if name.startswith("platform-")} | {"gateway"}
    assert set(store.fingerprints()) == {"model-ml-team.kimi-k2"} | platforms
    assert not platforms & set(order)
    skipped = {o.stack: o.reason for o in report.outcomes if o.status == "skipped"}
    assert skipped["platform-eks-us-west"] == "not run: kept because model-ml-team.kimi-k2 was not destroyed (failed)"
    assert not report.ok
    # once the failure is fixed, a rerun destroys the rest
    rerun = FakeRunner()
    assert Orchestrator(rerun, store, lambda e: None).execute("destroy", changes({}, store.fingerprints()), {}).ok
    assert store.fingerprints() == {}


def deletes_names(deletes):
    return [c.name for c in deletes]


def test_cancel_stops_new_stacks_and_cancels_running_ones(tmp_path):
    specs = desired()
    store = MemoryRecord()
    runner = FakeRunner(block="platform-eks-us-west")
    orchestrator = Orchestrator(runner, store, lambda e: None, parallel=3)
    result = {}
    worker = threading.Thread(target=lambda: result.setdefault("report", orchestrator.execute("up", changes(specs, {}), specs)))
    worker.start()
    assert runner.started.wait(5)
    orchestrator.cancel()
    worker.join(10)
    report = result["report"]
    assert report.cancelled and "platform-eks-us-west" in runner.cancelled  # every running stack is asked to stop
    started = {name for _, name in runner.calls}
    assert started <= {"platform-byo-eu", "platform-eks-us-west", "platform-gke-us-central"}  # nothing after the first wave
    assert "platform-eks-us-west" not in store.fingerprints()
    assert {o.status for o in report.outcomes if o.stack == "platform-eks-us-west"} == {"cancelled"}


def test_ctrl_c_starts_no_stack_queued_in_the_pool_and_lists_each_not_started_as_skipped():
    """Two platform stacks run (parallel=2), the third is queued in the pool: a real SIGINT, as a terminal's
    Ctrl-C, reaches the CLI's wait (run_interruptibly); the queued stack never starts."""
    from automation.execution.session import run_interruptibly

    specs = desired()
    running = {"platform-byo-eu", "platform-eks-us-west"}
    store, events, said = MemoryRecord(), [], []
    runner = FakeRunner(block=running, record=store)
    orchestrator = Orchestrator(runner, store, events.append, parallel=2)

    def ctrl_c() -> None:
        while runner.blocked < len(running):
            time.sleep(0.01)
        os.kill(os.getpid(), signal.SIGINT)  # to the main thread, which waits in run_interruptibly

    threading.Thread(target=ctrl_c, daemon=True).start()
    report = run_interruptibly(orchestrator, "up", changes(specs, {}), specs, said.append)
    assert report.cancelled and said and said[0].startswith("cancelling")
    assert {name for _, name in runner.calls} == running  # nothing started after the interrupt
    assert set(runner.cancelled) == running  # every running stack was asked to stop
    assert {o.stack: o.status for o in report.outcomes if o.stack in running} == dict.fromkeys(running, "cancelled")
    skipped = {o.stack: o.reason for o in report.outcomes if o.status == "skipped"}
    assert set(skipped) == set(specs) - running  # listed: the queued one, and those it and the cancelled ones hold up
    assert skipped["platform-gke-us-central"] == "not started: cancelled"
    assert {e["stack"] for e in events if e["type"] == "skipped"} == set(skipped)  # each one printed
    assert store.fingerprints() == {}


def test_preview_records_nothing(tmp_path):
    specs = desired()
    store = MemoryRecord()
    runner = FakeRunner()
    assert Orchestrator(runner, store, lambda e: None).execute("preview", changes(specs, {}), specs).ok
    assert store.fingerprints() == {} and all(op == "preview" for op, _ in runner.calls)


def test_state_lock_refuses_a_second_writer(tmp_path):
    from automation.execution.state import StateLocked
    import subprocess
    import sys
    first = WorkdirLock(tmp_path)
    first.lock()
    try:
        code = subprocess.run([sys.executable, "-c", f"""
import sys
from automation.execution.state import WorkdirLock, StateLocked
try:
    WorkdirLock({str(tmp_path)!r}).lock()
except StateLocked as exc:
    print(exc); sys.exit(3)
"""], capture_output=True, text=True, cwd=ROOT)
        assert code.returncode == 3 and "is changing the fleet" in code.stdout
    finally:
        first.unlock()
    second = WorkdirLock(tmp_path)
    second.lock()
    second.unlock()
    assert StateLocked


def test_the_garbage_of_finished_runs_is_collected_every_few_runs(monkeypatch):
    """A program run in this process leaves cyclic garbage (resources, their outputs' asyncio tasks) that the
    collector, tuned as `modelplane` tunes it, freed rarely on a large fleet's heap, while the Pulumi SDK walks every
    live task as each program ends. Here the automatic collector is off, so that only the orchestrator's collections
    count: after the examples' stacks, at most the last few runs' tasks may be left."""
    from automation.execution import collector

    monkeypatch.setattr(collector, "EVERY", 4)
    left: list[weakref.ref] = []

    class CyclicRunner(FakeRunner):
        def run(self, operation, stack, on_event):
            loop = asyncio.new_event_loop()
            task = loop.create_task(asyncio.sleep(0))
            loop.run_until_complete(task)
            loop.close()
            holder: dict = {"task": task}
            holder["self"] = holder  # a cycle holds the finished task, as a resource's outputs do
            left.append(weakref.ref(task))
            return super().run(operation, stack, on_event)

    specs = desired()
    enabled = gc.isenabled()
    gc.disable()
    try:
        report = Orchestrator(CyclicRunner(), MemoryRecord(), lambda e: None, parallel=2).execute(
            "up", changes(specs, {}), specs)
        alive = sum(1 for ref in left if ref() is not None)
    finally:
        if enabled:
            gc.enable()
    assert report.ok and len(left) == len(specs) > 8
    assert alive < 4, f"{alive} of {len(left)} runs' tasks still alive"


def test_statuses_print_and_serialize_as_the_same_text(capsys):
    """Run statuses are a str-valued enum: `up -o json`'s lines and the summary's words are the plain strings."""
    import json

    from automation.cli.progress import progress

    specs = desired()
    report = Orchestrator(FakeRunner(fail={"platform-byo-eu"}), MemoryRecord(), progress("json", None)).execute(
        "up", changes(specs, {}), specs)
    lines = capsys.readouterr().out.splitlines()
    for status in ("succeeded", "failed", "skipped"):
        assert any(f'"type": "{status}"' in line for line in lines), status
    assert {json.loads(line)["type"] for line in lines} >= {"succeeded", "failed", "skipped"}
    assert {f"{o.status}" for o in report.outcomes} == {str(o.status) for o in report.outcomes} == \
        {"succeeded", "failed", "skipped"}
