"""The platform program: clusters, their GPU pools, serving stacks and the fleet gateway.

`pulumi up` from a laptop runs it with the fleet manifests named in stack config
(`modelplane:fleet`, a file or folder, relative to the project). Optional config:
  modelplane:cluster              only this InferenceCluster (the automation layer's platform-<cluster> stacks)
  modelplane:gateway              true/false: include the fleet gateway (default: true when no cluster is named)
  modelplane:gatewayOnly          true: only the fleet gateway (the automation layer's `gateway` stack)
  modelplane:controlPlaneCluster  the InferenceCluster that hosts the fleet gateway (default: the first)
  modelplane:controlPlaneKubeconfig  (secret) a kubeconfig for a separate control-plane cluster instead
  modelplane:deletionProtection   GKE deletion protection (default true)
  modelplane:versions             chart version overrides, e.g. {keda: 2.20.2}
Stack outputs per cluster: kubeconfig (secret), gatewayAddress, pools (name, nodes, devices).
"""

from __future__ import annotations

import os

import pulumi

from components.args import ClusterArgs, cluster_args, gateway_args
from components.eks import EksInferenceCluster
from components.existing import ExistingInferenceCluster, read_kubeconfig
from components.fleet_gateway import FleetGateway
from components.gke import GkeInferenceCluster
from components.kubernetes import provider
from components.serving_stack import ServingStack
from fleet.validate import load_fleet

PROVISIONED = {"GKE", "EKS"}


class InvalidFleet(pulumi.RunError):
    """Bad manifests: one line per problem, no traceback (RunError prints only its message)."""


def load(path: str):
    base = os.environ.get("MODELPLANE_PROJECT_DIR") or os.getcwd()
    full = path if os.path.isabs(path) else os.path.join(base, path)
    loaded = load_fleet([full])
    if loaded.errors:
        raise InvalidFleet("invalid fleet manifests:\n" + "\n".join(str(p) for p in loaded.errors))
    return loaded.fleet


def cluster_component(args: ClusterArgs, config: pulumi.Config):
    if args.source == "GKE":
        return GkeInferenceCluster(args.name, args, deletion_protection=config.get_bool("deletionProtection", True))
    if args.source == "EKS":
        return EksInferenceCluster(args.name, args)
    if args.source == "Existing":
        return ExistingInferenceCluster(args.name, args, read_kubeconfig(args, config))
    raise InvalidFleet(f"InferenceCluster/{args.name}: spec.cluster.source: {args.source} clusters cannot be "
                       "provisioned by this project yet; bring them as source Existing")


def published_pools(args: ClusterArgs) -> list[dict]:
    return [{"name": p.name, "nodes": p.capacity_nodes,
             "devices": [{"name": d.name, "driver": d.driver, "count": d.count, "claim": d.claim} for d in p.devices]}
            for p in args.pools]


def platform(fleet, config: pulumi.Config | None = None, control_plane_kubeconfig=None) -> dict:
    """Create every platform component of the fleet (or of one cluster); returns the outputs it exported.

    `control_plane_kubeconfig` (an Output) hosts the fleet gateway on a cluster of another stack.
    """
    config = config or pulumi.Config("modelplane")
    versions = config.get_object("versions") or {}
    only = config.get("cluster")
    names = [c.name for c in fleet.of("InferenceCluster")]
    if only and only not in names:
        raise InvalidFleet(f"modelplane:cluster names {only!r}, which is not an InferenceCluster in the fleet")
    outputs: dict = {}
    kubeconfigs: dict = {}
    gateway_only = config.get_bool("gatewayOnly", False)
    for name in [] if gateway_only else [only] if only else names:
        args = cluster_args(fleet, name)
        cluster = cluster_component(args, config)
        k8s_provider = provider(name, cluster.kubeconfig, parent=cluster)
        pools = getattr(cluster, "gpu_pools", None) or getattr(cluster, "gpu_groups", None) or []
        stack = ServingStack(f"{name}-serving", args, k8s_provider, depends_on=pools, versions=versions,
                             opts=pulumi.ResourceOptions(parent=cluster))
        kubeconfigs[name] = cluster.kubeconfig
        outputs[name] = {"kubeconfig": cluster.kubeconfig, "gatewayAddress": stack.gateway_address,
                         "pools": published_pools(args)}
    gateway = gateway_args(fleet)
    if gateway and (gateway_only or config.get_bool("gateway", not only)):
        kubeconfig = control_plane_kubeconfig or config.get_secret("controlPlaneKubeconfig")
        host = config.get("controlPlaneCluster") or (names[0] if names else None)
        if kubeconfig is None and host in kubeconfigs:
            kubeconfig = kubeconfigs[host]
        if kubeconfig is None:
            raise InvalidFleet("the fleet gateway needs a cluster: set modelplane:controlPlaneCluster to an "
                               "InferenceCluster in this stack, or modelplane:controlPlaneKubeconfig (secret)")
        front = FleetGateway("fleet-gateway", gateway, provider("control-plane", kubeconfig), versions=versions)
        outputs["gateway"] = {"address": front.address}
    flat = outputs[only] if only and only in outputs else outputs.get("gateway") if gateway_only else None
    if flat is not None:  # one cluster's or the gateway's stack: flat outputs other stacks reference
        for key, value in flat.items():
            pulumi.export(key, value)
    else:
        for name, value in outputs.items():
            pulumi.export(name, value)
    return outputs


def main() -> None:
    config = pulumi.Config("modelplane")
    platform(load(config.require("fleet")), config)
