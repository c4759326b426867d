"""When Pulumi considers a Kubernetes object ready, and what a workload says to be waited for.

pulumi-kubernetes 4.x awaits a few built-in kinds by itself; any other object is "ready" once the API
server accepted it, unless its `pulumi.com/waitFor` annotation says what to wait for
(`pulumi.com/skipAwait: "true"` turns waiting off). One table, read by composition (which annotates
the workloads), the deployability check and the test double of the CLI.
"""

from __future__ import annotations

from typing import Mapping

AWAITED_BY_PULUMI = frozenset({"Deployment", "StatefulSet", "DaemonSet", "ReplicaSet", "Job", "Pod", "Service",
                               "PersistentVolumeClaim", "Ingress"})
# The condition each workload controller sets once its pods are ready (a model stack's success means serving).
READY_WHEN = {"LeaderWorkerSet": "condition=Available",  # LWS: every group's pods ready
              "DynamoGraphDeployment": "condition=Ready"}  # Dynamo operator: every component ready


def awaited(kind: str, annotations: Mapping[str, str]) -> bool:
    """Would pulumi-kubernetes wait for this object to be ready before its step succeeds?"""
    if annotations.get("pulumi.com/skipAwait") == "true":
        return False
    return bool(annotations.get("pulumi.com/waitFor")) or kind in AWAITED_BY_PULUMI
