"""The status snapshot with the placements of writes the background replan has not planned the fleet after.

A ModelDeployment write is placed at once (placing.py), but the snapshot statuses are read from is stored by the
background replan seconds later. Reads lay each pending deployment's part of the plan over that snapshot. The
overlay is made once per change of the pending rows (a write, a stored replan), not once per read, and costs
what is pending, not the fleet: its index by deployment is the snapshot's with the pending deployments replaced,
and the merged lists of replicas are made only if a reader asks for them (the page, composed replicas).
"""

from __future__ import annotations

import json

from sqlalchemy.engine import Connection

from automation.planning import conditions
from automation.portal.store import Store
SECTIONS = ("replicas", "unscheduled", "dropped")


def overlaid(plan: dict, parts: dict[str, dict]) -> dict:
    """A plan document with the parts of deployments placed since it was made (an empty part: deleted)."""
    if not parts:
        return plan
    out = {k: v for k, v in plan.items() if k not in conditions.DERIVED}
    for section in SECTIONS:
        out[section] = _merged(plan, parts, section)
    return out


def _merged(plan: dict, parts: dict[str, dict], section: str) -> list[dict]:
    entries = [e for e in plan.get(section, []) if e["deployment"] not in parts]
    for part in parts.values():
        entries += part.get(section, [])
    return sorted(entries, key=lambda e: e["deployment"])  # stable: each part keeps its own order


class Overlay(dict):
    """`overlaid(snapshot, parts)` for reading statuses: the index is ready, the merged sections are made on first
    access (`snap["replicas"]` or `snap.get("replicas")`). Read-only and never serialized."""

    def __init__(self, base: dict, parts: dict[str, dict]):
        super().__init__((k, v) for k, v in base.items() if k not in SECTIONS and k not in conditions.DERIVED)
        self._base, self._parts = base, parts
        index = dict(conditions.by_deployment(base))
        for deployment, part in parts.items():
            unscheduled = part.get("unscheduled", [])
            index[deployment] = (part.get("replicas", []), unscheduled[-1] if unscheduled else None)
        self[conditions.INDEX] = index

    def __missing__(self, key: str) -> list[dict]:
        if key not in SECTIONS:
            raise KeyError(key)
        merged = _merged(self._base, self._parts, key)  # two threads may make it at once: both make the same
        self[key] = merged
        return merged

    def get(self, key: str, default: object = None) -> object:
        return self[key] if key in SECTIONS else super().get(key, default)


class PendingOverlay:
    """The last overlay made (with the snapshot and Store.pending_marker it was made for), and the decoded parts it
    was made from, kept for the next change of pending rows."""

    def __init__(self) -> None:
        self._made: tuple[dict | None, tuple[int, int], dict] = (None, (0, 0), {})
        self._parts: dict[tuple[str, int], dict] = {}  # (deployment, version of its write) -> its part of the plan

    def over(self, snap: dict, store: Store, conn: Connection) -> dict:
        marker = store.pending_marker(conn)  # one row, where the rows themselves cost a millisecond a read
        if marker[0] == 0:
            self._made, self._parts = (None, (0, 0), {}), {}  # an overlay kept would keep an old snapshot alive
            return snap
        base, seen, made = self._made
        if base is snap and seen == marker:
            return made
        marks = tuple(store.pending_versions(conn))
        known = self._parts
        missing = [d for d, v in marks if (d, v) not in known]
        texts = store.pending_parts(conn, missing if len(missing) <= 100 else None)  # bounded IN lists
        if any((d, v) not in known and (d, v) not in texts for d, v in marks):  # a write between the two reads
            texts = store.pending_parts(conn, None)
            marks = tuple(sorted(texts))
        parts = {d: known[(d, v)] if (d, v) in known else json.loads(texts[(d, v)]) for d, v in marks}
        self._parts = {(d, v): parts[d] for d, v in marks}  # only what is still pending is kept
        made = Overlay(snap, parts)
        self._made = (snap, marker, made)
        return made
