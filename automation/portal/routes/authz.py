"""`kubectl auth can-i`: SelfSubjectAccessReview and SelfSubjectRulesReview (authorization.k8s.io/v1), answered from
the portal's team model rather than RBAC.

A team token may do whatever its namespaces' kinds are served for (composed kinds are read-only); everyone signed
in reads the fleet kinds, and only admins change them; reading or changing a namespaced kind across all namespaces
(no namespace) is for admins. The verbs come from the app's routes (resources.served_verbs), so the answer is what
the portal would do with the request.
"""

from __future__ import annotations

import json

from fastapi import APIRouter, FastAPI, Request
from fastapi.responses import JSONResponse

from automation.portal import protobuf
from automation.portal.auth import Principal
from automation.portal.deps import Who
from automation.portal.resources import GROUP, RESOURCES, served_verbs, subresource_verbs
from automation.portal.routes.discovery import AUTHORIZATION
from automation.portal.service import ApiError

router = APIRouter(prefix="/apis/{}/{}".format(*AUTHORIZATION), include_in_schema=False)
READ_VERBS = {"get", "list", "watch"}
PUBLIC_PATHS = ("/version", "/api", "/apis", "/openapi", "/healthz", "/readyz")  # readable by every caller
REVIEWS = {"selfsubjectaccessreviews", "selfsubjectrulesreviews"}


def allowed_verbs(app: FastAPI, who: Principal, namespace: str, resource: str, subresource: str = "") -> set[str]:
    """What `who` may do with a resource of the group in a namespace ("": cluster-scoped, or every namespace)."""
    served = RESOURCES.get(resource)
    if served is None:
        return set()
    verbs = set(subresource_verbs(app, served, subresource) if subresource else served_verbs(app, served))
    if who.admin:
        return verbs
    if not served.namespaced:
        return verbs & READ_VERBS  # the fleet: everyone reads what GPUs exist
    return verbs if namespace and who.can_see(namespace) else set()


def decide(app: FastAPI, who: Principal, attributes: dict) -> tuple[bool, str]:
    group = attributes.get("group", "")
    resource, verb = attributes.get("resource", ""), attributes.get("verb", "")
    if group == AUTHORIZATION[0] and resource in REVIEWS:
        return verb == "create", "every caller asks about itself"
    if group != GROUP:
        return False, f"the portal serves no {group or 'core'} resources"
    verbs = allowed_verbs(app, who, attributes.get("namespace", ""), resource, attributes.get("subresource", ""))
    if verb in verbs or (verb == "*" and verbs and who.admin):
        return True, f"{who.name} may {verb} {resource}"
    return False, ""


def decide_path(who: Principal, attributes: dict) -> tuple[bool, str]:
    path, verb = attributes.get("path", ""), attributes.get("verb", "")
    public = any(path == p or path.startswith(p + "/") for p in PUBLIC_PATHS)
    return (verb == "get" and public), ("discovery and health are readable by every caller" if public else "")


async def read_review(request: Request, kind: str) -> dict:
    raw = await request.body()
    if request.headers.get("content-type", "").split(";")[0].strip() == protobuf.MEDIA_TYPE:
        return protobuf.review(raw, kind)  # what kubectl sends
    try:
        body = json.loads(raw or b"{}")
    except (ValueError, RecursionError):
        raise ApiError(400, "BadRequest", f"the body is not a JSON {kind}") from None
    if not isinstance(body, dict) or body.get("kind") not in (None, kind) or not isinstance(body.get("spec", {}), dict):
        raise ApiError(400, "BadRequest", f"the body must be a {kind}")
    return body


@router.post("/selfsubjectaccessreviews")
async def access_review(request: Request, who: Who) -> JSONResponse:
    body = await read_review(request, "SelfSubjectAccessReview")
    spec = body.get("spec") or {}
    resource, path = spec.get("resourceAttributes"), spec.get("nonResourceAttributes")
    if isinstance(resource, dict):
        allowed, reason = decide(request.app, who, resource)
    elif isinstance(path, dict):
        allowed, reason = decide_path(who, path)
    else:
        raise ApiError(422, "Invalid", "spec: exactly one of resourceAttributes and nonResourceAttributes is required",
                       [{"field": "spec", "message": "one of resourceAttributes and nonResourceAttributes"}])
    status = {"allowed": allowed, **({"reason": reason} if reason else {})}
    return JSONResponse({"kind": "SelfSubjectAccessReview", "apiVersion": "/".join(AUTHORIZATION),
                         "metadata": {"creationTimestamp": None}, "spec": spec, "status": status}, status_code=201)


@router.post("/selfsubjectrulesreviews")
async def rules_review(request: Request, who: Who) -> JSONResponse:
    """`kubectl auth can-i --list -n NS`: the caller's rules in one namespace."""
    body = await read_review(request, "SelfSubjectRulesReview")
    namespace = (body.get("spec") or {}).get("namespace") or ""
    rules = [{"verbs": ["create"], "apiGroups": [AUTHORIZATION[0]], "resources": sorted(REVIEWS)}]
    for plural in RESOURCES:
        for sub in ("", "scale", "status"):
            verbs = allowed_verbs(request.app, who, namespace, plural, sub)
            if verbs:
                rules.append({"verbs": sorted(verbs), "apiGroups": [GROUP],
                              "resources": [f"{plural}/{sub}" if sub else plural]})
    return JSONResponse({"kind": "SelfSubjectRulesReview", "apiVersion": "/".join(AUTHORIZATION),
                         "metadata": {"creationTimestamp": None}, "spec": {"namespace": namespace},
                         "status": {"resourceRules": rules,
                                    "nonResourceRules": [{"verbs": ["get"], "nonResourceURLs":
                                                          [u for p in PUBLIC_PATHS for u in (p, p + "/*")]}],
                                    "incomplete": False}}, status_code=201)
