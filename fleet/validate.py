"""Turn loaded documents into a typed, validated fleet, with every problem located.

The pipeline per document: shape (a mapping with apiVersion and kind) -> group filter
(objects outside modelplane.ai are skipped with a note) -> pydantic model (structure,
types, limits, defaults) -> the kind's cross-field rules -> CEL compile checks. Then
checks across objects: duplicates, references between kinds. Nothing here raises on
user input.
"""

from __future__ import annotations

import difflib
import re
import typing

from collections import Counter
from pathlib import Path
from dataclasses import dataclass, field
from typing import Any, Iterable, Literal, overload

from pydantic import ValidationError

from fleet.backends import NVIDIA_DRIVER
from fleet import device_selectors
from fleet.api import (KINDS, InferenceClass, InferenceCluster, InferenceGateway, ModelCache, ModelDeployment,
                       ModelEndpoint, ModelReplica, ModelRoute, ModelService, Resource, TeamPolicy)
from fleet.api.common import MIGRATE_HINT, SHAPE_V031, SHAPE_V05, metadata_rules
from fleet.api.gateway import MAX_LISTED_WITH_DEFAULT, MAX_RULES, fleet_gateway_transition_rules
from fleet.autoscaling import FLEET_PREFIX, parse_fleet, zero_without_demand
from fleet.loader import Document, ParseMemo, Source, load_paths, parse_sources
from fleet.secrets import CALLER_KEYS_NAMESPACE, SecretManifestError, SecretRef, SecretStore, secret_from_manifest
from fleet.capacity import LiveCapacity
from fleet.problems import Problem, format_path
from fleet.topology import nvlink_label, topology_conflicts

MODELPLANE_GROUP = "modelplane.ai"
REFERENCE_ONLY_GROUP = "infrastructure.modelplane.ai"


@dataclass
class Fleet:
    """Every valid object, in a stable order, with the document each came from."""

    objects: list[Resource] = field(default_factory=list)
    origin: dict[str, Document] = field(default_factory=dict)
    # values of the v1/Secrets given with the manifests (and the environment's, and --secrets-dir's): never printed
    secrets: SecretStore = field(default_factory=SecretStore)
    # Kind/name of objects given but invalid: their own errors say why; no other object reports them as missing
    invalid: set[str] = field(default_factory=set)
    # the devices the clusters have free, where they were read (fleet/live_capacity.py); None: declared capacity
    live: LiveCapacity | None = None
    # `of` answers from an index by kind, rebuilt when objects were added (they are read thousands of times a plan)
    _by_kind: dict[str, list[Resource]] = field(default_factory=dict, repr=False, compare=False)
    _indexed: int = field(default=-1, repr=False, compare=False)
    # id(object) -> (the object, its JSON): shared by the fleets one command loads (LoadMemo), whose objects are shared
    texts: dict[int, tuple[Resource, str]] = field(default_factory=dict, repr=False, compare=False)

    def text_of(self, obj: Resource) -> str:
        """`obj.model_dump_json()`, computed once per object: the planner's memo, the model stacks' and platform
        stacks' input digests and the base cache's key all hash objects by it (a validated object never changes)."""
        kept = self.texts.get(id(obj))
        if kept is None or kept[0] is not obj:  # the object is held with its text: its id is not reused meanwhile
            kept = self.texts[id(obj)] = (obj, obj.model_dump_json())
        return kept[1]

    @overload
    def of(self, kind: Literal["InferenceClass"]) -> list[InferenceClass]: ...
    @overload
    def of(self, kind: Literal["InferenceCluster"]) -> list[InferenceCluster]: ...
    @overload
    def of(self, kind: Literal["InferenceGateway"]) -> list[InferenceGateway]: ...
    @overload
    def of(self, kind: Literal["ModelCache"]) -> list[ModelCache]: ...
    @overload
    def of(self, kind: Literal["ModelDeployment"]) -> list[ModelDeployment]: ...
    @overload
    def of(self, kind: Literal["ModelReplica"]) -> list[ModelReplica]: ...
    @overload
    def of(self, kind: Literal["ModelEndpoint"]) -> list[ModelEndpoint]: ...
    @overload
    def of(self, kind: Literal["ModelService"]) -> list[ModelService]: ...
    @overload
    def of(self, kind: Literal["ModelRoute"]) -> list[ModelRoute]: ...
    @overload
    def of(self, kind: Literal["TeamPolicy"]) -> list[TeamPolicy]: ...
    @overload
    def of(self, kind: str) -> list[Resource]: ...

    def of(self, kind: str) -> list[Any]:
        """The objects of one kind, typed by kind (a copy: the caller may change it)."""
        if self._indexed != len(self.objects):  # objects are only ever appended: a new length is a new fleet
            self._by_kind = {}
            for o in self.objects:
                self._by_kind.setdefault(o.kind, []).append(o)
            self._indexed = len(self.objects)
        return list(self._by_kind.get(kind, ()))

    def where(self, obj: Resource, path: Iterable[Any] = ()) -> tuple[str, int]:
        doc = self.origin.get(obj.ref)
        return (doc.source, doc.line_of(path)) if doc else ("<generated>", 0)

    def problem(self, obj: Resource, path: tuple, message: str, warning: bool = False) -> Problem:
        source, line = self.where(obj, path)
        return Problem(source, line, f"{obj.kind}/{obj.name}", format_path(path), message, warning)


