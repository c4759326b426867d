"""Commands that run stacks: `preview`, `up`, `drift`, `refresh`, `destroy`, all through `applying.run_stacks`."""

from __future__ import annotations

import json

import sys
from typing import TYPE_CHECKING

import click

if TYPE_CHECKING:
    from automation.execution.runner import Operation
    from automation.checks.deployability import Findings

from automation.cli.base import (
    BACKEND,
    CAPACITY,
    EXIT_INVALID,
    FLEET,
    cli,
    comparing,
    executor_options,
    gateway_host,
    load,
    paths_option,
    record_for_plan,
    state_option,
    summarised_base,
    with_capacity,
)
from automation.cli.applying import refuse_fleet_autoscaled, run_stacks
from automation.cli.stack_options import StackRun, kubeconfig_pairs, stack_settings


def _apply_options(function):
    function = click.option("-o", "--output", type=click.Choice(["table", "json"]), default="table", show_default=True,
                            help="table: progress for people; json: one JSON event per line.")(function)
    function = BACKEND(function)
    function = click.option("--parallel", type=click.IntRange(1, 256), default=2, show_default=True,
                            help="Stacks run at once. Local executor: at most 16 (each runs a Pulumi engine and its "
                                 "provider plugins here); operator: stacks handed over and watched at once (default "
                                 "there: 64).")(function)
    function = executor_options("local: Pulumi engines on this machine; operator: Stack objects applied to the "
                                 "control-plane cluster's Pulumi Kubernetes Operator.")(function)
    function = click.option("--control-plane", "control_plane", default=None, metavar="CLUSTER",
                            help="The InferenceCluster hosting the fleet gateway (default: the first by name whose "
                                 "cloud gives a LoadBalancer an address, GKE, EKS, AKS, Nebius, Vultr or Civo, else the first "
                                 "Existing one).")(function)
    function = FLEET(state_option(CAPACITY(function)))
    function = click.option("--config", "config_pairs", multiple=True, metavar="KEY=VALUE",
                            help="Stack config for the platform and gateway programs, as `pulumi config set` takes it "
                                 "(gcp:project=my-project, aws:profile=prod, any provider setting). Plain values only; "
                                 "repeatable; after --config-file.")(function)
    function = click.option("--config-file", "config_files", multiple=True, metavar="PATH",
                            type=click.Path(dir_okay=False),
                            help="A Pulumi stack config file (`config:` of KEY: VALUE, as Pulumi.<stack>.yaml) with "
                                 "the same settings. Repeatable.")(function)
    function = click.option("--chart-source", "chart_sources", multiple=True, metavar="KEY=SOURCE",
                            help="Where the platform fetches a chart from: KEY a chart key (or * for every chart), "
                                 "SOURCE a mirror repository URL (https://, oci://) or an absolute chart path. Merged "
                                 "into the stack config modelplane:chartSources (docs/platform.md, air-gapped fleets). "
                                 "Repeatable.")(function)
    function = click.option("--kubeconfig", "kubeconfig", multiple=True, metavar="CLUSTER=PATH",
                            help="The kubeconfig file of an Existing cluster (else $MODELPLANE_KUBECONFIG_<CLUSTER>, "
                                 ".modelplane/kubeconfigs/<existing.secretRef.name>, or the local fleet's). Read by the "
                                 "program, kept a Pulumi secret, never put on a command line. Repeatable.")(function)
    return paths_option(function)


def _stack_run(operation: Operation, common: dict, **chosen) -> StackRun:
    """The options every command that runs stacks takes (`_apply_options`), and what this one adds, typed once."""
    options = dict(common)
    config = stack_settings(options.pop("config_pairs"), options.pop("config_files"))
    with_chart_sources(config, options.pop("chart_sources"))
    return StackRun(operation=operation, config=config, **options, **chosen)


def with_chart_sources(config: dict[str, str], pairs: tuple[str, ...]) -> None:
    """`--chart-source KEY=SOURCE` merged over the stack config's `modelplane:chartSources`; exit 2 naming what is
    wrong (the program checks the same)."""
    from components.versions import chart_sources_problems

    key = "modelplane:chartSources"
    if not pairs and key not in config:
        return
    try:
        sources = json.loads(config[key]) if key in config else {}
    except ValueError:
        sources = config[key]
    for pair in pairs:
        name, sep, source = pair.partition("=")
        if not sep:
            click.echo(f"error: --chart-source {pair!r}: expected KEY=SOURCE", err=True)
            raise SystemExit(2)
        if isinstance(sources, dict):
            sources[name] = source
    problems = chart_sources_problems(sources)
    if problems:
        click.echo(f"error: {problems[0]}", err=True)
        raise SystemExit(2)
    config[key] = json.dumps(sources, sort_keys=True)


_PRUNE = click.option("--prune", is_flag=True,
                      help="Also destroy recorded stacks whose objects are not in the input (without it, input that "
                           "is a subset of the fleet never destroys the rest).")


