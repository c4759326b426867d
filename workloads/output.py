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
from typing import Callable, Iterable, Iterator, NamedTuple

from fleet.errors import ModelplaneError
from fleet.loader import RENDER_MARKER
from workloads.render import Rendered, collisions, keys_of
from workloads.yamlio import dump_fast as dump

MARKER = RENDER_MARKER


class OutputError(ModelplaneError):
    pass


class InvalidObjects(ModelplaneError):
    """Objects their schema rejects, or that two stacks compose, found while writing: nothing was written. One line
    each, in render order (collisions last)."""

    def __init__(self, problems: list[str]):
        super().__init__(f"{len(problems)} invalid object(s)")
        self.problems = problems


def file_name(obj: dict) -> str:
    return f"{obj['kind'].lower()}-{obj['metadata']['name']}.yaml"


def stream(rendered) -> str:
    """Every object as one YAML stream (`render --out -`), in the order of the folder layout."""
    return "".join(f"---\n# {stack} / {target}\n{dump(obj)}" for stack, target, obj in rendered.objects())


PARALLEL_FROM = 2000  # objects: below this, forking costs more than it saves
CHUNK = 500  # objects a writer process takes at a time
PER_REPLICA = 12  # about how many objects a replica has: how a deferred model stack is weighed before it is composed


class _Writing(NamedTuple):
    """What forked writers inherit instead of receiving a copy."""
    staging: str
    rendered: Rendered
    stacks: list[str]  # in render order
    # the planned paths of stacks composed before the fork: (path, object, target) per object; None if deferred
    planned: list[list[tuple[str, dict, str]] | None]
    check: Callable[[dict], list[str]] | None


class _Written(NamedTuple):
    objects: int
    stacks: int
    problems: list[str]
    keys: dict[str, tuple]  # a deferred stack -> its objects' keys (`object_keys`), for collisions


_WRITING: _Writing | None = None


def _write_range(bounds: tuple[int, int]) -> _Written:
    """Check and write stacks [start, end), composing the deferred ones."""
    assert _WRITING is not None
    writing = _WRITING
    problems: list[str] = []
    keys: dict[str, tuple] = {}
    count = 0
    for index in range(*bounds):
        stack, planned = writing.stacks[index], writing.planned[index]
        if planned is None:
            targets = writing.rendered.targets(stack)
            planned = _paths(writing.staging, stack, targets)
            keys[stack] = keys_of(targets)
            for target in targets:
                os.makedirs(f"{writing.staging}/{stack}/{target}", exist_ok=True)
        for path, obj, target in planned:
            if writing.check is not None:
                problems += [f"{stack}/{target}: {obj['kind']}/{obj['metadata']['name']}: {m}"
                             for m in writing.check(obj)]
            _create(path, dump(obj).encode())
        count += len(planned)
    return _Written(count, bounds[1] - bounds[0], problems, keys)


def _paths(staging: str, stack: str, targets: dict[str, list[dict]]) -> list[tuple[str, dict, str]]:
    """(path, object, target) of each of a stack's objects, in render order; two objects on one path: refused."""
    out = []
    taken: set[str] = set()
    for target in sorted(targets):
        for obj in targets[target]:
            name = file_name(obj)
            path = f"{staging}/{stack}/{target}/{name}"  # as text: pathlib's joins were a tenth of a large render
            if path in taken:
                raise OutputError(f"{stack}/{target}: two objects would be written to {name}")
            taken.add(path)
            out.append((path, obj, target))
    return out


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


def write(rendered: Rendered, out: Path, on_stacks: Callable[[int], None] | None = None, jobs: int | None = None,
          check: Callable[[dict], list[str]] | None = None) -> int:
    """Write every object to `out` (replaced as a whole); `on_stacks(n)` is called as stacks are written (a
    progress bar). Large renders are written by `jobs` forked processes (default: one per CPU): at 2,000
    deployments the schema check, the YAML writer and 40,000 file creations are most of a render. A deferred
    model stack (`render(..., defer_models=True)`) is composed by the writer that writes it, in parallel with the
    others, and never copied between processes. The files are the same either way.

    `check`: an object's schema problems. If any object has one, or two stacks compose the same object (found
    here for deferred stacks), InvalidObjects is raised with them all and `out` is left as it was."""
    import multiprocessing
    from concurrent.futures import ProcessPoolExecutor

    global _WRITING
    stacks = sorted(rendered.stacks)
    deferred = rendered.deferred.replicas if rendered.deferred is not None else {}
    with replacing(out, "modelplane render") as staging:
        planned: list[list[tuple[str, dict, str]] | None] = []
        weights: list[int] = []
        for stack in stacks:
            if stack in deferred:
                planned.append(None)
                weights.append(PER_REPLICA * len(deferred[stack]))
                continue
            paths = _paths(str(staging), stack, rendered.stacks[stack])
            planned.append(paths)
            weights.append(len(paths))
        for folder in {f"{staging}/{stack}/{target}" for stack in stacks if stack not in deferred
                       for target in rendered.stacks[stack]}:  # a deferred stack's by its writer
            os.makedirs(folder, exist_ok=True)
        chunks = _chunks(weights)
        jobs = min(jobs or os.cpu_count() or 1, 16)
        _WRITING = _Writing(str(staging), rendered, stacks, planned, check)
        try:
            if jobs > 1 and sum(weights) >= PARALLEL_FROM and "fork" in multiprocessing.get_all_start_methods():
                with ProcessPoolExecutor(jobs, mp_context=multiprocessing.get_context("fork")) as pool:
                    written = list(_each(pool.map(_write_range, chunks), on_stacks))
            else:
                written = list(_each(map(_write_range, chunks), on_stacks))
        finally:
            _WRITING = None
        problems = [line for part in written for line in part.problems]
        if rendered.deferred is not None:
            keys = {stack: key for part in written for stack, key in part.keys.items()}
            problems += [str(p) for p in collisions(rendered.deferred.fleet, rendered, keys)]
        if problems:
            raise InvalidObjects(problems)
    return sum(part.objects for part in written)


def _chunks(weights: list[int]) -> list[tuple[int, int]]:
    """Runs of consecutive stacks of about CHUNK objects each: [start, end) bounds."""
    out, start, weight = [], 0, 0
    for index, stack_weight in enumerate(weights):
        weight += stack_weight
        if weight >= CHUNK:
            out.append((start, index + 1))
            start, weight = index + 1, 0
    if start < len(weights):
        out.append((start, len(weights)))
    return out


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


def _each(results: Iterable[_Written], on_stacks: Callable[[int], None] | None) -> Iterator[_Written]:
    """Written chunks, in order, reporting progress."""
    for written in results:
        if on_stacks is not None:
            on_stacks(written.stacks)
        yield written
