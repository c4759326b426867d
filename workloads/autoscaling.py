"""KEDA ScaledObjects scaling each replica's workloads (copies) on its cluster (see fleet/autoscaling.py)."""

from __future__ import annotations

from fleet.autoscaling import parse
from workloads.backends.registry import backend
from workloads.context import ReplicaContext
from workloads.versions import PROMETHEUS_ADDRESS


def scaled_objects(ctx: ReplicaContext) -> list[dict]:
    settings, _ = parse(ctx.md.metadata.annotations)
    if settings is None:
        return []
    objects = []
    for engine in ctx.engines:
        target = backend(engine.backend).scale_target(ctx, engine)
        if target is None:
            continue  # the backend scales its own (Dynamo's planner)
        query = settings.query or (
            f'sum(vllm:num_requests_waiting{{namespace="{ctx.workload_namespace}",pod=~"{target["name"]}-.*"}})')
        objects.append({
            "apiVersion": "keda.sh/v1alpha1", "kind": "ScaledObject",
            "metadata": {"name": target["name"], "namespace": ctx.workload_namespace, "labels": dict(ctx.labels)},
            "spec": {"scaleTargetRef": target, "minReplicaCount": settings.min_copies,
                     "maxReplicaCount": settings.max_copies,
                     "triggers": [{"type": "prometheus", "metadata": {
                         "serverAddress": PROMETHEUS_ADDRESS, "query": query, "threshold": settings.threshold}}]},
        })
    return objects
