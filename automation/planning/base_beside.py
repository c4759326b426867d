"""A comparison's base loaded and planned in a forked process while the command loads and plans the head.

`plan --against BASE` with no kept summary of BASE (every fresh CI runner) plans two fleets. With a second CPU, the
base is loaded, scheduled and given its stacks' input digests in a child forked before the head is loaded, so that
the two fleets are never in one heap (a child forked with a fleet in its parent's memory copies every page of it
the two touch: about as much time as the child saves). The parent plans the head meanwhile, then sends which stacks
have the same inputs on both sides, and the child sends back the base's summary and its cache key
(base_plan.BasePlan does the same work in one process, and is the reference this is tested against). A base whose
summary is kept is not forked: its files' key finds it first (cli/base.py `summarised_base`). The key of its
objects, which in one process finds a summary kept for other bytes of the same objects before the base is planned,
is hashed here once the inputs are sent (hashed first, it kept the head waiting): a summary kept under it then only
completes the one the child keeps, as a kept summary that lacked a fingerprint is completed in one process.

The child's notes and problems about the base are said by the parent, after the head's, as when the base is loaded
after the head in one process; an exception in the child (an invalid base exits) is raised in the parent, or its
words when it cannot be read back. The child holds no copy of the parent's end of the pipe, so a parent gone
without a word (killed) ends its wait; the parent stops it when the head fails."""

from __future__ import annotations

import io
import sys
from typing import TYPE_CHECKING, Any, Callable

if TYPE_CHECKING:
    from multiprocessing.connection import Connection

    from automation.planning.base_cache import BaseCache, BaseSummary
    from fleet.validate import Fleet
    from workloads.gateways import Gateways


class BaseBeside:
    """The base in its child process (base_plan.BaseSide); `key` its cache key once its summary came. `load` is called
    in the child; the rest is what compare.Base holds."""

    def __init__(self, load: Callable[[], Fleet], recorded: list, control_plane: str | None,
                 gateways: Gateways | None, cache: BaseCache | None = None):
        import multiprocessing

        context = multiprocessing.get_context("fork")
        self._conn, theirs = context.Pipe()
        self._process = context.Process(target=_child, args=(theirs, self._conn, load, recorded, control_plane,
                                                             gateways, cache), daemon=True, name="modelplane base")
        self._process.start()
        theirs.close()
        self._done = False
        self.key = ""  # the base's cache key (base_cache.base_key), once its summary came
        self.kept: BaseSummary | None = None  # the summary to keep: completed by one kept before under that key

    def _receive(self) -> Any:
        try:
            kind, value, said = self._conn.recv()
        except (EOFError, OSError):  # its end closed, or reset (it died with our message unread)
            self._process.join()
            raise RuntimeError(f"the process planning the base ended without an answer (exit code "
                               f"{self._process.exitcode})") from None
        if said:
            sys.stderr.write(said)
        if kind == "error":
            raise value
        return value

    def inputs(self) -> tuple[dict[str, str], str]:
        return self._receive()

    def summarise(self, same: set[str], platform_same: bool) -> None:
        try:
            self._conn.send((same, platform_same))
        except OSError:  # the child is gone: `summary` says why (its error, or its end)
            pass

    def summary(self) -> BaseSummary:
        summary, self.key, self.kept = self._receive()
        self._done = True
        return summary

    def close(self) -> None:
        """Stop the child (at once, unless it sent its summary) and wait for it; again: nothing more."""
        self._conn.close()
        if not self._done:  # the head failed: the base's plan is not wanted
            self._process.terminate()
        self._process.join()


def _child(conn: Connection, theirs: Connection, load: Callable[[], Fleet], recorded: list, control_plane: str | None,
           gateways: Gateways | None, cache: BaseCache | None) -> None:
    """Load the base, plan it (`BasePlan`), send its inputs, receive which of its stacks the head has the same, send
    its summary, its cache key (base_cache.base_key, hashed while the head is planned) and the summary to keep (the
    one kept under that key, if any, completes it, as in one process). What it says goes with what it sends, and an
    exception in place of what was due. `theirs`: the parent's end, closed here, so that the parent's exit (even
    killed) ends the child's wait."""
    import pickle

    from automation.planning.base_cache import base_key
    from automation.planning.base_plan import BasePlan
    from automation.planning.stacks import Host
    from components.args import preferred_control_plane
    from fleet.scheduler import PlanMemo

    theirs.close()
    said = sys.stderr = io.StringIO()

    class Gone(Exception):
        """The parent stopped waiting, or is gone."""

    def send(kind: str, value: Any) -> None:
        try:
            conn.send((kind, value, said.getvalue()))
        except OSError:
            raise Gone from None
        said.seek(0)
        said.truncate()

    def receive() -> Any:
        try:
            return conn.recv()
        except (EOFError, OSError):
            raise Gone from None

    try:
        fleet = load()
        base = BasePlan(fleet, recorded, PlanMemo(), Host(preferred_control_plane(fleet, control_plane)), gateways)
        send("inputs", base.inputs())
        key = base_key(fleet, recorded, control_plane, gateways)
        kept = cache.get(key) if cache is not None else None
        base.summarise(*receive())
        summary = base.summary()
        send("summary", (summary, key, summary.completed_by(kept) if kept is not None else summary))
    except Gone:
        pass
    except BaseException as e:  # noqa: BLE001 - every failure, SystemExit included, is the parent's to raise
        try:  # what the parent can read back: it pickles, and its class takes what unpickling gives it; else its words
            pickle.dumps(e)
            type(e)(*e.args)  # an exception is unpickled by calling its class with its args
        except Exception:
            e = RuntimeError(f"{type(e).__name__}: {e}")
        try:
            send("error", e)
        except Gone:
            pass
    finally:
        conn.close()
