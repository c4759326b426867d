"""What the portal does with a request: validate, authorize, store, replan, queue stack runs.

Every accepted write replans the whole fleet inside the same serialized transaction, and the
placements of that plan are stored as reservations that the next plan keeps: capacity is one
ledger, and a submission is planned against everything accepted before it.
"""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass

from automation.stacks import changes, desired_state
from automation.state import replica_from_dict
from fleet.api import KINDS
from fleet.loader import parse_text
from fleet.plan_output import plan_to_dict
from fleet.stack_id import StackId
from fleet.validate import Fleet, validate_document

MAX_BODY = 1024 * 1024
PLURALS = {
    "modeldeployments": ("ModelDeployment", True), "modelservices": ("ModelService", True),
    "modelcaches": ("ModelCache", True), "modelendpoints": ("ModelEndpoint", True),
    "inferenceclusters": ("InferenceCluster", False), "inferenceclasses": ("InferenceClass", False),
    "inferencegateways": ("InferenceGateway", False),
}


class ApiError(Exception):
    def __init__(self, code: int, reason: str, message: str, causes: list[dict] | None = None):
        super().__init__(message)
        self.code, self.reason, self.message, self.causes = code, reason, message, causes or []

    def status(self) -> dict:
        out = {"kind": "Status", "apiVersion": "v1", "status": "Failure", "message": self.message,
               "reason": self.reason, "code": self.code}
        if self.causes:
            out["details"] = {"causes": self.causes}
        return out


def parse_body(raw: bytes, kind: str, namespace: str | None, name: str) -> dict:
    """One object from a JSON or YAML body, validated, or ApiError with located messages."""
    if len(raw) > MAX_BODY:
        raise ApiError(413, "RequestEntityTooLarge", f"the body is larger than {MAX_BODY} bytes")
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError:
        raise ApiError(400, "BadRequest", "the body is not UTF-8 text") from None
    documents, problems = parse_text(text, "request")
    documents = [d for d in documents if d.data is not None]
    if problems:
        raise ApiError(400, "BadRequest", str(problems[0]))
    if len(documents) != 1:
        raise ApiError(400, "BadRequest", f"expected one object in the body, found {len(documents)}")
    doc = documents[0]
    data = doc.data
    if not isinstance(data, dict):
        raise ApiError(400, "BadRequest", "the body must be an object")
    if data.get("kind") != kind:
        raise ApiError(400, "BadRequest", f"the body's kind {data.get('kind')!r} does not match the path ({kind})")
    meta: dict = data["metadata"] if isinstance(data.get("metadata"), dict) else {}
    if meta.get("name") not in (None, name):
        raise ApiError(400, "BadRequest", f"metadata.name {meta.get('name')!r} does not match the path ({name!r})")
    if namespace is not None and meta.get("namespace") not in (None, namespace):
        raise ApiError(400, "BadRequest", f"metadata.namespace {meta.get('namespace')!r} does not match the path ({namespace!r})")
    data.setdefault("metadata", {})["name"] = name
    if namespace is not None:
        data["metadata"]["namespace"] = namespace
    data.pop("status", None)  # status is the portal's to write
    obj, found, _ = validate_document(doc)
    if found or obj is None:
        errors = [p for p in found if not p.warning] or found
        raise ApiError(422, "Invalid", f"{kind} {name!r} is invalid",
                       [{"field": p.path, "message": p.message, "line": p.line, "text": str(p)} for p in errors])
    return data


def load_fleet(stored: list[dict]) -> Fleet:
    fleet = Fleet()
    for body in stored:
        model = KINDS[body["kind"]][0]
        fleet.objects.append(model.model_validate({k: v for k, v in body.items() if k != "status"}))
    return fleet


@dataclass
class Replanned:
    plan: dict
    stacks: dict[str, str]  # stack -> fingerprint
    problems: list[str]


def replan(store, conn, apply: bool) -> Replanned:
    """Plan the whole fleet with the stored reservations, store the new ones, queue what must change."""
    fleet = load_fleet(store.list(conn))
    reserved = [replica_from_dict(p) for p in json.loads(store.get_state(conn, "placements") or "[]")]
    desired = desired_state(fleet, reserved)
    plan, specs = desired.plan, desired.specs
    fingerprints = {name: spec.fingerprint for name, spec in specs.items()}
    before = json.loads(store.get_state(conn, "desired") or "{}")
    # objects of unchanged stacks were checked when they were accepted: check only what this write changed
    problems = desired.problems_in({name for name, fp in fingerprints.items() if before.get(name) != fp})
    store.set_state(conn, "placements", json.dumps([asdict(r.recorded()) for r in plan.replicas]))
    document = plan_to_dict(plan)
    store.set_state(conn, "plan", json.dumps(document))
    store.set_state(conn, "desired", json.dumps(fingerprints))
    if apply and not problems:
        applied = json.loads(store.get_state(conn, "applied") or "{}")
        for change in changes(specs, applied):
            if change.change in ("create", "update"):
                store.enqueue(conn, change.name, "up", fingerprints[change.name])
            elif change.change == "delete":
                store.enqueue(conn, change.name, "destroy", "")
    return Replanned(document, fingerprints, problems)


def object_status(kind: str, body: dict, plan: dict, runs_by_stack: dict[str, dict], gateway: str | None,
                  cluster_gateways: dict[str, str] | None = None) -> dict:
    meta = body["metadata"]
    ns, name = meta.get("namespace", ""), meta["name"]
    if kind == "ModelDeployment":
        key = f"{ns}/{name}"
        replicas = [r for r in plan.get("replicas", []) if r["deployment"] == key]
        missing = next((u for u in plan.get("unscheduled", []) if u["deployment"] == key), None)
        stack = str(StackId.model(ns, name))
        return {"replicas": {"desired": body["spec"]["replicas"], "placed": len(replicas)},
                "placement": [{**{k: r[k] for k in ("name", "cluster", "index", "engines")},
                               "endpoint": _endpoint(ns, r, cluster_gateways or {})} for r in replicas],
                "unscheduled": {"missing": missing["missing"], "reasons": missing["reasons"]} if missing else None,
                "stack": _stack_state(stack, runs_by_stack)}
    if kind == "ModelService":
        stack = str(StackId.service(ns, name))
        address = f"http://{gateway or 'fleet-gateway.pending.modelplane.invalid'}/{ns}/{name}"
        return {"address": address, "stack": _stack_state(stack, runs_by_stack)}
    if kind == "ModelCache":
        return {"stack": _stack_state(str(StackId.cache(ns, name)), runs_by_stack)}
    if kind == "InferenceCluster":
        return {"stack": _stack_state(str(StackId.platform(name)), runs_by_stack)}
    return {}


def _endpoint(namespace: str, replica: dict, cluster_gateways: dict[str, str]) -> str:
    """The replica's URL behind its cluster's gateway (a marked placeholder until the address is known)."""
    address = cluster_gateways.get(replica["cluster"]) or f"{replica['cluster']}.gateway.pending.modelplane.invalid"
    return f"http://{address}/{namespace}/{replica['name']}/v1"


def _stack_state(stack: str, runs_by_stack: dict[str, dict]) -> dict:
    run = runs_by_stack.get(stack)
    return {"name": stack, "lastRun": {"id": run["id"], "status": run["status"], "operation": run["operation"]} if run else None}
