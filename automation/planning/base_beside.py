"""A comparison's base loaded and planned in a forked process while the command loads and plans the head.

`plan --against BASE` with no kept summary of BASE (every fresh CI runner) plans two fleets. With a second CPU, the
base is loaded, looked up in the cache by its objects, scheduled and given its stacks' input digests in a child
forked before the head is loaded, so that the two fleets are never in one heap (a child forked with a fleet in its
parent's memory copies every page of it the two touch: about as much time as the child saves). The parent plans the
head meanwhile, then sends which stacks have the same inputs on both sides, and the child sends back the base's
summary (compare.BasePlan does the same work in one process, and is the reference this is tested against).

The child's notes and problems about the base are said by the parent, after the head's, as when the base is loaded
after the head in one process; an exception in the child (an invalid base exits) is raised in the parent.
"""

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
    """The base in its child process (compare.BaseSide once `planned`). `load` is called in the child; the rest is
    what compare.Base holds."""

    def __init__(self, load: Callable[[], Fleet], recorded: list, cache: BaseCache | None,
                 control_plane: str | None, gateways: Gateways | None):
        import multiprocessing

        context = multiprocessing.get_context("fork")
        self._conn, theirs = context.Pipe()
        self._process = context.Process(target=_child, args=(theirs, load, recorded, cache, control_plane, gateways),
                                        daemon=True, name="modelplane base")
        self._process.start()
        theirs.close()
        self._done = False

    def _receive(self) -> Any:
        try:
            kind, value, said = self._conn.recv()
        except EOFError:
            self._process.join()
            raise RuntimeError(f"the process planning the base ended without an answer (exit code "
                               f"{self._process.exitcode})") from None
        if said:
            sys.stderr.write(said)
        if kind == "error":
            raise value
        return value

    def loaded(self) -> tuple[BaseSummary | None, str]:
        """The summary kept in the cache for the base's objects (None: none kept), and its key (base_cache.base_key)."""
        return self._receive()

    def planned(self) -> BaseBeside:
        """This, planning the base (at once when no summary was kept; else from now)."""
        self._conn.send("plan")
        return self

    def inputs(self) -> tuple[dict[str, str], str]:
        return self._receive()

    def summarise(self, same: set[str], platform_same: bool) -> None:
        self._conn.send((same, platform_same))

    def summary(self) -> BaseSummary:
        summary = self._receive()
        self._done = True
        return summary

    def close(self) -> None:
        self._conn.close()
        if not self._done:  # the head failed, or needed no plan of the base: its work is not wanted
            self._process.terminate()
        self._process.join()


def _child(conn: Connection, load: Callable[[], Fleet], recorded: list, cache: BaseCache | None,
           control_plane: str | None, gateways: Gateways | None) -> None:
    """Load the base, send its kept summary (if any) and key; once asked, plan it (`BasePlan`), send its inputs,
    receive which of its stacks the head has the same, send its summary. What it says goes with what it sends, and
    an exception in place of what was due."""
    from automation.planning.base_cache import base_key
    from automation.planning.compare import BasePlan
    from components.args import preferred_control_plane
    from fleet.scheduler import PlanMemo

    said = sys.stderr = io.StringIO()

    def send(kind: str, value: Any) -> None:
        conn.send((kind, value, said.getvalue()))
        said.seek(0)
        said.truncate()

    try:
        fleet = load()
        key = base_key(fleet, recorded, control_plane, gateways)
        kept = cache.get(key) if cache is not None else None
        send("loaded", (kept, key))
        if kept is not None:
            conn.recv()  # asked to plan, or the end of the pipe (EOFError): the kept summary sufficed
        base = BasePlan(fleet, recorded, PlanMemo(), preferred_control_plane(fleet, control_plane), gateways)
        send("inputs", base.inputs())
        if kept is None:
            conn.recv()  # "plan", sent before
        base.summarise(*conn.recv())
        send("summary", base.summary())
    except EOFError:  # the parent stopped waiting
        pass
    except BaseException as e:  # noqa: BLE001 - every failure, SystemExit included, is the parent's to raise
        try:
            send("error", e)
        except Exception:  # an exception that does not pickle: its words
            send("error", RuntimeError(f"{type(e).__name__}: {e}"))
    finally:
        conn.close()
