"""What the team policies allow, as the preview shows it: each budget and its use, each deployment's residency.

One document (`policies_to_dict`: `plan -o json`'s `policies`, kept in a base's summary for the use before a
change) and one rows function (`policy_rows`) that the table under `plan`, the pull-request comment and the portal's
fleet page are made from. `policy_breaks` says what a plan refused or moved because of a policy, which a comment
says first. Pure: what a policy allows is fleet/team_policy.py's to decide; this only shows it.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from fleet.plan import Cause, Plan
from fleet.budgets import budget_rows
from fleet.team_policy import Policies, residency_misses

if TYPE_CHECKING:
    from fleet.validate import Fleet

POLICY_CAUSES = (Cause.OVER_BUDGET, Cause.RESIDENCY)


def policies_to_dict(fleet: Fleet, plan: Plan, before: dict[str, Any] | None = None) -> dict[str, Any] | None:
    """Per governed namespace, each budget (GPU budgets and maxDeployments) with its use by `plan`, and per
    deployment of a namespace with residency, the clusters its policy allows and refuses (and why). `before`: the
    same document of the base (`--against`, `review`): each budget then also says its count and use before. None
    when neither side has a policy (the output's keys stay as they were)."""
    from fleet.inventory import build_clusters

    policies = Policies.of(fleet)
    if not policies and not (before and before.get("budgets")):
        return None
    clusters = build_clusters(fleet)
    deployments = fleet.of("ModelDeployment")
    budgets: list[dict[str, Any]] = [
        {"namespace": r.namespace, "policy": r.policy, "field": r.field, "what": r.what, "budget": r.budget,
         "used": r.used} for r in budget_rows(policies, clusters, plan.replicas)]
    counted: dict[str, int] = {}
    for md in deployments:
        counted[md.namespace] = counted.get(md.namespace, 0) + 1
    for ns, policy in policies.governed({*counted, *policies.by_namespace}):
        if policy.spec.maxDeployments is not None:
            budgets.append({"namespace": ns, "policy": policy.name, "field": "spec.maxDeployments",
                            "what": "ModelDeployments", "budget": policy.spec.maxDeployments,
                            "used": counted.get(ns, 0)})
    if before is not None:
        was = {(b["namespace"], b["field"]): b for b in before.get("budgets") or []}
        for b in budgets:
            old = was.pop((b["namespace"], b["field"]), None)
            b["budgetBefore"] = old["budget"] if old else None
            b["usedBefore"] = old["used"] if old else None
        for (_, _), old in sorted(was.items()):  # a budget the change removes
            budgets.append({**{k: old[k] for k in ("namespace", "policy", "field", "what")}, "budget": None,
                            "used": None, "budgetBefore": old["budget"], "usedBefore": old["used"]})
    budgets.sort(key=lambda b: (b["namespace"], b["field"]))
    # one entry per namespace with residency: its deployments share the decision (per deployment, a fleet of
    # thousands of deployments and hundreds of clusters wrote every cluster's name thousands of times)
    names: dict[str, list[str]] = {}
    for md in deployments:
        names.setdefault(md.namespace, []).append(md.name)
    residency = []
    for ns, governing in policies.governed(names):
        if governing.spec.residency is None:
            continue
        allowed, refused = [], {}
        for c in clusters:
            misses = residency_misses(governing, c.labels)
            if misses:
                refused[c.name] = ", ".join(misses)
            else:
                allowed.append(c.name)
        residency.append({"namespace": ns, "policy": governing.name, "allowed": allowed, "refused": refused,
                          "deployments": sorted(names[ns])})
    return {"budgets": budgets, "residency": residency}


def residency_text(entry: dict[str, Any]) -> str:
    """`TeamPolicy ml-team allows clusters a, b; refuses c (no example.org/jurisdiction)`."""
    allowed = ", ".join(entry["allowed"]) or "none"
    text = f"TeamPolicy {entry['policy']} allows clusters {allowed}"
    if entry["refused"]:
        text += "; refuses " + ", ".join(f"{c} ({why})" for c, why in sorted(entry["refused"].items()))
    return text


def with_residency(plan: Plan, document: dict[str, Any] | None) -> Plan:
    """The plan with each governed deployment's residency as a line of its explanation (`plan --explain`)."""
    if not document or not plan.explain:
        return plan
    said = {f"{e['namespace']}/{name}": f"residency: {residency_text(e)}" for e in document["residency"]
            for name in e["deployments"]}
    # new lists: the scheduler's explanation may be shared with a memo
    plan.explain = {key: ([said[key]] if key in said else []) + lines for key, lines in plan.explain.items()}
    return plan


@dataclass(frozen=True)
class PolicyRow:
    """One budget as people read it: the table under `plan`, the pull-request comment, the portal page."""

    namespace: str
    policy: str
    field: str  # spec.gpus[0], spec.maxDeployments
    what: str
    budget: str  # "40", or "36 -> 40" when the change moves it, "-" when it has none
    used: str  # "16", or "8 -> 16"
    over: bool  # the use is above the budget (after the change)


def _moved(before: Any, after: Any, compared: bool) -> str:
    def shown(v: Any) -> str:
        return "-" if v is None else str(v)
    return f"{shown(before)} -> {shown(after)}" if compared and before != after else shown(after)


def policy_rows(document: dict[str, Any] | None) -> list[PolicyRow]:
    """`policies_to_dict`'s budgets as a row each."""
    rows = []
    for b in (document or {}).get("budgets") or []:
        compared = "usedBefore" in b
        rows.append(PolicyRow(b["namespace"], b["policy"], b["field"], b["what"],
                              _moved(b.get("budgetBefore"), b["budget"], compared),
                              _moved(b.get("usedBefore"), b["used"], compared),
                              b["budget"] is not None and b["used"] is not None and b["used"] > b["budget"]))
    return rows


def policy_breaks(plan: Plan, moved_to: dict[str, str] | None = None) -> list[str]:
    """What the plan did because of a team policy: replicas not placed because of a budget or residency, and
    replicas dropped or moved for them (markdown lines; [] when none). `moved_to`: where a comparison found each
    dropped replica placed again (its name -> cluster)."""
    moved_to = moved_to or {}
    out = []
    for u in plan.unscheduled:
        why = [r for r in u.reasons if getattr(r, "cause", None) in POLICY_CAUSES]
        if why:
            out.append(f"`{u.deployment}`: {u.missing} replica(s) unscheduled: " + "; ".join(why[:3])
                       + (f" (and {len(why) - 3} more)" if len(why) > 3 else ""))
    for d in plan.dropped:
        if d.reason.cause in POLICY_CAUSES:
            to = moved_to.get(d.name)
            what = f"moved `{d.cluster}` -> `{to}`" if to else f"dropped from `{d.cluster}`"
            out.append(f"`{d.deployment}` `{d.name}` {what}: {d.reason}")
    return out


def breaks_markdown(plan: Plan, moved_to: dict[str, str] | None = None) -> list[str]:
    """The lines a pull-request comment leads with when the change breaks a team policy ([] when it does not)."""
    breaks = policy_breaks(plan, moved_to)
    if not breaks:
        return []
    return ["**Error: the change breaks a team policy** (a TeamPolicy's GPU budget or residency): these replicas "
            "are unscheduled, dropped or moved because of it.", "", *[f"- {b}" for b in breaks], ""]


def policy_markdown(document: dict[str, Any] | None) -> str:
    """Each budget before and after a change, each deployment's residency, folded (a pull-request comment's)."""
    rows = policy_rows(document)
    residency = (document or {}).get("residency") or []
    if not rows and not residency:
        return ""
    lines = ["", "<details><summary>Team policies: budgets and residency</summary>", ""]
    if rows:
        lines += ["| namespace | policy | budget | of | count | used |", "|---|---|---|---|---|---|"]
        lines += [f"| {r.namespace} | {r.policy} | `{r.field}` | {r.what} | {r.budget} | "
                  f"{r.used}{' **over**' if r.over else ''} |" for r in rows]
        lines.append("")
    lines += [f"- `{entry['namespace']}` residency ({len(entry['deployments'])} deployment(s)): {residency_text(entry)}"
              for entry in residency]
    return "\n".join(lines + ["", "</details>", ""])
