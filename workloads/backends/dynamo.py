"""The Dynamo backend: one DynamoGraphDeployment (nvidia.com/v1beta1) per replica.

The graph holds a frontend (Dynamo's OpenAI-compatible HTTP server on port 8000) and one
component per engine: `worker` in a Unified replica, `prefill`/`decode` in a PrefillDecode
one. A Leader+Worker engine is a multinode component (`nodeCount` = 1 + worker.nodes);
Dynamo (with Grove where installed) gang-schedules it and injects the multinode wiring, so
one pod template, the leader's, serves every node. The engine's image, command, args and
env are the user's; modelplane adds the pool pin, the DRA claim, the cache and labels, and per capability
what the platform provides for it (docs/backends.md says which flag stays the user's):

- `NVLinkDomain`: the component packs into one NVLink domain (`packDomain: block`) of the ClusterTopology
  `grove-topology`, the one the cluster's Grove makes from the levels it is configured with (fleet/topology.py,
  workloads/dynamo_platform.py; placement keeps such engines on pools whose class names the domain's label).
- `KVOffload`: KVBM's disk tier on a local volume (`emptyDir` at /kvbm-cache, `DYN_KVBM_DISK_CACHE_DIR`, sized by
  `DYN_KVBM_DISK_CACHE_GB` when set), `/run/udev` read-only for cuFile, and, when `DYN_KVBM_CPU_CACHE_GB` is set,
  a memory request of twice that (Dynamo's agg_kvbm example: a 100 GB CPU cache, 200Gi requested).
- `WeightStreaming`: the cluster runs the ModelExpress server and the operator injects `MODEL_EXPRESS_URL`
  (workloads/dynamo_platform.py); nothing in the graph.
"""

from __future__ import annotations

from fleet.backends import dynamo_framework
from fleet.names import bounded
from fleet.topology import CLUSTER_TOPOLOGY, NVLINK_DOMAIN
from workloads.context import ReplicaContext
from workloads.pods import ENGINE_PORT, claim_template, engine_container, pod_template

NAME_LIMIT = 40  # the operator names services <graph>-<component>; keep room for the component


def graph_name(ctx: ReplicaContext) -> str:
    return bounded(ctx.name, NAME_LIMIT)


def frontend_service(ctx: ReplicaContext) -> tuple[str, int]:
    """The Service the Dynamo operator creates for the graph's frontend, and its port."""
    return f"{graph_name(ctx)}-frontend", ENGINE_PORT


KVBM_DIR = "/kvbm-cache"


def kv_offload(template: dict) -> None:
    """What KVBM needs from the pod (Dynamo's KVBM guide): a local disk tier and its udev view, host memory."""
    container = template["spec"]["containers"][0]
    env = container.setdefault("env", [])
    given = {e["name"]: e.get("value") for e in env}
    if "DYN_KVBM_DISK_CACHE_DIR" not in given:
        env.append({"name": "DYN_KVBM_DISK_CACHE_DIR", "value": KVBM_DIR})
    disk: dict = {}
    if (gb := _number(given.get("DYN_KVBM_DISK_CACHE_GB"))) is not None:
        disk["sizeLimit"] = f"{gb}Gi"
    template["spec"]["volumes"] += [{"name": "kvbm-cache", "emptyDir": disk},
                                    {"name": "udev", "hostPath": {"path": "/run/udev", "type": "Directory"}}]
    container["volumeMounts"] += [{"name": "kvbm-cache", "mountPath": given.get("DYN_KVBM_DISK_CACHE_DIR") or KVBM_DIR},
                                  {"name": "udev", "mountPath": "/run/udev", "readOnly": True}]
    if (gb := _number(given.get("DYN_KVBM_CPU_CACHE_GB"))) is not None:
        container.setdefault("resources", {}).setdefault("requests", {})["memory"] = f"{2 * gb}Gi"


def _number(value: str | None) -> int | None:
    return int(value) if value is not None and value.strip().isdigit() else None


def build(ctx: ReplicaContext) -> list[dict]:
    first = ctx.engines[0].members[0].spec.template.spec.containers[0].image
    framework = dynamo_framework(first)
    labels = {**ctx.labels, "modelplane.ai/serving": ctx.name}
    components = [{
        "name": "frontend", "type": "frontend", "replicas": 1,
        "podTemplate": {"metadata": {"labels": dict(labels)}, "spec": {"containers": [{
            "name": "main", "image": first, "command": ["python3", "-m", "dynamo.frontend"],
            "args": [f"--http-port={ENGINE_PORT}"]}]}},
    }]
    objects = []
    for engine in ctx.engines:
        serving = next(m for m in engine.members if m.role in ("Leader", "Standalone"))
        worker = next((m for m in engine.members if m.role == "Worker"), None)
        container = engine_container(serving, serving=False, always_args=False)
        container["name"] = "main"
        template = pod_template(serving, {**ctx.labels, "modelplane.ai/workload": graph_name(ctx)}, container)
        component = {
            "name": engine.name,
            "type": engine.spec.phase.lower() if ctx.mode == "PrefillDecode" and engine.spec.phase else "worker",
            "replicas": engine.spec.copies,
            "podTemplate": template,
        }
        if worker is not None:
            component["multinode"] = {"nodeCount": 1 + (worker.spec.worker.nodes if worker.spec.worker else 1)}
        if "NVLinkDomain" in (engine.spec.capabilities or []):
            component["topologyConstraint"] = {"packDomain": NVLINK_DOMAIN}
        if "KVOffload" in (engine.spec.capabilities or []):
            kv_offload(template)
        components.append(component)
        claim = claim_template(serving, dict(ctx.labels))
        if claim:
            objects.append(claim)
    spec: dict = {"backendFramework": framework, "components": components}
    if any("NVLinkDomain" in (e.spec.capabilities or []) for e in ctx.engines):
        spec["topologyConstraint"] = {"clusterTopologyName": CLUSTER_TOPOLOGY}
    objects.append({
        "apiVersion": "nvidia.com/v1beta1", "kind": "DynamoGraphDeployment",
        "metadata": {"name": graph_name(ctx), "namespace": ctx.workload_namespace, "labels": dict(ctx.labels),
                     "annotations": {"modelplane.ai/capabilities": ",".join(sorted(
                         {c for e in ctx.engines for c in (e.spec.capabilities or [])})) or "none"}},
        "spec": spec,
    })
    return objects
