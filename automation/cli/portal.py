"""Commands of the self-service portal: `serve` runs it, `apply` pushes manifests to it."""

from __future__ import annotations

import click

from automation.cli.base import (
    EXIT_INVALID,
    cli,
    executor_options,
    load,
    paths_option,
)


@cli.command()
@paths_option
@click.option("--server", required=True, metavar="URL", help="The portal, e.g. https://modelplane.example.internal")
@click.option("--token-file", "token_file", default=None, type=click.Path(dir_okay=False),
              help="A file holding the bearer token (default: $MODELPLANE_TOKEN). Never on the command line.")
@click.option("--ca-file", "ca_file", default=None, type=click.Path(dir_okay=False, exists=True),
              help="The CA to verify the portal's certificate with (`serve --tls-self-signed` prints its ca.crt); "
                   "default: the system's CAs, or $SSL_CERT_FILE.")
def apply(paths, server, token_file, ca_file) -> None:
    """Push manifests to a portal (validated here first; nothing is sent if any is invalid)."""
    import os

    from automation.cli.apply_remote import ORDER, PushError, push

    loaded = load(paths)
    token = (open(token_file).read().strip() if token_file else os.environ.get("MODELPLANE_TOKEN", "")).strip()
    if not token:
        click.echo("error: no token: set MODELPLANE_TOKEN or give --token-file", err=True)
        raise SystemExit(2)
    try:
        for pushed in push(loaded.fleet, server, token, ca_file=ca_file):
            click.echo(f"{pushed.ref} {pushed.verb}")
            for warning in pushed.warnings:
                click.echo(f"Warning: {warning}", err=True)
    except PushError as exc:
        click.echo(f"error: {exc}", err=True)
        raise SystemExit(EXIT_INVALID) from None
    # observed state (a ModelReplica kept as placement memory, a ModelRoute) is the portal's own: not sent, and said,
    # so that pushing examples/ does not look as if it lost an object
    for obj in loaded.fleet.objects:
        if obj.kind not in ORDER:
            source, line = loaded.fleet.where(obj)
            click.echo(f"note: {source}:{line}: not pushed: {obj.kind}/{obj.namespace}/{obj.name} (the portal "
                       f"composes {obj.kind}s itself; they are read-only there)", err=True)


@cli.command()
@click.option("--host", default="127.0.0.1", show_default=True, help="The address to listen on.")
@click.option("--port", default=8080, show_default=True, type=click.IntRange(1, 65535), help="The port to listen on.")
@click.option("--data-dir", "data_dir", default=".modelplane/portal", show_default=True, type=click.Path(file_okay=False),
              help="Where the portal keeps its SQLite database (unless --database).")
@click.option("--tokens", "tokens_file", required=True, type=click.Path(dir_okay=False),
              help="The tokens file (YAML): a list of {name, token | tokenSha256, namespaces, admin}, or a mapping "
                   "{tokens: [that list], quotas: {NAMESPACE: {maxGPUs, maxDeployments}}} to cap each namespace "
                   "(docs/portal.md#tokens). Read again on change or SIGHUP.")
@click.option("--database", default=None, metavar="URL", help="SQLAlchemy URL (default: SQLite under --data-dir); postgresql+psycopg://... for several portal processes.")
@click.option("--no-apply", "no_apply", is_flag=True, help="Accept, validate and plan, but run no stacks.")
@click.option("--worker-interval", "worker_interval", default=1.0, show_default=True, type=click.FloatRange(0.05, 3600),
              help="Seconds between looks at the run queue.")
@click.option("--state", "state_dir", default=".modelplane", show_default=True, type=click.Path(file_okay=False),
              help="The recorded state and default Pulumi backend, shared with `modelplane up` run in the same folder.")
@click.option("--backend", metavar="URL", default=None,
              help="Pulumi backend (default: file://<state>/backend, or PULUMI_BACKEND_URL), as for `modelplane up`.")
@click.option("--tls-cert", "tls_cert", default=None, type=click.Path(dir_okay=False, exists=True),
              help="Serve https with this PEM certificate (chain) file; with --tls-key.")
@click.option("--tls-key", "tls_key", default=None, type=click.Path(dir_okay=False, exists=True),
              help="The PEM private key of --tls-cert.")
@click.option("--tls-self-signed", "tls_self_signed", is_flag=True,
              help="Serve https with a CA and certificate made for localhost (kept under --data-dir/tls; a kubeconfig's "
                   "certificate-authority is the printed ca.crt).")
@click.option("--requestheader-client-ca", "requestheader_ca", default=None,
              type=click.Path(dir_okay=False, exists=True),
              help="Serve as an aggregated API: believe X-Remote-User/X-Remote-Group from clients whose TLS certificate "
                   "this CA signed (the cluster's front proxy), and ask the cluster (SubjectAccessReview) what they may do.")
@click.option("--requestheader-allowed-names", "allowed_names", default="", metavar="CN,...",
              help="The front proxy certificate's common names to accept (default: any the CA signed).")
