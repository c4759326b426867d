"""Selectors' answers kept on disk (fleet/device_selectors.py): the same answers as the interpreter's, from a cold cache
and from a warm one; a command that has seen every selector does not load the interpreter; an entry kept by other
code is not used."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from fleet import cel, device_selectors
from fleet.disk_cache import DiskCache
from tests.test_cel import BAD_VERSION, CASES, L4

ROOT = Path(__file__).resolve().parent.parent
EXPRESSIONS = sorted({e for e, _, _ in CASES}) + [
    "device.capacity[", "", "   ", "quantiti('1Gi')", 'quantity("10GB").sign() == 1', "x" * (device_selectors.MAX_LENGTH + 1),
    '[1, 2, 3].map(x, [1, 2, 3].map(y, [1, 2, 3].map(z, x * y * z))).size() > 0',
    'device.attributes["gpu.nvidia.com"].productName == "L4" && semver("1.2") == semver("1.2.0")']
COMPILING = [e for e in EXPRESSIONS if cel.check_expression(e) is None]  # validation refuses the others


@pytest.fixture
def fresh(monkeypatch):
    """A process's answers as if it had just started (what it keeps is read from this test's cache folder)."""
    monkeypatch.setattr(device_selectors, "ANSWERS", device_selectors._Answers())
    return lambda: monkeypatch.setattr(device_selectors, "ANSWERS", device_selectors._Answers())


def interpreter_answers() -> list:
    evaluator = cel.CelEvaluator()
    facts = [(cel.check_expression(e), cel.selector_cost(e), cel.literal_problems(e), cel.referenced_attributes(e))
             for e in EXPRESSIONS]
    results = [(evaluator.matches(e, d), evaluator.error([e], d)) for e in COMPILING for d in (L4, BAD_VERSION)]
    return [facts, results]


def kept_answers() -> list:
    evaluator = device_selectors.KeptEvaluator()
    facts = [tuple(device_selectors.expression_facts(e)) for e in EXPRESSIONS]
    results = [(evaluator.matches_all([e], d), evaluator.error([e], d)) for e in COMPILING for d in (L4, BAD_VERSION)]
    return [facts, results]


def test_kept_answers_are_the_interpreters_cold_and_warm(fresh):
    expected = interpreter_answers()
    assert kept_answers() == expected  # cold: every answer asked of the interpreter
    device_selectors.ANSWERS.save()
    fresh()
    device_selectors.ANSWERS.load()
    assert device_selectors.ANSWERS.results and device_selectors.ANSWERS.expressions
    assert device_selectors.ANSWERS.engine is None
    assert kept_answers() == expected  # warm: from the entry
    long = "x" * (device_selectors.MAX_LENGTH + 1)
    assert long not in device_selectors.ANSWERS.expressions  # refused by its length: not kept


def test_errors_are_told_of_the_selectors_asked_as_the_interpreter_tells_them(fresh):
    """A list of selectors stops at its first non-match: a later selector that would fail is not asked, and its
    error is not told, unless another list asked it."""
    failing = 'device.attributes["x.io"].y == 1'
    first, later = ['device.driver == "other"', failing], [failing]
    for make in (cel.CelEvaluator, device_selectors.KeptEvaluator):
        evaluator = make()
        assert not evaluator.matches_all(first, L4)
        told_before = evaluator.error(first, L4)
        assert not evaluator.matches_all(later, L4)
        told_after = evaluator.error(first, L4)
        assert (told_before, told_after is not None) == (None, True), make


def test_an_entry_of_other_code_is_not_used(fresh):
    expression = 'device.driver == "gpu.nvidia.com"'
    assert device_selectors.KeptEvaluator().matches_all([expression], L4)
    device_selectors.ANSWERS.save()
    entry = json.loads(DiskCache().read(device_selectors.ENTRY))
    key = next(iter(entry["results"]))
    entry["results"][key] = [False, None]  # what other code might have answered
    DiskCache().write(device_selectors.ENTRY, json.dumps(entry))
    fresh()
    assert not device_selectors.KeptEvaluator().matches_all([expression], L4)  # the same code: the entry is trusted
    entry["code"] = "0" * 64
    DiskCache().write(device_selectors.ENTRY, json.dumps(entry))
    fresh()
    assert device_selectors.KeptEvaluator().matches_all([expression], L4)  # other code: asked again


def test_a_command_that_has_seen_every_selector_does_not_load_the_interpreter(tmp_path):
    check = ("import sys\n"
             "sys.argv = ['modelplane', 'plan', '-f', sys.argv[1], '-o', 'json', '--fresh']\n"
             "from automation.cli.console import main\n"
             "try:\n"
             "    main()\n"
             "except SystemExit:\n"
             "    pass\n"
             "print('celpy' in sys.modules, file=sys.stderr)\n")

    def run() -> tuple[str, str]:
        result = subprocess.run([sys.executable, "-c", check, str(ROOT / "examples")], capture_output=True,
                                text=True, timeout=300, cwd=ROOT,
                                env={**os.environ, "MODELPLANE_CACHE_DIR": str(tmp_path / "cache")})
        return result.stdout, result.stderr.strip().splitlines()[-1]

    first, loaded = run()
    assert loaded == "True" and json.loads(first)["replicas"]
    second, loaded = run()
    assert loaded == "False" and second == first


def test_facts_json_cannot_hold_are_asked_not_kept(fresh):
    """An int attribute of more digits than Python turns into text (YAML hex allows it) is asked of the
    interpreter each time, as before, and never crashes the planner."""
    huge = device_selectors.DeviceFacts("gpu.nvidia.com", (("sm", ("int", 16 ** 4000)),))
    expression = 'device.attributes["gpu.nvidia.com"].sm > 50'
    interpreter = cel.CelEvaluator()
    kept = device_selectors.KeptEvaluator()
    assert kept.matches_all([expression], huge) == interpreter.matches(expression, huge)
    assert kept.error([expression], huge) == interpreter.error([expression], huge)
    assert not device_selectors.ANSWERS.results


def test_answers_that_depend_on_the_stack_are_not_kept(fresh):
    """celpy recurses per node: a deep selector that evaluates here fails further down the stack (the limit,
    not the selector). Such a failure is not kept for other callers."""
    n = 20
    while cel.CelEvaluator().matches("!" * (n + 20) + "true", L4) and n < 2000:
        n += 20  # the deepest nesting that still evaluates from here
    deep = "!" * n + "true"
    assert cel.CelEvaluator().matches(deep, L4)

    def at_depth(frames):
        return at_depth(frames - 1) if frames else device_selectors.KeptEvaluator().matches_all([deep], L4)

    assert not at_depth(300)  # deeper: the interpreter fails for the stack
    assert not device_selectors.ANSWERS.results  # and that answer is not kept
    assert device_selectors.KeptEvaluator().matches_all([deep], L4)  # asked again, from here


def test_the_entry_keeps_at_most_kept_answers(fresh, monkeypatch):
    monkeypatch.setattr(device_selectors, "KEPT", 50)
    sizes = []
    for process in range(4):  # four processes, each learning 30 answers the others did not
        fresh()
        evaluator = device_selectors.KeptEvaluator()
        for i in range(30):
            evaluator.matches_all([f"device.driver == 'd{process}-{i}'"], L4)
        device_selectors.ANSWERS.save()
        sizes.append(len(json.loads(DiskCache().read(device_selectors.ENTRY))["results"]))
    assert sizes == [30, 30, 30, 30], sizes  # 30 + 30 would be over 50: each process's own answers only


def test_an_entry_of_the_wrong_shape_is_not_used(fresh):
    """Authenticated (the user's own key) but not of the shape written: read as nothing, never a crash."""
    expression = 'device.driver == "gpu.nvidia.com"'
    device_selectors.KeptEvaluator().matches_all([expression], L4)
    device_selectors.expression_facts(expression)
    device_selectors.ANSWERS.save()
    entry = json.loads(DiskCache().read(device_selectors.ENTRY))
    for bad in ({**entry, "expressions": {expression: [12345, 1, [], []]}},
                {**entry, "results": {k: ["yes", None] for k in entry["results"]}},
                {**entry, "expressions": [1, 2]}):
        DiskCache().write(device_selectors.ENTRY, json.dumps(bad))
        fresh()
        device_selectors.ANSWERS.load()
        assert not device_selectors.ANSWERS.expressions and not device_selectors.ANSWERS.results
        assert device_selectors.check_expression(expression) is None
        assert device_selectors.KeptEvaluator().matches_all([expression], L4)


def test_answers_go_back_to_the_folder_they_were_read_from(fresh, monkeypatch, tmp_path):
    monkeypatch.setenv("MODELPLANE_CACHE_DIR", str(tmp_path / "first"))
    device_selectors.KeptEvaluator().matches_all(['device.driver == "x"'], L4)
    monkeypatch.setenv("MODELPLANE_CACHE_DIR", str(tmp_path / "second"))
    device_selectors.ANSWERS.save()
    assert DiskCache(tmp_path / "first").read(device_selectors.ENTRY) is not None
    assert not (tmp_path / "second").exists()
