"""The portal's key/value state: every key of the `state` table, with its type and its value before it is first
written, in one place. A module reads `RESOURCE_VERSION.get(conn)` (an int), never the key's text.

JSON values are also read and written as their text (`text`, `set_text`) where the text is what is wanted: it
crosses to the replan worker as it is, and the read cache compares texts, not parsed documents.
"""

from __future__ import annotations

import json
from typing import Any, Callable, Generic, TypeVar

from sqlalchemy import bindparam, select
from sqlalchemy.engine import Connection

from automation.portal.schema import state

T = TypeVar("T")

# built once: a request reads and writes a dozen state rows, and building each statement again (SQLAlchemy's
# expression objects) was a tenth of a write
_GET = select(state.c.value).where(state.c.key == bindparam("name"))
_UPDATE = state.update().where(state.c.key == bindparam("name")).values(value=bindparam("text"))


class Key(Generic[T]):
    """One row of the state table: its key, its type (how its text is decoded and encoded), and what it reads as
    before it is first written (`empty`, as text)."""

    def __init__(self, key: str, empty: str, decode: Callable[[str], T], encode: Callable[[T], str]):
        self.key, self.empty, self._decode, self._encode = key, empty, decode, encode

    def get(self, conn: Connection) -> T:
        return self._decode(self.text(conn))

    def set(self, conn: Connection, value: T) -> None:
        self.set_text(conn, self._encode(value))

    def text(self, conn: Connection) -> str:
        """The stored text, or `empty` when the key was never written."""
        found: str | None = conn.execute(_GET, {"name": self.key}).scalar()
        return self.empty if found is None else found

    def set_text(self, conn: Connection, text: str) -> None:
        if conn.execute(_UPDATE, {"name": self.key, "text": text}).rowcount == 0:
            conn.execute(state.insert().values(key=self.key, value=text))

    def written(self, conn: Connection) -> bool:
        return conn.execute(_GET, {"name": self.key}).scalar() is not None

    def delete(self, conn: Connection) -> None:
        conn.execute(state.delete().where(state.c.key == self.key))


def _number(key: str) -> Key[int]:
    return Key(key, "0", int, str)


def _text(key: str) -> Key[str]:
    return Key(key, "", str, str)


def _json(key: str, empty: str) -> Key[Any]:
    return Key(key, empty, json.loads, json.dumps)


# ---- the store's counters ---------------------------------------------------------------------------------
REVISION = _number("revision")  # moved on by every write transaction (Store.revision)
RESOURCE_VERSION = _number("resourceVersion")  # the objects' last resourceVersion: one per object write
CHANGES_FROM = _number("changesFrom")  # watches reach back to this resourceVersion, no further
LEDGER = _number("ledger")  # moves with every change of the reservations (Store.bump_ledger)
PLACEMENTS: Key[list[dict]] = _json("placements", "[]")  # before per-deployment rows: every reservation (migrated)

# ---- what the last full replan stored (service.commit) -------------------------------------------------------
PLAN: Key[dict] = _json("plan", '{"replicas": [], "unscheduled": []}')  # the whole plan, as `plan -o json`
SNAPSHOT: Key[dict] = _json("snapshot", "{}")  # what statuses are read from (conditions.snapshot)
SNAPSHOT_VERSION = _number("snapshotVersion")  # moves with each stored snapshot (parsed once per version)
DESIRED: Key[dict[str, str]] = _json("desired", "{}")  # each stack's desired fingerprint
PLANNED = _number("planned")  # the resourceVersion the stored replan read the fleet at
PROBLEMS: Key[list[str]] = _json("problems", "[]")  # objects a cluster would reject: no run is queued
POLICIES = _text("policies")  # the plan's `policies` (fleet/policy_preview.py) as JSON, "" without: the fleet page's
# the clusters' live capacity as last read (fleet/capacity.py's snapshot JSON; "": declared), and its digest when it
# last changed what a plan places on (a read that finds the same free devices changes only the time shown)
CAPACITY = _text("capacity")
CAPACITY_DIGEST = _text("capacityDigest")

# ---- the worker's copy of the record (automation/portal/worker.py) ----------------------------------------------
APPLIED: Key[dict[str, str | None]] = _json("applied", "{}")  # each applied stack's fingerprint
APPLIED_DETAILS: Key[dict[str, dict]] = _json("appliedDetails", "{}")  # each applied stack's outputs and time
CLUSTER_GATEWAYS: Key[dict[str, str]] = _json("clusterGateways", "{}")  # each cluster's gateway address
EXECUTOR_PROBLEM = _text("executorProblem")  # why no run can be executed ("" when runs can), shown in /plan
