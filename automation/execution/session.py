"""One command's work: desired state from the manifests and the record of what is applied, then the stacks to run."""

from __future__ import annotations

import signal
import sys
import threading
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Callable, Mapping

from automation.execution.orchestrator import Orchestrator, Report
from automation.record.applied import Applied
from automation.execution.runner import AutomationError, Operation
from automation.planning.stacks import (Change, DesiredState, Host, StackChange, StackSpec, changes, desired_state,
                                        parked_stacks)
from fleet.plan import Plan
from fleet.validate import Fleet, gateway_transitions, stack_transitions

if TYPE_CHECKING:
    from automation.planning.addons import Need, Served


@dataclass
class Prepared:
    fleet: Fleet
    plan: Plan
    specs: dict[str, StackSpec]
    changes: list[StackChange]
    applied: Applied  # the record the plan was made with
    problems: list[str]
    addresses: dict[str, str] = field(default_factory=dict)  # service stack -> its address (placeholder until known)
    desired: DesiredState | None = None  # everything the plan renders (status reads endpoints, routes, caches)
    recorded: dict[str, str] = field(default_factory=dict)  # applied stack -> the fingerprint it applied
    # changes the record refuses (InferenceCluster spec.stack, InferenceGateway spec.clusterName: immutable once
    # applied): `preview` and `up` stop
    transitions: list[str] = field(default_factory=list)

    def kept_by_default(self, operation: str, prune: bool) -> list[StackChange]:
        """Recorded stacks not in the input that `operation` leaves alone without --prune."""
        if prune or operation not in ("preview", "up"):
            return []
        parked = parked_stacks(self.fleet, self.plan)
        return [c for c in self.changes if c.change == "delete" and c.name not in parked]


def prepare(fleet: Fleet, applied: Applied, control_plane: str | Host | None = None) -> Prepared:
    """Plan with the record: applied replicas stay where they are, recorded gateway addresses are rendered."""
    desired = desired_state(fleet, applied.placements(), control_plane, gateways=applied.gateways())
    fingerprints = applied.fingerprints()
    transitions = [str(p) for p in [*stack_transitions(fleet, applied.serving_stacks()),
                                    *gateway_transitions(fleet, applied.gateway_clusters())]]
    return Prepared(fleet, desired.plan, desired.specs, changes(desired.specs, fingerprints), applied,
                    desired.problems, dict(desired.rendered.addresses), desired, fingerprints, transitions)


def reopening(prepared: Prepared, applied: Applied, ran: list[StackChange],
              control_plane: str | Host | None = None) -> tuple[Prepared, list[StackChange]]:
    """After an `up`, the platform stacks to run once more in the same `up`: when the gateway stack has just
    recorded a front door client CA the plan was made without (a first `up`), the cluster listeners it ran closed
    (workloads/front_door_mtls.py) open now rather than on the next `up`. Only stacks this `up` already ran: the
    runner was made for them. `applied`: the record as it is after the run."""

    if applied.gateways().client_cas == prepared.applied.gateways().client_cas:
        return prepared, []
    again = prepare(prepared.fleet, applied, control_plane)
    names = {c.name for c in ran}
    return again, [c for c in again.changes if c.kind == "platform" and c.name in names
                   and c.change in (Change.create, Change.update)]


# cluster, what it must serve -> what its API server serves of that (automation/execution/kube.py KubeClient.served)
ServedReader = Callable[[str, "list[Need]"], "Served"]


def unserved_addons(fleet: Fleet, needs: Mapping[str, tuple[Need, ...]], items: list[StackChange] | None,
                    kubeconfigs: Mapping[str, str], read: ServedReader | None = None) -> list[str]:
    """The add-on check of the Existing clusters whose platform team manages their add-ons
    (`spec.cluster.existing.addons: Verify`): every API and namespace that the stacks about to create or update use
    there (`needs`, automation/planning/addons.py) asked of the cluster's API server. One line per one it does not
    serve, naming the cluster, the API and version, the add-on that provides it and the stacks that need it; [] when
    every one is served. Every road that applies runs it first, after the deployability check (the CLI's `up` and
    `preview`, the portal's worker): a missing API applies nothing, not half a fleet. `items` None: every stack.
    `kubeconfigs`: the Existing clusters' kubeconfig files (pulumi_runner.existing_kubeconfigs); else the fleet's
    Secret. `read`: how a cluster is asked (tests)."""
    from automation.planning.addons import missing

    running = None if items is None else {c.name for c in items if c.change in (Change.create, Change.update)}
    read = read or kubeconfig_reader(fleet, kubeconfigs)
    lines: list[str] = []
    for cluster, needed in sorted(needs.items()):
        wanted = [n for n in needed if running is None or running & set(n.needed_by)]
        if not wanted:
            continue
        try:
            served = read(cluster, wanted)
        except AutomationError as exc:
            lines.append(f"InferenceCluster/{cluster}: its add-ons cannot be checked (spec.cluster.existing.addons is "
                         f"Verify): {exc}")
            continue
        lines += missing(wanted, served)
    return lines


