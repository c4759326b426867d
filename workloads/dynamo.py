"""The Dynamo backend: one DynamoGraphDeployment (nvidia.com/v1beta1) per replica.

The graph holds a frontend (Dynamo's OpenAI-compatible HTTP server on port 8000) and one
component per engine: `worker` in a Unified replica, `prefill`/`decode` in a PrefillDecode
one. A Leader+Worker engine is a multinode component (`nodeCount` = 1 + worker.nodes);
Dynamo (with Grove where installed) gang-schedules it and injects the multinode wiring, so
one pod template, the leader's, serves every node. The engine's image, command, args and
env are the user's; modelplane adds the pool pin, the DRA claim, the cache and labels.
"""

from __future__ import annotations

from fleet.backends import dynamo_framework
from fleet.names import bounded
from workloads.context import ReplicaContext
from workloads.pods import ENGINE_PORT, claim_template, engine_container, pod_template

NAME_LIMIT = 40  # the operator names services <graph>-<component>; keep room for the component


def graph_name(ctx: ReplicaContext) -> str:
    return bounded(ctx.name, NAME_LIMIT)


def frontend_service(ctx: ReplicaContext) -> tuple[str, int]:
    """The Service the Dynamo operator creates for the graph's frontend, and its port."""
    return f"{graph_name(ctx)}-frontend", ENGINE_PORT


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
            component["topologyConstraint"] = {"packDomain": "nvlink"}
        components.append(component)
        claim = claim_template(serving, dict(ctx.labels))
        if claim:
            objects.append(claim)
    spec: dict = {"backendFramework": framework, "components": components}
    if any("NVLinkDomain" in (e.spec.capabilities or []) for e in ctx.engines):
        spec["topologyConstraint"] = {"clusterTopologyName": "modelplane"}
    objects.append({
        "apiVersion": "nvidia.com/v1beta1", "kind": "DynamoGraphDeployment",
        "metadata": {"name": graph_name(ctx), "namespace": ctx.workload_namespace, "labels": dict(ctx.labels),
                     "annotations": {"modelplane.ai/capabilities": ",".join(sorted(
                         {c for e in ctx.engines for c in (e.spec.capabilities or [])})) or "none"}},
        "spec": spec,
    })
    return objects
