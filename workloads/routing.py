"""Routing, both hops, on Gateway API.

Workload cluster (per replica): an HTTPRoute on the cluster's Gateway
`modelplane-system/inference-gateway` matching `/<ns>/<replica>/`, rewritten to `/`, with no
request timeout, to the replica's InferencePool; under an Envoy fleet gateway instead, one matching the
replica's fleet Host, `<replica>.<ns>.fleet.modelplane.internal`, at any path, on the Gateway's mutually
authenticated `fleet` listener alone (workloads/front_door_mtls.py). The InferencePool selects the replica's
serving pods and asks its endpoint picker (EPP) which pod takes each request. A
Dynamo-served replica routes to its graph's frontend instead (Dynamo routes inside).
"""

from __future__ import annotations

import hashlib
from functools import lru_cache

from fleet.names import suffixed
from workloads.backends import dynamo
from workloads.context import ReplicaContext
from workloads.front_door_mtls import CLUSTER_GATEWAY, fleet_parent_ref
from workloads.pods import ENGINE_PORT
from workloads.versions import EPP_IMAGE
from workloads.yamlio import dump_fast

WORKLOAD_GATEWAY = CLUSTER_GATEWAY
EPP_PORT, EPP_HEALTH_PORT, EPP_METRICS_PORT = 9002, 9003, 9090
DEFAULT_BLOCK_SIZE = 16
FLEET_HOST_SUFFIX = "fleet.modelplane.internal"


def pool_name(replica: str) -> str:
    return suffixed(replica, "pool")


def epp_name(replica: str) -> str:
    return suffixed(replica, "epp")


def block_size(ctx: ReplicaContext) -> int:
    """The KV block size the prefix-cache scorer assumes: the engine's --block-size/--page-size if given."""
    engine = ctx.engine("Decode") if ctx.mode == "PrefillDecode" else ctx.engines[0]
    args = list(engine.members[0].spec.template.spec.containers[0].args or [])
    for i, arg in enumerate(args):
        for flag in ("--block-size", "--page-size"):
            value = arg.split("=", 1)[1] if arg.startswith(flag + "=") else (
                args[i + 1] if arg == flag and i + 1 < len(args) else None)
            if value is not None:
                return int(value) if value.isdigit() else DEFAULT_BLOCK_SIZE
    return DEFAULT_BLOCK_SIZE


def epp_config(ctx: ReplicaContext) -> str:
    return _epp_config(ctx.mode, block_size(ctx))


@lru_cache(maxsize=256)
def _epp_config(mode: str, block: int) -> str:
    """The endpoint picker's config: the same text for every replica of a mode and block size."""
    scorers = [{"pluginRef": "prefix-cache-scorer", "weight": 2}, {"pluginRef": "queue-scorer", "weight": 1}]
    plugins = [
        {"type": "approx-prefix-cache-producer", "parameters": {
            "autoTune": False, "blockSizeTokens": block, "maxPrefixBlocksToMatch": 256,
            "lruCapacityPerServer": 31250}},
        {"type": "prefix-cache-scorer"}, {"type": "queue-scorer"}, {"type": "max-score-picker"},
    ]
    if mode == "PrefillDecode":
        plugins += [{"type": "disagg-headers-handler"}, {"type": "prefill-filter"}, {"type": "decode-filter"},
                    {"type": "prefix-based-pd-decider", "parameters": {"nonCachedTokens": 16}},
                    {"type": "disagg-profile-handler", "parameters": {"deciders": {"prefill": "prefix-based-pd-decider"}}}]
        profiles = [{"name": phase, "plugins": [{"pluginRef": f"{phase}-filter"}, {"pluginRef": "max-score-picker"}, *scorers]}
                    for phase in ("prefill", "decode")]
    else:
        profiles = [{"name": "default", "plugins": [{"pluginRef": "max-score-picker"}, *scorers]}]
    config = {"apiVersion": "llm-d.ai/v1alpha1", "kind": "EndpointPickerConfig", "plugins": plugins,
              "schedulingProfiles": profiles}
    return dump_fast(config)


