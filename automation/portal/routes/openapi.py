"""OpenAPI for kubectl: `/openapi/v2` (JSON) and `/openapi/v3` (its index and the modelplane.ai/v1alpha1 document),
generated from the same models as `modelplane schema` (fleet/json_schema.py), so `kubectl explain md.spec` reads the
fields the portal checks.

Each kind's schema is inlined as a CRD's is (Pydantic's `$defs` are shared names across kinds that may differ), with
`x-kubernetes-group-version-kind` on it, which is how kubectl finds a kind's schema. The v3 document also lists each
item path's operations as served; its PATCH declares `fieldValidation`, the parameter kubectl looks for to leave
validation to the server (the portal always validates strictly). kubectl asks for v2 as protobuf only, which is not
served (406): kubectl 1.32 reads v3.
"""

from __future__ import annotations

import hashlib
import json
from functools import lru_cache
from typing import Any

from fastapi import APIRouter, Request
from fastapi.responses import JSONResponse, Response

from automation.portal.deps import Who
from automation.portal.resources import GROUP, RESOURCES, VERSION, Served, path_of, served_verbs
from automation.portal.service import ApiError
from fleet.json_schema import schema

router = APIRouter(include_in_schema=False)
GV_PATH = f"apis/{GROUP}/{VERSION}"
DROPPED = {"title", "$schema", "$id", "$defs"}
ACTIONS = {"get": "get", "list": "get", "create": "post", "update": "put", "patch": "patch", "delete": "delete",
           "deletecollection": "delete"}
PATCH_TYPES = ("application/json-patch+json", "application/merge-patch+json", "application/apply-patch+yaml")


def definition_name(kind: str) -> str:
    """As the API server names a CRD's definition: the group reversed, the version, the kind."""
    return ".".join([*reversed(GROUP.split(".")), VERSION, kind])


def gvk(kind: str) -> dict:
    return {"group": GROUP, "kind": kind, "version": VERSION}


def openapi_schema(node: Any, defs: dict, v3: bool, depth: int = 0) -> Any:
    """A JSON Schema (2020-12, as Pydantic writes it) as an OpenAPI schema, every `$ref` inlined."""
    if depth > 40:  # the models are not recursive; a guard, not a limit anyone reaches
        return {"type": "object", "x-kubernetes-preserve-unknown-fields": True}
    if isinstance(node, list):
        return [openapi_schema(n, defs, v3, depth + 1) for n in node]
    if not isinstance(node, dict):
        return node
    if "$ref" in node:
        target = defs[node["$ref"].rsplit("/", 1)[-1]]
        return openapi_schema({**target, **{k: v for k, v in node.items() if k != "$ref"}}, defs, v3, depth + 1)
    if "anyOf" in node:  # X or null: an optional field, nullable in v3
        options = [o for o in node["anyOf"] if o.get("type") != "null"]
        rest = {k: v for k, v in node.items() if k != "anyOf"}
        inner = openapi_schema({**options[0], **rest}, defs, v3, depth + 1) if len(options) == 1 else {}
        return {**inner, "nullable": True} if v3 else inner
    out: dict[str, Any] = {}
    for key, value in node.items():
        if key in DROPPED or (key == "default" and value is None):
            continue
        if key == "const":
            out["enum"] = [value]
        elif key == "properties":
            out[key] = {name: openapi_schema(v, defs, v3, depth + 1) for name, v in value.items()}
        elif key == "items":
            out[key] = openapi_schema(value, defs, v3, depth + 1)
        elif key == "additionalProperties":
            if isinstance(value, dict):
                out[key] = openapi_schema(value, defs, v3, depth + 1)
            elif value is True and "properties" not in node:
                out["x-kubernetes-preserve-unknown-fields"] = True  # a free-form object (status)
        else:
            out[key] = value
    return out


@lru_cache(maxsize=2)
def definitions(v3: bool) -> dict[str, dict]:
    out = {}
    for kind in sorted({r.kind for r in RESOURCES.values()}):
        source = schema(kind)
        converted = openapi_schema(source, source.get("$defs", {}), v3)
        converted.setdefault("description", f"{kind} ({GROUP}/{VERSION})")
        converted["x-kubernetes-group-version-kind"] = [gvk(kind)]
        out[definition_name(kind)] = converted
    return out


def operations(app, resource: Served, v3: bool) -> dict[str, dict]:
    """Item and collection paths with the operations the routes serve (v3 form)."""
    ref = {"$ref": f"#/components/schemas/{definition_name(resource.kind)}"}
    verbs = served_verbs(app, resource)
    paths: dict[str, dict] = {}
    for verb in verbs:
        if verb == "watch":
            continue
        collection = verb in ("list", "create", "deletecollection")
        path = path_of(resource, not collection, namespace="{namespace}").replace("/probe", "/{name}")
        op: dict[str, Any] = {
            "operationId": f"{verb}{'Namespaced' if resource.namespaced else ''}{resource.kind}",
            "x-kubernetes-action": verb, "x-kubernetes-group-version-kind": gvk(resource.kind),
            "responses": {"200": {"description": "OK", "content": {"application/json": {"schema": ref}}}}}
        if verb in ("create", "update", "patch"):
            op["parameters"] = [{"name": n, "in": "query", "schema": {"type": "string"}}
                                for n in ("dryRun", "fieldManager", "fieldValidation")]
            types = PATCH_TYPES if verb == "patch" else ("application/json", "application/yaml")
            op["requestBody"] = {"content": {t: {"schema": ref} for t in types}}
        paths.setdefault(path, {})[ACTIONS[verb]] = op
    return paths


def digest(document: dict) -> str:
    return hashlib.sha256(json.dumps(document, sort_keys=True).encode()).hexdigest().upper()


def v3_document(app) -> dict:
    paths: dict[str, dict] = {}
    for resource in RESOURCES.values():
        for path, ops in operations(app, resource, True).items():
            paths.setdefault(path, {}).update(ops)
    return {"openapi": "3.0.0", "info": {"title": "modelplane portal", "version": VERSION}, "paths": paths,
            "components": {"schemas": definitions(True)}}


def accepts_json(request: Request) -> bool:
    accept = request.headers.get("accept", "") or "*/*"
    return any(p.split(";")[0].strip() in ("application/json", "*/*", "application/*") for p in accept.split(","))


@router.get("/openapi/v2")
def openapi_v2(request: Request, who: Who):
    if not accepts_json(request):
        raise ApiError(406, "NotAcceptable", "only application/json is served here; kubectl reads /openapi/v3")
    return JSONResponse({"swagger": "2.0", "info": {"title": "modelplane portal", "version": VERSION}, "paths": {},
                         "definitions": definitions(False)})


@router.get("/openapi/v3")
def openapi_v3_index(request: Request, who: Who):
    url = f"/openapi/v3/{GV_PATH}?hash={digest(v3_document(request.app))}"
    return JSONResponse({"paths": {GV_PATH: {"serverRelativeURL": url}}})


@router.get(f"/openapi/v3/{GV_PATH}")
def openapi_v3(request: Request, who: Who):
    return Response(json.dumps(v3_document(request.app)), media_type="application/json")
