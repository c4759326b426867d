"""`modelplane capacity`: live capacity read from the clusters, shown or saved as a snapshot a CI job reuses."""

from __future__ import annotations

import sys
from pathlib import Path

import click

from automation.cli.base import KUBECONFIG, cli, load, paths_option, state_option, with_capacity
from fleet.live_capacity import capacity_to_dict


@cli.group()
def capacity() -> None:
    """Free devices per cluster and pool, read from each cluster (docs/scheduling.md "Live capacity").

    \b
    Example:
      modelplane capacity save -f fleet/ -o capacity.json   # where the clusters can be reached
      modelplane plan -f fleet/ --capacity capacity.json     # in CI: the same plan, from the snapshot
    """


def _read(paths: tuple[str, ...], source: str, kubeconfig: tuple[str, ...], state: str):
    loaded = load(paths)
    with_capacity(loaded.fleet, source, kubeconfig, state)
    assert loaded.fleet.live is not None  # `live` or a file: never None
    return loaded.fleet


@capacity.command("save")
@paths_option
@click.option("-o", "--out", "out", required=True, type=click.Path(dir_okay=False), metavar="FILE",
              help="Where the snapshot is written (- for stdout). It holds device counts and node names, no "
                   "credential.")
@KUBECONFIG
@state_option
def save(paths: tuple[str, ...], out: str, kubeconfig: tuple[str, ...], state: str) -> None:
    """Read every cluster's live capacity and write it as a snapshot for `--capacity FILE`."""
    fleet = _read(paths, "live", kubeconfig, state)
    live = fleet.live
    assert live is not None
    text = live.to_json() + "\n"
    if out == "-":
        sys.stdout.write(text)
    else:
        Path(out).write_text(text)
    read = [c for c in live.clusters.values() if c.live]
    click.echo(f"{len(read)} of {len(live.clusters)} cluster(s) read live" +
               "".join(f"\n  {c.cluster}: declared ({c.problem})" for c in live.clusters.values() if not c.live),
               err=True)


@capacity.command("show")
@paths_option
@click.option("--capacity", "source", default="live", show_default=True, metavar="SOURCE",
              help="live, or a snapshot FILE.")
@click.option("-o", "--output", type=click.Choice(["table", "json"]), default="table", show_default=True)
@KUBECONFIG
@state_option
def show(paths: tuple[str, ...], source: str, output: str, kubeconfig: tuple[str, ...], state: str) -> None:
    """Per cluster and pool: free devices, what others hold, nodes not counted, and when it was read."""
    fleet = _read(paths, source, kubeconfig, state)
    assert fleet.live is not None
    shown = capacity_to_dict(fleet, fleet.live)
    if output == "json":
        from fleet.plan_output import json_text

        click.echo(json_text(shown))
        return
    from automation.cli.output import capacity_table

    capacity_table(shown, stream=sys.stdout)
