"""A team's namespace on one workload cluster: the Namespace, a default-deny NetworkPolicy, a ResourceQuota.

Owned by the team's stack (`team-<namespace>`), which runs before the team's model and cache stacks on every
cluster they use, so one stack creates the namespace and the quota is raised before replicas need it.

The NetworkPolicy admits only what serving needs: the cluster gateway's proxies (Envoy Gateway runs them in
its own namespace), the team's replica pods among themselves (the endpoint picker scores engine pods;
multi-node engines and prefill/decode pairs talk to each other) and the metrics scraper autoscaling reads.
The ResourceQuota allows the devices the plan gives the team on the cluster, per DRA device class
(`<class>.deviceclass.resource.k8s.io/devices`, counted on ResourceClaims), at each replica's autoscaling
maximum, plus the one-in-four surge pods a plain Deployment's rolling update creates.
"""

from __future__ import annotations

import math
from collections import Counter

from fleet.plan import PlacedReplica

GATEWAY_PROXY_NAMESPACE = "envoy-gateway-system"  # components/versions.py: the envoy-gateway chart's namespace
METRICS_NAMESPACE = "monitoring"  # components/versions.py: the kube-prometheus-stack chart's namespace
NAMESPACE_LABEL = "modelplane.ai/namespace"
ROLLING_SURGE = 0.25  # a Deployment's default maxSurge


def replica_devices(placed: PlacedReplica) -> Counter[str]:
    """Devices per DRA device class one placed replica may claim at once (autoscaled to its maximum, rolling)."""
    shapes = {e.name: e for e in placed.engines}
    backends = {engine: backend for engine, backend, _ in placed.backends}
    out: Counter[str] = Counter()
    for engine in placed.placement.engines:
        shape = shapes[engine.engine]
        surge = math.ceil(shape.copies * ROLLING_SURGE) if backends.get(engine.engine) == "native" else 0
        for member, member_shape in zip(engine.members, shape.members):
            for _, device_class, count in member.devices:
                out[device_class] += (shape.copies + surge) * member_shape.pods * count
    return out


def quota_key(device_class: str) -> str:
    return f"{device_class}.deviceclass.resource.k8s.io/devices"


def control_plane_namespace(team: str) -> dict:
    """The namespace of the team's ModelService routes and backends on the control-plane cluster."""
    return {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": team, "labels": {NAMESPACE_LABEL: team}}}


def team_objects(team: str, namespace: str, devices: Counter[str]) -> list[dict]:
    """The team's isolation on one cluster, in its workload namespace `namespace`."""
    labels = {NAMESPACE_LABEL: team}
    objects: list[dict] = [
        {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": namespace, "labels": dict(labels)}},
        {"apiVersion": "networking.k8s.io/v1", "kind": "NetworkPolicy",
         "metadata": {"name": "modelplane-default-deny", "namespace": namespace, "labels": dict(labels)},
         "spec": {"podSelector": {}, "policyTypes": ["Ingress"], "ingress": [
             {"from": [{"namespaceSelector": {"matchLabels": {
                 "kubernetes.io/metadata.name": GATEWAY_PROXY_NAMESPACE}}}]},
             {"from": [{"podSelector": {"matchExpressions": [
                 {"key": "modelplane.ai/replica", "operator": "Exists"}]}}]},
             {"from": [{"namespaceSelector": {"matchLabels": {"kubernetes.io/metadata.name": METRICS_NAMESPACE}}}]},
         ]}},
    ]
    if devices:
        objects.append({
            "apiVersion": "v1", "kind": "ResourceQuota",
            "metadata": {"name": "modelplane-devices", "namespace": namespace, "labels": dict(labels)},
            "spec": {"hard": {quota_key(cls): str(count) for cls, count in sorted(devices.items())}},
        })
    return objects
