"""Commands that plan with the record and write nothing applied: `plan` (and `--against`), `render`."""

from __future__ import annotations

import sys
from typing import TYPE_CHECKING, Callable

import click
import yaml


from fleet.live_capacity import capacity_markdown, capacity_to_dict
from fleet.plan_output import json_text, plan_to_dict
from fleet.policy_preview import policies_to_dict, policy_markdown, with_residency
from fleet.scheduler import schedule

from automation.cli.base import (
    EXIT_INVALID,
    EXIT_UNSCHEDULED,
    cli,
    capacity_options,
    comparing,
    cpu_to_spare,
    load,
    paths_option,
    record_for_plan,
    record_options,
    summarised_base,
    what_the_record_lacks,
    with_capacity,
)

if TYPE_CHECKING:
    from automation.planning.compare import Base
    from fleet.capacity import LiveCapacity
    from automation.record.applied import Applied


def _base(against: tuple[str, ...], applied: Applied, no_cache: bool, beside: bool = False,
          say: Callable[[str], None] | None = None, live: LiveCapacity | None = None) -> Base:
    """The base of `plan --against`: both sides are composed with the record's placements and gateway addresses, as
    `preview --changed-against` composes them; `beside`: loaded and planned in a forked process."""
    from automation.planning.base_cache import BaseCache

    return summarised_base(against, applied.placements(), None if no_cache else BaseCache(),
                           gateways=applied.gateways(), beside=beside, say=say, live=live)


@cli.command()
@paths_option
@click.option("--against", "against", multiple=True, metavar="PATH",
              help="The base desired state (e.g. the target branch's manifests): show stack changes and replica moves. Repeatable.")
@click.option("-o", "--output", type=click.Choice(["table", "wide", "json", "yaml", "markdown", "name"]), default="table",
              show_default=True, help="table for people (wide: with each replica's index and why each backend); json "
                                      "and yaml are the stable machine interface (see README); markdown (with "
                                      "--against) for a pull-request comment; name: one replica per line.")
@click.option("--explain", is_flag=True, help="Say why each replica went where it did, and which backend serves each engine.")
@click.option("-n", "--namespace", default=None, help="Show only this namespace's deployments (placement still sees the fleet).")
@click.option("--deployment", default=None, metavar="NAME", help="Show only this deployment (NAME or NAMESPACE/NAME).")
@click.option("--fail-on-unscheduled", "fail_on_unscheduled", is_flag=True,
              help="Exit 4 when a replica (of what is shown) cannot be placed: a CI gate.")
@click.option("--no-cache", "no_cache", is_flag=True,
              help="With --against: plan the base afresh, neither reading nor writing its cached summary "
                   "($MODELPLANE_CACHE_DIR, else ~/.cache/modelplane; see docs/performance.md).")
