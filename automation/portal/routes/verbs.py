"""The write verbs, as the Kubernetes API server takes them: PUT, POST to a collection (create), PATCH (merge, JSON and
apply patches; /scale too, as `kubectl scale` sends it) and DELETE with DeleteOptions; `dryRun=All` on each. All go
through `Portal`'s one write road (validation, quota, placement or replan, in the write queue)."""

from __future__ import annotations

import json

from fastapi import APIRouter, Request
from fastapi.responses import JSONResponse
from starlette.datastructures import QueryParams

from automation.portal.deps import Objects, Who, may_write, queued
from automation.portal.portal import Portal, kind_of
from automation.portal.routes.composed import read_only, scale_of
from automation.portal.routes.objects import respond
from automation.portal.service import API, ApiError

router = APIRouter(prefix=API)
POLICIES = ("Orphan", "Background", "Foreground")  # accepted; what each means here: docs/portal.md


def dry_run(params: QueryParams) -> bool:
    values = params.getlist("dryRun")
    if any(v != "All" for v in values):
        raise ApiError(400, "BadRequest", f"dryRun: Unsupported value: {values[0][:40]!r}: supported values: \"All\"")
    return bool(values)


def manager(request: Request, required: bool = False) -> str | None:
    """fieldManager, or (not for apply) what Kubernetes takes instead: the User-Agent up to its first '/'."""
    given = request.query_params.get("fieldManager")
    if given is not None:
        if not given or len(given) > 128 or not given.isprintable():
            raise ApiError(422, "Invalid", "fieldManager: Invalid value: must be 1 to 128 printable characters")
        return given
    if required:
        return None
    agent = request.headers.get("user-agent", "").split("/", 1)[0]
    return agent[:128] if agent and agent.isprintable() else "unknown"


def force(params: QueryParams) -> bool:
    value = params.get("force")
    if value not in (None, "true", "false"):
        raise ApiError(400, "BadRequest", "force must be true or false")
    return value == "true"


def checked_plural(plural: str, namespaced: bool) -> str:
    if plural == "modelreplicas":
        raise read_only(plural)
    return kind_of(plural, namespaced)


# ---- PUT: replace (or create) -------------------------------------------------------------------------------

@router.put("/namespaces/{namespace}/{plural}/{name}")
async def put_namespaced(namespace: str, plural: str, name: str, request: Request, who: Who, portal: Objects) -> JSONResponse:
    kind = kind_of(plural, True)
    may_write(who, namespace, plural)
    return respond(*await queued(portal, portal.writes.put, kind, namespace, name, await request.body(), manager(request),
                                 dry_run(request.query_params)))


@router.put("/{plural}/{name}")
async def put_cluster(plural: str, name: str, request: Request, who: Who, portal: Objects) -> JSONResponse:
    kind = kind_of(plural, False)
    may_write(who, None, plural)
    return respond(*await queued(portal, portal.writes.put, kind, None, name, await request.body(), manager(request),
                                 dry_run(request.query_params)))


# ---- POST: create ---------------------------------------------------------------------------------------------

@router.post("/namespaces/{namespace}/{plural}")
async def create_namespaced(namespace: str, plural: str, request: Request, who: Who, portal: Objects) -> JSONResponse:
    kind = checked_plural(plural, True)
    may_write(who, namespace, plural)
    return respond(*await queued(portal, portal.writes.create, kind, namespace, await request.body(), manager(request),
                                 dry_run(request.query_params)))


@router.post("/{plural}")
async def create_cluster(plural: str, request: Request, who: Who, portal: Objects) -> JSONResponse:
    kind = checked_plural(plural, False)
    may_write(who, None, plural)
    return respond(*await queued(portal, portal.writes.create, kind, None, await request.body(), manager(request),
                                 dry_run(request.query_params)))


# ---- PATCH ----------------------------------------------------------------------------------------------------

async def _patch(portal: Portal, kind: str, namespace: str | None, name: str, request: Request) -> JSONResponse:
    media = request.headers.get("content-type", "")
    applying = media.split(";")[0].strip().lower() == "application/apply-patch+yaml"
    return respond(*await queued(portal, portal.writes.patch, kind, namespace, name, await request.body(), media,
                                 manager(request, required=applying), force(request.query_params),
                                 dry_run(request.query_params)))


@router.put("/namespaces/{namespace}/modeldeployments/{name}/scale")
async def put_scale(namespace: str, name: str, request: Request, who: Who, portal: Objects) -> JSONResponse:
    """`kubectl scale`: the Scale's spec.replicas becomes the deployment's, through the same checks as a PUT."""
    may_write(who, namespace, "modeldeployments")
    raw = await request.body()
    return await queued(portal, _rescale, portal, namespace, name, raw, dry_run(request.query_params))


