"""Commands of the self-service portal: `serve` runs it, `apply` pushes manifests to it."""

from __future__ import annotations

import click

from automation.cli.base import (
    EXIT_INVALID,
    OPERATOR_PARALLEL,
    cli,
    executor_options,
    load,
    operator_executor,
    paths_option,
)


@cli.command()
@paths_option
@click.option("--server", required=True, metavar="URL", help="The portal, e.g. https://modelplane.example.internal")
@click.option("--token-file", "token_file", default=None, type=click.Path(dir_okay=False),
              help="A file holding the bearer token (default: $MODELPLANE_TOKEN). Never on the command line.")
def apply(paths, server, token_file) -> None:
    """Push manifests to a portal (validated here first; nothing is sent if any is invalid)."""
    import os

    from automation.cli.apply_remote import PushError, push

    loaded = load(paths)
    token = (open(token_file).read().strip() if token_file else os.environ.get("MODELPLANE_TOKEN", "")).strip()
    if not token:
        click.echo("error: no token: set MODELPLANE_TOKEN or give --token-file", err=True)
        raise SystemExit(2)
    try:
        for pushed in push(loaded.fleet, server, token):
            click.echo(f"{pushed.ref} {pushed.verb}")
            for warning in pushed.warnings:
                click.echo(f"Warning: {warning}", err=True)
    except PushError as exc:
        click.echo(f"error: {exc}", err=True)
        raise SystemExit(EXIT_INVALID) from None


@cli.command()
@click.option("--host", default="127.0.0.1", show_default=True, help="The address to listen on.")
@click.option("--port", default=8080, show_default=True, type=click.IntRange(1, 65535), help="The port to listen on.")
@click.option("--data-dir", "data_dir", default=".modelplane/portal", show_default=True, type=click.Path(file_okay=False),
              help="Where the portal keeps its SQLite database (unless --database).")
@click.option("--tokens", "tokens_file", required=True, type=click.Path(dir_okay=False),
              help="YAML list of {name, token | tokenSha256, namespaces, admin}.")
@click.option("--database", default=None, metavar="URL", help="SQLAlchemy URL (default: SQLite under --data-dir); postgresql+psycopg://... for several portal processes.")
@click.option("--no-apply", "no_apply", is_flag=True, help="Accept, validate and plan, but run no stacks.")
@click.option("--worker-interval", "worker_interval", default=1.0, show_default=True, type=click.FloatRange(0.05, 3600),
              help="Seconds between looks at the run queue.")
@click.option("--state", "state_dir", default=".modelplane", show_default=True, type=click.Path(file_okay=False),
              help="The recorded state and default Pulumi backend, shared with `modelplane up` run in the same folder.")
@click.option("--backend", metavar="URL", default=None,
              help="Pulumi backend (default: file://<state>/backend, or PULUMI_BACKEND_URL), as for `modelplane up`.")
@executor_options("local: Pulumi engines on this host; operator: accepted changes become Stack objects on the "
                   "control-plane cluster's Pulumi Kubernetes Operator (no cloud credential on this host).")
def serve(host, port, data_dir, tokens_file, database, no_apply, worker_interval, state_dir, backend, executor,
          operator_settings) -> None:
    """Run the self-service portal: a Kubernetes-shaped HTTP API and a web page."""
    from pathlib import Path

    from automation.portal.app import StartupError
    from automation.portal.app import serve as run_portal
    from automation.portal.auth import Tokens, TokensFileError
    from automation.portal.worker import operator_runner

    try:
        Tokens.load(tokens_file)
    except TokensFileError as exc:
        click.echo(f"error: {exc}", err=True)
        raise SystemExit(2) from None
    runner = None
    how = "plan only" if no_apply else "applying through Pulumi"
    if executor == "operator" and not no_apply:
        operator_executor(operator_settings, None)  # the settings and the cluster are checked before listening
        runner = operator_runner(operator_settings)
        how = "applying through the Pulumi Kubernetes Operator"
    banner = f"modelplane portal on http://{host}:{port} ({how})"
    try:
        run_portal(host, port, Path(data_dir), Path(tokens_file), database, not no_apply, worker_interval,
                   Path(state_dir), backend, announce=lambda: click.echo(banner), runner=runner,
                   parallel=OPERATOR_PARALLEL if runner is not None else 2)
    except (StartupError, TokensFileError) as exc:
        click.echo(f"error: {exc}", err=True)
        raise SystemExit(2) from None

