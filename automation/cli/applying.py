"""The CLI's side of the one road (docs/design-notes.md): lock, read the record, plan, the checks every road runs,
the executor's runner, migrations of old stack names, then the orchestrator; progress and the report as it runs."""

from __future__ import annotations

import json
import sys
from dataclasses import dataclass
from typing import TYPE_CHECKING, Callable

import click

if TYPE_CHECKING:
    from automation.execution.runner import Operation

from automation.cli.base import EXIT_INVALID, OPERATOR_PARALLEL, gateway_host, load, operator_executor


def progress(output: str, bar=None):
    """Progress for people (one line per stack event, and `bar` counting finished stacks on a terminal), or JSON
    lines with -o json."""
    lock = __import__("threading").Lock()

    def echo(line: str, err: bool = False) -> None:
        if bar is not None and bar.shown:
            bar.print(line, err)
        else:
            click.echo(line, err=err)

    def emit(event: dict) -> None:
        with lock:
            if output == "json":
                click.echo(json.dumps(event, default=str))
                return
            kind = event.get("type")
            if bar is not None and kind in ("succeeded", "failed", "cancelled", "skipped"):
                bar.advance()
            if kind == "resource":
                echo(f"  [{event['stack']}] {event.get('op')} {event.get('urn', '').rsplit('::', 1)[-1]}")
            elif kind == "diagnostic":
                echo(f"  [{event['stack']}] {event['severity']}: {event['message']}", err=True)
            elif kind == "start":
                echo(f"[{event['stack']}] {event['operation']} ...")
            elif kind == "succeeded":
                counts = (", ".join(f"{k} {v}" for k, v in sorted((event.get("changes") or {}).items()))
                          or event.get("summary") or "no changes")
                echo(f"[{event['stack']}] done: {counts}")
            elif kind in ("failed", "cancelled"):
                echo(f"[{event['stack']}] {kind}: {event.get('error')}", err=True)
            elif kind == "skipped":
                echo(f"[{event['stack']}] skipped: {event.get('reason')}", err=True)
    return emit


def _kubeconfig_pairs(pairs: tuple[str, ...]) -> dict[str, str]:
    out = {}
    for pair in pairs:
        cluster, sep, path = pair.partition("=")
        if not sep or not cluster or not path:
            click.echo(f"error: --kubeconfig {pair!r}: expected CLUSTER=PATH", err=True)
            raise SystemExit(2)
        out[cluster] = path
    return out


@dataclass(frozen=True)
class StackRun:
    """What a command that runs stacks was asked: decided once from its options, read by every step below."""

    operation: Operation
    paths: tuple[str, ...]
    output: str = "table"
    backend: str | None = None
    parallel: int = 2
    control_plane: str | None = None
    kubeconfig: tuple[str, ...] = ()
    unprotect: bool = False
    prune: bool = False
    destroy_clusters: bool = False
    force: tuple[str, ...] = ()
    refresh: bool = False
    check: bool = True
    fleet_name: str | None = None
    state: str = ".modelplane"
    executor: str = "local"
    operator_settings: str = "modelplane-operator.yaml"
    config: dict[str, str] | None = None
    verbose: bool = False  # list every deployability violation, those that follow from a failed program too
    forget: tuple[str, ...] = ()  # `up --prune --forget CLUSTER`: clusters gone with their API servers

    @property
    def on_operator(self) -> bool:
        return self.executor == "operator"


