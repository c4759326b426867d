"""The apply worker: takes queued stack runs from the database, one at a time per stack.

Runs are queued inside the write that made them necessary, so an accepted change is never
lost: after a crash, a restarted portal (or another portal process on the same database)
picks the queued runs up, and runs left `running` by a dead process for longer than
`stale_after` are queued again. Each run applies the latest desired state of its stack, so a
stack converges to the newest accepted manifests.
"""

from __future__ import annotations

import json
import os
import socket
import threading
import time
from datetime import timedelta
from pathlib import Path

from sqlalchemy import select

from automation.portal.service import load_fleet
from automation.portal.store import Store, now, runs
from automation.runner import AutomationError
from automation.stacks import StackSpec, desired_state
from fleet.stack_id import StackId
from automation.state import replica_from_dict


class Worker(threading.Thread):
    def __init__(self, store: Store, data_dir: Path, interval: float = 1.0, stale_after: float = 900.0):
        super().__init__(daemon=True, name="modelplane-apply-worker")
        self.store = store
        self.data_dir = Path(data_dir)
        self.interval = interval
        self.stale_after = stale_after
        self.id = f"{socket.gethostname()}-{os.getpid()}"
        self.stopping = threading.Event()

    def stop(self) -> None:
        self.stopping.set()

    def recover(self) -> int:
        """Queue again the runs a dead process left running."""
        cutoff = now() - timedelta(seconds=self.stale_after)
        with self.store.write() as conn:
            result = conn.execute(runs.update().where(runs.c.status == "running", runs.c.started_at < cutoff)
                                  .values(status="queued", worker=None, log=runs.c.log + "requeued: its worker stopped\n"))
            return result.rowcount or 0

    def claim(self) -> dict | None:
        with self.store.write() as conn:
            busy = {r[0] for r in conn.execute(select(runs.c.stack).where(runs.c.status == "running"))}
            for row in conn.execute(select(runs).where(runs.c.status == "queued").order_by(runs.c.id)).mappings():
                if row["stack"] in busy:
                    continue
                conn.execute(runs.update().where(runs.c.id == row["id"]).values(
                    status="running", started_at=now(), worker=self.id))
                return dict(row)
        return None

    def _append(self, run_id: int, lines: list[str]) -> None:
        if lines:
            with self.store.write() as conn:
                conn.execute(runs.update().where(runs.c.id == run_id).values(log=runs.c.log + "".join(lines)))

    def _finish(self, run: dict, ok: bool, message: str, fingerprint: str | None = None,
                outputs: dict | None = None) -> None:
        with self.store.write() as conn:
            conn.execute(runs.update().where(runs.c.id == run["id"]).values(
                status="succeeded" if ok else "failed", finished_at=now(), log=runs.c.log + message + "\n"))
            if ok:
                applied = json.loads(self.store.get_state(conn, "applied") or "{}")
                if run["operation"] == "destroy":
                    applied.pop(run["stack"], None)
                else:
                    applied[run["stack"]] = fingerprint
                self.store.set_state(conn, "applied", json.dumps(applied))
                cluster = StackId.parse(run["stack"]).cluster
                if cluster is not None:  # a platform stack: its gateway makes replica endpoints real
                    gateways = json.loads(self.store.get_state(conn, "clusterGateways") or "{}")
                    address = (outputs or {}).get("gatewayAddress")
                    if run["operation"] == "destroy" or not address:
                        gateways.pop(cluster, None)
                    else:
                        gateways[cluster] = address
                    self.store.set_state(conn, "clusterGateways", json.dumps(gateways))

    def execute(self, run: dict) -> None:
        from automation.pulumi_runner import PulumiRunner

        with self.store.read() as conn:
            fleet = load_fleet(self.store.list(conn))
            reserved = [replica_from_dict(p) for p in json.loads(self.store.get_state(conn, "placements") or "[]")]
        spec = desired_state(fleet, reserved).specs.get(run["stack"])
        operation = run["operation"]
        target = spec if spec is not None and operation == "up" else StackSpec.for_deletion(StackId.parse(run["stack"]))
        pending: list[str] = []
        last_flush = time.monotonic()

        def on_event(event: dict) -> None:
            nonlocal last_flush
            pending.append(json.dumps(event, default=str) + "\n")
            if time.monotonic() - last_flush > 1.0:
                self._append(run["id"], pending[:])
                pending.clear()
                last_flush = time.monotonic()

        try:
            runner = PulumiRunner(self.data_dir, fleet)
            result = runner.run(operation, target, on_event)
        except AutomationError as exc:
            self._append(run["id"], pending)
            self._finish(run, False, f"error: {exc}")
            return
        except Exception as exc:  # a bug of ours: the run fails with the reason, the worker goes on
            self._append(run["id"], pending)
            self._finish(run, False, f"internal error: {type(exc).__name__}: {exc}")
            return
        self._append(run["id"], pending)
        if result.ok:
            self._finish(run, True, f"{operation} succeeded: {result.changes}", spec.fingerprint if spec else None,
                         result.outputs)
        else:
            self._finish(run, False, f"error: {result.error}")

    def run(self) -> None:
        self.recover()
        while not self.stopping.wait(self.interval):
            while (job := self.claim()) is not None and not self.stopping.is_set():
                self.execute(job)
