"""What the portal's API and its page share: who a request is, the objects with their status, and the one way an
object is written or deleted (validated, stored, quota-checked, placed or replanned, in one transaction).

One `Portal` per app (`create_app` builds it; `deps.portal` hands it to each route); its methods run on worker
threads, never on the event loop.
"""

from __future__ import annotations

import json
import re
from typing import Callable

from starlette.datastructures import Headers

from automation.planning import conditions
from automation.planning.conditions import Observed
from automation.portal.auth import Principal, Tokens, TokensFile
from automation.portal.guard import Caller
from automation.portal.overlay import PendingOverlay
from automation.portal.placing import Placing
from automation.portal.replanner import Replanner
from automation.portal.service import PLURALS, ApiError, commit, compute_for, parse_body, quota_problem
from automation.portal.store import Store
from automation.portal.writes import WriteQueue
from fleet import tenancy
from fleet.api import KINDS
from fleet.stack_id import StackId, StackIdError
from fleet.validate import Fleet

COOKIE = "modelplane_session"  # a random session id; the token itself never leaves the sign-in form
NAME = re.compile(r"^[a-z0-9]([-a-z0-9.]{0,251}[a-z0-9])?$")
NAMESPACE = re.compile(r"^[a-z0-9]([-a-z0-9]{0,61}[a-z0-9])?$")


def stack_namespace(stack: str) -> str | None:
    """The namespace a stack belongs to, parsed from its identity (None: platform, gateway, legacy names: admins')."""
    try:
        return StackId.parse(stack).namespace
    except StackIdError:
        return None


def kind_of(plural: str, namespaced: bool) -> str:
    entry = PLURALS.get(plural)
    if entry is None or entry[1] != namespaced:
        raise ApiError(404, "NotFound", f"the server could not find the requested resource ({plural[:100]})")
    return entry[0]


def checked_names(namespace: str | None, name: str) -> None:
    """Names in a write's path are Kubernetes names (a 422, as the API server says it)."""
    if namespace is not None and not NAMESPACE.match(namespace):
        raise ApiError(422, "Invalid", f"namespace {namespace[:80]!r} is not a DNS-1123 label")
    if not NAME.match(name):
        raise ApiError(422, "Invalid", f"name {name[:80]!r} is not a DNS-1123 subdomain")


