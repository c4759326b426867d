"""OpenAPI for kubectl: `/openapi/v2` (JSON) and `/openapi/v3` (its index and the modelplane.ai/v1alpha1 document),
generated from the same models as `modelplane schema` (fleet/json_schema.py), so `kubectl explain md.spec` reads the
fields the portal checks.

Each kind's schema is inlined as a CRD's is (Pydantic's `$defs` are shared names across kinds that may differ), with
`x-kubernetes-group-version-kind` on it, which is how kubectl finds a kind's schema. The v3 document also lists each
item path's operations as served; its PATCH declares `fieldValidation`, the parameter kubectl looks for to leave
validation to the server (the portal always validates strictly). kubectl 1.32 reads v3; older kubectl (Debian's
1.20) reads v2 as gnostic's protobuf only (`application/com.github.proto-openapi.spec.v2@v1.0+protobuf`), so v2
is served in that form too: its definitions, which is what `explain` and client-side validation read.
"""

from __future__ import annotations

import hashlib
import json
from functools import lru_cache
from typing import Any

from fastapi import APIRouter, FastAPI, Request
from fastapi.responses import JSONResponse, Response

from automation.portal import protobuf
from automation.portal.deps import Who
from automation.portal.resources import GROUP, RESOURCES, VERSION, Served, path_of, served_verbs
from automation.portal.service import ApiError
from fleet.json_schema import schema

router = APIRouter(include_in_schema=False)
GV_PATH = f"apis/{GROUP}/{VERSION}"
# `oneOf`: a spec of two shapes is also one object with the fields of both (fleet/json_schema.py), which is what
# kubectl explains; the portal validates each shape itself
DROPPED = {"title", "$schema", "$id", "$defs", "oneOf"}
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


def operations(app: FastAPI, resource: Served, v3: bool) -> dict[str, dict]:
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


def v3_document(app: FastAPI) -> dict:
    paths: dict[str, dict] = {}
    for resource in RESOURCES.values():
        for path, ops in operations(app, resource, True).items():
            paths.setdefault(path, {}).update(ops)
    return {"openapi": "3.0.0", "info": {"title": "modelplane portal", "version": VERSION}, "paths": paths,
            "components": {"schemas": definitions(True)}}


def accepts_json(request: Request) -> bool:
    accept = request.headers.get("accept", "") or "*/*"
    return any(p.split(";")[0].strip() in ("application/json", "*/*", "application/*") for p in accept.split(","))


# gnostic's openapi_v2.Schema field numbers (google/gnostic openapiv2/OpenAPIv2.proto)
SCHEMA_STRINGS = {"$ref": 1, "format": 2, "title": 3, "description": 4, "pattern": 13, "discriminator": 26}
SCHEMA_DOUBLES = {"multipleOf": 6, "maximum": 7, "minimum": 9}
SCHEMA_BOOLS = {"exclusiveMaximum": 8, "exclusiveMinimum": 10, "uniqueItems": 16, "readOnly": 27}
SCHEMA_INTS = {"maxLength": 11, "minLength": 12, "maxItems": 14, "minItems": 15, "maxProperties": 17,
               "minProperties": 18}
SCHEMA_ANYS = {"default": 5, "example": 30}
PROTOBUF_V2 = "application/com.github.proto-openapi.spec.v2@v1.0+protobuf"


def any_value(value: Any) -> bytes:
    """gnostic's Any: the value as YAML (2); JSON is YAML, and kubectl parses it so."""
    return protobuf.field_bytes(2, json.dumps(value, sort_keys=True))


def named(number: int, name: str, value: bytes) -> bytes:
    """One entry of gnostic's ordered maps (NamedSchema, NamedAny: 1 name, 2 value)."""
    return protobuf.field_bytes(number, protobuf.field_bytes(1, name) + protobuf.field_bytes(2, value))


