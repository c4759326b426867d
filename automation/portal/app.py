"""The portal's HTTP API (shaped like Kubernetes' own) and its server-rendered page.

Security model (docs/portal.md has it in full): every unsafe request passes `guard.Guard` first (same
origin, authenticated before its body is read, bodies capped); browsers hold a server-side session id in
an HttpOnly SameSite=Strict cookie and send a CSRF token with every form; every error is a Kubernetes
`Status`; database work and the fleet replan run on worker threads, so reads never wait on writes.
Handlers return a JSONResponse of what they read rather than a dict: FastAPI would walk a returned dict through
`jsonable_encoder`, on the event loop, which was 88% of a read of a 100-deployment namespace.
"""

from __future__ import annotations

import hmac
import json
import logging
import os
import re
import secrets
from pathlib import Path

from fastapi import FastAPI, Form, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import HTMLResponse, JSONResponse, RedirectResponse, Response
from jinja2 import Environment, PackageLoader, select_autoescape
from sqlalchemy.exc import DBAPIError
from starlette.concurrency import run_in_threadpool
from starlette.datastructures import Headers
from starlette.exceptions import HTTPException as StarletteHTTPException

from automation.planning import conditions
from automation.planning.conditions import Observed
from automation.portal.auth import Principal, Tokens, TokensFile, digest
from automation.portal.guard import Caller, Guard, SignInLimiter, status_body
from automation.portal.overlay import PendingOverlay, overlaid
from automation.portal.placing import Placing
from automation.portal.replanner import Replanner
from automation.portal.service import PLURALS, ApiError, commit, compute_for, parse_body, quota_problem
from automation.portal.store import Store, StoreBusy
from fleet import tenancy
from fleet.api import KINDS
from fleet.errors import ModelplaneError
from fleet.stack_id import StackId, StackIdError
from fleet.validate import Fleet

API = "/apis/modelplane.ai/v1alpha1"
COOKIE = "modelplane_session"  # a random session id; the token itself never leaves the sign-in form
SIGNIN_COOKIE = "modelplane_signin"  # the sign-in form's CSRF token (double submit: login CSRF)
NAME = re.compile(r"^[a-z0-9]([-a-z0-9.]{0,251}[a-z0-9])?$")
NAMESPACE = re.compile(r"^[a-z0-9]([-a-z0-9]{0,61}[a-z0-9])?$")
MAX_RUN_ID = 2 ** 63 - 1
log = logging.getLogger("modelplane.portal")
templates = Environment(loader=PackageLoader("automation.portal", "templates"), autoescape=select_autoescape(["html"]))


def warning_header(message: str) -> str:
    """One RFC 7234 warning value, as the Kubernetes API server sends validation warnings (`299 - "text"`)."""
    text = message.replace("\\", "\\\\").replace('"', '\\"').encode("ascii", "replace").decode()
    return f'299 - "{text}"'


def stack_namespace(stack: str) -> str | None:
    """The namespace a stack belongs to, parsed from its identity (None: platform, gateway, legacy names: admins')."""
    try:
        return StackId.parse(stack).namespace
    except StackIdError:
        return None


class ReplanWorker:
    """The fleet replan in a process of its own: planning is CPU-bound Python, and in the portal's process it
    would hold the interpreter lock that reads need (measured: reads 2x slower under 4 writers without it).
    A worker that dies is replaced, and that one replan runs in the calling thread."""

    def __init__(self):
        import multiprocessing
        from concurrent.futures import ProcessPoolExecutor

        self._new = lambda: ProcessPoolExecutor(max_workers=1, mp_context=multiprocessing.get_context("spawn"),
                                                initializer=_import_planner, initargs=(os.getpid(),))
        self._pool = self._new()
        self._pool.submit(int)  # start the process (and its imports) now, not on the first write

    def __call__(self, *inputs):
        from concurrent.futures.process import BrokenProcessPool

        from automation.portal.service import compute_replan

        try:
            return self._pool.submit(compute_replan, *inputs).result()
        except BrokenProcessPool:
            log.error("the replan worker died; starting another")
            self._pool = self._new()
            return compute_replan(*inputs)

    def close(self) -> None:
        self._pool.shutdown(wait=False, cancel_futures=True)


BACKGROUND_NICENESS = 10  # the replan worker's scheduling priority below the portal's
YOUNG_OBJECTS = 100_000  # allocations between young collections (Python's default: 700)


def fewer_collections() -> None:
    """A replan allocates millions of short-lived objects while holding the fleet (hundreds of thousands of live
    ones): with the default threshold the cycle collector runs thousands of times a replan and re-scans the fleet,
    half of a replan's time at 2,000 deployments. Collecting young objects every 100,000 allocations instead costs
    a few megabytes between collections; refcounting still frees everything else at once."""
    import gc

    _, middle, old = gc.get_threshold()
    gc.set_threshold(YOUNG_OBJECTS, middle, old)


