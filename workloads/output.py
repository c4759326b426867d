"""Write rendered stacks to a folder: DIR/<stack>/<target>/<kind>-<name>.yaml, all or nothing.

The folder is replaced as a whole (written beside it, then swapped in), so a reader never
sees a mix of two renders; a folder that modelplane did not write is never overwritten, and the
only folders ever removed are the ones this render created (never a sibling that merely has a
telling name). The result has the mode a `mkdir` would give it, not the 0700 of a temporary folder.
"""

from __future__ import annotations

import os
import shutil
import stat
import tempfile
from contextlib import contextmanager
from pathlib import Path
from typing import Callable, Iterator

from fleet.errors import ModelplaneError
from fleet.loader import RENDER_MARKER
from workloads.yamlio import dump_fast as dump

MARKER = RENDER_MARKER


class OutputError(ModelplaneError):
    pass


class InvalidObjects(ModelplaneError):
    """Objects their schema rejects, found while writing: nothing was written. One line each, in render order."""

    def __init__(self, problems: list[str]):
        super().__init__(f"{len(problems)} invalid object(s)")
        self.problems = problems


def file_name(obj: dict) -> str:
    return f"{obj['kind'].lower()}-{obj['metadata']['name']}.yaml"


def stream(rendered) -> str:
    """Every object as one YAML stream (`render --out -`), in the order of the folder layout."""
    return "".join(f"---\n# {stack} / {target}\n{dump(obj)}" for stack, target, obj in rendered.objects())


PARALLEL_FROM = 2000  # objects: below this, forking costs more than it saves
CHUNK = 500  # objects a writer process takes at a time (and the progress display's step)
# what forked writers inherit instead of receiving a copy: (path, object, "stack/target"), and the check
_WRITING: tuple[list[tuple[str, dict, str]], Callable[[dict], list[str]] | None] | None = None


def _write_range(bounds: tuple[int, int]) -> tuple[int, list[str]]:
    """Check and write objects [start, end): (how many, their problems)."""
    assert _WRITING is not None
    planned, check = _WRITING
    problems: list[str] = []
    for path, obj, where in planned[bounds[0]:bounds[1]]:
        if check is not None:
            problems += [f"{where}: {obj['kind']}/{obj['metadata']['name']}: {m}" for m in check(obj)]
        _create(path, dump(obj).encode())
    return bounds[1] - bounds[0], problems


def _create(path: str, data: bytes) -> None:
    """Write a new file (in the staging folder, each path once) without a text layer: at 40,000 files pathlib's
    write_text was a fifth of a writer's time."""
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o666)
    try:
        view = memoryview(data)
        while view:
            view = view[os.write(fd, view):]
    finally:
        os.close(fd)


def write(rendered, out: Path, on_objects: Callable[[int], None] | None = None, jobs: int | None = None,
          check: Callable[[dict], list[str]] | None = None) -> int:
    """Write every object to `out` (replaced as a whole); `on_objects(n)` is called as objects are written (a
    progress bar). Every path is decided, and checked for clashes, before anything is written; large renders are
    written by `jobs` forked processes (default: one per CPU): at 2,000 deployments the schema check, the YAML
    writer and 40,000 file creations are most of a render. The files are the same either way.

    `check`: an object's schema problems; if any object has one, InvalidObjects is raised with them all and
    `out` is left as it was."""
    import multiprocessing
    from concurrent.futures import ProcessPoolExecutor

    global _WRITING
    planned: list[tuple[str, dict, str]] = []  # paths as text: pathlib's joins were a tenth of a large render
    problems: list[str] = []
    with replacing(out, "modelplane render") as staging:
        taken: set[str] = set()
        folders: dict[str, None] = {}
        for stack, target, obj in rendered.objects():
            where = f"{stack}/{target}"
            name = file_name(obj)
            path = f"{staging}/{where}/{name}"
            if path in taken:
                raise OutputError(f"{where}: two objects would be written to {name}")
            taken.add(path)
            folders[f"{staging}/{where}"] = None
            planned.append((path, obj, where))
        for folder in folders:
            os.makedirs(folder, exist_ok=True)
        chunks = [(i, min(i + CHUNK, len(planned))) for i in range(0, len(planned), CHUNK)]
        jobs = min(jobs or os.cpu_count() or 1, 16)
        _WRITING = (planned, check)
        try:
            if jobs > 1 and len(planned) >= PARALLEL_FROM and "fork" in multiprocessing.get_all_start_methods():
                with ProcessPoolExecutor(jobs, mp_context=multiprocessing.get_context("fork")) as pool:
                    done = list(_each(pool.map(_write_range, chunks), on_objects, problems))
            else:
                done = list(_each(map(_write_range, chunks), on_objects, problems))
        finally:
            _WRITING = None
        if problems:
            raise InvalidObjects(problems)
        assert sum(done) == len(planned)
    return len(planned)


def _ours(out: Path) -> bool:
    """A folder modelplane wrote: its marker is a regular file (lstat: a planted link to anywhere is not one)."""
    try:
        return stat.S_ISREG((out / MARKER).lstat().st_mode)
    except FileNotFoundError:
        return False


@contextmanager
def replacing(out: Path, command: str) -> Iterator[Path]:
    """A new folder beside `out`, holding the marker, to fill in the block; it replaces `out` as a whole when the
    block ends without error, and is removed otherwise (`out` then stays as it was). Nothing is ever written
    inside `out` itself, so no link planted there is followed. `out` must be absent, empty, or a folder with
    our marker."""
    out = out.resolve()  # a link in the path the user gave is theirs; links inside the folder are never followed
    if out.exists() and (not out.is_dir() or (any(out.iterdir()) and not _ours(out))):
        raise OutputError(f"{out} exists and was not written by {command}; choose an empty or new folder")
    out.parent.mkdir(parents=True, exist_ok=True)
    staging = Path(tempfile.mkdtemp(prefix=".render-", dir=out.parent))
    mask = os.umask(0)
    os.umask(mask)
    staging.chmod(0o777 & ~mask)
    try:
        _create(str(staging / MARKER), f"written by {command}; the whole folder is replaced each time\n".encode())
        yield staging
        if out.exists():
            graveyard = Path(tempfile.mkdtemp(prefix=".render-old-", dir=out.parent))  # ours alone to remove
            out.rename(graveyard / "previous")
            staging.rename(out)
            shutil.rmtree(graveyard, ignore_errors=True)
        else:
            staging.rename(out)
    finally:
        if staging.exists():
            shutil.rmtree(staging, ignore_errors=True)


def _each(results, on_objects: Callable[[int], None] | None, problems: list[str]):
    """Counts of written chunks, in order, collecting their problems and reporting progress."""
    for count, found in results:
        problems += found
        if on_objects is not None:
            on_objects(count)
        yield count
