"""The plan as data: the stable JSON interface of `modelplane plan -o json` (documented in the README)."""

from __future__ import annotations

from typing import Any

from fleet.plan import Plan


def plan_to_dict(plan: Plan, explain: bool = False) -> dict:
    replicas = []
    for r in plan.replicas:
        backends = {name: backend for name, backend, _ in r.backends}
        engines = []
        for e in r.placement.engines:
            engines.append({
                "name": e.engine,
                "backend": backends[e.engine],
                "members": [
                    {"role": m.role, "pool": e.pool, "nodes": m.pods,
                     "devices": {name: count for name, _, count in m.devices}}
                    for m in e.members
                ],
            })
        replicas.append({"deployment": r.key, "index": r.index, "name": r.name, "cluster": r.cluster,
                         "state": r.state, "engines": engines})
    out: dict[str, Any] = {
        "replicas": replicas,
        "unscheduled": [{"deployment": u.deployment, "missing": u.missing, "reasons": list(u.reasons)}
                        for u in plan.unscheduled],
        "dropped": [{"deployment": d.deployment, "name": d.name, "cluster": d.cluster, "index": d.index,
                     "reason": d.reason} for d in plan.dropped],
    }
    if explain:
        out["explain"] = {k: v for k, v in sorted(plan.explain.items())}
    return out
