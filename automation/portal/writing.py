"""The one way an object is written or deleted: validated, stored, quota-checked, placed (a ModelDeployment, against
the capacity ledger, placing.py) or the fleet replanned, in one transaction. The write verbs run in the writer
process when the portal has one (writer.py), else in this one, on worker threads."""

from __future__ import annotations

import json
import re
import secrets
from functools import wraps
from typing import Any, Callable, Protocol, TypeVar

from sqlalchemy.engine import Connection

from automation.portal import patches
from automation.portal.auth import Tokens, TokensFile
from automation.portal.placing import Placing
from automation.portal.reads import Reads
from automation.portal.replanner import Replanner
from automation.portal.service import (MAX_BODY, MAX_OBJECT, PLURALS, ApiError, Compute, ReplanResult, Subject, commit,
                                      compute_for, over_budget, parse_body, policy_bodies, quota_problem)
from automation.portal.state import SNAPSHOT
from automation.portal.store import Store
from fleet import tenancy
from fleet.api import KINDS
from fleet.loader import parse_text
from fleet.validate import Fleet

T = TypeVar("T")
Answer = tuple[dict, int, list[str]]  # the object with its status, the HTTP code, the validation warnings
Build = Callable[[dict | None], dict]  # the body to store, from the object as stored inside the write

NAME = re.compile(r"^[a-z0-9]([-a-z0-9.]{0,251}[a-z0-9])?$")
GENERATED = "bcdfghjklmnpqrstvwxz2456789"  # the letters a generated name's suffix is made of, as Kubernetes'
NAMESPACE = re.compile(r"^[a-z0-9]([-a-z0-9]{0,61}[a-z0-9])?$")


class Writer(Protocol):
    """Where the write verbs run when not in this process (automation/portal/writer.py's `WriteWorker`)."""

    def call(self, verb: str, args: tuple, kwargs: dict) -> Any: ...


def checked_names(namespace: str | None, name: str) -> None:
    """Names in a write's path are Kubernetes names (a 422, as the API server says it)."""
    if namespace is not None and not NAMESPACE.match(namespace):
        raise ApiError(422, "Invalid", f"namespace {namespace[:80]!r} is not a DNS-1123 label")
    if not NAME.match(name):
        raise ApiError(422, "Invalid", f"name {name[:80]!r} is not a DNS-1123 subdomain")


def forwarded(verb: Callable[..., T]) -> Callable[..., T]:
    """A write verb: run in the writer process when the portal has one (writer.py), else here."""
    @wraps(verb)
    def run(self: Writes, *args: Any, **kwargs: Any) -> T:
        if self.writer is not None:
            return self.writer.call(verb.__name__, args, kwargs)
        return verb(self, *args, **kwargs)
    return run


