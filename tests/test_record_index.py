"""The record read from a file:// backend lists the checkpoints and takes the outputs from the fleet's index or the
local cache when they were read at the object version listed (automation/record/index.py): no `stack ls` (which
loads every checkpoint), and a stack whose checkpoint changed since is read from it, never taken stale.

Against the Pulumi CLI double (tests/pulumi_double.py) on the example fleet the lifecycle tests apply.
"""

from __future__ import annotations

import json
import pathlib
import shutil
from datetime import datetime, timedelta, timezone

import pytest

from automation.record.applied import UpdateWindow
from automation.record.backend import PulumiRecord
from automation.record.index import CheckpointFolder
from tests.test_lifecycle import applied_driver, set_gateway_address


@pytest.fixture
def applied(tmp_path_factory, monkeypatch, capsys):
    return applied_driver(tmp_path_factory, monkeypatch, capsys)


def _verbs(driver, since: int) -> list[tuple[str, str | None]]:
    out = []
    for call in driver.calls()[since:]:
        argv = [a for a in call["argv"] if a != "--non-interactive"]
        out.append((" ".join(argv[:2]), call.get("stack")))
    return out


def _fresh_read(driver, tmp_path: pathlib.Path, name: str):
    """A read by a machine with only the backend (a CI clone): no local cache."""
    backend = driver.work / ".modelplane" / "backend"
    state = tmp_path / name
    state.mkdir()
    since = len(driver.calls())
    applied = PulumiRecord(state, f"file://{backend}").read()
    return applied, _verbs(driver, since)


def _record(applied) -> dict:
    return {name: (s.fingerprint, dict(s.outputs), [p.to_dict() for p in s.placements])
            for name, s in applied.stacks.items()}


def test_a_fresh_machine_reads_the_record_from_the_index_without_loading_a_checkpoint(applied, tmp_path):
    backend = applied.work / ".modelplane" / "backend"
    index = backend / ".modelplane" / "index" / "_.json"
    index.unlink(missing_ok=True)  # as an older modelplane left the backend: no index
    first, calls = _fresh_read(applied, tmp_path, "first")
    stacks = set(first.stacks)
    assert len(stacks) == 15 and all(s.fingerprint for s in first.stacks.values())
    # every stack read from its checkpoint once, the read says so, and the index is written with what it read
    assert sorted(stack for verb, stack in calls if verb == "stack output") == sorted(stacks)
    assert "15 of 15 stacks read from their checkpoints: no index; index rewritten" in first.source
    assert index.is_file()
    second, calls = _fresh_read(applied, tmp_path, "second")
    assert calls == []  # no `stack ls`, no `stack output`: the listing and the index are two requests
    assert _record(second) == _record(first) and second.source == f"the Pulumi backend file://{backend}"
    # and what the index gives is what the CLI's own read gives
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(CheckpointFolder, "of", classmethod(lambda cls, backend: None))
        listed, calls = _fresh_read(applied, tmp_path, "listed")
    assert ("stack ls", None) in calls and _record(listed) == _record(first)


def test_a_stack_updated_elsewhere_is_read_from_its_checkpoint_and_the_index_repaired(applied, tmp_path):
    backend = applied.work / ".modelplane" / "backend"
    _fresh_read(applied, tmp_path, "warm")  # the index holds every stack
    set_gateway_address(backend, "gke-us-central", "192.0.2.99")  # another machine's update: the index is stale
    read, calls = _fresh_read(applied, tmp_path, "after")
    assert read.stacks["platform-gke-us-central"].outputs["gatewayAddress"] == "192.0.2.99"
    assert [stack for verb, stack in calls if verb == "stack output"] == ["platform-gke-us-central"]
    assert "1 of 15 stacks read from their checkpoints" in read.source
    index = json.loads((backend / ".modelplane" / "index" / "_.json").read_text())
    assert index["stacks"]["modelplane/platform-gke-us-central"]["outputs"]["gatewayAddress"] == "192.0.2.99"
    again, calls = _fresh_read(applied, tmp_path, "repaired")
    assert calls == [] and _record(again) == _record(read)


def test_the_local_cache_is_not_taken_for_a_stack_whose_checkpoint_changed(applied, tmp_path):
    """The machine that read the record before: its cache is keyed by the object version, so a later write of
    the checkpoint (whatever its contents' times say) is read back."""
    backend = applied.work / ".modelplane" / "backend"
    state = tmp_path / "machine"
    state.mkdir()
    record = PulumiRecord(state, f"file://{backend}")
    record.read()
    set_gateway_address(backend, "gke-us-central", "192.0.2.77")
    since = len(applied.calls())
    read = PulumiRecord(state, f"file://{backend}").read()
    assert read.stacks["platform-gke-us-central"].outputs["gatewayAddress"] == "192.0.2.77"
    assert [s for verb, s in _verbs(applied, since) if verb == "stack output"] == ["platform-gke-us-central"]