@executor_options("local: Pulumi engines on this host; operator: accepted changes become Stack objects on the "
                   "control-plane cluster's Pulumi Kubernetes Operator (no cloud credential on this host).")
@click.option("--capacity", "capacity", default="declared", show_default=True, metavar="SOURCE",
              envvar="MODELPLANE_CAPACITY",
              help="Where each pool's free devices come from: declared, live (every cluster read again every "
                   "--capacity-every seconds; one that cannot be read keeps its declared capacity), or a snapshot "
                   "FILE from `modelplane capacity save` (docs/scheduling.md).")
@click.option("--capacity-every", "capacity_every", type=click.FloatRange(5, 3600), default=60, show_default=True,
              metavar="SECONDS", help="With --capacity live: seconds between reads.")
def serve(host, port, data_dir, tokens_file, database, no_apply, worker_interval, state_dir, backend, tls_cert, tls_key,
          tls_self_signed, requestheader_ca, allowed_names, executor, operator_settings, capacity,
          capacity_every) -> None:
    """Run the self-service portal: a Kubernetes-shaped HTTP API and a web page."""
    import signal
    import threading
    from pathlib import Path

    # `main` turns SIGTERM into a Ctrl-C so a run of stacks stops at a safe point; a server stops at once on it, as
    # it always did (its worker threads would keep a KeyboardInterrupt-ed process alive)
    if threading.current_thread() is threading.main_thread():
        signal.signal(signal.SIGTERM, signal.SIG_DFL)

    from automation.portal.app import StartupError
    from automation.portal.app import serve as run_portal
    from automation.portal.auth import Tokens, TokensFileError
    from automation.execution.capabilities import LOCAL, OPERATOR
    from automation.portal.worker import operator_runner

    try:  # checked before listening; read, not loaded, so that its warnings are said once, by the portal
        Tokens.from_bytes(Path(tokens_file).read_bytes(), tokens_file, warn=False)
    except OSError as exc:
        click.echo(f"error: {tokens_file}: cannot read tokens file: {exc.strerror or type(exc).__name__}", err=True)
        raise SystemExit(2) from None
    except TokensFileError as exc:
        click.echo(f"error: {exc}", err=True)
        raise SystemExit(2) from None
    runner = None
    how = "plan only" if no_apply else "applying through Pulumi"
    if not no_apply and executor != "operator":
        from automation.execution.prerequisites import cli_missing

        if cli_missing():  # said before anyone writes, not discovered run by run
            how += ("; the Pulumi CLI is not installed, so runs wait queued until it is (install it, or serve "
                    "--no-apply to plan only)")
    if executor == "operator" and not no_apply:
        from automation.road.executor import ExecutorOptions, open_executor
        from automation.execution.runner import AutomationError
        from fleet.validate import Fleet

        try:  # the settings and the cluster are checked before listening
            open_executor(ExecutorOptions("operator", operator_settings=operator_settings), Fleet())
        except AutomationError as exc:
            click.echo(f"error: --executor operator: {exc}", err=True)
            raise SystemExit(2) from None
        runner = operator_runner(operator_settings)
        how = "applying through the Pulumi Kubernetes Operator"
    if tls_self_signed and (tls_cert or tls_key):
        click.echo("error: give --tls-self-signed or --tls-cert and --tls-key, not both", err=True)
        raise SystemExit(2)
    if bool(tls_cert) != bool(tls_key):
        click.echo("error: --tls-cert and --tls-key go together", err=True)
        raise SystemExit(2)
    tls = (Path(tls_cert), Path(tls_key)) if tls_cert else None
    banner = f"modelplane portal on {'https' if tls or tls_self_signed else 'http'}://{host}:{port} ({how})"
    if tls_self_signed:
        from automation.portal.tls import self_signed

        made = self_signed(Path(data_dir), host)
        tls = (made.cert, made.key)
        banner += f"\nTLS certificate {made.cert}, signed by the CA {made.ca} (a kubeconfig's certificate-authority)"
    front_proxy = None
    if requestheader_ca:
        from automation.portal.front_proxy import FrontProxySettings

        if tls is None:
            click.echo("error: --requestheader-client-ca needs TLS (--tls-cert and --tls-key)", err=True)
            raise SystemExit(2)
        front_proxy = FrontProxySettings(Path(requestheader_ca), tuple(n for n in allowed_names.split(",") if n))
    try:
        run_portal(host, port, Path(data_dir), Path(tokens_file), database, not no_apply, worker_interval,
                   Path(state_dir), backend, announce=lambda: click.echo(banner), runner=runner,
                   parallel=(OPERATOR if runner is not None else LOCAL).default_parallel, tls=tls, front_proxy=front_proxy,
                   capacity=capacity, capacity_every=capacity_every)
    except (StartupError, TokensFileError) as exc:
        click.echo(f"error: {exc}", err=True)
        raise SystemExit(2) from None