@dataclass
class Loaded:
    fleet: Fleet
    problems: list[Problem]  # errors and warnings, in input order
    notes: list[str]  # skipped objects and other information

    @property
    def errors(self) -> list[Problem]:
        return [p for p in self.problems if not p.warning]

    @property
    def warnings(self) -> list[Problem]:
        return [p for p in self.problems if p.warning]


_MESSAGES = {
    "missing": "required field is missing",
    "extra_forbidden": "unknown field",
}


def did_you_mean(word: str, choices: Iterable[str]) -> str:
    """` (did you mean 'x'?)` for the nearest choice, or nothing when none is near."""
    near = difflib.get_close_matches(word, list(choices), n=1, cutoff=0.6)
    return f" (did you mean {near[0]!r}?)" if near else ""


def _fields_at(model: Any, path: tuple) -> list[str]:
    """The field names (by their manifest spelling) of the models reached by `path` from `model` (list indexes,
    Optional unwrapped; both shapes of a kind's spec)."""
    models = [model]
    for step in path:
        if isinstance(step, int):
            continue
        found = [getattr(m, "model_fields", {}).get(step) for m in models]
        models = [m for field in found if field is not None for m in _models_in(field.annotation)]
        if not models:
            return []
    return list(dict.fromkeys(field.alias or name for m in models for name, field in m.model_fields.items()))


def _models_in(annotation: Any) -> list[Any]:
    if isinstance(annotation, type) and hasattr(annotation, "model_fields"):
        return [annotation]
    return [m for arg in typing.get_args(annotation) for m in _models_in(arg)]


def _pydantic_problems(doc: Document, label: str, exc: ValidationError, model: Any = None) -> list[Problem]:
    out: list[Problem] = []
    seen: set = set()
    for err in exc.errors(include_url=False):
        loc = tuple(p for p in err["loc"] if not (isinstance(p, str) and p.startswith("[")))
        message = _MESSAGES.get(err["type"]) or err["msg"].replace("Input should be", "must be")
        if err["type"] == "extra_forbidden" and model is not None and loc and isinstance(loc[-1], str):
            message += did_you_mean(loc[-1], _fields_at(model, loc[:-1]))
        if err["type"] in ("too_short", "too_long"):
            least = err["type"] == "too_short"
            bound = err.get("ctx", {}).get("min_length" if least else "max_length")
            message = f"must have at {'least' if least else 'most'} {bound} item{'' if bound == 1 else 's'}"
        if err["type"] == "literal_error":
            message = message.replace("must be", "must be one of", 1) if " or " in message else message
        key = (loc, message)
        if key in seen:
            continue
        seen.add(key)
        out.append(Problem(doc.source, doc.line_of(loc), label, format_path(loc), message))
    return out


def _label(data: dict) -> str:
    kind = data.get("kind") if isinstance(data.get("kind"), str) else "?"
    meta = data.get("metadata")
    name = meta.get("name") if isinstance(meta, dict) and isinstance(meta.get("name"), str) else "?"
    return f"{kind}/{name}"


def _selectors(obj: Resource) -> Iterable[tuple[tuple, str]]:
    """(field path, expression) of every device selector of an object."""
    if isinstance(obj, ModelDeployment):
        base = ("spec", "template", "spec", "engines")
        for i, engine in enumerate(obj.spec.template.spec.engines):
            for j, member in enumerate(engine.members):
                for k, request in enumerate(member.nodeSelector.devices if member.nodeSelector else []):
                    for s, selector in enumerate(request.selectors):
                        yield base + (i, "members", j, "nodeSelector", "devices", k, "selectors", s, "cel"), selector.cel
    elif isinstance(obj, ModelReplica):
        for i, replica_engine in enumerate(obj.spec.engines):
            for j, replica_member in enumerate(replica_engine.members):
                for k, resolved in enumerate(replica_member.deviceRequests or []):
                    for s, selector in enumerate(resolved.selectors or []):
                        yield ("spec", "engines", i, "members", j, "deviceRequests", k, "selectors", s, "cel"), selector.cel


def _cel_problems(obj: Resource) -> Iterable[tuple[tuple, str]]:
    """Compile every device selector once; a compile error is a validation error. Each selector has a cost
    budget, and so do all of an object's selectors together: 128 selectors a member, each just under its own
    budget, would otherwise hold a portal write for minutes."""
    total, first = 0, None
    for path, expression in _selectors(obj):
        if error := device_selectors.check_expression(expression):
            yield path, error
            continue
        total += device_selectors.selector_cost(expression)
        first = first or path
    if first is not None and total > device_selectors.MAX_OBJECT_COST:
        yield first[:4] if isinstance(obj, ModelDeployment) else first[:2], (
            f"its device selectors together are too costly: estimated {total:,} steps a device, over the limit "
            f"of {device_selectors.MAX_OBJECT_COST:,} for one object")


