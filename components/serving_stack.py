"""The serving stack every workload cluster gets, and the cluster's own Gateway.

Installed in an order the API server accepts the first time (each step waits for what it uses):
1. the `modelplane-system` Namespace, the bundled Gateway API and inference-extension CRDs, the
   cluster's StorageClasses (after their CSI drivers), and on GKE the NVIDIA driver installer;
2. Helm releases pinned in components/versions.py: cert-manager; Envoy Gateway (its CRD chart
   first) configured to call the Envoy AI Gateway controller as its extension server, which is
   what lets a Gateway route to InferencePools; LeaderWorkerSet; Node Feature Discovery; the
   NVIDIA DRA driver (after the ResourceQuota GKE needs to admit its critical pods); KEDA;
   Prometheus; the Dynamo platform (with Grove, configured with the cluster's topology levels, and KAI; then, for
   WeightStreaming, the ModelExpress server: workloads/dynamo_platform.py) where a Dynamo-served replica is placed (or still applied) or
   the cluster's `spec.stack` is Dynamo (ClusterArgs.needs_dynamo); on EKS the
   cluster-autoscaler where a pool can grow; MetalLB where the cluster has no cloud load balancer;
3. the `envoy` GatewayClass and the Gateway `modelplane-system/inference-gateway` every replica's
   HTTPRoute attaches to: plain HTTP, and, once a front door's client CA is known, the mutually authenticated
   `fleet` listener, after the objects that make it refuse any other client (workloads/front_door_mtls.py). It
   waits for an address only where something can give it one.

Deletes run in reverse: the Gateway before its controller, releases before the pools. The bundled CRDs are shared
with every other user of the cluster: adopted when already there, and never deleted (components/crds.py).

On an Existing cluster whose platform team manages the add-ons (`spec.cluster.existing.addons: Verify`) none of
steps 1 and 2 is installed (no CRD, no chart, no namespace of a chart): only the project's own objects are made,
the `modelplane-system` Namespace, the `envoy` GatewayClass with its EnvoyProxy (in `modelplane-system`: no
namespace of the platform team's Envoy Gateway is assumed), the Gateway, its fleet listener's objects and, where
Dynamo serves, ModelExpress (the graphs' ClusterTopology is the platform team's Grove's, docs/platform.md). `up` has checked first that the cluster serves every API
they and the workloads placed there use (automation/planning/addons.py, automation/execution/session.py).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Mapping

import pulumi
import pulumi_kubernetes as k8s

from components import crds
from components.args import ClusterArgs
from components.gateway_resource import Gateway
from components.versions import MODEL_EXPRESS_IMAGE, RATE_LIMIT_STORE_IMAGE, Chart, chart
from workloads import dynamo_platform, front_door_mtls
from workloads.pods import GPU_NODE_TOLERATIONS
from workloads.schemas import check

TYPE = "modelplane:cluster:ServingStack"
SYSTEM_NAMESPACE = "modelplane-system"
GATEWAY_SERVICE = "modelplane-inference-gateway"  # a stable name for the gateway's load balancer Service
AI_GATEWAY_CONTROLLER = "ai-gateway-controller.envoy-ai-gateway-system.svc.cluster.local"
AI_GATEWAY_PORT = 1063
# Installing or upgrading a release waits for its pods; image pulls on fresh nodes take minutes.
RELEASE_TIMEOUT_SECONDS = 1200
RELEASE_TIMEOUTS = pulumi.CustomTimeouts(create="30m", update="30m", delete="20m")


@dataclass
class ClusterFacts:
    """What the cluster component tells the serving stack about the cluster it built (or adopted)."""

    storage_classes: list[dict] = field(default_factory=list)  # StorageClass manifests (values may be Outputs)
    storage_ready: list = field(default_factory=list)  # resources the StorageClasses need first (CSI drivers)
    storage_charts: dict[str, dict] = field(default_factory=dict)  # chart -> values: CSI drivers, before the classes
    load_balancer: bool = True  # a Service of type LoadBalancer gets an address from the cloud
    autoscaler: dict | None = None  # cluster-autoscaler values (EKS pools that can grow)
    gpu_driver_installer: bool = False  # GKE with DRA: the driver is installed by a DaemonSet, not by GKE


RATE_LIMIT_REDIS = "modelplane-rate-limit"  # the Valkey the host's Envoy Gateway counts global rate limits in


def rate_limit_url(namespace: str) -> str:
    return f"{RATE_LIMIT_REDIS}.{namespace}.svc.cluster.local:6379"


def envoy_gateway_values(rate_limit_namespace: str | None = None) -> dict:
    """Envoy Gateway with the Envoy AI Gateway controller as its extension server (InferencePool backends), and,
    on the cluster that hosts an Envoy fleet gateway with per-team limits, a Redis-protocol store for its global
    rate limits (without one Envoy Gateway refuses every global rate limit and answers the routes it targets
    with 500)."""
    values: dict = {
        "crds": {"enabled": False},
        "config": {"envoyGateway": {
            "extensionApis": {"enableBackend": True},
            "extensionManager": {
                "hooks": {"xdsTranslator": {
                    "translation": {kind: {"includeAll": True} for kind in ("listener", "route", "cluster", "secret")},
                    "post": ["Translation", "Cluster", "Route"]}},
                "service": {"fqdn": {"hostname": AI_GATEWAY_CONTROLLER, "port": AI_GATEWAY_PORT}},
                "backendResources": [{"group": "inference.networking.k8s.io", "kind": "InferencePool", "version": "v1"}],
            },
        }},
    }
    if rate_limit_namespace:
        values["config"]["envoyGateway"]["rateLimit"] = {
            "backend": {"type": "Redis", "redis": {"url": rate_limit_url(rate_limit_namespace)}}}
    return values


def rate_limit_store(name: str, namespace: str, provider: k8s.Provider, parent: pulumi.Resource,
                     after: list) -> list[pulumi.Resource]:
    """One Valkey (BSD-licensed, Redis protocol) for the fleet gateway's global rate-limit counters. Counters are
    windows of at most an hour: kept in memory, lost (limits start over) if the pod restarts."""
    labels = {"app.kubernetes.io/name": RATE_LIMIT_REDIS}
    opts = pulumi.ResourceOptions(provider=provider, parent=parent, depends_on=after)
    meta = {"name": RATE_LIMIT_REDIS, "namespace": namespace, "labels": labels}
    deployment = k8s.apps.v1.Deployment(f"{name}-rate-limit-store", metadata=meta, spec={
        "replicas": 1, "selector": {"matchLabels": labels},
        "template": {"metadata": {"labels": labels}, "spec": {"containers": [{
            "name": "valkey", "image": RATE_LIMIT_STORE_IMAGE, "args": ["--save", "", "--appendonly", "no"],
            "ports": [{"name": "redis", "containerPort": 6379}],
            "readinessProbe": {"tcpSocket": {"port": 6379}},
            "resources": {"requests": {"cpu": "100m", "memory": "128Mi"}, "limits": {"memory": "512Mi"}},
            "securityContext": {"runAsNonRoot": True, "runAsUser": 999, "allowPrivilegeEscalation": False}}]}}},
        opts=opts)
    service = k8s.core.v1.Service(f"{name}-rate-limit-store-service", metadata=meta, spec={
        "selector": labels, "ports": [{"name": "redis", "port": 6379, "targetPort": 6379}]}, opts=opts)
    # It has no password: only Envoy Gateway's rate-limit service (the pods it labels envoy-ratelimit) may reach
    # it, so no other pod can read or reset the counters.
    policy = k8s.networking.v1.NetworkPolicy(f"{name}-rate-limit-store-policy", metadata=meta, spec={
        "podSelector": {"matchLabels": labels}, "policyTypes": ["Ingress"],
        "ingress": [{"from": [{"podSelector": {"matchLabels": {"app.kubernetes.io/name": "envoy-ratelimit"}}}],
                     "ports": [{"protocol": "TCP", "port": 6379}]}]}, opts=opts)
    return [deployment, service, policy]


def release_values(key: str, args: ClusterArgs, facts: ClusterFacts | None = None, rate_limit: bool = False) -> dict:
    """Chart values, per chart: the settings that make each add-on work for GPU inference."""
    if key == "cert-manager":
        # its CRDs are templates: keep them on uninstall (helm.sh/resource-policy: keep), or removing the release
        # deletes every Certificate and Issuer in the cluster, other teams' too
        return {"crds": {"enabled": True, "keep": True}}
    if key == "trust-manager":  # its sources (the front door's CA) are read in the namespace they live in
        return {"app": {"trust": {"namespace": SYSTEM_NAMESPACE}}}
    if key == "envoy-gateway-crds":
        return {"crds": {"gatewayAPI": {"enabled": False}, "envoyGateway": {"enabled": True}}}
    if key == "envoy-gateway":
        return envoy_gateway_values(chart("envoy-gateway", None).namespace if rate_limit else None)
    if key == "node-feature-discovery":
        # GPU nodes are tainted; without this the PCI labels never appear and the DRA plugin never starts.
        return {"worker": {"tolerations": [dict(t) for t in GPU_NODE_TOLERATIONS]}}
    if key == "nvidia-dra-driver":
        values: dict = {"gpuResourcesEnabledOverride": True, "resources": {"computeDomains": {"enabled": False}},
                        "kubeletPlugin": {"tolerations": [dict(t) for t in GPU_NODE_TOLERATIONS]}}
        if args.nvidia_driver_root != "/":
            values["nvidiaDriverRoot"] = args.nvidia_driver_root
        return values
    if key == "prometheus":
        return {"fullnameOverride": "prometheus", "grafana": {"enabled": False}, "alertmanager": {"enabled": False},
                "prometheus": {"prometheusSpec": {"podMonitorSelectorNilUsesHelmValues": False,
                                                  "podMonitorNamespaceSelector": {}}}}
    if key == "traefik":
        return {}
    if key == "dynamo":
        return dynamo_platform.platform_values(args.model_express, [(level.domain, level.key) for level in args.topology])
    if key == "cluster-autoscaler":
        return dict((facts.autoscaler if facts else None) or {})
    if facts and key in facts.storage_charts:
        return dict(facts.storage_charts[key])
    return {}


def release(name: str, spec: Chart, values: dict, provider: k8s.Provider, parent: pulumi.Resource,
            depends_on: list, create_namespace: bool = True) -> k8s.helm.v3.Release:
    if spec.local:  # a chart on this machine (a mirror): no repository, and its own version
        repo, chart_ref = None, spec.local
    else:
        repo = None if spec.oci else k8s.helm.v3.RepositoryOptsArgs(repo=spec.repo)
        chart_ref = f"{spec.repo}/{spec.chart}" if spec.oci else spec.chart
    return k8s.helm.v3.Release(
        name, name=f"mp-{spec.key}", chart=chart_ref,
        version=spec.version, namespace=spec.namespace, create_namespace=create_namespace, repository_opts=repo,
        values=values, atomic=True, cleanup_on_fail=True, skip_crds=spec.skip_crds, timeout=RELEASE_TIMEOUT_SECONDS,
        opts=pulumi.ResourceOptions(provider=provider, parent=parent, depends_on=depends_on,
                                    custom_timeouts=RELEASE_TIMEOUTS))


def metallb(name: str, address_pool: str, provider: k8s.Provider, parent: pulumi.Resource,
            versions: dict | None, depends_on: list, sources: Mapping[str, str] | None = None) -> list[pulumi.Resource]:
    """MetalLB and its address pool: load balancer addresses where no cloud gives any."""
    spec = chart("metallb", versions, sources)
    installed = release(f"{name}-metallb", spec, {}, provider, parent, depends_on)
    opts = pulumi.ResourceOptions(provider=provider, parent=parent, depends_on=[installed])
    pool = k8s.apiextensions.CustomResource(
        f"{name}-address-pool", api_version="metallb.io/v1beta1", kind="IPAddressPool",
        metadata={"name": "modelplane", "namespace": spec.namespace}, spec={"addresses": [address_pool]}, opts=opts)
    l2 = k8s.apiextensions.CustomResource(
        f"{name}-l2", api_version="metallb.io/v1beta1", kind="L2Advertisement",
        metadata={"name": "modelplane", "namespace": spec.namespace}, spec={"ipAddressPools": ["modelplane"]}, opts=opts)
    return [installed, pool, l2]


def gke_driver_installer(name: str, provider: k8s.Provider, parent: pulumi.Resource, depends_on: list):
    """GKE's DRA guide: GKE does not install the driver on DRA pools; this DaemonSet does (COS, preloaded installer)."""
    host = "/home/kubernetes/bin/nvidia"
    return k8s.apps.v1.DaemonSet(
        f"{name}-nvidia-driver-installer",
        metadata={"name": "nvidia-driver-installer", "namespace": "kube-system",
                  "labels": {"k8s-app": "nvidia-driver-installer"}},
        spec={
            "selector": {"matchLabels": {"k8s-app": "nvidia-driver-installer"}},
            "updateStrategy": {"type": "RollingUpdate"},
            "template": {
                "metadata": {"labels": {"k8s-app": "nvidia-driver-installer"}},
                "spec": {
                    "priorityClassName": "system-node-critical",
                    "affinity": {"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": [
                        {"matchExpressions": [{"key": "cloud.google.com/gke-accelerator", "operator": "Exists"}]}]}}},
                    "tolerations": [{"operator": "Exists"}],
                    "hostNetwork": True, "hostPID": True,
                    "volumes": [{"name": "dev", "hostPath": {"path": "/dev"}},
                                {"name": "nvidia-install-dir-host", "hostPath": {"path": host}},
                                {"name": "root-mount", "hostPath": {"path": "/"}},
                                {"name": "cos-tools", "hostPath": {"path": "/var/lib/cos-tools"}}],
                    "initContainers": [{
                        "name": "nvidia-driver-installer", "image": "cos-nvidia-installer:fixed",
                        "imagePullPolicy": "Never",
                        "command": ["/cos-gpu-installer", "install", "--version=latest"],
                        "securityContext": {"privileged": True},
                        "resources": {"requests": {"cpu": "150m"}},
                        "env": [{"name": "NVIDIA_INSTALL_DIR_HOST", "value": host},
                                {"name": "NVIDIA_INSTALL_DIR_CONTAINER", "value": "/usr/local/nvidia"},
                                {"name": "ROOT_MOUNT_DIR", "value": "/root"}],
                        "volumeMounts": [{"name": "nvidia-install-dir-host", "mountPath": "/usr/local/nvidia"},
                                         {"name": "dev", "mountPath": "/dev"},
                                         {"name": "root-mount", "mountPath": "/root"},
                                         {"name": "cos-tools", "mountPath": "/build/cos-tools"}],
                    }],
                    "containers": [{"name": "pause", "image": "registry.k8s.io/pause:3.10"}],
                },
            },
        },
        opts=pulumi.ResourceOptions(provider=provider, parent=parent, depends_on=depends_on))


