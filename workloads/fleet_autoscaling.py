"""KEDA ScaledObjects in the control-plane cluster that scale ModelDeployments (`spec.replicas`, the fleet axis).

The reference's one autoscaling axis: KEDA scales any resource with a scale subresource, and the portal's aggregated
API (workloads/aggregated_api.py) serves `modeldeployments/<name>/scale`, so the ScaledObject's target is the
ModelDeployment itself. Its query runs on the fleet's Prometheus (one that sees every workload cluster, named by the
InferenceGateway's `modelplane.ai/fleet-prometheus`), summed over every cluster serving the deployment. Settings:
fleet/autoscaling.py. They go in the namespace's endpoints stack (`endpoints-<ns>`, on the control plane): per team
like the deployments they scale, so a team's change never touches the platform-level gateway stack.

KEDA scales the portal's copy of the deployment, so fleet autoscaling needs that portal to be the deployment's source
of truth and to apply what it stores: the in-cluster portal with the operator executor
(`modelplane.ai/aggregated-api-executor: operator`; with `none`, the default, it plans only and a new `spec.replicas`
is never applied). `render` and a portal write refuse it otherwise (`scaled_objects`), and `up` and `preview` from
files refuse every fleet-autoscaled deployment (`from_files`): the portal never reads those files, and each `up -f`
would set `spec.replicas` back to the file's.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from fleet import tenancy
from fleet.autoscaling import FLEET_PREFIX, FLEET_PROMETHEUS, parse_fleet
from fleet.names import MAX_PREFIX
from fleet.problems import Problem
from workloads.aggregated_api import GROUP, PREFIX as AGGREGATED_API, VERSION, enabled

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
        if annotations.get(f"{AGGREGATED_API}-executor", "none") != "operator":
            missing.append(f"that portal to apply what KEDA scales (InferenceGateway annotation "
                           f"{AGGREGATED_API}-executor: operator; with none, the default, it plans only and a new "
                           "spec.replicas is never applied)")
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


def from_files(fleet: Fleet) -> list[Problem]:
    """Why `up` and `preview` from files refuse each fleet-autoscaled deployment: the copy KEDA scales is the
    in-cluster portal's, which these files never reach, so the portal must be its source of truth."""
    out = []
    for md in fleet.of("ModelDeployment"):
        settings, _ = parse_fleet(md.metadata.annotations)
        if settings is None:
            continue
        out.append(fleet.problem(md, ("metadata", "annotations", FLEET_PREFIX), (
            "fleet autoscaling needs the control-plane cluster's portal as this deployment's source of truth: KEDA "
            "scales the portal's copy (its aggregated API), which applying these files never writes, and each "
            "`up -f` would set spec.replicas back to this file's. Apply it to the control-plane cluster instead "
            f"(kubectl apply, its portal with {AGGREGATED_API}-executor: operator applies it) and leave it out of "
            "these files (docs/composition.md, fleet autoscaling)")))
    return out
