"""The automation layer's error and the Pulumi CLI's: one line the user can act on, never a traceback.

Below every room of automation/ that runs the CLI (the record reads the backend through it, execution runs stacks
with it), so each of them may import it.
"""

from __future__ import annotations

import re
import shlex
import sys
from typing import Any, Callable

from fleet.errors import ModelplaneError

# the interpreter modelplane runs in (its virtual environment's), which has the Pulumi SDK: not whatever `python` is
INSTALL_HINT = ("install it (https://www.pulumi.com/docs/iac/download-install/), or on a machine with internet "
                f"`{shlex.quote(sys.executable)} -c 'from pulumi import automation; automation.PulumiCommand.install()'`")


def first_error(exc: Exception) -> str:
    """The CLI's first `error:` line. A CommandError's text is `code: N / stdout: ... / stderr: ...`."""
    text = getattr(exc, "stderr", None) or str(exc)
    every = text.splitlines()
    lines = [line[line.index("error:"):].strip() for line in every if "error:" in line]
    if lines and MANY_ERRORS.match(lines[0]):
        # "error: 1 error occurred:" says nothing: the errors are the "* ..." lines under it where the CLI lists
        # its diagnostics (an object the API server refused, and why, in the real engine's words)
        for at, line in enumerate(every):
            if not MANY_ERRORS.search(line.rstrip()):
                continue
            listed = []
            for item in every[at + 1:]:
                if not item.strip().startswith("* "):
                    break
                listed.append(item.strip()[2:])
            if listed:
                return f"error: {'; '.join(listed)}"[:400]
    return (lines[0] if lines else text.strip().splitlines()[-1] if text.strip() else type(exc).__name__)[:400]


MANY_ERRORS = re.compile(r"error: \d+ errors? occurred:?$")


class AutomationError(ModelplaneError):
    """A failure the user can act on, said in one line."""


class CLIMissing(AutomationError):
    pass


def started_cli(make: Callable[[], Any]) -> Any:
    """The automation API's PulumiCommand, made by `make`, which runs `pulumi version` at once: a CLI that is
    missing, fails there or is too old is one line the user can act on, never an internal error."""
    import shutil
    import subprocess

    from automation.local.toolchain import ToolchainMissing, activate

    try:
        activate()  # where no CLI is on PATH, the real engine `make toolchain` built (docs/local-fleet.md)
    except ToolchainMissing as exc:
        raise CLIMissing(str(exc)) from None
    try:
        return make()
    except subprocess.CalledProcessError as exc:
        raise AutomationError(f"`pulumi version` failed (exit code {exc.returncode}) for the Pulumi CLI at "
                              f"{shutil.which('pulumi') or 'pulumi'}: reinstall it or put a working one first on "
                              "PATH") from None
    except OSError:
        raise CLIMissing(f"the Pulumi CLI is not installed: {INSTALL_HINT}") from None
    except Exception as exc:
        if type(exc).__name__ != "InvalidVersionError":
            raise
        raise AutomationError(f"the Pulumi CLI cannot be used: {exc}") from None
