"""The control-plane gateway (InferenceGateway): Traefik with the Gateway API provider, the
`traefik` GatewayClass and the Gateway `modelplane-system/modelplane` that every ModelService
route attaches to (Traefik, because it supports per-backend URL rewrites, which the fleet hop
needs). With `backend: Envoy` (an addition), the same Gateway on the host's Envoy Gateway, with
the fleet data plane (workloads/fleet_data_plane.py). The namespaces the ModelServices' objects live in are their teams' stacks' (`team-<ns>`), so
a team's first service never changes this platform-level stack.

One owner per object: on a cluster of the fleet, that cluster's serving stack (an earlier
stack) already created the `modelplane-system` namespace and the Gateway API CRDs, and MetalLB
where the gateway needs it, so the gateway creates none of them. Only on a separate control-plane
cluster (`standalone`), which no platform stack manages, does it create them itself.
"""

from __future__ import annotations

from typing import Mapping

import pulumi
import pulumi_kubernetes as k8s

from components import crds
from components.args import GatewayArgs
from components.gateway_resource import Gateway
from components.serving_stack import metallb, release
from components.versions import chart
from components.workload_objects import WorkloadObjects
from workloads import front_door_mtls
from workloads.ai_gateway import PROXY_SERVICE
from workloads.schemas import check

TYPE = "modelplane:fleet:Gateway"
NAMESPACE = "modelplane-system"
ENVOY_PROXY = "modelplane-fleet"  # backend Envoy: the fleet Gateway's own EnvoyProxy
ENVOY_SERVICE = PROXY_SERVICE  # ... and the load balancer Service it names