class Writes:
    def __init__(self, store: Store, tokens: Tokens | TokensFile, apply: bool, reads: Reads,
                 replan_worker: Compute | None = None, writer: Writer | None = None) -> None:
        self.store, self.tokens, self.apply, self.reads, self.replan_worker = store, tokens, apply, reads, replan_worker
        self.writer = writer  # writes run there (with the ledger and the replanner), or here when None
        # a ModelDeployment write is placed in its request against the ledger kept here (left empty in a serving
        # process whose writes run in a writer: writer.py)
        self.placing = Placing(lambda: self.tokens.quotas)
        # and the fleet is planned after it, in the background, where the writes run
        self.replanner = Replanner(store, apply, self.placing, replan_worker) if writer is None else None

    @forwarded
    def put(self, kind: str, namespace: str | None, name: str, raw: bytes, manager: str = "modelplane-portal",
            dry_run: bool = False) -> Answer:
        """Validate, store, check the team's quota, place (a ModelDeployment) or replan; one transaction.
        Returns the object with its status, the HTTP code and the validation warnings."""
        checked_names(namespace, name)
        body = parse_body(raw, kind, namespace, name)
        sent_version = body["metadata"].pop("resourceVersion", None)
        return self._write(kind, namespace, name, lambda _existing: body, sent_version, manager, dry_run)

    @forwarded
    def create(self, kind: str, namespace: str | None, raw: bytes, manager: str,
               dry_run: bool = False) -> Answer:
        """POST: a new object named by its body, or by `generateName` and five random characters (tried again on
        the rare name already taken, as Kubernetes does); 409 AlreadyExists if the name is taken."""
        name, prefix = body_name(raw, kind, namespace)
        for attempt in range(1 if name else 8):
            chosen = name or prefix[:58] + "".join(secrets.choice(GENERATED) for _ in range(5))
            checked_names(namespace, chosen)
            body = parse_body(raw, kind, namespace, chosen)
            body["metadata"].pop("resourceVersion", None)  # a create's is the server's to set

            def fresh(existing: dict | None, body: dict = body, chosen: str = chosen) -> dict:
                if existing is not None:
                    raise already_exists(kind, chosen)
                return body

            try:
                return self._write(kind, namespace, chosen, fresh, None, manager, dry_run)
            except ApiError as exc:
                if exc.reason != "AlreadyExists" or name or attempt == 7:
                    raise
        raise AssertionError("unreachable")

    @forwarded
    def patch(self, kind: str, namespace: str | None, name: str, raw: bytes, content_type: str, manager: str | None,
              force: bool, dry_run: bool = False) -> Answer:
        """PATCH (merge, JSON or apply patch), applied to the object as stored inside the write transaction; a
        `metadata.resourceVersion` the patched object carries is a precondition (409 if the object moved on)."""
        checked_names(namespace, name)
        media = content_type.split(";")[0].strip().lower()
        if media not in patches.PATCH_TYPES:  # strategic merge patch too: custom resources have no patch strategy
            raise patches.unsupported(media)
        if force and media != patches.APPLY:
            raise ApiError(422, "Invalid", "force: Forbidden: may not be specified for non-apply patch")
        if media == patches.APPLY:
            if not manager:
                raise ApiError(422, "Invalid", "PatchOptions.meta.k8s.io \"\" is invalid: fieldManager: Required "
                                               "value: is required for apply patch")
            config = apply_config(raw, kind, namespace, name)
            applier = manager

            def applied(existing: dict | None) -> dict:
                sent = (config.get("metadata") or {}).get("resourceVersion")  # the config's own is a precondition
                if sent is not None and (existing is None or str(sent) != existing["metadata"]["resourceVersion"]):
                    raise stale(sent)
                return self._patched(kind, namespace, name, existing, patches.apply(existing, config, applier, force))

            return self._write(kind, namespace, name, applied, None, manager, dry_run, applied=True)
        if media == patches.MERGE:
            try:
                merge = json.loads(raw)
            except (ValueError, RecursionError):
                raise ApiError(400, "BadRequest", "the body is not a JSON merge patch") from None

        def patched(existing: dict | None) -> dict:
            if existing is None:
                raise ApiError(404, "NotFound", f"{kind} {name[:80]!r} not found")
            current = json.loads(json.dumps(existing))  # a copy to change
            result = patches.merge_patch(current, merge) if media == patches.MERGE else patches.json_patch(current, raw)
            return self._patched(kind, namespace, name, existing, result)

        return self._write(kind, namespace, name, patched, None, manager or "unknown", dry_run)

    def _patched(self, kind: str, namespace: str | None, name: str, existing: dict | None, result: object) -> dict:
        """A patched object, held to its resourceVersion (a precondition) and to the same checks as a PUT."""
        if not isinstance(result, dict) or not isinstance(result.get("metadata", {}), dict):
            raise ApiError(422, "Invalid", "the patched object is not an object with metadata")
        sent = result.get("metadata", {}).pop("resourceVersion", None)
        if sent is not None and (existing is None or str(sent) != existing["metadata"]["resourceVersion"]):
            raise stale(sent)
        return parse_body(json.dumps(result).encode(), kind, namespace, name)

    @forwarded
    def scale(self, namespace: str, name: str, replicas: int | None, sent_version: object, raw: bytes = b"",
              content_type: str = "", manager: str = "modelplane-portal", dry_run: bool = False) -> dict:
        """`kubectl scale`: spec.replicas set on the deployment as stored once this write holds the write lock, so a
        write that committed after the caller read the object is kept, never reverted (as Kubernetes' scale
        subresource updates the latest object). With `sent_version`, only if the object is still at it (409).
        `replicas` None: a PATCH of the Scale (`raw`, `content_type`), applied to the Scale as stored."""
        checked_names(namespace, name)

        def scaled(existing: dict | None) -> dict:
            if existing is None:
                raise ApiError(404, "NotFound", f"modeldeployments {name[:80]!r} not found")
            wanted = replicas if replicas is not None else self._patched_scale(existing, raw, content_type)
            body = json.loads(json.dumps({k: v for k, v in existing.items() if k != "status"}))  # a copy to change
            body["spec"]["replicas"] = wanted
            body["metadata"] = {k: v for k, v in body["metadata"].items()
                                if k in ("name", "namespace", "labels", "annotations")}
            return parse_body(json.dumps(body).encode(), "ModelDeployment", namespace, name)  # the same checks as a PUT

        return self._write("ModelDeployment", namespace, name, scaled, sent_version, manager, dry_run)[0]

    @staticmethod
    def _patched_scale(existing: dict, raw: bytes, content_type: str) -> int:
        media = content_type.split(";")[0].strip().lower()
        if media not in (patches.MERGE, patches.JSON_PATCH):
            raise patches.unsupported(media)
        meta = existing["metadata"]
        current = {"apiVersion": "autoscaling/v1", "kind": "Scale", "spec": {"replicas": existing["spec"]["replicas"]},
                   "metadata": {k: meta.get(k) for k in ("name", "namespace", "resourceVersion", "uid")}}
        if media == patches.MERGE:
            try:
                result = patches.merge_patch(current, json.loads(raw))
            except (ValueError, RecursionError):
                raise ApiError(400, "BadRequest", "the body is not a JSON merge patch") from None
        else:
            result = patches.json_patch(current, raw)
        spec, sent = (result.get("spec"), (result.get("metadata") or {}).get("resourceVersion")) if isinstance(
            result, dict) else (None, None)
        if sent is not None and str(sent) != meta["resourceVersion"]:
            raise stale(sent)
        wanted = spec.get("replicas") if isinstance(spec, dict) else None
        if not isinstance(wanted, int) or isinstance(wanted, bool):
            raise ApiError(422, "Invalid", "spec.replicas must be an integer")
        return wanted

    def _write(self, kind: str, namespace: str | None, name: str, build: Build, sent_version: object, manager: str,
               dry_run: bool = False, applied: bool = False) -> Answer:
        try:
            answer, alone = self._put(kind, namespace, name, build, sent_version, manager, dry_run, applied)
        except DryRun as run:  # validated, placed and checked, then rolled back: nothing is stored
            return run.answer
        self._replanned(alone)
        return answer

    @forwarded
    def delete(self, kind: str, namespace: str, name: str, preconditions: dict | None = None,
               dry_run: bool = False) -> dict:
        """DELETE; `preconditions` (DeleteOptions'): the object's uid and resourceVersion must still be these (409).
        The answer is the object as it was deleted, as the API server answers for a custom resource (no finalizers
        here, so it is gone at once)."""
        checked_names(namespace or None, name)
        store, placing = self.store, self.placing
        try:
            with placing.write(store) as conn:
                one_deployment = self._placed_alone(conn, kind)
                if one_deployment:
                    placing.sync(store, conn)
                existing = store.get(conn, kind, namespace, name)
                if existing is None:
                    raise ApiError(404, "NotFound", f"{kind} {name!r} not found")
                for field in ("uid", "resourceVersion"):
                    wanted, found = (preconditions or {}).get(field), existing["metadata"].get(field)
                    if wanted is not None and str(wanted) != found:
                        raise ApiError(409, "Conflict", f"Operation cannot be fulfilled on {kind} {name!r}: "
                                                        f"Precondition failed: {field} in precondition: {wanted}, "
                                                        f"{field} in object meta: {found}")
                answer = store.delete(conn, kind, namespace, name) or existing
                if one_deployment:
                    placing.place(store, conn, namespace, name, None)
                else:
                    self._replan_now(conn, kind, namespace, name, None)
                if dry_run:
                    raise DryRun((answer, 200, []))
        except DryRun as dry:
            return dry.answer[0]
        self._replanned(one_deployment)
        return answer

    @forwarded
    def capacity(self, text: str) -> bool:
        """The clusters' live capacity as just read (a snapshot's JSON): stored for the page; when what it places on
        changed, the ledger's version moves (the next write loads the fleet with it) and the fleet is replanned.
        Returns whether it changed."""
        from automation.portal.state import CAPACITY, CAPACITY_DIGEST
        from fleet.capacity import LiveCapacity

        digest = LiveCapacity.from_json(text).digest() if text else ""
        with self.placing.write(self.store) as conn:
            CAPACITY.set_text(conn, text)
            changed = CAPACITY_DIGEST.text(conn) != digest
            if changed:
                CAPACITY_DIGEST.set_text(conn, digest)
                self.store.bump_ledger(conn)
        if changed and self.replanner is not None:
            self.replanner.want()
        return changed

    def _replanned(self, alone: bool) -> None:
        """After a committed write: one deployment placed alone wants the fleet planned after it; a write replanned
        in full has been."""
        assert self.replanner is not None  # writes run where the replanner is
        self.replanner.want() if alone else self.replanner.planned()

    def _placed_alone(self, conn: Connection, kind: str) -> bool:
        """A ModelDeployment write is placed alone, and the fleet planned after it in the background, unless teams
        share one workload namespace (the reference's `Default`): then every team's objects must be composed to
        find a collision, and the whole fleet is planned inside the write."""
        if kind != "ModelDeployment":
            return False
        gateways = [KINDS["InferenceGateway"][0].model_validate(b) for b in self.store.list(conn, "InferenceGateway")]
        return tenancy.mode(Fleet(objects=list(gateways))) == tenancy.PER_TEAM

    def _replan_now(self, conn: Connection, kind: str, namespace: str, name: str, body: dict | None,
                    subject: Subject | None = None) -> list[str]:
        """The whole fleet planned inside the write (a change that is not one deployment's); its warnings."""
        store, placing = self.store, self.placing
        before = store.ledger_version(conn)
        result = compute_for(store, conn, self.apply, self.replan_worker, subject, self.tokens.quotas)
        if kind == "ModelDeployment" and body is not None and (refused := _over_budget_in(result, namespace, name)):
            raise ApiError(403, "Forbidden", refused)  # the team's TeamPolicy: rolled back, nothing stored
        if result.problems:  # the change would make an object the cluster rejects: refuse it whole
            raise ApiError(422, "Invalid", "the change renders invalid objects",
                           [{"message": p} for p in result.problems[:20]])
        changed = commit(store, conn, result)
        placing.track(store, conn, kind, namespace, name, body)
        if changed:
            placing.reconciled(store, conn, before, changed)
        return result.warnings

    def _put(self, kind: str, namespace: str | None, name: str, build: Build,
             sent_version: object, manager: str, dry_run: bool, applied: bool) -> tuple[Answer, bool]:
        """`build(existing)`: the body to store, from the object as stored now, read inside this transaction (a
        read-modify-write made from an earlier read could revert a write that committed in between). `manager`
        owns the fields it changed (`applied`: build set managedFields itself, as server-side apply does)."""
        store, placing = self.store, self.placing
        with placing.write(store) as conn:
            one_deployment = self._placed_alone(conn, kind)
            if one_deployment:
                placing.sync(store, conn)
            existing = store.get(conn, kind, namespace or "", name)
            body = build(existing)
            self._refuse_conflicts(conn, kind, namespace, name, existing, sent_version)
            if not applied:
                patches.track_update(existing, body, manager)
            for key in ("uid", "generation", "creationTimestamp"):
                body["metadata"].pop(key, None)
            saved = store.put(conn, kind, namespace or "", body, existing)
            if kind == "ModelDeployment" and namespace is not None and (exceeded := quota_problem(
                    store, conn, namespace, policy_bodies(store, conn, self.tokens.quotas))):
                raise ApiError(403, "Forbidden", exceeded)  # rolled back with the rest of the transaction
            if one_deployment:
                placed = placing.place(store, conn, namespace or "", name, saved)
                if refused := over_budget(placed.plan):  # the team's TeamPolicy: rolled back, nothing stored
                    raise ApiError(403, "Forbidden", refused)
                if placed.problems:  # the change would make an object the cluster rejects: refuse it whole
                    raise ApiError(422, "Invalid", "the change renders invalid objects",
                                   [{"message": p} for p in placed.problems[:20]])
                warnings = placed.warnings
            else:
                warnings = self._replan_now(conn, kind, namespace or "", name, saved, subject=(kind, namespace or "", name))
            answer = (self.reads.with_status(saved, conn), (200 if existing else 201), warnings)
            if dry_run:  # the version it would have had is not one the object has
                answer[0]["metadata"]["resourceVersion"] = (existing or {}).get("metadata", {}).get("resourceVersion", "")
                raise DryRun(answer)
            return answer, one_deployment

    def _refuse_conflicts(self, conn: Connection, kind: str, namespace: str | None, name: str, existing: dict | None,
                          sent_version: object) -> None:
        if kind == "ModelEndpoint" and existing is None and any(
                ep.get("composed") and ep["namespace"] == namespace and ep["name"] == name
                for ep in SNAPSHOT.get(conn).get("endpoints", [])):
            raise ApiError(409, "Conflict", f"ModelEndpoint {name!r} is composed for a replica of a ModelDeployment "
                                            "and is read-only; give yours another name")
        if sent_version is not None and (existing is None or existing["metadata"]["resourceVersion"] != str(sent_version)):
            raise stale(sent_version)