def _selected_or_exit(prepared, run: StackRun, fleet, given: dict[str, str] | None = None) -> list:
    """The stacks `run.operation` touches, after the checks every road runs: invalid objects, unknown --force names,
    destroying clusters unconfirmed, the deployability check. Exit naming what stops it (a refused check also says
    what else the run needs that is not here, `_prerequisites`, so that one round of fixes is enough)."""
    from automation.execution.session import selected
    from automation.planning.stacks import Change
    from fleet.stack_id import StackKind

    operation = run.operation
    if prepared.problems:
        for line in prepared.problems:
            click.echo(line, err=True)
        click.echo(f"{len(prepared.problems)} invalid object(s); nothing was applied", err=True)
        raise SystemExit(EXIT_INVALID)
    if operation in ("preview", "up"):
        refuse_fleet_autoscaled(fleet)
    if prepared.transitions and operation in ("preview", "up"):
        for line in prepared.transitions:
            click.echo(line, err=True)
        click.echo(f"{len(prepared.transitions)} change(s) the record refuses; nothing was applied", err=True)
        raise SystemExit(EXIT_INVALID)
    unknown_force = sorted(set(run.force) - set(prepared.specs))
    if unknown_force:
        click.echo(f"error: --force names {', '.join(unknown_force)}, not a stack of these manifests", err=True)
        raise SystemExit(2)
    from pathlib import Path

    from automation.execution.load_balancers import drained_stacks

    # a platform stack whose failed destroy deleted its Gateways runs again, with a refresh (pulumi_runner.py)
    drained = drained_stacks(Path(run.state)) & set(prepared.specs) if not run.on_operator else set()
    items = selected(prepared, operation, prune=run.prune, force=set(run.force) | drained)
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
    if run.check and operation in ("up", "preview") and items:
        _refuse_undeployable(fleet, prepared.specs, items, run,
                             lambda: _prerequisites(run, fleet, given or {}, items, prepared))
    if operation in ("up", "preview") and items and prepared.desired is not None and prepared.desired.needs:
        _refuse_unserved(fleet, prepared.desired.needs, items, run)
    return items


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
    """Why these options cannot run on this executor, or None."""
    from fleet.stack_id import StackIdError, backend_name

    try:
        backend_name("gateway", run.fleet_name)
    except StackIdError as exc:
        return f"--fleet: {exc}"
    if run.forget and not run.prune:
        return "--forget removes the stacks of a cluster no longer in the manifests: it needs --prune"
    if not run.on_operator:
        return ("--parallel: at most 16 with the local executor (each stack runs a Pulumi engine here)"
                if run.parallel > 16 else None)
    if run.forget:
        return "--forget is for the local executor (on the operator, a Stack of a gone cluster is deleted by hand)"
    if run.operation in ("refresh", "preview-refresh") or run.refresh:
        return ("refresh and drift are not available with --executor operator (the operator refreshes a stack whose "
                "Stack sets spec.refresh)")
    if run.kubeconfig:
        return ("--kubeconfig CLUSTER=PATH is for the local executor: on the operator, an Existing cluster's "
                "kubeconfig is the Secret named by its existing.secretRef in the stacks' namespace")
    if run.backend:
        return "--backend is the local executor's: the operator's is `backend` in the settings file"
    return None


def _parallel(run: StackRun) -> int:
    """Stacks at once: on the operator they run in the cluster, and here they are only handed over and watched."""
    chosen = click.get_current_context().get_parameter_source("parallel") != click.core.ParameterSource.DEFAULT
    return OPERATOR_PARALLEL if run.on_operator and not chosen else run.parallel


def _executor(run: StackRun):
    """The runner (None: the local one, built once credentials are checked) and the record it writes."""
    from pathlib import Path

    from automation.record.backend import PulumiRecord

    if run.on_operator:  # the cluster's Stacks are the record of what is applied
        return operator_executor(run.operator_settings, run.fleet_name, run.force, run.unprotect or run.destroy_clusters,
                                 paths=run.paths)
    return None, PulumiRecord(Path(run.state), run.backend, run.fleet_name, strict=True)


OPERATION_NAMES = {"preview-refresh": "drift"}  # the command that runs an operation, where they differ


def _prerequisites(run: StackRun, fleet, given: dict[str, str], items: list, prepared) -> list[str]:
    """What the local executor needs to run `items` that is not here, one line each: the Pulumi CLI first, then the
    passphrase, Existing clusters' kubeconfigs, GKE projects and Secrets' values (`missing_credentials`). None on
    the operator executor (its settings and cluster were checked when it was opened)."""
    from pathlib import Path

    from automation.execution.pulumi_runner import CLI_MISSING, PASSPHRASE_MISSING, cli_missing, missing_credentials
    from automation.execution.runner import CLIMissing
    from automation.planning.stacks import Change

    if run.on_operator:
        return []
    applying = {c.name: prepared.specs[c.name] for c in items
                if c.change in (Change.create, Change.update) and c.name in prepared.specs}
    missing = missing_credentials(fleet, given, Path(run.state), run.backend, [c.name for c in items], applying,
                                  run.config)
    if run.operation == "destroy":  # what is destroyed needs no Secret's value, but its state is encrypted
        missing = [line for line in missing if line == PASSPHRASE_MISSING]
    try:
        no_cli = [CLI_MISSING] if cli_missing() else []
    except CLIMissing as exc:  # the toolchain's CLI, found but unusable
        no_cli = [str(exc)]
    return no_cli + missing


