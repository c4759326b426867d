"""Run the changed stacks: dependency order, independent stacks in parallel, failures isolated.

- Waves from `stacks.waves`: platform, gateway, caches, models, services; a wave's stacks run
  in parallel (at most `parallel` at once).
- A failed stack is reported with its error; stacks that depend on it (directly or not) are
  skipped with that reason; every other stack goes on. A platform or gateway stack is not
  destroyed after another stack of the same run failed (or was skipped): the cluster outlives
  whatever may still be on it, and a rerun converges.
- The record of what is applied is written by the update itself (each program exports it,
  automation/record/applied.py); the orchestrator only tells the executor's record what succeeded, so
  a cache of it follows (after an update its outputs, after a destroy nothing).
- Programs run in this process leave cyclic garbage: collected every few runs against a frozen heap while the
  stacks run (automation/execution/collector.py).
- Cancelling (Ctrl-C) starts nothing new and asks running operations to cancel through the
  runner (Pulumi stops at a safe point); they are waited for, never killed mid-write. A stack not started by
  then, queued in the pool or in a later wave, is skipped and reported ("not started: cancelled"): whether a
  stack starts is decided under the same lock `cancel` reads the running ones with, so none slips between.
"""

from __future__ import annotations

import threading
from concurrent.futures import FIRST_COMPLETED, ThreadPoolExecutor, wait
from dataclasses import dataclass, field

from automation.execution.collector import RunsCollector
from automation.execution.run_status import RunStatus
from automation.execution.runner import EventSink, Operation, RunResult, StackRunner
from automation.record.applied import Record
from automation.planning.stacks import StackChange, StackSpec, waves


NOT_STARTED = "not started: cancelled"


@dataclass
class Outcome:
    stack: str
    status: RunStatus  # succeeded | failed | skipped | cancelled
    result: RunResult | None = None
    reason: str | None = None


@dataclass
class Report:
    outcomes: list[Outcome] = field(default_factory=list)
    cancelled: bool = False

    @property
    def failed(self) -> list[Outcome]:
        return [o for o in self.outcomes if o.status in (RunStatus.failed, RunStatus.skipped, RunStatus.cancelled)]

    @property
    def ok(self) -> bool:
        return not self.failed and not self.cancelled


class Orchestrator:
    def __init__(self, runner: StackRunner, record: Record | None, on_event: EventSink, parallel: int = 2):
        self.runner = runner
        self.record = record
        self.on_event = on_event
        self.parallel = max(1, parallel)
        self.cancel_requested = threading.Event()
        self._running: set[str] = set()
        self._lock = threading.Lock()

    def cancel(self) -> None:
        """Stop starting stacks, and ask the running ones to cancel."""
        self.cancel_requested.set()
        with self._lock:
            running = list(self._running)
        for name in running:
            self.runner.cancel(name)

    def _operation(self, operation: Operation, change: StackChange) -> Operation:
        if change.change == "delete":
            return "preview-destroy" if operation == "preview" else "destroy"
        return operation

    def _not_started(self, change: StackChange) -> Outcome:
        self.on_event({"stack": change.name, "type": RunStatus.skipped, "reason": NOT_STARTED})
        return Outcome(change.name, RunStatus.skipped, reason=NOT_STARTED)

    def _run_one(self, operation: Operation, change: StackChange, spec: StackSpec | None) -> Outcome:
        with self._lock:  # a stack queued in the pool when Ctrl-C came never starts
            starts = not self.cancel_requested.is_set()
            if starts:
                self._running.add(change.name)
        if not starts:
            return self._not_started(change)
        try:
            op = self._operation(operation, change)
            self.on_event({"stack": change.name, "type": "start", "operation": op})
            result = self.runner.run(op, spec if spec is not None else StackSpec.for_deletion(change.id), self.on_event)
        finally:
            with self._lock:
                self._running.discard(change.name)
        if not result.ok:
            status = RunStatus.cancelled if self.cancel_requested.is_set() else RunStatus.failed
            self.on_event({"stack": change.name, "type": status, "error": result.error})
            return Outcome(change.name, status, result, result.error)
        if self.record is not None and op == "up" and spec is not None:
            self.record.applied(spec.name, result.outputs, result.window)
        elif self.record is not None and op == "destroy":
            self.record.destroyed(change.name)
        self.on_event({"stack": change.name, "type": RunStatus.succeeded, "changes": result.changes,
                       **({"summary": result.summary} if result.summary else {})})
        return Outcome(change.name, RunStatus.succeeded, result)

    def execute(self, operation: Operation, changes: list[StackChange], specs: dict[str, StackSpec]) -> Report:
        report = Report()
        broken: dict[str, str] = {}  # stack -> why it (or a dependency) did not succeed
        names_kept = {c.name for c in changes if c.change == "delete" and c.kind in ("platform", "gateway")}
        with ThreadPoolExecutor(max_workers=self.parallel) as pool, RunsCollector() as collector:
            for wave in waves(changes):
                pending = {}
                for change in wave:
                    blocked = next((d for d in change.depends_on if d in broken), None)
                    reason = f"not run: depends on {blocked}, which {broken.get(blocked or '')}"
                    if blocked is None and change.change == "delete" and change.kind in ("platform", "gateway"):
                        # a cluster outlives a stack that failed to destroy: its resources may be on it
                        blocked = next((n for n in broken if n not in names_kept), None)
                        reason = f"not run: kept because {blocked} was not destroyed ({broken.get(blocked or '')})"
                    if blocked is not None:
                        broken[change.name] = "was skipped"
                        report.outcomes.append(Outcome(change.name, RunStatus.skipped, reason=reason))
                        self.on_event({"stack": change.name, "type": RunStatus.skipped, "reason": reason})
                        continue
                    if self.cancel_requested.is_set():
                        broken[change.name] = "was cancelled"
                        report.outcomes.append(self._not_started(change))
                        continue
                    pending[pool.submit(self._run_one, operation, change, specs.get(change.name))] = change
                while pending:
                    done, _ = wait(pending, return_when=FIRST_COMPLETED)
                    for future in done:
                        change = pending.pop(future)
                        try:
                            outcome = future.result()
                        except Exception as exc:  # a bug in a runner: report it on its stack, never lose the others
                            outcome = Outcome(change.name, RunStatus.failed, reason=f"{type(exc).__name__}: {exc}")
                        if outcome.status != RunStatus.succeeded:
                            broken[change.name] = "failed" if outcome.status == RunStatus.failed else "was cancelled"
                        report.outcomes.append(outcome)
                        collector.finished()
        report.cancelled = self.cancel_requested.is_set()
        return report
