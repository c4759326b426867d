"""The portal's writes in a process of their own, so that their CPU never holds the interpreter that serves reads.

A write is mostly Python: validating the body, placing the deployment against the fleet's capacity ledger,
composing and checking its stacks (about 10 ms at 2,000 deployments). In the process that answers reads it took
a third of the interpreter under a stream of writes, and reads slowed 2.6x. `serve` therefore starts one writer
process that holds the ledger (`placing.py`) and the background replanner (`replanner.py`, which plans in a process
of its own, `replan_worker.py`); the portal's write verbs are called there with the request's plain arguments, one
at a time (the write queue, `writes.py`, already serializes them), and answer or raise as they would here. Reads
stay in the serving process and see each write as soon as it commits: both open the same database, and the read
cache watches its marker (`Store.marker`), which moves with any connection's commit.

A writer that dies is replaced. A write it had not begun is sent to the new one (certain not to have run: the pool
knew its writer was gone before taking it, or the writer had not marked it begun); the write it was running is
answered 503 (its transaction was not committed, or committed just before: the client reads the object back, as
after any lost answer).
"""

from __future__ import annotations

import logging
import os
import threading
from concurrent.futures.process import BrokenProcessPool
from pathlib import Path
from typing import Any

from automation.portal.service import ApiError

log = logging.getLogger("modelplane.portal")

_portal: Any = None  # in the writer process: the Portal whose write verbs run there
_begun: Any = None  # in the writer process: where it marks each write it begins (WriteWorker._begun)


class WriteWorker:
    """The serving process's handle on the writer process."""

    def __init__(self, database: str, tokens_file: Path, apply: bool):
        import multiprocessing
        from concurrent.futures import ProcessPoolExecutor

        context = multiprocessing.get_context("spawn")
        # the number of the last write a writer began, written by it before the write does anything
        self._begun = context.RawValue("q", 0)
        # spawned, not forked: the serving process has threads (a fork could copy a lock held by one of them)
        self._new = lambda: ProcessPoolExecutor(max_workers=1, mp_context=context, initializer=_start, initargs=(
            database, str(tokens_file), apply, os.getpid(), self._begun))
        self._pool = self._new()
        self._replacing = threading.Lock()
        self._sending = threading.Lock()
        self._sent = 0  # the number of the last write sent (one writer runs them in the order sent)
        self._pool.submit(int).result()  # started (imports, the replanner) before the portal listens

    def call(self, verb: str, args: tuple, kwargs: dict) -> Any:
        for _attempt in range(2):  # a write the dead writer never began goes to the new one, once
            pool = self._pool
            with self._sending:
                self._sent += 1
                number = self._sent
                try:
                    future = pool.submit(_write, number, verb, args, kwargs)
                except BrokenProcessPool:  # the pool knew: its writer died while idle, and nothing was sent
                    self._replace(pool)
                    continue
            try:
                return future.result()
            except BrokenProcessPool:
                self._replace(pool)
                if self._begun.value < number:  # the writer died before it began this write
                    continue
                raise ApiError(503, "ServiceUnavailable", "the portal's writer stopped during this write; it may or "
                                                          "may not have been stored: read the object back, then retry",
                               headers={"Retry-After": "1"}) from None
        raise ApiError(503, "ServiceUnavailable", "the portal's writer stopped twice before this write began; it was "
                                                  "not stored: retry", headers={"Retry-After": "1"})

    def _replace(self, broken: Any) -> None:
        with self._replacing:
            if self._pool is broken:  # not already replaced by another caller
                log.error("the writer process died; starting another")
                self._pool = self._new()

    def reload_tokens(self) -> None:
        """The tokens file changed (SIGHUP): the writer reads its quotas again. Called from a signal handler, so it
        never raises: a writer that is gone reads the file afresh when it is replaced."""
        try:
            self._pool.submit(_reload_tokens)
        except (BrokenProcessPool, RuntimeError):  # dead, or shut down while the portal stops
            pass

    def close(self) -> None:
        self._pool.shutdown(wait=True, cancel_futures=True)


def _start(database: str, tokens_file: str, apply: bool, parent: int, begun: Any) -> None:
    global _portal, _begun
    _begun = begun
    from automation.portal.replan_worker import ReplanWorker, fewer_collections, watch_parent
    from automation.portal.auth import TokensFile
    from automation.portal.portal import Portal
    from automation.portal.store import Store

    watch_parent(parent, "writer-parent-watch")
    fewer_collections()  # this process holds the fleet and its capacity ledger
    _portal = Portal(Store(database), TokensFile(Path(tokens_file)), apply, ReplanWorker())


def _write(number: int, verb: str, args: tuple, kwargs: dict) -> Any:
    _begun.value = number
    return getattr(_portal.writes, verb)(*args, **kwargs)


def _reload_tokens() -> None:
    _portal.tokens.reload()
