"""The apply worker: takes queued stack runs from the database and applies them through the orchestrator.

Runs are queued inside the write that made them necessary, so an accepted change is never
lost: after a crash, a restarted portal (or another portal process on the same database)
picks the queued runs up, and runs left `running` by a dead process for longer than
`stale_after` are queued again. Each run applies the latest desired state of its stack, so a
stack converges to the newest accepted manifests.

The stacks run on this host's Pulumi engines (`pulumi_runner`), or on the Pulumi Kubernetes Operator
(`operator_runner`, `serve --executor operator`), which leaves no cloud credential on the portal host.

One road: the worker claims every queued run at once and applies them as one batch the way
`modelplane up` does: the placements the portal shows (its reservations), the executor's record
of what is applied (the Pulumi backend, or the operator's Stacks), opened by the same function
(automation/road/executor.py), the same preflight before any stack applies (automation/road/preflight.py:
invalid objects, changes the record refuses, the deployability and add-on checks, and what the executor needs here:
kubeconfigs, Secrets' values, the passphrase), the same Orchestrator (dependency waves, dependents of a failed stack
skipped). It takes the state folder's lock for the batch:
while the CLI changes the fleet from that folder, the runs wait, queued. What it applied is what
the record then says, and the database's `applied` key is only this portal's copy of it.
"""

from __future__ import annotations

import json
import logging
import os
import socket
import threading
import time
from datetime import timedelta
from pathlib import Path
from typing import Any, Callable

from sqlalchemy import select

from automation.execution.orchestrator import Orchestrator
from automation.execution.run_status import RunStatus
from automation.portal.service import load_fleet
from automation.portal.state import APPLIED, APPLIED_DETAILS, CAPACITY, CLUSTER_GATEWAYS, EXECUTOR_PROBLEM
from automation.portal.store import Store, now, rfc3339, runs
from automation.record.applied import RECORD_OUTPUT, Applied, replica_from_dict
from automation.road.executor import Executor, ExecutorOptions, open_executor
from automation.road.preflight import preflight
from automation.execution.runner import AutomationError, CLIMissing
from automation.planning.stacks import Change, StackChange, desired_state
from automation.execution.state import StateLocked, WorkdirLock
from fleet.capacity import LiveCapacity
from fleet.stack_id import StackId
from fleet.validate import Fleet

log = logging.getLogger("modelplane.portal")


ExecutorFactory = Callable[[Fleet, Path], Executor]  # opens the executor of a batch (its runner made: CLIMissing)


def pulumi_runner(backend: str | None = None, parallel: int = 2) -> ExecutorFactory:
    """The local executor, on the shared state folder (its backend and workspaces), as `modelplane up` opens it."""
    return _opening(lambda state_dir: ExecutorOptions(state=state_dir, backend=backend, parallel=parallel))


def operator_runner(settings_file: str | Path) -> ExecutorFactory:
    """The operator executor: each batch's stacks become Stack objects in the control-plane cluster, so the portal
    host holds no cloud credential. The client is made per batch (exec-plugin tokens expire)."""
    return _opening(lambda state_dir: ExecutorOptions("operator", state=state_dir, operator_settings=settings_file))


def _opening(options: Callable[[Path], ExecutorOptions]) -> ExecutorFactory:
    def build(fleet: Fleet, state_dir: Path) -> Executor:
        executor = open_executor(options(state_dir), fleet)
        executor.runner()  # made now: without the Pulumi CLI (CLIMissing) the runs wait queued, before anything
        return executor
    return build


BLOCKED_RETRY = 60.0  # seconds between tries to build the executor while it cannot be (the Pulumi CLI is missing)


