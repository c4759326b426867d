"""The portal's replan in a process of its own (`ReplanWorker`), and what the portal's helper processes share:
fewer cycle collections, and exiting with the process that started them."""

from __future__ import annotations

import logging
import os
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from automation.portal.service import ReplanResult

log = logging.getLogger("modelplane.portal")


class ReplanWorker:
    """The fleet replan in a process of its own: planning is CPU-bound Python, and in the portal's process it
    would hold the interpreter lock that reads need (measured: reads 2x slower under 4 writers without it).
    A worker that dies is replaced, and that one replan runs in the calling thread."""

    def __init__(self) -> None:
        import multiprocessing
        from concurrent.futures import ProcessPoolExecutor

        self._new = lambda: ProcessPoolExecutor(max_workers=1, mp_context=multiprocessing.get_context("spawn"),
                                                initializer=_import_planner, initargs=(os.getpid(),))
        self._pool = self._new()
        self._pool.submit(int)  # start the process (and its imports) now, not on the first write

    def __call__(self, *inputs: Any) -> ReplanResult:
        from concurrent.futures.process import BrokenProcessPool

        from automation.portal.service import compute_replan

        try:
            return self._pool.submit(compute_replan, *inputs).result()
        except BrokenProcessPool:
            log.error("the replan worker died; starting another")
            self._pool = self._new()
            return compute_replan(*inputs)

    def close(self) -> None:
        self._pool.shutdown(wait=False, cancel_futures=True)


BACKGROUND_NICENESS = 10  # the replan worker's scheduling priority below the portal's
YOUNG_OBJECTS = 100_000  # allocations between young collections (Python's default: 700)


def fewer_collections() -> None:
    """A replan allocates millions of short-lived objects while holding the fleet (hundreds of thousands of live
    ones): with the default threshold the cycle collector runs thousands of times a replan and re-scans the fleet,
    half of a replan's time at 2,000 deployments. Collecting young objects every 100,000 allocations instead costs
    a few megabytes between collections; refcounting still frees everything else at once."""
    import gc

    _, middle, old = gc.get_threshold()
    gc.set_threshold(YOUNG_OBJECTS, middle, old)


def _import_planner(parent: int) -> None:
    """`parent`: the portal's pid, given by the portal itself (read here, it could already be init's, when the
    portal died while this process started)."""
    import automation.portal.service  # noqa: F401  (the planner's imports, paid once per worker process)

    fewer_collections()
    try:  # the fleet's replan is background work: requests come first when CPUs are short
        os.nice(BACKGROUND_NICENESS)
    except OSError:
        pass
    watch_parent(parent, "replan-worker-parent-watch")


def watch_parent(parent: int, name: str) -> None:
    """A portal killed without its shutdown (SIGKILL, a crash) leaves no orphan: this process exits when `parent`
    is gone."""
    import threading
    import time

    def exit_with_parent() -> None:
        while os.getppid() == parent:
            time.sleep(1.0)
        os._exit(0)

    threading.Thread(target=exit_with_parent, daemon=True, name=name).start()
