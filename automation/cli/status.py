"""`status`: what is applied, what is pending and what is unscheduled, read from the record."""

from __future__ import annotations

import json
from typing import Any

import click

from automation.cli.base import (
    BACKEND,
    FLEET,
    capacity_options,
    cli,
    executor_options,
    gateway_host,
    load,
    operator_client,
    paths_option,
    read_record,
    state_option,
    with_capacity,
)
from automation.execution.run_status import RunStatus


def _pending_gateway(applied: dict) -> str:
    """Why a gateway's address is not known, and what to do: an applied gateway stack whose load balancer had no
    address yet when it ran (a cluster without a cloud load balancer: the local fleet) keeps an empty output until
    its state is refreshed, and rerunning it alone reads the same empty output again."""
    if "gateway" in applied:
        return ("the gateway stack applied before its load balancer had an address: "
                "`modelplane up --refresh --force gateway` reads it (annotate an Existing cluster that has a load "
                "balancer modelplane.ai/load-balancer: \"true\" and `up` waits for it)")
    return "known once the gateway stack applied"


def _v05_gateways(fleet, applied: dict) -> list[dict]:
    """The v0.5 gateway composed, with its address (the gateway stack's output) and, without TLS, its base URLs
    (`status.endpoints`: OpenAI's and Anthropic's, reference §2.1)."""
    from workloads.ai_gateway import base_urls
    from workloads.render import v05_gateway

    ig = v05_gateway(fleet)
    if ig is None or ig.v05 is None:
        return []
    address = ((applied.get("gateway") or {}).get("outputs") or {}).get("address") or (ig.status or {}).get("address")
    return [{"name": ig.name, "cluster": ig.v05.clusterName, "address": address,
             "endpoints": base_urls(address, ig.v05.tls is not None)}]


def _objects_with_status(fleet, prepared, applied: dict) -> str:
    """`status -o yaml`: the objects as the portal serves them, from what `up` recorded in this state folder."""
    import yaml

    from automation.planning.conditions import Observed, composed, snapshot, with_status

    snap = snapshot(prepared.desired)
    observed = Observed(applied)
    bodies = [o.model_dump(mode="json", by_alias=True, exclude_none=True) for o in fleet.objects if o.kind != "ModelReplica"]
    gateways = [b for b in bodies if b["kind"] == "InferenceGateway"]
    items = [with_status(b, snap, observed, gateways) for b in bodies] + composed(None, snap, observed)
    return yaml.safe_dump({"apiVersion": "v1", "kind": "List", "items": items}, sort_keys=False)


def _service_addresses(prepared, applied: dict, v05: bool = False) -> list[dict]:
    """Each ModelService's OpenAI-compatible base address, once the fleet gateway's address is known. Under a v0.5
    gateway (`v05`) that is the gateway's base URL, and callers name the service as the request's model."""
    from fleet.stack_id import StackId
    from workloads.render import v05_service_address
    from workloads.service_routing import service_address

    gateway = ((applied.get("gateway") or {}).get("outputs") or {}).get("address")
    tls = prepared.desired.rendered.front_door_tls  # the scheme render decided
    out = []
    for stack, rendered in sorted(prepared.addresses.items()):
        id = StackId.parse(stack)
        if gateway:  # the host the gateway stack output
            address = (v05_service_address(gateway, tls) if v05 else
                       service_address(gateway, str(id.namespace), str(id.name), tls))
            out.append({"name": f"{id.namespace}/{id.name}", "address": address, "pending": None})
        elif ".pending.modelplane.invalid" not in rendered:  # the InferenceGateway's observed status gives it
            out.append({"name": f"{id.namespace}/{id.name}", "address": rendered, "pending": None})
        else:
            out.append({"name": f"{id.namespace}/{id.name}", "address": None, "pending": _pending_gateway(applied)})
    return out


@cli.command()
@paths_option
@click.option("-o", "--output", type=click.Choice(["table", "json", "yaml"]), default="table", show_default=True,
              help="table for people; json: stacks, unscheduled deployments, the gateway's host and service addresses; "
                   "yaml: every object (and the ModelReplicas and ModelEndpoints it composes) with the status and "
                   "conditions the portal serves, as a Kubernetes List.")
@click.option("--control-plane", "control_plane", default=None, metavar="CLUSTER",
              help="The InferenceCluster hosting the fleet gateway (default: the first by name whose cloud gives a "
                   "LoadBalancer an address, else the first Existing one).")
@state_option
@executor_options("local: the record in the Pulumi backend; operator: the Stack objects in the control-plane cluster, "
                   "with where the operator is with each.")
@FLEET
@BACKEND
@click.option("--watch", "-w", "watch", is_flag=True,
              help="Follow a rollout: after the table, print each stack whose state changes (read every --interval "
                   "seconds) until every stack is up to date, or Ctrl-C.")
