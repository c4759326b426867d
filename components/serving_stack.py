"""The serving stack every workload cluster gets, and the cluster's own Gateway.

Helm releases (pinned in components/versions.py): cert-manager, Envoy Gateway, LeaderWorkerSet,
Node Feature Discovery, the NVIDIA DRA driver, KEDA, Prometheus, and the Dynamo platform only
where an NVIDIA pool could run it. The Gateway API and inference-extension CRDs come from the
bundled upstream files. Then the `envoy` GatewayClass and the Gateway
`modelplane-system/inference-gateway` that every replica's HTTPRoute attaches to.

Order, for create and (reversed) delete: the CRDs and releases wait for the cluster's GPU
pools; the Gateway waits for its CRDs and Envoy Gateway, so it is deleted before them.
"""

from __future__ import annotations

import pulumi
import pulumi_kubernetes as k8s

from components import crds
from components.args import ClusterArgs
from components.gateway_resource import Gateway
from components.versions import Chart, chart

TYPE = "modelplane:cluster:ServingStack"
SYSTEM_NAMESPACE = "modelplane-system"
GATEWAY_SERVICE = "modelplane-inference-gateway"  # a stable name for the gateway's load balancer Service
GPU_TOLERATION = {"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"}


def release_values(key: str, args: ClusterArgs) -> dict:
    """Chart values, per chart: the settings that make each add-on work for GPU inference."""
    if key == "cert-manager":
        return {"crds": {"enabled": True, "keep": False}}
    if key == "envoy-gateway":
        return {"config": {"envoyGateway": {"extensionApis": {"enableBackend": True}}}}
    if key == "node-feature-discovery":
        # GPU nodes are tainted; without this the PCI labels never appear and the DRA plugin never starts.
        return {"worker": {"tolerations": [GPU_TOLERATION]}}
    if key == "nvidia-dra-driver":
        values: dict = {"gpuResourcesEnabledOverride": True, "resources": {"computeDomains": {"enabled": False}},
                        "kubeletPlugin": {"tolerations": [GPU_TOLERATION]}}
        if args.nvidia_driver_root != "/":
            values["nvidiaDriverRoot"] = args.nvidia_driver_root
        return values
    if key == "prometheus":
        return {"fullnameOverride": "prometheus", "grafana": {"enabled": False}, "alertmanager": {"enabled": False},
                "prometheus": {"prometheusSpec": {"podMonitorSelectorNilUsesHelmValues": False,
                                                  "podMonitorNamespaceSelector": {}}}}
    return {}


def release(name: str, spec: Chart, values: dict, provider: k8s.Provider, parent: pulumi.Resource,
            depends_on: list) -> k8s.helm.v3.Release:
    repo = None if spec.oci else k8s.helm.v3.RepositoryOptsArgs(repo=spec.repo)
    return k8s.helm.v3.Release(
        name, name=f"mp-{spec.key}", chart=f"{spec.repo}/{spec.chart}" if spec.oci else spec.chart,
        version=spec.version, namespace=spec.namespace, create_namespace=True, repository_opts=repo,
        values=values, atomic=True, cleanup_on_fail=True,
        opts=pulumi.ResourceOptions(provider=provider, parent=parent, depends_on=depends_on))


class ServingStack(pulumi.ComponentResource):
    """Outputs: gateway_address."""

    def __init__(self, name: str, args: ClusterArgs, provider: k8s.Provider, depends_on: list | None = None,
                 versions: dict[str, str] | None = None, opts: pulumi.ResourceOptions | None = None):
        super().__init__(TYPE, name, None, opts)
        after = list(depends_on or [])
        k8s_opts = pulumi.ResourceOptions(provider=provider, parent=self, depends_on=after)
        self.namespace = k8s.core.v1.Namespace(f"{name}-system", metadata={"name": SYSTEM_NAMESPACE}, opts=k8s_opts)
        self.crds = k8s.yaml.v2.ConfigGroup(f"{name}-crds", objs=crds.gateway_api() + crds.inference_extension(),
                                            opts=k8s_opts)
        keys = ["cert-manager", "envoy-gateway", "lws", "node-feature-discovery", "nvidia-dra-driver", "keda", "prometheus"]
        if args.needs_dynamo:
            keys.append("dynamo")
        self.releases: dict[str, k8s.helm.v3.Release] = {}
        for key in keys:
            wait = after + [self.crds] + ([self.releases["cert-manager"]] if key != "cert-manager" else [])
            self.releases[key] = release(f"{name}-{key}", chart(key, versions), release_values(key, args),
                                         provider, self, wait)
        if args.source == "GKE":  # GKE admits system-critical pods only within a quota
            k8s.core.v1.ResourceQuota(
                f"{name}-dra-critical-pods",
                metadata={"name": "allow-critical-pods", "namespace": chart("nvidia-dra-driver", versions).namespace},
                spec={"hard": {"pods": "1000"}, "scopeSelector": {"matchExpressions": [{
                    "operator": "In", "scopeName": "PriorityClass",
                    "values": ["system-node-critical", "system-cluster-critical"]}]}},
                opts=pulumi.ResourceOptions(provider=provider, parent=self, depends_on=[self.releases["nvidia-dra-driver"]]))
        gateway_deps = [self.crds, self.releases["envoy-gateway"], self.namespace]
        envoy_ns = chart("envoy-gateway", versions).namespace
        proxy = k8s.apiextensions.CustomResource(
            f"{name}-envoy-proxy", api_version="gateway.envoyproxy.io/v1alpha1", kind="EnvoyProxy",
            metadata={"name": "inference-gateway", "namespace": envoy_ns},
            spec={"provider": {"type": "Kubernetes", "kubernetes": {"envoyService": {
                "name": GATEWAY_SERVICE, "externalTrafficPolicy": "Cluster"}}}},
            opts=pulumi.ResourceOptions(provider=provider, parent=self, depends_on=gateway_deps))
        self.gateway_class = k8s.apiextensions.CustomResource(
            f"{name}-gateway-class", api_version="gateway.networking.k8s.io/v1", kind="GatewayClass",
            metadata={"name": "envoy"},
            spec={"controllerName": "gateway.envoyproxy.io/gatewayclass-controller",
                  "parametersRef": {"group": "gateway.envoyproxy.io", "kind": "EnvoyProxy",
                                    "name": "inference-gateway", "namespace": envoy_ns}},
            opts=pulumi.ResourceOptions(provider=provider, parent=self, depends_on=gateway_deps + [proxy]))
        self.gateway = Gateway(
            f"{name}-gateway", metadata={"name": "inference-gateway", "namespace": SYSTEM_NAMESPACE},
            spec={"gatewayClassName": "envoy", "listeners": [
                {"name": "http", "port": 80, "protocol": "HTTP", "allowedRoutes": {"namespaces": {"from": "All"}}}]},
            opts=pulumi.ResourceOptions(provider=provider, parent=self, depends_on=gateway_deps + [self.gateway_class]))
        self.gateway_address = self.gateway.address
        self.register_outputs({"gatewayAddress": self.gateway_address})