class FleetGateway(pulumi.ComponentResource):
    """Outputs: address, and under backend Envoy clientCACertificate (`client_ca`)."""

    def __init__(self, name: str, args: GatewayArgs, provider: k8s.Provider, versions: dict[str, str] | None = None,
                 standalone: bool = False, after: list | None = None, sources: Mapping[str, str] | None = None,
                 crd_provider: k8s.Provider | None = None, secrets: Mapping[str, str] | None = None,
                 opts: pulumi.ResourceOptions | None = None):
        """`after`: what must exist first in the same stack (the host's serving stack), waited for by every child.
        `sources`: where charts are fetched from (components/versions.py `located`). `crd_provider`: standalone,
        the adopting provider of the Gateway API CRDs (components/crds.py `installed`). `secrets`: the values of the
        front door's placeholder Secrets (a v0.5 gateway's callers), in memory (components/workload_objects.py)."""
        super().__init__(TYPE, name, None, opts)
        self.client_ca: pulumi.Output | None = None
        if args.backend == "Envoy":
            self._envoy(name, args, provider, standalone, list(after or []), secrets)
            return
        k8s_opts = pulumi.ResourceOptions(provider=provider, parent=self, depends_on=list(after or []))
        basics: list = list(after or [])
        if standalone:
            basics.append(k8s.core.v1.Namespace(f"{name}-system", metadata={"name": NAMESPACE}, opts=k8s_opts))
            basics.append(crds.installed(f"{name}-crds", crds.gateway_api(), crd_provider or provider, self,
                                         list(after or [])))
            if args.metallb_address_pool:
                basics += metallb(name, args.metallb_address_pool, provider, self, versions, list(after or []), sources)
        traefik = chart("traefik", {**(versions or {}), "traefik": args.traefik_version}, sources)
        self.traefik = release(f"{name}-traefik", traefik, {
            "providers": {"kubernetesGateway": {"enabled": True, "statusAddress": {"service": {
                "name": "traefik", "namespace": traefik.namespace}}},
                          "kubernetesIngress": {"enabled": False}, "kubernetesCRD": {"enabled": False}},
            "service": {"nameOverride": "traefik"},
            "gateway": {"enabled": False}, "gatewayClass": {"enabled": False},
        }, provider, self, basics)
        later = pulumi.ResourceOptions(provider=provider, parent=self, depends_on=[self.traefik, *basics])
        gateway_class = k8s.apiextensions.CustomResource(
            f"{name}-gateway-class", api_version="gateway.networking.k8s.io/v1", kind="GatewayClass",
            metadata={"name": "traefik"}, spec={"controllerName": "traefik.io/gateway-controller"}, opts=later)
        self.gateway = Gateway(
            f"{name}-gateway", metadata={"name": "modelplane", "namespace": NAMESPACE},
            spec={"gatewayClassName": "traefik", "listeners": [
                {"name": "web", "port": 8000, "protocol": "HTTP", "allowedRoutes": {"namespaces": {"from": "All"}}}]},
            wait_for_address=args.load_balancer or bool(args.metallb_address_pool),
            opts=pulumi.ResourceOptions(provider=provider, parent=self, depends_on=[gateway_class, self.traefik, *basics]))
        self.address = self.gateway.address
        self.aggregated_api = aggregated_api(name, args, provider, standalone, self)
        self.register_outputs({"address": self.address})


    def _envoy(self, name: str, args: GatewayArgs, provider: k8s.Provider, standalone: bool, after: list,
               secrets: Mapping[str, str] | None = None) -> None:
        """Backend Envoy: a second Gateway of the host's Envoy Gateway (its platform stack installed Envoy Gateway,
        the `envoy` GatewayClass, the namespace and, for per-team limits, the rate-limit store), with its own
        EnvoyProxy so that its load balancer Service has a name of its own (the class's EnvoyProxy names the
        workload gateway's), then the front door's access objects."""
        if standalone:
            raise pulumi.RunError(
                f"InferenceGateway/{args.name}: backend Envoy serves the front door with the Envoy Gateway a fleet "
                "cluster's platform stack installs, and modelplane:controlPlaneKubeconfig's cluster has none: host "
                "the gateway on an InferenceCluster (modelplane:controlPlaneCluster) or use backend Traefik")
        # a v0.5 gateway's EnvoyProxy and listeners are its own (workloads/ai_gateway.py: replicas, drain, usage
        # records; http beside https)
        proxy_object = {"apiVersion": "gateway.envoyproxy.io/v1alpha1", "kind": "EnvoyProxy",
                        "metadata": {"name": ENVOY_PROXY, "namespace": NAMESPACE},
                        "spec": args.proxy or {"provider": {"type": "Kubernetes", "kubernetes": {"envoyService": {
                            "name": ENVOY_SERVICE, "externalTrafficPolicy": "Cluster"}}}}}
        problems = [f"{o['kind']}/{o['metadata']['name']}: {p}" for o in [*args.front_door, proxy_object]
                    for p in check(o)]
        if problems:
            raise pulumi.RunError("the front door's access objects would be refused: " + "; ".join(problems))
        opts = pulumi.ResourceOptions(provider=provider, parent=self, depends_on=after)
        proxy = k8s.apiextensions.CustomResource(
            f"{name}-envoy-proxy", api_version=proxy_object["apiVersion"], kind="EnvoyProxy",
            metadata=proxy_object["metadata"], spec=proxy_object["spec"], opts=opts)
        self.gateway = Gateway(
            f"{name}-gateway", metadata={"name": "modelplane", "namespace": NAMESPACE},
            spec={"gatewayClassName": "envoy",
                  "infrastructure": {"parametersRef": {"group": "gateway.envoyproxy.io", "kind": "EnvoyProxy",
                                                       "name": ENVOY_PROXY}},
                  "listeners": args.listeners or [envoy_listener(args.tls_secret)]},
            wait_for_address=args.load_balancer or bool(args.metallb_address_pool),
            opts=pulumi.ResourceOptions(provider=provider, parent=self, depends_on=[*after, proxy]))
        self.address = self.gateway.address
        self.front_door = WorkloadObjects(f"{name}-front-door", args.front_door, provider, secrets=secrets,
                                          opts=pulumi.ResourceOptions(
            parent=self, depends_on=[self.gateway])) if args.front_door else None
        self.client_ca = client_ca(name, args, provider, self, after)
        self.aggregated_api = aggregated_api(name, args, provider, standalone, self)
        self.register_outputs({"address": self.address, "clientCACertificate": self.client_ca})