class ServingStack(pulumi.ComponentResource):
    """Outputs: gateway_address."""

    def __init__(self, name: str, args: ClusterArgs, provider: k8s.Provider, depends_on: list | None = None,
                 versions: dict[str, str] | None = None, facts: ClusterFacts | None = None,
                 metallb_pool: str | None = None, rate_limit: bool = False, trust_manager: bool = False,
                 client_cas: tuple[str, ...] = (), sources: Mapping[str, str] | None = None,
                 crd_provider: k8s.Provider | None = None, opts: pulumi.ResourceOptions | None = None):
        """`rate_limit`: this cluster hosts an Envoy fleet gateway with per-team limits (its Envoy Gateway needs a
        rate-limit store). `trust_manager`: it hosts an Envoy front door, whose client CA trust-manager publishes.
        `client_cas`: the front doors' client CAs (PEM) its fleet listener accepts; none: no fleet listener.
        `sources`: where charts are fetched from (components/versions.py `located`).
        `crd_provider`: the cluster's adopting provider for the shared CRDs (components/crds.py `installed`)."""
        super().__init__(TYPE, name, None, opts)
        facts = facts or ClusterFacts()
        after = list(depends_on or [])
        k8s_opts = pulumi.ResourceOptions(provider=provider, parent=self, depends_on=after)
        self.namespace = k8s.core.v1.Namespace(f"{name}-system", metadata={"name": SYSTEM_NAMESPACE}, opts=k8s_opts)
        self.releases: dict[str, k8s.helm.v3.Release] = {}
        if args.verifies_addons:  # the cluster's platform team installed them; `up` checked they are served
            self._gateway(name, args, provider, [self.namespace], client_cas, SYSTEM_NAMESPACE, [self.namespace],
                          wait_for_address=facts.load_balancer)
            if args.needs_dynamo:
                self._dynamo(name, args, provider, self.namespace)
            self.register_outputs({"gatewayAddress": self.gateway_address})
            return
        self.crds = crds.installed(f"{name}-crds", crds.gateway_api() + crds.inference_extension(),
                                   crd_provider or provider, self, after)

        def install(key: str, wait: list, create_namespace: bool = True) -> k8s.helm.v3.Release:
            self.releases[key] = release(f"{name}-{key}", chart(key, versions, sources), release_values(key, args, facts, rate_limit),
                                         provider, self, after + wait, create_namespace)
            return self.releases[key]

        drivers = [install(key, [], create_namespace=False) for key in facts.storage_charts]
        self.storage_classes = [
            k8s.storage.v1.StorageClass(f"{name}-{sc['metadata']['name']}", **sc, opts=pulumi.ResourceOptions(
                provider=provider, parent=self, depends_on=after + list(facts.storage_ready) + drivers))
            for sc in facts.storage_classes]

        cert_manager = install("cert-manager", [])
        envoy_crds = install("envoy-gateway-crds", [self.crds])
        ai_crds = install("ai-gateway-crds", [self.crds])
        envoy = install("envoy-gateway", [envoy_crds, ai_crds, cert_manager])
        install("ai-gateway", [envoy, ai_crds])
        if trust_manager:
            install("trust-manager", [cert_manager, self.namespace])
        if rate_limit:  # in the namespace the Envoy Gateway release created
            rate_limit_store(name, chart("envoy-gateway", versions).namespace, provider, self, after + [envoy])
        install("lws", [cert_manager])
        install("node-feature-discovery", [])
        dra_wait: list = [self._dra_namespace(name, args, provider, versions, after)]
        if facts.gpu_driver_installer:
            dra_wait.append(gke_driver_installer(name, provider, self, after))
        install("nvidia-dra-driver", dra_wait, create_namespace=False)
        install("keda", [cert_manager])
        install("prometheus", [])
        if args.needs_dynamo:
            # NATS claims a volume from the default StorageClass; the chart's crds/ install the CRDs
            self._dynamo(name, args, provider, install("dynamo", [*self.storage_classes]))
        if facts.autoscaler is not None:
            install("cluster-autoscaler", [])
        lb_ready: list = []
        if metallb_pool:
            lb_ready = metallb(name, metallb_pool, provider, self, versions, after, sources)

        gateway_deps = [self.crds, envoy, envoy_crds, self.namespace, self.releases["ai-gateway"]]
        # Without a cloud load balancer or MetalLB nothing gives the Gateway an address: do not wait for one.
        self._gateway(name, args, provider, gateway_deps, client_cas,
                      chart("envoy-gateway", versions).namespace, [cert_manager, envoy_crds, self.namespace],
                      lb_ready, wait_for_address=facts.load_balancer or bool(metallb_pool))
        self.register_outputs({"gatewayAddress": self.gateway_address})

    def _gateway(self, name: str, args: ClusterArgs, provider: k8s.Provider, gateway_deps: list, client_cas: tuple[str, ...], proxy_namespace: str, listener_after: list,
                 lb_ready: list | None = None, wait_for_address: bool = True) -> None:
        """The `envoy` GatewayClass with its EnvoyProxy (in `proxy_namespace`), the fleet listener's objects and the
        Gateway every replica's HTTPRoute attaches to, after `gateway_deps` (its CRDs and controllers)."""
        proxy = k8s.apiextensions.CustomResource(
            f"{name}-envoy-proxy", api_version="gateway.envoyproxy.io/v1alpha1", kind="EnvoyProxy",
            metadata={"name": "inference-gateway", "namespace": proxy_namespace},
            spec={"provider": {"type": "Kubernetes", "kubernetes": {"envoyService": {
                "name": GATEWAY_SERVICE, "externalTrafficPolicy": "Cluster"}}}},
            opts=pulumi.ResourceOptions(provider=provider, parent=self, depends_on=gateway_deps))
        self.gateway_class = k8s.apiextensions.CustomResource(
            f"{name}-gateway-class", api_version="gateway.networking.k8s.io/v1", kind="GatewayClass",
            metadata={"name": "envoy"},
            spec={"controllerName": "gateway.envoyproxy.io/gatewayclass-controller",
                  "parametersRef": {"group": "gateway.envoyproxy.io", "kind": "EnvoyProxy",
                                    "name": "inference-gateway", "namespace": proxy_namespace}},
            opts=pulumi.ResourceOptions(provider=provider, parent=self, depends_on=gateway_deps + [proxy]))
        fleet_listener = self._fleet_listener(name, args, provider, client_cas, listener_after)
        self.gateway = Gateway(
            f"{name}-gateway", metadata={"name": "inference-gateway", "namespace": SYSTEM_NAMESPACE},
            spec={"gatewayClassName": "envoy", "listeners": front_door_mtls.gateway_listeners(client_cas)},
            wait_for_address=wait_for_address,
            opts=pulumi.ResourceOptions(provider=provider, parent=self, depends_on=gateway_deps + [
                self.gateway_class] + list(lb_ready or []) + fleet_listener))
        self.gateway_address = self.gateway.address

    def _fleet_listener(self, name: str, args: ClusterArgs, provider: k8s.Provider, client_cas: tuple[str, ...],
                        after: list) -> list[pulumi.Resource]:
        """What the fleet listener needs (workloads/front_door_mtls.py), checked against its schemas, made before
        the Gateway has the listener, so the listener never serves a client the policy has not checked."""
        listener = front_door_mtls.cluster_listener_objects(client_cas)
        problems = [f"{o['kind']}/{o['metadata']['name']}: {p}" for o in listener for p in check(o)]
        if problems:
            raise pulumi.RunError(f"InferenceCluster/{args.name}: the fleet listener's objects would be refused: "
                                  + "; ".join(problems))
        opts = pulumi.ResourceOptions(provider=provider, parent=self, depends_on=after)
        made: list[pulumi.Resource] = []
        for o in listener:  # each after its namespace, CRDs and controllers (and the Issuer before its Certificate)
            label = f"{name}-{o['metadata']['name']}"
            made.append(k8s.core.v1.ConfigMap(label, metadata=o["metadata"], data=o["data"], opts=opts)
                        if o["kind"] == "ConfigMap" else k8s.apiextensions.CustomResource(
                            label, api_version=o["apiVersion"], kind=o["kind"], metadata=o["metadata"], spec=o["spec"],
                            opts=pulumi.ResourceOptions.merge(opts, pulumi.ResourceOptions(depends_on=[*after, *made]))))
        return made

    def _dynamo(self, name: str, args: ClusterArgs, provider: k8s.Provider, platform: pulumi.Resource) -> None:
        """After the Dynamo platform (`platform`: its release, or on a Verify cluster the namespace, the platform
        team's Dynamo being there already): ModelExpress where it runs. The ClusterTopology the graphs name is
        Grove's own, made from the release's values (workloads/dynamo_platform.py)."""
        opts = pulumi.ResourceOptions(provider=provider, parent=self, depends_on=[platform])
        if args.model_express:
            deployment, service = dynamo_platform.model_express_objects(MODEL_EXPRESS_IMAGE)
            k8s.apps.v1.Deployment(f"{name}-model-express", metadata=deployment["metadata"],
                                   spec=deployment["spec"], opts=opts)
            k8s.core.v1.Service(f"{name}-model-express", metadata=service["metadata"], spec=service["spec"],
                                opts=opts)

    def _dra_namespace(self, name: str, args: ClusterArgs, provider: k8s.Provider, versions, after: list):
        """The DRA driver's namespace, created here so that GKE's quota for critical pods exists before the release."""
        namespace = chart("nvidia-dra-driver", versions).namespace
        created = k8s.core.v1.Namespace(f"{name}-dra-namespace", metadata={"name": namespace},
                                        opts=pulumi.ResourceOptions(provider=provider, parent=self, depends_on=after))
        if args.source != "GKE":
            return created
        # GKE admits system-node-critical / system-cluster-critical pods outside kube-system only within such a quota.
        return k8s.core.v1.ResourceQuota(
            f"{name}-dra-critical-pods",
            metadata={"name": "allow-critical-pods", "namespace": namespace},
            spec={"hard": {"pods": "1000"}, "scopeSelector": {"matchExpressions": [{
                "operator": "In", "scopeName": "PriorityClass",
                "values": ["system-node-critical", "system-cluster-critical"]}]}},
            opts=pulumi.ResourceOptions(provider=provider, parent=self, depends_on=[created]))
