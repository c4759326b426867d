"""The full replan after writes that placed one deployment each, in the background.

A write to a ModelDeployment is placed inside its request (automation/portal/placing.py) and marks the fleet
as wanting a replan. This thread then plans the whole fleet from a consistent read of the database, outside
the write lock (the planning takes seconds at fleet scale, and writes must not wait for it). Writes placed
meanwhile stay pending for the next replan, and the rest is stored if the replan moves no reservation they may
have relied on; otherwise it plans again. Writes that come together are planned once, and replans start at
most every 2 s (its worker process also runs at a lower priority than the portal): under a stream of writes,
the replan is background work that requests do not wait for. Writes that waited more
than 30 s are planned inside the write lock, so a stream of writes contending for capacity cannot starve it.

What it stores: the plan and the status snapshot, each deployment's row (no longer pending; where the full plan
places a deployment differently from its write, which only competition for freed capacity causes, the full plan
wins and the ledger follows), the desired fingerprints, and the stack runs to queue.
"""

from __future__ import annotations

import logging
import threading
import time
from typing import Callable

from sqlalchemy.engine import Connection

from automation.portal.placing import Placing
from automation.portal.service import commit, compute_for, compute_replan, replan_inputs
from automation.portal.state import PLANNED, RESOURCE_VERSION
from automation.portal.store import Store, StoreBusy

log = logging.getLogger("modelplane.portal")

GATHER = 0.2  # seconds writes are given to come together before one replan plans them all
INTERVAL = 2.0  # seconds from the start of one replan to the next: a stream of writes is planned in batches
MAX_LAG = 30.0  # seconds writes may wait to be planned after before a replan is made inside the write lock


class Replanner:
    def __init__(self, store: Store, apply: bool, placing: Placing, compute: Callable | None = None,
                 gather: float = GATHER, interval: float = INTERVAL):
        self._store, self._apply, self._placing = store, apply, placing
        self._compute = compute or compute_replan
        self._gather = gather
        self._interval = interval
        self._last = 0.0  # when the last replan started
        self._changed = threading.Condition()
        self._wanted = 0  # writes that asked for a replan
        self._planned = 0  # of those, how many a stored replan has planned after
        self._stopped = False
        self._thread = threading.Thread(target=self._loop, daemon=True, name="portal-replanner")
        self._thread.start()
        with store.read() as conn:
            if store.pending_marker(conn)[0]:  # accepted before a crash, never planned after: plan now
                self.want()

    def want(self) -> None:
        """A committed write placed one deployment: plan the fleet after it."""
        with self._changed:
            self._wanted += 1
            self._changed.notify_all()

    def planned(self) -> None:
        """A full replan was stored inside a write (after every earlier write): nothing is waiting for one."""
        with self._changed:
            self._planned = self._wanted
            self._changed.notify_all()

    def settle(self, timeout: float = 60.0) -> bool:
        """Wait until every write made so far has been planned after (tests, and a graceful stop)."""
        deadline = time.monotonic() + timeout
        with self._changed:
            target = self._wanted
            while self._planned < target:
                left = deadline - time.monotonic()
                if left <= 0:
                    return False
                self._changed.wait(left)
        return True

    def stop(self) -> None:
        with self._changed:
            self._stopped = True
            self._changed.notify_all()
        self._thread.join(timeout=5)

    def _warm(self) -> None:
        """Load the fleet and its ledger for the first write now, not inside it."""
        try:
            with self._placing.write(self._store) as conn:
                self._placing.sync(self._store, conn)
        except Exception:  # a write will load them instead
            log.exception("could not load the fleet's ledger at start-up")

    def _loop(self) -> None:
        self._warm()
        waiting_since: float | None = None
        while True:
            with self._changed:
                while self._planned >= self._wanted and not self._stopped:
                    self._changed.wait()
                if self._stopped:
                    return
            waiting_since = waiting_since or time.monotonic()
            time.sleep(max(self._gather, self._last + self._interval - time.monotonic()))
            with self._changed:
                target = self._wanted
            self._last = time.monotonic()
            try:
                stored = self._replan(inside_lock=time.monotonic() - waiting_since > MAX_LAG)
            except StoreBusy:
                stored = False
            except Exception:  # a bug of ours or a database outage: logged, and tried again
                log.exception("the background replan failed; retrying")
                time.sleep(1.0)
                continue
            if not stored:
                continue
            waiting_since = None
            with self._changed:
                self._planned = max(self._planned, target)
                self._changed.notify_all()

    def _replan(self, inside_lock: bool) -> bool:
        """Plan the fleet and store the result; False if a newer one is stored or writes since could not be kept."""
        store = self._store
        if not inside_lock:
            with store.read() as conn:
                seen = self._versions(conn)
                inputs = replan_inputs(store, conn, self._apply, quotas=self._placing.quotas())
            result = self._compute(*inputs)
        # the ledger in memory may follow this transaction: if it does not commit, it loads the stored one again
        with store.write(on_rollback=self._placing.forget) as conn:
            planned_at = None
            if inside_lock:
                result = compute_for(store, conn, self._apply, self._compute, quotas=self._placing.quotas())
            elif self._versions(conn) != seen:  # writes came in since the fleet was read
                if PLANNED.get(conn) > seen[0]:
                    return False  # a replan inside a write stored a newer plan already
                planned_at = seen[0]
            before = store.ledger_version(conn)
            changed = commit(store, conn, result, planned_at)
            if changed is None:
                return False  # the replan moves reservations that writes since may have relied on: plan again
            if changed:
                self._placing.reconciled(store, conn, before, changed)
        if result.problems:  # accepted writes whose fleet renders objects a cluster rejects: nothing is applied
            log.warning("the fleet renders objects a cluster would reject; no stack run is queued: %s",
                        "; ".join(result.problems[:3]))
        return True

    def _versions(self, conn: Connection) -> tuple[int, int]:
        return RESOURCE_VERSION.get(conn), self._store.ledger_version(conn)
