"""The `modelplane` command line.

click gives us subcommands, repeatable options and clean usage errors; every failure of
ours becomes one line and a non-zero exit, never a traceback.
"""

from __future__ import annotations

import inspect
import json
import sys
from collections import Counter
from typing import TYPE_CHECKING, Any, Callable

import click
import yaml

if TYPE_CHECKING:
    from fleet.validate import Fleet  # the automation layer is imported only by the commands that run stacks
    from automation.planning.base_cache import BaseCache, BaseSummary
    from automation.execution.runner import Operation

from fleet.plan_output import json_text, plan_to_dict
from fleet.scheduler import schedule
from fleet.validate import Loaded, load_fleet

EXIT_INVALID = 1
EXIT_INTERNAL = 3
EXIT_UNSCHEDULED = 4  # plan --fail-on-unscheduled


def _remember_secrets_dir(ctx: click.Context, _param, value: str | None) -> None:
    ctx.meta["secrets_dir"] = value


def _paths_option(function):
    function = click.option(
        "--secrets-dir", metavar="DIR", default=None, envvar="MODELPLANE_SECRETS_DIR", expose_value=False,
        type=click.Path(file_okay=False), callback=_remember_secrets_dir,
        help="Secret values as files DIR/<namespace>/<name>/<key> (else $MODELPLANE_SECRETS_DIR). Secrets also come "
             "from v1/Secret manifests given with -f and from $MODELPLANE_SECRET_<NAMESPACE>_<NAME>_<KEY>; they "
             "are never printed.")(function)
    return click.option(
        "-f", "--filename", "paths", multiple=True, required=True, metavar="PATH",
        help="A manifest file, a folder (searched recursively for *.yaml and *.yml) or - for stdin; v1/Secrets among "
             "them are read as secret values. Repeatable.",
    )(function)


def _state_option(function):
    return click.option("--state", "state", default=".modelplane", show_default=True, type=click.Path(file_okay=False),
                        metavar="DIR", help="The local folder for workspaces, caches and the lock (what is applied is "
                                            "read from the backend: deleting this folder changes no result).")(function)


def _fresh_option(function):
    return click.option("--fresh", is_flag=True,
                        help="Ignore the record of what is applied: plan as if nothing were.")(function)


def _executor_options(executor_help: str):
    """`--executor local|operator` and the operator's settings file, as every command that runs stacks takes them."""
    def add(function):
        function = click.option("--operator-settings", "operator_settings", default="modelplane-operator.yaml",
                                show_default=True, envvar="MODELPLANE_OPERATOR_SETTINGS",
                                type=click.Path(dir_okay=False), metavar="FILE",
                                help="The operator executor's settings: the control-plane cluster's kubeconfig and "
                                     "context, backend, gitUrl, ... (docs/operator.md).")(function)
        return click.option("--executor", type=click.Choice(["local", "operator"]), default="local",
                            show_default=True, envvar="MODELPLANE_EXECUTOR", help=executor_help)(function)
    return add


_BACKEND = click.option("--backend", metavar="URL", default=None,
                        help="Pulumi backend: the stacks and the record of what is applied (default: "
                             "file://.modelplane/backend, or PULUMI_BACKEND_URL).")
_FLEET = click.option("--fleet", "fleet_name", default=None, envvar="MODELPLANE_FLEET", metavar="NAME",
                      help="Several fleets on one backend (or operator namespace): this fleet's stacks, named "
                           "<NAME>_<stack> there (default: $MODELPLANE_FLEET, else unprefixed).")


def _record_options(function):
    """Where a command that plans reads the record from: the executor's (the backend, or the operator's Stacks)."""
    function = _FLEET(_BACKEND(function))
    function = _executor_options("where the record of what is applied is read: local: the Pulumi backend; operator: "
                                 "the Stack objects in the control-plane cluster.")(function)
    return _fresh_option(_state_option(function))


def _open_record(state: str, backend: str | None, fleet_name: str | None, executor: str, operator_settings: str,
                 strict: bool):
    """The executor's record, or exit 2 saying why it cannot be opened."""
    from pathlib import Path

    if executor == "operator":
        from automation.operator.runner import OperatorRecord

        _, api, options = _operator_client(operator_settings, fleet_name)
        return OperatorRecord(api, options)
    from automation.record.backend import PulumiRecord

    return PulumiRecord(Path(state), backend, fleet_name, strict=strict)


def _read_record(record, fresh: bool = False):
    """Read the record (a plan: the cache stands in, and says so, when the backend cannot be read); say on stderr
    what was read. Exit 2 when it cannot be read and nothing may stand in."""
    from automation.record.applied import Applied
    from automation.execution.runner import AutomationError

    if fresh:
        return Applied({}, "nothing (--fresh)")
    try:
        applied = record.read()
    except AutomationError as exc:
        click.echo(f"error: {exc}", err=True)
        raise SystemExit(2) from None
    count = len(applied.placements())
    if applied.guessed:
        click.echo(f"warning: the record of what is applied could not be read, so this plan uses {applied.source}: "
                   f"{count} replica(s). Moves and stack changes may be wrong.", err=True)
    elif applied.stacks:
        click.echo(f"note: placements: {count} applied replica(s) read from {applied.source} "
                   "(--fresh to ignore them)", err=True)
    return applied


def _record_for_plan(state, backend, fleet_name, executor, operator_settings, fresh: bool):
    if fresh:
        return _read_record(None, fresh=True)
    return _read_record(_open_record(state, backend, fleet_name, executor, operator_settings, strict=False))


def _load(paths: tuple[str, ...], sources: list | None = None) -> Loaded:
    """`sources`: the files under `paths` as already read, not read again."""
    from pathlib import Path

    secrets_dir = click.get_current_context().meta.get("secrets_dir")
    loaded = load_fleet(paths, stdin=sys.stdin if "-" in paths else None,
                        secrets_dir=Path(secrets_dir) if secrets_dir else None, sources=sources)
    for note in loaded.notes:
        click.echo(f"note: {note}", err=True)
    for problem in loaded.problems:
        click.echo(str(problem), err=True)
    if not loaded.errors and not loaded.fleet.objects:
        click.echo(f"error: no modelplane.ai objects found in {', '.join(paths)}", err=True)
        raise SystemExit(EXIT_INVALID)
    if loaded.errors:
        click.echo(f"{len(loaded.errors)} error(s); nothing was planned or applied", err=True)
        raise SystemExit(EXIT_INVALID)
    return loaded