def validate_document(doc: Document) -> tuple[Resource | None, list[Problem], str | None]:
    """Validate one document: (object or None, problems, note or None)."""
    data = doc.data
    if data is None:
        return None, [], None
    if not isinstance(data, dict):
        what = type(data).__name__.replace("dict", "mapping").replace("str", "string")
        return None, [Problem(doc.source, doc.line, "", "",
                              f"expected a Kubernetes object (a mapping with apiVersion and kind), found a {what}")], None
    label = _label(data)
    api_version, kind = data.get("apiVersion"), data.get("kind")
    if not isinstance(api_version, str) or not api_version:
        return None, [Problem(doc.source, doc.line_of(("apiVersion",)), label, "apiVersion", "required string field is missing")], None
    if not isinstance(kind, str) or not kind:
        return None, [Problem(doc.source, doc.line_of(("kind",)), label, "kind", "required string field is missing")], None
    group, _, version = api_version.rpartition("/")
    if group == REFERENCE_ONLY_GROUP:
        return None, [], (f"{doc.source}:{doc.line}: skipped {kind}/{_label(data).split('/', 1)[1]} "
                          f"({api_version}: written by the reference system's compositions; "
                          "this project provisions from InferenceCluster)")
    if group != MODELPLANE_GROUP:
        return None, [], f"{doc.source}:{doc.line}: skipped {api_version} {label} (not a modelplane.ai object)"
    if version != "v1alpha1":
        return None, [Problem(doc.source, doc.line_of(("apiVersion",)), label, "apiVersion",
                              f"unsupported version {api_version!r} (supported: modelplane.ai/v1alpha1)")], None
    if kind not in KINDS:
        return None, [Problem(doc.source, doc.line_of(("kind",)), label, "kind",
                              f"unknown kind {kind!r} in modelplane.ai/v1alpha1{did_you_mean(kind, KINDS)} "
                              f"(known: {', '.join(KINDS)})")], None
    model, rules = KINDS[kind]
    try:
        obj = model.model_validate(data)
    except ValidationError as exc:
        return None, _pydantic_problems(doc, label, exc, model), None
    found: list[tuple[tuple, str]] = list(metadata_rules(obj.metadata, obj.namespaced)) + list(rules(obj)) + list(_cel_problems(obj))
    problems = sorted(Problem(doc.source, doc.line_of(where), label, format_path(where), message) for where, message in found)
    return (None if problems else obj), problems, None


# The reference's serving stack installs NVIDIA's GPU Operator on Civo for the driver; this one has no GPU Operator yet
CIVO_DRIVER = ("the serving stack does not install NVIDIA's GPU Operator on Civo yet (the reference installs it for "
               "the GPU driver): the NVIDIA DRA driver finds this pool's GPUs only if Civo's node image carries the "
               "driver")
AKS_POOL_NAME = re.compile(r"^[a-z][a-z0-9]{0,11}$")


def pool_shape_problems(source: str, pool) -> list[tuple[str, str]]:
    """What a cloud would do differently from what the pool says (the planner's capacity must be what exists)."""
    out = []
    if pool.capacityBlock is not None and source not in ("EKS", "Existing"):
        out.append(("capacityBlock", f"capacity blocks are EC2 reservations (EKS only); a {source} pool cannot use "
                                     "one (GKE reservations are not supported yet: remove it, or use EKS)"))
    if source == "AKS" and not AKS_POOL_NAME.match(pool.name):
        out.append(("name", f"AKS node pool names are 1 to 12 lowercase letters and digits, starting with a letter "
                            f"({pool.name!r} is not)"))
    if source == "Vultr":  # VKE node pools hold at least one node, the autoscaler's floor too (the reference's XRD)
        if pool.nodeCount < 1:
            out.append(("nodeCount", "Vultr node pools have at least one node: use nodeCount 1 or more"))
        if pool.minNodeCount is not None and pool.minNodeCount < 1:
            out.append(("minNodeCount", "Vultr's autoscaler keeps at least one node: use minNodeCount 1 or more"))
    if source == "Civo" and (pool.maxNodeCount is not None or pool.minNodeCount is not None):
        field = "maxNodeCount" if pool.maxNodeCount is not None else "minNodeCount"
        out.append((field, "Civo node pools are not autoscaled by this project yet (the reference runs the upstream "
                           "cluster-autoscaler there): remove minNodeCount and maxNodeCount and set nodeCount"))
    if source in ("Vultr", "Civo") and pool.zones:
        out.append(("zones", f"{source} places a pool's nodes in the cluster's region itself: remove zones"))
    if source in ("Vultr", "Civo") and pool.spot:
        out.append(("spot", f"{source} has no spot capacity for Kubernetes node pools: remove spot"))
    if source in ("Vultr", "Civo") and pool.fabric is not None and pool.fabric.type != "None":
        out.append(("fabric", f"{source} node pools have no {pool.fabric.type} fabric: remove fabric"))
    zones = len(pool.zones or [])
    if source == "GKE" and pool.maxNodeCount is None and zones and pool.nodeCount % zones:
        out.append(("nodeCount", f"GKE creates nodeCount nodes in every zone: {pool.nodeCount} nodes over {zones} "
                                 f"zones cannot be split evenly; use a multiple of {zones} or list fewer zones"))
    return out


def _published_attributes(classes: dict) -> set[str]:
    """Every attribute any class publishes, as `<domain>/<id>` (a bare key lives in the device's driver domain)."""
    out = set()
    for icl in classes.values():
        for device in icl.spec.devices:
            for key in device.attributes or {}:
                out.add(key if "/" in key else f"{device.driver}/{key}")
    return out


def _selector_warnings(fleet: Fleet, classes: dict, subjects: Fleet) -> list[Problem]:
    """Selectors that validate but can never match as written: bad literals, attributes no class publishes."""
    published = _published_attributes(classes)
    ids = {key.split("/", 1)[1] for key in published}
    out = []
    for md in subjects.of("ModelDeployment"):
        for i, engine in enumerate(md.spec.template.spec.engines):
            for j, member in enumerate(engine.members):
                for k, request in enumerate(member.nodeSelector.devices if member.nodeSelector else []):
                    for s, selector in enumerate(request.selectors):
                        path = ("spec", "template", "spec", "engines", i, "members", j, "nodeSelector", "devices", k,
                                "selectors", s, "cel")
                        for message in device_selectors.literal_problems(selector.cel):
                            out.append(fleet.problem(md, path, message, warning=True))
                        for name in sorted(device_selectors.referenced_attributes(selector.cel)) if classes else []:
                            if name not in published and name.split("/", 1)[-1] not in ids:
                                attribute = name.split("/", 1)[-1]
                                out.append(fleet.problem(md, path, f"no InferenceClass publishes the attribute "
                                                         f"{attribute!r}{did_you_mean(attribute, ids)}: the selector "
                                                         "never matches", warning=True))
    return out


