"""ModelDeployment (what developers write) and ModelReplica (one placed copy of it)."""

from __future__ import annotations

from typing import Annotated, Any, ClassVar, Literal

from pydantic import Field

from fleet.api.common import (
    Annotations,
    Int,
    Labels,
    LocalRef,
    MatchLabels,
    Resource,
    Rule,
    Str,
    Strict,
    label_rules,
    unique,
)

# ---- the curated pod template ---------------------------------------------------------


class KeyRef(Strict):
    name: str | None = None
    key: Annotated[str, Str(1)]
    optional: bool | None = None


class FieldRef(Strict):
    fieldPath: Annotated[str, Str(1)]
    apiVersion: str | None = None


class EnvVarSource(Strict):
    secretKeyRef: KeyRef | None = None
    configMapKeyRef: KeyRef | None = None
    fieldRef: FieldRef | None = None


class EnvVar(Strict):
    name: Annotated[str, Str(1)]
    value: str | None = None
    valueFrom: EnvVarSource | None = None


class Container(Strict):
    name: Annotated[str, Str(1)]
    image: Annotated[str, Str(1)]
    command: list[str] | None = None
    args: list[str] | None = None
    env: list[EnvVar] | None = None


class PodSpec(Strict):
    containers: list[Container] = Field(min_length=1, max_length=1)
    imagePullSecrets: list[LocalRef] | None = None


class PodMetadata(Strict):
    labels: Labels | None = None
    annotations: Annotations | None = None


class PodTemplate(Strict):
    metadata: PodMetadata | None = None
    spec: PodSpec


def pod_template_rules(template: PodTemplate, path: tuple) -> Rule:
    meta = template.metadata or PodMetadata()
    yield from label_rules(meta.labels or {}, path + ("metadata", "labels"))
    yield from label_rules(meta.annotations or {}, path + ("metadata", "annotations"), values=False)
    names = [c.name for c in template.spec.containers]
    if names.count("engine") != 1:
        yield path + ("spec", "containers", 0, "name"), "exactly one container must be named 'engine'"


# ---- engines and members --------------------------------------------------------------

Role = Literal["Standalone", "Leader", "Worker"]
Phase = Literal["Prefill", "Decode"]
Mode = Literal["Unified", "PrefillDecode"]


class CelSelector(Strict):
    # `minProperties: 1` in the reference: an empty selector object is rejected.
    cel: Annotated[str, Str(1, 10240)]


class DeviceRequest(Strict):
    name: Annotated[str, Str(1, 63)]
    count: Annotated[int, Int(1, 64)] = 1
    selectors: list[CelSelector] = Field(min_length=1, max_length=8)


class NodeSelector(Strict):
    devices: list[DeviceRequest] = Field(min_length=1, max_length=16)


class WorkerSpec(Strict):
    nodes: Annotated[int, Int(1, 63)]


class Member(Strict):
    role: Role = "Standalone"
    nodeSelector: NodeSelector | None = None
    worker: WorkerSpec | None = None
    template: PodTemplate

    @property
    def pods(self) -> int:
        """Pods of this member per copy: worker.nodes for a Worker (1 if absent), else 1."""
        return (self.worker.nodes if self.worker else 1) if self.role == "Worker" else 1




# Capabilities only NVIDIA Dynamo ships today (KVBM tiered KV offload, ModelExpress
# peer-to-peer weight streaming, Grove NVLink-domain gang placement). Not in the
# reference's API: an optional addition, so reference manifests stay valid.
Capability = Literal["KVOffload", "WeightStreaming", "NVLinkDomain"]


class Engine(Strict):
    name: Annotated[str, Str(1, 63)]
    copies: Annotated[int, Int(1, 64)] = 1
    phase: Phase | None = None
    capabilities: list[Capability] | None = Field(default=None, max_length=3)
    members: list[Member] = Field(min_length=1, max_length=2)


class Toleration(Strict):
    key: str | None = None
    operator: Literal["Exists", "Equal"] = "Equal"
    value: str | None = None
    effect: Literal["NoSchedule", "NoExecute"] | None = None


class Serving(Strict):
    mode: Mode


class DeploymentTemplateSpec(Strict):
    clusterSelector: MatchLabels | None = None
    modelCacheRef: LocalRef | None = None
    serving: Serving | None = None
    tolerations: list[Toleration] | None = None
    engines: list[Engine] = Field(min_length=1, max_length=8)

    @property
    def mode(self) -> str:
        return self.serving.mode if self.serving else "Unified"


class DeploymentTemplateMeta(Strict):
    labels: Labels | None = None


class DeploymentTemplate(Strict):
    metadata: DeploymentTemplateMeta | None = None
    spec: DeploymentTemplateSpec


class ModelDeploymentSpec(Strict):
    # 0..10 as in the reference's v0.5 (its PR #454): 0 parks the deployment (no replica, no endpoint), Ready
    replicas: Annotated[int, Int(0, 10)]
    template: DeploymentTemplate


class ModelDeployment(Resource):
    kind: Literal["ModelDeployment"]
    spec: ModelDeploymentSpec
    status: dict[str, Any] | None = None


def engine_shape_problem(roles: list[str]) -> str | None:
    standalone = roles.count("Standalone")
    leaders, workers = roles.count("Leader"), roles.count("Worker")
    if standalone == 1 and len(roles) == 1:
        return None
    if standalone == 0 and leaders == 1 and workers >= 1:
        return None
    return "an engine has either exactly one Standalone member, or one Leader and at least one Worker"


