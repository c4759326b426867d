"""What the portal does with a request: validate, authorize, store, replan, queue stack runs.

The placements of every plan are stored as reservations, one row per deployment, that the next plan
keeps: capacity is one ledger, and a submission is placed against everything accepted before it. A
ModelDeployment write is placed alone inside its request (automation/portal/placing.py) and the whole
fleet planned after it in the background (automation/portal/replanner.py); any other write replans the
whole fleet inside its serialized transaction. Both store a full replan with `commit`.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field as dataclass_field, replace
from typing import Callable, Mapping, NamedTuple

from sqlalchemy.engine import Connection

from automation.planning.conditions import snapshot
from automation.portal.state import (APPLIED, CAPACITY, CLUSTER_GATEWAYS, DESIRED, PLAN, PLANNED, POLICIES, PROBLEMS,
                                     RESOURCE_VERSION, SNAPSHOT, SNAPSHOT_VERSION)
from automation.portal.auth import Quota
from automation.portal.store import Store
from automation.record.applied import replica_from_dict
from automation.planning.plan_cache import PlanCache
from automation.planning.stacks import changes, desired_state
from fleet.api import KINDS, Resource
from fleet.capacity import LiveCapacity
from fleet.errors import ModelplaneError
from fleet.loader import parse_text
from fleet.plan import Cause, Plan
from fleet.plan_output import plan_to_dict
from fleet.policy_preview import policies_to_dict
from fleet.validate import Fleet, cross_object_problems, validate_document
from workloads.gateways import Gateways
from workloads.render import model_stack

MIGRATED = "modelplane.ai/migrated-from"  # on a TeamPolicy read from the tokens file's quotas, never stored
API = "/apis/modelplane.ai/v1alpha1"  # the group and version every manifest names
MAX_BODY = 1024 * 1024  # the same cap as automation.portal.guard.MAX_BODY, for callers that skip the guard
MAX_OBJECT = 1536 * 1024  # an object once parsed (aliases expanded): etcd's default request limit, as Kubernetes
# metadata the API server sets and ignores from a client (on a deletion, which here removes the object at once)
SERVER_METADATA = ("deletionTimestamp", "deletionGracePeriodSeconds")
# metadata that would promise what this portal does not do: refused (docs/portal.md, "Threat model")
UNKEPT_METADATA = {
    "finalizers": "this portal has no controller that removes finalizers: the object could never be deleted",
    "ownerReferences": "this portal has no garbage collector: the owner's deletion would never delete this object",
}
PLURALS = {
    "modeldeployments": ("ModelDeployment", True), "modelservices": ("ModelService", True),
    "modelcaches": ("ModelCache", True), "modelendpoints": ("ModelEndpoint", True),
    "inferenceclusters": ("InferenceCluster", False), "inferenceclasses": ("InferenceClass", False),
    "inferencegateways": ("InferenceGateway", False), "teampolicies": ("TeamPolicy", False),
}


class ApiError(ModelplaneError):
    def __init__(self, code: int, reason: str, message: str, causes: list[dict] | None = None,
                 headers: dict[str, str] | None = None):
        super().__init__(message)
        self.code, self.reason, self.message, self.causes = code, reason, message, causes or []
        self.headers = headers

    def __reduce__(self) -> tuple[Callable[..., ApiError], tuple[type[ApiError], tuple, dict]]:
        """Raised in the writer process and answered by the serving one (writer.py): pickled whole, subclasses too."""
        return _restored, (type(self), self.args, self.__dict__)

    def status(self) -> dict:
        out = {"kind": "Status", "apiVersion": "v1", "status": "Failure", "message": self.message,
               "reason": self.reason, "code": self.code}
        if self.causes:
            out["details"] = {"causes": self.causes}
        return out


def _restored(cls: type[ApiError], args: tuple, state: dict) -> ApiError:
    error = Exception.__new__(cls)
    error.args = args
    error.__dict__.update(state)
    return error


def parse_body(raw: bytes, kind: str, namespace: str | None, name: str) -> dict:
    """One object from a JSON or YAML body, validated, or ApiError with located messages."""
    if len(raw) > MAX_BODY:
        raise ApiError(413, "RequestEntityTooLarge", f"the body is larger than {MAX_BODY} bytes")
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError:
        raise ApiError(400, "BadRequest", "the body is not UTF-8 text") from None
    documents, problems = parse_text(text, "request", max_expanded=MAX_OBJECT)
    documents = [d for d in documents if d.data is not None]
    if problems:
        raise ApiError(400, "BadRequest", str(problems[0]))
    if len(documents) != 1:
        raise ApiError(400, "BadRequest", f"expected one object in the body, found {len(documents)}")
    doc = documents[0]
    data = doc.data
    if not isinstance(data, dict):
        raise ApiError(400, "BadRequest", "the body must be an object")
    if "metadata" in data and not isinstance(data["metadata"], dict):
        raise ApiError(400, "BadRequest", "metadata must be an object")
    if len(json.dumps(data)) > MAX_OBJECT:
        raise ApiError(413, "RequestEntityTooLarge", f"the object is larger than {MAX_OBJECT} bytes")
    if data.get("kind") != kind:
        raise ApiError(400, "BadRequest", f"the body's kind {data.get('kind')!r} does not match the path ({kind})")
    meta: dict = data["metadata"] if isinstance(data.get("metadata"), dict) else {}
    if meta.get("name") not in (None, name):
        raise ApiError(400, "BadRequest", f"metadata.name {meta.get('name')!r} does not match the path ({name!r})")
    if namespace is not None and meta.get("namespace") not in (None, namespace):
        raise ApiError(400, "BadRequest", f"metadata.namespace {meta.get('namespace')!r} does not match the path ({namespace!r})")
    for field, why in UNKEPT_METADATA.items():
        if meta.get(field):
            raise ApiError(422, "Invalid", f"{kind} {name!r} is invalid: metadata.{field}: Forbidden: {why}",
                           [{"field": f"metadata.{field}", "message": f"Forbidden: {why}"}])
    # completed as a copy: the document's data stays as parsed, which its map of lines is made from when asked
    data = {key: value for key, value in data.items() if key != "status"}  # status is the portal's to write
    data["metadata"] = {**{k: v for k, v in meta.items() if k not in SERVER_METADATA},
                        "name": name, **({"namespace": namespace} if namespace is not None else {})}
    obj, found, _ = validate_document(replace(doc, data=data))
    if found or obj is None:
        errors = [p for p in found if not p.warning] or found
        raise ApiError(422, "Invalid", f"{kind} {name!r} is invalid",
                       [{"field": p.path, "message": p.message, "line": p.line, "text": str(p)} for p in errors])
    return data


def migrated_policies(quotas: Mapping[str, Quota], stored: list[dict]) -> list[dict]:
    """The tokens file's old `quotas:` (deprecated), each read as the TeamPolicy {gpus: [{count: maxGPUs}],
    maxDeployments} of its namespace, for a namespace no stored TeamPolicy governs (its own, or a default one)."""
    if not quotas or any((p.get("spec") or {}).get("defaultForNamespaces") for p in stored):
        return []
    named = {p["metadata"]["name"] for p in stored}
    out = []
    for namespace, quota in sorted(quotas.items()):
        if namespace in named or (quota.maxGPUs is None and quota.maxDeployments is None):
            continue
        spec: dict = {"gpus": [{"count": quota.maxGPUs}] if quota.maxGPUs is not None else []}
        if quota.maxDeployments is not None:
            spec["maxDeployments"] = quota.maxDeployments
        out.append({"apiVersion": "modelplane.ai/v1alpha1", "kind": "TeamPolicy",
                    "metadata": {"name": namespace, "annotations": {MIGRATED: "quotas"}}, "spec": spec})
    return out


def policy_bodies(store: Store, conn: Connection, quotas: Mapping[str, Quota]) -> list[dict]:
    """Every TeamPolicy in force: those stored, and the tokens file's quotas read as policies (`migrated_policies`)."""
    stored = store.list(conn, "TeamPolicy")
    return stored + migrated_policies(quotas, stored)