def _subjects(fleet: Fleet, about: Resource | None) -> Fleet:
    """What problems are reported about: the whole fleet, or `about` alone (the rest of the fleet is only read)."""
    return fleet if about is None else Fleet(objects=[about])


def cross_object_problems(fleet: Fleet, about: Resource | None = None) -> list[Problem]:
    """Problems that take more than one object to see. `about`: only those about this object (a portal write asks
    for its deployment's, seen with 500 clusters it need not check again): the same problems, in the same order, as
    the whole fleet's about it."""
    out: list[Problem] = []
    subjects = _subjects(fleet, about)
    classes = {c.name: c for c in fleet.of("InferenceClass")}
    for ic in subjects.of("InferenceCluster"):
        source = ic.spec.cluster.source
        for i, pool in enumerate(ic.spec.nodePools):
            for name, message in pool_shape_problems(source, pool):
                out.append(fleet.problem(ic, ("spec", "nodePools", i, name), message))
            icl_of_pool = classes.get(pool.className)
            if source == "Civo" and icl_of_pool is not None and any(
                    d.driver == NVIDIA_DRIVER and d.claim == "DRA" for d in icl_of_pool.spec.devices):
                out.append(fleet.problem(ic, ("spec", "nodePools", i, "className"), CIVO_DRIVER, warning=True))
            if source == "AKS" and pool.fabric is not None and pool.fabric.type == "InfiniBand":
                out.append(fleet.problem(ic, ("spec", "nodePools", i, "fabric"), "InfiniBand on AKS is not set up by this "
                                         "project yet (no network operator is installed): the pool is created without "
                                         "it", warning=True))
            path = ("spec", "nodePools", i, "className")
            icl = classes.get(pool.className)
            if icl is None and f"InferenceClass/{pool.className}" in fleet.invalid:
                continue  # given, but invalid: its own errors are reported
            if icl is None and source != "Existing":  # a provisioned pool without its recipe: no machine type, no GPUs
                out.append(fleet.problem(ic, path, f"InferenceClass {pool.className!r} is not among the given manifests"
                                         f"{did_you_mean(pool.className, classes)}: a {source} pool cannot be created "
                                         "without its machine type and accelerators"))
            elif icl is None:
                out.append(fleet.problem(ic, path, f"InferenceClass {pool.className!r} is not among the given manifests"
                                         f"{did_you_mean(pool.className, classes)}; the pool offers no devices until it "
                                         "exists", warning=True))
            elif source != "Existing":
                prov = icl.spec.provisioning
                if prov is None:
                    out.append(fleet.problem(ic, path, f"InferenceClass {pool.className!r} has no provisioning block, "
                                             f"so a {source} node pool cannot be created from it"))
                elif prov.provider != source:
                    out.append(fleet.problem(ic, path, f"InferenceClass {pool.className!r} provisions for "
                                             f"{prov.provider}, but this cluster's source is {source}"))
                if source == "EKS" and pool.maxNodeCount is not None and any(
                        d.driver == NVIDIA_DRIVER and d.claim == "DRA" for d in icl.spec.devices) and (
                        pool.minNodeCount if pool.minNodeCount is not None else pool.nodeCount) == 0:
                    out.append(fleet.problem(ic, ("spec", "nodePools", i, "minNodeCount"), "cluster-autoscaler cannot "
                                             "grow a DRA pool from zero nodes on EKS (a node group's template has no "
                                             "ResourceSlices until a node exists): the node group keeps one node",
                                             warning=True))
        for message in topology_conflicts(ic, classes):
            out.append(fleet.problem(ic, ("spec", "nodePools"), message))
    out += _nvlink_problems(fleet, classes, subjects)
    out += _gateway_problems(fleet, subjects)
    out += _service_warnings(fleet, subjects)
    out += _selector_warnings(fleet, classes, subjects)
    out += _tenancy_problems(fleet, subjects)
    out += _secret_warnings(fleet, subjects)
    out += _team_policy_problems(fleet, subjects)
    caches = {(c.namespace, c.name) for c in fleet.of("ModelCache")}
    for md in subjects.of("ModelDeployment"):
        fleet_scaling, _ = parse_fleet(md.metadata.annotations)  # its errors are the deployment's own rules'
        if fleet_scaling is not None and (why := zero_without_demand(fleet_scaling)):
            out.append(fleet.problem(md, ("metadata", "annotations", f"{FLEET_PREFIX}-min-replicas"), why,
                                     warning=True))
        ref = md.spec.template.spec.modelCacheRef
        if ref is None:
            for i, engine in enumerate(md.spec.template.spec.engines):
                if any(m.role == "Worker" for m in engine.members):
                    out.append(fleet.problem(md, ("spec", "template", "spec", "engines", i),
                                             f"engine {engine.name} spans several nodes but the deployment has no "
                                             "modelCacheRef: every node downloads the weights itself (slow, and "
                                             "concurrent downloads can mix revisions)", warning=True))
        if ref and (md.namespace, ref.name) not in caches:
            out.append(fleet.problem(md, ("spec", "template", "spec", "modelCacheRef", "name"),
                                     f"ModelCache {md.namespace}/{ref.name} is not among the given manifests; "
                                     "no new replica is placed until it exists", warning=True))
    return out


