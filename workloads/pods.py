"""Pod shaping shared by every backend: the engine container, devices, pool pinning, volumes.

The pod contract is the reference's: one container named `engine` with the user's image,
command, args and env passed through (after v0.5's `MODELPLANE_SERVED_MODEL_NAME`); port 8000
and `GET /health` on serving pods; `/dev/shm` as a Memory emptyDir; a model cache at `/mnt/models`;
the pool pinned by the node label `modelplane.ai/pool`; devices claimed through a per-member DRA ResourceClaimTemplate.
"""

from __future__ import annotations

from dataclasses import dataclass

from fleet.api.deployment import Member
from fleet.names import child_name

ENGINE_PORT = 8000
CACHE_MOUNT = "/mnt/models"
GPU_TOLERATION = {"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"}
# AKS taints every spot pool's nodes itself, and refuses to have it removed. A toleration only permits: the
# pool's nodeSelector still decides where a pod runs, so every GPU pod and node daemon carries both.
AKS_SPOT_TOLERATION = {"key": "kubernetes.azure.com/scalesetpriority", "operator": "Equal", "value": "spot",
                       "effect": "NoSchedule"}
GPU_NODE_TOLERATIONS = (GPU_TOLERATION, AKS_SPOT_TOLERATION)
PROBE = {"initialDelaySeconds": 30, "periodSeconds": 10, "timeoutSeconds": 5}
# Modelplane v0.5's contract: every engine container gets it, ahead of the user's env, so args can say
# `--served-model-name=$(MODELPLANE_SERVED_MODEL_NAME)` (Kubernetes expands $(VAR) in args from the container's env)
SERVED_MODEL_NAME = "MODELPLANE_SERVED_MODEL_NAME"


@dataclass(frozen=True)
class MemberContext:
    """Everything needed to shape one member's pods on its placed pool."""

    replica: str
    engine: str
    spec: Member
    pool: str
    devices: tuple[tuple[str, str, int], ...]  # claimed requests: (name, deviceClassName, count per pod)
    cache_pvc: str | None
    namespace: str  # the workload namespace on the cluster (fleet/tenancy.py)
    served_model_name: str  # `<namespace>/<deployment>`, the team's namespace: what callers name the model

    @property
    def role(self) -> str:
        return self.spec.role

    @property
    def claim_template_name(self) -> str:
        return child_name(self.replica, self.engine, self.role.lower(), "devices")


def claim_template(member: MemberContext, labels: dict) -> dict | None:
    """The member's DRA ResourceClaimTemplate, or None if it claims nothing."""
    if not member.devices:
        return None
    node_selector = member.spec.nodeSelector
    selectors = {d.name: [s.cel for s in d.selectors] for d in (node_selector.devices if node_selector else [])}
    requests = []
    for name, device_class, count in member.devices:
        exactly = {"deviceClassName": device_class, "count": count}
        if selectors.get(name):
            exactly["selectors"] = [{"cel": {"expression": cel}} for cel in selectors[name]]
        requests.append({"name": name, "exactly": exactly})
    return {
        "apiVersion": "resource.k8s.io/v1", "kind": "ResourceClaimTemplate",
        "metadata": {"name": member.claim_template_name, "namespace": member.namespace, "labels": labels},
        "spec": {"spec": {"devices": {"requests": requests}}},
    }


def _has_model_arg(args: list[str]) -> bool:
    return any(a == "--model" or a.startswith("--model=") for a in args)


def engine_container(member: MemberContext, serving: bool, port: int = ENGINE_PORT, first_env: list | None = None,
                     inject_model: bool = True, always_args: bool = True) -> dict:
    user = member.spec.template.spec.containers[0]
    args = list(user.args or [])
    if member.cache_pvc and inject_model and serving and not user.command and not _has_model_arg(args):
        args.append(f"--model={CACHE_MOUNT}")  # the vLLM turnkey path: serve the staged weights
    container: dict = {"name": "engine", "image": user.image}
    if user.command:
        container["command"] = list(user.command)
    if args or always_args:
        container["args"] = args
    env = [{"name": SERVED_MODEL_NAME, "value": member.served_model_name}] + [dict(e) for e in first_env or []] + \
        [e.model_dump(exclude_none=True) for e in user.env or []]
    container["env"] = env
    if serving:
        container["ports"] = [{"name": "http", "containerPort": port, "protocol": "TCP"}]
        container["readinessProbe"] = {"httpGet": {"path": "/health", "port": port}, **PROBE}
    mounts = [{"name": "dshm", "mountPath": "/dev/shm"}]
    if member.cache_pvc:
        mounts.append({"name": "model-cache", "mountPath": CACHE_MOUNT})
    container["volumeMounts"] = mounts
    if member.devices:
        container["resources"] = {"claims": [{"name": "devices"}]}
    return container


def pod_template(member: MemberContext, labels: dict, container: dict, extra: dict | None = None) -> dict:
    meta = member.spec.template.metadata
    pod_labels = {**((meta.labels if meta else None) or {}), **labels}  # managed labels win
    metadata: dict = {"labels": pod_labels}
    if meta and meta.annotations:
        metadata["annotations"] = dict(meta.annotations)
    volumes = [{"name": "dshm", "emptyDir": {"medium": "Memory"}}]
    if member.cache_pvc:
        volumes.append({"name": "model-cache", "persistentVolumeClaim": {"claimName": member.cache_pvc}})
    spec: dict = {
        "nodeSelector": {"modelplane.ai/pool": member.pool},
        "tolerations": [dict(t) for t in GPU_NODE_TOLERATIONS],
        "containers": [container],
        "volumes": volumes,
    }
    if member.devices:
        spec["resourceClaims"] = [{"name": "devices", "resourceClaimTemplateName": member.claim_template_name}]
    pull = member.spec.template.spec.imagePullSecrets
    if pull:
        spec["imagePullSecrets"] = [{"name": p.name} for p in pull]
    spec.update(extra or {})
    return {"metadata": metadata, "spec": spec}