def _base(paths: tuple[str, ...], recorded: list, cache: BaseCache | None,
          control_plane: str | None = None) -> BaseSummary:
    """The base's summary (`plan --against`, `preview --changed-against`). When the base's files are byte for byte
    those of a base summarised before, with the same recorded placements and code, the summary is read back and the
    base is not even parsed; otherwise it is loaded (its problems said as for any input), planned and kept."""
    from automation.planning.base_cache import source_key
    from automation.planning.compare import base_summary
    from fleet.loader import read_sources

    sources = read_sources(paths, sys.stdin if "-" in paths else None)
    key = None
    if cache is not None and not click.get_current_context().meta.get("secrets_dir") \
            and all(s.raw is not None and not s.problems for s in sources):
        key = source_key([(s.name, s.raw) for s in sources if s.raw is not None], recorded, control_plane)
        summary = cache.by_sources(key)
        if summary is not None:
            click.echo(f"note: base: {', '.join(paths)} read as summarised before (unchanged files; "
                       "--no-cache to plan it afresh)", err=True)
            return summary
    return base_summary(_load(paths, sources).fleet, recorded, cache, control_plane, sources_key=key)


WORKFLOW = ["validate", "explain", "schema", "plan", "render", "preview", "status", "up", "drift", "refresh",
            "destroy", "apply", "serve", "operator"]


class WorkflowGroup(click.Group):
    """Lists commands in the order one uses them, not alphabetically."""

    def list_commands(self, ctx: click.Context) -> list[str]:
        names = super().list_commands(ctx)
        return [n for n in WORKFLOW if n in names] + [n for n in names if n not in WORKFLOW]


# Told which command runs, once it is known: the installed entry point (automation/cli/console.py) sets it to tune
# the interpreter for batch commands. A hook, so that the CLI never imports its entry point back.
ON_COMMAND: Callable[[str | None], None] | None = None


