"""Write rendered stacks to a folder: DIR/<stack>/<target>/<kind>-<name>.yaml, all or nothing.

The folder is replaced as a whole (written beside it, then swapped in), so a reader never
sees a mix of two renders; a folder that modelplane did not write is never overwritten, and the
only folders ever removed are the ones this render created (never a sibling that merely has a
telling name). The result has the mode a `mkdir` would give it, not the 0700 of a temporary folder.
"""

from __future__ import annotations

import itertools
import os
import shutil
import stat
import tempfile
from contextlib import contextmanager
from pathlib import Path
from typing import TYPE_CHECKING, Callable, Iterable, Iterator, NamedTuple, Protocol

from fleet.errors import ModelplaneError
from fleet.loader import RENDER_MARKER
from workloads.render import ModelStacks, Rendered, collisions, keys_of, render
from workloads.yamlio import dump_fast as dump

if TYPE_CHECKING:
    from fleet.plan import Plan
    from fleet.validate import Fleet
    from workloads.gateways import Gateways

MARKER = RENDER_MARKER


class OutputError(ModelplaneError):
    pass


class InvalidObjects(ModelplaneError):
    """The render's problems and collisions between stacks, or else every object its schema rejects: nothing was
    written. One line each, in render order."""

    def __init__(self, problems: list[str]):
        super().__init__(f"{len(problems)} invalid object(s)")
        self.problems = problems


def file_name(obj: dict) -> str:
    return f"{obj['kind'].lower()}-{obj['metadata']['name']}.yaml"


def stream(rendered) -> str:
    """Every object as one YAML stream (`render --out -`), in the order of the folder layout."""
    return "".join(f"---\n# {stack} / {target}\n{dump(obj)}" for stack, target, obj in rendered.objects())


PARALLEL_FROM = 2000  # objects (estimated) in the deferred model stacks: below this, forking costs more than it saves
CHUNK = 500  # objects a writer process takes at a time
PER_REPLICA = 12  # about how many objects a replica has: how a deferred model stack is weighed before it is composed


class Progress(Protocol):
    """Told how many stacks there are once that is known, and each time some are written (a progress bar)."""

    def expect(self, total: int) -> None: ...

    def advance(self, steps: int = 1) -> None: ...


class _Written(NamedTuple):
    objects: int
    problems: list[tuple[str, str]]  # (stack, schema problem) in the order found
    keys: dict[str, tuple]  # stack -> its objects' keys (`keys_of`), for collisions
    clashes: list[tuple[str, str]]  # (stack, two of its objects on one path)


# what forked writers inherit instead of receiving a copy: the staging folder, the deferred stacks in render order
# and what composes them, and the check
_DEFERRED: tuple[str, list[str], ModelStacks, Callable[[dict], list[str]] | None] | None = None


def _write_deferred(bounds: tuple[int, int]) -> _Written:
    """Compose, check and write deferred model stacks [start, end)."""
    assert _DEFERRED is not None
    staging, stacks, models, check = _DEFERRED
    return _write_stacks(staging, ((stack, models.compose(stack)) for stack in stacks[bounds[0]:bounds[1]]), check)


def _write_stacks(staging: str, stacks: Iterable[tuple[str, dict[str, list[dict]]]],
                  check: Callable[[dict], list[str]] | None) -> _Written:
    """Check and write each stack's objects (by target); a second object on a stack's path is not written, but
    noted (`clashes`)."""
    written = _Written(0, [], {}, [])
    count = 0
    for stack, targets in stacks:
        written.keys[stack] = keys_of(targets)
        made = False  # each stack is written by one process, once, in a new staging folder: plain mkdirs
        for target in sorted(targets):
            folder = f"{staging}/{stack}/{target}"  # as text: pathlib's joins were a tenth of a large render
            taken: set[str] = set()
            for obj in targets[target]:
                name = file_name(obj)
                if name in taken:
                    written.clashes.append((stack, f"{stack}/{target}: two objects would be written to {name}"))
                    continue
                if not taken:  # a folder for each target with objects
                    if not made:
                        os.mkdir(f"{staging}/{stack}")
                        made = True
                    os.mkdir(folder)
                taken.add(name)
                if check is not None and (found := check(obj)):
                    written.problems.extend((stack, f"{stack}/{target}: {obj['kind']}/{obj['metadata']['name']}: {m}")
                                            for m in found)
                _create(f"{folder}/{name}", dump(obj).encode())
                count += 1
    return written._replace(objects=count)


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


def write(rendered: Rendered, out: Path, progress: Progress | None = None, jobs: int | None = None,
          check: Callable[[dict], list[str]] | None = None) -> int:
    """Write every object of `rendered` to `out` (replaced as a whole), as `render_to` does. How many objects
    were written."""
    return _write(out, rendered.deferred, lambda: rendered, progress, jobs, check)[0]


