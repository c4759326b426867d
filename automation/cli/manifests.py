"""Commands that read manifests and the API alone: `validate`, `explain`, `schema`, `migrate`."""

from __future__ import annotations

import json
import sys
from collections import Counter

import click


from fleet.validate import load_fleet

from automation.cli.base import EXIT_INVALID, cli, load, paths_option


@cli.command()
@paths_option
@click.option("-o", "--output", type=click.Choice(["table", "json"]), default="table", show_default=True,
              help="table: a summary per kind, problems on stderr; json: objects and problems as one document.")
def validate(paths: tuple[str, ...], output: str) -> None:
    """Check manifests: exit 0 with a summary per kind, or 1 with one located line per problem.

    Also warns of what fails later unless a run is given it: a GKE cluster that names no project (`up` and
    `preview` then need the stack config gcp:project)."""
    from automation.planning.needs import run_time_warnings

    if output == "json":
        found = load_fleet(paths, stdin=sys.stdin if "-" in paths else None)
        later = run_time_warnings(found.fleet) if not found.errors else []
        click.echo(json.dumps({
            "valid": not found.errors and bool(found.fleet.objects),
            # shape: the reference's shape the object was read in (v0.3.1, v0.5, or both for kinds alike in both)
            "objects": [{"kind": o.kind, "name": o.name, **({"namespace": o.namespace} if o.namespaced else {}),
                         "shape": o.shape} for o in found.fleet.objects],
            "problems": [{"source": p.source, "line": p.line, "object": p.object, "path": p.path, "message": p.message,
                          "severity": "warning" if p.warning else "error"} for p in [*found.problems, *later]],
            "notes": list(found.notes)}, indent=2))
        if found.errors or not found.fleet.objects:
            raise SystemExit(EXIT_INVALID)
        return
    loaded = load(paths)
    later = run_time_warnings(loaded.fleet)
    for problem in later:
        click.echo(str(problem), err=True)
    counts = Counter(o.kind for o in loaded.fleet.objects)
    for kind, count in counts.items():
        names = [o.name if not o.namespaced else f"{o.namespace}/{o.name}" for o in loaded.fleet.of(kind)]
        shown = ", ".join(names[:6]) + (f", ... ({len(names) - 6} more)" if len(names) > 6 else "")
        click.echo(f"{kind + ':':<18} {count:>4} valid  {shown}")
    warnings = f", {len(loaded.warnings) + len(later)} warning(s)" if loaded.warnings or later else ""
    click.echo(f"{len(loaded.fleet.objects)} objects valid{warnings}")


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
@click.option("-f", "--filename", "paths", multiple=True, required=True, metavar="PATH",
              help="A manifest file, a folder (searched recursively for *.yaml and *.yml) or - for stdin. Repeatable.")
@click.option("--write", is_flag=True, help="Write the migrated files in place (default: only show the diff).")
@click.option("--gateway-cluster", metavar="NAME", default=None,
              help="The InferenceCluster a v0.3.1 gateway runs on in the v0.5 shape (spec.clusterName). Default: "
                   "the cluster the v0.3.1 front door runs on today, as `up` picks it among the given clusters.")
def migrate(paths: tuple[str, ...], write: bool, gateway_cluster: str | None) -> None:
    """Rewrite v0.3.1 InferenceGateways, ModelServices and ModelEndpoints in the v0.5 shape: print the diff, and
    with --write change the files (comments and layout outside the changed fields are kept)."""
    import difflib

    from fleet.loader import parse_sources, read_sources
    from fleet.migrate import migrate_text, needs_migration

    if write and "-" in paths:
        click.echo("error: --write cannot write standard input back: give files", err=True)
        raise SystemExit(2)
    sources = read_sources(paths, stdin=sys.stdin if "-" in paths else None)
    problems = [p for s in sources for p in s.problems]
    documents, _ = parse_sources(sources)
    gateways = [d for d in documents if needs_migration(d.data) and d.data.get("kind") == "InferenceGateway"]
    if gateways and gateway_cluster is None:
        gateway_cluster = _front_door_host(paths, sources)
        if gateway_cluster is not None:
            click.echo(f"note: spec.clusterName {gateway_cluster}: the cluster the v0.3.1 front door runs on today "
                       "(`up`'s choice among the given clusters; give --gateway-cluster NAME if `up --control-plane` "
                       "chose another)", err=True)
    migrated = changed = 0
    for source in sources:
        if source.raw is None:
            continue
        try:
            text = source.raw.decode("utf-8-sig")
        except UnicodeDecodeError:
            click.echo(f"{source.name}: not UTF-8 text: skipped", err=True)
            continue
        result = migrate_text(text, source.name, gateway_cluster)
        problems += result.problems
        for note in result.notes:
            click.echo(str(note), err=True)
        if not result.changed:
            continue
        changed += 1
        migrated += len({p.object for p in result.changes})
        relative = not source.name.startswith(("/", "<"))
        click.echo("".join(difflib.unified_diff(text.splitlines(True), result.after.splitlines(True),
                                                f"a/{source.name}" if relative else source.name,
                                                f"b/{source.name}" if relative else source.name)), nl=False)
        if write:
            with open(source.name, "w", encoding="utf-8") as out:
                out.write(result.after)
    for problem in problems:
        click.echo(str(problem), err=True)
    done = "written" if write else "not written: --write writes them"
    click.echo(f"{migrated} object(s) migrated in {changed} file(s) ({done}); "
               f"{len(problems)} left as they were" if problems else
               f"{migrated} object(s) migrated in {changed} file(s) ({done})", err=True)
    if problems:
        raise SystemExit(EXIT_INVALID)


def _front_door_host(paths: tuple[str, ...], sources) -> str | None:
    """Where the v0.3.1 front door runs with these manifests: `up`'s default control plane (components/args.py)."""
    from components.args import control_plane_cluster

    return control_plane_cluster(load_fleet(paths, sources=sources).fleet)
