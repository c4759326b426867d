"""What every command shares: the command group, the options that mean the same everywhere, loading manifests,
and opening the record of what is applied. Every failure here is one line and an exit code, never a traceback."""

from __future__ import annotations

import inspect
import os
import re

import sys
from typing import TYPE_CHECKING, Callable

import click

if TYPE_CHECKING:
    from fleet.capacity import LiveCapacity
    from automation.planning.base_cache import BaseCache
    from automation.planning.compare import Base
    from fleet.validate import Fleet
    from workloads.gateways import Gateways

from fleet.validate import LoadMemo, Loaded, load_fleet


EXIT_INVALID = 1


EXIT_USAGE = 2  # a usage error, or a ModelplaneError the command did not say itself (automation/cli/__init__.py)


EXIT_INTERNAL = 3


EXIT_UNSCHEDULED = 4  # plan --fail-on-unscheduled


def _remember_secrets_dir(ctx: click.Context, _param, value: str | None) -> None:
    ctx.meta["secrets_dir"] = value


def paths_option(function):
    function = click.option(
        "--secrets-dir", metavar="DIR", default=None, envvar="MODELPLANE_SECRETS_DIR", expose_value=False,
        type=click.Path(file_okay=False), callback=_remember_secrets_dir,
        help="Secret values as files DIR/<namespace>/<name>/<key> (else $MODELPLANE_SECRETS_DIR). Secrets also come "
             "from v1/Secret manifests given with -f and from $MODELPLANE_SECRET_<NAMESPACE>__<NAME>__<KEY>; they "
             "are never printed.")(function)
    return click.option(
        "-f", "--filename", "paths", multiple=True, required=True, metavar="PATH",
        help="A manifest file, a folder (searched recursively for *.yaml and *.yml) or - for stdin; v1/Secrets among "
             "them are read as secret values. Repeatable.",
    )(function)


def state_option(function):
    return click.option("--state", "state", default=".modelplane", show_default=True, type=click.Path(file_okay=False),
                        metavar="DIR", help="The local folder for workspaces, caches and the lock (what is applied is "
                                            "read from the backend: deleting this folder changes no result).")(function)


def fresh_option(function):
    return click.option("--fresh", is_flag=True,
                        help="Ignore the record of what is applied: plan as if nothing were.")(function)


def executor_options(executor_help: str):
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


BACKEND = click.option("--backend", metavar="URL", default=None,
                        help="Pulumi backend: the stacks and the record of what is applied (default: "
                             "file://.modelplane/backend, or PULUMI_BACKEND_URL).")


FLEET = click.option("--fleet", "fleet_name", default=None, envvar="MODELPLANE_FLEET", metavar="NAME",
                      help="Several fleets on one backend (or operator namespace): this fleet's stacks, named "
                           "<NAME>_<stack> there (default: $MODELPLANE_FLEET, else unprefixed).")


CAPACITY = click.option("--capacity", "capacity", default="declared", show_default=True, metavar="SOURCE",
                        envvar="MODELPLANE_CAPACITY",
                        help="Where each pool's free devices come from: declared (the manifests), live (read from "
                             "each cluster that can be reached: its ResourceSlices, allocated claims and nodes; "
                             "one that cannot keeps its declared capacity), or a snapshot FILE from `modelplane "
                             "capacity save` (docs/scheduling.md).")


KUBECONFIG = click.option("--kubeconfig", "kubeconfig", multiple=True, metavar="CLUSTER=PATH",
                          help="A cluster's kubeconfig, to read its live capacity (Existing clusters' are also found "
                               "as `up` finds them). Repeatable.")


def capacity_options(function):
    """`--capacity` (where free devices come from) and, for `live`, the clusters' `--kubeconfig`s."""
    return CAPACITY(KUBECONFIG(function))


def with_capacity(fleet, capacity: str, kubeconfig: tuple[str, ...], state: str) -> None:
    """Gives `fleet` the capacity `--capacity` names (fleet.live), or exits 2 saying why it cannot."""
    from pathlib import Path

    from automation.capacity.source import capacity_of
    from automation.cli.stack_options import kubeconfig_pairs
    from automation.execution.runner import AutomationError

    try:
        fleet.live = capacity_of(fleet, capacity, kubeconfig_pairs(kubeconfig), Path(state))
    except AutomationError as exc:
        click.echo(f"error: {exc}", err=True)
        raise SystemExit(2) from None


