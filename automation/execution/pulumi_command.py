"""The `pulumi` processes of the local executor: Pulumi's automation API's command, able to interrupt one stack's
process cleanly (automation/execution/pulumi_runner.py runs every stack through it)."""

from __future__ import annotations

import os
import signal
import subprocess
import threading
from typing import Any

READS = (("stack", "output"), ("stack", "history"))  # what the SDK reads after an update, changing nothing


def interruptible_command(auto: Any) -> Any:
    """The automation API's PulumiCommand, able to interrupt the `pulumi` process of one stack.

    On a DIY backend `pulumi cancel` only removes the stack's lock while the engine keeps going; the
    clean stop is one SIGINT to the process itself (the engine finishes the steps in flight, writes its
    state, and exits; a second SIGINT terminates it at once). The SDK keeps no handle on its process, so this
    command starts it itself, in a process group of its own so that a terminal's Ctrl-C is not that second one.

    One stack's operation is several processes (`stack select`, `config set-all`, `up`, then reads of what it
    did): once the stack is interrupted, the command starts none of them again but those reads, so an interrupt
    that falls between two of them still stops the stack. Whether a process starts is decided under the lock
    `interrupt` takes, so no process of an interrupted stack starts unsignalled.
    """

    class InterruptibleCommand(auto.PulumiCommand):
        def __init__(self) -> None:
            super().__init__()
            self._processes: dict[str, set[subprocess.Popen]] = {}
            self._interrupted: set[str] = set()  # stacks that start no new operation (Ctrl-C came)
            self._guard = threading.Lock()

        def run(self, args, cwd, additional_env, on_output=None, on_error=None):
            argv = list(args)
            if "--non-interactive" not in argv:
                argv.insert(0, "--non-interactive")
            stack = argv[argv.index("--stack") + 1] if "--stack" in argv[:-1] else ""
            env = {**os.environ, **additional_env, "PULUMI_AUTOMATION_API": "true"}
            words = tuple(a for a in argv if not a.startswith("-"))[:2]
            with self._guard:
                if stack in self._interrupted and words not in READS:
                    raise auto.errors.create_command_error(auto._cmd.CommandResult(
                        stdout="", stderr=f"error: interrupted: `pulumi {' '.join(words)}` was not started", code=255))
                # its own process group: a terminal's Ctrl-C reaches only modelplane, which sends the one SIGINT
                # that makes the CLI cancel at a safe point; the terminal's as well was a second, and the CLI
                # terminated at once, leaving the step in flight a pending operation (the real engine showed it)
                process = subprocess.Popen([self.command, *argv], cwd=cwd, env=env, stdout=subprocess.PIPE,
                                           stderr=subprocess.PIPE, encoding="utf-8", process_group=0)
                self._processes.setdefault(stack, set()).add(process)
            try:
                out, err = process.communicate()
            finally:
                with self._guard:
                    self._processes[stack].discard(process)
            for callback, text in ((on_output, out), (on_error, err)):
                for line in text.splitlines() if callback else ():
                    callback(line)
            result = auto._cmd.CommandResult(stdout=out.rstrip("\n"), stderr=err.rstrip("\n"), code=process.returncode)
            if process.returncode != 0:
                raise auto.errors.create_command_error(result)
            return result

        def interrupt(self, stack: str) -> None:
            with self._guard:
                self._interrupted.add(stack)
                running = list(self._processes.get(stack, ()))
            for process in running:
                process.send_signal(signal.SIGINT)

    return InterruptibleCommand()


