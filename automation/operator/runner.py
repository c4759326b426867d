"""Run stacks on the Pulumi Kubernetes Operator: the `StackRunner` behind `--executor operator`.

The orchestrator is the same as the local executor's (dependency waves, dependents of a failed stack
skipped, state recorded after success); only what "run one stack" means changes:

* up: server-side apply the stack's Program, then its Stack (field manager `modelplane`), with a fresh
  `pulumi.com/reconciliation-request` annotation, then read the Stack's status until the operator has
  run *that* request on *that* generation (and, for a Program, that Program revision): `lastUpdate.state`
  succeeded or failed, or a Stalled condition that only a change can clear. A Stack that already ran the
  same fingerprint successfully is left alone (a rerun on a fresh CI machine costs one read per stack)
  unless `--force` names it.
* preview: a copy of the stack's Program and Stack, with `spec.preview: true` (never `destroyOnFinalize`), in
  the namespace `<namespace>-preview` under the same names, so the same Pulumi project and stack (a Program's
  name is its project); read back, then deleted: the live Stack never sees the proposal.
* destroy: workload Stacks have `destroyOnFinalize`, so deleting the Stack destroys its resources; the
  Program is deleted only once the Stack is gone (the destroy needs it). A platform Stack is first
  re-applied with `destroyOnFinalize: true` (and, with `--unprotect`, `modelplane:deletionProtection:
  "false"` run first), which the CLI allows only with `--yes-destroy-clusters`.

The operator keeps going when this process stops waiting (Ctrl-C, a timeout): the message says so, and
`modelplane status --executor operator` reads where it got to. What a stack writes to the cluster (its Program,
its Stack, a delete) is written only while the stack is not cancelled, checked under that stack's own lock, which
`cancel` takes too: after Ctrl-C nothing more of a stack reaches the operator.
"""

from __future__ import annotations

import copy
import itertools
import json
import threading
import time
from dataclasses import dataclass, field, replace
from typing import Any, Callable, Mapping

from automation.execution.kube import KubeAPI, KubeError, describe
from automation.operator.export import (FINGERPRINT_ANNOTATION, KIND_LABEL, PLACEMENTS_ANNOTATION, STACK_ANNOTATION,
                                 ExportOptions, shared_objects, stack_objects)
from automation.record.applied import Applied, AppliedStack, UpdateWindow, replica_from_dict
from automation.execution.capabilities import OPERATOR
from automation.execution.run_status import RunStatus
from automation.execution.runner import AutomationError, EventSink, Operation, RunResult
from automation.planning.stacks import StackSpec
from fleet.stack_id import StackId, StackIdError

RECONCILE_REQUEST = "pulumi.com/reconciliation-request"  # the operator's "run again" protocol (as Flux's)
PREVIEW_LABEL = "modelplane.ai/preview"
FLEET_LABEL = "modelplane.ai/fleet"
STACKS = ("pulumi.com/v1", "Stack")
PROGRAMS = ("pulumi.com/v1", "Program")
# Stalled reasons a retry by the operator cannot clear without a change (a missing Program artifact can).
FINAL_STALLS = {"SpecInvalid", "UpdateConflict", "PulumiVersionTooLow", "WorkspaceFailed", "UpdateFailed",
                "NamespaceTerminating"}
SECRET_OUTPUT = "[secret]"  # how the operator shows a secret output in a Stack's status


def preview_namespace(namespace: str) -> str:
    """Where previews run: beside the stacks, under the same object names (so the same Pulumi projects)."""
    return f"{namespace}-preview"


@dataclass
class Verdict:
    ok: bool
    message: str
    outputs: dict = field(default_factory=dict)


def _conditions(stack: dict) -> dict[str, dict]:
    return {c.get("type"): c for c in (stack.get("status") or {}).get("conditions") or []}


