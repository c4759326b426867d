"""The CLI's side of the one road (docs/design-notes.md): open the executor, lock, read the record, plan, the one
preflight (automation/road/preflight.py) said by kind, migrations of old stack names, then the orchestrator;
progress and the report as it runs."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import TYPE_CHECKING

import click

from automation.cli.base import EXIT_INVALID, gateway_host, load, with_capacity
from automation.cli.forgetting import forget_hint, forget_problem
from automation.cli.progress import progress
from automation.cli.stack_options import StackRun, kubeconfig_pairs
from automation.execution.run_status import RunStatus

if TYPE_CHECKING:
    from automation.road.executor import Executor
    from automation.execution.migration import Renamed
    from automation.road.preflight import Preflight
    from automation.execution.session import Prepared
    from automation.execution.state import WorkdirLock
    from automation.checks.deployability import Findings
    from automation.planning.stacks import Host, StackChange
    from fleet.validate import Fleet


def _selected_or_exit(prepared: Prepared, run: StackRun, executor: Executor) -> tuple[list[StackChange], Preflight]:
    """The stacks `run.operation` touches, and the preflight of them; exit naming what stops it: invalid objects,
    fleet-autoscaled deployments, changes the record refuses, unknown --force names, destroying clusters
    unconfirmed, the deployability check (saying too what else the run needs that is not here, so that one round
    of fixes is enough), the add-on check. What the executor needs here is said once there is something to run."""
    from automation.execution.load_balancers import drained_stacks
    from automation.road.preflight import preflight
    from automation.execution.session import selected
    from automation.planning.stacks import Change
    from fleet.stack_id import StackKind

    operation, fleet = run.operation, prepared.fleet
    assert prepared.desired is not None  # prepare() plans it
    # a platform stack whose failed destroy deleted its Gateways runs again, with a refresh (pulumi_runner.py)
    drained = drained_stacks(Path(run.state)) & set(prepared.specs) if not run.on_operator else set()
    items = selected(prepared, operation, prune=run.prune, force=set(run.force) | drained)
    checked = preflight(executor, fleet, prepared.desired, prepared.applied, items, operation, check=run.check)
    _refuse(checked.invalid, "invalid object(s); nothing was applied")
    for line in prepared.desired.warnings:  # routes withheld (a TeamPolicy forbids them): applied without, said
        click.echo(line, err=True)
    if operation in ("preview", "up"):
        refuse_fleet_autoscaled(fleet)
    _refuse(checked.transitions, "change(s) the record refuses; nothing was applied")
    unknown_force = sorted(set(run.force) - set(prepared.specs))
    if unknown_force:
        click.echo(f"error: --force names {', '.join(unknown_force)}, not a stack of these manifests", err=True)
        raise SystemExit(2)
    for change in prepared.kept_by_default(operation, run.prune):
        click.echo(f"kept: {change.name} is recorded but not in the input; `{operation} --prune` would destroy it",
                   err=True)
    doomed = sorted(c.name for c in items if c.change == Change.delete and c.kind == StackKind.platform)
    clusters = f", clusters included ({', '.join(doomed)})" if doomed else ""
    if operation == "destroy" and items and not run.destroy_clusters:
        if not _confirm(f"destroy {len(items)} stack(s){clusters}?"):
            click.echo(f"error: this would destroy {len(items)} stack(s){clusters}: pass --yes to confirm", err=True)
            raise SystemExit(2)
    elif doomed and not run.destroy_clusters and not _confirm(f"destroy the cluster stack(s) {', '.join(doomed)}?"):
        click.echo(f"error: this would destroy {', '.join(doomed)} (clusters and their GPU pools): pass "
                   "--yes-destroy-clusters to confirm", err=True)
        raise SystemExit(2)
    if operation == "up":
        _confirm_policy_moves(prepared, run)
    if checked.findings is not None and checked.undeployable:
        _refuse_undeployable(checked.findings, run, checked.needs)
    _refuse(checked.unserved, "add-on problem(s) on clusters whose platform team manages them; nothing was applied "
                              "(docs/platform.md, \"Add-ons a platform team manages\")")
    return items, checked


def _confirm_policy_moves(prepared: Prepared, run: StackRun) -> None:
    """Running replicas the plan moves or stops because of a TeamPolicy (its residency, a GPU budget): printed, and
    applied only when confirmed (`--yes`, or asked on a terminal); else exit 2 having applied nothing."""
    from fleet.policy_preview import POLICY_CAUSES

    forced = [d for d in prepared.plan.dropped if d.reason.cause in POLICY_CAUSES]
    if not forced or run.yes:
        return
    placed_new: dict[str, list[str]] = {}
    for r in prepared.plan.replicas:
        if r.state == "new":
            placed_new.setdefault(r.key, []).append(r.cluster)
    click.echo(f"a team policy moves or stops {len(forced)} running replica(s):", err=True)
    for d in forced:
        to = placed_new.get(d.deployment) or []
        where = f"moves {d.cluster} -> {to.pop(0)}" if to else f"stops on {d.cluster}"
        click.echo(f"  {d.deployment} {d.name}: {where} ({d.reason})", err=True)
    if not _confirm(f"apply these {len(forced)} move(s)?"):
        click.echo(f"error: a TeamPolicy moves or stops {len(forced)} running replica(s); nothing was applied: pass "
                   "--yes to confirm", err=True)
        raise SystemExit(2)


def _refuse(lines: list[str], what: str) -> None:
    """Each line, then how many and `what` they are; exit 1. Nothing when there are none."""
    if lines:
        for line in lines:
            click.echo(line, err=True)
        click.echo(f"{len(lines)} {what}", err=True)
        raise SystemExit(EXIT_INVALID)


def refuse_fleet_autoscaled(fleet) -> None:
    """A fleet-autoscaled deployment among the files: KEDA scales the in-cluster portal's copy, which the files never
    reach (workloads/fleet_autoscaling.py `from_files`). Exit 1 naming each, having applied nothing."""
    from workloads.fleet_autoscaling import from_files

    problems = from_files(fleet)
    if problems:
        for problem in problems:
            click.echo(str(problem), err=True)
        click.echo(f"{len(problems)} fleet-autoscaled deployment(s) in the files; nothing was applied", err=True)
        raise SystemExit(EXIT_INVALID)


def _refused(run: StackRun) -> str | None:
    """Why these options cannot run on the executor chosen, or None."""
    from automation.execution.capabilities import CAPABILITIES
    from fleet.stack_id import StackIdError, backend_name

    try:
        backend_name("gateway", run.fleet_name)
    except StackIdError as exc:
        return f"--fleet: {exc}"
    if run.forget and not run.prune:
        return "--forget removes the stacks of a cluster no longer in the manifests: it needs --prune"
    return CAPABILITIES[run.executor].refusal(run.operation, refresh=run.refresh, forget=bool(run.forget),
                                              kubeconfig=bool(run.kubeconfig), backend=bool(run.backend),
                                              parallel=run.parallel)


def _parallel(run: StackRun) -> int:
    """Stacks at once: the executor's own number unless told (on the operator they run in the cluster, and here
    they are only handed over and watched)."""
    from automation.execution.capabilities import CAPABILITIES

    chosen = click.get_current_context().get_parameter_source("parallel") != click.core.ParameterSource.DEFAULT
    return run.parallel if chosen else CAPABILITIES[run.executor].default_parallel


def _open(run: StackRun, fleet: Fleet, parallel: int) -> Executor:
    """The executor of this run (its runner is made once the preflight passed), or exit 2 saying why not."""
    from automation.road.executor import open_executor
    from automation.execution.runner import AutomationError

    try:
        return open_executor(run.executor_options(parallel), fleet)
    except AutomationError as exc:
        click.echo(f"error: --executor {run.executor}: {exc}", err=True)
        raise SystemExit(2) from None


OPERATION_NAMES = {"preview-refresh": "drift"}  # the command that runs an operation, where they differ


def _say_prerequisites(run: StackRun, needs: list[str], also: bool = False) -> None:
    command = OPERATION_NAMES.get(run.operation, run.operation)
    head = f"`{command}` also needs" if also else f"error: `{command}` needs"
    click.echo(f"{head} {len(needs)} thing(s) not given here:", err=True)
    for line in needs:
        click.echo(f"  - {line}", err=True)


def _migrate(executor: Executor, moves: list[tuple[str, str]], renames: list[Renamed]) -> None:
    """Stacks under old names or in the old Pulumi project move first (the plan is then made again); an executor
    that cannot migrate them says so before any is moved."""
    from automation.execution.migration import migrate
    from automation.execution.runner import AutomationError, Migrating
    from fleet.stack_id import StackId

    refused = [executor.capabilities.migration_refusal(StackId.parse(stack)) for stack, _ in moves]
    refused += [executor.capabilities.migration_refusal(r.old, r.new) for r in renames]
    first = next((why for why in refused if why), None)
    if first:
        raise AutomationError(first)
    runner = executor.runner()
    assert isinstance(runner, Migrating)  # an executor that migrates has a runner that can
    for stack, organization in moves:
        runner.move_project(StackId.parse(stack), organization)
        click.echo(f"moved stack {stack} into the Pulumi project modelplane", err=True)
    for done in migrate(renames, runner.rename):
        click.echo(f"renamed stack {done.old} to {done.new}", err=True)


def _nothing_to_do(run: StackRun, prepared) -> None:
    nothing_applied = run.operation in ("destroy", "refresh", "preview-refresh") and not prepared.recorded
    if nothing_applied:
        verb = {"preview-refresh": "drift compares", "refresh": "refresh reads", "destroy": "destroy removes"}
        click.echo(f"nothing is applied yet: {verb[run.operation]} the stacks `modelplane up` applied, and the record "
                   "has none")
    else:
        click.echo(f"nothing to {run.operation}: every stack is up to date with the manifests")


def _operator_refusals(runner, stacks: list[str], specs) -> None:
    """What the operator could not run, refused before anything is written: two stacks on one Stack object, and a
    GKE or Nebius cluster whose workspaces would have no credential to sign in with."""
    from automation.execution.runner import AutomationError
    from automation.operator.export import ExportError, credential_problems, object_names

    try:
        object_names(runner.options, set(stacks))
    except ExportError as exc:
        raise AutomationError(str(exc)) from None
    refused = credential_problems(runner.options, specs)
    if refused:
        raise AutomationError("; ".join(refused))


def run_stacks(run: StackRun) -> None:
    """The one road, from the CLI: open the executor -> lock -> read the record -> plan with it -> the preflight ->
    the executor's runner -> migrate old names -> the orchestrator, which records each stack once it succeeded."""
    from automation.execution.migration import plan_renames
    from automation.execution.runner import AutomationError
    from automation.execution.session import prepare, selected
    from automation.execution.state import WorkdirLock
    from automation.planning.stacks import Host

    refused = _refused(run)
    if refused:
        click.echo(f"error: {refused}", err=True)
        raise SystemExit(2)
    parallel = _parallel(run)
    loaded = load(run.paths)
    unknown = sorted(set(kubeconfig_pairs(run.kubeconfig)) - {c.name for c in loaded.fleet.of("InferenceCluster")})
    if unknown:
        click.echo(f"error: --kubeconfig names {', '.join(unknown)}, not an InferenceCluster of the fleet", err=True)
        raise SystemExit(2)
    with_capacity(loaded.fleet, run.capacity, run.kubeconfig, run.state)
    host = Host(gateway_host(loaded.fleet, run.control_plane))  # decided once for this run: passed down
    executor = _open(run, loaded.fleet, parallel)
    record = executor.record
    lock = WorkdirLock(Path(run.state))
    try:
        if run.operation != "preview":
            lock.lock()  # before reading the record: what this process plans with is not changed under it
        applied = record.read()
        moves = sorted(getattr(record, "legacy", {}).items())  # platform stacks still in the old project
        renames = plan_renames(applied, loaded.fleet)
        prepared = prepare(loaded.fleet, applied, host)
        problem = forget_problem(run, prepared)
        if problem:
            raise AutomationError(problem)
        if run.on_operator:  # refused before anything is written
            _operator_refusals(executor.runner(), [*prepared.specs, *applied.stacks], prepared.specs.values())
        items, checked = _selected_or_exit(prepared, run, executor)
        if not items and not renames and not moves:
            lock.unlock()
            return _nothing_to_do(run, prepared)
        if checked.needs:  # checked before the Pulumi CLI is run, so a first run lists everything it needs at once
            _say_prerequisites(run, checked.needs)
            raise SystemExit(2)
        executor.runner()  # the local one starts the Pulumi CLI
        if renames or moves:
            lock.lock()  # a preview renames too: it takes the lock first (held already by the others)
            _migrate(executor, moves, renames)
            prepared = prepare(loaded.fleet, record.read(), host)
            items = selected(prepared, run.operation, prune=run.prune, force=set(run.force))
    except AutomationError as exc:
        lock.unlock()
        click.echo(f"error: {exc}", err=True)
        raise SystemExit(2) from None
    except SystemExit:
        lock.unlock()
        raise
    _orchestrate(run, executor, items, prepared, parallel, lock, host)