def _say_prerequisites(run: StackRun, needs: list[str], also: bool = False) -> None:
    command = OPERATION_NAMES.get(run.operation, run.operation)
    head = f"`{command}` also needs" if also else f"error: `{command}` needs"
    click.echo(f"{head} {len(needs)} thing(s) not given here:", err=True)
    for line in needs:
        click.echo(f"  - {line}", err=True)


def _local_runner(run: StackRun, fleet, given: dict[str, str], items: list, prepared, parallel: int):
    """The local executor's runner, once everything it needs is here (else exit 2, one line per missing thing):
    checked before the Pulumi CLI is run, so a first run lists everything it needs at once."""
    from pathlib import Path

    from automation.execution.pulumi_runner import PulumiRunner, existing_kubeconfigs

    needs = _prerequisites(run, fleet, given, items, prepared)
    if needs:
        _say_prerequisites(run, needs)
        raise SystemExit(2)
    root = Path(run.state)
    return PulumiRunner(root, fleet, backend=run.backend, parallel=parallel,
                        kubeconfigs=existing_kubeconfigs(fleet, given, root),
                        unprotect=run.unprotect or run.destroy_clusters, refresh=run.refresh,  # says so if no CLI
                        fleet_name=run.fleet_name, config=run.config, forget=frozenset(run.forget))


def _migrate(runner, moves: list[tuple[str, str]], renames: list) -> None:
    """Stacks under old names or in the old Pulumi project move first (the plan is then made again)."""
    from automation.execution.migration import migrate
    from fleet.stack_id import StackId

    for stack, organization in moves:
        runner.move_project(StackId.parse(stack), organization)
        click.echo(f"moved stack {stack} into the Pulumi project modelplane", err=True)
    for done in migrate(renames, runner.rename):
        click.echo(f"renamed stack {done.old} to {done.new}", err=True)


def departed(prepared) -> list[str]:
    """Clusters the record has a platform stack of that the manifests no longer have."""
    from fleet.stack_id import StackId, StackKind

    ids = [StackId.parse(name) for name in prepared.recorded]
    fleet = {ic.name for ic in prepared.fleet.of("InferenceCluster")}
    return sorted({str(i.cluster) for i in ids if i.kind == StackKind.platform and str(i.cluster) not in fleet})


def _forget_problem(run: StackRun, prepared) -> str | None:
    """Why `--forget` cannot name these clusters, or None: only a cluster that left the manifests and whose stacks
    are recorded can be forgotten (a cluster of the fleet never is)."""
    fleet = {ic.name for ic in prepared.fleet.of("InferenceCluster")}
    for cluster in run.forget:
        if cluster in fleet:
            return (f"--forget {cluster}: InferenceCluster/{cluster} is in the manifests; remove it from them first "
                    "(a cluster of the fleet is never forgotten)")
        if cluster not in departed(prepared):
            return f"--forget {cluster}: the record has no stack of a cluster {cluster}"
    return None


def forget_command(run: StackRun, clusters: list[str]) -> str:
    """`modelplane up` with this run's manifests, state, backend, fleet and kubeconfigs, forgetting `clusters`."""
    import shlex

    words = ["modelplane", "up", *(w for path in run.paths for w in ("-f", path)), "--prune", "--yes-destroy-clusters"]
    for option, value in (("--state", run.state if run.state != ".modelplane" else None), ("--backend", run.backend),
                          ("--fleet", run.fleet_name), ("--control-plane", run.control_plane)):
        words += [option, value] if value else []
    words += [w for pair in run.kubeconfig for w in ("--kubeconfig", pair)]
    words += [w for cluster in clusters for w in ("--forget", cluster)]
    return shlex.join(words)


