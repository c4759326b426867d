"""Human-readable output (rich tables); machine output stays plain JSON/YAML."""

from __future__ import annotations

import io
import json
from typing import Callable

from rich import box
from rich.console import Console
from rich.table import Table

from fleet.plan import Plan


def _console(stream) -> Console:
    # Tables are as wide as their content, on a terminal too (as kubectl prints them): identifiers are copied from
    # here, so none is ever folded mid-word or cut, and a header never wraps; a narrow terminal wraps whole lines.
    tty = hasattr(stream, "isatty") and stream.isatty()
    return Console(file=stream, width=100_000, no_color=not tty, highlight=False, soft_wrap=False)


def plan_table(plan: Plan, explain: bool = False, stream=None, wide: bool = False) -> str:
    """`wide` adds why each engine got its backend and each replica's index (`plan -o wide`)."""
    buffer = io.StringIO()
    console = _console(stream if stream is not None else buffer)
    table = Table(box=box.SIMPLE_HEAD, show_edge=False, pad_edge=False)
    columns = ["DEPLOYMENT", "REPLICA", "CLUSTER", "ENGINE", "BACKEND", "ROLE", "POOL", "PODS", "DEVICES/POD", "STATE"]
    for column in columns + (["INDEX", "WHY THIS BACKEND"] if wide else []):
        table.add_column(column, overflow="fold")
    for r in plan.replicas:
        backends = {name: backend for name, backend, _ in r.backends}
        reasons = {name: reason for name, _, reason in r.backends}
        for e in r.placement.engines:
            for m in e.members:
                devices = ",".join(f"{n}={c}" for n, _, c in m.devices) or "-"
                row = [r.key, r.name, r.cluster, e.engine, backends[e.engine], m.role, e.pool, str(m.pods), devices, r.state]
                table.add_row(*row, *([str(r.index), reasons[e.engine]] if wide else []))
    if plan.replicas:
        console.print(table)
    else:
        console.print("no replica placed")
    placed = len(plan.replicas)
    missing = sum(u.missing for u in plan.unscheduled)
    console.print(f"\n{placed} replica(s) placed, {missing} unscheduled, {len(plan.dropped)} dropped or moved")
    for u in plan.unscheduled:
        console.print(f"\nunscheduled: {u.deployment}: {u.missing} replica(s)")
        for reason in u.reasons:
            console.print(f"  - {reason}", markup=False)
    if plan.dropped:
        console.print("\ndropped or moved:")
        for d in plan.dropped:
            console.print(f"  - {d.deployment} {d.name} ({d.cluster}#{d.index}): {d.reason}", markup=False)
    if explain:
        for key in sorted(plan.explain):
            console.print(f"\nexplain {key}:")
            for line in plan.explain[key]:
                console.print(f"  - {line}", markup=False)
    return buffer.getvalue()


def preview_table(stacks, stream=None) -> str:
    buffer = io.StringIO()
    console = _console(stream if stream is not None else buffer)
    for stack in stacks:
        console.print(f"stack {stack.name}: {len(stack.resources)} resource(s)", markup=False)
        if stack.error:
            console.print(f"  error: {stack.error}", markup=False)
            continue
        table = Table(box=box.SIMPLE_HEAD, show_edge=False, pad_edge=False)
        for column in ("TYPE", "NAME", "PARENT"):
            table.add_column(column, overflow="fold")
        for r in stack.resources:
            table.add_row(r.type, r.name, r.parent or "-")
        console.print(table)
    console.print("offline preview: resources the programs would register; nothing was deployed", markup=False)
    return buffer.getvalue()


def stream_json(document: dict, write: Callable[[str], object]) -> None:
    """Write `json.dumps(document, indent=2, sort_keys=True, default=str)`, byte for byte, one top-level value
    and one item of a top-level list (or iterable) at a time: a fleet's offline preview is hundreds of megabytes
    of JSON, and building it as one string tripled the command's peak memory."""
    def dumps(value, depth: int) -> str:  # JSON strings hold no raw newline: every newline is indentation
        return json.dumps(value, indent=2, sort_keys=True, default=str).replace("\n", "\n" + "  " * depth)

    if not document:
        write("{}")
        return
    write("{")
    for i, key in enumerate(sorted(document)):
        write(("," if i else "") + "\n  " + json.dumps(key) + ": ")
        value = document[key]
        if isinstance(value, (dict, str, int, float, bool)) or value is None:
            write(dumps(value, 1))
            continue
        wrote = False
        for item in value:
            write(("," if wrote else "[") + "\n    " + dumps(item, 2))
            wrote = True
        write("\n  ]" if wrote else "[]")
    write("\n}")


def capacity_table(capacity: list[dict], stream=None) -> str:
    """Per cluster and pool, the devices free for new replicas and where that came from (`plan --capacity`)."""
    buffer = io.StringIO()
    console = _console(stream if stream is not None else buffer)
    table = Table(box=box.SIMPLE_HEAD, show_edge=False, pad_edge=False, title="capacity", title_justify="left")
    for column in ("CLUSTER", "SOURCE", "POOL", "NODES", "FREE", "HELD BY OTHERS", "NOT COUNTED"):
        table.add_column(column, overflow="fold")

    from fleet.live_capacity import capacity_rows

    for r in capacity_rows(capacity):
        table.add_row(r.cluster, r.source, r.pool, r.nodes, r.free, r.others, r.not_counted)
    console.print()
    console.print(table)
    return buffer.getvalue()


def policy_table(policies: dict, stream=None) -> str:
    """Per team, each budget of its TeamPolicy and its use, and each deployment's residency (`plan`)."""
    buffer = io.StringIO()
    console = _console(stream if stream is not None else buffer)

    from fleet.policy_preview import policy_rows, residency_text

    rows = policy_rows(policies)
    if rows:
        table = Table(box=box.SIMPLE_HEAD, show_edge=False, pad_edge=False, title="team budgets",
                      title_justify="left")
        for column in ("NAMESPACE", "POLICY", "BUDGET", "OF", "COUNT", "USED"):
            table.add_column(column, overflow="fold")
        for r in rows:
            table.add_row(r.namespace, r.policy, r.field, r.what, r.budget, r.used + (" (over)" if r.over else ""))
        console.print()
        console.print(table)
    if policies.get("residency"):
        console.print()
        console.print("residency:", markup=False)
        for entry in policies["residency"]:
            console.print(f"  {entry['namespace']} ({len(entry['deployments'])} deployment(s)): {residency_text(entry)}",
                          markup=False, highlight=False)
    return buffer.getvalue()
