"""What the portal's API and its page share: who a request is, the objects with their status, and the one way an
object is written or deleted (validated, stored, quota-checked, placed or replanned, in one transaction).

One `Portal` per app (`create_app` builds it; `deps.portal` hands it to each route); its methods run on worker
threads, never on the event loop.
"""

from __future__ import annotations

import asyncio
import json
import re
import secrets
from functools import partial, wraps
from operator import itemgetter
from typing import Any, Callable, Protocol, TypeVar

from starlette.concurrency import run_in_threadpool
from starlette.datastructures import Headers

from automation.planning import conditions
from automation.planning.conditions import Observed
from automation.portal.auth import Principal, Tokens, TokensFile
from automation.portal.guard import Caller
from automation.portal import listing, patches
from automation.portal.overlay import PendingOverlay
from automation.portal.placing import Placing
from automation.portal.read_cache import CachedList, Item, ReadCache, Stamp, exact, list_body, loads, reuse
from automation.portal.replanner import Replanner
from automation.portal.service import (MAX_BODY, MAX_OBJECT, PLURALS, ApiError, commit, compute_for, parse_body,
                                      quota_problem)
from automation.portal.state import APPLIED, APPLIED_DETAILS, EXECUTOR_PROBLEM, PROBLEMS, RESOURCE_VERSION, SNAPSHOT, SNAPSHOT_VERSION
from automation.portal.store import Store
from automation.portal.writes import WriteQueue
from fleet import tenancy
from fleet.api import KINDS
from fleet.loader import parse_text
from fleet.stack_id import StackId, StackIdError
from fleet.validate import Fleet

T = TypeVar("T")


PATCHED_CHANGES = 200  # writes since a list's last composition that are laid over its texts; beyond, it is read whole


class Writer(Protocol):
    """Where the write verbs run when not in this process (automation/portal/writer.py's `WriteWorker`)."""

    def call(self, verb: str, args: tuple, kwargs: dict) -> Any: ...

COOKIE = "modelplane_session"  # a random session id; the token itself never leaves the sign-in form
NAME = re.compile(r"^[a-z0-9]([-a-z0-9.]{0,251}[a-z0-9])?$")
GENERATED = "bcdfghjklmnpqrstvwxz2456789"  # the letters a generated name's suffix is made of, as Kubernetes'
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


def forwarded(verb: Callable[..., T]) -> Callable[..., T]:
    """A write verb: run in the writer process when the portal has one (writer.py), else here."""
    @wraps(verb)
    def run(self: Portal, *args: Any, **kwargs: Any) -> T:
        if self.writer is not None:
            return self.writer.call(verb.__name__, args, kwargs)
        return verb(self, *args, **kwargs)
    return run