def render_to(out: Path, fleet: Fleet, plan: Plan, host: str | None, gateways: Gateways | None = None,
              progress: Progress | None = None, jobs: int | None = None,
              check: Callable[[dict], list[str]] | None = None) -> tuple[int, Rendered]:
    """`render` straight to `out`: `jobs` forked writers (default: one per CPU) compose and write the model stacks
    while this process composes and writes the others (routes, backends, teams, caches), so no object is composed
    before the writers start or copied between processes. At 2,000 deployments composing, the schema check, the
    YAML writer and 40,000 file creations are most of a render. How many objects were written, and the render
    (its model stacks not composed: `Rendered.deferred`). The files are those `write` writes of a whole render.

    `check`: an object's schema problems. Refused, leaving `out` as it was, in this order (as if each were looked
    for before writing): the render's problems and collisions between stacks (InvalidObjects), two objects of a
    stack on one path (OutputError), objects their schema rejects (InvalidObjects, all of them)."""
    models = ModelStacks(fleet, plan)
    return _write(out, models, lambda: render(fleet, plan, host, gateways=gateways, deferred=models), progress,
                  jobs, check)


def _write(out: Path, models: ModelStacks | None, rest: Callable[[], Rendered], progress: Progress | None,
           jobs: int | None, check: Callable[[dict], list[str]] | None) -> tuple[int, Rendered]:
    """Fork the writers of `models`' stacks (if they are many), then compose `rest` (its stacks not in `models`)
    and write it here while they run; collisions are found once every stack's objects are known. How many objects
    were written, and `rest`."""
    import multiprocessing
    from concurrent.futures import Future, ProcessPoolExecutor

    global _DEFERRED
    deferred = sorted(models.replicas) if models is not None else []
    weights = [PER_REPLICA * len(models.replicas[stack]) for stack in deferred] if models is not None else []
    chunks = _chunks(weights)
    jobs = min(jobs or os.cpu_count() or 1, 16)
    parallel = jobs > 1 and sum(weights) >= PARALLEL_FROM and "fork" in multiprocessing.get_all_start_methods()
    with replacing(out, "modelplane render") as staging:
        pool = ProcessPoolExecutor(jobs, mp_context=multiprocessing.get_context("fork")) if parallel else None
        written: list[_Written] = []
        try:
            if models is not None:
                _DEFERRED = (str(staging), deferred, models, check)
                if pool is not None and check is not None and deferred:
                    _warm(check, models.compose(deferred[0]))
            # the writers fork at the first submit, inheriting what they compose from
            pending: list[Future] = [pool.submit(_write_deferred, chunk) for chunk in chunks] if pool else []
            rendered = rest()
            if progress is not None:
                progress.expect(len(rendered.stacks))
            own = [stack for stack in sorted(rendered.stacks) if stack not in (models.replicas if models else ())]
            written.append(_write_stacks(str(staging), ((stack, rendered.stacks[stack]) for stack in own), check))
            if progress is not None:
                progress.advance(len(own))
            for chunk, future in itertools.zip_longest(chunks, pending):
                written.append(future.result() if future is not None else _write_deferred(chunk))
                if progress is not None:
                    progress.advance(chunk[1] - chunk[0])
        finally:
            _DEFERRED = None
            if pool is not None:
                pool.shutdown(cancel_futures=True)
        refused = [str(p) for p in rendered.problems if not p.warning]  # a whole render's collisions are among them
        if models is not None:
            keys = {stack: key for part in written for stack, key in part.keys.items()}
            refused += [str(p) for p in collisions(models.fleet, rendered, keys)]
        if refused:
            raise InvalidObjects(refused)
        if clashes := _in_render_order(part.clashes for part in written):
            raise OutputError(clashes[0])
        if problems := _in_render_order(part.problems for part in written):
            raise InvalidObjects(problems)
    return sum(part.objects for part in written), rendered


def _in_render_order(found: Iterable[list[tuple[str, str]]]) -> list[str]:
    """(stack, line) pairs found by several processes: the lines by stack, each stack's in the order found."""
    return [line for _, line in sorted((pair for part in found for pair in part), key=lambda pair: pair[0])]


def _warm(check: Callable[[dict], list[str]], targets: dict[str, list[dict]]) -> None:
    """Check one model stack's objects before the writers fork: each kind's schema is compiled once, here, rather
    than once in every writer (jsonschema-rs and Kubernetes' shared definitions: 65 ms a writer for 13 kinds)."""
    for objects in targets.values():
        for obj in objects:
            check(obj)


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