def quota_problem(store: Store, conn: Connection, namespace: str, policies: list[dict]) -> str | None:
    """Why the namespace's stored ModelDeployments are more than its TeamPolicy's `spec.maxDeployments` (checked
    inside the write), or None. `policies`: every policy in force (`policy_bodies`). Its GPU budgets are the
    placement's to enforce (`over_budget`)."""
    from fleet.team_policy import Policies

    policy = Policies(_validated_policies(policies)).for_namespace(namespace)
    if policy is None or policy.spec.maxDeployments is None:
        return None
    count = len(store.list(conn, "ModelDeployment", namespace))
    if count > policy.spec.maxDeployments:
        return (f"namespace {namespace!r} is over TeamPolicy {policy.name} spec.maxDeployments: {count} "
                f"ModelDeployments, at most {policy.spec.maxDeployments}")
    return None


def _validated_policies(bodies: list[dict]) -> list:
    from fleet.api.policy import TeamPolicy

    return [TeamPolicy.model_validate({k: v for k, v in b.items() if k != "status"}) for b in bodies]


def over_budget(plan: Plan) -> str | None:
    """Why a write's one-deployment placement is refused: a replica it left unscheduled because it would take the
    team over a TeamPolicy GPU budget (the reason names the policy and the field), or None."""
    from fleet.plan import Cause

    for u in plan.unscheduled:
        for reason in u.reasons:
            if getattr(reason, "cause", None) is Cause.OVER_BUDGET:
                return f"{u.deployment}: {u.missing} replica(s) cannot be placed: {reason}"
    return None


