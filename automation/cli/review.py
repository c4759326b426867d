"""`modelplane review`: the pull-request comment of a fleet change, written whatever the outcome.

What CI runs on a pull request (docs/ci/fleet-preview.yml): validate the head, plan it against the base as
`plan --against` does, preview the changed stacks offline as `preview --offline --changed-against` does, run the
deployability check, and write one comment (automation/planning/review.py) that says all of it. The comment is
written first; the exit code then says whether the change may be merged (1: invalid or refused).
"""

from __future__ import annotations

import sys
from pathlib import Path

import click

from fleet.validate import LoadMemo

from automation.cli.base import EXIT_INVALID, cli, gateway_host, comparing, paths_option, summarised_base


def _errors(paths: tuple[str, ...], memo: LoadMemo):
    from fleet.validate import load_fleet

    secrets_dir = click.get_current_context().meta.get("secrets_dir")
    loaded = load_fleet(paths, secrets_dir=Path(secrets_dir) if secrets_dir else None, memo=memo)
    if not loaded.errors and not loaded.fleet.objects:
        return loaded, [f"no modelplane.ai objects found in {', '.join(paths)}"]
    return loaded, [str(p) for p in loaded.errors]  # in file and line order already (fleet.validate)


@cli.command()
@paths_option
@click.option("--against", "against", multiple=True, required=True, metavar="PATH",
              help="The base branch's manifests. Repeatable.")
@click.option("--out", "out", type=click.Path(dir_okay=False, writable=True), default=None, metavar="FILE",
              help="Write the comment (Markdown) here; default: standard output.")
@click.option("--control-plane", "control_plane", default=None, metavar="CLUSTER",
              help="The InferenceCluster hosting the fleet gateway (default: as `up` chooses it).")
@click.option("--jobs", type=click.IntRange(1, 16), default=None, metavar="N", help="Stack programs previewed at once.")
def review(paths: tuple[str, ...], against: tuple[str, ...], out: str | None, control_plane: str | None,
           jobs: int | None) -> None:
    """Write the pull-request comment for a change of the manifests: validation errors, clusters destroyed,
    stack changes and replica moves, the deployability check. Exit 1 when the change is invalid or refused,
    after writing the comment."""
    from automation.planning.review import Review, comment

    memo = comparing(paths, against, "--against")
    result = Review()
    loaded, result.problems = _errors(paths, memo)
    _, result.base_problems = _errors(against, memo)
    if not result.problems and not result.base_problems:
        _compare(result, loaded.fleet, against, control_plane, jobs)
    text = comment(result)
    if out:
        Path(out).write_text(text)
        click.echo(f"wrote the comment to {out}" + (" (the change is invalid or refused)" if result.failed else ""),
                   err=True)
    else:
        sys.stdout.write(text)
    if result.failed:
        raise SystemExit(EXIT_INVALID)


def _compare(result, fleet, against: tuple[str, ...], control_plane: str | None, jobs: int | None) -> None:
    from automation.planning.base_cache import BaseCache
    from automation.planning.compare import compare
    from automation.planning.deployability import check_fleet
    from automation.planning.offline_preview import all_stacks, previewed
    from automation.planning.stacks import Change

    # planned from the manifests alone: a pull request has no record of what is applied
    base = summarised_base(against, [], BaseCache(), control_plane)
    result.comparison = compare(None, fleet, recorded=[], base=base, control_plane=control_plane)
    host = gateway_host(fleet, control_plane)
    changed = {s.name for s in result.comparison.stacks if s.change not in (Change.none, Change.delete)}
    stacks = []
    if changed:
        assert result.comparison.head is not None  # `compare` keeps the head it compared
        desired, only = previewed(fleet, result.comparison.head, changed, [], host)
        stacks = all_stacks(fleet, host, desired.specs, jobs=jobs, only=only) if only else []
    result.previewed = len(stacks)
    result.violations = [str(v) for v in check_fleet(fleet, stacks)] if stacks else []
    result.warnings += [f"stack `{s.name}` fails to preview: {s.error}" for s in stacks if s.error]
