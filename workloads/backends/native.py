"""The native backend: a single-pod engine as a plain apps/v1 Deployment (replicas = copies)."""

from __future__ import annotations

from fleet.names import child_name
from workloads.context import EngineContext, ReplicaContext
from workloads.pods import claim_template, engine_container, pod_template


def workload_name(ctx: ReplicaContext, engine: EngineContext) -> str:
    # Always differs from the replica name (the reference's rule; an LWS named like a Service loses its headless Service).
    return child_name(ctx.name, engine.name)


def build(ctx: ReplicaContext, engine: EngineContext, pod_labels: dict | None = None,
          shape=None) -> list[dict]:
    """Deployment plus the member's ResourceClaimTemplate. `shape` lets P/D adjust the pod (ports, sidecar)."""
    [member] = engine.members
    name = workload_name(ctx, engine)
    labels = {**ctx.labels, "modelplane.ai/serving": ctx.name, "modelplane.ai/workload": name, **(pod_labels or {})}
    container = engine_container(member, serving=True)
    template = pod_template(member, labels, container)
    if shape is not None:
        shape(template)
    objects = [{
        "apiVersion": "apps/v1", "kind": "Deployment",
        "metadata": {"name": name, "namespace": ctx.workload_namespace, "labels": dict(ctx.labels)},
        "spec": {"replicas": engine.spec.copies, "selector": {"matchLabels": {"modelplane.ai/workload": name}},
                 "template": template},
    }]
    claim = claim_template(member, dict(ctx.labels))
    return ([claim] if claim else []) + objects
