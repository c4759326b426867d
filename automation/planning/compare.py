"""Compare two desired states of the fleet (a pull request's manifests against its base), with no backend.

The base and the head are planned side by side (or the base's summary read back, automation/planning/base_cache.py),
both with the one record of what is applied: the head's placements are then those `plan` and every preview of
the head show (one record, one answer; the scheduler's stability, docs/scheduling.md, keeps a change from moving
anything else unless capacity forces it). Only the model, team, service and endpoints stacks whose inputs differ
between the two are composed, and the platform and gateway stacks only when what they are computed from differs;
then every stack's fingerprint is compared, and replicas are matched by name: added, removed, or moved (a replica
of a deployment both sides have, on another cluster in the head).
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field, replace
from typing import TYPE_CHECKING, Callable, Mapping, NamedTuple

from automation.planning.base_cache import BaseCache, BaseSummary, base_key
from automation.planning.base_plan import BasePlan, BaseSide
from automation.planning.secret_sources import changed_sources
from automation.planning.payloads import StackSpec
from automation.planning.plan_cache import SAME, Known, KnownPlatform, PlanCache
from automation.planning.stacks import Change, DesiredState, Host, StackChange, changes, desired_state, platform_inputs
from components.args import preferred_control_plane
from fleet.plan import Cause, Plan, Reason, cluster_gone, dynamo_clusters, scaled_down
from fleet.scheduler import PlanMemo, schedule
from workloads.gateways import Gateways
from workloads.render import stack_inputs

if TYPE_CHECKING:
    from automation.planning.base_beside import BaseBeside
    from fleet.validate import Fleet


@dataclass
class Comparison:
    plan: Plan
    stacks: list[StackChange]
    added: list[dict] = field(default_factory=list)
    removed: list[dict] = field(default_factory=list)
    moved: list[dict] = field(default_factory=list)
    head: DesiredState | None = None  # as compared: a stack whose inputs are the base's is not composed (`reused`)
    # each created or updated stack's secrets, with where each comes from (secret_sources.changed_sources), no value
    sources: dict[str, list[str]] = field(default_factory=dict)
    base_policies: dict | None = None  # the base's team policies' budgets and use (fleet/policy_preview.py)

    @property
    def changed(self) -> list[StackChange]:
        return [s for s in self.stacks if s.change != Change.none]


def _brief(r) -> dict:
    return {"deployment": r.key, "name": r.name, "cluster": r.cluster}


@dataclass
class Base:
    """A comparison's base as the caller has it: a summary kept from before, or the fleet (loaded from its files),
    or both; `load` loads its files when a kept summary lacks a fingerprint the head needs. `cache` and
    `sources_key` say where a summary computed here is kept."""

    summary: BaseSummary | None = None
    fleet: Fleet | None = None
    load: Callable[[], Fleet] | None = None
    cache: BaseCache | None = None
    sources_key: str | None = None
    control_plane: str | None = None  # the control plane asked for: the base's if it has it (`preferred_control_plane`)
    gateways: Gateways | None = None  # the record's gateway addresses, both sides are composed with
    beside: BaseBeside | None = None  # the base loading (and then planned) in a forked process, in place of `fleet`


class Sides(NamedTuple):
    summary: BaseSummary
    head: DesiredState
    changes: list[StackChange]  # every head stack's change against the summary (`changed_stacks`)


def side_by_side(base: Base, head_fleet: Fleet, recorded: list, explain: bool = False,
                 memo: PlanMemo | None = None, control_plane: str | Host | None = None) -> Sides:
    """The base's summary, the head's desired state and its stacks' changes, composing (on both sides) only the
    stacks whose inputs differ: a model, team, service or endpoints stack whose inputs are the same on both sides
    has the same objects, and the platform and gateway stacks the same arguments when the fleets'
    `platform_inputs` are the same, so they are neither composed nor fingerprinted, on either side (`SAME`). A
    kept summary is used when it knows every fingerprint the head needs; otherwise the base is planned with the
    head (in this process, or in a forked one already loading it: `base.beside`), and the summary kept (partial:
    what a later head needs and it lacks is computed then). `control_plane`: the head's (the base has its own);
    both sides are composed with the record's placements and gateway addresses (`recorded`, `base.gateways`)."""
    cache = PlanCache(memo or PlanMemo())  # the base's plan and the head's share its memo
    head_host = Host.of(head_fleet, control_plane)  # decided once for the head
    keys: dict[str, str] = {}

    def key() -> str:  # the base's cache key, hashed once
        if "key" not in keys:
            assert base.fleet is not None
            keys["key"] = base_key(base.fleet, recorded, base.control_plane, base.gateways)
        return keys["key"]

    beside = base.beside  # a base with a kept summary is never forked (cli/base.py `summarised_base`)
    try:
        if beside is None and base.summary is None and base.cache is not None and base.fleet is not None:
            base.summary = base.cache.get(key())
        tried = None  # the head against a kept summary that lacked a fingerprint: its plan stands
        if base.summary is not None:
            # the head takes the summary's platform and gateway stacks if what they are computed from is the same
            platform = KnownPlatform.fingerprinted(base.summary.platform, base.summary.fingerprints,
                                                   head_host.cluster) if base.summary.platform else None
            tried = desired_state(head_fleet, recorded, head_host,
                                  replace(cache, known=base.summary.known, platform=platform),
                                  gateways=base.gateways, explain=explain)
            if (found := _known_changes(tried.specs, tried.digests(), base.summary)) is not None:
                if base.cache is not None and base.sources_key and base.fleet is not None:
                    base.cache.remember_sources(base.sources_key, key())
                return Sides(base.summary, tried, found)
        base_side: BaseSide
        if beside is not None:
            base_side = beside
        else:
            base.fleet = base.fleet or (base.load() if base.load is not None else None)
            if base.fleet is None:
                raise ValueError("compare needs the base's fleet or a summary that knows every fingerprint the head "
                                 "needs")
            base_side = BasePlan(base.fleet, recorded, cache.memo,
                                 Host(preferred_control_plane(base.fleet, base.control_plane)), base.gateways)
        head_plan = tried.plan if tried is not None else \
            schedule(head_fleet, recorded, explain=explain, memo=cache.memo)
        head_inputs = tried.inputs if tried is not None and tried.inputs is not None else \
            stack_inputs(head_fleet, head_plan, head_host.cluster, base.gateways)
        base_digests, platform_digest = base_side.inputs()
        same = {name for name, digest in head_inputs.digests.items() if base_digests.get(name) == digest}
        unchanged = platform_digest == platform_inputs(head_fleet, head_host.cluster,
                                                       dynamo=dynamo_clusters(head_plan, recorded))
        base_side.summarise(same, unchanged)

        def head_state(known: dict[str, Known], platform: KnownPlatform | None) -> DesiredState:
            return desired_state(head_fleet, recorded, head_host,
                                 replace(cache.for_fleet(head_plan, head_inputs), known=known, platform=platform),
                                 gateways=base.gateways, explain=explain)

        if base.summary is None:
            # what the head has the same is `SAME` in the base's summary (its platform too, if unchanged): the head
            # is composed without it, while a forked base composes its own
            head = head_state({name: Known(head_inputs.digests[name], SAME + head_inputs.digests[name]) for name in same},
                              KnownPlatform.unchanged(platform_digest, head_fleet, head_host.cluster) if unchanged else None)
            summary = base_side.summary()
        else:
            # what the kept summary knew and this one did not: known from now on; the head takes the summary's
            # fingerprint of each stack with the same inputs, whether computed or `SAME`, and so its platform and
            # gateway stacks when what they are computed from is the same (else its own, as tried)
            summary = base_side.summary().completed_by(base.summary)
            same_platform = KnownPlatform.fingerprinted(platform_digest, summary.fingerprints, head_host.cluster) \
                if unchanged else None
            head = head_state({name: summary.known[name] for name in same},
                              same_platform or (tried.platform if tried is not None else None))
    finally:
        if beside is not None:
            beside.close()
    kept = summary
    if beside is not None:
        keys["key"], kept = beside.key, beside.kept or summary
    base.summary = summary
    if base.cache is not None:
        base.cache.put(key(), kept)
        if base.sources_key:
            base.cache.remember_sources(base.sources_key, key())
    return Sides(summary, head, changed_stacks(head.specs, head.digests(), summary))