_PREVIEW_PRUNE = click.option("--prune", is_flag=True,
                              help="Also preview destroying recorded stacks whose objects are not in the input, as "
                                   "`up --prune` would (a preview destroys nothing).")


_VERBOSE = click.option("-v", "--verbose", is_flag=True,
                        help="List every deployability violation: also those that follow from a stack whose program "
                             "fails (counted under it otherwise). With `up`, also print each resource's step as the "
                             "engine takes it (otherwise a line per stack: started, and done with its counts).")


_DESTROY_CLUSTERS = click.option("--yes-destroy-clusters", "destroy_clusters", is_flag=True,
                                 help="Confirm destroying platform stacks (clusters and their GPU pools).")


@cli.command()
@_apply_options
@click.option("--offline", is_flag=True, help="Run each stack's program under Pulumi's mock runtime: no CLI, no cloud.")
@click.option("--jobs", type=click.IntRange(1, 16), default=None, metavar="N",
              help="With --offline: processes that preview stacks at once (default: one per CPU).")
@click.option("--changed-against", "changed_against", multiple=True, metavar="PATH",
              help="With --offline: preview only the stacks that differ from this base (as `plan --against` finds "
                   "them), with every stack they depend on and every stack that depends on them for the check. "
                   "Repeatable.")
@_PREVIEW_PRUNE
@_VERBOSE
def preview(offline, jobs, changed_against, prune, verbose, **common) -> None:
    """Show what each changed stack would do (with --offline: what every stack would register, checked for
    deployability, no CLI needed)."""
    if changed_against and not offline:
        click.echo("error: --changed-against previews offline: add --offline (a live preview already runs only the "
                   "stacks whose fingerprint changed)", err=True)
        raise SystemExit(2)
    if not offline:
        # it destroys nothing
        return run_stacks(_stack_run("preview", common, prune=prune, destroy_clusters=True, verbose=verbose))
    _preview_offline(_stack_run("preview", common, verbose=verbose), jobs, changed_against)


def _preview_offline(run: StackRun, jobs: int | None, changed_against: tuple[str, ...]) -> None:
    """Every stack's program under the mock runtime, then the deployability check over what they registered."""
    from automation.cli.progress import Bar
    from automation.checks.deployability import by_cause, check_fleet
    from automation.checks.offline_preview import all_stacks

    if changed_against:
        comparing(run.paths, changed_against, "--changed-against")
    loaded = load(run.paths)
    with_capacity(loaded.fleet, run.capacity, run.kubeconfig, run.state)
    from workloads.render import v05_gateway_problems

    for problem in v05_gateway_problems(loaded.fleet):  # what `up` and `render` stop at, before any stack runs
        click.echo(str(problem), err=True)
        raise SystemExit(EXIT_INVALID)
    refuse_fleet_autoscaled(loaded.fleet)  # what `up` refuses from files, before any stack runs
    host = gateway_host(loaded.fleet, run.control_plane)
    # what every road plans with: the record (the cache stands in, and says so, when it cannot be read)
    applied = record_for_plan(run.state, run.backend, run.fleet_name, run.executor, run.operator_settings, fresh=False)
    desired, only, changes = _desired_for_preview(loaded.fleet, applied, host, changed_against, run.control_plane)
    with Bar("previewing stacks", len(desired.specs) if only is None else len(only), run.output) as bar:
        stacks = all_stacks(loaded.fleet, host, desired.specs, on_stack=bar.advance, jobs=jobs, only=only, config=run.config)
    findings = by_cause(check_fleet(loaded.fleet, stacks, desired.specs), stacks)
    _show_preview(run.output, stacks, findings, changes, host, _needs(run, loaded.fleet, desired, only), run.verbose)


def _needs(run: StackRun, fleet, desired, only) -> list[str]:
    """What the first real `up` of these stacks will need that is not here (the same check `up` makes first)."""
    from pathlib import Path

    from automation.execution.prerequisites import missing_credentials

    names = sorted(only) if only is not None else list(desired.specs)
    return missing_credentials(fleet, kubeconfig_pairs(run.kubeconfig), Path(run.state), run.backend, names,
                               {n: desired.specs[n] for n in names if n in desired.specs}, run.config)


def _desired_for_preview(fleet, applied, host: str | None, changed_against: tuple[str, ...],
                         control_plane: str | None = None):
    """The desired stacks; with a base, only those that differ from it (and their neighbours, for the check)."""
    from automation.planning.stacks import Change, Host, desired_state

    recorded, gateways = applied.placements(), applied.gateways()
    decided = Host(host)  # the caller's: not derived again
    if not changed_against:  # the head planned with the record, with or without a base: one answer for one HEAD
        return desired_state(fleet, recorded, decided, gateways=gateways), None, None
    from automation.planning.base_cache import BaseCache
    from automation.planning.compare import side_by_side
    from automation.checks.offline_preview import previewed

    # as `plan --against` compares: the base's summary knows the fingerprint of every stack whose inputs differ
    # from the head's, and the head composes only those; both sides with the record's gateway addresses, the head
    # with its control plane, the base with the one asked for if it has that cluster (the head may add it), else
    # its own
    sides = side_by_side(summarised_base(changed_against, recorded, BaseCache(), control_plane, gateways), fleet,
                         recorded, control_plane=decided)
    changes = {c.name: c.change for c in sides.changes if c.change != Change.none}
    desired, only = previewed(fleet, sides.head, {name for name, change in changes.items() if change != Change.delete},
                              recorded, decided, gateways)
    return desired, only, changes