def schema_protobuf(node: dict) -> bytes:
    out = bytearray()
    for key, value in node.items():
        if key in SCHEMA_STRINGS:
            out += protobuf.field_bytes(SCHEMA_STRINGS[key], str(value))
        elif key in SCHEMA_DOUBLES:
            out += protobuf.field_double(SCHEMA_DOUBLES[key], value)
        elif key in SCHEMA_BOOLS:
            out += protobuf.field_varint(SCHEMA_BOOLS[key], bool(value))
        elif key in SCHEMA_INTS:
            out += protobuf.field_varint(SCHEMA_INTS[key], int(value))
        elif key in SCHEMA_ANYS:
            out += protobuf.field_bytes(SCHEMA_ANYS[key], any_value(value))
        elif key == "required":
            out += b"".join(protobuf.field_bytes(19, name) for name in value)
        elif key == "enum":
            out += b"".join(protobuf.field_bytes(20, any_value(v)) for v in value)
        elif key == "additionalProperties":  # AdditionalPropertiesItem: 1 schema, 2 boolean
            item = protobuf.field_bytes(1, schema_protobuf(value)) if isinstance(value, dict) else \
                protobuf.field_varint(2, bool(value))
            out += protobuf.field_bytes(21, item)
        elif key == "type":  # TypeItem: repeated value
            types = value if isinstance(value, list) else [value]
            out += protobuf.field_bytes(22, b"".join(protobuf.field_bytes(1, t) for t in types))
        elif key == "items":  # ItemsItem: repeated schema
            items = value if isinstance(value, list) else [value]
            out += protobuf.field_bytes(23, b"".join(protobuf.field_bytes(1, schema_protobuf(i)) for i in items))
        elif key == "allOf":
            out += b"".join(protobuf.field_bytes(24, schema_protobuf(s)) for s in value)
        elif key == "properties":  # Properties: repeated NamedSchema
            out += protobuf.field_bytes(25, b"".join(named(1, n, schema_protobuf(s)) for n, s in value.items()))
        elif key.startswith("x-"):
            out += named(31, key, any_value(value))
        # anything else has no field in a v2 Schema (v2 JSON carries only the above)
    return bytes(out)


@lru_cache(maxsize=1)
def v2_protobuf() -> bytes:
    """The v2 document as gnostic's openapi_v2.Document: 1 swagger, 2 info (1 title, 2 version), 9 definitions."""
    info = protobuf.field_bytes(1, "modelplane portal") + protobuf.field_bytes(2, VERSION)
    definitions_item = b"".join(named(1, name, schema_protobuf(s)) for name, s in definitions(False).items())
    return protobuf.field_bytes(1, "2.0") + protobuf.field_bytes(2, info) + protobuf.field_bytes(9, definitions_item)


def accepted(request: Request, media_type: str) -> bool:
    accept = request.headers.get("accept", "")
    return any(p.split(";")[0].strip() == media_type for p in accept.split(","))


@router.get("/openapi/v2")
def openapi_v2(request: Request, who: Who) -> Response:
    if accepts_json(request):
        return JSONResponse({"swagger": "2.0", "info": {"title": "modelplane portal", "version": VERSION},
                             "paths": {}, "definitions": definitions(False)})
    if accepted(request, PROTOBUF_V2):
        # Go's media-type parser rejects the `@v1.0` in the name; the API server answers octet-stream, as here
        return Response(v2_protobuf(), media_type="application/octet-stream")
    raise ApiError(406, "NotAcceptable", f"served as application/json and {PROTOBUF_V2}")


@router.get("/openapi/v3")
def openapi_v3_index(request: Request, who: Who) -> JSONResponse:
    url = f"/openapi/v3/{GV_PATH}?hash={digest(v3_document(request.app))}"
    return JSONResponse({"paths": {GV_PATH: {"serverRelativeURL": url}}})


@router.get(f"/openapi/v3/{GV_PATH}")
def openapi_v3(request: Request, who: Who) -> Response:
    return Response(json.dumps(v3_document(request.app)), media_type="application/json")
