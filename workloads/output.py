"""Write rendered stacks to a folder: DIR/<stack>/<target>/<kind>-<name>.yaml, all or nothing.

The folder is replaced as a whole (written beside it, then swapped in), so a reader never
sees a mix of two renders; a folder that modelplane did not write is never overwritten, and the
only folders ever removed are the ones this render created (never a sibling that merely has a
telling name). The result has the mode a `mkdir` would give it, not the 0700 of a temporary folder.
"""

from __future__ import annotations

import os
import shutil
import tempfile
from pathlib import Path
from typing import Callable

from fleet.loader import RENDER_MARKER
from workloads.yamlio import dump_fast as dump

MARKER = RENDER_MARKER


class OutputError(Exception):
    pass


def file_name(obj: dict) -> str:
    return f"{obj['kind'].lower()}-{obj['metadata']['name']}.yaml"


def stream(rendered) -> str:
    """Every object as one YAML stream (`render --out -`), in the order of the folder layout."""
    return "".join(f"---\n# {stack} / {target}\n{dump(obj)}" for stack, target, obj in rendered.objects())


def write(rendered, out: Path, on_object: Callable[[], None] | None = None) -> int:
    """Write every object to `out` (replaced as a whole); `on_object` is called after each one (a progress bar)."""
    out = out.resolve()
    if out.exists() and (not out.is_dir() or (any(out.iterdir()) and not (out / MARKER).exists())):
        raise OutputError(f"{out} exists and was not written by modelplane render; choose an empty or new folder")
    out.parent.mkdir(parents=True, exist_ok=True)
    staging = Path(tempfile.mkdtemp(prefix=".render-", dir=out.parent))
    mask = os.umask(0)
    os.umask(mask)
    staging.chmod(0o777 & ~mask)
    count = 0
    try:
        (staging / MARKER).write_text("written by modelplane render; the whole folder is replaced on each render\n")
        for stack, target, obj in rendered.objects():
            folder = staging / stack / target
            folder.mkdir(parents=True, exist_ok=True)
            path = folder / file_name(obj)
            if path.exists():
                raise OutputError(f"{stack}/{target}: two objects would be written to {path.name}")
            path.write_text(dump(obj))
            count += 1
            if on_object is not None:
                on_object()
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
    return count
