"""A progress bar for long commands run by a person: `render --out`, `preview --offline`, `up`, `destroy`; and the
progress of stacks as they run (`progress`: a line per stack event, or JSON lines).

Shown on stderr only when stderr is a terminal and the output is not JSON, so logs, pipes and CI stay
exactly as they were. rich draws it (a dependency already, for tables); it is transient, leaving only
the command's own lines behind.
"""

from __future__ import annotations

import json
import sys
import threading
from typing import IO, TYPE_CHECKING, Any, Callable

import click

from automation.execution.run_status import RunStatus

if TYPE_CHECKING:
    from rich.progress import Progress


class Bar:
    """`with Bar("writing stacks", total) as bar: ... bar.advance()`; does nothing when not shown. A total not known
    yet is None (`expect` gives it)."""

    def __init__(self, label: str, total: int | None, output: str = "table", stream: IO[str] | None = None,
                 force: bool | None = None):
        stream = stream if stream is not None else sys.stderr
        shown = force if force is not None else (output != "json" and total != 0 and stream.isatty())
        self._progress: Progress | None = None
        if shown:  # rich (20 ms to import) only when a person watches
            from rich.console import Console
            from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

            self._progress = Progress(TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(),
                                      TimeElapsedColumn(), console=Console(file=stream, force_terminal=True),
                                      transient=True)
            self._task = self._progress.add_task(label, total=total)

    @property
    def shown(self) -> bool:
        return self._progress is not None

    def advance(self, steps: int = 1) -> None:
        if self._progress is not None:
            self._progress.advance(self._task, steps)

    def expect(self, total: int) -> None:
        if self._progress is not None:
            self._progress.update(self._task, total=total)

    def print(self, line: str, err: bool = False) -> None:
        """A line above the bar (while it is shown, lines must go through it to keep the screen tidy)."""
        if self._progress is not None:
            self._progress.console.print(line, markup=False, highlight=False, soft_wrap=True,
                                         style="red" if err else None)

    def __enter__(self) -> Bar:
        if self._progress is not None:
            self._progress.start()
        return self

    def __exit__(self, *exc) -> None:
        if self._progress is not None:
            self._progress.stop()


def progress(output: str, bar: Bar | None = None, resources: bool = False) -> Callable[[dict[str, Any]], None]:
    """Progress for people (one line per stack event, and `bar` counting finished stacks on a terminal), or JSON
    lines with -o json. Each resource's step only with `resources` (`up -v`): a fleet's first `up` is thousands of
    them, and a stack's summary line counts them."""
    lock = threading.Lock()

    def echo(line: str, err: bool = False) -> None:
        if bar is not None and bar.shown:
            bar.print(line, err)
        else:
            click.echo(line, err=err)

    def emit(event: dict[str, Any]) -> None:
        with lock:
            if output == "json":
                click.echo(json.dumps(event, default=str))
                return
            kind = event.get("type")
            if bar is not None and kind in (RunStatus.succeeded, RunStatus.failed, RunStatus.cancelled, RunStatus.skipped):
                bar.advance()
            if kind == "resource":
                if resources:
                    echo(f"  [{event['stack']}] {event.get('op')} {event.get('urn', '').rsplit('::', 1)[-1]}")
            elif kind == "diagnostic":
                echo(f"  [{event['stack']}] {event['severity']}: {event['message']}", err=True)
            elif kind == "start":
                echo(f"[{event['stack']}] {event['operation']} ...")
            elif kind == RunStatus.succeeded:
                counts = (", ".join(f"{k} {v}" for k, v in sorted((event.get("changes") or {}).items()))
                          or event.get("summary") or "no changes")
                echo(f"[{event['stack']}] done: {counts}")
            elif kind in (RunStatus.failed, RunStatus.cancelled):
                echo(f"[{event['stack']}] {kind}: {event.get('error')}", err=True)
            elif kind == RunStatus.skipped:
                echo(f"[{event['stack']}] skipped: {event.get('reason')}", err=True)
    return emit
