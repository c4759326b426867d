"""The modelplane.ai kinds, as the Kubernetes API serves them: namespaced kinds (a team's: it reads and writes its
namespaces) and cluster-scoped kinds (the fleet: everyone reads, admins write). Reads and watches here; the
write verbs in routes/verbs.py."""

from __future__ import annotations

from fastapi import APIRouter, Request
from fastapi.responses import JSONResponse, Response
from starlette.concurrency import run_in_threadpool

from automation.portal import watch
from automation.portal.deps import Objects, Who
from automation.portal.listing import ListQuery, answer_list, answer_object, list_query, wants_gzip
from automation.portal.read_cache import CachedList
from automation.portal.portal import kind_of
from automation.portal.resources import RESOURCES
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
async def list_namespaced(namespace: str, plural: str, request: Request, who: Who, portal: Objects) -> Response:
    kind = kind_of(plural, True)
    if not who.can_see(namespace):
        raise ApiError(404, "NotFound", f"namespace {namespace[:80]!r} not found")
    query = list_query(request)  # a bad selector or continue token is a 400 before anything is read
    if watch.watching(request):
        return watch.respond(portal, who, kind, namespace, request, query.matches)
    listed = await portal.reads.listed(kind, namespace)
    return answer_list(request, query, kind, listed.items, listed.version, listed, await _gzipped(request, query, listed))


@router.get("/namespaces/{namespace}/{plural}/{name}")
def get_namespaced(namespace: str, plural: str, name: str, request: Request, who: Who, portal: Objects) -> JSONResponse:
    kind = kind_of(plural, True)
    if not who.can_see(namespace):
        raise ApiError(404, "NotFound", f"{plural} {name[:80]!r} not found")
    with portal.store.read() as conn:
        body = portal.store.get(conn, kind, namespace, name)
        if body is None and kind == "ModelEndpoint":
            body = next((o for o in portal.reads.composed_in(namespace, kind, conn) if o["metadata"]["name"] == name), None)
            if body is not None:
                return answer_object(request, body)
        if body is None:
            raise ApiError(404, "NotFound", f"{plural} {name[:80]!r} not found")
        return answer_object(request, portal.reads.with_status(body, conn))


# ---- cluster-scoped kinds ----------------------------------------------------------------------------------

@router.get("/{plural}")
async def list_cluster(plural: str, request: Request, who: Who, portal: Objects) -> Response:
    """A cluster-scoped kind, or a namespaced one across the namespaces the caller may see (`kubectl get -A`)."""
    served = RESOURCES.get(plural)
    if served is None:
        raise ApiError(404, "NotFound", f"the server could not find the requested resource ({plural[:100]})")
    kind = served.kind
    query = list_query(request)
    if watch.watching(request):
        return watch.respond(portal, who, kind, None, request, query.matches)
    listed = await portal.reads.listed(kind, None)
    if served.namespaced and not who.admin:  # another caller's namespaces are not in its answer
        items = [o for o in listed.items if who.can_see(o["metadata"].get("namespace") or "")]
        return answer_list(request, query, kind, items, listed.version)
    return answer_list(request, query, kind, listed.items, listed.version, listed, await _gzipped(request, query, listed))


async def _gzipped(request: Request, query: ListQuery, listed: CachedList) -> bytes | None:
    """The kept list gzipped when this client is sent it (made once per revision, on a worker thread: about 2.4 ms a
    megabyte), else None: a client that does not accept gzip never has it made."""
    return await run_in_threadpool(lambda: listed.gzipped) if wants_gzip(request, query, listed) else None


@router.get("/{plural}/{name}")
def get_cluster(plural: str, name: str, request: Request, who: Who, portal: Objects) -> JSONResponse:
    kind = kind_of(plural, False)
    with portal.store.read() as conn:
        body = portal.store.get(conn, kind, "", name)
        if body is None:
            raise ApiError(404, "NotFound", f"{plural} {name[:80]!r} not found")
        return answer_object(request, portal.reads.with_status(body, conn))