class DryRun(Exception):
    """`dryRun=All`: raised, with the answer, inside the write so that its transaction is rolled back."""

    def __init__(self, answer: Answer) -> None:
        super().__init__("dry run")
        self.answer = answer


class Named(ApiError):
    """An error about one object, with the details the API server gives (kubectl prints them)."""

    def __init__(self, code: int, reason: str, message: str, kind: str, name: str) -> None:
        super().__init__(code, reason, message)
        self.details = {"name": name, "group": "modelplane.ai", "kind": kind}

    def status(self) -> dict:
        out = super().status()
        out["details"] = {**self.details, **out.get("details", {})}
        return out


def already_exists(kind: str, name: str) -> ApiError:
    plural = next((p for p, (k, _) in PLURALS.items() if k == kind), kind)
    return Named(409, "AlreadyExists", f'{plural}.modelplane.ai "{name[:80]}" already exists', plural, name)


def stale(sent_version: object) -> ApiError:
    return ApiError(409, "Conflict", f"the object has been modified; resourceVersion {str(sent_version)[:40]} is "
                                     "stale, get the latest and try again")


def _one_document(raw: bytes) -> dict | None:
    """The one object of a JSON or YAML body, or None (parse_body then says why)."""
    try:
        documents, problems = parse_text(raw.decode("utf-8"), "request", max_expanded=MAX_OBJECT)
    except UnicodeDecodeError:
        return None
    documents = [d for d in documents if d.data is not None]
    data = documents[0].data if len(documents) == 1 and not problems else None
    return data if isinstance(data, dict) and isinstance(data.get("metadata", {}), dict) else None