class Portal:
    def __init__(self, store: Store, tokens: Tokens | TokensFile, apply: bool, replan_worker=None,
                 writer: Writer | None = None):
        self.store, self.tokens, self.apply, self.replan_worker = store, tokens, apply, replan_worker
        self.writer = writer  # writes run there (with the ledger and the replanner), or here when None
        # a ModelDeployment write is placed in its request against the ledger kept here (left empty in a serving
        # process whose writes run in a writer: writer.py)
        self.placing = Placing()
        # and the fleet is planned after it, in the background, where the writes run
        self.replanner = Replanner(store, apply, self.placing, replan_worker) if writer is None else None
        self.pending = PendingOverlay()
        self.lists = ReadCache()  # lists composed at the store's current marker (read_cache.py)
        self._composing: dict[tuple[str, str | None], tuple[int, asyncio.Future]] = {}  # on the event loop only
        self.writes = WriteQueue()  # requests' writes take turns here, in arrival order (writes.py)
        # the snapshot's version and its parsed form (megabytes at fleet scale, read by every request); replaced
        # whole, so a thread reading it never sees half of an update
        self._parsed: tuple[int, dict] = (0, {})

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
        version = SNAPSHOT_VERSION.get(conn)
        last_version, last = self._parsed
        if version != last_version or not version:
            last = loads(SNAPSHOT.text(conn))
            self._parsed = (version, last)
        return last

    def observation(self, conn) -> tuple[dict, Observed, list[dict]]:
        """The last replan's snapshot (with the writes placed since), how its stacks stand (the record the worker
        copied, latest runs), the gateways."""
        return self._observed(conn)[0]

    def _observed(self, conn) -> tuple[tuple[dict, Observed, list[dict]], Stamp]:
        """`observation`, and what a status reads besides its object and its deployment's part of the plan: the
        stored snapshot it was laid over (compared by identity: parsed once per replan), the record and the runs,
        and the gateways."""
        store = self.store
        base = self.parsed_snapshot(conn)
        snap = self.pending.over(base, store, conn)
        texts = (APPLIED.text(conn), APPLIED_DETAILS.text(conn))
        applied, details = json.loads(texts[0]), json.loads(texts[1])
        latest: dict[str, dict] = {}
        for run in reversed(store.list_runs(conn, 1000)):
            latest[run["stack"]] = run
        observed = Observed({stack: {"fingerprint": fp, **details.get(stack, {})} for stack, fp in applied.items()},
                            latest)
        gateways = store.list(conn, "InferenceGateway")
        return (snap, observed, gateways), Stamp(base, texts, observed.runs, gateways)

    def with_status(self, body: dict, conn, known: tuple | None = None) -> dict:
        """The object with its status; `known` is observation() already read for this request."""
        return conditions.with_status(body, *(known or self.observation(conn)))

    def statuses(self, bodies: list[dict], conn) -> list[dict]:
        known = self.observation(conn)  # read once per request, not once per object
        return [self.with_status(b, conn, known) for b in bodies]

    async def listed(self, kind: str, namespace: str | None) -> CachedList:
        """Every `kind` in `namespace` (None: all) with its status, in (namespace, name) order, and the plain list's
        bytes: kept while nothing stored changes (read_cache.py), composed afresh after any write. A kept list is
        answered on the event loop where the store's marker costs microseconds (SQLite); the rest on a thread."""
        marker = self.store.marker()
        if marker is None:
            return await run_in_threadpool(self._listed_now, kind, namespace, None)
        found = self.lists.peek(marker, kind, namespace)
        if found is not None:
            return found
        # one composition per list and marker: the readers that find it under way wait for it (after a write, 20
        # readers would otherwise compose the same list 20 times over, on threads that contend for the GIL)
        key = (kind, namespace)
        flight = self._composing.get(key)
        if flight is None or flight[0] != marker:
            task = asyncio.ensure_future(run_in_threadpool(self._listed_now, kind, namespace, marker))
            flight = self._composing[key] = (marker, task)
            task.add_done_callback(partial(self._landed, key, flight))
        return await asyncio.shield(flight[1])

    def _landed(self, key: tuple[str, str | None], flight: tuple[int, asyncio.Future], _done: asyncio.Future) -> None:
        if self._composing.get(key) is flight:  # a newer marker's composition may have taken its place
            del self._composing[key]

    def _listed_now(self, kind: str, namespace: str | None, marker: int | None) -> CachedList:
        """`marker`: Store.marker() read before this read began (what it composes is never older), or None: the
        store's revision, read in this read's transaction."""
        with self.store.read() as conn:
            if marker is None:
                marker = self.store.revision(conn)
            found = self.lists.peek(marker, kind, namespace)
            if found is not None:
                return found
            known, stamp = self._observed(conn)  # read once per list, not once per object
            before, then, since = self.lists.items.of(kind, namespace)  # what the last composition read and made
            unchanged = then is not None and then.same(stamp)  # statuses then change only with their own part
            index = conditions.by_deployment(known[0]) if kind == "ModelDeployment" else {}
            stored: dict[tuple[str, str], Item] = {}

            def compose(body: dict) -> dict:
                return self.with_status(body, conn, known)

            for ns, name, text in [] if kind == "ModelReplica" else self._stored(conn, kind, namespace, before, since):
                stored[(ns, name)] = reuse(before.get((ns, name)), text, compose, unchanged, index.get(f"{ns}/{name}"))
            # (listing.key, item, its JSON): a stored object's key is its row's (namespace, name), not read again
            rows = [(key, entry.item, entry.encoded) for key, entry in stored.items()]
            if kind in ("ModelReplica", "ModelEndpoint"):  # the replicas and their endpoints, composed as the reference
                rows += [(listing.key(o), o, exact(o)) for o in conditions.composed(namespace, known[0], known[1])
                         if o["kind"] == kind]
            rows.sort(key=itemgetter(0))
            version = str(RESOURCE_VERSION.get(conn))
        self.lists.items.remember(kind, namespace, stored, stamp, int(version))
        items = [item for _, item, _ in rows]
        body = list_body(listing.list_document(kind, items, version), [encoded for _, _, encoded in rows])
        return self.lists.keep(marker, kind, namespace, items, version, body)

    def _stored(self, conn, kind: str, namespace: str | None, before: dict[tuple[str, str], Item],
                since: int | None) -> list[tuple[str, str, str]]:
        """(namespace, name, stored text) of each `kind` in `namespace` (None: all): the texts of the last composition
        (`before`, read at resourceVersion `since`) with the writes logged after it, when the change log still holds
        them all; else read whole. Reading a team's 463 stored texts again after each write was a third of composing
        its list. SQLite only: its read transaction is one snapshot, so this read's changes and its texts agree
        (PostgreSQL's read committed statements need not). The last composition may be newer than this read's
        snapshot (another thread composed and remembered it since this read began): then it is read whole too."""
        if since is None or not self.store.sqlite:
            return self.store.list_stored(conn, kind, namespace)
        oldest, current, rows = self.store.changes_since(conn, since, kind, namespace, limit=PATCHED_CHANGES)
        if since < oldest or since > current or len(rows) >= PATCHED_CHANGES:  # pruned, newer, or too many
            return self.store.list_stored(conn, kind, namespace)
        texts = {key: item.text for key, item in before.items()}
        for row in rows:
            if row["type"] == "DELETED":
                texts.pop((row["namespace"], row["name"]), None)
            else:
                texts[(row["namespace"], row["name"])] = row["body"]
        return [(ns, name, text) for (ns, name), text in texts.items()]

    def composed_in(self, namespace: str, kind: str, conn, known: tuple | None = None) -> list[dict]:
        snap, observed, _ = known or self.observation(conn)
        return [o for o in conditions.composed(namespace, snap, observed) if o["kind"] == kind]

    def held_back(self, conn) -> list[str]:
        """What the last background replan found that a cluster would reject: while there is any, no run is queued."""
        problems = PROBLEMS.get(conn)
        executor = EXECUTOR_PROBLEM.get(conn)  # automation/portal/worker.py: runs cannot run
        return problems + ([f"runs wait queued: {executor}"] if executor else [])

    # ---- writes --------------------------------------------------------------------------------------------

    @forwarded
    def put(self, kind: str, namespace: str | None, name: str, raw: bytes, manager: str = "modelplane-portal",
            dry_run: bool = False) -> tuple[dict, int, list[str]]:
        """Validate, store, check the team's quota, place (a ModelDeployment) or replan; one transaction.
        Returns the object with its status, the HTTP code and the validation warnings."""
        checked_names(namespace, name)
        body = parse_body(raw, kind, namespace, name)
        sent_version = body["metadata"].pop("resourceVersion", None)
        return self._write(kind, namespace, name, lambda _existing: body, sent_version, manager, dry_run)

    @forwarded
    def create(self, kind: str, namespace: str | None, raw: bytes, manager: str,
               dry_run: bool = False) -> tuple[dict, int, list[str]]:
        """POST: a new object named by its body, or by `generateName` and five random characters (tried again on
        the rare name already taken, as Kubernetes does); 409 AlreadyExists if the name is taken."""
        name, prefix = body_name(raw, kind, namespace)
        for attempt in range(1 if name else 8):
            chosen = name or prefix[:58] + "".join(secrets.choice(GENERATED) for _ in range(5))
            checked_names(namespace, chosen)
            body = parse_body(raw, kind, namespace, chosen)
            body["metadata"].pop("resourceVersion", None)  # a create's is the server's to set

            def fresh(existing: dict | None, body=body, chosen=chosen) -> dict:
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
              force: bool, dry_run: bool = False) -> tuple[dict, int, list[str]]:
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

    def _patched(self, kind: str, namespace: str | None, name: str, existing: dict | None, result) -> dict:
        """A patched object, held to its resourceVersion (a precondition) and to the same checks as a PUT."""
        if not isinstance(result, dict) or not isinstance(result.get("metadata", {}), dict):
            raise ApiError(422, "Invalid", "the patched object is not an object with metadata")
        sent = result.get("metadata", {}).pop("resourceVersion", None)
        if sent is not None and (existing is None or str(sent) != existing["metadata"]["resourceVersion"]):
            raise stale(sent)
        return parse_body(json.dumps(result).encode(), kind, namespace, name)

    @forwarded
    def scale(self, namespace: str, name: str, replicas: int | None, sent_version, raw: bytes = b"",
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

    def _write(self, kind: str, namespace: str | None, name: str, build, sent_version, manager: str,
               dry_run: bool = False, applied: bool = False) -> tuple[dict, int, list[str]]:
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

    def _replanned(self, alone: bool) -> None:
        """After a committed write: one deployment placed alone wants the fleet planned after it; a write replanned
        in full has been."""
        assert self.replanner is not None  # writes run where the replanner is
        self.replanner.want() if alone else self.replanner.planned()

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
        if result.problems:  # the change would make an object the cluster rejects: refuse it whole
            raise ApiError(422, "Invalid", "the change renders invalid objects",
                           [{"message": p} for p in result.problems[:20]])
        changed = commit(store, conn, result)
        placing.track(store, conn, kind, namespace, name, body)
        if changed:
            placing.reconciled(store, conn, before, changed)
        return result.warnings

    def _put(self, kind: str, namespace: str | None, name: str, build: Callable[[dict | None], dict],
             sent_version, manager: str, dry_run: bool, applied: bool) -> tuple[tuple, bool]:
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
                warnings = self._replan_now(conn, kind, namespace or "", name, saved, subject=(kind, namespace or "", name))
            answer = (self.with_status(saved, conn), (200 if existing else 201), warnings)
            if dry_run:  # the version it would have had is not one the object has
                answer[0]["metadata"]["resourceVersion"] = (existing or {}).get("metadata", {}).get("resourceVersion", "")
                raise DryRun(answer)
            return answer, one_deployment

    def _refuse_conflicts(self, conn, kind: str, namespace: str | None, name: str, existing: dict | None,
                          sent_version) -> None:
        if kind == "ModelEndpoint" and existing is None and any(
                ep.get("composed") and ep["namespace"] == namespace and ep["name"] == name
                for ep in SNAPSHOT.get(conn).get("endpoints", [])):
            raise ApiError(409, "Conflict", f"ModelEndpoint {name!r} is composed for a replica of a ModelDeployment "
                                            "and is read-only; give yours another name")
        if sent_version is not None and (existing is None or existing["metadata"]["resourceVersion"] != str(sent_version)):
            raise stale(sent_version)


class DryRun(Exception):
    """`dryRun=All`: raised, with the answer, inside the write so that its transaction is rolled back."""

    def __init__(self, answer: tuple[dict, int, list[str]]):
        super().__init__("dry run")
        self.answer = answer


class Named(ApiError):
    """An error about one object, with the details the API server gives (kubectl prints them)."""

    def __init__(self, code: int, reason: str, message: str, kind: str, name: str):
        super().__init__(code, reason, message)
        self.details = {"name": name, "group": "modelplane.ai", "kind": kind}

    def status(self) -> dict:
        out = super().status()
        out["details"] = {**self.details, **out.get("details", {})}
        return out


def already_exists(kind: str, name: str) -> ApiError:
    plural = next((p for p, (k, _) in PLURALS.items() if k == kind), kind)
    return Named(409, "AlreadyExists", f'{plural}.modelplane.ai "{name[:80]}" already exists', plural, name)


def stale(sent_version) -> ApiError:
    return ApiError(409, "Conflict", f"the object has been modified; resourceVersion {str(sent_version)[:40]} is "
                                     "stale, get the latest and try again")


def _one_document(raw: bytes):
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
