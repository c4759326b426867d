"""The plan as data: the stable JSON interface of `modelplane plan -o json` (documented in the README)."""

from __future__ import annotations

import json
from typing import Any

import orjson

from fleet.plan import Plan


def json_text(document: Any) -> str:
    """`json.dumps(document, indent=2)`, byte for byte, for documents like the plan's: strings, ints, bools, None,
    lists and dicts with string keys, and no floats (orjson writes 1e-05 as 0.00001). orjson writes them 30x faster;
    text it would write differently (characters beyond ASCII, DEL, ints beyond 64 bits) is left to json."""
    try:
        out = orjson.dumps(document, option=orjson.OPT_INDENT_2)
    except TypeError:  # orjson.JSONEncodeError: an int beyond 64 bits, a key that is not a string
        return json.dumps(document, indent=2)
    if not out.isascii() or b"\x7f" in out:  # json escapes both (ensure_ascii); orjson writes them as they are
        return json.dumps(document, indent=2)
    return out.decode()


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
        "unscheduled": [{"deployment": u.deployment, "missing": u.missing, "reasons": [str(r) for r in u.reasons]}
                        for u in plan.unscheduled],
        # the reason as plain text (YAML writes it too); a replica that moved within the plan (folded back to a
        # lower tier) also names its replacement
        "dropped": [{"deployment": d.deployment, "name": d.name, "cluster": d.cluster, "index": d.index,
                     "reason": str(d.reason), **({"replacement": d.replacement} if d.replacement else {})}
                    for d in plan.dropped],
    }
    if explain:
        out["explain"] = {k: v for k, v in sorted(plan.explain.items())}
    return out