@click.option("--interval", type=click.FloatRange(0.1, 3600), default=5.0, show_default=True, metavar="SECONDS",
              help="With --watch: seconds between reads of the record.")
@capacity_options
def status(paths, output, control_plane, state, executor, operator_settings, fleet_name, backend, watch,
           interval, capacity, kubeconfig) -> None:
    """Which stacks are applied, which are pending, and what is unscheduled (from the record; without the Pulumi
    CLI, from its local cache, and it says so)."""
    from automation.execution.session import prepare
    from automation.planning.stacks import Host

    if watch and output != "table":
        click.echo("error: --watch follows the table; use -o table", err=True)
        raise SystemExit(2)
    loaded = load(paths)
    with_capacity(loaded.fleet, capacity, kubeconfig, state)  # as `up --capacity` placed, or it shows moves
    host = gateway_host(loaded.fleet, control_plane)
    record, on_operator = _record_and_operator(state, backend, fleet_name, executor, operator_settings)
    read = read_record(record)
    prepared = prepare(loaded.fleet, read, Host(host))  # decided above: not derived again
    applied = read.details()
    rows = _rows(prepared, read, loaded.fleet, on_operator)
    blocked = _cannot_run(prepared, loaded.fleet, state) if on_operator is None else {}
    for row in rows:
        _mark(row, blocked)
    gateways = _v05_gateways(loaded.fleet, applied)
    services = _service_addresses(prepared, applied, v05=bool(gateways))
    if output == "yaml":
        click.echo(_objects_with_status(loaded.fleet, prepared, applied), nl=False)
        return
    if output == "json":
        click.echo(json.dumps({"stacks": rows, "unscheduled": [u.deployment for u in prepared.plan.unscheduled],
                               "controlPlane": host, "services": services,
                               **({"gateways": gateways} if gateways else {})}, indent=2))
        return
    click.echo(f"fleet gateway host: {host or 'none (no GKE, EKS, AKS, Nebius, Vultr, Civo or Existing cluster)'}")
    for gw in gateways:
        urls = gw["endpoints"]
        shown = (f"openAI {urls['openAI']}, anthropic {urls['anthropic']}" if urls else
                 f"https://<your name>/v1 and /anthropic/v1 at {gw['address']}" if gw["address"] else
                 f"pending ({_pending_gateway(applied)})")
        click.echo(f"gateway {gw['name']} on {gw['cluster']}: {shown}")
    for service in services:
        where = service["address"] or f"pending ({service['pending']})"
        click.echo(f"service {service['name']}: {where}" + (f" (model {service['name']})" if gateways else ""))
    if rows:
        width = max(48, *(len(row["name"]) + 1 for row in rows))  # a stack name is never cut
        click.echo(f"{'STACK':<{width}} {'STATE':<16} {'APPLIED':<14} WHY")
    for row in rows:
        shown = "up to date" if row["change"] == "none" else f"pending {row['change']}"
        click.echo(f"{row['name']:<{width}} {shown:<16} {row['appliedAt'] or 'never applied':<14} "
                   f"{row['reason'] or ''}".rstrip())
    said = [(name, line) for name, (lines, _) in blocked.items() for line in lines]
    if said:
        click.echo("cannot run as declared (`up` stops before it runs anything; what the deployability check "
                   "refuses besides: `preview --offline`):")
        for name, line in said:
            click.echo(f"  {name}: {line}")
    for u in prepared.plan.unscheduled:
        click.echo(f"unscheduled: {u.deployment}: {u.missing} replica(s)")
    if watch:
        _watch(loaded.fleet, host, rows, interval, lambda: _record_and_operator(state, backend, fleet_name, executor,
                                                                                operator_settings))


def _shown(row: dict) -> tuple:
    return (row["change"], row["appliedAt"], row["reason"])


def _watch(fleet, host, rows: list[dict], interval: float, record_of) -> None:
    """Print each stack whose state changed since the last read, as `kubectl get -w` prints changed rows."""
    import time

    from automation.execution.session import prepare
    from automation.planning.stacks import Host

    last = {row["name"]: _shown(row) for row in rows}
    try:
        while any(change != "none" for change, _, _ in last.values()):
            time.sleep(interval)
            record, on_operator = record_of()
            read = read_record(record)
            for row in _rows(prepare(fleet, read, Host(host)), read, fleet, on_operator):
                if last.get(row["name"]) != _shown(row):
                    last[row["name"]] = _shown(row)
                    shown = "up to date" if row["change"] == "none" else f"pending {row['change']}"
                    click.echo(f"{time.strftime('%H:%M:%S')}  {row['name']}: {shown}"
                               + (f" ({row['reason']})" if row["reason"] else ""))
        click.echo("every stack is up to date")
    except KeyboardInterrupt:
        click.echo("stopped watching", err=True)


