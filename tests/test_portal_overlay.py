"""Reads lay pending placements over the last snapshot (automation/portal/overlay.py). The overlay reads use is
made lazily and incrementally; it must read exactly as the whole merged document does, and be remade when, and
only when, the pending rows change."""

from __future__ import annotations

import json

from hypothesis import given, settings
from hypothesis import strategies as st

from automation.planning import conditions
from automation.portal.overlay import SECTIONS, Overlay, PendingOverlay, overlaid
from automation.portal.store import Store

DEPLOYMENTS = [f"team-{t}/model-{m}" for t in range(2) for m in range(4)]


def _entries(deployment: str, section: str, count: int) -> list[dict]:
    return [{"deployment": deployment, "name": f"{deployment.split('/')[1]}-{section}-{i}", "cluster": f"c{i}"}
            for i in range(count)]


def _part(counts: tuple[int, int, int], deployment: str) -> dict:
    return {section: _entries(deployment, section, n) for section, n in zip(SECTIONS, counts)}


counts = st.tuples(st.integers(0, 3), st.integers(0, 1), st.integers(0, 2))
documents = st.dictionaries(st.sampled_from(DEPLOYMENTS), counts)


def _document(parts: dict[str, tuple[int, int, int]]) -> dict:
    plan: dict = {section: [] for section in SECTIONS}
    for deployment, n in sorted(parts.items()):
        for section, entries in _part(n, deployment).items():
            plan[section] += entries
    return {**plan, "fingerprints": {"gateway": "abc"}, "routes": {}}


@settings(max_examples=200, deadline=None)
@given(documents, documents, st.booleans())
def test_the_overlay_reads_as_the_merged_document(base_counts, pending_counts, indexed_first):
    base = _document(base_counts)
    parts = {d: _part(n, d) if sum(n) else {} for d, n in pending_counts.items()}  # all zero: deleted
    if indexed_first:  # the stored snapshot's index is usually built by an earlier read
        conditions.by_deployment(base)
    whole = overlaid(base, parts)
    overlay = Overlay(base, parts)
    for deployment in DEPLOYMENTS:
        assert conditions.by_deployment(overlay).get(deployment, ([], None)) == \
            conditions.by_deployment(dict(whole)).get(deployment, ([], None))
    for section in SECTIONS:
        assert overlay.get(section) == whole[section] == overlay[section]
    assert overlay.get("fingerprints") == base["fingerprints"] and overlay.get("nothing", 7) == 7
    assert {k: v for k, v in base.items() if k != conditions.INDEX} == _document(base_counts)  # left as it was


def _store(tmp_path) -> Store:
    return Store(f"sqlite:///{tmp_path / 'p.db'}")


def _pend(store: Store, deployment: str, version: int, replicas: int) -> None:
    with store.write() as conn:
        part = json.dumps(_part((replicas, 0, 0), deployment))
        store.set_reservation(conn, deployment, "[]", part, pending=True, version=version)


def test_an_overlay_is_remade_only_when_the_pending_rows_change(tmp_path):
    store, pending = _store(tmp_path), PendingOverlay()
    snap = _document({DEPLOYMENTS[0]: (1, 0, 0), DEPLOYMENTS[1]: (2, 0, 0)})
    with store.read() as conn:
        assert pending.over(snap, store, conn) is snap  # nothing pending: the snapshot itself
    _pend(store, DEPLOYMENTS[0], 5, 3)
    with store.read() as conn:
        first = pending.over(snap, store, conn)
        assert pending.over(snap, store, conn) is first
    assert [r["name"] for r in conditions.by_deployment(first)[DEPLOYMENTS[0]][0]] == \
        ["model-0-replicas-0", "model-0-replicas-1", "model-0-replicas-2"]
    _pend(store, DEPLOYMENTS[1], 6, 0)
    with store.read() as conn:
        second = pending.over(snap, store, conn)
    assert second is not first
    assert conditions.by_deployment(second)[DEPLOYMENTS[1]] == ([], None)
    assert len(second["replicas"]) == 3
    _pend(store, DEPLOYMENTS[0], 8, 1)  # written again: as many rows pending as before, a newer write among them
    with store.read() as conn:
        third = pending.over(snap, store, conn)
    assert len(conditions.by_deployment(third)[DEPLOYMENTS[0]][0]) == 1 and len(third["replicas"]) == 1
    newer = _document({DEPLOYMENTS[0]: (1, 0, 0)})  # a replan stored another snapshot; rows still pending
    with store.read() as conn:
        assert pending.over(newer, store, conn) is not third
    with store.write() as conn:
        store.settle_pending(conn)
    with store.read() as conn:
        assert pending.over(newer, store, conn) is newer


def test_a_write_between_the_two_reads_of_the_pending_rows_is_read_whole(tmp_path):
    """PostgreSQL's read committed lets a write land between the versions read and the parts read."""
    store = _store(tmp_path)
    _pend(store, DEPLOYMENTS[0], 5, 1)
    _pend(store, DEPLOYMENTS[2], 7, 1)
    snap = _document({})

    class Raced(Store):
        def pending_versions(self, conn):  # as read just before a write replaced one row
            return [(d, 4 if v == 5 else v) for d, v in super().pending_versions(conn)]

    raced = Raced(f"sqlite:///{tmp_path / 'p.db'}")
    with raced.read() as conn:
        made = PendingOverlay().over(snap, raced, conn)
    assert [len(conditions.by_deployment(made)[d][0]) for d in (DEPLOYMENTS[0], DEPLOYMENTS[2])] == [1, 1]
    assert len(made["replicas"]) == 2


def test_a_replans_rows_are_stored_whole_and_none_pending(tmp_path):
    """`Store.store_planned` (one statement for a replan's updates, one for its inserts) leaves the rows as storing
    each with `set_reservation(pending=False)` did."""
    store = _store(tmp_path)
    _pend(store, DEPLOYMENTS[0], 7, 1)
    _pend(store, DEPLOYMENTS[1], 8, 2)
    with store.write() as conn:
        existing = store.reservation_rows(conn)
        store.store_planned(conn, {DEPLOYMENTS[0]: ('["a"]', "{}"), DEPLOYMENTS[2]: ('["b"]', '{"x": 1}')}, existing)
    with store.read() as conn:
        rows = store.reservation_rows(conn)
        assert rows[DEPLOYMENTS[0]] == ('["a"]', "{}") and rows[DEPLOYMENTS[2]] == ('["b"]', '{"x": 1}')
        assert rows[DEPLOYMENTS[1]] == existing[DEPLOYMENTS[1]]  # not given: left as it was
        assert store.pending_versions(conn) == [(DEPLOYMENTS[1], 8)]  # the stored rows are no longer pending
