"""Where a team's objects live on a workload cluster.

A team's stack (`team-<namespace>`) also creates the namespace of its ModelServices' routes and backends on
the control-plane cluster. By default each ModelDeployment's objects (workloads, claims, routing, scaling, its cache's volume)
land in a namespace of the same name as the deployment's own namespace on every cluster that runs
them: two teams' `qwen` never collide, and a team is isolated by a default-deny NetworkPolicy and
a ResourceQuota for the devices the plan gives it there (composed by workloads/tenancy.py, owned by
the team's stack). The reference puts every replica in `default`; a fleet whose tools rely on that
keeps it with the annotation `modelplane.ai/workload-namespaces: Default` on its InferenceGateway.
"""

from __future__ import annotations

from typing import Any, Protocol


class Objects(Protocol):
    """What `mode` reads of a fleet (fleet.validate.Fleet is one): its objects of a kind. A protocol, so that this
    module, which validation imports, never imports validation back."""

    def of(self, kind: Any) -> Any: ...

ANNOTATION = "modelplane.ai/workload-namespaces"
PER_TEAM, SHARED = "PerTeam", "Default"
MODES = (PER_TEAM, SHARED)
SHARED_NAMESPACE = "default"
# Namespaces a team cannot have on workload clusters: Kubernetes' own, and every namespace the platform
# stacks install into (tests/test_tenancy.py checks this list against components/versions.py).
RESERVED = frozenset({
    "kube-system", "kube-public", "kube-node-lease", "modelplane-system", "envoy-gateway-system",
    "envoy-ai-gateway-system", "lws-system", "node-feature-discovery", "dra-driver-nvidia-gpu", "keda",
    "monitoring", "dynamo-system", "traefik-system", "metallb-system", "cert-manager", "gke-managed-system",
    "gmp-system", "amazon-cloudwatch",
})


def mode(fleet: Objects) -> str:
    """The fleet's choice (PerTeam unless its InferenceGateway says Default)."""
    for gateway in fleet.of("InferenceGateway"):
        value = (gateway.metadata.annotations or {}).get(ANNOTATION)
        if value:
            return value
    return PER_TEAM


def workload_namespace(namespace: str, chosen: str) -> str:
    """The namespace on workload clusters for objects of a team's `namespace`."""
    return SHARED_NAMESPACE if chosen == SHARED else namespace


BUILT_IN = frozenset({"default", "kube-system", "kube-public", "kube-node-lease"})


def owns_namespace(namespace: str) -> bool:
    """Whether the team's stack creates (and, on workload clusters, isolates) the namespace: never one every
    cluster has, such as `default`, which other workloads may share."""
    return namespace not in BUILT_IN