def _orchestrate(run: StackRun, executor: Executor, items: list[StackChange], prepared: Prepared, parallel: int,
                 lock: WorkdirLock, host: Host | None = None) -> None:
    from automation.cli.progress import Bar
    from automation.execution.orchestrator import Orchestrator
    from automation.road.preflight import preflight
    from automation.execution.session import reopening, run_interruptibly

    runner, record = executor.runner(), executor.record
    unserved: list[str] = []  # the second pass's platform stacks were refused by the add-on check
    try:
        with Bar(f"{run.operation}: stacks", len(items), run.output) as bar:
            report = run_interruptibly(Orchestrator(runner, record, progress(run.output, bar, run.verbose), parallel),
                                       run.operation, items, prepared.specs, lambda m: click.echo(m, err=True))
        if run.operation == "up" and report.ok:
            # a front door CA recorded just now: the platform stacks open their fleet listeners in this `up`
            again, more = reopening(prepared, record.read(), items, host)
            if more and again.desired is not None and again.desired.needs:
                unserved = preflight(executor, prepared.fleet, again.desired, again.applied, more, "up",
                                     check=False).unserved
            if unserved:
                for line in unserved:
                    click.echo(line, err=True)
                click.echo("the fleet listeners stay closed on those clusters until their add-ons are served",
                           err=True)
                more = []
            if more:
                with Bar("up: fleet listeners", len(more), run.output) as bar:
                    second = run_interruptibly(Orchestrator(runner, record, progress(run.output, bar, run.verbose), parallel),
                                               run.operation, more, again.specs, lambda m: click.echo(m, err=True))
                report.outcomes += second.outcomes
                report.cancelled = second.cancelled
    finally:
        lock.unlock()
    good = sum(1 for o in report.outcomes if o.status == RunStatus.succeeded)
    click.echo(f"{run.operation}: {good} of {len(report.outcomes)} stack(s) succeeded"
               + (" (cancelled)" if report.cancelled else ""), err=run.output == "json")
    for outcome in report.failed:
        click.echo(f"  {outcome.status}: {outcome.stack}: {outcome.reason}", err=True)
    hint = forget_hint(run, prepared, report)
    if hint:
        click.echo(hint, err=True)
    if report.cancelled:
        raise SystemExit(130)
    if not report.ok or unserved:
        raise SystemExit(EXIT_INVALID)
    if run.operation == "preview-refresh":
        _report_drift(report)


