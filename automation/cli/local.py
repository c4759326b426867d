"""`modelplane local up|status|env|down`: a local fleet of real Kubernetes control planes for the fleet's Existing
clusters, where the real engine applies stacks (docs/local-fleet.md)."""

from __future__ import annotations

import json
from pathlib import Path

import click

from automation.cli.base import cli, load, paths_option, state_option


@cli.group()
def local() -> None:
    """A local fleet: a real control plane on loopback for every Existing InferenceCluster (simulated GPU nodes).

    \b
    Example:
      modelplane local up -f local-fleet/ && eval "$(modelplane local env)" && modelplane up -f local-fleet/
    """


def _failed(exc: Exception) -> None:
    click.echo(f"error: {exc}", err=True)
    raise SystemExit(2)


@local.command("up")
@paths_option
@state_option
def local_up(paths, state) -> None:
    """Start a control plane for every Existing InferenceCluster in the fleet, with simulated nodes and devices from
    its node pools and InferenceClasses; write each kubeconfig where `up` and `plan` find it.

    \b
    Example:
      modelplane local up -f local-fleet/
    """
    from automation.local import lifecycle, toolchain
    from automation.local.control_plane import LocalFleetError

    loaded = load(paths)
    try:
        lifecycle.up(loaded.fleet, Path(state), toolchain.find(), say=lambda line: click.echo(line, err=True))
    except (LocalFleetError, toolchain.ToolchainMissing) as exc:
        _failed(exc)
    click.echo("local fleet up: nodes, pods and load balancer addresses are simulated (documentation addresses, "
               "never dialled); the API servers, controllers, scheduler and DRA allocation are real. "
               "`modelplane local env` prints the shell lines to use it.", err=True)


@local.command("status")
@state_option
@click.option("-o", "--output", type=click.Choice(["table", "json"]), default="table", show_default=True,
              help="table for people; json: one object per cluster.")
def local_status(state, output) -> None:
    """The local clusters, their API addresses and whether they are up.

    \b
    Example:
      modelplane local status
    """
    from dataclasses import asdict

    from automation.local import lifecycle

    rows = lifecycle.status(Path(state))
    if output == "json":
        click.echo(json.dumps([asdict(r) for r in rows], indent=2))
        return
    if not rows:
        click.echo("no local fleet (start one with `modelplane local up -f FLEET`)")
        return
    click.echo(f"{'CLUSTER':<24} {'API':<28} {'STATE':<6} NODES")
    for row in rows:
        click.echo(f"{row.name:<24} {row.server:<28} {'up' if row.up else 'down':<6} "
                   f"{'-' if row.nodes is None else row.nodes}")


@local.command("env")
@state_option
def local_env(state) -> None:
    """Print the shell lines (`export NAME=VALUE`) that put the toolchain's pulumi and kubectl first on PATH and name
    the local kubeconfigs.

    \b
    Example:
      eval "$(modelplane local env)"
    """
    from automation.local import lifecycle, toolchain

    for line in lifecycle.env_lines(Path(state), toolchain.find()):
        click.echo(line)


@local.command("down")
@state_option
@click.option("--purge", is_flag=True, help="Also delete the clusters' data (etcd, certificates, kubeconfigs, logs), so "
              "the next `local up` starts empty clusters.")
def local_down(state, purge) -> None:
    """Stop every process of the local fleet; nothing keeps running. The clusters' data is kept (the next `local up`
    brings them back as they were, as `minikube stop` does) unless --purge.

    \b
    Example:
      modelplane local down
      modelplane local down --purge
    """
    from automation.local import lifecycle

    stopped = lifecycle.down(Path(state), purge=purge)
    click.echo(f"stopped {len(stopped)} process(es)" if stopped else "no local fleet was running", err=True)
    if purge:
        click.echo("deleted the local clusters' data; the backend still records what `up` applied to them: after "
                   "the next `local up`, run `modelplane refresh` and then `modelplane up` to apply it again (or run "
                   "`modelplane destroy` before purging)", err=True)