def _known_changes(specs: Mapping[str, StackSpec], inputs: Mapping[str, str],
                   base: BaseSummary) -> list[StackChange] | None:
    """`changed_stacks`, or None when a stack's inputs differ from the base's and the base's fingerprint of it was
    never computed (the base must then be planned with this head: `side_by_side`)."""
    fingerprints = dict(base.fingerprints)
    for name, recorded in base.fingerprints.items():
        if not recorded.startswith(SAME) or name not in specs:
            continue
        if inputs.get(name) != recorded.removeprefix(SAME):
            return None
        fingerprints[name] = specs[name].fingerprint  # the same inputs: the same objects
    return changes(dict(specs), fingerprints)


def changed_stacks(specs: Mapping[str, StackSpec], inputs: Mapping[str, str],
                   base: BaseSummary) -> list[StackChange]:
    """Every head stack's change against a summary `side_by_side` gave for this head (`inputs`: the digests of the
    head's stacks' inputs, `DesiredState.digests`)."""
    found = _known_changes(specs, inputs, base)
    if found is None:  # side_by_side's summary knows every fingerprint its head needs
        raise RuntimeError("the base's summary lacks a fingerprint the head needs")
    return found


def compare(base_fleet: Fleet | None, head_fleet: Fleet, explain: bool = False, recorded: list | None = None,
            cache: BaseCache | None = None, incremental: bool = True, base: Base | None = None,
            memo: PlanMemo | None = None, control_plane: str | None = None) -> Comparison:
    """`recorded`: placements `up` recorded, the memory both the base and the head are planned with (as `up` would).

    Only the stacks whose inputs differ between the base and the head are composed and fingerprinted
    (`side_by_side`; `incremental` False composes every stack on both sides, the reference the incremental path is
    tested against). `cache` keeps base summaries between runs. `base`: the base as the caller has it (then
    `base_fleet` and `cache` are not read). `memo`: shared by the base's plan and the head's. `control_plane`: the
    head's, and the base's when it has that cluster."""
    memo = memo or PlanMemo()
    recorded = recorded or []
    if incremental:
        base = base or Base(fleet=base_fleet, cache=cache, control_plane=control_plane)
        summary, head, stack_changes = side_by_side(base, head_fleet, recorded, explain, memo, control_plane)
    else:
        if base_fleet is None:
            raise ValueError("a full comparison needs the base's fleet")
        summary = BaseSummary.of(desired_state(base_fleet, recorded,
                                               Host(preferred_control_plane(base_fleet, control_plane)),
                                               PlanCache(memo, known={})), base_fleet)
        head = desired_state(head_fleet, recorded, control_plane, PlanCache(memo), explain=explain)
        stack_changes = changes(head.specs, summary.fingerprints)
    head_plan = head.plan
    result = Comparison(head_plan, stack_changes, head=head,
                        sources=changed_sources(head_fleet, head.specs, stack_changes, summary.manifests),
                        base_policies=summary.policies)
    before = {r.name: r for r in summary.replicas}
    after = {r.name: r for r in head_plan.replicas}
    reasons = {d.name: d.reason for d in head_plan.dropped}
    replaced_by = {d.name: d.replacement for d in head_plan.dropped if d.replacement}  # folded back: named
    wanted = {f"{md.namespace}/{md.name}": md.spec.replicas for md in head_fleet.of("ModelDeployment")}
    placed_before = Counter(r.key for r in summary.replicas)
    in_record = {r.name for r in recorded}
    clusters = {c.name for c in head_fleet.of("InferenceCluster")}
    new_by_deployment: dict[str, list] = {}
    for name, r in sorted(after.items()):
        if name not in before:
            new_by_deployment.setdefault(r.key, []).append(r)
    for name, b in sorted(before.items()):
        if name in after:
            continue
        reason: Reason
        if b.key not in wanted:
            reason = Reason(Cause.DEPLOYMENT_REMOVED, "its deployment was removed")
        elif name in reasons:
            reason = reasons[name]
        elif b.cluster not in clusters:
            reason = cluster_gone(b.cluster)
        elif wanted[b.key] < placed_before[b.key]:
            reason = scaled_down(wanted[b.key])
        else:  # not in the record: planned afresh on both sides, the head placed it elsewhere
            reason = Reason(Cause.PLANNED_AFRESH,
                            f"planned afresh, with no record of what is applied to keep it on {b.cluster}")
        removed = reason.cause is Cause.DEPLOYMENT_REMOVED
        pending = new_by_deployment.get(b.key) or []
        named = next((r for r in pending if r.name == replaced_by.get(name)), None)
        if named is not None:
            pending.remove(named)
        replacement = None if removed else named or (pending or [None]).pop(0)
        if replacement is not None and reason.cause is not Cause.SCALED_DOWN:
            # `certain`: the plan remembered the replica (the record, or an observed ModelReplica), so `up` planning
            # with the same record moves it; else both sides placed it afresh, and `up` may keep it where it is
            result.moved.append({**_brief(b), "to": replacement.cluster, "newName": replacement.name, "reason": str(reason),
                                 "certain": name in in_record or name in reasons})
        else:
            result.removed.append({**_brief(b), "reason": str(reason)})
    moved_to = {m["newName"] for m in result.moved}
    result.added = [_brief(r) for name, r in sorted(after.items()) if name not in before and name not in moved_to]
    return result