def _record_and_operator(state: str, backend: str | None, fleet_name: str | None, executor: str,
                         operator_settings: str) -> tuple[Any, dict[str, str] | None]:
    """The record (not strict: a status may show the cache, saying so) and, on the operator, where it is with
    each Stack (None on the local executor)."""
    if executor != "operator":
        from pathlib import Path

        from automation.record.backend import PulumiRecord

        return PulumiRecord(Path(state), backend, fleet_name, strict=False), None
    from automation.operator.runner import OperatorRecord, live_stacks, stack_state

    _, api, options = operator_client(operator_settings, fleet_name)
    return OperatorRecord(api, options), {name: stack_state(stack) for name, stack in live_stacks(api, options).items()}


def _cannot_run(prepared, fleet, state: str) -> dict[str, tuple[list[str], list[str]]]:
    """The pending stacks that cannot run as the manifests declare them: each with what it needs and nothing here
    gives (an Existing cluster's kubeconfig, a GKE cluster's project, a Secret's value: what `up` checks before
    it runs anything), or with the stacks of those it waits for. Stack -> (what it needs, what it waits for)."""
    from pathlib import Path

    from automation.execution.programs import missing_secrets
    from automation.execution.prerequisites import existing_kubeconfigs, missing_kubeconfigs
    from automation.execution.runner import AutomationError
    from automation.planning.needs import missing_projects
    from automation.planning.stacks import Change

    root = Path(state)
    pending = {c.name: c for c in prepared.changes if c.change in (Change.create, Change.update)}
    try:
        found = existing_kubeconfigs(fleet, {}, root)
    except AutomationError:  # two sources give one cluster's kubeconfig: `up` says so; none is missing
        found = {ic.name: "" for ic in fleet.of("InferenceCluster")}
    needs: dict[str, list[str]] = {}
    for name in pending:
        lines = missing_kubeconfigs(fleet, found, [name], root) + missing_projects(fleet, [name])
        if name in prepared.specs:
            lines += [line.removeprefix(f"{name}: ") for line in missing_secrets(prepared.specs[name], fleet)]
        if lines:
            needs[name] = lines
    waits: dict[str, set[str]] = {}

    def blocking(name: str, seen: frozenset = frozenset()) -> set[str]:  # the stacks that cannot run it waits for
        if name not in waits:
            found_: set[str] = set()
            for dep in pending[name].depends_on if name in pending else ():
                if dep in pending and dep not in seen:
                    found_ |= ({dep} if dep in needs else set()) | blocking(dep, seen | {name})
            waits[name] = found_
        return waits[name]

    return {name: (needs.get(name, []), sorted(blocking(name))) for name in pending
            if name in needs or blocking(name)}


def _mark(row: dict, blocked: dict[str, tuple[list[str], list[str]]]) -> None:
    """A row of a stack that cannot run as declared says so (JSON: `cannotRun`, what it needs, and `waitsFor`)."""
    if row["name"] not in blocked:
        return
    needs, waits = blocked[row["name"]]
    said = ["cannot run as declared (below)"] if needs else []
    if len(waits) == 1:
        said.append(f"waits for {waits[0]}, which cannot run as declared")
    elif waits:
        said.append(f"waits for {len(waits)} stacks that cannot run as declared (below)")
    row["reason"] = "; ".join([row["reason"], *said] if row["reason"] else said)
    row["cannotRun"] = needs
    row["waitsFor"] = waits


REASONS = {"create": "not applied yet", "update": "its manifests changed since it was applied",
           "delete": "recorded but not in the input: `up --prune` destroys it", "none": ""}


def _rows(prepared, read, fleet, on_operator: dict[str, str] | None) -> list[dict]:
    """One row per stack: its change, when it was applied, and why it is pending."""
    from automation.execution.migration import plan_renames
    from automation.planning.stacks import Change, parked_stacks
    from fleet.stack_id import StackKind

    applied = read.details()
    parked = parked_stacks(fleet, prepared.plan)
    renames = {str(r.old): str(r.new) for r in plan_renames(read, fleet)}
    rows = []
    for c in prepared.changes:
        if c.name in renames.values() and c.change == Change.create:
            continue  # shown once, under its recorded legacy name
        reason = REASONS[c.change]
        if c.name in renames:
            reason = f"recorded under the legacy name; the next `up` renames it to {renames[c.name]}"
        elif c.change == Change.delete and c.name in parked:
            reason = "its ModelDeployment is scaled to zero, or a TeamPolicy allows it no replica: `up` destroys it"
        elif c.change == Change.delete and c.kind == StackKind.platform:
            reason += " (with --yes-destroy-clusters)"
        said = (on_operator or {}).get(c.name)
        if said is not None and said != RunStatus.succeeded:
            reason = said if "on the operator" in said else f"on the operator: {said}"
        rows.append({"name": c.name, "change": "rename" if c.name in renames else str(c.change),
                     "appliedAt": (applied.get(c.name) or {}).get("appliedAt"), "reason": reason,
                     **({"operator": said or "no Stack object"} if on_operator is not None else {})})
    return rows
