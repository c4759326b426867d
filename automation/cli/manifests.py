"""Commands that read manifests and the API alone: `validate`, `explain`, `schema`."""

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
            "objects": [{"kind": o.kind, "name": o.name, **({"namespace": o.namespace} if o.namespaced else {})}
                        for o in found.fleet.objects],
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