def _forget_hint(run: StackRun, prepared, report) -> str | None:
    """After a run that failed on a cluster that does not answer: the command that forgets the clusters that left
    the manifests (when there are any left to forget)."""
    if not any(o.result is not None and o.result.unreachable for o in report.failed):
        return None
    gone = [cluster for cluster in departed(prepared) if cluster not in run.forget]
    if not gone:
        return None
    return (f"{', '.join(gone)} left the manifests, and a cluster with objects of these stacks does not answer: "
            "nothing there could be deleted. If it is gone for good, forget its stacks (they leave the backend; "
            f"whatever is still on the cluster stays there, unmanaged): {forget_command(run, gone)}")


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
    """The one road, from the CLI: lock -> read the record -> plan with it -> the checks -> the executor's runner
    -> migrate old names -> the orchestrator, which records each stack once it succeeded."""
    from pathlib import Path

    from automation.execution.migration import plan_renames
    from automation.execution.runner import AutomationError
    from automation.execution.session import prepare, selected
    from automation.execution.state import WorkdirLock

    refused = _refused(run)
    if refused:
        click.echo(f"error: {refused}", err=True)
        raise SystemExit(2)
    parallel = _parallel(run)
    loaded = load(run.paths)
    given = _kubeconfig_pairs(run.kubeconfig)
    unknown = sorted(set(given) - {c.name for c in loaded.fleet.of("InferenceCluster")})
    if unknown:
        click.echo(f"error: --kubeconfig names {', '.join(unknown)}, not an InferenceCluster of the fleet", err=True)
        raise SystemExit(2)
    host = gateway_host(loaded.fleet, run.control_plane)
    runner, record = _executor(run)
    lock = WorkdirLock(Path(run.state))
    try:
        if run.operation != "preview":
            lock.lock()  # before reading the record: what this process plans with is not changed under it
        applied = record.read()
        moves = sorted(getattr(record, "legacy", {}).items())  # platform stacks still in the old project
        renames = plan_renames(applied, loaded.fleet)
        prepared = prepare(loaded.fleet, applied, host)
        problem = _forget_problem(run, prepared)
        if problem:
            raise AutomationError(problem)
        if run.on_operator:  # refused before anything is written
            _operator_refusals(runner, [*prepared.specs, *applied.stacks], prepared.specs.values())
        items = _selected_or_exit(prepared, run, loaded.fleet, given)
        if not items and not renames and not moves:
            lock.unlock()
            return _nothing_to_do(run, prepared)
        runner = runner or _local_runner(run, loaded.fleet, given, items, prepared, parallel)
        if renames or moves:
            lock.lock()  # a preview renames too: it takes the lock first (held already by the others)
            _migrate(runner, moves, renames)
            prepared = prepare(loaded.fleet, record.read(), host)
            items = selected(prepared, run.operation, prune=run.prune, force=set(run.force))
    except AutomationError as exc:
        lock.unlock()
        click.echo(f"error: {exc}", err=True)
        raise SystemExit(2) from None
    except SystemExit:
        lock.unlock()
        raise
    _orchestrate(run, runner, record, items, prepared, parallel, lock, host)


def _orchestrate(run: StackRun, runner, record, items: list, prepared, parallel: int, lock,
                 host: str | None = None) -> None:
    from automation.cli.progress import Bar
    from automation.execution.orchestrator import Orchestrator
    from automation.execution.session import reopening, run_interruptibly

    unserved = False  # the second pass's platform stacks were refused by the add-on check
    try:
        with Bar(f"{run.operation}: stacks", len(items), run.output) as bar:
            report = run_interruptibly(Orchestrator(runner, record, progress(run.output, bar), parallel),
                                       run.operation, items, prepared.specs, lambda m: click.echo(m, err=True))
        if run.operation == "up" and report.ok:
            # a front door CA recorded just now: the platform stacks open their fleet listeners in this `up`
            again, more = reopening(prepared, record.read(), items, host)
            if more and again.desired is not None and again.desired.needs and \
                    _unserved(prepared.fleet, again.desired.needs, more, run):
                click.echo("the fleet listeners stay closed on those clusters until their add-ons are served",
                           err=True)
                unserved, more = True, []
            if more:
                with Bar("up: fleet listeners", len(more), run.output) as bar:
                    second = run_interruptibly(Orchestrator(runner, record, progress(run.output, bar), parallel),
                                               run.operation, more, again.specs, lambda m: click.echo(m, err=True))
                report.outcomes += second.outcomes
                report.cancelled = second.cancelled
    finally:
        lock.unlock()
    good = sum(1 for o in report.outcomes if o.status == "succeeded")
    click.echo(f"{run.operation}: {good} of {len(report.outcomes)} stack(s) succeeded"
               + (" (cancelled)" if report.cancelled else ""), err=run.output == "json")
    for outcome in report.failed:
        click.echo(f"  {outcome.status}: {outcome.stack}: {outcome.reason}", err=True)
    hint = _forget_hint(run, prepared, report)
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