def test_an_index_that_cannot_be_written_does_not_fail_the_read(applied, tmp_path, monkeypatch):
    backend = applied.work / ".modelplane" / "backend"
    shutil.rmtree(backend / ".modelplane", ignore_errors=True)

    def refuse(self, fleet, stacks):
        raise PermissionError(13, "Permission denied")

    monkeypatch.setattr(CheckpointFolder, "put_index", refuse)
    read, _ = _fresh_read(applied, tmp_path, "readonly")
    assert len(read.stacks) == 15 and "index not written: Permission denied" in read.source


def test_a_backend_in_the_old_layout_is_read_through_the_cli(tmp_path):
    (tmp_path / ".pulumi").mkdir()
    assert CheckpointFolder.of(f"file://{tmp_path}") is None  # no meta.yaml: stacks of every project in one folder
    (tmp_path / ".pulumi" / "meta.yaml").write_text("version: 0\n")
    assert CheckpointFolder.of(f"file://{tmp_path}") is None
    (tmp_path / ".pulumi" / "meta.yaml").write_text("version: 1\n")
    assert CheckpointFolder.of(f"file://{tmp_path}") is not None
    assert CheckpointFolder.of("s3://bucket/prefix") is None


def test_the_listing_stamp_changes_with_every_write_of_a_checkpoint(tmp_path):
    """The double's backend, as the CLI's blob store, writes a temporary file and renames it."""
    from tests.pulumi_engine import Backend

    (tmp_path / ".pulumi").mkdir()
    store = Backend(f"file://{tmp_path}")
    store.create("modelplane", "gateway")
    folder = CheckpointFolder.of(f"file://{tmp_path}")
    assert folder is not None
    before = folder.list("modelplane")
    store.save("modelplane", "gateway", store.load("modelplane", "gateway"))  # same bytes, written again
    after = folder.list("modelplane")
    assert [x.stack for x in before] == ["gateway"] == [x.stack for x in after]
    assert before[0].stamp != after[0].stamp


def test_this_machines_own_update_is_known_by_when_its_checkpoint_was_written(applied, tmp_path):
    """A stack this machine applied is taken from what its `up` returned when the checkpoint object was written
    between the update's start and the automation API's reads right after it (on a busy machine, after the
    history's whole-second end); a write after those reads is someone else's, and the stack is read."""
    backend = applied.work / ".modelplane" / "backend"
    state = tmp_path / "machine"
    state.mkdir()
    first = PulumiRecord(state, f"file://{backend}").read()
    st = (backend / ".pulumi" / "stacks" / "modelplane" / "gateway.json").stat()
    written = datetime.fromtimestamp(st.st_mtime_ns / 1e9, timezone.utc).replace(tzinfo=None)
    mine = {**first.stacks["gateway"].to_outputs(), "probe": "as this machine's up returned it"}
    second = timedelta(seconds=1)
    PulumiRecord(state, f"file://{backend}").applied(
        "gateway", mine, UpdateWindow(written - 3 * second, written - 2 * second, written - second))
    read = PulumiRecord(state, f"file://{backend}").read()
    assert read.stacks["gateway"].outputs == first.stacks["gateway"].outputs  # what the index read, not `mine`
    PulumiRecord(state, f"file://{backend}").applied(
        "gateway", mine, UpdateWindow(written - 3 * second, written - 2 * second, written + second))
    since = len(applied.calls())
    read = PulumiRecord(state, f"file://{backend}").read()
    assert read.stacks["gateway"].outputs.get("probe") == "as this machine's up returned it"
    assert [s for verb, s in _verbs(applied, since) if verb == "stack output"] == []


def test_a_backend_that_cannot_be_listed_is_said_so_not_blamed_on_the_cli(tmp_path, monkeypatch):
    from automation.execution.runner import AutomationError

    backend = tmp_path / "backend"
    (backend / ".pulumi").mkdir(parents=True)
    (backend / ".pulumi" / "meta.yaml").write_text("version: 1\n")

    def refuse(self, project):
        raise PermissionError(13, "Permission denied")

    monkeypatch.setattr(CheckpointFolder, "list", refuse)
    with pytest.raises(AutomationError, match="could not list the stacks in the Pulumi backend .*Permission denied"):
        PulumiRecord(tmp_path / "state", f"file://{backend}").read()
    guessed = PulumiRecord(tmp_path / "state", f"file://{backend}", strict=False).read()
    assert guessed.guessed and "Permission denied" in guessed.source and "not installed" not in guessed.source


def test_a_stack_this_machine_applied_reads_the_same_applied_time_as_on_a_machine_that_reads_its_history():
    """`status -o json` of the machine that applied a stack and of a second operator with only the backend agree
    (the real engine showed `2026-12-06T21:04:01.923806`, the checkpoint file's time, against the history's
    `2026-12-06T21:04:01.000Z`): this machine's own update is given its history's end, as the CLI writes it."""
    from automation.record.backend import history_time

    end = datetime(2026, 12, 6, 21, 4, 1, tzinfo=timezone.utc)
    assert history_time(end) == "2026-12-06T21:04:01.000Z"
    assert history_time(end.astimezone(timezone(timedelta(hours=2)))) == "2026-12-06T21:04:01.000Z"
    assert history_time(end.replace(tzinfo=None)) == "2026-12-06T21:04:01.000Z"  # naive: already UTC
