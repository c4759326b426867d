"""The record of what is applied: per stack, the fingerprint, versions and placements its last update applied.

Where it lives is the executor's: the Pulumi backend for the local executor (each stack's `modelplane`
output, written by the stack's own program and kept by the engine with the update that applied it;
`automation/record/backend.py`), the Stack objects for the operator executor (`operator_runner.OperatorRecord`).
A laptop, a CI runner, the portal and either executor on the same backend read the same record.
`.modelplane/record.json` (with its journal) is only a cache of it (`RecordCache`): deleting it changes no result.

Every road reads it through `Record.read()` and writes it only by applying stacks: code never writes
placements or fingerprints anywhere else.
"""

from __future__ import annotations

import os
import tempfile
import threading
from dataclasses import dataclass, field
from datetime import datetime, timedelta, timezone
from pathlib import Path
from typing import Any, Mapping, Protocol

import orjson

from fleet.memory import RecordedEngine, RecordedMember, RecordedReplica
from fleet.stack_id import StackId, StackIdError, StackKind
from workloads.gateways import GATEWAY_CLUSTER_OUTPUT, Gateways

RECORD_OUTPUT = "modelplane"  # the stack output every program exports: what this update applied


def replica_from_dict(d: Mapping[str, Any]) -> RecordedReplica:
    """Counts are ints: a record read back from stack outputs went through protobuf, where every number is a double."""
    engines = tuple(RecordedEngine(e["name"], int(e["copies"]), tuple(
        RecordedMember(m["role"], m["pool"], int(m["pods"]), tuple((str(n), int(c)) for n, c in m["requests"]))
        for m in e["members"])) for e in d["engines"])
    return RecordedReplica(d["namespace"], d["deployment"], d["name"], d["cluster"], int(d["index"]), engines,
                           bool(d.get("dynamo")))


def record_output(fingerprint: str, placements: list[RecordedReplica] | tuple[RecordedReplica, ...] = (),
                  versions: Mapping[str, str] | None = None) -> dict[str, Any]:
    """The `modelplane` output a stack's program exports once everything it registered was applied."""
    return {"fingerprint": fingerprint, "placements": [p.to_dict() for p in placements],
            "versions": dict(versions or {})}


@dataclass(frozen=True)
class AppliedStack:
    """One stack as applied. `fingerprint` is "" for a stack the backend holds that never finished an update
    (it may hold resources: destroy and prune still see it, and `up` runs it)."""

    fingerprint: str
    placements: tuple[RecordedReplica, ...] = ()
    outputs: Mapping[str, Any] = field(default_factory=dict)  # plain (non-secret) outputs: gatewayAddress, address
    versions: Mapping[str, str] = field(default_factory=dict)
    applied_at: str | None = None  # when the backend last updated it, as it says

    @classmethod
    def from_outputs(cls, outputs: Mapping[str, Any], applied_at: str | None = None) -> AppliedStack:
        """Read from a stack's plain outputs; a malformed or missing record counts as never finished."""
        plain = {k: v for k, v in outputs.items() if k != RECORD_OUTPUT}
        entry = outputs.get(RECORD_OUTPUT)
        if not isinstance(entry, Mapping) or not isinstance(entry.get("fingerprint"), str):
            return cls("", (), plain, applied_at=applied_at)
        try:
            placements = tuple(replica_from_dict(p) for p in entry.get("placements") or [])
        except (KeyError, TypeError, ValueError):
            placements = ()
        versions = entry.get("versions") if isinstance(entry.get("versions"), Mapping) else {}
        return cls(entry["fingerprint"], placements, plain, dict(versions or {}), applied_at)

    def to_outputs(self) -> dict[str, Any]:
        return {**self.outputs, RECORD_OUTPUT: record_output(self.fingerprint, self.placements, self.versions)}