def body_name(raw: bytes, kind: str, namespace: str | None) -> tuple[str | None, str]:
    """A POST's metadata.name, or its generateName (422 when it has neither, as the API server says)."""
    data = _one_document(raw[:MAX_BODY + 1])
    if data is None:
        parse_body(raw, kind, namespace, "unnamed")  # raises what is wrong with the body
        raise ApiError(400, "BadRequest", "the body must be one object")
    meta = data.get("metadata") or {}
    name, prefix = meta.get("name"), meta.get("generateName")
    if isinstance(name, str) and name:
        return name, ""
    if isinstance(prefix, str) and prefix:
        return None, prefix
    raise ApiError(422, "Invalid", f"{kind} is invalid: metadata.name: Required value: name or generateName is required")


def apply_config(raw: bytes, kind: str, namespace: str | None, name: str) -> dict:
    """A server-side apply body (YAML or JSON): one object of the path's kind and name."""
    if len(raw) > MAX_BODY:
        raise ApiError(413, "RequestEntityTooLarge", f"the body is larger than {MAX_BODY} bytes")
    config = _one_document(raw)
    if config is None:
        raise ApiError(400, "BadRequest", "an apply patch is one object, in YAML or JSON")
    meta = config.get("metadata") or {}
    if config.get("kind") != kind or not config.get("apiVersion"):
        raise ApiError(400, "BadRequest", f"the applied object must have apiVersion and kind {kind}")
    if meta.get("name") not in (None, name) or (namespace is not None and meta.get("namespace") not in (None, namespace)):
        raise ApiError(400, "BadRequest", "the applied object's metadata.name and namespace must match the path")
    return config



def _over_budget_in(result: ReplanResult, namespace: str, name: str) -> str | None:
    """The written deployment's replicas a whole-fleet replan left unscheduled over a TeamPolicy budget (teams
    sharing one namespace: the write is planned with the whole fleet)."""
    return result.over_budget.get(f"{namespace}/{name}")
