"""Compare two desired states of the fleet (a pull request's manifests against its base), with no backend.

The base is planned first (or its summary read back, automation/planning/base_cache.py), then the head, both
with the one record of what is applied: the head's placements are then those `plan` and every preview of the
head show (one record, one answer; the scheduler's stability, docs/scheduling.md, keeps a change from moving
anything else unless capacity forces it). Then every stack's fingerprint is compared, and replicas are matched
by name: added, removed, or moved (a replica of a deployment both sides have, on another cluster in the head).
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from automation.planning.base_cache import BaseCache, BaseSummary, base_key
from automation.planning.stacks import StackChange, changes, desired_state
from fleet.plan import Plan
from fleet.scheduler import PlanMemo

if TYPE_CHECKING:
    from fleet.validate import Fleet


@dataclass
class Comparison:
    plan: Plan
    stacks: list[StackChange]
    added: list[dict] = field(default_factory=list)
    removed: list[dict] = field(default_factory=list)
    moved: list[dict] = field(default_factory=list)

    @property
    def changed(self) -> list[StackChange]:
        return [s for s in self.stacks if s.change != "none"]


def _brief(r) -> dict:
    return {"deployment": r.key, "name": r.name, "cluster": r.cluster}


def base_summary(base_fleet: Fleet, recorded: list, cache: BaseCache | None,
                 control_plane: str | None = None, sources_key: str | None = None,
                 memo: PlanMemo | None = None) -> BaseSummary:
    """The base planned and fingerprinted, read from `cache` when the same base was summarised before.
    `sources_key`: the base's files' key (base_cache.source_key), remembered to lead to this summary. `memo`:
    shared with the head's plan, which then reuses what the base's computed (deployments, charges, placements)."""
    key = base_key(base_fleet, recorded, control_plane) if cache is not None else ""
    summary = cache.get(key) if cache is not None else None
    if summary is None:
        summary = BaseSummary.of(desired_state(base_fleet, recorded, control_plane, known={}, memo=memo))
        if cache is not None:
            cache.put(key, summary)
    if cache is not None and sources_key:
        cache.remember_sources(sources_key, key)
    return summary


def compare(base_fleet: Fleet | None, head_fleet: Fleet, explain: bool = False, recorded: list | None = None,
            cache: BaseCache | None = None, incremental: bool = True, base: BaseSummary | None = None,
            memo: PlanMemo | None = None) -> Comparison:
    """`recorded`: placements `up` recorded, the memory both the base and the head are planned with (as `up` would).

    The head is planned in full; of its model stacks, only those whose inputs differ from the base's are
    composed and fingerprinted (`incremental`; False composes every stack on both sides, the reference the
    incremental path is tested against). `cache` keeps base summaries between runs. `base`: the base's summary
    when the caller has it (then `base_fleet` is not read). `memo`: the one the base was planned with, if any."""
    if base is None:
        if base_fleet is None:
            raise ValueError("compare needs the base's fleet or its summary")
        memo = memo or PlanMemo()
        base = (base_summary(base_fleet, recorded or [], cache, memo=memo) if incremental
                else BaseSummary.of(desired_state(base_fleet, recorded or [], memo=memo)))
    head = desired_state(head_fleet, recorded or [], explain=explain, known=base.known if incremental else None,
                         memo=memo)
    head_plan = head.plan
    stack_changes = changes(head.specs, base.fingerprints)
    result = Comparison(head_plan, stack_changes)
    before = {r.name: r for r in base.replicas}
    after = {r.name: r for r in head_plan.replicas}
    reasons = {d.name: d.reason for d in head_plan.dropped}
    wanted = {f"{md.namespace}/{md.name}": md.spec.replicas for md in head_fleet.of("ModelDeployment")}
    placed_before = Counter(r.key for r in base.replicas)
    clusters = {c.name for c in head_fleet.of("InferenceCluster")}
    new_by_deployment: dict[str, list] = {}
    for name, r in sorted(after.items()):
        if name not in before:
            new_by_deployment.setdefault(r.key, []).append(r)
    for name, b in sorted(before.items()):
        if name in after:
            continue
        if b.key not in wanted:
            reason = "its deployment was removed"
        elif name in reasons:
            reason = reasons[name]
        elif b.cluster not in clusters:
            reason = f"cluster {b.cluster} no longer exists"
        elif wanted[b.key] < placed_before[b.key]:
            reason = f"scaled down to {wanted[b.key]} replica(s)"
        else:  # not in the record: planned afresh on both sides, the head placed it elsewhere
            reason = f"planned afresh, with no record of what is applied to keep it on {b.cluster}"
        replacement = (new_by_deployment.get(b.key) or [None]).pop(0) if reason != "its deployment was removed" else None
        if replacement is not None and not reason.startswith("scaled down"):
            result.moved.append({**_brief(b), "to": replacement.cluster, "newName": replacement.name, "reason": reason})
        else:
            result.removed.append({**_brief(b), "reason": reason})
    moved_to = {m["newName"] for m in result.moved}
    result.added = [_brief(r) for name, r in sorted(after.items()) if name not in before and name not in moved_to]
    return result


def to_dict(result: Comparison) -> dict:
    return {"stacks": [s.to_dict() for s in result.stacks],
            "replicas": {"added": result.added, "removed": result.removed, "moved": result.moved}}


def markdown(result: Comparison) -> str:
    """A summary fit to post as a pull-request comment."""
    lines = ["### modelplane: fleet change preview", ""]
    counts = {kind: sum(1 for s in result.stacks if s.change == kind) for kind in ("create", "update", "delete")}
    if not result.changed:
        lines.append("No stack changes.")
    else:
        lines.append(f"**{len(result.changed)} stack(s) change**: {counts['create']} to create, "
                     f"{counts['update']} to update, {counts['delete']} to delete.")
        lines += ["", "| stack | change |", "|---|---|"]
        lines += [f"| `{s.name}` | {s.change} |" for s in result.changed]
    for title, rows, fmt in (
        ("Replicas added", result.added, lambda r: f"`{r['deployment']}` `{r['name']}` on `{r['cluster']}`"),
        ("Replicas moved", result.moved, lambda r: f"`{r['deployment']}` `{r['name']}`: `{r['cluster']}` -> `{r['to']}` ({r['reason']})"),
        ("Replicas removed", result.removed, lambda r: f"`{r['deployment']}` `{r['name']}` on `{r['cluster']}` ({r['reason']})"),
    ):
        if rows:
            lines += ["", f"**{title}**", ""] + [f"- {fmt(r)}" for r in rows]
    if result.plan.unscheduled:
        lines += ["", "**Unscheduled**", ""]
        for u in result.plan.unscheduled:
            lines.append(f"- `{u.deployment}`: {u.missing} replica(s) not placed")
            lines += [f"  - {reason}" for reason in u.reasons[:8]]
            if len(u.reasons) > 8:
                lines.append(f"  - ... and {len(u.reasons) - 8} more")
    lines += ["", "_Planned offline from the manifests; nothing was applied._"]
    return "\n".join(lines) + "\n"
