"""`plan --against` loads and plans the base in a forked process while it plans the head
(automation/planning/base_beside.py). The answer must be the one planning both in one process gives, with and
without a kept summary, and a base that fails in the child must fail the command as it would in one process: the
same exception, the same words said, no process left behind."""

from __future__ import annotations

import multiprocessing
import os
import pathlib
import shutil

import pytest
import yaml

from automation.cli import main
from automation.cli.base import EXIT_INVALID
from automation.planning import compare as compare_module
from automation.planning.base_beside import BaseBeside
from automation.planning.base_cache import BaseCache, base_key
from automation.planning.compare import Base, compare
from benchmarks.plan_bench import generate
from tests.test_incremental_compare import SERVICE_EDITS, fleet_of, outputs, with_services

ROOT = pathlib.Path(__file__).resolve().parent.parent


def beside(fleet, cache=None, recorded=None) -> Base:
    """The base as `plan --against` has it with a CPU to spare: loading in a child (here, the fleet the child
    inherits)."""
    return Base(beside=BaseBeside(lambda: fleet, recorded or [], None, None, cache), cache=cache)


@pytest.mark.parametrize("edit", ["one deployment gains a replica", "one deployment's image", "a service's weight",
                                  "a cluster removed", "a class changes memory", "nothing"])
def test_a_base_planned_beside_the_head_gives_the_answer_of_one_process(edit, tmp_path):
    objects = with_services(generate(24, 6))
    base, head = fleet_of(objects), fleet_of(SERVICE_EDITS[edit](objects))
    full = outputs(compare(base, head, incremental=False))
    assert outputs(compare(None, head, base=beside(base))) == full
    cache = BaseCache(tmp_path)
    assert outputs(compare(None, head, base=beside(base, cache))) == full  # cold: the child's summary is kept
    assert len(list((tmp_path / "plans").glob("*.json"))) == 1
    assert outputs(compare(None, head, base=beside(base, cache))) == full  # planned again: the same summary kept
    assert [p.name for p in (tmp_path / "plans").glob("*.json")] == [f"{base_key(base, [])}.json"]
    assert outputs(compare(base, head, cache=cache)) == full  # found in one process by the key the child gave
    assert multiprocessing.active_children() == []


def test_an_exception_in_the_child_is_raised_here_with_what_it_said(capsys):
    def load():
        print("warning: something about the base", file=os.sys.stderr)
        raise ValueError("the base cannot be planned")

    fleet = fleet_of(generate(8, 3))
    with pytest.raises(ValueError, match="the base cannot be planned"):
        compare(None, fleet, base=Base(beside=BaseBeside(load, [], None, None)))
    assert capsys.readouterr().err == "warning: something about the base\n"
    assert multiprocessing.active_children() == []


def test_an_exception_that_does_not_pickle_arrives_as_its_words():
    class Local(Exception):  # a class pickle cannot find by name
        pass

    def load():
        raise Local("no pickle for me")

    with pytest.raises(RuntimeError, match="Local: no pickle for me"):
        compare(None, fleet_of(generate(8, 3)), base=Base(beside=BaseBeside(load, [], None, None)))


def test_a_child_that_dies_is_an_error_not_a_hang():
    def load():
        os._exit(3)

    with pytest.raises(RuntimeError, match=r"ended without an answer \(exit code 3\)"):
        compare(None, fleet_of(generate(8, 3)), base=Base(beside=BaseBeside(load, [], None, None)))


class TwoArgs(Exception):
    """Pickles (by name, with its message as its one argument) but cannot be read back: it wants two."""

    def __init__(self, a, b):
        super().__init__(f"{a} {b}")


def test_an_exception_that_cannot_be_read_back_arrives_as_its_words():
    def load():
        raise TwoArgs("no", "way back")

    with pytest.raises(RuntimeError, match="TwoArgs: no way back"):
        compare(None, fleet_of(generate(8, 3)), base=Base(beside=BaseBeside(load, [], None, None)))


@pytest.mark.parametrize("how", ["raises", "dies"])
def test_a_child_that_fails_after_sending_its_inputs_says_why(how, monkeypatch):
    """Between its inputs and the head's answer the child hashes the base's cache key: a failure there reaches the
    caller as the child's error, or as its end, never as a broken pipe."""
    import automation.planning.base_cache as base_cache

    def failing(*a, **k):
        if how == "dies":
            os._exit(5)
        raise ValueError("no key for this base")

    monkeypatch.setattr(base_cache, "base_key", failing)  # read by the child when it forks
    fleet = fleet_of(generate(8, 3))
    expected = (RuntimeError, r"exit code 5") if how == "dies" else (ValueError, "no key for this base")
    with pytest.raises(expected[0], match=expected[1]):
        compare(None, fleet, base=Base(beside=BaseBeside(lambda: fleet, [], None, None)))
    assert multiprocessing.active_children() == []


def test_a_child_whose_parent_is_gone_ends(tmp_path):
    """The child holds no copy of the parent's end of the pipe: when the parent goes without a word (killed), the
    child's wait ends instead of lasting for ever."""
    fleet = fleet_of(generate(8, 3))
    side = BaseBeside(lambda: fleet, [], None, None)
    side.inputs()  # the child now waits for which stacks the head has the same
    side._conn.close()  # as a killed parent's end closes: no summarise, no terminate
    side._process.join(timeout=30)
    assert not side._process.is_alive() and side._process.exitcode == 0