def load_fleet(stored: list[dict], validated: dict[tuple, Resource] | None = None) -> Fleet:
    """`validated`: objects validated before, by kind, namespace, name, uid and resourceVersion (every change of a
    stored object moves its resourceVersion); refilled with this fleet's."""
    fleet = Fleet()
    seen: dict[tuple, Resource] = {}
    for body in stored:
        meta = body.get("metadata") or {}
        key = (body["kind"], meta.get("namespace"), meta.get("name"), meta.get("uid"), meta.get("resourceVersion"))
        obj = validated.get(key) if validated is not None and key[3] and key[4] else None
        if obj is None:
            obj = KINDS[body["kind"]][0].model_validate({k: v for k, v in body.items() if k != "status"})
        seen[key] = obj
        fleet.objects.append(obj)
    if validated is not None:
        validated.clear()
        validated.update(seen)
    return fleet


class Warm:
    """What this process keeps between replans (the portal's replan worker plans after every write): validated
    objects, and what the last plan computed (`PlanCache`: the scheduler's memo, each stack's inputs and
    fingerprint, the platform and gateway stacks with the digest of what they were computed from). Each is reused
    only for the same inputs, so a replan is the same with it as without it (tests/test_portal_incremental.py)."""

    def __init__(self) -> None:
        self.validated: dict[tuple, Resource] = {}
        self.cache = PlanCache(known={})


WARM = Warm()


class Run(NamedTuple):
    """A stack run a replan queues."""
    stack: str
    operation: str  # up | destroy
    fingerprint: str  # "" for a destroy


@dataclass(frozen=True)
class ReplanResult:
    """What a full replan stores (`commit`) and what a write is answered with. It crosses back from the replan
    worker's process pickled; the documents that are stored as they are come as their JSON text, which crosses at
    memcpy speed and is written without encoding again."""
    deployments: dict[str, tuple[str, str]]  # each deployment's reservations row: (replicas as recorded, plan part)
    plan_json: str  # the whole plan, as `plan -o json` gives it
    fingerprints_json: str  # each stack's desired fingerprint
    snapshot_json: str  # what statuses are read from (conditions.snapshot)
    problems: list[str]  # objects a cluster would reject: then no run is queued
    runs: list[Run]
    warnings: list[str]  # validation warnings about the written object, seen with the whole fleet
    policies_json: str = ""  # the plan's `policies` (the fleet page reads them without parsing the plan)
    # deployment -> its replicas the plan left unscheduled over a TeamPolicy budget, with the budget's reason (by
    # the reason's cause: the stored plan holds reasons as text)
    over_budget: dict[str, str] = dataclass_field(default_factory=dict)


