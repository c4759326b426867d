"""Which `lastUpdate` stamps are this machine's own update (automation/record/applied.py, UpdateWindow): a stack
whose stamp is of the update this process ran is not read back; any other stamp, or a history entry that is not
that update's, means it is read again. Times as the automation API gives them: naive UTC; history in whole seconds.
"""

from __future__ import annotations

from datetime import datetime, timedelta
from types import SimpleNamespace

import pytest

from automation.record.applied import RecordCache, UpdateWindow

T0 = datetime(2026, 12, 5, 10, 0, 0, 400_000)  # this machine's clock when it called `up`
SECOND = timedelta(seconds=1)


def summary(start: datetime, end: datetime, kind: str = "update", result: str = "succeeded") -> SimpleNamespace:
    return SimpleNamespace(kind=kind, result=result, start_time=start, end_time=end)


@pytest.mark.parametrize("entry, began, seen, ok", [
    # the update ran inside the call: whole seconds, its start floored below the call's start
    (summary(T0.replace(microsecond=0), T0.replace(microsecond=0) + 3 * SECOND), T0, T0 + 3.5 * SECOND, True),
    # the history's latest entry began before the call: someone else's update, not this one
    (summary(T0 - 5 * SECOND, T0 + 2 * SECOND), T0, T0 + 3 * SECOND, False),
    # it ends after the automation API returned: a skewed clock (the Pulumi Cloud's, say), so no guess
    (summary(T0.replace(microsecond=0), T0 + 9 * SECOND), T0, T0 + 3 * SECOND, False),
    # a failed update, a refresh: not an update whose outputs the call returned
    (summary(T0.replace(microsecond=0), T0 + 2 * SECOND, result="failed"), T0, T0 + 3 * SECOND, False),
    (summary(T0.replace(microsecond=0), T0 + 2 * SECOND, kind="refresh"), T0, T0 + 3 * SECOND, False),
    (SimpleNamespace(kind="update", result="succeeded", start_time=None, end_time=None), T0, T0 + SECOND, False),
])
def test_a_window_is_kept_only_for_the_update_the_call_ran(entry, began, seen, ok):
    assert (UpdateWindow.of(entry, began, seen) is not None) is ok


START, END = T0.replace(microsecond=0), T0.replace(microsecond=0) + 3 * SECOND
WINDOW = UpdateWindow(START, END, END + timedelta(milliseconds=700))


@pytest.mark.parametrize("stamp, ours", [
    (START, True),  # the Pulumi Cloud's stamp: the update's end, whole seconds
    (END, True),
    (END + timedelta(milliseconds=650), True),  # a DIY backend's checkpoint time, milliseconds, in the last second
    (END + timedelta(milliseconds=750), False),  # after the automation API returned: a later update's
    (START - timedelta(milliseconds=1), False),  # an earlier update's
    (END + 2 * SECOND, False),
])
def test_a_stamp_is_ours_only_inside_the_window(stamp, ours):
    assert WINDOW.holds(stamp) is ours


def test_the_window_travels_through_the_cache_file(tmp_path):
    cache = RecordCache(tmp_path, "file:///backend")
    cache.put("model-a.b", {"x": 1}, WINDOW)
    cache.put("model-a.c", {"x": 2})
    entries = RecordCache(tmp_path, "file:///backend").load()
    assert UpdateWindow.from_json(entries["model-a.b"]["window"]) == WINDOW and entries["model-a.b"]["lastUpdate"] is None
    assert "window" not in entries["model-a.c"]
    assert UpdateWindow.from_json(["not a time", 1, None]) is None and UpdateWindow.from_json(None) is None


def test_the_cache_journal_holds_each_put_in_order_and_a_read_folds_it_into_the_file(tmp_path):
    cache = RecordCache(tmp_path, "file:///backend")
    cache.save({"model-a.old": {"lastUpdate": "2026-12-01T00:00:00", "outputs": {"x": 0}},
                "model-a.gone": {"lastUpdate": "2026-12-01T00:00:00", "outputs": {"x": 9}}})
    cache.put("model-a.b", {"x": 1}, WINDOW)
    cache.put("model-a.b", {"x": 3}, WINDOW)  # the later line wins
    cache.put("model-a.gone", None)  # destroyed here
    RecordCache(tmp_path, "file:///other").put("model-a.c", {"x": 2})  # another backend's line is not this one's
    with open(tmp_path / "record.journal", "ab") as f:
        f.write(b'{"backend": "file:///backend", "stack": "model-a.torn", "ent')  # cut off by a crash
    entries = RecordCache(tmp_path, "file:///backend").load()
    assert {name: e["outputs"] for name, e in entries.items()} == {"model-a.old": {"x": 0}, "model-a.b": {"x": 3}}
    assert UpdateWindow.from_json(entries["model-a.b"]["window"]) == WINDOW
    cache.save(entries)  # what a read does: the file holds it all, the journal is gone
    assert not (tmp_path / "record.journal").exists()
    assert RecordCache(tmp_path, "file:///backend").load() == entries
    assert RecordCache(tmp_path, "file:///other").load() == {}