def to_dict(result: Comparison) -> dict:
    return {"stacks": [s.to_dict() for s in result.stacks],
            "replicas": {"added": result.added, "removed": result.removed, "moved": result.moved}}


UNREAD_RECORD = ("the record of what is applied could not be read, so this was planned with {source}. Moves and "
                 "stack changes below may be wrong.")


def record_warning(guessed: bool, source: str) -> str | None:
    """What a comment says first when the record it was planned with is a guess (`Applied.guessed`)."""
    return UNREAD_RECORD.format(source=source) if guessed else None


def markdown(result: Comparison, guessed: bool = False) -> str:
    """A summary fit to post as a pull-request comment. A move is listed as certain only when the plan remembered
    the replica (`certain`) and the record was read (`guessed` False); the others as possible."""
    from fleet.policy_preview import breaks_markdown

    lines = ["### modelplane: fleet change preview", ""]
    # what a team policy refused or moved leads: the rest is what the change does besides
    lines += breaks_markdown(result.plan, {m["name"]: m["to"] for m in result.moved})
    counts = {kind: sum(1 for s in result.stacks if s.change == kind) for kind in (Change.create, Change.update, Change.delete)}
    if not result.changed:
        lines.append("No stack changes.")
    else:
        lines.append(f"**{len(result.changed)} stack(s) change**: {counts[Change.create]} to create, "
                     f"{counts[Change.update]} to update, {counts[Change.delete]} to delete.")
        lines += ["", "| stack | change |", "|---|---|"]
        lines += [f"| `{s.name}` | {s.change} |" for s in result.changed]
    if result.sources:  # a value the fleet's files give instead of the runner's own is seen in review
        lines += ["", "**Where the changed stacks' secrets come from** (never their values)", ""]
        lines += [f"- `{name}`: " + "; ".join(f"`{line}`" for line in found)
                  for name, found in sorted(result.sources.items())]
    certain = [m for m in result.moved if m["certain"] and not guessed]
    possible = [m for m in result.moved if m not in certain]

    def moved(r: dict) -> str:
        return f"`{r['deployment']}` `{r['name']}`: `{r['cluster']}` -> `{r['to']}` ({r['reason']})"

    for title, rows, fmt in (
        ("**Replicas added**", result.added, lambda r: f"`{r['deployment']}` `{r['name']}` on `{r['cluster']}`"),
        ("**Replicas moved**", certain, moved),
        ("**Replicas that may move** (not checked against the record of what is applied: `up` keeps an applied "
         "replica where it is unless something forces it to move)", possible, moved),
        ("**Replicas removed**", result.removed,
         lambda r: f"`{r['deployment']}` `{r['name']}` on `{r['cluster']}` ({r['reason']})"),
    ):
        if rows:
            lines += ["", title, ""] + [f"- {fmt(r)}" for r in rows]
    if result.plan.unscheduled:
        lines += ["", "**Unscheduled**", ""]
        for u in result.plan.unscheduled:
            lines.append(f"- `{u.deployment}`: {u.missing} replica(s) not placed")
            lines += [f"  - {reason}" for reason in u.reasons[:8]]
            if len(u.reasons) > 8:
                lines.append(f"  - ... and {len(u.reasons) - 8} more")
    lines += ["", "_Planned offline from the manifests; nothing was applied._"]
    return "\n".join(lines) + "\n"
