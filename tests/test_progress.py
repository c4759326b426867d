"""The progress bar: shown to a person at a terminal, never in logs, pipes or JSON output."""

from __future__ import annotations

import io

from automation.cli.progress import progress as _progress
from automation.cli.progress import Bar


class Terminal(io.StringIO):
    def isatty(self) -> bool:
        return True


def test_the_bar_is_shown_only_on_a_terminal_and_never_for_json():
    assert not Bar("x", 3, stream=io.StringIO()).shown  # a pipe or a CI log
    assert Bar("x", 3, stream=Terminal()).shown
    assert not Bar("x", 3, output="json", stream=Terminal()).shown
    assert not Bar("x", 0, stream=Terminal()).shown  # nothing to count


def test_finished_stacks_move_the_bar_and_lines_print_above_it():
    screen = Terminal()
    with Bar("up: stacks", 3, stream=screen) as bar:
        emit = _progress("table", bar)
        emit({"stack": "platform-a", "type": "start", "operation": "up"})
        emit({"stack": "platform-a", "type": "succeeded", "changes": {"create": 4}})
        emit({"stack": "model-t.m", "type": "failed", "error": "quota"})
        emit({"stack": "service-t.m", "type": "skipped", "reason": "depends on model-t.m"})
        bar._progress.refresh()  # type: ignore[union-attr]
        shown = screen.getvalue()
    assert "3/3" in shown and "up: stacks" in shown
    for line in ("[platform-a] up ...", "[platform-a] done: create 4", "[model-t.m] failed: quota",
                 "[service-t.m] skipped: depends on model-t.m"):
        assert line in shown


def test_without_a_terminal_the_lines_are_exactly_as_before(capsys):
    with Bar("up: stacks", 1, stream=io.StringIO()) as bar:
        _progress("table", bar)({"stack": "gateway", "type": "succeeded", "changes": {}, "summary": "ok"})
    assert capsys.readouterr().out == "[gateway] done: ok\n"


def test_a_bar_whose_total_is_known_later_counts_up_to_it():
    """`render --out` knows how many stacks it writes only once the command has composed its own."""
    screen = Terminal()
    with Bar("writing stacks", None, stream=screen) as bar:
        assert bar.shown
        bar.expect(5)
        bar.advance(2)
        bar.advance(3)
        bar._progress.refresh()  # type: ignore[union-attr]
        shown = screen.getvalue()
    assert "5/5" in shown and "writing stacks" in shown


def test_a_resources_step_is_printed_only_when_asked_for_and_its_failure_always(capsys):
    """A fleet's first `up` takes thousands of resource steps: a line per stack by default, each step with `up -v`;
    a diagnostic (why a step failed) is printed either way."""
    events = [{"stack": "platform-a", "type": "start", "operation": "up"},
              {"stack": "platform-a", "type": "resource", "op": "create", "urn": "urn:pulumi:s::p::k8s:Namespace::ns"},
              {"stack": "platform-a", "type": "diagnostic", "severity": "error", "message": "quota exceeded"},
              {"stack": "platform-a", "type": "succeeded", "changes": {"create": 1}}]
    for verbose in (False, True):
        emit = _progress("table", None, verbose)
        for event in events:
            emit(event)
        out, err = capsys.readouterr()
        assert out.splitlines() == ["[platform-a] up ...", *(["  [platform-a] create ns"] if verbose else []),
                                    "[platform-a] done: create 1"]
        assert err == "  [platform-a] error: quota exceeded\n"
