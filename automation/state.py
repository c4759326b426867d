"""What was applied: per stack its fingerprint, its placements (model stacks) and plain outputs.

Written only after a stack's update (or destroy) succeeded, atomically (write, fsync, rename),
so a crash never leaves half a record and a rerun converges. Secrets are never stored here:
kubeconfigs stay in the Pulumi backend, encrypted. One process at a time may change the
state of a working directory (an exclusive lock, released when the process ends).
"""

from __future__ import annotations

import fcntl
import json
import os
import tempfile
import threading
from datetime import datetime, timezone
from pathlib import Path
from typing import IO

from fleet.memory import RecordedEngine, RecordedMember, RecordedReplica
from fleet.stack_id import StackId, StackIdError
from workloads.render import Gateways

STATE_DIR = ".modelplane"


class StateLocked(Exception):
    pass


def replica_from_dict(d: dict) -> RecordedReplica:
    engines = tuple(RecordedEngine(e["name"], e["copies"], tuple(
        RecordedMember(m["role"], m["pool"], m["pods"], tuple(tuple(r) for r in m["requests"])) for m in e["members"]))
        for e in d["engines"])
    return RecordedReplica(d["namespace"], d["deployment"], d["name"], d["cluster"], d["index"], engines)


class StateStore:
    def __init__(self, root: Path):
        self.root = Path(root)
        self.path = self.root / "state.json"
        self._lock_file: IO[str] | None = None
        self._mutex = threading.Lock()  # stacks finish in parallel threads: one read-modify-write at a time

    def load(self) -> dict:
        if not self.path.exists():
            return {"stacks": {}}
        return json.loads(self.path.read_text())

    def fingerprints(self) -> dict[str, str]:
        return {name: s["fingerprint"] for name, s in self.load()["stacks"].items()}

    def placements(self) -> list[RecordedReplica]:
        return [replica_from_dict(p) for s in self.load()["stacks"].values() for p in s.get("placements", [])]

    def gateways(self) -> Gateways:
        """The gateway addresses the applied platform stacks and the gateway stack output."""
        clusters = {}
        front_door = None
        for name, entry in self.load()["stacks"].items():
            outputs = entry.get("outputs") or {}
            try:
                id = StackId.parse(name)
            except StackIdError:
                continue
            if id.kind == "platform" and id.cluster and outputs.get("gatewayAddress"):
                clusters[str(id.cluster)] = str(outputs["gatewayAddress"])
            elif id.kind == "gateway" and outputs.get("address"):
                front_door = str(outputs["address"])
        return Gateways(clusters, front_door)

    def _write(self, state: dict) -> None:
        self.root.mkdir(parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(prefix=".state-", suffix=".tmp", dir=self.root)
        with os.fdopen(fd, "w") as f:
            json.dump(state, f, indent=2, sort_keys=True)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, self.path)

    def record(self, stack: str, fingerprint: str, placements: list[RecordedReplica] | None = None,
               outputs: dict | None = None) -> None:
        with self._mutex:
            state = self.load()
            state["stacks"][stack] = {
                "fingerprint": fingerprint,
                "placements": [p.to_dict() for p in placements or []],
                "outputs": outputs or {},
                "appliedAt": datetime.now(timezone.utc).isoformat(timespec="seconds"),
            }
            self._write(state)

    def rename(self, old: str, new: str) -> None:
        """Move a stack's record to its new name (a migration of stack names)."""
        with self._mutex:
            state = self.load()
            if old in state["stacks"]:
                state["stacks"][new] = state["stacks"].pop(old)
                self._write(state)

    def forget(self, stack: str) -> None:
        with self._mutex:
            state = self.load()
            if state["stacks"].pop(stack, None) is not None:
                self._write(state)

    def lock(self) -> None:
        """Take the working directory's lock, or raise StateLocked naming the holder."""
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