@click.group(cls=WorkflowGroup, context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(package_name="modelplane-pulumi", prog_name="modelplane")
@click.pass_context
def cli(ctx: click.Context) -> None:
    """A fleet control plane for LLM inference on Pulumi (modelplane.ai/v1alpha1 manifests)."""
    if ON_COMMAND is not None:
        ON_COMMAND(ctx.invoked_subcommand)


@cli.command()
@_paths_option
@click.option("-o", "--output", type=click.Choice(["table", "json"]), default="table", show_default=True,
              help="table: a summary per kind, problems on stderr; json: objects and problems as one document.")
def validate(paths: tuple[str, ...], output: str) -> None:
    """Check manifests: exit 0 with a summary per kind, or 1 with one located line per problem."""
    if output == "json":
        found = load_fleet(paths, stdin=sys.stdin if "-" in paths else None)
        click.echo(json.dumps({
            "valid": not found.errors and bool(found.fleet.objects),
            "objects": [{"kind": o.kind, "name": o.name, **({"namespace": o.namespace} if o.namespaced else {})}
                        for o in found.fleet.objects],
            "problems": [{"source": p.source, "line": p.line, "object": p.object, "path": p.path, "message": p.message,
                          "severity": "warning" if p.warning else "error"} for p in found.problems],
            "notes": list(found.notes)}, indent=2))
        if found.errors or not found.fleet.objects:
            raise SystemExit(EXIT_INVALID)
        return
    loaded = _load(paths)
    counts = Counter(o.kind for o in loaded.fleet.objects)
    for kind, count in counts.items():
        names = [o.name if not o.namespaced else f"{o.namespace}/{o.name}" for o in loaded.fleet.of(kind)]
        shown = ", ".join(names[:6]) + (f", ... ({len(names) - 6} more)" if len(names) > 6 else "")
        click.echo(f"{kind + ':':<18} {count:>4} valid  {shown}")
    warnings = f", {len(loaded.warnings)} warning(s)" if loaded.warnings else ""
    click.echo(f"{len(loaded.fleet.objects)} objects valid{warnings}")


@cli.command()
@_paths_option
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
@_record_options
def plan(paths: tuple[str, ...], against: tuple[str, ...], output: str, explain: bool, namespace: str | None,
         deployment: str | None, fail_on_unscheduled: bool, no_cache: bool, state: str, fresh: bool,
         backend: str | None, fleet_name: str | None, executor: str, operator_settings: str) -> None:
    """Place every replica on a (cluster, pool): exit 0 when the plan was computed, even with unscheduled replicas.

    Plans with the record of what is applied (the backend's, or the operator's), so the plan shows what `up` will do."""
    loaded = _load(paths)
    applied = _record_for_plan(state, backend, fleet_name, executor, operator_settings, fresh)
    recorded = applied.placements()
    if output == "markdown" and not against:
        click.echo("error: -o markdown summarises a change: give the base manifests with --against", err=True)
        raise SystemExit(2)
    comparison = None
    if against:
        from automation.planning.base_cache import BaseCache
        from automation.planning.compare import compare

        base = _base(against, recorded, None if no_cache else BaseCache())
        comparison = compare(None, loaded.fleet, explain, recorded, base=base)
        result = comparison.plan
    else:
        result = schedule(loaded.fleet, recorded, explain=explain)
    if namespace or deployment:
        result = result.only(namespace, deployment)
    document = plan_to_dict(result, explain)
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
        if applied.guessed:  # the comment says what it could not know
            click.echo(f"> **Warning:** the record of what is applied could not be read, so this was planned with "
                       f"{applied.source}. Moves and stack changes below may be wrong.\n")
        click.echo(markdown(comparison), nl=False)
    else:
        from automation.cli.output import plan_table  # rich: only for people (20 ms to import)

        plan_table(result, explain, stream=sys.stdout, wide=output == "wide")
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


@cli.command()
@_paths_option
@click.option("--out", "out", required=True, type=click.Path(file_okay=False), metavar="DIR",
              help="Folder to write to: DIR/<stack>/<cluster or control-plane>/<kind>-<name>.yaml (replaced as a whole); "
                   "- for one YAML stream on standard output.")
@_record_options
def render(paths: tuple[str, ...], out: str, state: str, fresh: bool, backend: str | None, fleet_name: str | None,
           executor: str, operator_settings: str) -> None:
    """Write every Kubernetes object every stack would create; refuse, writing nothing, if any is invalid."""
    from pathlib import Path

    from automation.planning.stacks import rendered_problems
    from components.args import control_plane_cluster
    from workloads.output import InvalidObjects, OutputError, write
    from workloads.render import render as render_objects
    from workloads.schemas import check

    def refuse(problems: list[str]) -> None:
        for line in problems:
            click.echo(line, err=True)
        click.echo(f"{len(problems)} invalid object(s); nothing was written", err=True)
        raise SystemExit(EXIT_INVALID)

    loaded = _load(paths)
    applied = _record_for_plan(state, backend, fleet_name, executor, operator_settings, fresh)
    # the objects only: stacks' fingerprints are not written, so they are not computed
    result = render_objects(loaded.fleet, schedule(loaded.fleet, applied.placements()),
                            control_plane_cluster(loaded.fleet, None), gateways=applied.gateways())
    if out == "-":
        if problems := rendered_problems(result):
            refuse(problems)
        from workloads.output import stream

        click.echo(stream(result), nl=False)
        return
    if result.problems:  # collisions, before anything is written
        refuse([str(p) for p in result.problems])
    from automation.cli.progress import Bar

    try:
        with Bar("writing objects", sum(1 for _ in result.objects())) as bar:
            # each object is checked against its schema as it is written; one invalid object: nothing is written
            count = write(result, Path(out), on_objects=bar.advance, check=check)
    except InvalidObjects as exc:
        refuse(exc.problems)
    except (OutputError, OSError) as exc:
        click.echo(f"error: {exc}", err=True)
        raise SystemExit(EXIT_INVALID) from None
    click.echo(f"wrote {count} objects for {len(result.stacks)} stacks to {out} (every object checked against its schema)")
    for stack, address in sorted(result.addresses.items()):
        click.echo(f"  {stack}: {address}")
    if any(".pending.modelplane.invalid" in address for address in result.addresses.values()):
        click.echo("  (a *.pending.modelplane.invalid host is a placeholder: the address is known once the gateway "
                   "stack has applied, and `modelplane status` shows it)")


def _progress(output: str, bar=None):
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


OPERATOR_PARALLEL = 64  # the operator executor's default --parallel: stacks handed over and watched at once


def _operator_client(settings_file: str, fleet_name: str | None):
    """The operator's settings, a client of the control-plane cluster and the export options, or exit 2."""
    from automation.execution.kube import KubeClient
    from automation.operator.runner import check_reachable
    from automation.operator.settings import load_settings
    from automation.execution.runner import AutomationError

    try:
        settings = load_settings(settings_file)
        options = settings.export_options(fleet_name)
        api = KubeClient(settings.kubeconfig_path(), settings.context)
        check_reachable(api, options)
    except AutomationError as exc:
        click.echo(f"error: --executor operator: {exc}", err=True)
        raise SystemExit(2) from None
    return settings, api, options


def _operator_executor(settings_file: str, fleet_name: str | None, force=(), unprotect: bool = False):
    """The operator executor's runner and its record (the cluster's Stacks), or exit 2 saying why not."""
    from automation.operator.runner import OperatorRecord, OperatorRunner

    settings, api, options = _operator_client(settings_file, fleet_name)
    runner = OperatorRunner(api, options, force=set(force), unprotect=unprotect, poll=settings.poll_seconds,
                            timeout=settings.timeout_minutes * 60)
    return runner, OperatorRecord(api, options)


def _selected_or_exit(prepared, operation: Operation, fleet, prune: bool, force: tuple[str, ...],
                      destroy_clusters: bool, check: bool, config: dict[str, str] | None) -> list:
    """The stacks `operation` touches, after the checks every road runs: invalid objects, unknown --force names,
    destroying clusters unconfirmed, the deployability check. Exit naming what stops it."""
    from automation.execution.session import selected

    if prepared.problems:
        for line in prepared.problems:
            click.echo(line, err=True)
        click.echo(f"{len(prepared.problems)} invalid object(s); nothing was applied", err=True)
        raise SystemExit(EXIT_INVALID)
    unknown_force = sorted(set(force) - set(prepared.specs))
    if unknown_force:
        click.echo(f"error: --force names {', '.join(unknown_force)}, not a stack of these manifests", err=True)
        raise SystemExit(2)
    items = selected(prepared, operation, prune=prune, force=set(force))
    for change in prepared.kept_by_default(operation, prune):
        click.echo(f"kept: {change.name} is recorded but not in the input; `{operation} --prune` would destroy it",
                   err=True)
    doomed = sorted(c.name for c in items if c.change == "delete" and c.kind == "platform")
    clusters = f", clusters included ({', '.join(doomed)})" if doomed else ""
    if operation == "destroy" and items and not destroy_clusters:
        if not _confirm(f"destroy {len(items)} stack(s){clusters}?"):
            click.echo(f"error: this would destroy {len(items)} stack(s){clusters}: pass --yes to confirm", err=True)
            raise SystemExit(2)
    elif doomed and not destroy_clusters and not _confirm(f"destroy the cluster stack(s) {', '.join(doomed)}?"):
        click.echo(f"error: this would destroy {', '.join(doomed)} (clusters and their GPU pools): pass "
                   "--yes-destroy-clusters to confirm", err=True)
        raise SystemExit(2)
    if check and operation in ("up", "preview") and items:
        _refuse_undeployable(fleet, prepared.specs, config)
    return items


def _apply(operation: Operation, paths, output: str, backend: str | None, parallel: int, control_plane: str | None,
           kubeconfig: tuple[str, ...] = (), unprotect: bool = False, prune: bool = False,
           destroy_clusters: bool = False, force: tuple[str, ...] = (), refresh: bool = False,
           check: bool = True, fleet_name: str | None = None, state: str = ".modelplane", executor: str = "local",
           operator_settings: str = "modelplane-operator.yaml", config: dict[str, str] | None = None) -> None:
    from pathlib import Path

    from automation.execution.migration import migrate, plan_renames
    from automation.execution.orchestrator import Orchestrator
    from automation.execution.programs import missing_secrets
    from automation.record.backend import PulumiRecord
    from automation.execution.pulumi_runner import PulumiRunner, check_passphrase, existing_kubeconfigs, missing_kubeconfigs
    from automation.execution.runner import AutomationError
    from automation.execution.session import prepare, run_interruptibly, selected
    from automation.execution.state import WorkdirLock

    from fleet.stack_id import StackId, StackIdError, backend_name

    try:
        backend_name("gateway", fleet_name)
    except StackIdError as exc:
        click.echo(f"error: --fleet: {exc}", err=True)
        raise SystemExit(2) from None
    on_operator = executor == "operator"
    if on_operator:
        refused = ("refresh and drift are not available with --executor operator (the operator refreshes a stack "
                   "whose Stack sets spec.refresh)" if operation in ("refresh", "preview-refresh") or refresh
                   else "--kubeconfig CLUSTER=PATH is for the local executor: on the operator, an Existing cluster's "
                   "kubeconfig is the Secret named by its existing.secretRef in the stacks' namespace" if kubeconfig
                   else "--backend is the local executor's: the operator's is `backend` in the settings file"
                   if backend else None)
        if refused:
            click.echo(f"error: {refused}", err=True)
            raise SystemExit(2)
        if click.get_current_context().get_parameter_source("parallel") == click.core.ParameterSource.DEFAULT:
            parallel = OPERATOR_PARALLEL  # stacks run in the cluster: here they are only handed over and watched
    elif parallel > 16:
        click.echo("error: --parallel: at most 16 with the local executor (each stack runs a Pulumi engine here)",
                   err=True)
        raise SystemExit(2)
    loaded = _load(paths)
    given = _kubeconfig_pairs(kubeconfig)
    unknown = sorted(set(given) - {c.name for c in loaded.fleet.of("InferenceCluster")})
    if unknown:
        click.echo(f"error: --kubeconfig names {', '.join(unknown)}, not an InferenceCluster of the fleet", err=True)
        raise SystemExit(2)
    root = Path(state)
    host = _control_plane(loaded.fleet, control_plane)
    runner: Any = None
    lock = WorkdirLock(root)
    if on_operator:  # the cluster's Stacks are the record of what is applied; legacy names are the local executor's
        runner, record = _operator_executor(operator_settings, fleet_name, force, unprotect or destroy_clusters)
    else:
        record = PulumiRecord(root, backend, fleet_name, strict=True)
    try:
        if operation != "preview":
            lock.lock()  # before reading the record: what this process plans with is not changed under it
        applied = record.read()
    except AutomationError as exc:
        lock.unlock()
        click.echo(f"error: {exc}", err=True)
        raise SystemExit(2) from None
    moves = sorted(getattr(record, "legacy", {}).items())  # platform stacks still in the old project
    renames = plan_renames(applied, loaded.fleet)
    prepared = prepare(loaded.fleet, applied, host)
    try:
        items = _selected_or_exit(prepared, operation, loaded.fleet, prune, force, destroy_clusters, check, config)
        if not items and not renames and not moves:
            click.echo(f"nothing to {operation}: " + ("nothing is applied" if operation in ("destroy", "refresh",
                                                                                            "preview-refresh")
                                                      and not prepared.recorded
                                                      else "every stack is up to date with the manifests"))
            lock.unlock()
            return
        kubeconfigs = existing_kubeconfigs(loaded.fleet, given, root)
        if runner is None:  # the local executor: every credential and secret value is needed here
            runner = PulumiRunner(root, loaded.fleet, backend=backend, parallel=parallel, kubeconfigs=kubeconfigs,
                                  unprotect=unprotect or destroy_clusters, refresh=refresh,  # says so if no CLI
                                  fleet_name=fleet_name, config=config)
            check_passphrase(runner.backend)
            missing = missing_kubeconfigs(loaded.fleet, kubeconfigs, [c.name for c in items], root)
            missing += [line for c in items if c.change in ("create", "update") and c.name in prepared.specs
                        for line in missing_secrets(prepared.specs[c.name], loaded.fleet)]
            if missing and operation != "destroy":
                raise AutomationError("; ".join(missing))
        if (renames or moves) and operation == "preview":
            lock.lock()
        if renames or moves:  # stacks under old names or in the old project move first; then the plan is made again
            for stack, organization in moves:
                runner.move_project(StackId.parse(stack), organization)
                click.echo(f"moved stack {stack} into the Pulumi project modelplane", err=True)
            for done in migrate(renames, runner.rename):
                click.echo(f"renamed stack {done.old} to {done.new}", err=True)
            prepared = prepare(loaded.fleet, record.read(), host)
            items = selected(prepared, operation, prune=prune, force=set(force))
    except AutomationError as exc:
        lock.unlock()
        click.echo(f"error: {exc}", err=True)
        raise SystemExit(2) from None
    except SystemExit:
        lock.unlock()
        raise
    from automation.cli.progress import Bar

    try:
        with Bar(f"{operation}: stacks", len(items), output) as bar:
            report = run_interruptibly(Orchestrator(runner, record, _progress(output, bar), parallel),
                                       operation, items, prepared.specs, lambda m: click.echo(m, err=True))
    finally:
        lock.unlock()
    good = sum(1 for o in report.outcomes if o.status == "succeeded")
    click.echo(f"{operation}: {good} of {len(report.outcomes)} stack(s) succeeded"
               + (" (cancelled)" if report.cancelled else ""), err=output == "json")
    for outcome in report.failed:
        click.echo(f"  {outcome.status}: {outcome.stack}: {outcome.reason}", err=True)
    if report.cancelled:
        raise SystemExit(130)
    if not report.ok:
        raise SystemExit(EXIT_INVALID)
    if operation == "preview-refresh":
        drifted = {o.stack: {k: v for k, v in o.result.changes.items() if k != "same" and v}
                   for o in report.outcomes if o.result is not None}
        drifted = {stack: found for stack, found in drifted.items() if found}
        for stack, found in sorted(drifted.items()):
            click.echo(f"drift: {stack}: " + ", ".join(f"{k} {v}" for k, v in sorted(found.items())))
        click.echo(f"{len(drifted)} of {len(report.outcomes)} applied stack(s) no longer match the clouds and clusters"
                   if drifted else f"no drift: {len(report.outcomes)} applied stack(s) match the clouds and clusters")
        if drifted:
            raise SystemExit(EXIT_INVALID)


def _stack_settings(pairs: tuple[str, ...], files: tuple[str, ...]) -> dict[str, str]:
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


def _refuse_undeployable(fleet, specs, config: dict[str, str] | None = None) -> None:
    """The deployability check over every desired stack (the graph, not only what changes): a fleet a real API
    server or cloud would refuse is not half-applied. Exit 1 naming each violation."""
    from automation.execution.session import undeployable

    violations = undeployable(fleet, specs, config)
    if violations:
        for v in violations:
            click.echo(v, err=True)
        click.echo(f"{len(violations)} deployability violation(s); nothing was applied (see `modelplane preview "
                   "--offline`; --skip-check to apply anyway)", err=True)
        raise SystemExit(EXIT_INVALID)


def _objects_with_status(fleet, prepared, applied: dict) -> str:
    """`status -o yaml`: the objects as the portal serves them, from what `up` recorded in this state folder."""
    import yaml

    from automation.planning.conditions import Observed, composed, snapshot, with_status

    snap = snapshot(prepared.desired)
    observed = Observed(applied)
    bodies = [o.model_dump(mode="json", exclude_none=True) for o in fleet.objects if o.kind != "ModelReplica"]
    gateways = [b for b in bodies if b["kind"] == "InferenceGateway"]
    items = [with_status(b, snap, observed, gateways) for b in bodies] + composed(None, snap, observed)
    return yaml.safe_dump({"apiVersion": "v1", "kind": "List", "items": items}, sort_keys=False)


def _service_addresses(prepared, applied: dict) -> list[dict]:
    """Each ModelService's OpenAI-compatible base address, once the fleet gateway's address is known."""
    from fleet.stack_id import StackId

    gateway = ((applied.get("gateway") or {}).get("outputs") or {}).get("address")
    out = []
    for stack, rendered in sorted(prepared.addresses.items()):
        id = StackId.parse(stack)
        path = f"/{id.namespace}/{id.name}"
        if gateway:
            out.append({"name": f"{id.namespace}/{id.name}", "address": f"http://{gateway}{path}", "pending": None})
        elif ".pending.modelplane.invalid" not in rendered:  # the InferenceGateway's observed status gives it
            out.append({"name": f"{id.namespace}/{id.name}", "address": rendered, "pending": None})
        else:
            out.append({"name": f"{id.namespace}/{id.name}", "address": None,
                        "pending": "known once the gateway stack applied"})
    return out


def _confirm(question: str) -> bool:
    """Ask on a terminal; never when input is not a terminal (CI, scripts): those must pass the flag."""
    if not sys.stdin.isatty():
        return False
    return click.confirm(question, default=False, err=True)


def _apply_options(function):
    function = click.option("-o", "--output", type=click.Choice(["table", "json"]), default="table", show_default=True,
                            help="table: progress for people; json: one JSON event per line.")(function)
    function = _BACKEND(function)
    function = click.option("--parallel", type=click.IntRange(1, 256), default=2, show_default=True,
                            help="Stacks run at once. Local executor: at most 16 (each runs a Pulumi engine and its "
                                 "provider plugins here); operator: stacks handed over and watched at once (default "
                                 "there: 64).")(function)
    function = _executor_options("local: Pulumi engines on this machine; operator: Stack objects applied to the "
                                 "control-plane cluster's Pulumi Kubernetes Operator.")(function)
    function = click.option("--control-plane", "control_plane", default=None, metavar="CLUSTER",
                            help="The InferenceCluster hosting the fleet gateway (default: the first by name whose "
                                 "cloud gives a LoadBalancer an address, GKE, EKS, AKS or Nebius, else the first "
                                 "Existing one).")(function)
    function = _FLEET(_state_option(function))
    function = click.option("--config", "config_pairs", multiple=True, metavar="KEY=VALUE",
                            help="Stack config for the platform and gateway programs, as `pulumi config set` takes it "
                                 "(gcp:project=my-project, aws:profile=prod, any provider setting). Plain values only; "
                                 "repeatable; after --config-file.")(function)
    function = click.option("--config-file", "config_files", multiple=True, metavar="PATH",
                            type=click.Path(dir_okay=False),
                            help="A Pulumi stack config file (`config:` of KEY: VALUE, as Pulumi.<stack>.yaml) with "
                                 "the same settings. Repeatable.")(function)
    function = click.option("--kubeconfig", "kubeconfig", multiple=True, metavar="CLUSTER=PATH",
                            help="The kubeconfig file of an Existing cluster (else $MODELPLANE_KUBECONFIG_<CLUSTER>, or "
                                 ".modelplane/kubeconfigs/<existing.secretRef.name>). Read by the program, kept a "
                                 "Pulumi secret, never put on a command line. Repeatable.")(function)
    return _paths_option(function)


_PRUNE = click.option("--prune", is_flag=True,
                      help="Also destroy recorded stacks whose objects are not in the input (without it, input that "
                           "is a subset of the fleet never destroys the rest).")
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
@_PRUNE
def preview(paths, output, backend, parallel, control_plane, fleet_name, state, kubeconfig, executor, operator_settings,
            config_pairs, config_files, offline, jobs, changed_against, prune) -> None:
    """Show what each changed stack would do (with --offline: what every stack would register, checked for
    deployability, no CLI needed)."""
    settings = _stack_settings(config_pairs, config_files)
    if changed_against and not offline:
        click.echo("error: --changed-against previews offline: add --offline (a live preview already runs only the "
                   "stacks whose fingerprint changed)", err=True)
        raise SystemExit(2)
    if not offline:
        _apply("preview", paths, output, backend, parallel, control_plane, kubeconfig, prune=prune,
               destroy_clusters=True, fleet_name=fleet_name, state=state, executor=executor,
               operator_settings=operator_settings, config=settings)  # a preview destroys nothing
        return
    from automation.planning.deployability import check_fleet
    from automation.planning.offline_preview import all_stacks
    from automation.cli.output import preview_table

    from automation.cli.progress import Bar
    from automation.planning.stacks import desired_state

    loaded = _load(paths)
    host = _control_plane(loaded.fleet, control_plane)
    # what every road plans with: the record (the cache stands in, and says so, when it cannot be read)
    applied = _record_for_plan(state, backend, fleet_name, executor, operator_settings, fresh=False)
    only, changes = None, None
    if changed_against:
        from automation.planning.base_cache import BaseCache
        from automation.planning.offline_preview import around
        from automation.planning.stacks import changes as stack_changes

        # the head planned with the base's placements, as `plan --against` plans it (the base's summary cached)
        # the base with its own gateway host, as `plan --against` plans it: the head's may be a cluster it adds
        base = _base(changed_against, applied.placements(), BaseCache())
        desired = desired_state(loaded.fleet, base.placements, control_plane=host, gateways=applied.gateways())
        changes = {c.name: c.change for c in stack_changes(desired.specs, base.fingerprints) if c.change != "none"}
        only = around(desired.specs, {name for name, change in changes.items() if change != "delete"})
    else:
        desired = desired_state(loaded.fleet, applied.placements(), control_plane=host, gateways=applied.gateways())
    with Bar("previewing stacks", len(desired.specs) if only is None else len(only), output) as bar:
        stacks = all_stacks(loaded.fleet, host, desired, on_stack=bar.advance, jobs=jobs, only=only, config=settings)
    violations = check_fleet(loaded.fleet, stacks)
    if output == "json":
        from automation.cli.output import stream_json

        # each stack's JSON is built as it is written: the whole document at once was most of the peak memory
        document: dict = {"stacks": (s.to_dict() for s in stacks), "violations": [v.__dict__ for v in violations]}
        if changes is not None:  # which stacks differ from the base; the others listed were previewed for the check
            document["changes"] = [{"name": name, "change": change} for name, change in changes.items()]
        stream_json(document, sys.stdout.write)
        sys.stdout.write("\n")
    else:
        preview_table(stacks, stream=sys.stdout)
        if changes is not None:
            click.echo(f"{len(changes)} stack(s) differ from the base: " + (", ".join(
                f"{name} ({change})" for name, change in changes.items()) or "none"))
    for v in violations:
        click.echo(f"{v}", err=True)
    if violations:
        click.echo(f"{len(violations)} deployability violation(s): a real first apply would fail; nothing was applied",
                   err=True)
        raise SystemExit(EXIT_INVALID)
    if output != "json":
        click.echo(f"fleet gateway host: {host or 'none'}")
        scope = "" if changes is None else " (the changed ones, what they depend on and what depends on them)"
        click.echo(f"deployability check: {len(stacks)} stack(s){scope}, 0 violations")


def _control_plane(fleet: Fleet, chosen: str | None) -> str | None:
    """The cluster hosting the fleet gateway, or exit 2 naming why the chosen one cannot."""
    from components.args import control_plane_cluster

    try:
        return control_plane_cluster(fleet, chosen)
    except ValueError as exc:
        click.echo(f"error: --control-plane: {exc}", err=True)
        raise SystemExit(2) from None


@cli.command()
@_apply_options
@_PRUNE
@_DESTROY_CLUSTERS
@click.option("--force", multiple=True, metavar="STACK", help="Rerun this stack even if its fingerprint did not change. Repeatable.")
@click.option("--refresh", is_flag=True, help="Refresh each stack's state from the clouds and clusters before updating it.")
@click.option("--skip-check", "skip_check", is_flag=True,
              help="Apply even if the deployability check (as in `preview --offline`) finds violations.")
def up(paths, output, backend, parallel, control_plane, fleet_name, state, kubeconfig, executor, operator_settings,
       config_pairs, config_files, prune, destroy_clusters, force, refresh, skip_check) -> None:
    """Apply the changed stacks in dependency order; record each only once it succeeded.

    Runs the deployability check first: a fleet a real API server or cloud would refuse is not applied."""
    _apply("up", paths, output, backend, parallel, control_plane, kubeconfig, prune=prune,
           destroy_clusters=destroy_clusters, force=force, refresh=refresh, check=not skip_check, fleet_name=fleet_name,
           state=state, executor=executor, operator_settings=operator_settings,
           config=_stack_settings(config_pairs, config_files))


@cli.command()
@_apply_options
def drift(paths, output, backend, parallel, control_plane, fleet_name, state, kubeconfig, executor,
          operator_settings, config_pairs, config_files) -> None:
    """Report applied stacks whose cloud or cluster state no longer matches (a refresh preview; exit 1 on drift)."""
    _apply("preview-refresh", paths, output, backend, parallel, control_plane, kubeconfig, fleet_name=fleet_name,
           state=state, executor=executor, operator_settings=operator_settings,
           config=_stack_settings(config_pairs, config_files))


@cli.command(name="refresh")
@_apply_options
def refresh_command(paths, output, backend, parallel, control_plane, fleet_name, state, kubeconfig, executor,
                    operator_settings, config_pairs, config_files) -> None:
    """Refresh the applied stacks' state from the clouds and clusters."""
    _apply("refresh", paths, output, backend, parallel, control_plane, kubeconfig, fleet_name=fleet_name, state=state,
           executor=executor, operator_settings=operator_settings, config=_stack_settings(config_pairs, config_files))


@cli.command()
@_apply_options
@click.option("--unprotect", is_flag=True,
              help="Lift the deletion protection of clusters and networks (an update with it off), then destroy them. "
                   "Without it, platform stacks refuse to be destroyed.")
@click.option("--yes", "-y", "yes", is_flag=True, help="Confirm: destroy without asking (needed when not on a terminal).")
def destroy(paths, output, backend, parallel, control_plane, fleet_name, state, kubeconfig, executor, operator_settings,
            config_pairs, config_files, unprotect, yes) -> None:
    """Destroy the applied stacks these manifests describe, dependents first."""
    _apply("destroy", paths, output, backend, parallel, control_plane, kubeconfig, unprotect, destroy_clusters=yes,
           fleet_name=fleet_name, state=state, executor=executor, operator_settings=operator_settings,
           config=_stack_settings(config_pairs, config_files))


@cli.command()
@_paths_option
@click.option("-o", "--output", type=click.Choice(["table", "json", "yaml"]), default="table", show_default=True,
              help="table for people; json: stacks, unscheduled deployments, the gateway's host and service addresses; "
                   "yaml: every object (and the ModelReplicas and ModelEndpoints it composes) with the status and "
                   "conditions the portal serves, as a Kubernetes List.")
@click.option("--control-plane", "control_plane", default=None, metavar="CLUSTER",
              help="The InferenceCluster hosting the fleet gateway (default: the first by name whose cloud gives a "
                   "LoadBalancer an address, else the first Existing one).")
@_state_option
@_executor_options("local: the record in the Pulumi backend; operator: the Stack objects in the control-plane cluster, "
                   "with where the operator is with each.")
@_FLEET
@_BACKEND
def status(paths, output, control_plane, state, executor, operator_settings, fleet_name, backend) -> None:
    """Which stacks are applied, which are pending, and what is unscheduled (from the record; without the Pulumi
    CLI, from its local cache, and it says so)."""
    from pathlib import Path

    from automation.execution.migration import plan_renames
    from automation.execution.session import prepare

    loaded = _load(paths)
    host = _control_plane(loaded.fleet, control_plane)
    on_operator: dict[str, str] = {}
    if executor == "operator":
        from automation.operator.runner import OperatorRecord, live_stacks, stack_state

        _, api, options = _operator_client(operator_settings, fleet_name)
        on_operator = {name: stack_state(stack) for name, stack in live_stacks(api, options).items()}
        record: Any = OperatorRecord(api, options)
    else:
        from automation.record.backend import PulumiRecord

        record = PulumiRecord(Path(state), backend, fleet_name, strict=False)
    read = _read_record(record)
    prepared = prepare(loaded.fleet, read, host)
    applied = read.details()
    renames = {str(r.old): str(r.new) for r in plan_renames(read, loaded.fleet)}
    reasons = {"create": "not applied yet", "update": "its manifests changed since it was applied",
               "delete": "recorded but not in the input: `up --prune` destroys it", "none": ""}
    rows = []
    for c in prepared.changes:
        if c.name in renames.values() and c.change == "create":
            continue  # shown once, under its recorded legacy name
        reason = reasons[c.change]
        if c.name in renames:
            reason = f"recorded under the legacy name; the next `up` renames it to {renames[c.name]}"
        elif c.change == "delete" and c.kind == "platform":
            reason += " (with --yes-destroy-clusters)"
        if c.name in on_operator and on_operator[c.name] != "succeeded":
            said = on_operator[c.name]
            reason = said if "on the operator" in said else f"on the operator: {said}"
        rows.append({"name": c.name, "change": "rename" if c.name in renames else c.change,
                     "appliedAt": (applied.get(c.name) or {}).get("appliedAt"), "reason": reason,
                     **({"operator": on_operator.get(c.name, "no Stack object")} if executor == "operator" else {})})
    services = _service_addresses(prepared, applied)
    if output == "yaml":
        click.echo(_objects_with_status(loaded.fleet, prepared, applied), nl=False)
        return
    if output == "json":
        click.echo(json.dumps({"stacks": rows, "unscheduled": [u.deployment for u in prepared.plan.unscheduled],
                               "controlPlane": host, "services": services}, indent=2))
        return
    click.echo(f"fleet gateway host: {host or 'none (no GKE, EKS, AKS, Nebius or Existing cluster)'}")
    for service in services:
        where = service["address"] or f"pending ({service['pending']})"
        click.echo(f"service {service['name']}: {where}")
    for row in rows:
        state = "up to date" if row["change"] == "none" else f"pending {row['change']}"
        why = f"  {row['reason']}" if row["reason"] else ""
        click.echo(f"{row['name']:<48} {state:<16} {row['appliedAt'] or 'never applied'}{why}")
    for u in prepared.plan.unscheduled:
        click.echo(f"unscheduled: {u.deployment}: {u.missing} replica(s)")


@cli.command()
@_paths_option
@click.option("--server", required=True, metavar="URL", help="The portal, e.g. https://modelplane.example.internal")
@click.option("--token-file", "token_file", default=None, type=click.Path(dir_okay=False),
              help="A file holding the bearer token (default: $MODELPLANE_TOKEN). Never on the command line.")
def apply(paths, server, token_file) -> None:
    """Push manifests to a portal (validated here first; nothing is sent if any is invalid)."""
    import os

    from automation.cli.apply_remote import PushError, push

    loaded = _load(paths)
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
@click.argument("target", metavar="KIND[.FIELD.PATH]")
def explain(target) -> None:
    """What a kind or field is: type, default, allowed values, bounds and sub-fields, from the API models."""
    from fleet.explain import ExplainError
    from fleet.explain import explain as explain_field

    try:
        click.echo(explain_field(target), nl=False)
    except ExplainError as exc:
        click.echo(f"error: {exc}", err=True)
        raise SystemExit(2) from None


@cli.command()
@click.option("--out", "out", default=None, type=click.Path(file_okay=False), metavar="DIR",
              help="Write DIR/modelplane.ai/v1alpha1/<Kind>.json (default: print the schema of KIND).")
@click.argument("kind", required=False)
def schema(out, kind) -> None:
    """JSON Schemas of the modelplane.ai kinds, for editors: `modelplane schema ModelDeployment`, or --out DIR."""
    from pathlib import Path

    from fleet.api import KINDS
    from fleet.json_schema import schema as schema_of
    from fleet.json_schema import write

    if out:
        for path in write(Path(out)):
            click.echo(f"wrote {path}")
        return
    if kind not in KINDS:
        click.echo(f"error: give a kind ({', '.join(KINDS)}) or --out DIR", err=True)
        raise SystemExit(2)
    click.echo(json.dumps(schema_of(kind), indent=2, sort_keys=True))


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
@_executor_options("local: Pulumi engines on this host; operator: accepted changes become Stack objects on the "
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
        _operator_executor(operator_settings, None)  # the settings and the cluster are checked before listening
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


@cli.group()
def operator() -> None:
    """Run the fleet's stacks on the Pulumi Kubernetes Operator (v2) in the control-plane cluster."""


@operator.command("export")
@_paths_option
@click.option("--out", required=True, metavar="DIR", help="Folder for _operator.yaml and one <stack>.yaml per stack.")
@click.option("--backend", required=True, metavar="URL",
              help="The stacks' Pulumi backend: s3://, gs://, azblob:// or a Pulumi Cloud URL.")
@click.option("--git-url", "git_url", required=True, metavar="URL",
              help="This project's repository (with the fleet's manifests in it): platform and gateway stacks run "
                   "its Pulumi.yaml.")
@click.option("--git-ref", "git_ref", default="main", show_default=True, metavar="REF",
              help="A branch, a tag or a 40-hex commit: the Stacks are pinned to the commit it resolves to now "
                   "(git ls-remote), so a later commit re-runs only the stacks an export changes.")
@click.option("--git-auth", "git_auth", default=None, metavar="MODE=SECRET",
              help="A private repository: accessToken=SECRET (key accessToken), sshAuth=SECRET (key sshPrivateKey) "
                   "or basicAuth=SECRET (keys username, password), a Secret in --namespace.")
@click.option("--repo-dir", "repo_dir", default=".", show_default=True, metavar="DIR",
              help="Where Pulumi.yaml is in the repository.")
@click.option("--fleet-dir", "fleet_dir", default="fleet", show_default=True, metavar="DIR",
              help="The fleet's manifests in the repository, relative to --repo-dir (the platform program's "
                   "modelplane:fleet).")
@click.option("--namespace", default="modelplane-stacks", show_default=True,
              help="The namespace of the Stack and Program objects in the control-plane cluster.")
@click.option("--image", default=None, metavar="IMAGE", help="The workspaces' Pulumi image (default: a pinned "
                                                             "pulumi/pulumi nonroot image).")
@click.option("--secret", "secrets", multiple=True, metavar="NAME",
              help="A Secret in --namespace whose keys become every workspace's environment (cloud credentials, "
                   "PULUMI_ACCESS_TOKEN or PULUMI_CONFIG_PASSPHRASE). Repeatable; values are never read.")
@click.option("--organization", default="organization", show_default=True,
              help="The backend's organization (Pulumi Cloud: yours; DIY backends: organization).")
@click.option("--fleet", "fleet_name", default=None, envvar="MODELPLANE_FLEET", metavar="NAME",
              help="Several fleets on one backend: stacks are named <NAME>_<stack> there.")
@click.option("--control-plane", "control_plane", default=None, metavar="CLUSTER",
              help="The InferenceCluster hosting the fleet gateway (and the operator).")
@_state_option
@_fresh_option
def operator_export(paths, out, backend, git_url, git_ref, git_auth, repo_dir, fleet_dir, namespace, image, secrets,
                    organization, fleet_name, control_plane, state, fresh) -> None:
    """Write the Pulumi Kubernetes Operator objects that run every desired stack (nothing is applied)."""
    from pathlib import Path

    from automation.operator.git_source import pinned_commit
    from automation.operator.export import PULUMI_IMAGE, ExportError, ExportOptions, export, problems, write
    from automation.planning.stacks import desired_state

    loaded = _load(paths)
    host = _control_plane(loaded.fleet, control_plane)
    applied = _record_for_plan(state, backend, fleet_name, "local", "", fresh)
    desired = desired_state(loaded.fleet, applied.placements(), host, gateways=applied.gateways())
    if desired.problems:
        for line in desired.problems:
            click.echo(line, err=True)
        click.echo(f"{len(desired.problems)} invalid object(s); nothing was written", err=True)
        raise SystemExit(EXIT_INVALID)
    try:
        mode, _, secret = (git_auth or "").partition("=")
        if git_auth is not None and not (mode and secret):
            raise ExportError(f"--git-auth {git_auth!r}: expected MODE=SECRET, e.g. accessToken=github-token")
        options = ExportOptions(backend=backend, git_url=git_url,
                                git_ref=pinned_commit(git_url, git_ref) if git_url else git_ref, repo_dir=repo_dir,
                                fleet_dir=fleet_dir, namespace=namespace, image=image or PULUMI_IMAGE,
                                secrets=tuple(secrets), organization=organization, fleet_name=fleet_name,
                                git_auth=(mode, secret) if git_auth else None)
        files = export(desired, options)
        found = problems(files)
        if found:
            for line in found:
                click.echo(line, err=True)
            click.echo(f"{len(found)} invalid operator object(s); nothing was written", err=True)
            raise SystemExit(EXIT_INVALID)
        count = write(files, Path(out))
    except (ExportError, OSError) as exc:
        click.echo(f"error: {exc}", err=True)
        raise SystemExit(EXIT_INVALID) from None
    click.echo(f"wrote {count} operator objects for {len(files) - 1} stacks to {out} (every object checked against "
               "the operator's CRDs); apply them with `kubectl apply --server-side -f` to the control-plane cluster")


EXAMPLES = {
    "validate": "modelplane validate -f examples/",
    "explain": "modelplane explain ModelDeployment.spec.template.spec.engines",
    "schema": "modelplane schema --out schemas",
    "plan": "modelplane plan -f examples/ --explain -n ml-team",
    "render": "modelplane render -f examples/ --out out/render",
    "preview": "modelplane preview --offline -f examples/",
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


def main(argv: list[str] | None = None) -> int:
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
    except Exception as exc:  # a bug of ours: one line, never a traceback
        click.echo(f"modelplane: internal error: {type(exc).__name__}: {exc} (please report this)", err=True)
        return EXIT_INTERNAL
    return 0


if __name__ == "__main__":
    sys.exit(main())