def client_ca(name: str, args: GatewayArgs, provider: k8s.Provider, parent: pulumi.Resource,
              after: list) -> pulumi.Output:
    """The front door's client CA and certificate (workloads/front_door_mtls.py), and the CA's certificate as
    trust-manager publishes it: read from its ConfigMap (public), never from the CA's Secret. The Bundle waits
    until it has written the ConfigMap; the read's id waits on the Bundle, so a preview that creates the Bundle
    skips the read (its id is unknown) instead of failing on a ConfigMap that does not exist yet."""
    wanted = front_door_mtls.gateway_ca_objects(args.name)
    problems = [f"{o['kind']}/{o['metadata']['name']}: {p}" for o in wanted for p in check(o)]
    if problems:
        raise pulumi.RunError("the front door's client CA objects would be refused: " + "; ".join(problems))
    opts = pulumi.ResourceOptions(provider=provider, parent=parent, depends_on=after)
    chain = WorkloadObjects(f"{name}-client-ca", [o for o in wanted if o["kind"] != "Bundle"], provider,
                            opts=pulumi.ResourceOptions(parent=parent, depends_on=after))
    bundle = next(o for o in wanted if o["kind"] == "Bundle")
    published = k8s.apiextensions.CustomResource(
        f"{name}-client-ca-bundle", api_version=bundle["apiVersion"], kind=bundle["kind"],
        metadata=bundle["metadata"], spec=bundle["spec"], opts=pulumi.ResourceOptions.merge(
            opts, pulumi.ResourceOptions(depends_on=[*after, chain])))
    config_map = k8s.core.v1.ConfigMap.get(
        f"{name}-client-ca-published",
        published.id.apply(lambda _: f"{front_door_mtls.NAMESPACE}/{front_door_mtls.CA}"),
        opts=pulumi.ResourceOptions(provider=provider, parent=parent, depends_on=[published]))
    return config_map.data.apply(lambda data: (data or {}).get(front_door_mtls.CA_KEY))


def envoy_listener(tls_secret: str | None) -> dict:
    """HTTP on 80, or, with a certificate, HTTPS on 443 alone: keys and tokens never in the clear."""
    listener: dict = {"name": "web", "port": 80, "protocol": "HTTP", "allowedRoutes": {"namespaces": {"from": "All"}}}
    if tls_secret:
        listener.update(name="websecure", port=443, protocol="HTTPS", tls={
            "mode": "Terminate", "certificateRefs": [{"group": "", "kind": "Secret", "name": tls_secret}]})
    return listener


def aggregated_api(name: str, args: GatewayArgs, provider: k8s.Provider, standalone: bool,
                   parent: pulumi.Resource) -> WorkloadObjects | None:
    """The portal as the cluster's `v1alpha1.modelplane.ai` APIService (workloads/aggregated_api.py), checked against
    its schemas first. Only on a fleet cluster: its platform stack installed the cert-manager and KEDA it uses."""
    from workloads.aggregated_api import objects

    try:
        wanted = objects(args.aggregated_api)
    except ValueError as exc:
        raise pulumi.RunError(f"InferenceGateway/{args.name}: {exc}") from None
    if not wanted:
        return None
    if standalone:
        raise pulumi.RunError(f"InferenceGateway/{args.name}: the aggregated API runs on a control-plane cluster of the "
                              "fleet (whose platform stack installs cert-manager and KEDA), not on "
                              "modelplane:controlPlaneKubeconfig's")
    problems = [f"{o['kind']}/{o['metadata']['name']}: {p}" for o in wanted for p in check(o)]
    if problems:
        raise pulumi.RunError("the aggregated API's objects would be refused: " + "; ".join(problems))
    return WorkloadObjects(f"{name}-aggregated-api", wanted, provider, opts=pulumi.ResourceOptions(parent=parent))