def record_options(function):
    """Where a command that plans reads the record from: the executor's (the backend, or the operator's Stacks)."""
    function = FLEET(BACKEND(function))
    function = executor_options("where the record of what is applied is read: local: the Pulumi backend; operator: "
                                 "the Stack objects in the control-plane cluster.")(function)
    return fresh_option(state_option(function))


def open_record(state: str, backend: str | None, fleet_name: str | None, executor: str, operator_settings: str,
                 strict: bool):
    """The executor's record (automation/road/executor.py `open_record`, as `up` opens it), or exit 2 saying why it
    cannot be opened."""
    from pathlib import Path

    from automation.execution.runner import AutomationError
    from automation.road.executor import ExecutorOptions
    from automation.road.executor import open_record as opened

    try:
        return opened(ExecutorOptions(kind="operator" if executor == "operator" else "local", state=Path(state),
                                      backend=backend, fleet_name=fleet_name, operator_settings=operator_settings),
                      strict=strict)
    except AutomationError as exc:
        click.echo(f"error: --executor {executor}: {exc}", err=True)
        raise SystemExit(2) from None


def read_record(record, fresh: bool = False):
    """Read the record (a plan: the cache stands in, and says so, when the backend cannot be read); say on stderr
    what was read. Exit 2 when it cannot be read and nothing may stand in."""
    from automation.record.applied import Applied

    if fresh:  # nothing is read: what reads (the CLI runner, and what it runs) is not loaded
        return Applied({}, "nothing (--fresh)")
    from automation.execution.runner import AutomationError
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


def what_the_record_lacks(applied, fresh: bool, backend: str | None, executor: str) -> list[str]:
    """A comment's first words on the record it was planned with: unread, asked away (--fresh), or holding nothing
    (in CI: no backend given, most likely). `review` and `plan --against -o markdown` both lead with them, so the
    comment and its parts run one at a time say the same."""
    from automation.planning.compare import record_warning

    unread = record_warning(applied.guessed, applied.source)
    if unread:
        return [unread]
    if fresh:
        return ["planned as if nothing were applied (`--fresh`): a move it could not check against the record is "
                "listed as possible, not certain."]
    if applied.stacks:
        return []
    given = bool(backend or os.environ.get("PULUMI_BACKEND_URL")) or executor == "operator"
    where = "the backend given" if given else "the default backend (no `--backend` or `PULUMI_BACKEND_URL` was given)"
    return [f"the record of what is applied holds no stack in {where}, so this was planned as if nothing were "
            "applied: a move it could not check against the record is listed as possible, not certain. CI reads the "
            "record with the Pulumi CLI and read access to the backend `modelplane up` uses (docs/ci/README.md)."]


def record_for_plan(state, backend, fleet_name, executor, operator_settings, fresh: bool):
    if fresh:
        return read_record(None, fresh=True)
    return read_record(open_record(state, backend, fleet_name, executor, operator_settings, strict=False))


def comparing(head: tuple[str, ...], base: tuple[str, ...], option: str) -> LoadMemo:
    """Called before its first load by a command that loads a base after its head: the two loads then share what
    the files have in common (fleet.validate.LoadMemo). Other commands load once and keep nothing. Refused (exit
    2) when both sides are standard input: the first read would take all of it, and the other side read nothing."""
    if "-" in head and "-" in base:
        click.echo(f"error: -f - and {option} - both read standard input: give one of them as files", err=True)
        raise SystemExit(2)
    return click.get_current_context().meta.setdefault("load_memo", LoadMemo())


def load(paths: tuple[str, ...], sources: list | None = None) -> Loaded:
    """`sources`: the files under `paths` as already read, not read again."""
    from pathlib import Path

    secrets_dir = click.get_current_context().meta.get("secrets_dir")
    loaded = load_fleet(paths, stdin=sys.stdin if "-" in paths else None,
                        secrets_dir=Path(secrets_dir) if secrets_dir else None, sources=sources,
                        memo=click.get_current_context().meta.get("load_memo"))
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


def cpu_to_spare() -> bool:
    """Whether a comparison may load and plan its base in a forked process while this one plans the head
    (automation/planning/base_beside.py): with a second CPU this process may use."""
    usable = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count() or 1
    return usable > 1 and hasattr(os, "fork")


