"""What the portal composes from ModelDeployments (ModelReplicas, read-only) and the scale subresource as read (its
writes are with the other write verbs, routes/verbs.py)."""

from __future__ import annotations

from fastapi import APIRouter, Request
from fastapi.responses import JSONResponse, Response

from automation.portal.deps import Objects, Who
from automation.portal.listing import answer_list, answer_object, list_query
from automation.portal.service import API, ApiError
from automation.portal.state import RESOURCE_VERSION

router = APIRouter(prefix=API)


def read_only(plural: str) -> ApiError:
    return ApiError(405, "MethodNotAllowed", f"{plural} are composed from ModelDeployments and are read-only",
                    headers={"Allow": "GET"})


@router.get("/namespaces/{namespace}/modelreplicas")
def list_replicas(namespace: str, request: Request, who: Who, portal: Objects) -> Response:
    if not who.can_see(namespace):
        raise ApiError(404, "NotFound", f"namespace {namespace[:80]!r} not found")
    query = list_query(request)
    with portal.store.read() as conn:
        items = portal.reads.composed_in(namespace, "ModelReplica", conn)
        version = str(RESOURCE_VERSION.get(conn))
    return answer_list(request, query, "ModelReplica", items, version)


@router.get("/namespaces/{namespace}/modelreplicas/{name}")
def get_replica(namespace: str, name: str, request: Request, who: Who, portal: Objects) -> JSONResponse:
    if who.can_see(namespace):
        with portal.store.read() as conn:
            found = [o for o in portal.reads.composed_in(namespace, "ModelReplica", conn) if o["metadata"]["name"] == name]
        if found:
            return answer_object(request, found[0])
    raise ApiError(404, "NotFound", f"modelreplicas {name[:80]!r} not found")


@router.api_route("/namespaces/{namespace}/modelreplicas/{name}", methods=["PUT", "PATCH", "DELETE", "POST"],
                  include_in_schema=False)
def write_replica(namespace: str, name: str, who: Who) -> Response:
    raise read_only("modelreplicas")


@router.get("/namespaces/{namespace}/modeldeployments/{name}/scale")
def get_scale(namespace: str, name: str, who: Who, portal: Objects) -> JSONResponse:
    if not who.can_see(namespace):
        raise ApiError(404, "NotFound", f"modeldeployments {name[:80]!r} not found")
    with portal.store.read() as conn:
        body = portal.store.get(conn, "ModelDeployment", namespace, name)
        if body is None:
            raise ApiError(404, "NotFound", f"modeldeployments {name[:80]!r} not found")
        return JSONResponse(scale_of(portal.reads.with_status(body, conn)))


def scale_of(body: dict) -> dict:
    meta = body["metadata"]
    return {"apiVersion": "autoscaling/v1", "kind": "Scale",
            "metadata": {"name": meta["name"], "namespace": meta.get("namespace"),
                         "resourceVersion": meta.get("resourceVersion"), "uid": meta.get("uid")},
            "spec": {"replicas": body["spec"]["replicas"]},
            "status": {"replicas": ((body.get("status") or {}).get("replicas") or {}).get("total", 0),
                       "selector": f"modelplane.ai/deployment={meta['name']}"}}