Subject = tuple[str, str, str]  # the written object: kind, namespace, name
# what compute_replan reads, as stored: objects' texts, reservations, desired fingerprints, applied fingerprints,
# apply, the written object, the clusters' gateway addresses, their live capacity (replan_inputs)
ReplanInputs = tuple[list[str], str, str, str, bool, Subject | None, str, str]
Compute = Callable[..., ReplanResult]  # compute_replan, here or in the replan worker's process


def compute_replan(stored: list[str], placements: str, desired_before: str, applied: str, apply: bool,
                   subject: Subject | None = None, gateways: str = "{}", capacity: str = "") -> ReplanResult:
    """The pure part of a replan, on plain JSON-able inputs and outputs, so that it can run in another
    process (the portal's replan worker: the CPU-heavy planning then never holds the interpreter that
    answers reads). `gateways`: the clusters' gateway addresses as the record says (the worker's copy), so an
    endpoints stack's fingerprint is the one its program records and an unrelated write queues nothing.
    `capacity`: the clusters' live capacity as last read (a snapshot's JSON; "": declared)."""
    warm = WARM
    fleet = load_fleet([json.loads(b) for b in stored], warm.validated)  # texts as stored: decoded here
    fleet.live = LiveCapacity.from_json(capacity) if capacity else None
    reserved = [replica_from_dict(p) for p in json.loads(placements or "[]")]
    addresses = Gateways(json.loads(gateways or "{}"))
    desired = desired_state(fleet, reserved, cache=warm.cache, gateways=addresses)
    before = json.loads(desired_before or "{}")
    # objects of unchanged stacks were checked when they were accepted: check only what this write changed
    changed = {name for name, spec in desired.specs.items() if before.get(name) != spec.fingerprint}
    if changed & desired.reused.keys():  # stacks not composed (same inputs as last time) yet changed since accepted
        desired = desired_state(fleet, reserved, cache=replace(warm.cache, known={}), gateways=addresses)
    warm.cache.remember(desired.known(), desired.platform)
    plan, specs = desired.plan, desired.specs
    fingerprints = {name: spec.fingerprint for name, spec in specs.items()}
    problems = desired.problems_in(changed)
    runs: list[Run] = []
    if apply and not problems:
        for change in changes(specs, json.loads(applied or "{}")):
            if change.change in ("create", "update"):
                runs.append(Run(change.name, "up", fingerprints[change.name]))
            elif change.change == "delete":
                runs.append(Run(change.name, "destroy", ""))
    # the validation warnings about the written object (`subject`: kind, namespace, name), seen with the whole fleet
    written = next((o for o in fleet.of(subject[0]) if o.name == subject[2] and (o.namespace or "") == subject[1]),
                   None) if subject else None
    warnings = [f"{p.path}: {p.message}" for p in cross_object_problems(fleet, about=written)
                if p.warning] if written is not None else []
    whole = plan_to_dict(plan)
    if (policies := policies_to_dict(fleet, plan)) is not None:  # as `plan -o json` has it: the fleet page's table
        whole["policies"] = policies
    # documents as JSON text: written as they are, and text crosses from the worker process at memcpy speed
    return ReplanResult(deployments=_rows(fleet, plan, whole), plan_json=json.dumps(whole),
                        fingerprints_json=json.dumps(fingerprints), snapshot_json=json.dumps(snapshot(desired)),
                        problems=problems, runs=runs, warnings=warnings,
                        policies_json=json.dumps(policies) if policies is not None else "",
                        over_budget={u.deployment: f"{u.deployment}: {u.missing} replica(s) cannot be placed: {r}"
                                     for u in plan.unscheduled for r in u.reasons[:1] if r.cause is Cause.OVER_BUDGET})