STACK_IMMUTABLE = "spec.stack is immutable; recreate the cluster to change its serving stack."  # the reference's CEL


def stack_transitions(fleet: Fleet, applied: dict[str, str]) -> list[Problem]:
    """The reference's transition rule `self == oldSelf` on InferenceCluster `spec.stack`, with "old" the stack the
    cluster's platform stack last applied (`applied`: cluster -> stack, from the record). A cluster not applied
    yet, or not in the record, is new: any stack. Recreating is the way to change it: remove the cluster from the
    input and destroy its platform stack (`up --prune --yes-destroy-clusters`), then add it back."""
    out = []
    for ic in fleet.of("InferenceCluster"):
        before, now = applied.get(ic.name), ic.spec.stack or "Standard"
        if before is not None and before != now:
            out.append(fleet.problem(ic, ("spec", "stack"), (
                f"{STACK_IMMUTABLE} (applied as {before}, now {now}: remove this InferenceCluster from the input and "
                "run `modelplane up --prune --yes-destroy-clusters`, which destroys its platform stack, then add it "
                f"back with stack {now})")))
    return out


def gateway_transitions(fleet: Fleet, applied: dict[str, str]) -> list[Problem]:
    """The v0.5 XRD's transition rule on InferenceGateway `spec.clusterName` (fleet_gateway_transition_rules), with
    "old" the cluster the gateway stack last applied the gateway on (`applied`: gateway name -> cluster, from the
    record). A gateway not in the record is new: any cluster. Moving it is recreating it: remove it from the input,
    `up --prune` (which destroys the gateway stack), then add it back on the other cluster."""
    out = []
    for ig in fleet.of("InferenceGateway"):
        before = applied.get(ig.name)
        if ig.v05 is None or before is None:
            continue
        old = ig.model_copy(update={"spec": ig.v05.model_copy(update={"clusterName": before})})
        for path, message in fleet_gateway_transition_rules(old, ig):
            out.append(fleet.problem(ig, path, (
                f"{message} (applied on {before}, now {ig.v05.clusterName}: remove this InferenceGateway from the "
                f"input and run `modelplane up --prune`, which destroys the gateway stack, then add it back on "
                f"{ig.v05.clusterName})")))
    return out


CLOUD_CREDENTIALS = {"gke": "gcloud application default credentials", "eks": "the AWS credential chain",
                     "aks": "the Azure CLI login or environment credentials", "nebius": "the nebius CLI profile",
                     "vultr": "VULTR_API_KEY", "civo": "CIVO_TOKEN"}


# labels every composed endpoint of a replica carries whose values placement decides: any value may match
PLACEMENT_LABELS = ("modelplane.ai/cluster", "modelplane.ai/replica-index", "modelplane.ai/replica")


def _service_warnings(fleet: Fleet, subjects: Fleet) -> list[Problem]:
    """A ModelService entry whose selector matches no ModelEndpoint and no deployment's replicas routes nothing."""
    out = []
    # per namespace, each label (key, value) -> the candidates that carry it, numbered: an entry matches one when
    # every label it asks for is carried by that one (indexed: a team's thousands of services and deployments)
    carrying: dict[str, dict[tuple[str, str], set[int]]] = {}
    counts: Counter[str] = Counter()
    endpoints = [(me.namespace, dict(me.metadata.labels or {})) for me in fleet.of("ModelEndpoint")]
    replicas = [(md.namespace, {**((md.spec.template.metadata.labels if md.spec.template.metadata else None) or {}),
                                "modelplane.ai/deployment": md.name}) for md in fleet.of("ModelDeployment")]
    for namespace, labels in endpoints + replicas:
        number = counts[namespace]
        counts[namespace] += 1
        for item in labels.items():
            carrying.setdefault(namespace, {}).setdefault(item, set()).add(number)
    for ms in subjects.of("ModelService"):
        labelled = carrying.get(ms.namespace, {})
        for i, entry in enumerate(ms.spec.endpoints):
            wanted = [item for item in entry.selector.matchLabels.items() if item[0] not in PLACEMENT_LABELS]
            if not (set.intersection(*(labelled.get(item, set()) for item in wanted)) if wanted
                    else counts[ms.namespace]):
                out.append(fleet.problem(ms, ("spec", "endpoints", i, "selector", "matchLabels"),
                                         f"matches no ModelEndpoint and no ModelDeployment's replicas in namespace "
                                         f"{ms.namespace} (replicas carry their template's labels and "
                                         "modelplane.ai/deployment): this entry routes nothing", warning=True))
    return out