class Worker(threading.Thread):
    def __init__(self, store: Store, state_dir: Path, interval: float = 1.0, stale_after: float = 900.0,
                 runner: ExecutorFactory | None = None, parallel: int = 2):
        super().__init__(daemon=True, name="modelplane-apply-worker")
        self.store = store
        self.state_dir = Path(state_dir)
        self.interval = interval
        self.stale_after = stale_after
        self.runner = runner or pulumi_runner(parallel=parallel)
        self.parallel = parallel
        self.id = f"{socket.gethostname()}-{os.getpid()}"
        self.stopping = threading.Event()
        self.blocked_until = 0.0  # while what runs stacks cannot (no Pulumi CLI), runs wait queued: no retry storm

    def stop(self) -> None:
        self.stopping.set()

    def recover(self) -> int:
        """Queue again the runs a dead process left running."""
        cutoff = now() - timedelta(seconds=self.stale_after)
        with self.store.write() as conn:
            result = conn.execute(runs.update().where(runs.c.status == RunStatus.running, runs.c.started_at < cutoff)
                                  .values(status=RunStatus.queued, worker=None, log=runs.c.log + "requeued: its worker stopped\n"))
            return result.rowcount or 0

    def resync(self) -> None:
        """At start: this portal's copy of the record from the record itself (a CLI or another portal may have
        applied meanwhile), so its first replan queues only what differs from what is applied."""
        with self.store.read() as conn:
            fleet = load_fleet(self.store.list(conn))
        try:
            self.sync(self.runner(fleet, self.state_dir).record.read())
        except AutomationError:
            pass  # the batch that needs it reads it again, and fails its runs saying why

    def claim(self) -> list[dict[str, Any]]:
        """Every queued run whose stack is not running elsewhere, marked running by this worker (one transaction)."""
        claimed = []
        with self.store.write() as conn:
            busy = {r[0] for r in conn.execute(select(runs.c.stack).where(runs.c.status == RunStatus.running))}
            for row in conn.execute(select(runs).where(runs.c.status == RunStatus.queued).order_by(runs.c.id)).mappings():
                if row["stack"] in busy:
                    continue
                busy.add(row["stack"])
                conn.execute(runs.update().where(runs.c.id == row["id"]).values(
                    status=RunStatus.running, started_at=now(), worker=self.id))
                claimed.append(dict(row))
        return claimed

    def _append(self, run_id: int, lines: list[str]) -> None:
        if lines:
            with self.store.write() as conn:
                conn.execute(runs.update().where(runs.c.id == run_id).values(log=runs.c.log + "".join(lines)))

    def _requeue(self, batch: list[dict[str, Any]], why: str) -> None:
        with self.store.write() as conn:
            for run in batch:
                conn.execute(runs.update().where(runs.c.id == run["id"]).values(
                    status=RunStatus.queued, worker=None, log=runs.c.log + why + "\n"))

    def _finish(self, run: dict, ok: bool, message: str, fingerprint: str | None = None,
                outputs: dict | None = None) -> None:
        with self.store.write() as conn:
            conn.execute(runs.update().where(runs.c.id == run["id"]).values(
                status=RunStatus.succeeded if ok else RunStatus.failed, finished_at=now(), log=runs.c.log + message + "\n"))
            if ok:
                applied = APPLIED.get(conn)
                if run["operation"] == "destroy":
                    applied.pop(run["stack"], None)
                else:
                    applied[run["stack"]] = fingerprint
                APPLIED.set(conn, applied)
                details = APPLIED_DETAILS.get(conn)
                if run["operation"] == "destroy":
                    details.pop(run["stack"], None)
                else:  # plain outputs only (the runner drops secret ones): what status reads
                    details[run["stack"]] = {"outputs": outputs or {}, "appliedAt": rfc3339()}
                APPLIED_DETAILS.set(conn, details)
                cluster = StackId.parse(run["stack"]).cluster
                if cluster is not None:  # a platform stack: its gateway makes replica endpoints real
                    gateways = CLUSTER_GATEWAYS.get(conn)
                    address = (outputs or {}).get("gatewayAddress")
                    if run["operation"] == "destroy" or not address:
                        gateways.pop(cluster, None)
                    else:
                        gateways[cluster] = address
                    CLUSTER_GATEWAYS.set(conn, gateways)

    def sync(self, applied: Applied) -> None:
        """Make this portal's copy of the record (`applied`, `appliedDetails`, `clusterGateways`) what it says."""
        gateways = applied.gateways()
        with self.store.write() as conn:
            APPLIED.set(conn, {**applied.fingerprints()})
            APPLIED_DETAILS.set(conn, applied.details())
            CLUSTER_GATEWAYS.set(conn, dict(gateways.clusters))

    def execute(self, batch: list[dict[str, Any]]) -> None:
        """Apply a batch of claimed runs as `modelplane up` would; every run ends succeeded, failed or queued again."""
        lock = WorkdirLock(self.state_dir)
        try:
            lock.lock()
        except StateLocked as exc:
            self._requeue(batch, f"waiting: {exc}")
            return
        finished: set[int] = set()
        try:
            self._execute(batch, finished)
        except Exception as exc:  # a bug of ours: the runs fail with the reason, the worker goes on
            for run in batch:
                if run["id"] not in finished:
                    self._finish(run, False, f"internal error: {type(exc).__name__}: {exc}")
        finally:
            lock.unlock()

    def _fail_all(self, batch: list[dict[str, Any]], finished: set[int], why: str) -> None:
        for run in batch:
            self._finish(run, False, why)
            finished.add(run["id"])

    def _execute(self, batch: list[dict[str, Any]], finished: set[int]) -> None:
        with self.store.read() as conn:  # the placements the portal shows: its reservations, not a cache of them
            fleet = load_fleet(self.store.list(conn))
            reserved = [replica_from_dict(p) for p in json.loads(self.store.reservations_text(conn))]
            capacity = CAPACITY.text(conn)  # what the replan placed on: a replica it left unscheduled stays so
            fleet.live = LiveCapacity.from_json(capacity) if capacity else None
        try:
            executor = self.runner(fleet, self.state_dir)
        except CLIMissing as exc:  # nothing can run until it is installed: keep the runs queued, say it once
            self.blocked_until = time.monotonic() + BLOCKED_RETRY
            self._blocked(batch, finished, str(exc))
            return
        except AutomationError as exc:
            return self._fail_all(batch, finished, f"error: {exc}")
        self._unblocked()
        try:
            applied = executor.record.read()
        except AutomationError as exc:
            return self._fail_all(batch, finished, f"error: {exc}")
        self.sync(applied)
        desired = desired_state(fleet, reserved, gateways=applied.gateways())
        specs = desired.specs
        items = []
        for run in batch:
            spec = specs.get(run["stack"])
            if run["operation"] == "up" and spec is not None:
                items.append(StackChange(spec.id, Change.update, tuple(spec.depends_on)))
            else:  # destroyed, or an `up` of a stack no longer wanted
                items.append(StackChange(StackId.parse(run["stack"]), Change.delete))
        # what `up` checks, by the same rules, before any stack applies; in this process's own thread (it has threads
        # of its own: never forks)
        problems = preflight(executor, fleet, desired, applied, items, "up", jobs=1).lines()
        if problems:
            return self._fail_all(batch, finished, "error: nothing was applied: " + "; ".join(problems[:5]))
        by_stack = {run["stack"]: run for run in batch}
        pending: dict[int, list[str]] = {}
        last_flush = [time.monotonic()]
        guard = threading.Lock()

        def on_event(event: dict) -> None:
            run = by_stack.get(str(event.get("stack")))
            if run is None:
                return
            with guard:
                pending.setdefault(run["id"], []).append(json.dumps(event, default=str) + "\n")
                if time.monotonic() - last_flush[0] > 1.0:
                    for run_id, lines in list(pending.items()):
                        self._append(run_id, lines)
                    pending.clear()
                    last_flush[0] = time.monotonic()

        report = Orchestrator(executor.runner(), executor.record, on_event, self.parallel).execute("up", items, specs)
        for run_id, lines in pending.items():
            self._append(run_id, lines)
        for outcome in report.outcomes:
            run = by_stack[outcome.stack]
            spec = specs.get(outcome.stack)
            if outcome.status == RunStatus.succeeded and outcome.result is not None:
                outputs = dict(outcome.result.outputs)
                written = outputs.pop(RECORD_OUTPUT, None) or {}
                self._finish(run, True, f"{run['operation']} succeeded: {outcome.result.changes}",
                             written.get("fingerprint") or (spec.fingerprint if spec else None), outputs)
            else:
                self._finish(run, False, f"error: {outcome.reason}")
            finished.add(run["id"])
        try:
            self.sync(executor.record.read())  # what the stacks wrote: the record is the truth, not our bookkeeping
        except AutomationError:
            pass  # the copy kept by _finish stands until the next batch reads it

    def _blocked(self, batch: list[dict[str, Any]], finished: set[int], why: str) -> None:
        with self.store.write() as conn:
            said = EXECUTOR_PROBLEM.get(conn)
            EXECUTOR_PROBLEM.set(conn, why)
            for run in batch:
                conn.execute(runs.update().where(runs.c.id == run["id"]).values(
                    status=RunStatus.queued, worker=None,
                    log=runs.c.log + ("" if said == why else f"waiting: {why} (retried every {BLOCKED_RETRY:.0f} s)\n")))
                finished.add(run["id"])
        log.error("no stack is applied: %s", why)

    def _unblocked(self) -> None:
        if self.blocked_until:
            self.blocked_until = 0.0
            with self.store.write() as conn:
                EXECUTOR_PROBLEM.set(conn, "")

    def run(self) -> None:
        self.recover()
        self.resync()
        while not self.stopping.wait(self.interval):
            if time.monotonic() < self.blocked_until:
                continue
            while not self.stopping.is_set() and (batch := self.claim()):
                self.execute(batch)
                if self.blocked_until:
                    break