def kubeconfig_reader(fleet: Fleet, kubeconfigs: Mapping[str, str]) -> ServedReader:
    """Asks a cluster with its kubeconfig file, else the fleet's Secret holding it (kube.cluster_client)."""
    from automation.execution.kube import cluster_client

    def read(cluster: str, wanted: list[Need]) -> Served:
        with cluster_client(fleet, kubeconfigs, cluster, timeout=15) as client:
            return client.served({n.group for n in wanted if not n.namespace},
                                 {n.name for n in wanted if n.namespace})
    return read


def selected(prepared: Prepared, operation: str, prune: bool = False, force: set[str] | None = None) -> list[StackChange]:
    """The stacks an operation touches.

    `preview`/`up`: the changed stacks, and those named in `force` even when unchanged. Recorded stacks that are
    not in the input are destroyed only with `prune`: input that is a subset of the fleet never destroys the rest.
    A model stack whose ModelDeployment is in the input with `spec.replicas: 0`, or whose every replica a TeamPolicy
    removes, is destroyed without it: the input asks for no replica, or the policy allows none (`parked_stacks`).
    """
    if operation in ("preview", "up"):
        force = force or set()
        parked = parked_stacks(prepared.fleet, prepared.plan)
        out = []
        for c in prepared.changes:
            if c.change == "none" and c.name in force:
                out.append(StackChange(c.id, Change.update, c.depends_on))
            elif c.change in ("create", "update") or (c.change == "delete" and (prune or c.name in parked)):
                out.append(c)
        return out
    recorded = set(prepared.recorded)
    if operation in ("refresh", "preview-refresh"):
        return [StackChange(c.id, Change.update, c.depends_on) for c in prepared.changes
                if c.name in recorded and c.change != "delete"]
    if operation == "destroy":
        return [StackChange(c.id, Change.delete) for c in prepared.changes if c.name in recorded]
    raise ValueError(operation)


def run_interruptibly(orchestrator: Orchestrator, operation: Operation, items: list[StackChange],
                      specs: dict[str, StackSpec], notify: Callable[[str], None]) -> Report:
    """Run in a worker thread so Ctrl-C reaches us: then cancel through the runner and wait, never kill.

    Waiting is on an Event, not Thread.join: a KeyboardInterrupt inside join() can leave the thread marked
    finished while it still runs (CPython before 3.13), and the report would be lost.
    """
    result: dict[str, Report] = {}
    done = threading.Event()

    def work() -> None:
        try:
            result["report"] = orchestrator.execute(operation, items, specs)
        finally:
            done.set()

    threading.Thread(target=work, daemon=True, name="modelplane-orchestrator").start()
    try:
        while not done.wait(0.2):
            pass
    except KeyboardInterrupt:
        hold_interrupts()
        notify("cancelling: asking running stacks to stop at a safe point (Ctrl-C again does not skip this)")
        orchestrator.cancel()
        while not done.is_set():
            try:
                done.wait(0.2)
            except KeyboardInterrupt:
                print("still waiting for running stacks to stop safely", file=sys.stderr)
        hold_interrupts(stopped=True)
    return result.get("report") or Report(cancelled=True)


def hold_interrupts(stopped: bool = False) -> None:
    """Once a run is cancelling, a further Ctrl-C or SIGTERM only says it is still stopping; once it has `stopped`,
    they are ignored until the process exits (a Python handler is undone while the interpreter exits, an ignored
    signal stays ignored). Raised once the run had stopped, a second Ctrl-C ended the process with a traceback,
    killed by SIGINT, instead of exit 130 (the real engine showed it: a cancelled update can stop in under a
    second). `main` puts the handlers back for callers in the same process."""
    if threading.current_thread() is not threading.main_thread():
        return

    def still(signum, frame) -> None:
        print("still waiting for running stacks to stop safely", file=sys.stderr)

    for number in (signal.SIGINT, signal.SIGTERM):
        signal.signal(number, signal.SIG_IGN if stopped else still)
