"""A comparison's base loaded and planned in a forked process while the command loads and plans the head.

`plan --against BASE` with no kept summary of BASE (every fresh CI runner) plans two fleets. With a second CPU, the
base is loaded, scheduled and given its stacks' input digests in a child forked before the head is loaded, so that
the two fleets are never in one heap (a child forked with a fleet in its parent's memory copies every page of it
the two touch: about as much time as the child saves). The parent plans the head meanwhile, then sends which stacks
have the same inputs on both sides, and the child sends back the base's summary and its cache key
(base_plan.BasePlan does the same work in one process, and is the reference this is tested against). A base whose
summary is kept is not forked: its files' key finds it first (cli/base.py `summarised_base`); the key of its
objects, which in one process also finds a summary kept for other bytes of the same objects, is only written here.

The child's notes and problems about the base are said by the parent, after the head's, as when the base is loaded
after the head in one process; an exception in the child (an invalid base exits) is raised in the parent."""

from __future__ import annotations

import io
import sys
from typing import TYPE_CHECKING, Any, Callable

if TYPE_CHECKING:
    from multiprocessing.connection import Connection

    from automation.planning.base_cache import BaseSummary
    from fleet.validate import Fleet
    from workloads.gateways import Gateways


class BaseBeside:
    """The base in its child process (base_plan.BaseSide); `key` its cache key once its summary came. `load` is called
    in the child; the rest is what compare.Base holds."""

    def __init__(self, load: Callable[[], Fleet], recorded: list, control_plane: str | None,
                 gateways: Gateways | None):
        import multiprocessing

        context = multiprocessing.get_context("fork")
        self._conn, theirs = context.Pipe()
        self._process = context.Process(target=_child, args=(theirs, load, recorded, control_plane, gateways),
                                        daemon=True, name="modelplane base")
        self._process.start()
        theirs.close()
        self._done = False
        self.key = ""

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

    def inputs(self) -> tuple[dict[str, str], str]:
        return self._receive()

    def summarise(self, same: set[str], platform_same: bool) -> None:
        self._conn.send((same, platform_same))

    def summary(self) -> BaseSummary:
        summary, self.key = self._receive()
        self._done = True
        return summary

    def close(self) -> None:
        self._conn.close()
        if not self._done:  # the head failed: the base's plan is not wanted
            self._process.terminate()
        self._process.join()


def _child(conn: Connection, load: Callable[[], Fleet], recorded: list, control_plane: str | None,
           gateways: Gateways | None) -> None:
    """Load the base, plan it (`BasePlan`), send its inputs, receive which of its stacks the head has the same, send
    its summary and cache key (base_cache.base_key, hashed while the head is planned). What it says goes with what it
    sends, and an exception in place of what was due."""
    from automation.planning.base_cache import base_key
    from automation.planning.base_plan import BasePlan
    from components.args import preferred_control_plane
    from fleet.scheduler import PlanMemo

    said = sys.stderr = io.StringIO()

    def send(kind: str, value: Any) -> None:
        conn.send((kind, value, said.getvalue()))
        said.seek(0)
        said.truncate()

    try:
        fleet = load()
        base = BasePlan(fleet, recorded, PlanMemo(), preferred_control_plane(fleet, control_plane), gateways)
        send("inputs", base.inputs())
        key = base_key(fleet, recorded, control_plane, gateways)
        base.summarise(*conn.recv())
        send("summary", (base.summary(), key))
    except EOFError:  # the parent stopped waiting
        pass
    except BaseException as e:  # noqa: BLE001 - every failure, SystemExit included, is the parent's to raise
        try:
            send("error", e)
        except Exception:  # an exception that does not pickle: its words
            send("error", RuntimeError(f"{type(e).__name__}: {e}"))
    finally:
        conn.close()
