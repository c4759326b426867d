"""The modelplane.ai kinds, as the Kubernetes API serves them: namespaced kinds (a team's: it reads and writes its
namespaces) and cluster-scoped kinds (the fleet: everyone reads, admins write). Reads and watches here; the
write verbs in routes/verbs.py."""

from __future__ import annotations

from fastapi import APIRouter, Request
from fastapi.responses import JSONResponse

from automation.portal import watch
from automation.portal.deps import Objects, Who
from automation.portal.portal import kind_of
from automation.portal.service import API, ApiError

router = APIRouter(prefix=API)


def warning_header(message: str) -> str:
    """One RFC 7234 warning value, as the Kubernetes API server sends validation warnings (`299 - "text"`)."""
    text = message.replace("\\", "\\\\").replace('"', '\\"').encode("ascii", "replace").decode()
    return f'299 - "{text}"'


def respond(body: dict, code: int, warnings: list[str]) -> JSONResponse:
    """The object, with its validation warnings in a Warning header, as the Kubernetes API server says them."""
    headers = {"Warning": ", ".join(warning_header(w) for w in warnings)} if warnings else None
    return JSONResponse(body, status_code=code, headers=headers)


# ---- namespaced kinds -------------------------------------------------------------------------------------

@router.get("/namespaces/{namespace}/{plural}")
def list_namespaced(namespace: str, plural: str, request: Request, who: Who, portal: Objects):
    kind = kind_of(plural, True)
    if not who.can_see(namespace):
        raise ApiError(404, "NotFound", f"namespace {namespace[:80]!r} not found")
    if watch.watching(request):
        return watch.respond(portal, who, kind, namespace, request)
    with portal.store.read() as conn:
        known = portal.observation(conn)  # read once per request
        items = [portal.with_status(b, conn, known) for b in portal.store.list(conn, kind, namespace)]
        if kind == "ModelEndpoint":  # the replicas' endpoints, as the reference composes them
            items += portal.composed_in(namespace, kind, conn, known)
        version = portal.store.get_state(conn, "resourceVersion") or "0"
    return JSONResponse({"apiVersion": "modelplane.ai/v1alpha1", "kind": f"{kind}List",
                         "metadata": {"resourceVersion": version}, "items": items})


@router.get("/namespaces/{namespace}/{plural}/{name}")
def get_namespaced(namespace: str, plural: str, name: str, who: Who, portal: Objects):
    kind = kind_of(plural, True)
    if not who.can_see(namespace):
        raise ApiError(404, "NotFound", f"{plural} {name[:80]!r} not found")
    with portal.store.read() as conn:
        body = portal.store.get(conn, kind, namespace, name)
        if body is None and kind == "ModelEndpoint":
            body = next((o for o in portal.composed_in(namespace, kind, conn) if o["metadata"]["name"] == name), None)
            if body is not None:
                return JSONResponse(body)
        if body is None:
            raise ApiError(404, "NotFound", f"{plural} {name[:80]!r} not found")
        return JSONResponse(portal.with_status(body, conn))


# ---- cluster-scoped kinds ----------------------------------------------------------------------------------

@router.get("/{plural}")
def list_cluster(plural: str, request: Request, who: Who, portal: Objects):
    kind = kind_of(plural, False)
    if watch.watching(request):
        return watch.respond(portal, who, kind, None, request)
    with portal.store.read() as conn:
        items = portal.statuses(portal.store.list(conn, kind), conn)
    return JSONResponse({"apiVersion": "modelplane.ai/v1alpha1", "kind": f"{kind}List", "items": items})


@router.get("/{plural}/{name}")
def get_cluster(plural: str, name: str, who: Who, portal: Objects):
    kind = kind_of(plural, False)
    with portal.store.read() as conn:
        body = portal.store.get(conn, kind, "", name)
        if body is None:
            raise ApiError(404, "NotFound", f"{plural} {name[:80]!r} not found")
        return JSONResponse(portal.with_status(body, conn))