def _gateway_problems(fleet: Fleet, subjects: Fleet) -> list[Problem]:
    """A fleet's gateways are of one shape; v0.5 gateways are at most one per cluster (upstream's rule: one that has
    an address keeps the cluster, else the alphabetically lowest name), on a cluster of the fleet."""
    gateways = fleet.of("InferenceGateway")
    new = [g for g in gateways if g.shape == SHAPE_V05]
    out: list[Problem] = []
    if new and len(new) < len(gateways):
        names = ", ".join(g.name for g in new)
        for gateway in subjects.of("InferenceGateway"):
            if gateway.shape == SHAPE_V031:
                out.append(fleet.problem(gateway, ("spec",), (
                    f"is the v0.3.1 shape, and this fleet's InferenceGateway {names} the v0.5 shape: a fleet's "
                    f"gateways are all of one shape; {MIGRATE_HINT} (--gateway-cluster NAME says where this one runs)")))
    clusters = {c.name for c in fleet.of("InferenceCluster")}
    hosts: dict[str, list[InferenceGateway]] = {}
    for gateway in new:
        assert gateway.v05 is not None
        hosts.setdefault(gateway.v05.clusterName, []).append(gateway)
    mine = {id(g) for g in subjects.of("InferenceGateway")}
    for cluster, there in sorted(hosts.items()):
        there.sort(key=lambda g: (not (g.status or {}).get("address"), g.name))
        for gateway in there[1:]:
            if id(gateway) in mine:
                out.append(fleet.problem(gateway, ("spec", "clusterName"),
                                         f"InferenceCluster {cluster} already hosts InferenceGateway {there[0].name}"))
        if cluster not in clusters and f"InferenceCluster/{cluster}" not in fleet.invalid:
            out += [fleet.problem(g, ("spec", "clusterName"), (
                f"InferenceCluster {cluster!r} is not among the given manifests{did_you_mean(cluster, clusters)}; the "
                "gateway waits for it"), warning=True) for g in there if id(g) in mine]
    for gateway in subjects.of("InferenceGateway"):  # [T-IG] upstream warns, and still composes the gateway
        auth = gateway.v05.auth if gateway.v05 is not None else None
        if auth is not None and auth.apiKey is not None:
            wanted = auth.apiKey.secretSelector.matchLabels
            if not fleet.secrets.selected(CALLER_KEYS_NAMESPACE, wanted):
                labels = ", ".join(f"{k}: {v!r}" for k, v in sorted(wanted.items()))
                out.append(fleet.problem(gateway, ("spec", "auth", "apiKey", "secretSelector"), (
                    f"matches no Secret, so no caller could authenticate: the gateway refuses every request. It "
                    f"selects among the v1/Secret manifests in {CALLER_KEYS_NAMESPACE} given with the fleet (-f); "
                    f"give the callers' Secret there with the labels {labels}"), warning=True))
    return out


def _matches(selector: dict[str, str] | None, labels: dict[str, str] | None) -> bool:
    return all((labels or {}).get(k) == v for k, v in (selector or {}).items())


def _team_policy_problems(fleet: Fleet, subjects: Fleet) -> list[Problem]:
    """What a TeamPolicy refuses that more than one object shows (fleet/team_policy.py decides; each message names
    the policy and its field): a ModelEndpoint's origin, a v0.5 gateway on a cluster outside the residency of a
    service it would serve, a ModelCache whose selector reaches clusters outside it, and a team's token budget
    given both by its policy and by the InferenceGateway's access."""
    from fleet.team_policy import (Policies, front_door_access, front_door_teams, not_resident, origin_refused,
                                   token_conflicts)

    policies = Policies.of(fleet)
    if not policies:
        return []
    out: list[Problem] = []
    for me in subjects.of("ModelEndpoint"):
        policy = policies.for_namespace(me.namespace)
        origin, path = (me.v05.origin, ("spec", "origin")) if me.v05 is not None else (me.spec.url, ("spec", "url"))
        if (why := origin_refused(policy, origin)) is not None:
            out.append(fleet.problem(me, path, f"{why}: a ModelEndpoint of namespace {me.namespace} may send its "
                                               "team's requests only to the origins its policy allows"))
    labels = {ic.name: dict(ic.metadata.labels or {}) for ic in fleet.of("InferenceCluster")}
    gateways = [g for g in fleet.of("InferenceGateway") if g.v05 is not None]
    for ms in subjects.of("ModelService"):
        policy = policies.for_namespace(ms.namespace)
        for gateway in gateways:
            assert gateway.v05 is not None
            selector = gateway.v05.serviceSelector.matchLabels if gateway.v05.serviceSelector else None
            if not _matches(selector, ms.metadata.labels):
                continue
            where = gateway.v05.clusterName
            if (why := not_resident(policy, labels.get(where, {}))) is not None:
                out.append(fleet.problem(ms, ("metadata", "namespace"), (
                    f"InferenceGateway {gateway.name} (spec.clusterName {where}) would serve it, but cluster {where} "
                    f"is {why}: it gets no route there; serve the team from a gateway on a cluster its policy allows "
                    f"(or leave it out with the gateway's spec.serviceSelector)")))
    for cache in subjects.of("ModelCache"):
        policy = policies.for_namespace(cache.namespace)
        selector = cache.spec.clusterSelector.matchLabels if cache.spec.clusterSelector else None
        if policy is None or not selector:
            continue
        outside = [f"{name} ({why})" for name, have in sorted(labels.items())
                   if _matches(selector, have) and (why := not_resident(policy, have)) is not None]
        if outside:
            out.append(fleet.problem(cache, ("spec", "clusterSelector"), (
                f"selects clusters outside its team's residency, where it is not staged: {'; '.join(outside)}"),
                warning=True))
    served = {ms.namespace for ms in fleet.of("ModelService")}
    teams = front_door_teams(policies, served)
    for gateway in subjects.of("InferenceGateway"):
        envoy = gateway.envoy
        if not teams:
            break
        if envoy is None or envoy.access is None:
            continue
        for path, message in token_conflicts(envoy.access, policies, served):
            out.append(fleet.problem(gateway, path, message))
        effective = front_door_access(envoy.access, policies, served)
        if effective.rule_count() > MAX_RULES:
            out.append(fleet.problem(gateway, ("spec", "envoy", "access", "limits"), (
                f"with the TeamPolicies' token budgets these limits make {effective.rule_count()} rate-limit rules; "
                f"Envoy Gateway takes at most {MAX_RULES}")))
        if effective.defaultLimit is not None and len(effective.limits) > MAX_LISTED_WITH_DEFAULT:
            out.append(fleet.problem(gateway, ("spec", "envoy", "access", "defaultLimit"), (
                f"with the TeamPolicies' teams {len(effective.limits)} teams are listed; with defaultLimit at most "
                f"{MAX_LISTED_WITH_DEFAULT} can be")))
    # a front door that counts no team's tokens: the policy's budget is not enforced there, and says so (a budget
    # that is silently not enforced is the failure a policy exists to prevent)
    front = next(iter(fleet.of("InferenceGateway")), None)
    unenforced = front is not None and (front.envoy is None or front.envoy.access is None)
    if front is not None and unenforced:
        why = ("its backend Envoy has no spec.envoy.access (no caller has a team)" if front.envoy is not None else
               "a v0.5 gateway has no per-team limits yet" if front.v05 is not None else
               "a Traefik front door counts no one's tokens")
        named = {p.name for _, p in teams}
        for policy in subjects.of("TeamPolicy"):
            if policy.name in named:
                out.append(fleet.problem(policy, ("spec", "tokens"), (
                    f"not enforced: the front door (InferenceGateway {front.name}) counts no team's tokens, as {why}; "
                    "use backend Envoy with spec.envoy.access"), warning=True))
    return out