@capacity_options
@record_options
def plan(paths: tuple[str, ...], against: tuple[str, ...], output: str, explain: bool, namespace: str | None,
         deployment: str | None, fail_on_unscheduled: bool, no_cache: bool, state: str, fresh: bool,
         backend: str | None, fleet_name: str | None, executor: str, operator_settings: str, capacity: str,
         kubeconfig: tuple[str, ...]) -> None:
    """Place every replica on a (cluster, pool): exit 0 when the plan was computed, even with unscheduled replicas.

    Plans with the record of what is applied (the backend's, or the operator's), so the plan shows what `up` will do."""
    if output == "markdown" and not against:
        click.echo("error: -o markdown summarises a change: give the base manifests with --against", err=True)
        raise SystemExit(2)
    if against:
        comparing(paths, against, "--against")
    # with --against, the record first: a base planned in a forked process while the head loads is planned with it
    early = record_for_plan(state, backend, fleet_name, executor, operator_settings, fresh) if against else None
    later: list[str] = []  # said once the head is loaded, as when the base is read after it
    # the base is planned on the head's capacity, known once the head is loaded: beside it only with declared
    base = _base(against, early, no_cache, True, later.append) \
        if early is not None and cpu_to_spare() and capacity == "declared" else None
    try:
        loaded = load(paths)
        with_capacity(loaded.fleet, capacity, kubeconfig, state)
        for text in later:
            click.echo(text, err=True)
        applied = early if early is not None else \
            record_for_plan(state, backend, fleet_name, executor, operator_settings, fresh)
        recorded = applied.placements()
        comparison = None
        if against:
            from automation.planning.compare import compare

            comparison = compare(None, loaded.fleet, explain, recorded,
                                 base=base or _base(against, applied, no_cache, live=loaded.fleet.live))
            result = comparison.plan
        else:
            result = schedule(loaded.fleet, recorded, explain=explain)
    finally:  # the base's process is stopped, not left to this one's exit, whatever happened to the head
        if base is not None and base.beside is not None:
            base.beside.close()
    checks = _addon_checks(loaded.fleet, result, applied)  # of the whole plan: a filter shows part of it only
    # budgets are the whole namespace's: counted on the whole plan, then shown for what is shown
    policies = policies_to_dict(loaded.fleet, result, None if comparison is None else
                                comparison.base_policies or {"budgets": [], "residency": []})
    if policies is not None and (namespace or deployment):
        policies = _only(policies, namespace, deployment)
    if namespace or deployment:
        result = result.only(namespace, deployment)
    with_residency(result, policies)
    document = plan_to_dict(result, explain)
    if policies is not None:  # a key added only for fleets with team policies (the output's keys never change)
        document["policies"] = policies
    shown = capacity_to_dict(loaded.fleet, loaded.fleet.live) if loaded.fleet.live is not None else None
    if shown is not None:  # a key added only when capacity was read (the output's keys never change)
        document["capacity"] = shown
    if checks:  # a key added only for fleets with such clusters (the output's keys are never changed)
        document["addonChecks"] = [n.to_dict() for n in checks]
    if comparison is not None:
        from automation.planning.compare import to_dict

        # keys are added, never changed: `replicas` stays the head's placements, the comparison is under `changes`
        compared = to_dict(comparison)
        document["stacks"] = compared["stacks"]  # as before, for existing readers
        document["changes"] = compared
    if output == "json":
        click.echo(json_text(document))
    elif output == "yaml":
        click.echo(yaml.safe_dump(document, sort_keys=False), nl=False)
    elif output == "name":
        for r in result.replicas:
            click.echo(f"modelreplica/{r.namespace}/{r.name}")
    elif output == "markdown":
        from automation.planning.compare import markdown

        assert comparison is not None  # -o markdown without --against was refused above
        for warning in what_the_record_lacks(applied, fresh, backend, executor):  # what it could not know, first
            click.echo(f"> **Warning:** {warning}\n")
        click.echo(markdown(comparison, applied.guessed), nl=False)
        click.echo(policy_markdown(policies), nl=False)
        if shown is not None:
            click.echo(capacity_markdown(shown), nl=False)
    else:
        from automation.cli.output import plan_table  # rich: only for people (20 ms to import)

        plan_table(result, explain, stream=sys.stdout, wide=output == "wide")
        if policies is not None:
            from automation.cli.output import policy_table

            policy_table(policies, stream=sys.stdout)
        if shown is not None:
            from automation.cli.output import capacity_table

            capacity_table(shown, stream=sys.stdout)
        if checks:
            click.echo("\nchecked before `up` applies (spec.cluster.existing.addons: Verify, the add-ons are the "
                       "cluster's platform team's):")
            for n in checks:
                click.echo(f"  {n.cluster}: {n.describe()}, from {n.addon}; for {', '.join(n.needed_by)}")
        if comparison is not None:
            changed = comparison.changed
            click.echo(f"\n{len(changed)} stack(s) change" + (":" if changed else ""))
            for s in changed:
                click.echo(f"  {s.change:<7} {s.name}")
    if fail_on_unscheduled and result.unscheduled:
        missing = sum(u.missing for u in result.unscheduled)
        click.echo(f"error: {missing} replica(s) of {len(result.unscheduled)} deployment(s) cannot be placed "
                   "(--fail-on-unscheduled)", err=True)
        raise SystemExit(EXIT_UNSCHEDULED)