def _rows(fleet: Fleet, plan: Plan, whole: dict) -> dict[str, tuple[str, str]]:
    """Per deployment, its row of the reservations table: (its replicas as recorded, its part of the plan)."""
    parts: dict[str, dict[str, list]] = {f"{d.namespace}/{d.name}": {"replicas": [], "unscheduled": [], "dropped": []}
                                         for d in fleet.of("ModelDeployment")}
    recorded: dict[str, list[dict]] = {key: [] for key in parts}
    for replica, shown in zip(plan.replicas, whole["replicas"]):
        recorded[replica.key].append(replica.recorded().to_dict())
        parts[replica.key]["replicas"].append(shown)
    for section in ("unscheduled", "dropped"):
        for entry in whole[section]:
            if entry["deployment"] in parts:
                parts[entry["deployment"]][section].append(entry)
    return {key: (json.dumps(recorded[key]), json.dumps(parts[key])) for key in parts}


def replan(store: Store, conn: Connection, apply: bool) -> None:
    """Plan the whole fleet with the stored reservations and store it (a fleet stored directly: benchmarks, tests)."""
    commit(store, conn, compute_for(store, conn, apply))


def replan_inputs(store: Store, conn: Connection, apply: bool, subject: Subject | None = None,
                  quotas: Mapping[str, Quota] | None = None) -> ReplanInputs:
    """`quotas`: the tokens file's (deprecated), planned with as the TeamPolicies they are read as."""
    stored = store.list_texts(conn)
    if quotas:
        stored = stored + [json.dumps(b) for b in migrated_policies(quotas, store.list(conn, "TeamPolicy"))]
    return (stored, store.reservations_text(conn), DESIRED.text(conn), APPLIED.text(conn), apply, subject,
            CLUSTER_GATEWAYS.text(conn), CAPACITY.text(conn))


def compute_for(store: Store, conn: Connection, apply: bool, compute: Compute | None = None,
                subject: Subject | None = None, quotas: Mapping[str, Quota] | None = None) -> ReplanResult:
    inputs = replan_inputs(store, conn, apply, subject, quotas)
    return compute(*inputs) if compute else compute_replan(*inputs)


def commit(store: Store, conn: Connection, result: ReplanResult,
           planned_at: int | None = None) -> dict[str, list[dict]] | None:
    """Store a full replan: the plan, the status snapshot, the desired fingerprints, each deployment's row (none
    pending any more) and the runs. Returns the deployments whose reservations it changed (their replicas).

    `planned_at`: the resourceVersion the replan read the fleet at, when writes placed deployments since. Their
    rows stay pending (the next replan plans after them); the rest is stored if the replan keeps every other
    reservation as it is, so the two cannot claim the same capacity. Otherwise nothing is stored: None."""
    rows = store.reservation_rows(conn)
    newer = store.pending_since(conn, planned_at) if planned_at is not None else set()
    mine = {key: row for key, row in result.deployments.items() if key not in newer}
    gone = rows.keys() - result.deployments.keys() - newer
    changed: dict[str, list[dict]] = {}
    for deployment, (replicas, _) in mine.items():
        if rows.get(deployment, ("[]",))[0] != replicas:
            changed[deployment] = json.loads(replicas)
    changed.update({deployment: [] for deployment in gone if rows[deployment][0] != "[]"})
    if planned_at is not None and changed:
        return None
    PLAN.set_text(conn, result.plan_json)
    SNAPSHOT.set_text(conn, result.snapshot_json)
    SNAPSHOT_VERSION.set(conn, SNAPSHOT_VERSION.get(conn) + 1)
    DESIRED.set_text(conn, result.fingerprints_json)
    store.store_planned(conn, {deployment: (replicas, part) for deployment, (replicas, part) in mine.items()
                               if rows.get(deployment) != (replicas, part)}, rows)
    for deployment in gone:
        store.delete_reservation(conn, deployment)
    store.settle_pending(conn, planned_at)
    PLANNED.set(conn, planned_at if planned_at is not None else RESOURCE_VERSION.get(conn))
    if changed:
        store.bump_ledger(conn)
    PROBLEMS.set(conn, result.problems)
    POLICIES.set_text(conn, result.policies_json)
    skipped = {model_stack(*key.split("/", 1)) for key in newer}  # planned again after their newer writes
    for stack, operation, fingerprint in result.runs:
        if stack not in skipped:
            store.enqueue(conn, stack, operation, fingerprint)
    return changed
