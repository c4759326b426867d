"""The control-plane gateway (InferenceGateway): Traefik with the Gateway API provider, the
`traefik` GatewayClass and the Gateway `modelplane-system/modelplane` that every ModelService
route attaches to (Traefik, because it supports per-backend URL rewrites, which the fleet hop
needs). MetalLB gives it an address where no cloud load balancer exists.
"""

from __future__ import annotations

import pulumi
import pulumi_kubernetes as k8s

from components import crds
from components.args import GatewayArgs
from components.gateway_resource import Gateway
from components.serving_stack import release
from components.versions import chart

TYPE = "modelplane:fleet:Gateway"
NAMESPACE = "modelplane-system"


class FleetGateway(pulumi.ComponentResource):
    """Outputs: address."""

    def __init__(self, name: str, args: GatewayArgs, provider: k8s.Provider, versions: dict[str, str] | None = None,
                 opts: pulumi.ResourceOptions | None = None):
        super().__init__(TYPE, name, None, opts)
        k8s_opts = pulumi.ResourceOptions(provider=provider, parent=self)
        namespace = k8s.core.v1.Namespace(f"{name}-system", metadata={"name": NAMESPACE}, opts=k8s_opts)
        self.crds = k8s.yaml.v2.ConfigGroup(f"{name}-crds", objs=crds.gateway_api(), opts=k8s_opts)
        traefik = chart("traefik", {**(versions or {}), "traefik": args.traefik_version})
        deps: list = [self.crds]
        if args.metallb_address_pool:
            metallb = release(f"{name}-metallb", chart("metallb", versions), {}, provider, self, [])
            pool_opts = pulumi.ResourceOptions(provider=provider, parent=self, depends_on=[metallb])
            k8s.apiextensions.CustomResource(
                f"{name}-address-pool", api_version="metallb.io/v1beta1", kind="IPAddressPool",
                metadata={"name": "modelplane", "namespace": chart("metallb", versions).namespace},
                spec={"addresses": [args.metallb_address_pool]}, opts=pool_opts)
            k8s.apiextensions.CustomResource(
                f"{name}-l2", api_version="metallb.io/v1beta1", kind="L2Advertisement",
                metadata={"name": "modelplane", "namespace": chart("metallb", versions).namespace},
                spec={"ipAddressPools": ["modelplane"]}, opts=pool_opts)
            deps.append(metallb)
        self.traefik = release(f"{name}-traefik", traefik, {
            "providers": {"kubernetesGateway": {"enabled": True, "statusAddress": {"service": {
                "name": "traefik", "namespace": traefik.namespace}}},
                          "kubernetesIngress": {"enabled": False}},
            "service": {"nameOverride": "traefik"},
            "gateway": {"enabled": False}, "gatewayClass": {"enabled": False},
        }, provider, self, deps)
        after = pulumi.ResourceOptions(provider=provider, parent=self, depends_on=[self.traefik, self.crds, namespace])
        gateway_class = k8s.apiextensions.CustomResource(
            f"{name}-gateway-class", api_version="gateway.networking.k8s.io/v1", kind="GatewayClass",
            metadata={"name": "traefik"}, spec={"controllerName": "traefik.io/gateway-controller"}, opts=after)
        self.gateway = Gateway(
            f"{name}-gateway", metadata={"name": "modelplane", "namespace": NAMESPACE},
            spec={"gatewayClassName": "traefik", "listeners": [
                {"name": "web", "port": 8000, "protocol": "HTTP", "allowedRoutes": {"namespaces": {"from": "All"}}}]},
            opts=pulumi.ResourceOptions(provider=provider, parent=self, depends_on=[gateway_class, self.traefik]))
        self.address = self.gateway.address
        self.register_outputs({"address": self.address})