def _only(policies: dict, namespace: str | None, deployment: str | None) -> dict:
    """The policies' part of what `-n`/`--deployment` show."""
    def shown(ns: str, name: str | None = None) -> bool:
        if deployment is not None and name is not None:
            want = deployment if "/" in deployment else f"{namespace or ns}/{deployment}"
            return f"{ns}/{name}" == want
        return namespace is None or ns == namespace

    residency = []
    for r in policies["residency"]:
        kept = [name for name in r["deployments"] if shown(r["namespace"], name)]
        if kept:
            residency.append({**r, "deployments": kept})
    return {"budgets": [b for b in policies["budgets"] if shown(b["namespace"])], "residency": residency}


def _addon_checks(fleet, plan, applied: Applied) -> list:
    """What `up` will check each Existing cluster whose platform team manages its add-ons serves before it applies
    (automation/planning/addons.py), from this plan's stacks; [] for a fleet without such a cluster (nothing is
    rendered then)."""
    if not any(ic.spec.cluster.existing is not None and ic.spec.cluster.source == "Existing"
               and ic.spec.cluster.existing.addons == "Verify" for ic in fleet.of("InferenceCluster")):
        return []
    from automation.planning.plan_cache import PlanCache
    from automation.planning.stacks import desired_state

    desired = desired_state(fleet, applied.placements(), cache=PlanCache(plan=plan), gateways=applied.gateways())
    return [need for needs in desired.needs.values() for need in needs]


@cli.command()
@paths_option
@click.option("--out", "out", required=True, type=click.Path(file_okay=False), metavar="DIR",
              help="Folder to write to: DIR/<stack>/<cluster or control-plane>/<kind>-<name>.yaml (replaced as a whole); "
                   "- for one YAML stream on standard output.")
@record_options
def render(paths: tuple[str, ...], out: str, state: str, fresh: bool, backend: str | None, fleet_name: str | None,
           executor: str, operator_settings: str) -> None:
    """Write every Kubernetes object every stack would create; refuse, writing nothing, if any is invalid."""
    from pathlib import Path

    from components.args import control_plane_cluster
    from workloads.output import InvalidObjects, OutputError, render_to
    from workloads.schemas import check

    def refuse(problems: list[str]) -> None:
        for line in problems:
            click.echo(line, err=True)
        click.echo(f"{len(problems)} invalid object(s); nothing was written", err=True)
        raise SystemExit(EXIT_INVALID)

    loaded = load(paths)
    applied = record_for_plan(state, backend, fleet_name, executor, operator_settings, fresh)
    # the objects only: stacks' fingerprints are not written, so they are not computed
    plan = schedule(loaded.fleet, applied.placements())
    host = control_plane_cluster(loaded.fleet, None)
    if out == "-":
        from automation.planning.stacks import rendered_problems
        from workloads.output import stream
        from workloads.render import render as render_objects

        result = render_objects(loaded.fleet, plan, host, gateways=applied.gateways())
        if problems := rendered_problems(result):
            refuse(problems)
        for warning in (p for p in result.problems if p.warning):
            click.echo(str(warning), err=True)
        click.echo(stream(result), nl=False)
        return
    from automation.cli.progress import Bar

    try:
        with Bar("writing stacks", None) as bar:
            # each object is checked against its schema as it is written; one invalid object, or a problem of the
            # render: nothing is written
            count, result = render_to(Path(out), loaded.fleet, plan, host, applied.gateways(), progress=bar,
                                      check=check)
    except InvalidObjects as exc:
        refuse(exc.problems)
    except (OutputError, OSError) as exc:
        click.echo(f"error: {exc}", err=True)
        raise SystemExit(EXIT_INVALID) from None
    # the stacks render writes are the workload ones: a newcomer's `preview --offline` counts the platform and
    # gateway stacks too (charts and cloud resources, which have no object files), and should see why the counts differ
    click.echo(f"wrote {count} objects for {len(result.stacks)} workload stacks to {out} (every object checked against "
               "its schema; the platform and gateway stacks: `preview --offline`)")
    for stack, address in sorted(result.addresses.items()):
        click.echo(f"  {stack}: {address}")
    if any(".pending.modelplane.invalid" in address for address in result.addresses.values()):
        click.echo("  (a *.pending.modelplane.invalid host is a placeholder: the address is known once the gateway "
                   "stack has applied, and `modelplane status` shows it)")

