"""KEDA ScaledObjects scaling each replica's workloads (copies) on its cluster (see fleet/autoscaling.py)."""

from __future__ import annotations

from fleet.autoscaling import parse
from workloads import llmd, native
from workloads.context import ReplicaContext
from workloads.versions import PROMETHEUS_ADDRESS


def scaled_objects(ctx: ReplicaContext) -> list[dict]:
    settings, _ = parse(ctx.md.metadata.annotations)
    if settings is None:
        return []
    objects = []
    for engine in ctx.engines:
        if engine.backend == "native" or (engine.backend == "llm-d" and not engine.multi_pod and ctx.mode == "PrefillDecode"):
            target = {"apiVersion": "apps/v1", "kind": "Deployment", "name": native.workload_name(ctx, engine)}
        elif engine.backend == "llm-d":
            target = {"apiVersion": "leaderworkerset.x-k8s.io/v1", "kind": "LeaderWorkerSet",
                      "name": llmd.workload_name(ctx, engine)}
        else:
            continue  # Dynamo scales its graphs with its own planner
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