def verdict(stack: dict, request: str, revision: str | None = None) -> Verdict | None:
    """The operator's result for the Stack as applied (its generation, reconcile request and, for a Program,
    the Program's revision), or None while that result is not in yet."""
    meta, status = stack.get("metadata") or {}, stack.get("status") or {}
    generation = meta.get("generation")
    stalled = _conditions(stack).get("Stalled")
    if (status.get("observedGeneration") == generation and stalled and stalled.get("status") == "True"
            and stalled.get("reason") in FINAL_STALLS):
        return Verdict(False, f"stalled: {stalled.get('reason')}: {stalled.get('message') or 'no message'}")
    last = status.get("lastUpdate") or {}
    if last.get("generation") != generation or (last.get("reconcileRequest") or "") != request:
        return None
    if revision is not None and last.get("lastAttemptedCommit") != revision:
        return None
    where = f" ({last['permalink']})" if last.get("permalink") else ""
    # the operator's own words for its last update (PKO's StackUpdateState), not a RunStatus of ours
    if last.get("state") == "succeeded":
        outputs = {k: v for k, v in (status.get("outputs") or {}).items() if v != SECRET_OUTPUT}
        return Verdict(True, f"{last.get('type') or 'update'} succeeded on the operator{where}", outputs)
    if last.get("state") == "failed":
        return Verdict(False, f"{last.get('type') or 'update'} failed on the operator: "
                              f"{last.get('message') or 'no message'}{where} (the operator retries it)")
    return None


def applied_fingerprint(stack: dict) -> str:
    """What the Stack has run successfully, by fingerprint; "" when its latest run has not succeeded."""
    annotations = (stack.get("metadata") or {}).get("annotations") or {}
    result = verdict(stack, annotations.get(RECONCILE_REQUEST, ""))
    return annotations.get(FINGERPRINT_ANNOTATION, "") if result is not None and result.ok else ""


def _selector(options: ExportOptions) -> str:
    fleet = f"{FLEET_LABEL}={options.fleet_name}" if options.fleet_name else f"!{FLEET_LABEL}"
    return f"{KIND_LABEL},!{PREVIEW_LABEL},{fleet}"


def live_stacks(api: KubeAPI, options: ExportOptions) -> dict[str, dict]:
    """This fleet's Stack objects in the control-plane cluster, by stack name (previews left out)."""
    out = {}
    for stack in api.list(*STACKS, options.namespace, _selector(options)):
        name = ((stack.get("metadata") or {}).get("annotations") or {}).get(STACK_ANNOTATION, "")
        try:
            StackId.parse(name)
        except StackIdError:
            continue  # not one of ours, whatever its labels say
        out[name] = stack
    return out


class OperatorRecord:
    """The operator executor's record: this fleet's Stack objects. A Stack's fingerprint counts once its latest run
    succeeded; its placements always do (they are where its replicas are or are being put, retried by the
    operator), so a fresh machine plans with them and running replicas stay where they are."""

    def __init__(self, api: KubeAPI, options: ExportOptions):
        self.api, self.options = api, options

    def read(self) -> Applied:
        stacks = {}
        for name, stack in live_stacks(self.api, self.options).items():
            annotations = (stack.get("metadata") or {}).get("annotations") or {}
            try:
                placements = tuple(replica_from_dict(p) for p in json.loads(annotations.get(PLACEMENTS_ANNOTATION, "[]")))
            except (ValueError, KeyError, TypeError):
                placements = ()
            outputs = {k: v for k, v in ((stack.get("status") or {}).get("outputs") or {}).items() if v != SECRET_OUTPUT}
            when = ((stack.get("status") or {}).get("lastUpdate") or {}).get("lastResyncTime")
            stacks[name] = AppliedStack(applied_fingerprint(stack), placements, outputs, applied_at=when)
        return Applied(stacks, f"the Stack objects in namespace {self.options.namespace} of the control-plane cluster")

    def applied(self, stack: str, outputs: Mapping[str, Any], window: UpdateWindow | None = None) -> None:
        pass  # the Stack is the record

    def destroyed(self, stack: str) -> None:
        pass


def _labelled(obj: dict, options: ExportOptions, preview: bool = False) -> dict:
    obj = copy.deepcopy(obj)
    labels = obj["metadata"].setdefault("labels", {})
    if options.fleet_name:
        labels[FLEET_LABEL] = options.fleet_name
    if preview:
        labels[PREVIEW_LABEL] = "true"
    return obj


def _own(live: dict | None, spec: StackSpec, name: str, options: ExportOptions) -> dict | None:
    """The live Stack of this name, when it is this fleet's stack's; AutomationError when it is another stack's
    (their names' hashes collide, automation/operator/export.py): writing or deleting it would change that one."""
    if live is None:
        return None
    meta = live.get("metadata") or {}
    stack = (meta.get("annotations") or {}).get(STACK_ANNOTATION)
    fleet = (meta.get("labels") or {}).get(FLEET_LABEL)
    if stack != spec.name or fleet != options.fleet_name:
        holder = f"stack {stack}" + (f" of fleet {fleet}" if fleet else "") if stack else "an object no stack annotates"
        raise AutomationError(f"the operator object name {name!r} of stack {spec.name} is the live Stack of {holder} "
                              "(their names' hash collides): nothing was written; rename a cluster or deployment so "
                              "that they differ")
    return live


