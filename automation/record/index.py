"""A per-fleet index of the record in a DIY backend, so reading the record loads no checkpoint that did not change.

`pulumi stack ls --json` on a DIY backend loads every stack's checkpoint to fill `lastUpdate` and `resourceCount`,
and a platform checkpoint carries hundreds of KB of CRDs: at 500 clusters every `plan` downloaded hundreds of MB
before planning. Instead the record read lists the checkpoint objects (`.pulumi/stacks/<project>/`: one request per
project, names and object metadata only) and takes each stack's record from where it was last read at that same
object version: the local cache, else this index (`<backend>/.modelplane/index/<fleet>.json`, one request), else
the stack itself (`stack output`, as before). Whoever reads a stack from its checkpoint writes the index back, so
an index that an older modelplane left behind, or that misses a stack another machine updated, is repaired by the
next read, and until then those stacks are read from their checkpoints and the read says how many.

Why it cannot report a wrong record: an index or cache entry holds the object version (`stamp`) listed *before*
its outputs were read. If the checkpoint changed in between, the entry's stamp is already older than the object
and no later listing matches it; an entry is used only when the listing shows exactly its stamp. A file://
checkpoint is replaced by rename on every write (the CLI's blob store and the double both write a temporary file
and rename it), so the stamp (inode, size, mtime in ns) changes with every write; an S3-like store would use the
object's ETag. Holds no secret: secret outputs are never read.

A file:// backend in the project layout (`.pulumi/meta.yaml` version 1) is listed here; an s3://, gs:// or azblob://
one in that layout by `automation/record/bucket.py` (an object's ETag, size, time and version are its stamp), when
the environment holds its credentials; any other backend (Pulumi Cloud, a pre-project folder, a bucket whose
credentials only the CLI finds) is read as before.
"""

from __future__ import annotations

import os
import tempfile
from dataclasses import dataclass
from datetime import datetime, timezone
from pathlib import Path
from typing import Any, Protocol

import orjson

INDEX_FORMAT = 1
DEFAULT_FLEET = "_"  # the index of stacks named without a fleet prefix


@dataclass(frozen=True)
class Listed:
    """One checkpoint object as a listing shows it: no byte of the checkpoint is read."""

    project: str
    stack: str  # the backend's stack name (`<fleet>_<stack>` with --fleet)
    stamp: str  # the object's version: it changes with every write of the checkpoint
    written: datetime  # when the object was written (naive UTC, as the automation API gives the backend's times)

    @property
    def key(self) -> str:
        return f"{self.project}/{self.stack}"


def layout_is_per_project(meta: str) -> bool:
    """Does a backend's `.pulumi/meta.yaml` say `version: 1`, the layout with a folder per project? (Version 0 kept
    every stack in one folder, and is read through the CLI.)"""
    return any(line.split(":", 1)[0].strip() == "version" and line.split(":", 1)[1].strip() == "1"
               for line in meta.splitlines() if ":" in line)


class CheckpointStore(Protocol):
    """Where the indexed read lists checkpoints and keeps the index: a folder (`CheckpointFolder`) or a bucket
    (`automation/record/bucket.py`)."""

    # Are the listing's times this machine's clock? Only then may a stack this machine just applied be known by
    # when its checkpoint was written (a bucket's times are the server's, and a skew could take another's update)
    local_clock: bool

    def list(self, project: str) -> list[Listed]: ...

    def get_index(self, fleet: str | None) -> dict[str, dict] | None: ...

    def put_index(self, fleet: str | None, stacks: dict[str, dict]) -> None: ...


class CheckpointFolder:
    """The three requests the indexed read makes of a file:// backend: list a project's checkpoints, get and put
    the fleet's index. `request` is called once per request (a benchmark's latency shim replaces it)."""

    local_clock = True

    def __init__(self, root: Path):
        self.root = root

    @classmethod
    def of(cls, backend: str) -> CheckpointFolder | None:
        """The store of a file:// backend in the project layout, else None (read as before)."""
        if not backend.startswith("file://"):
            return None
        root = Path(os.path.expanduser(backend.removeprefix("file://")))
        try:
            meta = (root / ".pulumi" / "meta.yaml").read_text()
        except OSError:
            return None
        return cls(root) if layout_is_per_project(meta) else None

    def request(self) -> None:
        """One request to the store (nothing to wait for on a local folder)."""

    def list(self, project: str) -> list[Listed]:
        self.request()
        folder = self.root / ".pulumi" / "stacks" / project
        found: dict[str, list[tuple[str, datetime]]] = {}
        try:
            entries = list(os.scandir(folder))
        except FileNotFoundError:
            return []
        for entry in entries:
            name = entry.name
            for suffix in (".json.gz", ".json"):  # PULUMI_DIY_BACKEND_GZIP writes .json.gz
                if name.endswith(suffix) and not name.startswith("."):
                    break
            else:
                continue  # a blob store's .attrs sidecar, a temporary file
            try:
                st = entry.stat(follow_symlinks=False)
            except FileNotFoundError:
                continue  # removed while listed
            written = datetime.fromtimestamp(st.st_mtime_ns / 1e9, timezone.utc).replace(tzinfo=None)
            found.setdefault(name[:-len(suffix)], []).append(
                (f"{suffix}:{st.st_ino}:{st.st_size}:{st.st_mtime_ns}", written))
        # a stack with both a .json and a .json.gz (gzip turned on or off since): a write of either is a change
        return [Listed(project, stack, ",".join(sorted(s for s, _ in versions)), max(w for _, w in versions))
                for stack, versions in sorted(found.items())]

    def _index_path(self, fleet: str | None) -> Path:
        return self.root / ".modelplane" / "index" / f"{fleet or DEFAULT_FLEET}.json"

    def get_index(self, fleet: str | None) -> dict[str, dict] | None:
        """key (`<project>/<backend stack>`) -> {"stamp", "lastUpdate", "outputs"}; None when there is none, or
        it is of another format (an older or newer modelplane's): then every stack is read as before."""
        self.request()
        try:
            return index_entries(self._index_path(fleet).read_bytes())
        except OSError:
            return None

    def put_index(self, fleet: str | None, stacks: dict[str, dict]) -> None:
        """Replace the index in one write (a rename: a reader sees the old one or the new one, whole)."""
        self.request()
        path = self._index_path(fleet)
        path.parent.mkdir(parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(prefix=".index-", suffix=".tmp", dir=path.parent)
        try:
            with os.fdopen(fd, "wb") as f:
                f.write(index_body(fleet, stacks))
            os.replace(tmp, path)
        except BaseException:
            Path(tmp).unlink(missing_ok=True)
            raise


def index_entries(raw: bytes | None) -> dict[str, dict] | None:
    """An index's entries by key; None for none, or one of another format (an older or newer modelplane's)."""
    try:
        data = orjson.loads(raw) if raw is not None else None
    except ValueError:
        return None
    if not isinstance(data, dict) or data.get("format") != INDEX_FORMAT or not isinstance(data.get("stacks"), dict):
        return None
    return {k: v for k, v in data["stacks"].items() if isinstance(v, dict)}


def index_body(fleet: str | None, stacks: dict[str, dict]) -> bytes:
    return orjson.dumps({"format": INDEX_FORMAT, "fleet": fleet, "stacks": stacks}, option=orjson.OPT_SORT_KEYS)


def entry(listed: Listed, last_update: str | None, outputs: dict[str, Any]) -> dict[str, Any]:
    """An index (and cache) entry: the outputs read at (or after) the object version `listed` shows."""
    return {"project": listed.project, "stamp": listed.stamp, "lastUpdate": last_update, "outputs": outputs}
