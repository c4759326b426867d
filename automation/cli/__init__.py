"""The `modelplane` command line, one module per command group:

- `base`: the command group, the options every command means the same by, loading and the record;
- `manifests`: validate, explain, schema, migrate; `plans`: plan, render; `stacks`: preview, up, drift, refresh, destroy
  (through `applying`, the CLI's side of the one road); `review` (the pull-request comment); `status`; `portal`: serve, apply; `operator`: export.

click gives us subcommands, repeatable options and clean usage errors; every failure of ours becomes one line and
a non-zero exit, never a traceback.
"""

from __future__ import annotations

import inspect
import signal
import threading

import click

from automation.cli import capacity, local, manifests, operator, plans, portal, review, stacks, status  # noqa: F401  (each adds its commands)
from automation.cli.base import EXIT_INTERNAL, EXIT_INVALID, EXIT_USAGE, cli
from fleet.errors import ModelplaneError


EXAMPLES = {
    "validate": "modelplane validate -f examples/",
    "explain": "modelplane explain ModelDeployment.spec.template.spec.engines",
    "schema": "modelplane schema --out schemas",
    "migrate": "modelplane migrate -f examples/ --gateway-cluster gke-us-central --write",
    "plan": "modelplane plan -f examples/ --explain -n ml-team",
    "render": "modelplane render -f examples/ --out out/render",
    "preview": "modelplane preview --offline -f examples/",
    "review": "modelplane review -f head/fleet --against base/fleet --out comment.md",
    "status": "modelplane status -f examples/",
    "up": "modelplane up -f examples/ --kubeconfig byo-eu=$HOME/.kube/byo-eu",
    "drift": "modelplane drift -f examples/",
    "refresh": "modelplane refresh -f examples/",
    "destroy": "modelplane destroy -f examples/ --unprotect --yes",
    "apply": "MODELPLANE_TOKEN=... modelplane apply -f examples/models --server https://portal.example.internal",
    "serve": "modelplane serve --tokens tokens.yaml --no-apply",
    "operator": "modelplane operator export -f fleet/ --out out/operator --backend s3://bucket/fleet "
                "--git-url https://github.com/acme/fleet --secret cloud-credentials",
}
for _name, _example in EXAMPLES.items():  # one example per command, shown by --help
    cli.commands[_name].help = f"{inspect.cleandoc(cli.commands[_name].help or '')}\n\n\b\nExample:\n  {_example}"


def _interrupt(signum, frame) -> None:
    raise KeyboardInterrupt


def main(argv: list[str] | None = None, restore_signals: bool = True) -> int:
    """`restore_signals`: put SIGINT's and SIGTERM's handlers back before returning, for a caller that goes on in the
    same process (tests); the command itself keeps them until it exits (a Ctrl-C during its exit is held too)."""
    # SIGTERM (`kill`, `timeout`, a cancelled CI job) stops a run as Ctrl-C does: the running engines are asked to
    # stop at a safe point and waited for. Before, the process died at once and its `pulumi` processes with it
    # (their output pipe closed) mid-update, leaving the stack locked and its steps in flight pending.
    handling = threading.current_thread() is threading.main_thread()  # only there can a handler be set
    previous = {number: signal.getsignal(number) for number in (signal.SIGINT, signal.SIGTERM)} if handling else {}
    if handling:
        signal.signal(signal.SIGTERM, _interrupt)
    try:
        return _main(argv)
    finally:
        for number, handler in previous.items() if restore_signals else ():
            signal.signal(number, signal.SIG_DFL if handler is None else handler)


def _main(argv: list[str] | None) -> int:
    try:
        cli.main(args=argv, prog_name="modelplane", standalone_mode=False)
    except click.exceptions.Abort:
        click.echo("interrupted", err=True)
        return 130
    except click.ClickException as exc:
        exc.show()
        return exc.exit_code
    except SystemExit as exc:
        return exc.code if isinstance(exc.code, int) else (0 if exc.code is None else EXIT_INVALID)
    except KeyboardInterrupt:
        click.echo("interrupted", err=True)
        return 130
    except BrokenPipeError:
        return 0
    except ModelplaneError as exc:  # raised on purpose, and not said by the command: its one line, as a usage error
        click.echo(f"error: {exc}", err=True)
        return EXIT_USAGE
    except Exception as exc:  # a bug of ours: one line, never a traceback
        click.echo(f"modelplane: internal error: {type(exc).__name__}: {exc} (please report this)", err=True)
        return EXIT_INTERNAL
    return 0

