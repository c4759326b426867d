"""The portal's HTTP API (shaped like Kubernetes' own) and its server-rendered page."""

from __future__ import annotations

import json
from pathlib import Path

from fastapi import FastAPI, Form, Request
from fastapi.responses import HTMLResponse, JSONResponse, RedirectResponse
from jinja2 import Environment, PackageLoader, select_autoescape

from automation.portal.auth import Principal, Tokens
from automation.portal.service import MAX_BODY, PLURALS, ApiError, object_status, parse_body, replan
from automation.portal.store import Store
from fleet.stack_id import StackId, StackIdError

API = "/apis/modelplane.ai/v1alpha1"
COOKIE = "modelplane_token"
templates = Environment(loader=PackageLoader("automation.portal", "templates"), autoescape=select_autoescape(["html"]))


def warning_header(message: str) -> str:
    """One RFC 7234 warning value, as the Kubernetes API server sends validation warnings (`299 - "text"`)."""
    text = message.replace("\\", "\\\\").replace('"', '\\"').encode("ascii", "replace").decode()
    return f'299 - "{text}"'


def fleet_warnings(stored: list[dict], kind: str, name: str) -> list[str]:
    """The validation warnings about one object, seen with the whole stored fleet (a missing class, a cache...)."""
    from automation.portal.service import load_fleet
    from fleet.validate import cross_object_problems

    return [f"{p.path}: {p.message}" for p in cross_object_problems(load_fleet(stored))
            if p.warning and p.object == f"{kind}/{name}"]


def stack_namespace(stack: str) -> str | None:
    """The namespace a stack belongs to, parsed from its identity (None: platform, gateway, legacy names: admins')."""
    try:
        return StackId.parse(stack).namespace
    except StackIdError:
        return None


