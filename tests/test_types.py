"""The seams are typed, and the type checker holds them: a StackChange where a StackSpec belongs is an error.

The orchestrator once handed the runner a StackChange for stacks to delete, and the runner read
`.payload` (AttributeError at run time, after every test passed). With the runner a typed
Protocol, that mistake no longer reaches run time: `mypy` (run by `make test`) refuses it.
"""

import pathlib
import textwrap

from mypy import api

ROOT = pathlib.Path(__file__).resolve().parent.parent


def test_passing_a_stack_change_to_the_runner_is_a_type_error(tmp_path):
    snippet = tmp_path / "delete_defect.py"
    snippet.write_text(textwrap.dedent("""
        from automation.execution.runner import StackRunner
        from automation.planning.stacks import StackChange, StackSpec
        from fleet.stack_id import StackId


        def destroy(runner: StackRunner, change: StackChange, spec: StackSpec | None) -> None:
            runner.run("destroy", spec if spec is not None else change, lambda event: None)


        def destroy_fixed(runner: StackRunner, change: StackChange, spec: StackSpec | None) -> None:
            runner.run("destroy", spec if spec is not None else StackSpec.for_deletion(change.id), lambda event: None)
            runner.run("destroyy", StackSpec.for_deletion(StackId.model("ml", "qwen")), lambda event: None)
    """))
    out, _, status = api.run(["--config-file", str(ROOT / "pyproject.toml"), "--cache-dir", str(tmp_path / "cache"),
                              "--follow-imports", "silent", str(snippet)])
    errors = [line for line in out.splitlines() if ": error:" in line]
    assert status == 1
    assert any(":8: error: Argument 2 to \"run\" of \"StackRunner\"" in e for e in errors), out
    assert any(":13: error: Argument 1 to \"run\" of \"StackRunner\"" in e for e in errors), out  # not an operation
    assert len(errors) == 2, out