def summarised_base(paths: tuple[str, ...], recorded: list, cache: BaseCache | None,
                    control_plane: str | None = None, gateways: Gateways | None = None, beside: bool = False,
                    say: Callable[[str], None] | None = None, live: LiveCapacity | None = None) -> Base:
    """The base of a comparison (`plan --against`, `preview --changed-against`, `review`). When the base's files are
    byte for byte those of a base summarised before, with the same recorded placements and code, the summary is
    read back and the base is parsed only if the head needs a fingerprint it lacks; otherwise it is loaded (its
    problems said as for any input), and planned with the head (automation/planning/compare.py). `beside`: loaded
    and planned in a forked process (automation/planning/base_beside.py), when the command has a CPU to spare
    (`cpu_to_spare`) and the head is not loaded yet; `say`: what to do with the note that a kept summary was read
    (a command that has not loaded its head yet says it after the head's notes, as when the base comes second).
    `live`: the capacity the head is planned on (`--capacity`), which the base is planned on too."""
    from automation.planning.base_cache import source_key
    from automation.planning.compare import Base
    from fleet.loader import read_sources

    sources = read_sources(paths, sys.stdin if "-" in paths else None)

    def loaded_base() -> Fleet:  # planned on the head's capacity
        fleet = load(paths, sources).fleet
        fleet.live = live
        return fleet

    key = None
    if cache is not None and not click.get_current_context().meta.get("secrets_dir") \
            and all(s.raw is not None and not s.problems for s in sources):
        key = source_key([(s.name, s.raw) for s in sources if s.raw is not None], recorded, control_plane, gateways,
                         live)
        summary = cache.by_sources(key)
        if summary is not None:
            # the way out is named only where the command takes it (`plan`, `review`)
            afresh = "; --no-cache to plan it afresh" if any(
                p.name == "no_cache" for p in click.get_current_context().command.params) else ""
            note = f"note: base: {', '.join(paths)} read as summarised before (unchanged files{afresh})"
            if say is not None:
                say(note)
            else:
                click.echo(note, err=True)
            return Base(summary, load=loaded_base, cache=cache, sources_key=key,
                        control_plane=control_plane, gateways=gateways)

    if beside:
        from automation.planning.base_beside import BaseBeside

        return Base(beside=BaseBeside(loaded_base, recorded, control_plane, gateways, cache),
                    cache=cache, sources_key=key, control_plane=control_plane, gateways=gateways)
    return Base(fleet=loaded_base(), cache=cache, sources_key=key, control_plane=control_plane, gateways=gateways)


WORKFLOW = ["validate", "explain", "schema", "plan", "render", "preview", "review", "status", "up", "drift", "refresh",
            "destroy", "apply", "serve", "operator"]


class WorkflowGroup(click.Group):
    """Lists commands in the order one uses them, not alphabetically, each with its whole first sentence (click cuts
    summaries at the terminal's width, mid-sentence; the formatter wraps them instead)."""

    def list_commands(self, ctx: click.Context) -> list[str]:
        names = super().list_commands(ctx)
        return [n for n in WORKFLOW if n in names] + [n for n in names if n not in WORKFLOW]

    def format_commands(self, ctx: click.Context, formatter: click.HelpFormatter) -> None:
        rows = []
        for name in self.list_commands(ctx):
            command = self.get_command(ctx, name)
            if command is None or command.hidden:
                continue
            text = inspect.cleandoc(command.short_help or command.help or "").split("\n\n")[0].replace("\n", " ")
            rows.append((name, re.split(r"(?<=\.)\s", text, maxsplit=1)[0]))
        if rows:
            with formatter.section("Commands"):
                formatter.write_dl(rows)


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


def operator_client(settings_file: str, fleet_name: str | None):
    """The operator's settings, a client of the control-plane cluster and the export options, or exit 2."""
    from automation.execution.runner import AutomationError
    from automation.road.executor import ExecutorOptions
    from automation.road.executor import operator_client as client

    try:
        return client(ExecutorOptions(kind="operator", fleet_name=fleet_name, operator_settings=settings_file))
    except AutomationError as exc:
        click.echo(f"error: --executor operator: {exc}", err=True)
        raise SystemExit(2) from None


def gateway_host(fleet: Fleet, chosen: str | None) -> str | None:
    """The cluster hosting the fleet gateway, or exit 2 naming why the chosen one cannot."""
    from components.args import control_plane_cluster

    try:
        return control_plane_cluster(fleet, chosen)
    except ValueError as exc:
        click.echo(f"error: --control-plane: {exc}", err=True)
        raise SystemExit(2) from None