def create_app(store: Store, tokens: Tokens, apply: bool = True) -> FastAPI:
    app = FastAPI(title="modelplane portal", version="v1alpha1",
                  description="Submit ModelDeployments and ModelServices, watch them land. Kubernetes-shaped API.")

    @app.exception_handler(ApiError)
    async def api_error(_: Request, exc: ApiError):
        return JSONResponse(exc.status(), status_code=exc.code)

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

    def principal(request: Request) -> Principal:
        header = request.headers.get("authorization", "")
        token = header[7:].strip() if header.lower().startswith("bearer ") else request.cookies.get(COOKIE)
        who = tokens.resolve(token)
        if who is None:
            raise ApiError(401, "Unauthorized", "a valid bearer token is required")
        return who

    def kind_of(plural: str, namespaced: bool) -> str:
        entry = PLURALS.get(plural)
        if entry is None or entry[1] != namespaced:
            raise ApiError(404, "NotFound", f"the server could not find the requested resource ({plural})")
        return entry[0]

    def context(conn):
        plan = json.loads(store.get_state(conn, "plan") or "{}")
        latest: dict[str, dict] = {}
        for run in reversed(store.list_runs(conn, 1000)):
            latest[run["stack"]] = run
        gateway = next((o for o in store.list(conn, "InferenceGateway")), None)
        return plan, latest, ((gateway or {}).get("status") or {}).get("address")

    def cluster_gateways(conn) -> dict[str, str]:
        """Observed cluster gateway addresses (an admin may PUT an InferenceCluster with its status)."""
        addresses = json.loads(store.get_state(conn, "clusterGateways") or "{}")
        return addresses

    def with_status(body: dict, conn, known: tuple | None = None) -> dict:
        """The object with its status; `known` is context() and cluster_gateways() already read for this request."""
        plan, latest, gateway, gateways = known or (*context(conn), cluster_gateways(conn))
        return {**body, "status": object_status(body["kind"], body, plan, latest, gateway, gateways)}

    def statuses(bodies: list[dict], conn) -> list[dict]:
        known = (*context(conn), cluster_gateways(conn))  # read once per request, not once per object
        return [with_status(b, conn, known) for b in bodies]

    # ---- namespaced kinds ---------------------------------------------------------------------------

    @app.get(API + "/namespaces/{namespace}/{plural}")
    def list_namespaced(namespace: str, plural: str, request: Request):
        who, kind = principal(request), kind_of(plural, True)
        if not who.can_see(namespace):
            raise ApiError(404, "NotFound", f"namespace {namespace!r} not found")
        with store.read() as conn:
            items = statuses(store.list(conn, kind, namespace), conn)
            version = store.get_state(conn, "resourceVersion") or "0"
        return {"apiVersion": "modelplane.ai/v1alpha1", "kind": f"{kind}List", "metadata": {"resourceVersion": version},
                "items": items}

    @app.get(API + "/namespaces/{namespace}/{plural}/{name}")
    def get_namespaced(namespace: str, plural: str, name: str, request: Request):
        who, kind = principal(request), kind_of(plural, True)
        if not who.can_see(namespace):
            raise ApiError(404, "NotFound", f"{plural} {name!r} not found")
        with store.read() as conn:
            body = store.get(conn, kind, namespace, name)
            if body is None:
                raise ApiError(404, "NotFound", f"{plural} {name!r} not found")
            return with_status(body, conn)

    async def read_body(request: Request) -> bytes:
        raw = b""
        async for chunk in request.stream():
            raw += chunk
            if len(raw) > MAX_BODY:
                raise ApiError(413, "RequestEntityTooLarge", f"the body is larger than {MAX_BODY} bytes")
        return raw

    def respond(body: dict, code: int, warnings: list[str]) -> JSONResponse:
        """The object, with its validation warnings in a Warning header, as the Kubernetes API server says them."""
        headers = {"Warning": ", ".join(warning_header(w) for w in warnings)} if warnings else None
        return JSONResponse(body, status_code=code, headers=headers)

    def put(kind: str, namespace: str | None, name: str, raw: bytes) -> tuple[dict, int, list[str]]:
        body = parse_body(raw, kind, namespace, name)
        sent_version = body["metadata"].pop("resourceVersion", None)
        with store.write() as conn:
            existing = store.get(conn, kind, namespace or "", name)
            if sent_version is not None and (existing is None or existing["metadata"]["resourceVersion"] != str(sent_version)):
                raise ApiError(409, "Conflict", f"the object has been modified; resourceVersion {sent_version} is stale, "
                                                "get the latest and try again")
            for key in ("uid", "generation", "creationTimestamp"):
                body["metadata"].pop(key, None)
            saved = store.put(conn, kind, namespace or "", body, existing)
            replanned = replan(store, conn, apply)
            if replanned.problems:  # the change would make an object the cluster rejects: refuse it whole
                raise ApiError(422, "Invalid", "the change renders invalid objects",
                               [{"message": p} for p in replanned.problems[:20]])
            return with_status(saved, conn), (200 if existing else 201), fleet_warnings(store.list(conn), kind, name)

    @app.put(API + "/namespaces/{namespace}/{plural}/{name}")
    async def put_namespaced(namespace: str, plural: str, name: str, request: Request):
        who, kind = principal(request), kind_of(plural, True)
        if not who.can_write(namespace):
            raise ApiError(403, "Forbidden", f"{who.name} may not write in namespace {namespace!r}")
        return respond(*put(kind, namespace, name, await read_body(request)))

    def delete(kind: str, namespace: str, name: str) -> dict:
        with store.write() as conn:
            existing = store.get(conn, kind, namespace, name)
            if existing is None:
                raise ApiError(404, "NotFound", f"{kind} {name!r} not found")
            store.delete(conn, kind, namespace, name)
            replan(store, conn, apply)
        return {"kind": "Status", "apiVersion": "v1", "status": "Success", "details": {"name": name, "kind": kind}}

    @app.delete(API + "/namespaces/{namespace}/{plural}/{name}")
    def delete_namespaced(namespace: str, plural: str, name: str, request: Request):
        who, kind = principal(request), kind_of(plural, True)
        if not who.can_see(namespace):
            raise ApiError(404, "NotFound", f"{plural} {name!r} not found")
        if not who.can_write(namespace):
            raise ApiError(403, "Forbidden", f"{who.name} may not write in namespace {namespace!r}")
        return delete(kind, namespace, name)

    # ---- cluster-scoped kinds (the fleet: everyone reads, admins write) ----------------------------------

    @app.get(API + "/{plural}")
    def list_cluster(plural: str, request: Request):
        principal(request)
        kind = kind_of(plural, False)
        with store.read() as conn:
            items = statuses(store.list(conn, kind), conn)
        return {"apiVersion": "modelplane.ai/v1alpha1", "kind": f"{kind}List", "items": items}

    @app.get(API + "/{plural}/{name}")
    def get_cluster(plural: str, name: str, request: Request):
        principal(request)
        kind = kind_of(plural, False)
        with store.read() as conn:
            body = store.get(conn, kind, "", name)
            if body is None:
                raise ApiError(404, "NotFound", f"{plural} {name!r} not found")
            return with_status(body, conn)

    @app.put(API + "/{plural}/{name}")
    async def put_cluster(plural: str, name: str, request: Request):
        who, kind = principal(request), kind_of(plural, False)
        if not who.can_write(None):
            raise ApiError(403, "Forbidden", f"only admins change {plural}")
        return respond(*put(kind, None, name, await read_body(request)))

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

    @app.get("/plan")
    def get_plan(request: Request):
        who = principal(request)
        with store.read() as conn:
            plan = json.loads(store.get_state(conn, "plan") or '{"replicas": [], "unscheduled": []}')
        if not who.admin:
            for key in ("replicas", "unscheduled", "dropped"):
                plan[key] = [r for r in plan.get(key, []) if who.can_see(r["deployment"].split("/", 1)[0])]
        return plan

    @app.get("/runs")
    def list_runs(request: Request):
        who = principal(request)
        with store.read() as conn:
            return {"items": [r for r in store.list_runs(conn) if visible_stack(who, r["stack"])]}

    @app.get("/runs/{run_id}")
    def get_run(run_id: int, request: Request):
        who = principal(request)
        with store.read() as conn:
            run = store.get_run(conn, run_id)
        if run is None or not visible_stack(who, run["stack"]):
            raise ApiError(404, "NotFound", f"run {run_id} not found")
        return run

    # ---- the page --------------------------------------------------------------------------------------

    def page_principal(request: Request) -> Principal | None:
        try:
            return principal(request)
        except ApiError:
            return None

    @app.get("/", response_class=HTMLResponse)
    def page(request: Request, message: str | None = None):
        who = page_principal(request)
        if who is None:
            return HTMLResponse(templates.get_template("signin.html").render(message=message))
        with store.read() as conn:
            plan, latest, gateway = context(conn)
            clusters = store.list(conn, "InferenceCluster")
            classes = {c["metadata"]["name"]: c for c in store.list(conn, "InferenceClass")}
            deployments = statuses([o for o in store.list(conn, "ModelDeployment") if who.can_see(o["metadata"]["namespace"])], conn)
            services = statuses([o for o in store.list(conn, "ModelService") if who.can_see(o["metadata"]["namespace"])], conn)
            run_rows = [r for r in store.list_runs(conn, 50) if visible_stack(who, r["stack"])]
        return HTMLResponse(templates.get_template("fleet.html").render(
            who=who, pools=_pools(clusters, classes, plan), deployments=deployments, services=services,
            runs=run_rows, message=message, gateway=gateway))

    @app.post("/ui/signin")
    def signin(token: str = Form(...)):
        if tokens.resolve(token) is None:
            return RedirectResponse("/?message=That+token+is+not+valid", status_code=303)
        response = RedirectResponse("/", status_code=303)
        response.set_cookie(COOKIE, token, httponly=True, samesite="strict")
        return response

    @app.post("/ui/signout")
    def signout():
        response = RedirectResponse("/", status_code=303)
        response.delete_cookie(COOKIE)
        return response

    @app.post("/ui/apply")
    def ui_apply(request: Request, manifest: str = Form(...)):
        who = principal(request)
        try:
            import yaml
            data = yaml.safe_load(manifest)
            if not isinstance(data, dict):
                raise ApiError(400, "BadRequest", "paste one object (a YAML mapping)")
            kind = data.get("kind")
            plural = next((p for p, (k, _) in PLURALS.items() if k == kind), None)
            if plural is None:
                raise ApiError(400, "BadRequest", f"unknown kind {kind!r}")
            namespaced = PLURALS[plural][1]
            meta = data.get("metadata") or {}
            namespace = (meta.get("namespace") or "default") if namespaced else None
            if not who.can_write(namespace):
                raise ApiError(403, "Forbidden", f"{who.name} may not write {'in ' + namespace if namespace else plural}")
            name = meta.get("name") or ""
            put(str(kind), namespace, str(name), manifest.encode())
            message = f"Accepted {kind} {name}"
        except ApiError as exc:
            message = exc.message + "".join(f"; {c.get('text') or c['message']}" for c in exc.causes[:5])
        except Exception as exc:  # YAML errors and the like: said, not raised
            message = f"Could not read the manifest: {' '.join(str(exc).split())[:200]}"
        return RedirectResponse("/?" + _query(message), status_code=303)

    @app.post("/ui/delete")
    def ui_delete(request: Request, kind: str = Form(...), namespace: str = Form(...), name: str = Form(...)):
        who = principal(request)
        try:
            if kind not in ("ModelDeployment", "ModelService") or not who.can_write(namespace):
                raise ApiError(403, "Forbidden", f"{who.name} may not delete {kind} {namespace}/{name}")
            delete(kind, namespace, name)
            message = f"Deleted {kind} {namespace}/{name}"
        except ApiError as exc:
            message = exc.message
        return RedirectResponse("/?" + _query(message), status_code=303)

    return app


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


def serve(host: str, port: int, data_dir: Path, tokens_file: Path, database: str | None, apply: bool,
          worker_interval: float = 1.0, state_dir: Path = Path(".modelplane"), backend: str | None = None) -> None:
    import uvicorn

    from automation.portal.worker import Worker, pulumi_runner

    data_dir.mkdir(parents=True, exist_ok=True)
    store = Store(database or f"sqlite:///{(data_dir / 'portal.db').resolve()}")
    app = create_app(store, Tokens.load(tokens_file), apply)
    worker = Worker(store, state_dir, interval=worker_interval, runner=pulumi_runner(backend)) if apply else None
    if worker:
        worker.start()
    try:
        uvicorn.run(app, host=host, port=port, log_level="warning")
    finally:
        if worker:
            worker.stop()