def stack_settings(pairs: tuple[str, ...], files: tuple[str, ...]) -> dict[str, str]:
    """`--config-file` then `--config`: provider and program settings, `namespace:key` to a plain value.
    Exit 2 naming the file or pair that is not one."""
    import yaml

    out: dict[str, str] = {}

    def put(key: object, value: object, where: str) -> None:
        if not isinstance(key, str) or ":" not in key or key.startswith(":") or key.endswith(":"):
            click.echo(f"error: {where}: {key!r} is not a namespaced key such as gcp:project", err=True)
            raise SystemExit(2)
        if isinstance(value, dict) and "secure" in value:
            click.echo(f"error: {where}: {key} is encrypted (secure:): give secrets as the fleet's Secrets "
                       "(docs/teams.md), never as stack config here", err=True)
            raise SystemExit(2)
        out[key] = value if isinstance(value, str) else json.dumps(value)

    for path in files:
        try:
            document = yaml.safe_load(open(path, encoding="utf-8"))
        except (OSError, yaml.YAMLError, UnicodeDecodeError) as exc:
            click.echo(f"error: --config-file {path}: not readable as YAML ({type(exc).__name__})", err=True)
            raise SystemExit(2) from None
        section = document.get("config") if isinstance(document, dict) else None
        if not isinstance(section, dict):
            click.echo(f"error: --config-file {path}: expected a `config:` mapping of KEY: VALUE", err=True)
            raise SystemExit(2)
        for key, value in section.items():
            put(key, value, f"--config-file {path}")
    for pair in pairs:
        key, sep, value = pair.partition("=")
        if not sep:
            click.echo(f"error: --config {pair!r}: expected KEY=VALUE", err=True)
            raise SystemExit(2)
        put(key, value, f"--config {pair}")
    return out


def _refuse_undeployable(fleet, specs, items, run: StackRun, needs: Callable[[], list[str]]) -> None:
    """The deployability check over the stacks about to run and every stack they meet (`deployability`): what a
    real API server or cloud would refuse is not half-applied. Exit 1 naming each violation, every failed program
    first with what follows from it counted under it (listed with --verbose), then what else the run needs."""
    from automation.execution.session import deployability

    findings = deployability(fleet, specs, items, run.config)
    if not len(findings):
        return
    for line in findings.lines(every=run.verbose):
        click.echo(line, err=True)
    skip = "; --skip-check to apply anyway" if run.operation == "up" else ""
    click.echo(f"{findings.summary()}; nothing was applied (see `modelplane preview --offline`{skip})", err=True)
    missing = needs()
    if missing:
        _say_prerequisites(run, missing, also=True)
    raise SystemExit(EXIT_INVALID)


def _unserved(fleet, needs, items, run: StackRun) -> list[str]:
    """The add-on check of the clusters whose platform team manages their add-ons (session.unserved_addons), one
    line per problem, each said on stderr."""
    from pathlib import Path

    from automation.execution.pulumi_runner import existing_kubeconfigs
    from automation.execution.session import unserved_addons

    files = existing_kubeconfigs(fleet, _kubeconfig_pairs(run.kubeconfig), Path(run.state))
    lines = unserved_addons(fleet, needs, items, files)
    for line in lines:
        click.echo(line, err=True)
    return lines


def _refuse_unserved(fleet, needs, items, run: StackRun) -> None:
    """A cluster whose platform team manages its add-ons and does not serve what the stacks about to run use there:
    nothing is applied anywhere. Exit 1 naming each API."""
    lines = _unserved(fleet, needs, items, run)
    if lines:
        click.echo(f"{len(lines)} add-on problem(s) on clusters whose platform team manages them; nothing was "
                   "applied (docs/platform.md, \"Add-ons a platform team manages\")", err=True)
        raise SystemExit(EXIT_INVALID)


def _confirm(question: str) -> bool:
    """Ask on a terminal; never when input is not a terminal (CI, scripts): those must pass the flag."""
    if not sys.stdin.isatty():
        return False
    return click.confirm(question, default=False, err=True)