def _meta(ctx: ReplicaContext, name: str, labels: dict) -> dict:
    return {"name": name, "namespace": ctx.workload_namespace, "labels": dict(labels)}


def endpoint_picker(ctx: ReplicaContext) -> list[dict]:
    name, pool = epp_name(ctx.name), pool_name(ctx.name)
    labels = {**ctx.labels, "app": name}
    config = epp_config(ctx)
    checksum = hashlib.sha256(config.encode()).hexdigest()
    return [
        {"apiVersion": "v1", "kind": "ServiceAccount", "metadata": _meta(ctx, name, labels)},
        {"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "Role", "metadata": _meta(ctx, name, labels), "rules": [
            {"apiGroups": [""], "resources": ["pods"], "verbs": ["get", "watch", "list"]},
            {"apiGroups": ["inference.networking.k8s.io"], "resources": ["inferencepools"], "verbs": ["get", "watch", "list"]},
            {"apiGroups": ["inference.networking.x-k8s.io", "llm-d.ai"],
             "resources": ["inferenceobjectives", "inferencemodelrewrites"], "verbs": ["get", "watch", "list"]},
        ]},
        {"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "RoleBinding", "metadata": _meta(ctx, name, labels),
         "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "Role", "name": name},
         "subjects": [{"kind": "ServiceAccount", "name": name, "namespace": ctx.workload_namespace}]},
        {"apiVersion": "v1", "kind": "ConfigMap", "metadata": _meta(ctx, name, labels), "data": {"epp-config.yaml": config}},
        {"apiVersion": "apps/v1", "kind": "Deployment", "metadata": _meta(ctx, name, labels), "spec": {
            "replicas": 1, "strategy": {"type": "Recreate"},  # prefix-cache state lives in memory: one active picker
            "selector": {"matchLabels": {"app": name}},
            "template": {
                "metadata": {"labels": labels, "annotations": {"modelplane.ai/epp-config-checksum": checksum}},
                "spec": {
                    "serviceAccountName": name, "terminationGracePeriodSeconds": 130,
                    "containers": [{
                        "name": "epp", "image": EPP_IMAGE,
                        "args": [f"--pool-name={pool}", f"--pool-namespace={ctx.workload_namespace}",
                                 "--pool-group=inference.networking.k8s.io", "--config-file=/config/epp-config.yaml",
                                 f"--grpc-port={EPP_PORT}", f"--grpc-health-port={EPP_HEALTH_PORT}", "--zap-encoder=json"],
                        "ports": [{"name": "grpc", "containerPort": EPP_PORT}, {"name": "grpc-health", "containerPort": EPP_HEALTH_PORT},
                                  {"name": "metrics", "containerPort": EPP_METRICS_PORT}],
                        "readinessProbe": {"grpc": {"port": EPP_HEALTH_PORT, "service": "inference-extension"}, "periodSeconds": 2},
                        "livenessProbe": {"grpc": {"port": EPP_HEALTH_PORT, "service": "inference-extension"}, "periodSeconds": 10},
                        "env": [{"name": "NAMESPACE", "valueFrom": {"fieldRef": {"fieldPath": "metadata.namespace"}}},
                                {"name": "POD_NAME", "valueFrom": {"fieldRef": {"fieldPath": "metadata.name"}}}],
                        "volumeMounts": [{"name": "config", "mountPath": "/config"}],
                    }],
                    "volumes": [{"name": "config", "configMap": {"name": name}}],
                },
            },
        }},
        {"apiVersion": "v1", "kind": "Service", "metadata": _meta(ctx, name, labels), "spec": {
            "selector": {"app": name},
            "ports": [{"name": "grpc-ext-proc", "port": EPP_PORT, "targetPort": EPP_PORT, "protocol": "TCP",
                       "appProtocol": "kubernetes.io/h2c"},
                      {"name": "http-metrics", "port": EPP_METRICS_PORT, "targetPort": EPP_METRICS_PORT, "protocol": "TCP"}],
        }},
    ]