def test_the_summary_kept_by_a_forked_base_is_completed_by_the_one_before(tmp_path, monkeypatch):
    """A head changes one deployment and keeps the base's summary (in one process); a second head changes another,
    and its base is planned in a child, which finds that summary under the same key: the summary it keeps knows both
    deployments' fingerprints, so either head is answered from it, without planning the base again."""
    from tests.test_incremental_compare import EDITS, _edit, _engine_image

    objects = generate(24, 6)
    base = fleet_of(objects)
    first = fleet_of(EDITS["one deployment's image"](objects))
    other = fleet_of(_edit(objects, "ModelDeployment", 7, lambda d: _engine_image(d, "vllm/vllm-openai:v0.13.0")))
    cache = BaseCache(tmp_path)
    compare(base, first, cache=cache)
    assert outputs(compare(None, other, base=beside(base, cache))) == outputs(compare(base, other, incremental=False))
    planned: list[object] = []
    real_state = compare_module.desired_state
    monkeypatch.setattr(compare_module, "desired_state",
                        lambda fleet, *a, **k: planned.append(fleet) or real_state(fleet, *a, **k))
    for head in (first, other):
        full = outputs(compare(base, head, incremental=False))
        planned.clear()
        assert outputs(compare(base, head, cache=cache)) == full
        assert [id(f) for f in planned] == [id(head)], "the kept summary lacked a fingerprint"


def test_a_head_that_fails_stops_the_child(monkeypatch):
    fleet = fleet_of(generate(8, 3))

    def failing(*a, **k):
        raise KeyError("the head")

    side = Base(beside=BaseBeside(lambda: fleet, [], None, None))
    monkeypatch.setattr(compare_module, "schedule", failing)  # after the fork: the child plans as usual
    with pytest.raises(KeyError):
        compare(None, fleet, base=side)
    assert multiprocessing.active_children() == []


def _pr(tmp_path: pathlib.Path, base_edit=None) -> tuple[pathlib.Path, pathlib.Path]:
    base, head = tmp_path / "base", tmp_path / "head"
    shutil.copytree(ROOT / "examples", base)
    shutil.copytree(ROOT / "examples", head)
    path = head / "models" / "qwen3-8b.yaml"
    path.write_text(path.read_text().replace("replicas: 2", "replicas: 3"))
    if base_edit is not None:
        base_edit(base)
    return base, head


def _broken(base: pathlib.Path) -> None:
    path = base / "models" / "qwen3-8b.yaml"
    docs = list(yaml.safe_load_all(path.read_text()))
    docs[0]["spec"]["replicas"] = "many"
    path.write_text(yaml.safe_dump_all(docs))


@pytest.mark.parametrize("edit", ["valid", "invalid base", "invalid head", "both invalid"])
def test_plan_against_says_and_prints_the_same_with_a_cpu_to_spare_or_not(edit, tmp_path, capsys, monkeypatch):
    """Run twice each way, each way with its own cache: cold, then (when valid) with the base's summary kept, read
    by its files' key. The head says a note of its own, which must come before the note that the base was read as
    summarised (as when the base is read after the head)."""
    import automation.cli.plans as plans

    base, head = _pr(tmp_path, _broken if "base" in edit or "both" in edit else None)
    (head / "extra.yaml").write_text("apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: not-ours\n")
    if "head" in edit or "both" in edit:
        _broken(head)
    said = []
    for spare in (True, False):
        monkeypatch.setattr(plans, "cpu_to_spare", lambda spare=spare: spare)
        monkeypatch.setenv("MODELPLANE_CACHE_DIR", str(tmp_path / f"cache-{spare}"))
        for _ in range(2):
            code = main(["plan", "-f", str(head), "--against", str(base), "-o", "json", "--fresh"])
            said.append((code, *capsys.readouterr()))
    assert said[:2] == said[2:]
    assert said[0][0] == (0 if edit == "valid" else EXIT_INVALID)
    assert "skipped v1 ConfigMap/not-ours" in said[0][2]
    if edit == "valid":
        kept = said[1][2]
        assert "read as summarised before" in kept
        assert kept.index("skipped v1 ConfigMap/not-ours") < kept.index("read as summarised before")
    else:  # the head's problems, or else the base's (a command stops at the first invalid side)
        assert "spec.replicas" in said[0][2] and str(base if edit == "invalid base" else head) in said[0][2]
    assert multiprocessing.active_children() == []


def test_a_cpu_to_spare_is_one_this_process_may_use(monkeypatch):
    """A container or `taskset` that lets the command use one CPU of many: no fork (the two would share it)."""
    from automation.cli.base import cpu_to_spare

    monkeypatch.setattr(os, "cpu_count", lambda: 8)
    monkeypatch.setattr(os, "sched_getaffinity", lambda pid: {3}, raising=False)
    assert not cpu_to_spare()
    monkeypatch.setattr(os, "sched_getaffinity", lambda pid: {0, 1}, raising=False)
    assert cpu_to_spare()