def _import_planner(parent: int) -> None:
    """`parent`: the portal's pid, given by the portal itself (read here, it could already be init's, when the
    portal died while this process started)."""
    import threading
    import time

    import automation.portal.service  # noqa: F401  (the planner's imports, paid once per worker process)

    fewer_collections()
    try:  # the fleet's replan is background work: requests come first when CPUs are short
        os.nice(BACKGROUND_NICENESS)
    except OSError:
        pass

    def exit_with_parent() -> None:  # a portal killed without its shutdown (SIGKILL, a crash) leaves no orphan
        while os.getppid() == parent:
            time.sleep(1.0)
        os._exit(0)

    threading.Thread(target=exit_with_parent, daemon=True, name="replan-worker-parent-watch").start()


def create_app(store: Store, tokens: Tokens | TokensFile, apply: bool = True,
               limiter: SignInLimiter | None = None, replan_worker: ReplanWorker | None = None) -> FastAPI:
    app = FastAPI(title="modelplane portal", version="v1alpha1",
                  description="Submit ModelDeployments and ModelServices, watch them land. Kubernetes-shaped API.")
    placing = Placing()  # a ModelDeployment write is placed in its request against the ledger kept here
    replanner = Replanner(store, apply, placing, replan_worker)  # and the whole fleet is planned after it
    app.state.replanner = replanner
    app.router.on_shutdown.append(replanner.stop)

    def authenticate(headers: Headers, cookies: dict[str, str]) -> Caller | None:
        header = headers.get("authorization", "")
        if header.lower().startswith("bearer "):
            who = tokens.resolve(header[7:].strip())
            return Caller(who, "bearer") if who else None
        session_id = cookies.get(COOKIE)
        if not session_id or len(session_id) > 100:
            return None
        with store.read() as conn:
            session = store.get_session(conn, session_id)
        who = tokens.by_digest(session["token_sha256"]) if session else None  # a revoked token ends its sessions
        return Caller(who, "session", session["csrf"]) if who and session else None

    app.add_middleware(Guard, authenticate=authenticate, limiter=limiter)

    # ---- every error is a Kubernetes Status -----------------------------------------------------------

    def status_response(code: int, reason: str, message: str, headers: dict | None = None) -> Response:
        return Response(status_body(code, reason, message), status_code=code, media_type="application/json",
                        headers=headers)

    @app.exception_handler(ApiError)
    async def api_error(_: Request, exc: ApiError):
        return JSONResponse(exc.status(), status_code=exc.code, headers=exc.headers)

    @app.exception_handler(StarletteHTTPException)
    async def http_error(_: Request, exc: StarletteHTTPException):
        reasons = {404: "NotFound", 405: "MethodNotAllowed", 413: "RequestEntityTooLarge", 400: "BadRequest"}
        message = {404: "the server could not find the requested resource",
                   405: "the method is not allowed on this resource"}.get(exc.status_code, str(exc.detail))
        return status_response(exc.status_code, reasons.get(exc.status_code, "Failure"), message,
                               dict(exc.headers or {}))

    @app.exception_handler(RequestValidationError)
    async def invalid_request(_: Request, exc: RequestValidationError):
        causes = [{"field": ".".join(str(p) for p in e["loc"]), "message": e["msg"]} for e in exc.errors()[:20]]
        return JSONResponse(ApiError(422, "Invalid", "the request is malformed", causes).status(), status_code=422)

    @app.exception_handler(StoreBusy)
    async def busy(_: Request, exc: StoreBusy):
        return status_response(503, "ServiceUnavailable", f"the portal is busy writing ({exc}); retry",
                               {"Retry-After": "1"})

    @app.exception_handler(DBAPIError)
    async def database_down(_: Request, exc: DBAPIError):
        log.error("database error: %s", type(exc.orig).__name__)
        return status_response(503, "ServiceUnavailable", "the database does not answer; retry", {"Retry-After": "5"})

    @app.exception_handler(Exception)
    async def internal(_: Request, exc: Exception):
        log.exception("internal error")
        return status_response(500, "InternalError", f"internal error ({type(exc).__name__}); it is logged")

    # ---- health -----------------------------------------------------------------------------------------

    @app.get("/healthz", include_in_schema=False)
    def healthz():
        """The process answers (liveness): no database, no token."""
        return {"status": "ok"}

    @app.get("/readyz", include_in_schema=False)
    def readyz():
        """The portal can serve (readiness): its database answers."""
        try:
            with store.read() as conn:
                store.get_state(conn, "plan")
        except Exception as exc:  # any database failure: not ready, said as a Kubernetes Status
            raise ApiError(503, "ServiceUnavailable", f"the database does not answer: {type(exc).__name__}") from None
        return {"status": "ok"}

    @app.get("/portal.css", include_in_schema=False)
    def stylesheet():
        return Response((Path(__file__).parent / "templates" / "portal.css").read_text(), media_type="text/css")

    def caller(request: Request) -> Caller:
        known = request.scope.get("state", {}).get("caller")  # unsafe methods: the guard checked already
        who = known or authenticate(request.headers, request.cookies)
        if who is None:
            raise ApiError(401, "Unauthorized", "a valid bearer token is required")
        return who

    def principal(request: Request) -> Principal:
        return caller(request).principal

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

    parsed: list[tuple[str, dict]] = [("", {})]  # the snapshot's version and its parsed form (megabytes at fleet
    # scale, read by every request); replaced whole, so a thread reading it never sees half of an update

    def parsed_snapshot(conn) -> dict:
        """The stored snapshot, parsed once per replan that stored it (its text is megabytes at fleet scale)."""
        version = store.get_state(conn, "snapshotVersion") or ""
        last_version, last = parsed[0]
        if version != last_version or not version:
            last = json.loads(store.get_state(conn, "snapshot") or "{}")
            parsed[0] = (version, last)
        return last

    pending = PendingOverlay()

    def observation(conn) -> tuple[dict, Observed, list[dict]]:
        """The last replan's snapshot (with the writes placed since), how its stacks stand (applied by the worker,
        latest runs), the gateways."""
        snap = pending.over(parsed_snapshot(conn), store, conn)
        applied = json.loads(store.get_state(conn, "applied") or "{}")
        details = json.loads(store.get_state(conn, "appliedDetails") or "{}")
        latest: dict[str, dict] = {}
        for run in reversed(store.list_runs(conn, 1000)):
            latest[run["stack"]] = run
        observed = Observed({stack: {"fingerprint": fp, **details.get(stack, {})} for stack, fp in applied.items()},
                            latest)
        return snap, observed, store.list(conn, "InferenceGateway")

    def with_status(body: dict, conn, known: tuple | None = None) -> dict:
        """The object with its status; `known` is observation() already read for this request."""
        return conditions.with_status(body, *(known or observation(conn)))

    def statuses(bodies: list[dict], conn) -> list[dict]:
        known = observation(conn)  # read once per request, not once per object
        return [with_status(b, conn, known) for b in bodies]

    # ---- composed objects (read-only), and the scale subresource ----------------------------------------

    def composed_in(namespace: str, kind: str, conn, known: tuple | None = None) -> list[dict]:
        snap, observed, _ = known or observation(conn)
        return [o for o in conditions.composed(namespace, snap, observed) if o["kind"] == kind]

    def read_only(plural: str) -> ApiError:
        return ApiError(405, "MethodNotAllowed", f"{plural} are composed from ModelDeployments and are read-only",
                        headers={"Allow": "GET"})

    @app.get(API + "/namespaces/{namespace}/modelreplicas")
    def list_replicas(namespace: str, request: Request):
        if not principal(request).can_see(namespace):
            raise ApiError(404, "NotFound", f"namespace {namespace[:80]!r} not found")
        with store.read() as conn:
            items = composed_in(namespace, "ModelReplica", conn)
        return JSONResponse({"apiVersion": "modelplane.ai/v1alpha1", "kind": "ModelReplicaList", "items": items})

    @app.get(API + "/namespaces/{namespace}/modelreplicas/{name}")
    def get_replica(namespace: str, name: str, request: Request):
        if principal(request).can_see(namespace):
            with store.read() as conn:
                found = [o for o in composed_in(namespace, "ModelReplica", conn) if o["metadata"]["name"] == name]
            if found:
                return JSONResponse(found[0])
        raise ApiError(404, "NotFound", f"modelreplicas {name[:80]!r} not found")

    @app.api_route(API + "/namespaces/{namespace}/modelreplicas/{name}", methods=["PUT", "PATCH", "DELETE", "POST"],
                   include_in_schema=False)
    def write_replica(namespace: str, name: str, request: Request):
        principal(request)
        raise read_only("modelreplicas")

    @app.get(API + "/namespaces/{namespace}/modeldeployments/{name}/scale")
    def get_scale(namespace: str, name: str, request: Request):
        if not principal(request).can_see(namespace):
            raise ApiError(404, "NotFound", f"modeldeployments {name[:80]!r} not found")
        with store.read() as conn:
            body = store.get(conn, "ModelDeployment", namespace, name)
            if body is None:
                raise ApiError(404, "NotFound", f"modeldeployments {name[:80]!r} not found")
            return JSONResponse(scale_of(with_status(body, conn)))

    @app.put(API + "/namespaces/{namespace}/modeldeployments/{name}/scale")
    async def put_scale(namespace: str, name: str, request: Request):
        """`kubectl scale`: the Scale's spec.replicas becomes the deployment's, through the same checks as a PUT."""
        who = principal(request)
        if not who.can_write(namespace):
            raise ApiError(403, "Forbidden", f"{who.name} may not write in namespace {namespace[:80]!r}")
        raw = await request.body()

        def rescale() -> JSONResponse:
            try:
                wanted = json.loads(raw or b"{}")
            except ValueError:
                raise ApiError(400, "BadRequest", "the body is not a JSON Scale object") from None
            replicas = ((wanted.get("spec") if isinstance(wanted, dict) else None) or {}).get("replicas")
            if not isinstance(replicas, int) or isinstance(replicas, bool):
                raise ApiError(422, "Invalid", "spec.replicas must be an integer")
            with store.read() as conn:
                body = store.get(conn, "ModelDeployment", namespace, name)
            if body is None:
                raise ApiError(404, "NotFound", f"modeldeployments {name[:80]!r} not found")
            sent = (wanted.get("metadata") or {}).get("resourceVersion")
            body["spec"]["replicas"] = replicas
            body["metadata"] = {k: v for k, v in body["metadata"].items() if k in ("name", "namespace", "labels",
                                                                                   "annotations")}
            if sent is not None:
                body["metadata"]["resourceVersion"] = sent
            saved, _, _ = put("ModelDeployment", namespace, name, json.dumps(body).encode())
            return JSONResponse(scale_of(saved))

        return await run_in_threadpool(rescale)

    def scale_of(body: dict) -> dict:
        meta = body["metadata"]
        return {"apiVersion": "autoscaling/v1", "kind": "Scale",
                "metadata": {"name": meta["name"], "namespace": meta.get("namespace"),
                             "resourceVersion": meta.get("resourceVersion"), "uid": meta.get("uid")},
                "spec": {"replicas": body["spec"]["replicas"]},
                "status": {"replicas": ((body.get("status") or {}).get("replicas") or {}).get("total", 0),
                           "selector": f"modelplane.ai/deployment={meta['name']}"}}

    # ---- namespaced kinds ---------------------------------------------------------------------------

    @app.get(API + "/namespaces/{namespace}/{plural}")
    def list_namespaced(namespace: str, plural: str, request: Request):
        who, kind = principal(request), kind_of(plural, True)
        if not who.can_see(namespace):
            raise ApiError(404, "NotFound", f"namespace {namespace[:80]!r} not found")
        with store.read() as conn:
            known = observation(conn)  # read once per request
            items = [with_status(b, conn, known) for b in store.list(conn, kind, namespace)]
            if kind == "ModelEndpoint":  # the replicas' endpoints, as the reference composes them
                items += composed_in(namespace, kind, conn, known)
            version = store.get_state(conn, "resourceVersion") or "0"
        return JSONResponse({"apiVersion": "modelplane.ai/v1alpha1", "kind": f"{kind}List",
                             "metadata": {"resourceVersion": version}, "items": items})

    @app.get(API + "/namespaces/{namespace}/{plural}/{name}")
    def get_namespaced(namespace: str, plural: str, name: str, request: Request):
        who, kind = principal(request), kind_of(plural, True)
        if not who.can_see(namespace):
            raise ApiError(404, "NotFound", f"{plural} {name[:80]!r} not found")
        with store.read() as conn:
            body = store.get(conn, kind, namespace, name)
            if body is None and kind == "ModelEndpoint":
                body = next((o for o in composed_in(namespace, kind, conn) if o["metadata"]["name"] == name), None)
                if body is not None:
                    return JSONResponse(body)
            if body is None:
                raise ApiError(404, "NotFound", f"{plural} {name[:80]!r} not found")
            return JSONResponse(with_status(body, conn))

    def respond(body: dict, code: int, warnings: list[str]) -> JSONResponse:
        """The object, with its validation warnings in a Warning header, as the Kubernetes API server says them."""
        headers = {"Warning": ", ".join(warning_header(w) for w in warnings)} if warnings else None
        return JSONResponse(body, status_code=code, headers=headers)

    def replan_now(conn, kind: str, namespace: str, name: str, body: dict | None, subject=None) -> list[str]:
        """The whole fleet planned inside the write (a change that is not one deployment's); its warnings."""
        before = store.ledger_version(conn)
        result = compute_for(store, conn, apply, replan_worker, subject)
        if result["problems"]:  # the change would make an object the cluster rejects: refuse it whole
            raise ApiError(422, "Invalid", "the change renders invalid objects",
                           [{"message": p} for p in result["problems"][:20]])
        changed = commit(store, conn, result)
        placing.track(store, conn, kind, namespace, name, body)
        if changed:
            placing.reconciled(store, conn, before, changed)
        return result["warnings"]

    def put(kind: str, namespace: str | None, name: str, raw: bytes) -> tuple[dict, int, list[str]]:
        """Validate, store, check the team's quota, place (a ModelDeployment) or replan; one transaction (runs on a
        worker thread)."""
        checked_names(namespace, name)
        body = parse_body(raw, kind, namespace, name)
        sent_version = body["metadata"].pop("resourceVersion", None)
        answer, alone = _put(kind, namespace, name, body, sent_version)
        replanner.want() if alone else replanner.planned()
        return answer

    def placed_alone(conn, kind: str) -> bool:
        """A ModelDeployment write is placed alone, and the fleet planned after it in the background, unless teams
        share one workload namespace (the reference's `Default`): then every team's objects must be composed to
        find a collision, and the whole fleet is planned inside the write."""
        if kind != "ModelDeployment":
            return False
        gateways = [KINDS["InferenceGateway"][0].model_validate(b) for b in store.list(conn, "InferenceGateway")]
        return tenancy.mode(Fleet(objects=list(gateways))) == tenancy.PER_TEAM

    def _put(kind: str, namespace: str | None, name: str, body: dict, sent_version) -> tuple[tuple, bool]:
        with placing.write(store) as conn:
            one_deployment = placed_alone(conn, kind)
            if one_deployment:
                placing.sync(store, conn)
            existing = store.get(conn, kind, namespace or "", name)
            if kind == "ModelEndpoint" and existing is None and any(
                    ep.get("composed") and ep["namespace"] == namespace and ep["name"] == name
                    for ep in json.loads(store.get_state(conn, "snapshot") or "{}").get("endpoints", [])):
                raise ApiError(409, "Conflict", f"ModelEndpoint {name!r} is composed for a replica of a ModelDeployment "
                                                "and is read-only; give yours another name")
            if sent_version is not None and (existing is None or existing["metadata"]["resourceVersion"] != str(sent_version)):
                raise ApiError(409, "Conflict", f"the object has been modified; resourceVersion {sent_version} is stale, "
                                                "get the latest and try again")
            for key in ("uid", "generation", "creationTimestamp"):
                body["metadata"].pop(key, None)
            saved = store.put(conn, kind, namespace or "", body, existing)
            if namespace is not None and (exceeded := quota_problem(store, conn, namespace, tokens.quotas.get(namespace))):
                raise ApiError(403, "Forbidden", exceeded)  # rolled back with the rest of the transaction
            if one_deployment:
                placed = placing.place(store, conn, namespace or "", name, saved)
                if placed.problems:  # the change would make an object the cluster rejects: refuse it whole
                    raise ApiError(422, "Invalid", "the change renders invalid objects",
                                   [{"message": p} for p in placed.problems[:20]])
                warnings = placed.warnings
            else:
                warnings = replan_now(conn, kind, namespace or "", name, saved, subject=(kind, name))
            return (with_status(saved, conn), (200 if existing else 201), warnings), one_deployment

    @app.put(API + "/namespaces/{namespace}/{plural}/{name}")
    async def put_namespaced(namespace: str, plural: str, name: str, request: Request):
        who, kind = principal(request), kind_of(plural, True)
        if not who.can_write(namespace):
            raise ApiError(403, "Forbidden", f"{who.name} may not write in namespace {namespace[:80]!r}")
        return respond(*await run_in_threadpool(put, kind, namespace, name, await request.body()))

    def delete(kind: str, namespace: str, name: str) -> dict:
        checked_names(namespace or None, name)
        with placing.write(store) as conn:
            one_deployment = placed_alone(conn, kind)
            if one_deployment:
                placing.sync(store, conn)
            existing = store.get(conn, kind, namespace, name)
            if existing is None:
                raise ApiError(404, "NotFound", f"{kind} {name!r} not found")
            store.delete(conn, kind, namespace, name)
            if one_deployment:
                placing.place(store, conn, namespace, name, None)
            else:
                replan_now(conn, kind, namespace, name, None)
        replanner.want() if one_deployment else replanner.planned()
        return {"kind": "Status", "apiVersion": "v1", "status": "Success", "details": {"name": name, "kind": kind}}

    @app.delete(API + "/namespaces/{namespace}/{plural}/{name}")
    def delete_namespaced(namespace: str, plural: str, name: str, request: Request):
        who, kind = principal(request), kind_of(plural, True)
        if not who.can_see(namespace):
            raise ApiError(404, "NotFound", f"{plural} {name[:80]!r} not found")
        if not who.can_write(namespace):
            raise ApiError(403, "Forbidden", f"{who.name} may not write in namespace {namespace[:80]!r}")
        return delete(kind, namespace, name)

    # ---- cluster-scoped kinds (the fleet: everyone reads, admins write) ----------------------------------

    @app.get(API + "/{plural}")
    def list_cluster(plural: str, request: Request):
        principal(request)
        kind = kind_of(plural, False)
        with store.read() as conn:
            items = statuses(store.list(conn, kind), conn)
        return JSONResponse({"apiVersion": "modelplane.ai/v1alpha1", "kind": f"{kind}List", "items": items})

    @app.get(API + "/{plural}/{name}")
    def get_cluster(plural: str, name: str, request: Request):
        principal(request)
        kind = kind_of(plural, False)
        with store.read() as conn:
            body = store.get(conn, kind, "", name)
            if body is None:
                raise ApiError(404, "NotFound", f"{plural} {name[:80]!r} not found")
            return JSONResponse(with_status(body, conn))

    @app.put(API + "/{plural}/{name}")
    async def put_cluster(plural: str, name: str, request: Request):
        who, kind = principal(request), kind_of(plural, False)
        if not who.can_write(None):
            raise ApiError(403, "Forbidden", f"only admins change {plural}")
        return respond(*await run_in_threadpool(put, kind, None, name, await request.body()))

    @app.delete(API + "/{plural}/{name}")
    def delete_cluster(plural: str, name: str, request: Request):
        who, kind = principal(request), kind_of(plural, False)
        if not who.can_write(None):
            raise ApiError(403, "Forbidden", f"only admins change {plural}")
        return delete(kind, "", name)

    # ---- plan and runs -------------------------------------------------------------------------------

    def visible_stack(who: Principal, stack: str) -> bool:
        if who.admin:
            return True
        namespace = stack_namespace(stack)
        return namespace is not None and who.can_see(namespace)

    def held_back(conn) -> list[str]:
        """What the last background replan found that a cluster would reject: while there is any, no run is queued."""
        return json.loads(store.get_state(conn, "problems") or "[]")

    @app.get("/plan")
    def get_plan(request: Request):
        who = principal(request)
        with store.read() as conn:
            plan = overlaid(json.loads(store.get_state(conn, "plan") or '{"replicas": [], "unscheduled": []}'),
                            {deployment: json.loads(part) for (deployment, _), part in store.pending_parts(conn, None).items()})
            problems = held_back(conn)
        if who.admin:
            plan["problems"] = problems  # why no stack is applied, when the background replan found objects to reject
        else:
            for key in ("replicas", "unscheduled", "dropped"):
                plan[key] = [r for r in plan.get(key, []) if who.can_see(r["deployment"].split("/", 1)[0])]
        return JSONResponse(plan)

    @app.get("/runs")
    def list_runs(request: Request):
        who = principal(request)
        with store.read() as conn:
            return JSONResponse({"items": [r for r in store.list_runs(conn) if visible_stack(who, r["stack"])]})

    @app.get("/runs/{run_id}")
    def get_run(run_id: str, request: Request):
        who = principal(request)
        number = int(run_id) if run_id.isdigit() and len(run_id) < 20 else 0
        if not 0 < number <= MAX_RUN_ID:  # not a run id at all: as unknown as one that was never issued
            raise ApiError(404, "NotFound", f"run {run_id[:40]} not found")
        with store.read() as conn:
            run = store.get_run(conn, number)
        if run is None or not visible_stack(who, run["stack"]):
            raise ApiError(404, "NotFound", f"run {number} not found")
        return JSONResponse(run)

    # ---- the page --------------------------------------------------------------------------------------

    def cookie_options(request: Request) -> dict:
        return {"httponly": True, "samesite": "strict", "secure": request.url.scheme == "https", "path": "/"}

    def checked_form(request: Request, csrf: str) -> Caller:
        """A form post from the page: signed in, and carrying this session's CSRF token (scripts use bearer)."""
        who = caller(request)
        if who.how == "session" and not (who.csrf and hmac.compare_digest(csrf.encode(), who.csrf.encode())):
            raise ApiError(403, "Forbidden", "the form's CSRF token does not match this session; reload the page")
        return who

    @app.get("/", response_class=HTMLResponse)
    def page(request: Request, message: str | None = None, page: int = 1, pools: int = 1):
        who = authenticate(request.headers, request.cookies)
        if who is None:
            form_token = secrets.token_urlsafe(32)
            response = HTMLResponse(templates.get_template("signin.html").render(message=message, csrf=form_token))
            response.set_cookie(SIGNIN_COOKIE, form_token, max_age=3600, **cookie_options(request))
            return response
        person = who.principal
        with store.read() as conn:
            plan, observed, gateways = observation(conn)
            gateway = conditions.gateway_address(plan, observed, gateways)
            clusters = store.list(conn, "InferenceCluster")
            classes = {c["metadata"]["name"]: c for c in store.list(conn, "InferenceClass")}
            visible = [o for o in store.list(conn, "ModelDeployment") if person.can_see(o["metadata"]["namespace"])]
            shown = Paged(visible, page, "page", {"pools": pools})
            deployments = statuses(shown.items, conn)  # statuses of one page only: a fleet has thousands
            services = statuses([o for o in store.list(conn, "ModelService") if person.can_see(o["metadata"]["namespace"])], conn)
            run_rows = [r for r in store.list_runs(conn, 50) if visible_stack(person, r["stack"])]
            held = held_back(conn) if person.admin else []  # they may name any team's objects
        pool_rows = _pools(clusters, classes, plan)
        totals = {"clusters": len(clusters), "pools": len(pool_rows), "used": sum(p["used"] for p in pool_rows),
                  "total": sum(p["total"] for p in pool_rows), "deployments": len(visible)}
        return HTMLResponse(templates.get_template("fleet.html").render(
            who=person, pools=Paged(pool_rows, pools, "pools", {"page": shown.number}), deployments=deployments,
            deployment_pages=shown, services=services, runs=run_rows, message=message, gateway=gateway,
            totals=totals, csrf=who.csrf or "", held=held[:20]))

    @app.post("/ui/signin")
    def signin(request: Request, token: str = Form(..., max_length=4096), csrf: str = Form(..., max_length=100)):
        expected = request.cookies.get(SIGNIN_COOKIE, "")
        if not expected or not hmac.compare_digest(csrf.encode(), expected.encode()):
            raise ApiError(403, "Forbidden", "the sign-in form's CSRF token does not match; reload the page")
        if tokens.resolve(token) is None:
            return RedirectResponse("/?message=That+token+is+not+valid", status_code=303)
        with store.write() as conn:
            session_id, _ = store.create_session(conn, digest(token))
        response = RedirectResponse("/", status_code=303)
        response.set_cookie(COOKIE, session_id, **cookie_options(request))
        response.delete_cookie(SIGNIN_COOKIE, path="/")
        return response

    @app.post("/ui/signout")
    def signout(request: Request, csrf: str = Form("", max_length=100)):
        checked_form(request, csrf)
        session_id = request.cookies.get(COOKIE)
        if session_id:
            with store.write() as conn:
                store.delete_session(conn, session_id)  # the cookie's id stops working, even if it was copied
        response = RedirectResponse("/", status_code=303)
        response.delete_cookie(COOKIE, path="/")
        return response

    @app.post("/ui/apply")
    def ui_apply(request: Request, manifest: str = Form(...), csrf: str = Form("", max_length=100)):
        who = checked_form(request, csrf).principal
        try:
            from fleet.loader import parse_text

            documents, problems = parse_text(manifest, "manifest")
            if problems:
                raise ApiError(400, "BadRequest", str(problems[0]))
            data = documents[0].data if len(documents) == 1 else None
            if not isinstance(data, dict):
                raise ApiError(400, "BadRequest", "paste one object (a YAML mapping)")
            kind = data.get("kind")
            plural = next((p for p, (k, _) in PLURALS.items() if k == kind), None)
            if plural is None:
                raise ApiError(400, "BadRequest", f"unknown kind {str(kind)[:80]!r}")
            namespaced = PLURALS[plural][1]
            meta: dict = data["metadata"] if isinstance(data.get("metadata"), dict) else {}
            namespace = str(meta.get("namespace") or "default") if namespaced else None
            if not who.can_write(namespace):
                raise ApiError(403, "Forbidden", f"{who.name} may not write {'in ' + namespace if namespace else plural}")
            name = str(meta.get("name") or "")
            put(str(kind), namespace, name, manifest.encode())
            message = f"Accepted {kind} {name}"
        except ApiError as exc:
            message = exc.message + "".join(f"; {c.get('text') or c['message']}" for c in exc.causes[:5])
        return RedirectResponse("/?" + _query(message), status_code=303)

    @app.post("/ui/delete")
    def ui_delete(request: Request, kind: str = Form(..., max_length=64), namespace: str = Form(..., max_length=63),
                  name: str = Form(..., max_length=253), csrf: str = Form("", max_length=100)):
        who = checked_form(request, csrf).principal
        try:
            if kind not in ("ModelDeployment", "ModelService") or not who.can_write(namespace):
                raise ApiError(403, "Forbidden", f"{who.name} may not delete {kind} {namespace}/{name}")
            delete(kind, namespace, name)
            message = f"Deleted {kind} {namespace}/{name}"
        except ApiError as exc:
            message = exc.message
        return RedirectResponse("/?" + _query(message), status_code=303)

    return app


