"""`modelplane review`: the pull-request comment of a fleet change, written whatever the outcome.

What CI runs on a pull request (docs/ci/fleet-preview.yml): validate the head, plan it against the base with the
record of what is applied as `plan --against` does, preview the changed stacks offline as `preview --offline
--changed-against` does, run the deployability check, and write one comment (automation/checks/review.py) that
says all of it, and first what it could not know. The comment is written first; the exit code then says whether
the change may be merged (1: invalid or refused).
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import TYPE_CHECKING

import click

from fleet.validate import LoadMemo

from automation.cli.base import (EXIT_INVALID, capacity_options, cli, comparing, gateway_host, paths_option,
                                 record_for_plan, record_options, summarised_base, what_the_record_lacks,
                                 with_capacity)

if TYPE_CHECKING:
    from automation.record.applied import Applied


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
@click.option("--no-cache", "no_cache", is_flag=True,
              help="Plan the base afresh, neither reading nor writing its cached summary ($MODELPLANE_CACHE_DIR, "
                   "else ~/.cache/modelplane).")
@capacity_options
@record_options
def review(paths: tuple[str, ...], against: tuple[str, ...], out: str | None, control_plane: str | None,
           jobs: int | None, no_cache: bool, state: str, fresh: bool, backend: str | None, fleet_name: str | None,
           executor: str, operator_settings: str, capacity: str, kubeconfig: tuple[str, ...]) -> None:
    """Write the pull-request comment for a change of the manifests: validation errors, the deployability check,
    clusters destroyed, stack changes and replica moves. Both sides are planned with the record of what is applied,
    as `plan --against` plans them (--backend; the comment says so first when it cannot be read). Exit 1 when the
    change is invalid or refused, after writing the comment."""
    from automation.checks.review import Review, comment

    memo = comparing(paths, against, "--against")
    result = Review()
    loaded, result.problems = _errors(paths, memo)
    _, result.base_problems = _errors(against, memo)
    if not result.problems and not result.base_problems:
        with_capacity(loaded.fleet, capacity, kubeconfig, state)
        applied = record_for_plan(state, backend, fleet_name, executor, operator_settings, fresh)
        result.warnings += what_the_record_lacks(applied, fresh, backend, executor)
        result.guessed = applied.guessed
        result.recorded = None if applied.guessed else len(applied.placements())
        _compare(result, loaded.fleet, against, control_plane, jobs, applied, no_cache)
    text = comment(result)
    if out:
        Path(out).write_text(text)
        click.echo(f"wrote the comment to {out}" + (" (the change is invalid or refused)" if result.failed else ""),
                   err=True)
    else:
        sys.stdout.write(text)
    if result.failed:
        raise SystemExit(EXIT_INVALID)


def _compare(result, fleet, against: tuple[str, ...], control_plane: str | None, jobs: int | None, applied: Applied,
             no_cache: bool) -> None:
    from automation.planning.base_cache import BaseCache
    from automation.planning.compare import compare
    from automation.checks.deployability import by_cause, check_fleet
    from automation.checks.offline_preview import all_stacks, previewed
    from automation.planning.stacks import Change, Host

    # both sides planned with the record, as `plan --against` plans them: a replica `up` keeps stays in both
    recorded, gateways = applied.placements(), applied.gateways()
    base = summarised_base(against, recorded, None if no_cache else BaseCache(), control_plane, gateways,
                           live=fleet.live)
    result.comparison = compare(None, fleet, recorded=recorded, base=base, control_plane=control_plane)
    from fleet.policy_preview import policies_to_dict

    result.policies = policies_to_dict(fleet, result.comparison.plan,
                                       result.comparison.base_policies or {"budgets": [], "residency": []})
    host = gateway_host(fleet, control_plane)
    changed = {s.name for s in result.comparison.stacks if s.change not in (Change.none, Change.delete)}
    stacks = []
    if changed:
        assert result.comparison.head is not None  # `compare` keeps the head it compared
        desired, only = previewed(fleet, result.comparison.head, changed, recorded, Host(host), gateways)
        stacks = all_stacks(fleet, host, desired.specs, jobs=jobs, only=only) if only else []
    result.previewed = len(stacks)
    if stacks:  # each failed program first, with what follows from it
        result.findings = by_cause(check_fleet(fleet, stacks, desired.specs), stacks)