class Portal:
    def __init__(self, store: Store, tokens: Tokens | TokensFile, apply: bool, replan_worker=None):
        self.store, self.tokens, self.apply, self.replan_worker = store, tokens, apply, replan_worker
        self.placing = Placing()  # a ModelDeployment write is placed in its request against the ledger kept here
        self.replanner = Replanner(store, apply, self.placing, replan_worker)  # and the fleet is planned after it
        self.pending = PendingOverlay()
        self.writes = WriteQueue()  # requests' writes take turns here, in arrival order (writes.py)
        # the snapshot's version and its parsed form (megabytes at fleet scale, read by every request); replaced
        # whole, so a thread reading it never sees half of an update
        self._parsed: tuple[str, dict] = ("", {})

    # ---- who is asking -----------------------------------------------------------------------------------

    def authenticate(self, headers: Headers, cookies: dict[str, str]) -> Caller | None:
        header = headers.get("authorization", "")
        if header.lower().startswith("bearer "):
            who = self.tokens.resolve(header[7:].strip())
            return Caller(who, "bearer") if who else None
        session_id = cookies.get(COOKIE)
        if not session_id or len(session_id) > 100:
            return None
        with self.store.read() as conn:
            session = self.store.get_session(conn, session_id)
        who = self.tokens.by_digest(session["token_sha256"]) if session else None  # a revoked token ends its sessions
        return Caller(who, "session", session["csrf"]) if who and session else None

    def visible_stack(self, who: Principal, stack: str) -> bool:
        if who.admin:
            return True
        namespace = stack_namespace(stack)
        return namespace is not None and who.can_see(namespace)

    # ---- reads: objects with their status ----------------------------------------------------------------

    def parsed_snapshot(self, conn) -> dict:
        """The stored snapshot, parsed once per replan that stored it (its text is megabytes at fleet scale)."""
        version = self.store.get_state(conn, "snapshotVersion") or ""
        last_version, last = self._parsed
        if version != last_version or not version:
            last = json.loads(self.store.get_state(conn, "snapshot") or "{}")
            self._parsed = (version, last)
        return last

    def observation(self, conn) -> tuple[dict, Observed, list[dict]]:
        """The last replan's snapshot (with the writes placed since), how its stacks stand (the record the worker
        copied, latest runs), the gateways."""
        store = self.store
        snap = self.pending.over(self.parsed_snapshot(conn), store, conn)
        applied = json.loads(store.get_state(conn, "applied") or "{}")
        details = json.loads(store.get_state(conn, "appliedDetails") or "{}")
        latest: dict[str, dict] = {}
        for run in reversed(store.list_runs(conn, 1000)):
            latest[run["stack"]] = run
        observed = Observed({stack: {"fingerprint": fp, **details.get(stack, {})} for stack, fp in applied.items()},
                            latest)
        return snap, observed, store.list(conn, "InferenceGateway")

    def with_status(self, body: dict, conn, known: tuple | None = None) -> dict:
        """The object with its status; `known` is observation() already read for this request."""
        return conditions.with_status(body, *(known or self.observation(conn)))

    def statuses(self, bodies: list[dict], conn) -> list[dict]:
        known = self.observation(conn)  # read once per request, not once per object
        return [self.with_status(b, conn, known) for b in bodies]

    def composed_in(self, namespace: str, kind: str, conn, known: tuple | None = None) -> list[dict]:
        snap, observed, _ = known or self.observation(conn)
        return [o for o in conditions.composed(namespace, snap, observed) if o["kind"] == kind]

    def held_back(self, conn) -> list[str]:
        """What the last background replan found that a cluster would reject: while there is any, no run is queued."""
        return json.loads(self.store.get_state(conn, "problems") or "[]")

    # ---- writes --------------------------------------------------------------------------------------------

    def put(self, kind: str, namespace: str | None, name: str, raw: bytes) -> tuple[dict, int, list[str]]:
        """Validate, store, check the team's quota, place (a ModelDeployment) or replan; one transaction.
        Returns the object with its status, the HTTP code and the validation warnings."""
        checked_names(namespace, name)
        body = parse_body(raw, kind, namespace, name)
        sent_version = body["metadata"].pop("resourceVersion", None)
        return self._write(kind, namespace, name, lambda _existing: body, sent_version)

    def scale(self, namespace: str, name: str, replicas: int, sent_version) -> dict:
        """`kubectl scale`: spec.replicas set on the deployment as stored once this write holds the write lock, so a
        write that committed after the caller read the object is kept, never reverted (as Kubernetes' scale
        subresource updates the latest object). With `sent_version`, only if the object is still at it (409)."""
        checked_names(namespace, name)

        def scaled(existing: dict | None) -> dict:
            if existing is None:
                raise ApiError(404, "NotFound", f"modeldeployments {name[:80]!r} not found")
            body = json.loads(json.dumps({k: v for k, v in existing.items() if k != "status"}))  # a copy to change
            body["spec"]["replicas"] = replicas
            body["metadata"] = {k: v for k, v in body["metadata"].items()
                                if k in ("name", "namespace", "labels", "annotations")}
            return parse_body(json.dumps(body).encode(), "ModelDeployment", namespace, name)  # the same checks as a PUT

        return self._write("ModelDeployment", namespace, name, scaled, sent_version)[0]

    def _write(self, kind: str, namespace: str | None, name: str, build, sent_version) -> tuple[dict, int, list[str]]:
        answer, alone = self._put(kind, namespace, name, build, sent_version)
        self.replanner.want() if alone else self.replanner.planned()
        return answer

    def delete(self, kind: str, namespace: str, name: str) -> dict:
        checked_names(namespace or None, name)
        store, placing = self.store, self.placing
        with placing.write(store) as conn:
            one_deployment = self._placed_alone(conn, kind)
            if one_deployment:
                placing.sync(store, conn)
            if store.get(conn, kind, namespace, name) is None:
                raise ApiError(404, "NotFound", f"{kind} {name!r} not found")
            store.delete(conn, kind, namespace, name)
            if one_deployment:
                placing.place(store, conn, namespace, name, None)
            else:
                self._replan_now(conn, kind, namespace, name, None)
        self.replanner.want() if one_deployment else self.replanner.planned()
        return {"kind": "Status", "apiVersion": "v1", "status": "Success", "details": {"name": name, "kind": kind}}

    def _placed_alone(self, conn, kind: str) -> bool:
        """A ModelDeployment write is placed alone, and the fleet planned after it in the background, unless teams
        share one workload namespace (the reference's `Default`): then every team's objects must be composed to
        find a collision, and the whole fleet is planned inside the write."""
        if kind != "ModelDeployment":
            return False
        gateways = [KINDS["InferenceGateway"][0].model_validate(b) for b in self.store.list(conn, "InferenceGateway")]
        return tenancy.mode(Fleet(objects=list(gateways))) == tenancy.PER_TEAM

    def _replan_now(self, conn, kind: str, namespace: str, name: str, body: dict | None, subject=None) -> list[str]:
        """The whole fleet planned inside the write (a change that is not one deployment's); its warnings."""
        store, placing = self.store, self.placing
        before = store.ledger_version(conn)
        result = compute_for(store, conn, self.apply, self.replan_worker, subject)
        if result["problems"]:  # the change would make an object the cluster rejects: refuse it whole
            raise ApiError(422, "Invalid", "the change renders invalid objects",
                           [{"message": p} for p in result["problems"][:20]])
        changed = commit(store, conn, result)
        placing.track(store, conn, kind, namespace, name, body)
        if changed:
            placing.reconciled(store, conn, before, changed)
        return result["warnings"]

    def _put(self, kind: str, namespace: str | None, name: str, build: Callable[[dict | None], dict],
             sent_version) -> tuple[tuple, bool]:
        """`build(existing)`: the body to store, from the object as stored now, read inside this transaction (a
        read-modify-write made from an earlier read could revert a write that committed in between)."""
        store, placing = self.store, self.placing
        with placing.write(store) as conn:
            one_deployment = self._placed_alone(conn, kind)
            if one_deployment:
                placing.sync(store, conn)
            existing = store.get(conn, kind, namespace or "", name)
            body = build(existing)
            self._refuse_conflicts(conn, kind, namespace, name, existing, sent_version)
            for key in ("uid", "generation", "creationTimestamp"):
                body["metadata"].pop(key, None)
            saved = store.put(conn, kind, namespace or "", body, existing)
            if namespace is not None and (
                    exceeded := quota_problem(store, conn, namespace, self.tokens.quotas.get(namespace))):
                raise ApiError(403, "Forbidden", exceeded)  # rolled back with the rest of the transaction
            if one_deployment:
                placed = placing.place(store, conn, namespace or "", name, saved)
                if placed.problems:  # the change would make an object the cluster rejects: refuse it whole
                    raise ApiError(422, "Invalid", "the change renders invalid objects",
                                   [{"message": p} for p in placed.problems[:20]])
                warnings = placed.warnings
            else:
                warnings = self._replan_now(conn, kind, namespace or "", name, saved, subject=(kind, name))
            return (self.with_status(saved, conn), (200 if existing else 201), warnings), one_deployment

    def _refuse_conflicts(self, conn, kind: str, namespace: str | None, name: str, existing: dict | None,
                          sent_version) -> None:
        if kind == "ModelEndpoint" and existing is None and any(
                ep.get("composed") and ep["namespace"] == namespace and ep["name"] == name
                for ep in json.loads(self.store.get_state(conn, "snapshot") or "{}").get("endpoints", [])):
            raise ApiError(409, "Conflict", f"ModelEndpoint {name!r} is composed for a replica of a ModelDeployment "
                                            "and is read-only; give yours another name")
        if sent_version is not None and (existing is None or existing["metadata"]["resourceVersion"] != str(sent_version)):
            raise ApiError(409, "Conflict", f"the object has been modified; resourceVersion {sent_version} is stale, "
                                            "get the latest and try again")
