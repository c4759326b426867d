"""The `modelplane` command line.

click gives us subcommands, repeatable options and clean usage errors; every failure of
ours becomes one line and a non-zero exit, never a traceback.
"""

from __future__ import annotations

import json
import sys
from collections import Counter

import click
import yaml

from fleet.plan_output import plan_to_dict
from fleet.scheduler import schedule
from fleet.validate import Loaded, load_fleet

EXIT_INVALID = 1
EXIT_INTERNAL = 3


def _paths_option(function):
    return click.option(
        "-f", "--filename", "paths", multiple=True, required=True, metavar="PATH",
        help="A manifest file, a folder (searched recursively for *.yaml and *.yml) or - for stdin. Repeatable.",
    )(function)


def _load(paths: tuple[str, ...]) -> Loaded:
    loaded = load_fleet(paths, stdin=sys.stdin if "-" in paths else None)
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


@click.group(context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(package_name="modelplane-pulumi", prog_name="modelplane")
def cli() -> None:
    """A fleet control plane for LLM inference on Pulumi (modelplane.ai/v1alpha1 manifests)."""


@cli.command()
@_paths_option
def validate(paths: tuple[str, ...]) -> None:
    """Check manifests: exit 0 with a summary per kind, or 1 with one located line per problem."""
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
@click.option("-o", "--output", type=click.Choice(["table", "json", "yaml"]), default="table", show_default=True,
              help="table for people; json and yaml are the stable machine interface (see README).")
@click.option("--explain", is_flag=True, help="Say why each replica went where it did, and which backend serves each engine.")
def plan(paths: tuple[str, ...], output: str, explain: bool) -> None:
    """Place every replica on a (cluster, pool): exit 0 when the plan was computed, even with unscheduled replicas."""
    from automation.output import plan_table

    loaded = _load(paths)
    result = schedule(loaded.fleet, explain=explain)
    if output == "json":
        click.echo(json.dumps(plan_to_dict(result, explain), indent=2))
    elif output == "yaml":
        click.echo(yaml.safe_dump(plan_to_dict(result, explain), sort_keys=False), nl=False)
    else:
        plan_table(result, explain, stream=sys.stdout)


@cli.command()
@_paths_option
@click.option("--out", "out", required=True, type=click.Path(file_okay=False), metavar="DIR",
              help="Folder to write to: DIR/<stack>/<cluster or control-plane>/<kind>-<name>.yaml (replaced as a whole).")
def render(paths: tuple[str, ...], out: str) -> None:
    """Write every Kubernetes object every stack would create; refuse, writing nothing, if any is invalid."""
    from pathlib import Path

    from workloads.output import OutputError, write
    from workloads.render import render as render_fleet
    from workloads.schemas import check

    loaded = _load(paths)
    result = render_fleet(loaded.fleet, schedule(loaded.fleet))
    problems = [str(p) for p in result.problems]
    for stack, target, obj in result.objects():
        for message in check(obj):
            problems.append(f"{stack}/{target}: {obj['kind']}/{obj['metadata']['name']}: {message}")
    if problems:
        for line in problems:
            click.echo(line, err=True)
        click.echo(f"{len(problems)} invalid object(s); nothing was written", err=True)
        raise SystemExit(EXIT_INVALID)
    try:
        count = write(result, Path(out))
    except (OutputError, OSError) as exc:
        click.echo(f"error: {exc}", err=True)
        raise SystemExit(EXIT_INVALID) from None
    click.echo(f"wrote {count} objects for {len(result.stacks)} stacks to {out} (every object checked against its schema)")
    for stack, address in sorted(result.addresses.items()):
        click.echo(f"  {stack}: {address}")


@cli.command()
@_paths_option
@click.option("--offline", is_flag=True, help="Run each stack's program under Pulumi's mock runtime: no CLI, no cloud.")
@click.option("-o", "--output", type=click.Choice(["table", "json"]), default="table", show_default=True)
def preview(paths: tuple[str, ...], offline: bool, output: str) -> None:
    """Show what each stack would register."""
    if not offline:
        click.echo("error: only `preview --offline` is available in this version (real previews need the "
                   "automation layer)", err=True)
        raise SystemExit(2)
    from automation.offline_preview import platform_stacks
    from automation.output import preview_table

    loaded = _load(paths)
    stacks = platform_stacks(loaded.fleet)
    if output == "json":
        click.echo(json.dumps({"stacks": [s.to_dict() for s in stacks]}, indent=2, default=str))
    else:
        preview_table(stacks, stream=sys.stdout)
    if any(s.error for s in stacks):
        raise SystemExit(EXIT_INVALID)


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