def _owned(live: dict) -> dict:
    """What we apply of a live Stack to change one field: its spec and our labels and annotations (server-side
    apply would otherwise drop the fields we own and leave out)."""
    meta = live["metadata"]
    annotations = {k: v for k, v in (meta.get("annotations") or {}).items() if k.startswith("modelplane.ai/")
                   or k == RECONCILE_REQUEST}
    return {"apiVersion": live["apiVersion"], "kind": live["kind"],
            "metadata": {"name": meta["name"], "namespace": meta["namespace"], "labels": dict(meta.get("labels") or {}),
                         "annotations": annotations},
            "spec": copy.deepcopy(live["spec"])}


class OperatorRunner:
    """A `StackRunner` that hands each stack to the operator and reads its result back."""

    def __init__(self, api: KubeAPI, options: ExportOptions, *, force: set[str] | None = None, unprotect: bool = False,
                 poll: float = 5.0, timeout: float = 7200.0, sleep: Callable[[float], None] = time.sleep,
                 clock: Callable[[], float] = time.monotonic):
        self.api = api
        self.options = options
        self.force = force or set()
        self.unprotect = unprotect
        self.poll = poll
        self.timeout = timeout
        self.sleep = sleep
        self.clock = clock
        self._cancelled: set[str] = set()
        self._lock = threading.Lock()
        self._gates: dict[str, threading.Lock] = {}  # stack -> held while it writes, and by its cancel
        self._shared_done: set[str] = set()  # namespaces whose shared objects are applied
        self._counter = itertools.count()

    # ---- the StackRunner protocol ------------------------------------------------------------

    def run(self, operation: Operation, stack: StackSpec, on_event: EventSink) -> RunResult:
        try:
            if operation == "up":
                return self._up(stack, on_event)
            if operation == "preview":
                return self._preview(stack, on_event)
            if operation == "destroy":
                return self._destroy(stack, on_event)
            if operation == "preview-destroy":
                live = self.api.get(*STACKS, self.options.namespace, self.options.object_name(stack.id))
                summary = ("would delete its Stack object; the operator then destroys what it created" if live
                           else "not on the operator: nothing to destroy")
                return RunResult(stack.name, operation, True, summary=summary)
            raise AutomationError(f"{operation}: {OPERATOR.why['refresh']}")
        except AutomationError as exc:
            return RunResult(stack.name, operation, False, error=str(exc))

    def cancel(self, stack_name: str) -> None:
        with self._gate(stack_name), self._lock:  # after a write in flight: none follows
            self._cancelled.add(stack_name)

    def _gate(self, stack: str) -> threading.Lock:
        with self._lock:
            return self._gates.setdefault(stack, threading.Lock())

    def _write(self, stack: str, write: Callable[[], Any]) -> Any:
        """One write of a stack's to the cluster, unless the stack was cancelled (then AutomationError)."""
        with self._gate(stack):
            with self._lock:
                cancelled = stack in self._cancelled
            if cancelled:
                raise AutomationError("interrupted: not handed to the operator (nothing more of it was written)")
            return write()

    # ---- operations ----------------------------------------------------------------------------

    def _request(self) -> str:
        return f"modelplane-{time.time_ns()}-{next(self._counter)}"

    def _ensure_shared(self, on_event: EventSink, stack: str, options: ExportOptions | None = None) -> None:
        options = options or self.options
        with self._lock:
            if options.namespace in self._shared_done:
                return
            for obj in shared_objects(options):
                self.api.apply(obj)
                on_event({"stack": stack, "type": "resource", "op": "apply", "urn": describe(obj)})
            self._shared_done.add(options.namespace)

    def _apply_all(self, objects: list[dict], stack: str, on_event: EventSink) -> tuple[dict, str | None]:
        """Apply the Program (if any) then the Stack; returns the stored Stack and the Program's revision."""
        revision = None
        stored: dict = {}
        for obj in objects:
            stored = self._write(stack, lambda: self.api.apply(obj))
            on_event({"stack": stack, "type": "resource", "op": "apply", "urn": describe(obj)})
            if obj["kind"] == "Program":  # the operator's artifact revision of a Program is its generation
                revision = str((stored.get("metadata") or {}).get("generation", ""))
        return stored, revision

    def _up(self, spec: StackSpec, on_event: EventSink) -> RunResult:
        name = self.options.object_name(spec.id)
        live = _own(self.api.get(*STACKS, self.options.namespace, name), spec, name, self.options)
        if live is not None and spec.name not in self.force and applied_fingerprint(live) == spec.fingerprint:
            done = verdict(live, (live["metadata"].get("annotations") or {}).get(RECONCILE_REQUEST, ""))
            return RunResult(spec.name, "up", True, outputs=done.outputs if done else {},
                             summary="already applied on the operator")
        self._ensure_shared(on_event, spec.name)
        request = self._request()
        objects = [_labelled(o, self.options) for o in stack_objects(self.options, spec)]
        objects[-1]["metadata"]["annotations"][RECONCILE_REQUEST] = request
        stored, revision = self._apply_all(objects, spec.name, on_event)
        return self._wait(spec.name, "up", name, int(stored["metadata"]["generation"]), request, revision, on_event)

    def _preview(self, spec: StackSpec, on_event: EventSink) -> RunResult:
        # The proposal lives in its own namespace under the live objects' names: a Program's name is its Pulumi
        # project, so a renamed copy would preview another (empty) stack, not this one.
        options = replace(self.options, namespace=preview_namespace(self.options.namespace))
        self._ensure_shared(on_event, spec.name, options)
        name = options.object_name(spec.id)
        request = self._request()
        objects = [_labelled(obj, options, preview=True) for obj in stack_objects(options, spec)]
        body = objects[-1]["spec"]
        body.update({"preview": True, "destroyOnFinalize": False})  # never destroys the live stack
        body.pop("prerequisites", None)  # a proposal waits for nothing
        objects[-1]["metadata"]["annotations"][RECONCILE_REQUEST] = request
        try:
            stored, revision = self._apply_all(objects, spec.name, on_event)
            return self._wait(spec.name, "preview", name, int(stored["metadata"]["generation"]), request, revision,
                              on_event, options.namespace)
        finally:  # the proposal is removed whatever its result (the live Stack never saw it), before the next one
            self.api.delete(*STACKS, options.namespace, name)
            deadline = self.clock() + self.timeout
            while self.api.get(*STACKS, options.namespace, name) is not None and self.clock() < deadline:
                self.sleep(self.poll)
            if len(objects) > 1:
                self.api.delete(*PROGRAMS, options.namespace, name)

    def _destroy(self, spec: StackSpec, on_event: EventSink) -> RunResult:
        namespace, name = self.options.namespace, self.options.object_name(spec.id)
        live = _own(self.api.get(*STACKS, namespace, name), spec, name, self.options)
        if live is None:
            self.api.delete(*PROGRAMS, namespace, name)
            return RunResult(spec.name, "destroy", True, summary="not on the operator: nothing to destroy")
        if not live["spec"].get("destroyOnFinalize"):  # a platform stack: destroyed only on purpose (the CLI asked)
            if self.unprotect:
                body = _owned(live)
                body["spec"].setdefault("config", {})["modelplane:deletionProtection"] = "false"
                request = self._request()
                body["metadata"]["annotations"][RECONCILE_REQUEST] = request
                stored = self._write(spec.name, lambda: self.api.apply(body))
                on_event({"stack": spec.name, "type": "diagnostic", "severity": "info",
                          "message": "lifting deletion protection before the destroy"})
                lifted = self._wait(spec.name, "up", name, int(stored["metadata"]["generation"]), request, None,
                                    on_event)
                if not lifted.ok:
                    return RunResult(spec.name, "destroy", False, error=f"lifting deletion protection: {lifted.error}")
                live = self.api.get(*STACKS, namespace, name) or live
            body = _owned(live)
            body["spec"]["destroyOnFinalize"] = True
            self._write(spec.name, lambda: self.api.apply(body))
        self._write(spec.name, lambda: self.api.delete(*STACKS, namespace, name))
        on_event({"stack": spec.name, "type": "resource", "op": "delete", "urn": f"Stack {namespace}/{name}"})
        deadline = self.clock() + self.timeout
        while True:
            current = self.api.get(*STACKS, namespace, name)
            if current is None:
                break
            last = (current.get("status") or {}).get("lastUpdate") or {}
            if last.get("type") == "destroy" and last.get("state") == "failed":
                return RunResult(spec.name, "destroy", False, error=f"destroy failed on the operator: "
                                 f"{last.get('message') or 'no message'} (the operator retries it; the Stack stays "
                                 "until the destroy succeeds)")
            stopped = self._stopped(spec.name, "destroy", deadline)
            if stopped is not None:
                return stopped
            self.sleep(self.poll)
        self.api.delete(*PROGRAMS, namespace, name)  # only now: the destroy ran the Program
        return RunResult(spec.name, "destroy", True, summary="destroyed by the operator")

    # ---- waiting ---------------------------------------------------------------------------------

    def _stopped(self, stack: str, operation: Operation, deadline: float) -> RunResult | None:
        with self._lock:
            cancelled = stack in self._cancelled
        if cancelled:
            return RunResult(stack, operation, False, error="stopped waiting; the operator goes on with the stack "
                                                            "(`modelplane status --executor operator`)")
        if self.clock() > deadline:
            return RunResult(stack, operation, False, error=f"no result from the operator after {self.timeout:.0f} s; "
                             "it goes on with the stack (`modelplane status --executor operator`)")
        return None

    def _wait(self, stack: str, operation: Operation, name: str, generation: int, request: str,
              revision: str | None, on_event: EventSink, namespace: str | None = None) -> RunResult:
        deadline = self.clock() + self.timeout
        said = ""
        while True:
            current = self.api.get(*STACKS, namespace or self.options.namespace, name)
            if current is None:
                return RunResult(stack, operation, False, error=f"Stack {name} disappeared from the control-plane "
                                                                "cluster while it ran")
            if (current.get("metadata") or {}).get("generation") != generation:
                return RunResult(stack, operation, False, error=f"Stack {name} was changed by someone else while it "
                                                                "ran (its generation moved on)")
            result = verdict(current, request, revision)
            if result is not None:
                if result.ok:
                    return RunResult(stack, operation, True, outputs=result.outputs, summary=result.message)
                return RunResult(stack, operation, False, error=result.message)
            reconciling = _conditions(current).get("Reconciling") or {}
            progress = ": ".join(p for p in (reconciling.get("reason"), reconciling.get("message")) if p)
            if progress and progress != said:
                on_event({"stack": stack, "type": "diagnostic", "severity": "info", "message": progress})
                said = progress
            stopped = self._stopped(stack, operation, deadline)
            if stopped is not None:
                return stopped
            self.sleep(self.poll)