def _rescale(portal: Portal, namespace: str, name: str, raw: bytes, dry: bool) -> JSONResponse:
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
    return JSONResponse(scale_of(portal.writes.scale(namespace, name, replicas, meta.get("resourceVersion"), dry_run=dry)))


@router.patch("/namespaces/{namespace}/modeldeployments/{name}/scale")
async def patch_scale(namespace: str, name: str, request: Request, who: Who, portal: Objects) -> JSONResponse:
    """`kubectl scale` sends a merge patch of the Scale: applied to the Scale as stored, inside the write."""
    may_write(who, namespace, "modeldeployments")
    body = await queued(portal, portal.writes.scale, namespace, name, None, None, await request.body(),
                        request.headers.get("content-type", ""), manager(request) or "unknown",
                        dry_run(request.query_params))
    return JSONResponse(scale_of(body))


@router.patch("/namespaces/{namespace}/{plural}/{name}")
async def patch_namespaced(namespace: str, plural: str, name: str, request: Request, who: Who, portal: Objects) -> JSONResponse:
    kind = checked_plural(plural, True)
    if not who.can_see(namespace):
        raise ApiError(404, "NotFound", f"{plural} {name[:80]!r} not found")
    may_write(who, namespace, plural)
    return await _patch(portal, kind, namespace, name, request)


@router.patch("/{plural}/{name}")
async def patch_cluster(plural: str, name: str, request: Request, who: Who, portal: Objects) -> JSONResponse:
    kind = checked_plural(plural, False)
    may_write(who, None, plural)
    return await _patch(portal, kind, None, name, request)


# ---- DELETE ---------------------------------------------------------------------------------------------------

def delete_options(raw: bytes, params: QueryParams) -> tuple[dict, bool]:
    """(preconditions, dry run) of a DeleteOptions body or its query parameters; a propagationPolicy is checked
    and accepted (what each means here: docs/portal.md)."""
    try:
        options = json.loads(raw) if raw.strip() else {}
    except (ValueError, RecursionError):
        raise ApiError(400, "BadRequest", "the body is not a JSON DeleteOptions object") from None
    if not isinstance(options, dict) or options.get("kind") not in (None, "DeleteOptions"):
        raise ApiError(400, "BadRequest", "the body must be a DeleteOptions object")
    policy = options.get("propagationPolicy", params.get("propagationPolicy"))
    if policy is not None and policy not in POLICIES:
        raise ApiError(422, "Invalid", f"propagationPolicy: Unsupported value: {str(policy)[:40]!r}: supported "
                                       f"values: {', '.join(POLICIES)}")
    # a value of the wrong type is a 400, as DeleteOptions that do not decode are to the API server: an empty list
    # read as "no preconditions" deleted what the client meant to delete only if unchanged
    preconditions = options.get("preconditions")
    preconditions = {} if preconditions is None else preconditions
    if not isinstance(preconditions, dict) or any(not isinstance(preconditions.get(field), (str, type(None)))
                                                  for field in ("uid", "resourceVersion")):
        raise ApiError(400, "BadRequest", "preconditions must be an object of strings (uid, resourceVersion)")
    runs = options.get("dryRun")
    runs = [] if runs is None else runs
    if not isinstance(runs, list) or any(v != "All" for v in runs):
        raise ApiError(400, "BadRequest", 'dryRun: Unsupported value: supported values: "All"')
    return preconditions, bool(runs) or dry_run(params)


@router.delete("/namespaces/{namespace}/{plural}/{name}", response_model=None)
async def delete_namespaced(namespace: str, plural: str, name: str, request: Request, who: Who, portal: Objects) -> dict:
    kind = checked_plural(plural, True)
    if not who.can_see(namespace):
        raise ApiError(404, "NotFound", f"{plural} {name[:80]!r} not found")
    may_write(who, namespace, plural)
    preconditions, dry = delete_options(await request.body(), request.query_params)
    return await queued(portal, portal.writes.delete, kind, namespace, name, preconditions, dry)


@router.delete("/{plural}/{name}", response_model=None)
async def delete_cluster(plural: str, name: str, request: Request, who: Who, portal: Objects) -> dict:
    kind = checked_plural(plural, False)
    may_write(who, None, plural)
    preconditions, dry = delete_options(await request.body(), request.query_params)
    return await queued(portal, portal.writes.delete, kind, "", name, preconditions, dry)