def _show_preview(output: str, stacks, findings: Findings, changes: dict | None, host: str | None,
                  needs: list[str] | None = None, verbose: bool = False) -> None:
    needs = needs or []
    from automation.cli.output import preview_table, stream_json

    if output == "json":
        # each stack's JSON is built as it is written: the whole document at once was most of the peak memory
        document: dict = {"stacks": (s.to_dict() for s in stacks),
                          # every violation, each failed program first with those that follow from it (`because`)
                          "violations": [{**v.__dict__, **({"because": cause} if cause else {})}
                                         for v, cause in findings.ordered()]}
        if changes is not None:  # which stacks differ from the base; the others listed were previewed for the check
            document["changes"] = [{"name": name, "change": change} for name, change in changes.items()]
        document["needs"] = list(needs)  # what a real run needs that is not here (never a value)
        stream_json(document, sys.stdout.write)
        sys.stdout.write("\n")
    else:
        preview_table(stacks, stream=sys.stdout)
        if changes is not None:
            click.echo(f"{len(changes)} stack(s) differ from the base: " + (", ".join(
                f"{name} ({change})" for name, change in changes.items()) or "none"))
    if len(findings):
        # -o json lists them all already: what follows from a failed program is counted on stderr there
        for line in findings.lines(every=verbose, listed_by="--verbose or -o json" if output != "json" else "--verbose"):
            click.echo(line, err=True)
        click.echo(f"{findings.summary()}: a real first apply would fail; nothing was applied", err=True)
        raise SystemExit(EXIT_INVALID)
    if output != "json":
        if needs:
            click.echo(f"a real `modelplane up` of these stacks needs {len(needs)} thing(s) not given here:")
            for line in needs:
                click.echo(f"  - {line}")
        click.echo(f"fleet gateway host: {host or 'none'}")
        scope = "" if changes is None else " (the changed ones, what they depend on and what depends on them)"
        click.echo(f"deployability check: {len(stacks)} stack(s){scope}, 0 violations")


@cli.command()
@_apply_options
@_PRUNE
@_DESTROY_CLUSTERS
@_VERBOSE
@click.option("--force", multiple=True, metavar="STACK", help="Rerun this stack even if its fingerprint did not change. Repeatable.")
@click.option("--refresh", is_flag=True, help="Refresh each stack's state from the clouds and clusters before updating it.")
@click.option("--skip-check", "skip_check", is_flag=True,
              help="Apply even if the deployability check (as in `preview --offline`) finds violations.")
@click.option("--forget", multiple=True, metavar="CLUSTER",
              help="With --prune: a cluster removed from the manifests whose API server is gone. What its stacks (and "
                   "any stack with objects on it) hold there leaves the backend when the cluster does not answer, "
                   "instead of failing the run; nothing on it is deleted. Repeatable.")
@click.option("--yes", "-y", "yes", is_flag=True,
              help="Confirm: apply the moves a TeamPolicy (its residency or a GPU budget) forces on running replicas "
                   "(asked on a terminal; needed when not on one).")
def up(prune, destroy_clusters, verbose, force, refresh, skip_check, forget, yes, **common) -> None:
    """Apply the changed stacks in dependency order; record each only once it succeeded.

    Runs the deployability check first: a fleet a real API server or cloud would refuse is not applied."""
    run_stacks(_stack_run("up", common, prune=prune, destroy_clusters=destroy_clusters, force=force, refresh=refresh,
                          check=not skip_check, verbose=verbose, forget=forget, yes=yes))


@cli.command()
@_apply_options
def drift(**common) -> None:
    """Report applied stacks whose cloud or cluster state no longer matches (a refresh preview; exit 1 on drift)."""
    run_stacks(_stack_run("preview-refresh", common))


@cli.command(name="refresh")
@_apply_options
def refresh_command(**common) -> None:
    """Refresh the applied stacks' state from the clouds and clusters."""
    run_stacks(_stack_run("refresh", common))


@cli.command()
@_apply_options
@click.option("--unprotect", is_flag=True,
              help="Lift the deletion protection of clusters and networks (an update with it off), then destroy them. "
                   "Without it, platform stacks refuse to be destroyed.")
@click.option("--yes", "-y", "yes", is_flag=True, help="Confirm: destroy without asking (needed when not on a terminal).")
def destroy(unprotect, yes, **common) -> None:
    """Destroy the applied stacks these manifests describe, dependents first."""
    run_stacks(_stack_run("destroy", common, unprotect=unprotect, destroy_clusters=yes))

