"""The `Table` form of a list or an object (meta.k8s.io/v1), which kubectl asks for (`Accept:
application/json;as=Table;v=v1;g=meta.k8s.io`) and prints as it comes: the server chooses the columns.

Columns per kind are the reference's printer columns (its CRDs'), with Name first and Age last as Kubernetes adds
them; ModelDeployment shows what a team asks first (replicas asked for, ready, the serving backend). A row's
`object` is the object's metadata (PartialObjectMetadata) unless `includeObject` asks for all of it or none.
"""

from __future__ import annotations

import datetime
from dataclasses import dataclass
from typing import Any, Callable

from automation.portal.service import ApiError

TABLE_VERSIONS = {"v1": "meta.k8s.io/v1", "v1beta1": "meta.k8s.io/v1beta1"}
INCLUDE = ("None", "Metadata", "Object")


@dataclass(frozen=True)
class Column:
    name: str
    type: str  # integer, number, string, boolean, date (OpenAPI types, as printer columns declare them)
    description: str
    value: Callable[[dict], Any]
    priority: int = 0  # 1: shown by `-o wide` only
    format: str = ""


def at(obj: dict, *path: str) -> Any:
    found: Any = obj
    for key in path:
        found = found.get(key) if isinstance(found, dict) else None
    return found


def condition(type_: str) -> Callable[[dict], Any]:
    return lambda o: next((c.get("status") for c in at(o, "status", "conditions") or [] if c.get("type") == type_),
                          None)


def backends(obj: dict) -> str | None:
    found = sorted({e.get("backend") for r in at(obj, "status", "placement") or [] for e in r.get("engines") or []
                    if e.get("backend")})
    return ",".join(found) or None


def clusters(obj: dict) -> str | None:
    return ",".join(sorted({r.get("cluster") for r in at(obj, "status", "placement") or [] if r.get("cluster")})) or None


PENDING = "<pending>"  # as kubectl shows a LoadBalancer's address before it has one


def address(*path: str) -> Callable[[dict], Any]:
    """An address as kubectl prints it: `<pending>` for the placeholder host that stands for an address not known
    yet (`*.pending.modelplane.invalid`), which is easy to copy and reaches nothing; the object keeps it as is."""
    def value(obj: dict) -> Any:
        found = at(obj, *path)
        return PENDING if isinstance(found, str) and ".pending.modelplane.invalid" in found else found
    return value


NAME = Column("Name", "string", "Name must be unique within a namespace.", lambda o: at(o, "metadata", "name"),
              format="name")
COLUMNS: dict[str, list[Column]] = {
    "ModelDeployment": [
        Column("Replicas", "integer", "Replicas asked for (spec.replicas)", lambda o: at(o, "spec", "replicas")),
        Column("Ready", "integer", "Replicas observed ready", lambda o: at(o, "status", "replicas", "ready")),
        Column("Backend", "string", "The serving backends of the placed replicas", backends),
        Column("Clusters", "string", "The clusters the replicas are placed on", clusters, priority=1)],
    "ModelReplica": [Column("Cluster", "string", "The InferenceCluster it is pinned to",
                            lambda o: at(o, "spec", "clusterName"))],
    "ModelEndpoint": [Column("URL", "string", "The endpoint's URL (v0.3.1) or origin (v0.5)",
                             lambda o: address("spec", "url")(o) or address("spec", "origin")(o))],
    "ModelService": [Column("Address", "string", "The service's address", address("status", "address"))],
    "ModelCache": [
        # the reference reads .spec.source.huggingFace.repo, which is never there (its known bug): the repo is here
        Column("Source", "string", "The Hugging Face repository", lambda o: at(o, "spec", "huggingFace", "repo")),
        Column("Ready", "string", "Whether the artifact is staged", condition("ArtifactReady"))],
    "InferenceCluster": [
        Column("Source", "string", "Where the cluster comes from", lambda o: at(o, "spec", "cluster", "source")),
        Column("Gateway", "string", "The cluster gateway's address", address("status", "gateway", "address"))],
    "InferenceClass": [],
    "InferenceGateway": [
        Column("Gateway", "string", "The gateway backend (v0.3.1) or the cluster it runs on (v0.5)",
               lambda o: at(o, "spec", "backend") or at(o, "spec", "clusterName")),
        Column("Address", "string", "The fleet gateway's address", address("status", "address"))],
    "TeamPolicy": [
        Column("GPU budgets", "integer", "GPU budgets (spec.gpus)", lambda o: len(at(o, "spec", "gpus") or [])),
        Column("Max deployments", "integer", "spec.maxDeployments", lambda o: at(o, "spec", "maxDeployments"))],
}