def _nvlink_problems(fleet: Fleet, classes: dict, subjects: Fleet) -> list[Problem]:
    """An engine packed into an NVLink domain needs a pool whose class names the NVLink-domain label."""
    packed = [(md, i, engine) for md in subjects.of("ModelDeployment")
              for i, engine in enumerate(md.spec.template.spec.engines) if "NVLinkDomain" in (engine.capabilities or [])]
    if not packed:  # most fleets: the fleet's pools need not be listed
        return []
    pools = [(ic.name, p.name, p.className) for ic in fleet.of("InferenceCluster") for p in ic.spec.nodePools]
    if any(nvlink_label(classes.get(c)) for _, _, c in pools):
        return []  # placement keeps such engines on those pools, and says why per pool
    named = ", ".join(f"{c}/{p} (class {k})" for c, p, k in pools[:5]) + (" ..." if len(pools) > 5 else "")
    return [fleet.problem(md, ("spec", "template", "spec", "engines", i, "capabilities"),
                          f"engine {engine.name} is packed into one NVLink domain (NVLinkDomain), but no pool's class "
                          f"declares one: {named or 'the fleet has no pools'} (set spec.topology.nvlinkDomainLabel on "
                          "the InferenceClass, e.g. nvidia.com/gpu.clique)") for md, i, engine in packed]


def _secret_warnings(fleet: Fleet, subjects: Fleet) -> list[Problem]:
    """Fields naming secrets or credentials that this project does not act on. (A secret whose value is not given
    is not a warning here: pull-request checks never have values; `up` refuses it before applying anything.)"""
    out: list[Problem] = []
    for ic in subjects.of("InferenceCluster"):
        source = ic.spec.cluster
        if source.existing is not None and source.existing.identitySecretRef is not None:
            out.append(fleet.problem(ic, ("spec", "cluster", "existing", "identitySecretRef"), (
                "is not used: the kubeconfig (existing.secretRef) must carry its own credentials, e.g. a service "
                "account token or an exec plugin this machine can run"), warning=True))
        for block, where in CLOUD_CREDENTIALS.items():
            sub = getattr(source, block, None)
            if sub is not None and getattr(sub, "credentials", None) is not None:
                out.append(fleet.problem(ic, ("spec", "cluster", block, "credentials"), (
                    f"names a Crossplane ProviderConfig, which this project does not use: the platform stack "
                    f"authenticates with {where} of the machine (or portal) that runs it"), warning=True))
    return out


def _tenancy_problems(fleet: Fleet, subjects: Fleet) -> list[Problem]:
    """The workload-namespace switch, and team namespaces that would land in a system namespace of the clusters."""
    from fleet import tenancy

    out: list[Problem] = []
    for gateway in subjects.of("InferenceGateway"):
        value = (gateway.metadata.annotations or {}).get(tenancy.ANNOTATION)
        if value is not None and value not in tenancy.MODES:
            out.append(fleet.problem(gateway, ("metadata", "annotations", tenancy.ANNOTATION),
                                     f"{value!r} is not one of {', '.join(tenancy.MODES)}"
                                     f"{did_you_mean(value, tenancy.MODES)}"))
    kinds = ["ModelService", "ModelEndpoint"]  # their objects live in their own namespace on the control plane
    if tenancy.mode(fleet) == tenancy.PER_TEAM:
        kinds += ["ModelDeployment", "ModelCache"]
    for kind in kinds:
        for obj in subjects.of(kind):
            if obj.namespace != "default" and (obj.namespace in tenancy.RESERVED or obj.namespace.startswith("kube-")):
                out.append(fleet.problem(obj, ("metadata", "namespace"), (
                    f"{obj.namespace!r} is a system namespace of the fleet's clusters, where each team's objects get a "
                    "namespace of their own name: use a team namespace" + (
                        f" (or keep every team's replicas in `default` with the annotation {tenancy.ANNOTATION}: "
                        f"{tenancy.SHARED} on the InferenceGateway)" if kind in ("ModelDeployment", "ModelCache")
                        else ""))))
    return out


def _is_secret(data: Any) -> bool:
    return isinstance(data, dict) and data.get("apiVersion") == "v1" and data.get("kind") == "Secret"