def serving_rules(mode: str, engines: list, path: tuple) -> Rule:
    phases = [e.phase for e in engines]
    if mode == "PrefillDecode":
        if len(engines) != 2:
            yield path, "serving mode PrefillDecode needs exactly 2 engines"
        if phases.count("Prefill") != 1:
            yield path, "serving mode PrefillDecode needs exactly one engine with phase Prefill"
        if phases.count("Decode") != 1:
            yield path, "serving mode PrefillDecode needs exactly one engine with phase Decode"
    else:
        for i, phase in enumerate(phases):
            if phase is not None:
                yield path + (i, "phase"), "phase is only allowed when serving mode is PrefillDecode"


def member_rules(member, path: tuple) -> Rule:
    if member.worker is not None and member.role != "Worker":
        yield path + ("worker",), "worker is only allowed on role Worker"
    yield from pod_template_rules(member.template, path + ("template",))


def engines_rules(engines: list, path: tuple, claims, no_claim_message: str) -> Rule:
    """The engine rules shared by deployments and replicas: shape, a claiming member, members' own rules."""
    for i, engine in enumerate(engines):
        epath = path + (i,)
        if problem := engine_shape_problem([m.role for m in engine.members]):
            yield epath + ("members",), problem
        if not any(claims(m) for m in engine.members):
            yield epath + ("members",), no_claim_message
        for j, member in enumerate(engine.members):
            yield from member_rules(member, epath + ("members", j))


def model_deployment_rules(md: ModelDeployment) -> Rule:
    from fleet.autoscaling import PREFIX, parse, parse_fleet
    from fleet.backends import BACKEND_ANNOTATION, deployment_decisions

    tspec = md.spec.template.spec
    base = ("spec", "template", "spec")
    decisions, backend_errors = deployment_decisions(md)
    for index, message in backend_errors:
        yield (("metadata", "annotations", BACKEND_ANNOTATION) if index < 0 else base + ("engines", index)), message
    autoscaling, scaling_errors = parse(md.metadata.annotations)
    for key, message in scaling_errors + parse_fleet(md.metadata.annotations)[1]:
        yield ("metadata", "annotations", key), message
    if autoscaling and any(d.backend == "dynamo" for d in decisions):
        yield ("metadata", "annotations", PREFIX), "KEDA autoscaling is not available for Dynamo-served engines (Dynamo's planner scales them)"
    tmeta = md.spec.template.metadata
    if tmeta and tmeta.labels:
        yield from label_rules(tmeta.labels, ("spec", "template", "metadata", "labels"))
    yield from serving_rules(tspec.mode, tspec.engines, base + ("engines",))
    yield from unique(tspec.engines, lambda e: e.name, base + ("engines",), "engine name")
    for i, tol in enumerate(tspec.tolerations or []):
        if tol.operator == "Equal" and not tol.key:
            yield base + ("tolerations", i, "key"), "operator Equal needs a non-empty key"
        if tol.operator == "Exists" and tol.value:
            yield base + ("tolerations", i, "value"), "operator Exists must not set a value"
    yield from engines_rules(tspec.engines, base + ("engines",), lambda m: m.nodeSelector,
                             "at least one member must have a nodeSelector")
    for i, engine in enumerate(tspec.engines):
        for j, member in enumerate(engine.members):
            if member.nodeSelector:
                yield from unique(member.nodeSelector.devices, lambda d: d.name,
                                  base + ("engines", i, "members", j, "nodeSelector", "devices"), "device request name")


# ---- ModelReplica: the machine-written, resolved form ---------------------------------


class ResolvedDeviceRequest(Strict):
    name: Annotated[str, Str(1, 63)]
    deviceClassName: Annotated[str, Str(1, 253)]
    count: Annotated[int, Int(1, 64)] = 1
    selectors: list[CelSelector] | None = Field(default=None, max_length=8)


class ReplicaMember(Strict):
    role: Role = "Standalone"
    nodePoolName: Annotated[str, Str(1)]
    deviceRequests: list[ResolvedDeviceRequest] | None = Field(default=None, min_length=1, max_length=16)
    worker: WorkerSpec | None = None
    template: PodTemplate

    pods = Member.pods


class ReplicaEngine(Strict):
    name: Annotated[str, Str(1, 63)]
    copies: Annotated[int, Int(1, 64)] = 1
    phase: Phase | None = None
    members: list[ReplicaMember] = Field(min_length=1, max_length=2)


class ModelReplicaSpec(Strict):
    clusterName: Annotated[str, Str(1)]
    modelCacheRef: LocalRef | None = None
    serving: Serving | None = None
    engines: list[ReplicaEngine] = Field(min_length=1, max_length=8)

    @property
    def mode(self) -> str:
        return self.serving.mode if self.serving else "Unified"


class ModelReplica(Resource):
    kind: Literal["ModelReplica"]
    spec: ModelReplicaSpec
    status: dict[str, Any] | None = None

    namespaced: ClassVar[bool] = True


def model_replica_rules(mr: ModelReplica) -> Rule:
    base = ("spec",)
    yield from serving_rules(mr.spec.mode, mr.spec.engines, base + ("engines",))
    yield from unique(mr.spec.engines, lambda e: e.name, base + ("engines",), "engine name")
    yield from engines_rules(mr.spec.engines, base + ("engines",), lambda m: m.deviceRequests,
                             "at least one member must carry deviceRequests")