def human_duration(seconds: float) -> str:
    """apimachinery's duration.HumanDuration, so Age reads as kubectl users know it."""
    s = int(seconds)
    if s < -1:
        return "<invalid>"
    if s < 0:
        return "0s"
    if s < 120:
        return f"{s}s"
    minutes = s // 60
    if minutes < 10:
        return f"{minutes}m{s % 60}s" if s % 60 else f"{minutes}m"
    if minutes < 180:
        return f"{minutes}m"
    hours = s // 3600
    if hours < 8:
        return f"{hours}h{minutes % 60}m" if minutes % 60 else f"{hours}h"
    if hours < 48:
        return f"{hours}h"
    if hours < 24 * 8:
        return f"{hours // 24}d{hours % 24}h" if hours % 24 else f"{hours // 24}d"
    if hours < 24 * 365 * 2:
        return f"{hours // 24}d"
    if hours < 24 * 365 * 8:
        days = (hours // 24) % 365
        return f"{hours // 24 // 365}y{days}d" if days else f"{hours // 24 // 365}y"
    return f"{hours // 24 // 365}y"


def age(obj: dict, now: datetime.datetime) -> str:
    try:
        created = datetime.datetime.fromisoformat(str(at(obj, "metadata", "creationTimestamp")))
    except ValueError:  # composed objects have no creation time of their own
        return "<unknown>"
    return human_duration((now - created).total_seconds())


AGE = Column("Age", "date", "Time since the object was created.", lambda o: None)


def table_version(accept: str) -> str | None:
    """The Table apiVersion the Accept header asks for first, or None for plain JSON."""
    for part in accept.split(","):
        params = dict(p.strip().partition("=")[::2] for p in part.split(";")[1:])
        if params.get("as") == "Table" and params.get("g") == "meta.k8s.io" and params.get("v") in TABLE_VERSIONS:
            return TABLE_VERSIONS[params["v"]]
    return None


def include_object(value: str | None) -> str:
    if value is None or value == "":
        return "Metadata"
    if value not in INCLUDE:
        raise ApiError(400, "BadRequest", f"includeObject: unsupported value {value[:40]!r}: one of {', '.join(INCLUDE)}")
    return value


def row_object(obj: dict, include: str, version: str) -> dict | None:
    if include == "Object":
        return obj
    if include == "Metadata":
        return {"kind": "PartialObjectMetadata", "apiVersion": version, "metadata": obj.get("metadata") or {}}
    return None


def table(kind: str, items: list[dict], version: str, include: str, metadata: dict | None = None) -> dict:
    columns = [NAME, *COLUMNS.get(kind, []), AGE]
    now = datetime.datetime.now(datetime.timezone.utc)
    rows = []
    for obj in items:
        cells = [age(obj, now) if column is AGE else column.value(obj) for column in columns]
        row: dict[str, Any] = {"cells": cells}
        shown = row_object(obj, include, version)
        if shown is not None:
            row["object"] = shown
        rows.append(row)
    return {"kind": "Table", "apiVersion": version, "metadata": metadata or {},
            "columnDefinitions": [{"name": c.name, "type": c.type, "format": c.format, "description": c.description,
                                   "priority": c.priority} for c in columns],
            "rows": rows}