@dataclass(frozen=True)
class Applied:
    """The whole record, as one read saw it. `source` says where it was read, `guessed` whether it could not be
    and what stands in (the local cache, or nothing) may be out of date: every report says so."""

    stacks: Mapping[str, AppliedStack] = field(default_factory=dict)
    source: str = "nothing recorded"
    guessed: bool = False

    def fingerprints(self) -> dict[str, str]:
        return {name: s.fingerprint for name, s in self.stacks.items()}

    def placements(self) -> list[RecordedReplica]:
        return [p for s in self.stacks.values() for p in s.placements]

    def details(self) -> dict[str, dict]:
        """What `status` shows of each applied stack: its plain outputs and when it was applied."""
        return {name: {"outputs": dict(s.outputs), "appliedAt": s.applied_at} for name, s in self.stacks.items()
                if s.fingerprint}

    def serving_stacks(self) -> dict[str, str]:
        """Cluster -> the `spec.stack` its platform stack last applied (its recorded `clusterArgs`): the "old" side
        of the reference's transition rule on InferenceCluster `spec.stack`. A stack that never finished an
        update, or whose record predates the field, says nothing."""
        out = {}
        for name, entry in self.stacks.items():
            try:
                id = StackId.parse(name)
            except StackIdError:
                continue
            recorded = entry.outputs.get("clusterArgs") if entry.fingerprint else None
            args = recorded.get("args") if isinstance(recorded, Mapping) else None
            if id.kind == StackKind.platform and id.cluster and isinstance(args, Mapping) and isinstance(args.get("stack"), str):
                out[str(id.cluster)] = args["stack"]
        return out

    def gateway_clusters(self) -> dict[str, str]:
        """v0.5 InferenceGateway -> the cluster (`spec.clusterName`) the gateway stack last applied it on (its
        `gatewayCluster` output): the "old" side of the XRD's transition rule on `spec.clusterName`. A gateway
        stack that never finished an update, or whose record predates the output, says nothing."""
        entry = self.stacks.get("gateway")
        recorded = entry.outputs.get(GATEWAY_CLUSTER_OUTPUT) if entry is not None and entry.fingerprint else None
        if isinstance(recorded, Mapping) and isinstance(recorded.get("name"), str) \
                and isinstance(recorded.get("clusterName"), str):
            return {recorded["name"]: recorded["clusterName"]}
        return {}

    def gateways(self) -> Gateways:
        """The gateway addresses the applied platform stacks and the gateway stack output."""
        clusters = {}
        front_door = None
        client_cas: tuple[str, ...] = ()
        for name, entry in self.stacks.items():
            try:
                id = StackId.parse(name)
            except StackIdError:
                continue
            if id.kind == StackKind.platform and id.cluster and entry.outputs.get("gatewayAddress"):
                clusters[str(id.cluster)] = str(entry.outputs["gatewayAddress"])
            elif id.kind == StackKind.gateway:
                front_door = str(entry.outputs["address"]) if entry.outputs.get("address") else None
                ca = entry.outputs.get("clientCACertificate")
                client_cas = (ca,) if isinstance(ca, str) and "BEGIN CERTIFICATE" in ca else ()
        return Gateways(clusters, front_door, client_cas)


def utc_now() -> datetime:
    """This machine's clock, as the automation API gives the backend's times: naive, in UTC."""
    return datetime.now(timezone.utc).replace(tzinfo=None)


@dataclass(frozen=True)
class UpdateWindow:
    """When this process's update of a stack ran, so the next read can tell the backend's `lastUpdate` stamp of
    that update from anyone else's without reading the stack's outputs back.

    `start`, `end`: the update's own times in the backend's history (whole seconds); `seen`: this machine's clock
    once the automation API had read the stack's outputs and history after it. A stamp is this update's when it
    lies in [start, end + 1 s) and is no later than `seen`: the update held the stack's lock from before `end`
    was written, so another update's stamp can only fall in the window if that whole update (lock, program,
    checkpoint) ran between the two commands the automation API runs right after `pulumi up`. A stamp outside
    it, a skewed clock included, means the stack is read again, as before."""

    start: datetime
    end: datetime
    seen: datetime

    @classmethod
    def of(cls, summary: Any, began: datetime, seen: datetime) -> UpdateWindow | None:
        """From the automation API's summary of an `up` (its history's latest entry) and this machine's clock
        around the call; None unless that entry is a succeeded update that ran inside the call."""
        start, end = getattr(summary, "start_time", None), getattr(summary, "end_time", None)
        if getattr(summary, "kind", None) != "update" or getattr(summary, "result", None) != "succeeded":
            return None
        if not isinstance(start, datetime) or not isinstance(end, datetime):
            return None
        if not (began.replace(microsecond=0) <= start <= end <= seen):
            return None  # someone else's entry, or clocks that disagree: the next read reads the stack again
        return cls(start, end, seen)

    def holds(self, stamp: datetime) -> bool:
        return self.start <= stamp < self.end + timedelta(seconds=1) and stamp <= self.seen

    def to_json(self) -> list[str]:
        return [self.start.isoformat(), self.end.isoformat(), self.seen.isoformat()]

    @classmethod
    def from_json(cls, value: Any) -> UpdateWindow | None:
        try:
            start, end, seen = (datetime.fromisoformat(v) for v in value)
        except (TypeError, ValueError):
            return None
        return cls(start, end, seen)


