"""Where this project keeps what it computed from content (never by time), and how it writes there.

$MODELPLANE_CACHE_DIR, else $XDG_CACHE_HOME/modelplane, else ~/.cache/modelplane. Every entry is named by a
hash of what it was computed from, written atomically, readable by its owner only; an entry that cannot be
written or read is computed again, never an error. `sealed` / `unsealed`: an entry that carries the hash of its
own bytes, for entries read by code that must never see a damaged file (a pickle).
"""

from __future__ import annotations

import hashlib
import os
import tempfile
from pathlib import Path


def default_root() -> Path:
    explicit = os.environ.get("MODELPLANE_CACHE_DIR")
    if explicit:
        return Path(explicit)
    xdg = os.environ.get("XDG_CACHE_HOME")
    return (Path(xdg) if xdg else Path.home() / ".cache") / "modelplane"


def write_atomically(path: Path, content: str | bytes) -> bool:
    """Best effort: False when it could not be written (a read-only home only makes the next run slower)."""
    try:
        path.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
        fd, tmp = tempfile.mkstemp(prefix=".entry-", suffix=".tmp", dir=path.parent)
    except OSError:
        return False
    try:
        with os.fdopen(fd, "wb" if isinstance(content, bytes) else "w") as f:  # mkstemp creates it 0600
            f.write(content)
        os.replace(tmp, path)
        return True
    except OSError:  # a full disk: no half-written scratch file is left behind
        Path(tmp).unlink(missing_ok=True)
        return False


def sealed(payload: bytes) -> bytes:
    return hashlib.sha256(payload).hexdigest().encode() + b"\n" + payload


def unsealed(path: Path) -> bytes | None:
    """The payload of an entry written by `sealed`; None when it is absent, unreadable, cut short or altered."""
    try:
        data = path.read_bytes()
    except OSError:
        return None
    digest, _, payload = data.partition(b"\n")
    return payload if hashlib.sha256(payload).hexdigest().encode() == digest else None