PAGE_SIZE = 50  # rows per table page: the page of a 2,000-deployment fleet stays small and quick


class Paged:
    """One page of a table's rows (1-based; out of range is the nearest page) and the links to its neighbours,
    keeping the other tables' pages (`others`: query parameter -> page)."""

    def __init__(self, rows: list, number: int, parameter: str, others: dict[str, int]):
        self.count = max(1, -(-len(rows) // PAGE_SIZE))
        self.number = min(max(1, number), self.count)
        self.items = rows[(self.number - 1) * PAGE_SIZE: self.number * PAGE_SIZE]
        self.first = (self.number - 1) * PAGE_SIZE + 1 if rows else 0
        self.last = (self.number - 1) * PAGE_SIZE + len(self.items)
        self.total = len(rows)
        self._parameter, self._others = parameter, others

    def __iter__(self):
        return iter(self.items)

    def link(self, number: int) -> str | None:
        from urllib.parse import urlencode

        if not 1 <= number <= self.count or number == self.number:
            return None
        return "/?" + urlencode({**self._others, self._parameter: number})


def _query(message: str) -> str:
    from urllib.parse import urlencode
    return urlencode({"message": message})


def _pools(clusters: list[dict], classes: dict, plan: dict) -> list[dict]:
    """Per pool: devices in total and claimed by placed replicas (GPU view of the fleet)."""
    used: dict[tuple[str, str], int] = {}
    for r in plan.get("replicas", []):
        for e in r["engines"]:
            for m in e["members"]:
                used[(r["cluster"], m["pool"])] = used.get((r["cluster"], m["pool"]), 0) + m["nodes"] * sum(m["devices"].values())
    rows = []
    for c in clusters:
        for p in c["spec"]["nodePools"]:
            nodes = p.get("maxNodeCount") or p.get("nodeCount", 1)
            devices = (classes.get(p["className"]) or {}).get("spec", {}).get("devices", [])
            per_node = sum(d.get("count", 1) for d in devices if d.get("claim", "DRA") == "DRA")
            total = nodes * per_node
            claimed = used.get((c["metadata"]["name"], p["name"]), 0)
            rows.append({"cluster": c["metadata"]["name"], "pool": p["name"], "nodes": nodes, "total": total,
                         "used": claimed, "free": total - claimed})
    return rows


class StartupError(ModelplaneError):
    """The portal cannot start for a reason the user fixes (a busy port, a bad database URL): one line, exit 2."""


def listening_socket(host: str, port: int):
    """Bind before anything else starts, so a busy port is a clear message, not a server log line."""
    import socket

    try:
        info = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM)[0]
        # with its protocol (TCP) named: asyncio turns Nagle's algorithm off on accepted connections only then, and
        # with it on, every response waited ~40 ms for the client's delayed ACK between its headers and its body
        sock = socket.socket(info[0], socket.SOCK_STREAM, info[2] or socket.IPPROTO_TCP)
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        sock.bind(info[4])
        sock.listen(2048)
    except OSError as exc:
        raise StartupError(f"cannot listen on {host}:{port}: {exc.strerror or exc}") from None
    sock.set_inheritable(True)
    return sock


def serve(host: str, port: int, data_dir: Path, tokens_file: Path, database: str | None, apply: bool,
          worker_interval: float = 1.0, state_dir: Path = Path(".modelplane"), backend: str | None = None,
          announce=None, runner=None, parallel: int = 2) -> None:
    """Run the portal; `announce()` is called once it listens (a banner that never precedes a startup error).
    `runner`: how accepted changes are applied (a worker RunnerFactory; default: Pulumi engines on this host)."""
    import signal

    import uvicorn

    from automation.portal.store import StoreError
    from automation.portal.worker import Worker, pulumi_runner

    tokens = TokensFile(tokens_file)
    try:
        data_dir.mkdir(mode=0o700, parents=True, exist_ok=True)
        store = Store(database or f"sqlite:///{(data_dir / 'portal.db').resolve()}")
    except (OSError, StoreError) as exc:
        raise StartupError(str(exc)) from None
    sock = listening_socket(host, port)
    if announce is not None:
        announce()
    if hasattr(signal, "SIGHUP"):  # `kill -HUP` reloads the tokens file (a revoked token stops working at once)
        signal.signal(signal.SIGHUP, lambda *_: tokens.reload())
    fewer_collections()  # the portal's own process holds the fleet and its capacity ledger (placing.py)
    replanner = ReplanWorker()
    app = create_app(store, tokens, apply, replan_worker=replanner)
    worker = (Worker(store, state_dir, interval=worker_interval, runner=runner or pulumi_runner(backend),
                     parallel=parallel) if apply else None)
    if worker:
        worker.start()
    try:
        # uvicorn handles SIGINT and SIGTERM (a graceful stop) and leaves SIGHUP to us
        uvicorn.Server(uvicorn.Config(app, log_level="warning")).run(sockets=[sock])
    finally:
        replanner.close()
        if worker:
            worker.stop()