def _read_secret(doc: Document, fleet: Fleet, notes: list[str]) -> list[Problem]:
    """A v1/Secret given with the fleet: its values go to the fleet's secret store, and nowhere else."""
    meta = doc.data.get("metadata") if isinstance(doc.data.get("metadata"), dict) else {}
    label = f"Secret/{meta.get('name', '?')}"
    if "modelplane.ai/placeholder" in (meta.get("annotations") or {}):  # render's output read back: no value in it
        notes.append(f"{doc.source}:{doc.line}: skipped {label} (a placeholder written by modelplane render)")
        return []
    try:
        namespace, name, values = secret_from_manifest(doc.data)
    except SecretManifestError as exc:
        path = str(exc).split(":", 1)[0]
        return [Problem(doc.source, doc.line_of(tuple(path.split("."))), label, path, str(exc).split(": ", 1)[-1])]
    key = (namespace, name)
    if key in fleet.secrets.manifests:
        return [Problem(doc.source, doc.line, label, "metadata.name", f"duplicate Secret {namespace}/{name}")]
    replaced = [(key, where) for key in values if (where := fleet.secrets.given_elsewhere(SecretRef(namespace, name, key)))]
    if replaced:  # the files may not quietly replace a value the one running the command gives
        return [Problem(doc.source, doc.line, label, f"data.{key}",
                        f"Secret {namespace}/{name} key {key!r} is also given by {where}: a Secret in the manifests "
                        "may not replace a value the environment or --secrets-dir gives; remove one of the two")
                for key, where in replaced]
    labels = meta.get("labels") if isinstance(meta.get("labels"), dict) else {}
    fleet.secrets.add_manifest(namespace, name, values, f"{doc.source}:{doc.line}", labels)
    notes.append(f"{doc.source}:{doc.line}: read Secret {namespace}/{name} "
                 f"({len(values)} key(s); values are never printed)")
    return []


@dataclass
class LoadMemo:
    """What loading one fleet computed that loading another in the same command reuses: a comparison's base and
    head (`plan --against`, `review`, `preview --changed-against`) share all but the documents the change touched.
    A document's validation depends on its data alone; a document that validated with no problem and no note is
    taken as validated when the same data (the same object, shared by `ParseMemo`) comes again."""

    parsed: ParseMemo = field(default_factory=ParseMemo)
    validated: dict[int, tuple[Any, Resource]] = field(default_factory=dict)  # id(data) -> (data, its object)
    texts: dict[int, tuple[Resource, str]] = field(default_factory=dict)  # Fleet.text_of, for every fleet loaded


def validate_documents(documents: list[Document], secrets_dir: Path | None = None,
                       memo: LoadMemo | None = None) -> Loaded:
    fleet = Fleet(secrets=SecretStore(directory=secrets_dir), texts=memo.texts if memo is not None else {})
    problems: list[Problem] = []
    notes: list[str] = []
    for doc in documents:
        if _is_secret(doc.data):
            problems += _read_secret(doc, fleet, notes)
            continue
        known = memo.validated.get(id(doc.data)) if memo is not None else None
        obj: Resource | None
        found: list[Problem]
        try:
            if known is not None:
                obj, found, note = known[1], [], None
            else:
                obj, found, note = validate_document(doc)
                if memo is not None and obj is not None and not found and note is None:
                    memo.validated[id(doc.data)] = (doc.data, obj)  # the data kept alive: its id stays its own
        except Exception as exc:  # a bug of ours must still name the file and object
            obj, note = None, None
            label = _label(doc.data) if isinstance(doc.data, dict) else ""
            found = [Problem(doc.source, doc.line, label, "", f"internal error while validating: {type(exc).__name__}: {exc}")]
        problems += found
        if note:
            notes.append(note)
        if obj is None:
            meta = doc.data.get("metadata") if isinstance(doc.data, dict) else None
            if isinstance(meta, dict) and isinstance(doc.data.get("kind"), str) and isinstance(meta.get("name"), str):
                fleet.invalid.add(f"{doc.data['kind']}/{meta['name']}")
            continue
        if obj.ref in fleet.origin:
            first = fleet.origin[obj.ref]
            problems.append(Problem(doc.source, doc.line, f"{obj.kind}/{obj.name}", "metadata.name",
                                    f"duplicate object: {obj.ref} is also defined at {first.source}:{first.line}"
                                    + (f"; these look like two variants of one object: give only one of the files "
                                       f"({first.source} or {doc.source}) with -f" if first.source != doc.source
                                       else "")))
            continue
        fleet.origin[obj.ref] = doc
        fleet.objects.append(obj)
    rank = {kind: i for i, kind in enumerate(KINDS)}
    fleet.objects.sort(key=lambda o: (rank[o.kind], o.namespace, o.name))
    problems += cross_object_problems(fleet)
    problems.sort(key=lambda p: (p.source, p.line))  # in file and line order, however the checks found them
    return Loaded(fleet, problems, notes)


def load_fleet(paths: Iterable[str], stdin: Any = None, secrets_dir: Path | None = None,
               sources: list[Source] | None = None, memo: LoadMemo | None = None) -> Loaded:
    """`sources`: the files under `paths` as already read (fleet.loader.read_sources), so they are not read again.
    `memo`: shared by the loads of one command (see LoadMemo)."""
    parsed = memo.parsed if memo is not None else None
    documents, problems = parse_sources(sources, parsed) if sources is not None else load_paths(paths, stdin, parsed)
    loaded = validate_documents(documents, secrets_dir, memo)
    loaded.problems[:0] = problems
    return loaded
