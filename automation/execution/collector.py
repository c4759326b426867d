"""The cyclic collector while stacks run: what the command built before is frozen, and the runs' garbage collected
every few runs.

A stack's program run in this process (the automation API's language server) leaves its resources, their outputs
and the outputs' asyncio tasks as cyclic garbage. `modelplane` tunes the collector for batch commands
(automation/cli/console.py), and on a heap of a large fleet's size full collections then come rarely: dead tasks
pile up (3,900 to 18,000 over a 200 x 60 `up`), and the Pulumi SDK walks every task alive in the process as each
program ends (`asyncio.all_tasks`), so each run costs more than the one before (at 2,000 x 500, 23% of the first
`up`'s samples). So while stacks run, the objects that were there before are frozen (not scanned until the runs
end), and every `EVERY` finished runs the rest is collected: those runs' garbage and the live state of the runs in
progress, not the fleet.
"""

from __future__ import annotations

import gc
import threading

EVERY = 16  # finished runs between two collections: a bound on the dead tasks each program's end walks

_lock = threading.Lock()
_depth = 0  # batches running in this process: the heap is frozen by the first and given back by the last


class RunsCollector:
    """`with RunsCollector() as c:` around a batch of runs, `c.finished()` after each."""

    def __init__(self) -> None:
        self._finished = 0

    def __enter__(self) -> RunsCollector:
        global _depth
        with _lock:
            if _depth == 0:
                gc.freeze()
            _depth += 1
        return self

    def finished(self) -> None:
        self._finished += 1
        if self._finished % EVERY == 0:
            gc.collect()

    def __exit__(self, *_exc: object) -> None:
        global _depth
        with _lock:
            _depth -= 1
            if _depth == 0:
                gc.unfreeze()  # a process that lives on (the portal) collects them again from now on
