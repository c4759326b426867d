"""The working directory's lock: one process at a time changes the fleet from one state folder.

What is applied is not kept here: it is the record in the backend (`automation/record/applied.py`); the state
folder holds only caches, workspaces and this lock (released when the process ends, even killed).
"""

from __future__ import annotations

import fcntl
import os
from pathlib import Path
from typing import IO

from automation.execution.runner import AutomationError

STATE_DIR = ".modelplane"


class StateLocked(AutomationError):
    pass


class WorkdirLock:
    def __init__(self, root: Path):
        self.root = Path(root)
        self._lock_file: IO[str] | None = None

    def lock(self) -> None:
        """Take the working directory's lock (held already: nothing to do), or raise StateLocked naming the holder."""
        if self._lock_file is not None:
            return
        self.root.mkdir(parents=True, exist_ok=True)
        handle = open(self.root / "lock", "a+")
        try:
            fcntl.flock(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            handle.seek(0)
            holder = handle.read().strip() or "another process"
            handle.close()
            raise StateLocked(f"{holder} is changing the fleet in {self.root.resolve()}; wait for it to finish") from None
        handle.seek(0)
        handle.truncate()
        handle.write(f"modelplane (pid {os.getpid()})")
        handle.flush()
        self._lock_file = handle

    def unlock(self) -> None:
        if self._lock_file is not None:
            fcntl.flock(self._lock_file, fcntl.LOCK_UN)
            self._lock_file.close()
            self._lock_file = None