def check_reachable(api: KubeAPI, options: ExportOptions) -> None:
    """Fail early, in one line, when the cluster cannot be reached or does not serve the operator's Stacks."""
    try:
        api.list(*STACKS, options.namespace, _selector(options))
    except KubeError as exc:
        raise AutomationError(str(exc)) from None


def stack_state(stack: dict) -> str:
    """One line on where the operator is with a Stack, for `status --executor operator`."""
    meta = stack.get("metadata") or {}
    request = (meta.get("annotations") or {}).get(RECONCILE_REQUEST, "")
    if meta.get("deletionTimestamp"):
        last = (stack.get("status") or {}).get("lastUpdate") or {}
        failed = last.get("type") == "destroy" and last.get("state") == "failed"
        return f"destroy failed: {last.get('message') or 'no message'}" if failed else "being destroyed"
    stalled = _conditions(stack).get("Stalled")
    if stalled and stalled.get("status") == "True":
        return f"stalled: {stalled.get('reason')}: {stalled.get('message') or 'no message'}"
    result = verdict(stack, request)
    if result is not None:
        return RunStatus.succeeded if result.ok else result.message
    reconciling = _conditions(stack).get("Reconciling") or {}
    if reconciling.get("status") == "True":
        return f"running: {reconciling.get('reason') or ''}: {reconciling.get('message') or ''}".rstrip(": ")
    return "waiting for the operator"


def applied_details(live: dict[str, dict]) -> dict[str, dict]:
    """What `status` shows of applied stacks (plain outputs and when), from the Stacks' status."""
    out = {}
    for name, stack in live.items():
        if applied_fingerprint(stack):
            status = stack.get("status") or {}
            out[name] = {"outputs": {k: v for k, v in (status.get("outputs") or {}).items() if v != SECRET_OUTPUT},
                         "appliedAt": (status.get("lastUpdate") or {}).get("lastResyncTime")}
    return out