class Record(Protocol):
    """The record of one executor. Applying a stack writes it (the stack's program, or the operator's Stack);
    `applied`/`destroyed` only tell the record what this process just did, so a cache can follow."""

    def read(self) -> Applied: ...

    def applied(self, stack: str, outputs: Mapping[str, Any], window: UpdateWindow | None = None) -> None: ...

    def destroyed(self, stack: str) -> None: ...


class Nothing:
    """No record to read (a plan with no backend): everything is planned as new, and reports say so."""

    def __init__(self, why: str):
        self.why = why

    def read(self) -> Applied:
        return Applied({}, self.why, guessed=True)

    def applied(self, stack: str, outputs: Mapping[str, Any], window: UpdateWindow | None = None) -> None:
        pass

    def destroyed(self, stack: str) -> None:
        pass


class RecordCache:
    """`<state>/record.json`: the last record read from one backend, per stack with the backend's `lastUpdate`
    it was read at, so the next read fetches only stacks updated since. What this machine applies after that read
    is appended to `<state>/record.journal`, one JSON line per stack, and folded into record.json by the next
    read: rewriting the whole file after each of a large `up`'s thousands of stacks made the `up` quadratic (183 s
    of 2,000 rewrites). Both hold no secret; a lost or torn line only makes the next read fetch that stack again."""

    def __init__(self, root: Path, backend: str):
        self.path = Path(root) / "record.json"
        self.journal = Path(root) / "record.journal"
        self.backend = backend
        self._mutex = threading.Lock()  # stacks finish in parallel threads

    def load(self) -> dict[str, dict]:
        """stack -> {"lastUpdate": str | None, "outputs": {...}, "window": [...] (after this machine applied it)};
        empty when the cache is of another backend. The journal's lines, in order, override the file."""
        try:
            data = orjson.loads(self.path.read_bytes())
        except (OSError, ValueError):
            data = {}
        ok = isinstance(data, dict) and data.get("backend") == self.backend and isinstance(data.get("stacks"), dict)
        stacks = data["stacks"] if ok else {}
        try:
            lines = self.journal.read_bytes().splitlines()
        except OSError:
            lines = []
        for line in lines:
            try:
                entry = orjson.loads(line)
                if entry["backend"] != self.backend:
                    continue
                if entry["entry"] is None:
                    stacks.pop(entry["stack"], None)
                else:
                    stacks[str(entry["stack"])] = dict(entry["entry"])
            except (ValueError, KeyError, TypeError):
                continue  # torn by a crash: that stack is read from the backend again
        return stacks

    def save(self, stacks: Mapping[str, dict]) -> None:
        """Replace the file with a whole read's record, and empty the journal it supersedes."""
        self.path.parent.mkdir(parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(prefix=".record-", suffix=".tmp", dir=self.path.parent)
        with os.fdopen(fd, "wb") as f:
            f.write(orjson.dumps({"backend": self.backend, "stacks": dict(stacks)},
                                 option=orjson.OPT_INDENT_2 | orjson.OPT_SORT_KEYS))
            f.flush()
            os.fsync(f.fileno())
        with self._mutex:
            os.replace(tmp, self.path)
            self.journal.unlink(missing_ok=True)

    def put(self, stack: str, outputs: Mapping[str, Any] | None, window: UpdateWindow | None = None) -> None:
        """After this process applied (outputs) or destroyed (None) a stack: the next read takes these outputs if
        the backend's stamp of the stack is of the update in `window`, else it reads the stack again."""
        entry = None if outputs is None else {"lastUpdate": None, "outputs": dict(outputs),
                                              **({"window": window.to_json()} if window else {})}
        line = orjson.dumps({"backend": self.backend, "stack": stack, "entry": entry}) + b"\n"
        with self._mutex:
            self.path.parent.mkdir(parents=True, exist_ok=True)
            with open(self.journal, "ab") as f:  # one write of one line: appends from several processes interleave whole
                f.write(line)

    def applied_from_cache(self, source: str) -> Applied:
        """What the cache holds, marked as guessed (the backend could not be read)."""
        return Applied({name: AppliedStack.from_outputs(e.get("outputs") or {}, e.get("lastUpdate"))
                        for name, e in self.load().items()},
                       source, guessed=True)
