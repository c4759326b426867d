"""KEDA ScaledObjects in the control-plane cluster that scale ModelDeployments (`spec.replicas`, the fleet axis).

The reference's one autoscaling axis: KEDA scales any resource with a scale subresource, and the portal's aggregated
API (workloads/aggregated_api.py) serves `modeldeployments/<name>/scale`, so the ScaledObject's target is the
ModelDeployment itself. Its query runs on the fleet's Prometheus (one that sees every workload cluster, named by the
InferenceGateway's `modelplane.ai/fleet-prometheus`), summed over every cluster serving the deployment. Settings:
fleet/autoscaling.py. They go in the namespace's endpoints stack (`endpoints-<ns>`, on the control plane): per team
like the deployments they scale, so a team's change never touches the platform-level gateway stack.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from fleet import tenancy
from fleet.autoscaling import FLEET_PREFIX, FLEET_PROMETHEUS, parse_fleet
from fleet.names import MAX_PREFIX
from fleet.problems import Problem
from workloads.aggregated_api import GROUP, VERSION, enabled

if TYPE_CHECKING:
    from fleet.validate import Fleet

LABEL = "modelplane.ai/deployment"


def default_query(workload_namespace: str, deployment: str) -> str:
    """Waiting requests of every pod of the deployment's replicas, on every cluster: a replica's workloads are named
    after it (`<deployment prefix>-<5-character hash>-...`), and summing drops the clusters' labels."""
    prefix = deployment[:MAX_PREFIX].rstrip("-")
    return f'sum(vllm:num_requests_waiting{{namespace="{workload_namespace}",pod=~"{prefix}-[a-z0-9]{{5}}-.*"}})'


def scaled_objects(fleet: Fleet, stack_of) -> tuple[dict[str, list[dict]], list[Problem]]:
    """(namespace -> its ScaledObjects, problems). `stack_of(namespace)`: the stack problems are reported for."""
    gateway = next(iter(fleet.of("InferenceGateway")), None)
    annotations = dict(gateway.metadata.annotations or {}) if gateway is not None else {}
    server = annotations.get(FLEET_PROMETHEUS)
    chosen = tenancy.mode(fleet)
    out: dict[str, list[dict]] = {}
    problems: list[Problem] = []
    for md in fleet.of("ModelDeployment"):
        settings, _ = parse_fleet(md.metadata.annotations)  # errors are validation's
        if settings is None:
            continue
        missing = [] if enabled(annotations) else [
            "the portal's aggregated API (InferenceGateway annotation modelplane.ai/aggregated-api: enabled), "
            "whose scale subresource KEDA drives"]
        if not server:
            missing.append(f"the fleet's Prometheus (InferenceGateway annotation {FLEET_PROMETHEUS}: <URL>)")
        if missing:
            problems.append(Problem(stack_of(md.namespace), 0, f"ModelDeployment/{md.name}",
                                    f"metadata.annotations.{FLEET_PREFIX}",
                                    "fleet autoscaling needs " + " and ".join(missing)))
            continue
        query = settings.query or default_query(tenancy.workload_namespace(md.namespace, chosen), md.name)
        out.setdefault(md.namespace, []).append({
            "apiVersion": "keda.sh/v1alpha1", "kind": "ScaledObject",
            "metadata": {"name": md.name, "namespace": md.namespace, "labels": {LABEL: md.name}},
            "spec": {"scaleTargetRef": {"apiVersion": f"{GROUP}/{VERSION}", "kind": "ModelDeployment", "name": md.name},
                     "minReplicaCount": settings.min_replicas, "maxReplicaCount": settings.max_replicas,
                     "triggers": [{"type": "prometheus", "metadata": {
                         "serverAddress": str(server), "query": query, "threshold": settings.threshold}}]},
        })
    return out, problems
