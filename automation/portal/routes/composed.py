"""What the portal composes from ModelDeployments (ModelReplicas, read-only) and the scale subresource."""

from __future__ import annotations

import json

from fastapi import APIRouter, Request
from fastapi.responses import JSONResponse

from automation.portal.deps import Objects, Who, may_write, queued
from automation.portal.listing import answer_list, answer_object, list_query
from automation.portal.portal import Portal
from automation.portal.service import API, ApiError

router = APIRouter(prefix=API)


def read_only(plural: str) -> ApiError:
    return ApiError(405, "MethodNotAllowed", f"{plural} are composed from ModelDeployments and are read-only",
                    headers={"Allow": "GET"})


@router.get("/namespaces/{namespace}/modelreplicas")
def list_replicas(namespace: str, request: Request, who: Who, portal: Objects):
    if not who.can_see(namespace):
        raise ApiError(404, "NotFound", f"namespace {namespace[:80]!r} not found")
    query = list_query(request)
    with portal.store.read() as conn:
        items = portal.composed_in(namespace, "ModelReplica", conn)
        version = portal.store.get_state(conn, "resourceVersion") or "0"
    return answer_list(request, query, "ModelReplica", items, version)


@router.get("/namespaces/{namespace}/modelreplicas/{name}")
def get_replica(namespace: str, name: str, request: Request, who: Who, portal: Objects):
    if who.can_see(namespace):
        with portal.store.read() as conn:
            found = [o for o in portal.composed_in(namespace, "ModelReplica", conn) if o["metadata"]["name"] == name]
        if found:
            return answer_object(request, found[0])
    raise ApiError(404, "NotFound", f"modelreplicas {name[:80]!r} not found")


@router.api_route("/namespaces/{namespace}/modelreplicas/{name}", methods=["PUT", "PATCH", "DELETE", "POST"],
                  include_in_schema=False)
def write_replica(namespace: str, name: str, who: Who):
    raise read_only("modelreplicas")


@router.get("/namespaces/{namespace}/modeldeployments/{name}/scale")
def get_scale(namespace: str, name: str, who: Who, portal: Objects):
    if not who.can_see(namespace):
        raise ApiError(404, "NotFound", f"modeldeployments {name[:80]!r} not found")
    with portal.store.read() as conn:
        body = portal.store.get(conn, "ModelDeployment", namespace, name)
        if body is None:
            raise ApiError(404, "NotFound", f"modeldeployments {name[:80]!r} not found")
        return JSONResponse(scale_of(portal.with_status(body, conn)))


@router.put("/namespaces/{namespace}/modeldeployments/{name}/scale")
async def put_scale(namespace: str, name: str, request: Request, who: Who, portal: Objects):
    """`kubectl scale`: the Scale's spec.replicas becomes the deployment's, through the same checks as a PUT."""
    may_write(who, namespace, "modeldeployments")
    raw = await request.body()
    return await queued(portal, _rescale, portal, namespace, name, raw)


def _rescale(portal: Portal, namespace: str, name: str, raw: bytes) -> JSONResponse:
    try:
        wanted = json.loads(raw or b"{}")
    except (ValueError, RecursionError):  # RecursionError: a body nested too deep to parse
        raise ApiError(400, "BadRequest", "the body is not a JSON Scale object") from None
    if not isinstance(wanted, dict):
        raise ApiError(400, "BadRequest", "the body must be a Scale object")
    spec, meta = wanted.get("spec", {}), wanted.get("metadata", {})
    if not isinstance(spec, dict):
        raise ApiError(400, "BadRequest", "spec must be an object")
    if not isinstance(meta, dict):
        raise ApiError(400, "BadRequest", "metadata must be an object")
    if wanted.get("kind") not in (None, "Scale"):
        raise ApiError(400, "BadRequest", f"the body's kind {str(wanted.get('kind'))[:80]!r} is not Scale")
    if meta.get("name") not in (None, name):
        raise ApiError(400, "BadRequest", f"metadata.name {str(meta.get('name'))[:80]!r} does not match the path")
    replicas = spec.get("replicas")
    if not isinstance(replicas, int) or isinstance(replicas, bool):
        raise ApiError(422, "Invalid", "spec.replicas must be an integer")
    # the change is made to the object as stored inside the write, never to a copy read before it
    return JSONResponse(scale_of(portal.scale(namespace, name, replicas, meta.get("resourceVersion"))))


def scale_of(body: dict) -> dict:
    meta = body["metadata"]
    return {"apiVersion": "autoscaling/v1", "kind": "Scale",
            "metadata": {"name": meta["name"], "namespace": meta.get("namespace"),
                         "resourceVersion": meta.get("resourceVersion"), "uid": meta.get("uid")},
            "spec": {"replicas": body["spec"]["replicas"]},
            "status": {"replicas": ((body.get("status") or {}).get("replicas") or {}).get("total", 0),
                       "selector": f"modelplane.ai/deployment={meta['name']}"}}
