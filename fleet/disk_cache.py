"""Where this project keeps what it computed from content (never by time), and how it reads and writes there.

$MODELPLANE_CACHE_DIR, else $XDG_CACHE_HOME/modelplane, else ~/.cache/modelplane. Every entry is named by a
hash of what it was computed from. A cache entry changes a result (a base's plan, a CRD's schema, a selector's answer), so what another user,
another machine or a hand edit put there must never be used (nothing here is loaded as code: every entry is data,
and the CEL parser's tables ship with the package, fleet/cel_tables.py):

- the folder is used only when no one else can change it: a real folder (not a link), owned by the effective
  user, that neither group nor others may write (it is created 0700); the same for its sub-folders. Otherwise
  nothing is read or written there;
- an entry is read only from a regular file owned by the user, opened without following a link;
- an entry carries an HMAC-SHA256 of its name and content, keyed by a random key made once in the folder (0600):
  an entry cut short, damaged, edited, copied from another cache or renamed to another key fails it.

An entry that cannot be written or read, or fails a check, is computed again: never an error.
"""

from __future__ import annotations

import hashlib
import hmac
import os
import secrets
import stat
import tempfile
from pathlib import Path

KEY_FILE = ".key"
_MAC = 64  # hex characters of an HMAC-SHA256


def default_root() -> Path:
    explicit = os.environ.get("MODELPLANE_CACHE_DIR")
    if explicit:
        return Path(explicit)
    xdg = os.environ.get("XDG_CACHE_HOME")
    return (Path(xdg) if xdg else Path.home() / ".cache") / "modelplane"


def _private_folder(path: Path) -> bool:
    """A folder only this user can change: a real folder, owned by the effective user, no group/other write."""
    try:
        info = path.lstat()
    except OSError:
        return False
    return stat.S_ISDIR(info.st_mode) and info.st_uid == os.geteuid() and not info.st_mode & 0o022


def trusted_root(root: Path | None = None) -> Path | None:
    """The cache folder, made 0700 if missing; None when it exists but another user could change what is in it."""
    root = root or default_root()
    try:
        root.mkdir(parents=True, exist_ok=True, mode=0o700)
    except OSError:
        return None
    return root if _private_folder(root) else None


def _read_private(path: Path) -> bytes | None:
    """A regular file owned by this user, opened without following a link at its last step."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW)
    except OSError:
        return None
    try:
        info = os.fstat(fd)
        if not stat.S_ISREG(info.st_mode) or info.st_uid != os.geteuid():
            return None
        with os.fdopen(fd, "rb", closefd=False) as f:
            return f.read()
    except OSError:
        return None
    finally:
        os.close(fd)


def _key(root: Path) -> bytes | None:
    path = root / KEY_FILE
    kept = _read_private(path)
    if kept is not None and len(kept) == 32:
        return kept
    try:
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, 0o600)
    except FileExistsError:  # a bad key (or one being written): replaced by a good one
        path.unlink(missing_ok=True)
        return None
    except OSError:
        return None
    key = secrets.token_bytes(32)
    with os.fdopen(fd, "wb") as f:
        f.write(key)
    return key


def _mac(key: bytes, name: str, content: bytes) -> bytes:
    return hmac.new(key, name.encode("utf-8", "surrogateescape") + b"\0" + content, hashlib.sha256).hexdigest().encode()


class DiskCache:
    """Entries by name (a relative path such as `plans/<key>.json`) under one cache folder."""

    def __init__(self, root: Path | None = None):
        self.root = root or default_root()

    def path(self, name: str) -> Path:
        return self.root / name

    def _folder(self, name: str, create: bool) -> Path | None:
        """The entry's folder, when it and every folder up to the root are this user's alone."""
        root = trusted_root(self.root) if create else (self.root if _private_folder(self.root) else None)
        if root is None:
            return None
        folder = root
        for part in Path(name).parent.parts:
            if part in ("", ".", ".."):
                return None
            folder = folder / part
            if create:
                try:
                    folder.mkdir(mode=0o700, exist_ok=True)
                except OSError:
                    return None
            if not _private_folder(folder):
                return None
        return folder

    def write(self, name: str, content: str | bytes) -> bool:
        """Write an authenticated entry atomically; best effort: False when it could not be (a read-only home, or
        a folder another user could change, only makes the next run slower)."""
        data = content.encode() if isinstance(content, str) else content
        if self._folder(name, create=True) is None:
            return False
        key = _key(self.root)
        return key is not None and write_atomically(self.path(name), _mac(key, name, data) + b"\n" + data)

    def read(self, name: str) -> bytes | None:
        """The content of an entry written by `write`; None when it is absent or fails any check above."""
        if self._folder(name, create=False) is None:
            return None
        data = _read_private(self.path(name))
        key = _read_private(self.root / KEY_FILE)
        if data is None or key is None or len(key) != 32:
            return None
        mac, newline, content = data.partition(b"\n")
        if not newline or len(mac) != _MAC or not hmac.compare_digest(mac, _mac(key, name, content)):
            return None
        return content


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