def inference_pool(ctx: ReplicaContext) -> dict:
    return {
        "apiVersion": "inference.networking.k8s.io/v1", "kind": "InferencePool",
        "metadata": _meta(ctx, pool_name(ctx.name), ctx.labels),
        "spec": {"selector": {"matchLabels": {"modelplane.ai/serving": ctx.name}},
                 "targetPorts": [{"number": ENGINE_PORT}],
                 "endpointPickerRef": {"name": epp_name(ctx.name), "port": {"number": EPP_PORT}, "failureMode": "FailOpen"}},
    }


def replica_path(namespace: str, replica: str) -> str:
    return f"/{namespace}/{replica}/"


def workload_route(ctx: ReplicaContext, backend_ref: dict) -> dict:
    return {
        "apiVersion": "gateway.networking.k8s.io/v1", "kind": "HTTPRoute",
        "metadata": _meta(ctx, ctx.name, ctx.labels),
        "spec": {
            "parentRefs": [dict(WORKLOAD_GATEWAY)],
            "rules": [{
                "matches": [{"path": {"type": "PathPrefix", "value": replica_path(ctx.namespace, ctx.name)}}],
                "filters": [{"type": "URLRewrite", "urlRewrite": {"path": {"type": "ReplacePrefixMatch", "replacePrefixMatch": "/"}}}],
                "backendRefs": [backend_ref],
                "timeouts": {"request": "0s"},  # generations stream for minutes: no request timeout
            }],
        },
    }


def fleet_host(namespace: str, replica: str) -> str:
    """The Host the fleet gateway's requests for this replica carry under backend Envoy
    (workloads/fleet_data_plane.py `endpoint_host`), which cannot rewrite the path per replica."""
    return f"{replica}.{namespace}.{FLEET_HOST_SUFFIX}"


def fleet_host_route(ctx: ReplicaContext, backend_ref: dict) -> dict:
    """The replica by its fleet Host, at any path: the fleet gateway's requests (already rewritten to `/`). On the
    Gateway's fleet listener alone, which serves only clients with a front door's certificate
    (workloads/front_door_mtls.py): while that listener does not exist, the route attaches nowhere."""
    return {
        "apiVersion": "gateway.networking.k8s.io/v1", "kind": "HTTPRoute",
        "metadata": _meta(ctx, suffixed(ctx.name, "fleet"), ctx.labels),
        "spec": {
            "parentRefs": [fleet_parent_ref()],
            "hostnames": [fleet_host(ctx.namespace, ctx.name)],
            "rules": [{"matches": [{"path": {"type": "PathPrefix", "value": "/"}}], "backendRefs": [backend_ref],
                       "timeouts": {"request": "0s"}}],
        },
    }


def replica_routes(ctx: ReplicaContext, backend_ref: dict) -> list[dict]:
    """Under an Envoy front door, the fleet Host route alone (on the mutually authenticated listener): a path
    route on the plain listener would let anyone who reaches the cluster gateway walk around the front door's
    keys and limits. Otherwise (a Traefik front door, which authenticates nobody, or none) the path route."""
    return [fleet_host_route(ctx, backend_ref)] if ctx.fleet_host else [workload_route(ctx, backend_ref)]


def replica_surface(ctx: ReplicaContext) -> list[dict]:
    """The replica's routing objects on its workload cluster."""
    if all(e.backend == "dynamo" for e in ctx.engines):
        service, port = dynamo.frontend_service(ctx)
        return replica_routes(ctx, {"name": service, "port": port})
    pool = inference_pool(ctx)
    ref = {"group": "inference.networking.k8s.io", "kind": "InferencePool", "name": pool["metadata"]["name"]}
    return [pool, *endpoint_picker(ctx), *replica_routes(ctx, ref)]
