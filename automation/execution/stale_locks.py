"""A stack's lock left behind by a `pulumi` process of this machine that no longer runs.

A DIY backend's lock is one file per running update (`.pulumi/locks/<org>/<project>/<stack>/<id>.json`) naming the
process that holds it: pid, user, host, time. The CLI removes it when the update ends, cancelled or failed, but not
when the process itself is killed (SIGKILL, the OOM killer, a machine that lost power, or modelplane killed so the
CLI's output pipe closed). Every later update of the stack then fails "the stack is currently locked", and the
CLI's answer, `pulumi cancel`, removes every lock of the stack whoever holds it. Here only locks whose holder is
known to be gone are removed: in a `file://` backend, made on this machine by a process that no longer runs (or
whose pid a later process took). A lock of another machine, or of a process still running, stays.
"""

from __future__ import annotations

import os
import re
import socket
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path
from urllib.parse import unquote, urlparse

# how the CLI names each lock when it refuses an update (backend/diy/lock.go, checkForLock)
LOCK_LINE = re.compile(r"^\s*(?P<where>\S+): created by (?P<user>.*)@(?P<host>[^@\s]+) \(pid (?P<pid>\d+)\) at "
                       r"(?P<at>\S+)\s*$")


@dataclass(frozen=True)
class Lock:
    where: str  # the lock's URL, as the CLI prints it
    host: str
    pid: int
    at: datetime | None


def locks_named(error: str) -> list[Lock]:
    """The locks a "the stack is currently locked" error names."""
    out = []
    for line in error.splitlines():
        found = LOCK_LINE.match(line)
        if found:
            try:
                at: datetime | None = datetime.fromisoformat(found["at"])
            except ValueError:
                at = None
            out.append(Lock(found["where"], found["host"], int(found["pid"]), at))
    return out


def _boot_time() -> float | None:
    try:
        for line in Path("/proc/stat").read_text().splitlines():
            if line.startswith("btime "):
                return float(line.split()[1])
    except OSError:
        pass
    return None


def running(pid: int, since: datetime | None = None) -> bool:
    """Is `pid` a live process that may be the one that took a lock at `since`? When unsure, yes."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        pass  # another user's process: it runs
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return True  # no /proc to tell more
    fields = stat[stat.rindex(")") + 2:].split()  # after "pid (comm) ": state is the 3rd field, starttime the 22nd
    if fields[0] in ("Z", "X"):
        return False  # exited, not yet reaped by its parent
    boot = _boot_time()
    if since is not None and boot is not None:
        started = boot + int(fields[19]) / os.sysconf("SC_CLK_TCK")
        if started > since.timestamp() + 1:
            return False  # a later process took the pid
    return True


def lock_file(lock: Lock, backend: str) -> Path | None:
    """The file of a lock in a `file://` backend's folder (None for any other backend, or a path outside its locks)."""
    if not backend.startswith("file://") or not lock.where.startswith("file://"):
        return None
    folder = Path(os.path.expanduser(backend.removeprefix("file://"))).resolve() / ".pulumi" / "locks"
    path = Path(unquote(urlparse(lock.where).path)).resolve()
    return path if path.suffix == ".json" and folder in path.parents else None


def release_stale(error: str, backend: str) -> list[Path]:
    """Remove the locks a refused update names, if every one is stale and a file of this `file://` backend; the
    files removed (none: the stack stays locked, and the error stands)."""
    locks = locks_named(error)
    here = socket.gethostname()
    files = [path for path in (lock_file(lock, backend) for lock in locks) if path is not None]
    if not locks or len(files) != len(locks) or any(lock.host != here or running(lock.pid, lock.at)
                                                    for lock in locks):
        return []
    removed = []
    for path in files:
        try:
            path.unlink()
        except FileNotFoundError:
            continue
        removed.append(path)
    return removed
