"""The resources the portal serves under /apis/modelplane.ai/v1alpha1, as discovery names them to kubectl.

Names, short names and categories are the reference's (its CRDs': `kubectl get md`, `kubectl get modelplane` keep
working for a team moving over); what each answers to is read from the app's routes (`served_verbs`), so discovery
and `auth can-i` never claim a verb the portal does not take.
"""

from __future__ import annotations

import importlib.util
from dataclasses import dataclass

from fastapi import FastAPI
from starlette.routing import Match

from automation.portal.service import API, PLURALS

GROUP, VERSION = "modelplane.ai", "v1alpha1"
CATEGORIES = ["crossplane", "modelplane"]  # the reference's, on every kind


@dataclass(frozen=True)
class Served:
    plural: str
    kind: str
    namespaced: bool
    short_names: tuple[str, ...]

    @property
    def singular(self) -> str:
        return self.kind.lower()


SHORT_NAMES = {"ModelDeployment": "md", "ModelReplica": "mr", "ModelEndpoint": "me", "ModelService": "ms",
               "ModelCache": "mc", "InferenceCluster": "ic", "InferenceClass": "icl", "InferenceGateway": "ig",
               "TeamPolicy": "tp"}
# ModelReplicas are composed from ModelDeployments (routes/composed.py), not stored: not in service.PLURALS
RESOURCES: dict[str, Served] = {
    plural: Served(plural, kind, namespaced, (SHORT_NAMES[kind],))
    for plural, (kind, namespaced) in {**PLURALS, "modelreplicas": ("ModelReplica", True)}.items()}

# (verb, method, on the collection or an item) as the Kubernetes API server maps them
VERB_ROUTES = [("get", "GET", False), ("list", "GET", True), ("create", "POST", True), ("update", "PUT", False),
               ("patch", "PATCH", False), ("delete", "DELETE", False), ("deletecollection", "DELETE", True)]
SUBRESOURCES = {"scale": ("autoscaling", "v1", "Scale"), "status": ("", "", "")}  # "": the parent's group and kind


def path_of(resource: Served, item: bool, subresource: str = "", namespace: str = "probe") -> str:
    base = f"{API}/namespaces/{namespace}/{resource.plural}" if resource.namespaced else f"{API}/{resource.plural}"
    return base + ("/probe" if item else "") + (f"/{subresource}" if subresource else "")


def takes(app: FastAPI, method: str, path: str) -> bool:
    """Whether a route takes the method on the path."""
    scope = {"type": "http", "method": method, "path": path, "root_path": ""}
    return any(route.matches(scope)[0] == Match.FULL for route in app.router.routes)


def watch_served() -> bool:
    """Lists answer `?watch=true` once the watch module is there (automation/portal/watch.py)."""
    return importlib.util.find_spec("automation.portal.watch") is not None


READ_ONLY = {"modelreplicas"}  # composed: their writes are answered 405 (routes/composed.py)
READS = {"get", "list"}


def served_verbs(app: FastAPI, resource: Served) -> list[str]:
    verbs = [verb for verb, method, collection in VERB_ROUTES
             if takes(app, method, path_of(resource, not collection))
             and (resource.plural not in READ_ONLY or verb in READS)]
    if "list" in verbs and watch_served():
        verbs.append("watch")
    return sorted(verbs)


def subresource_verbs(app: FastAPI, resource: Served, subresource: str) -> list[str]:
    return sorted(verb for verb, method, collection in VERB_ROUTES
                  if not collection and takes(app, method, path_of(resource, True, subresource)))
