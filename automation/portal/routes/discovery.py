"""Discovery, as the Kubernetes API server answers it: what kubectl reads before any command (`/version`, `/api`,
`/apis`, each group and version), so `kubectl get md`, `api-resources` and `auth can-i` resolve our kinds.

kubectl 1.32 asks for aggregated discovery first (`Accept: ...;as=APIGroupDiscoveryList`, with plain
`application/json` after it); client-go reads the answer's Content-Type, so answering the legacy documents as
`application/json` makes it read them per group version, as it does with an API server that has no aggregated
discovery. The core group (`/api/v1`) is not served: `/api` lists no versions, and kubectl then never asks for it.
"""

from __future__ import annotations

from importlib import metadata

from fastapi import APIRouter, Request
from fastapi.responses import JSONResponse

from automation.portal.deps import Who
from automation.portal.resources import (
    CATEGORIES,
    GROUP,
    RESOURCES,
    SUBRESOURCES,
    VERSION,
    served_verbs,
    subresource_verbs,
)

router = APIRouter(include_in_schema=False)

AUTHORIZATION = ("authorization.k8s.io", "v1")
KUBERNETES_LEVEL = ("1", "32")  # the API server behaviour imitated (discovery, Table, OpenAPI v3, SSAR v1)


def group_version(group: str, version: str) -> dict:
    return {"groupVersion": f"{group}/{version}", "version": version}


def api_group(group: str, version: str) -> dict:
    return {"name": group, "versions": [group_version(group, version)],
            "preferredVersion": group_version(group, version)}


def portal_version() -> str:
    try:
        return metadata.version("modelplane-pulumi")
    except metadata.PackageNotFoundError:
        return "0.0.0"


@router.get("/version")
def version() -> JSONResponse:
    """A version.Info, readable without a token as the API server's is. gitVersion says the Kubernetes API level the
    portal speaks and, as build metadata, the portal's own version (kubectl compares the former for skew)."""
    major, minor = KUBERNETES_LEVEL
    import platform
    import sys

    return JSONResponse({
        "major": major, "minor": minor, "gitVersion": f"v{major}.{minor}.0+modelplane.{portal_version()}",
        "gitCommit": "", "gitTreeState": "", "buildDate": "", "goVersion": f"python{sys.version.split()[0]}",
        "compiler": "cpython", "platform": f"{sys.platform}/{platform.machine()}",
    })


@router.get("/api")
def core_versions(who: Who, request: Request) -> JSONResponse:
    return JSONResponse({"kind": "APIVersions", "versions": [], "serverAddressByClientCIDRs": [
        {"clientCIDR": "0.0.0.0/0", "serverAddress": request.headers.get("host", "")}]})


@router.get("/apis")
def groups(who: Who) -> JSONResponse:
    return JSONResponse({"kind": "APIGroupList", "apiVersion": "v1",
                         "groups": [api_group(GROUP, VERSION), api_group(*AUTHORIZATION)]})


@router.get(f"/apis/{GROUP}")
def modelplane_group(who: Who) -> JSONResponse:
    return JSONResponse({"kind": "APIGroup", "apiVersion": "v1", **api_group(GROUP, VERSION)})


@router.get(f"/apis/{GROUP}/{VERSION}")
def modelplane_resources(who: Who, request: Request) -> JSONResponse:
    return JSONResponse(resource_list(request))


def resource_list(request: Request) -> dict:
    """An APIResourceList: every kind with the verbs its routes take, and the subresources that are served."""
    app = request.app
    out: list[dict] = []
    for resource in RESOURCES.values():
        verbs = served_verbs(app, resource)
        out.append({"name": resource.plural, "singularName": resource.singular, "namespaced": resource.namespaced,
                    "kind": resource.kind, "verbs": verbs, "shortNames": list(resource.short_names),
                    "categories": CATEGORIES})
        for sub, (group, sub_version, kind) in SUBRESOURCES.items():
            sub_verbs = subresource_verbs(app, resource, sub)
            if sub_verbs:
                entry = {"name": f"{resource.plural}/{sub}", "singularName": "", "namespaced": resource.namespaced,
                         "kind": kind or resource.kind, "verbs": sub_verbs}
                if group:
                    entry.update(group=group, version=sub_version)
                out.append(entry)
    return {"kind": "APIResourceList", "apiVersion": "v1", "groupVersion": f"{GROUP}/{VERSION}", "resources": out}


@router.get("/apis/{}".format(AUTHORIZATION[0]))
def authorization_group(who: Who) -> JSONResponse:
    return JSONResponse({"kind": "APIGroup", "apiVersion": "v1", **api_group(*AUTHORIZATION)})


@router.get("/apis/{}/{}".format(*AUTHORIZATION))
def authorization_resources(who: Who) -> JSONResponse:
    return JSONResponse({"kind": "APIResourceList", "apiVersion": "v1", "groupVersion": "/".join(AUTHORIZATION),
                         "resources": [
                             {"name": "selfsubjectaccessreviews", "singularName": "selfsubjectaccessreview",
                              "namespaced": False, "kind": "SelfSubjectAccessReview", "verbs": ["create"]},
                             {"name": "selfsubjectrulesreviews", "singularName": "selfsubjectrulesreview",
                              "namespaced": False, "kind": "SelfSubjectRulesReview", "verbs": ["create"]}]})