def _report_drift(report) -> None:
    drifted = {o.stack: {k: v for k, v in o.result.changes.items() if k != "same" and v}
               for o in report.outcomes if o.result is not None}
    drifted = {stack: found for stack, found in drifted.items() if found}
    for stack, found in sorted(drifted.items()):
        click.echo(f"drift: {stack}: " + ", ".join(f"{k} {v}" for k, v in sorted(found.items())))
    click.echo(f"{len(drifted)} of {len(report.outcomes)} applied stack(s) no longer match the clouds and clusters"
               if drifted else f"no drift: {len(report.outcomes)} applied stack(s) match the clouds and clusters")
    if drifted:
        raise SystemExit(EXIT_INVALID)


def _refuse_undeployable(findings: Findings, run: StackRun, needs: list[str]) -> None:
    """The deployability check over the stacks about to run and every stack they meet refused them: what a real API
    server or cloud would refuse is not half-applied. Exit 1 naming each violation, every failed program first with
    what follows from it counted under it (listed with --verbose), then what else the run needs."""
    for line in findings.lines(every=run.verbose):
        click.echo(line, err=True)
    skip = "; --skip-check to apply anyway" if run.operation == "up" else ""
    click.echo(f"{findings.summary()}; nothing was applied (see `modelplane preview --offline`{skip})", err=True)
    if needs:
        _say_prerequisites(run, needs, also=True)
    raise SystemExit(EXIT_INVALID)


def _confirm(question: str) -> bool:
    """Ask on a terminal; never when input is not a terminal (CI, scripts): those must pass the flag."""
    if not sys.stdin.isatty():
        return False
    return click.confirm(question, default=False, err=True)

