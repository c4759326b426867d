"""A Vultr InferenceCluster: a VKE cluster with a system pool, and a GPU node pool per node pool (ediri-vultr, the
community Pulumi provider for Vultr, bridged from Vultr's own Terraform provider).

Every resource uses an explicit Vultr provider; its API key is the machine's VULTR_API_KEY (the SDK reads it and
keeps it secret). The cluster is `vultr.Kubernetes` (label, region, version, and its first pool in `node_pools`:
the system pool `vc2-6c-16gb`, autoscaled between 1 and 2 nodes, as the reference's). Each GPU pool is a
`vultr.KubernetesNodePools` with the class's `plan`, `node_quantity`, the VKE autoscaler's `auto_scaler`,
`min_nodes` and `max_nodes` where the pool can grow, the `modelplane.ai/pool` node label and the
`nvidia.com/gpu=true:NoSchedule` taint. VKE installs NVIDIA's GPU Operator on GPU nodes itself (the reference only
waits for its validator). Vultr offers no ReadWriteMany storage: model caches never stage here
(fleet/inventory.py). The kubeconfig is the one VKE issues (`kube_config`, base64), with its client certificate:
a secret output. The cluster is protected unless `modelplane:deletionProtection` is false.
"""

from __future__ import annotations

import base64

import ediri_vultr as vultr
import pulumi

from components.args import ClusterArgs, GpuPoolArgs
from components.serving_stack import ClusterFacts
from components.inference_cluster import InferenceClusterComponent

TYPE = "modelplane:vultr:InferenceCluster"
SYSTEM_PLAN = "vc2-6c-16gb"  # the reference's system pool (1..2 nodes)
POOL_TIMEOUTS = pulumi.CustomTimeouts(create="60m", update="60m", delete="60m")
CLUSTER_TIMEOUTS = pulumi.CustomTimeouts(create="45m", update="45m", delete="45m")


def decoded_kubeconfig(kube_config: str) -> str:
    """VKE's `kube_config` output is the kubeconfig base64-encoded."""
    return base64.b64decode(kube_config).decode() if kube_config else ""


class VultrInferenceCluster(InferenceClusterComponent):
    """Outputs: kubeconfig (secret), cluster_identifier, facts."""

    def __init__(self, name: str, args: ClusterArgs, deletion_protection: bool = True,
                 opts: pulumi.ResourceOptions | None = None):
        super().__init__(TYPE, name, None, opts)
        self.provider = vultr.Provider(f"{name}-vultr", opts=pulumi.ResourceOptions(parent=self))
        child = pulumi.ResourceOptions(parent=self, provider=self.provider)
        self.cluster = vultr.Kubernetes(
            name, label=args.name, region=args.region or "", version=args.kubernetes_version or "",
            node_pools=vultr.KubernetesNodePoolsArgs(
                label="system", plan=SYSTEM_PLAN, node_quantity=1, auto_scaler=True, min_nodes=1, max_nodes=2,
                labels={"modelplane.ai/role": "system"}),
            opts=pulumi.ResourceOptions.merge(child, pulumi.ResourceOptions(
                protect=deletion_protection, custom_timeouts=CLUSTER_TIMEOUTS,
                ignore_changes=["nodePools.nodeQuantity"])))  # the autoscaler's
        self.gpu_pools = [self._gpu_pool(name, pool, child) for pool in args.pools]
        self.kubeconfig: pulumi.Output[str] = pulumi.Output.secret(self.cluster.kube_config.apply(decoded_kubeconfig))
        self.cluster_identifier = args.name
        self.facts = ClusterFacts()  # no RWX StorageClass; VKE's load balancers give the Gateway an address
        self.register_outputs({"kubeconfig": self.kubeconfig, "clusterIdentifier": self.cluster_identifier})

    def _gpu_pool(self, name: str, pool: GpuPoolArgs, opts: pulumi.ResourceOptions):
        scaling = ({"auto_scaler": True, "min_nodes": pool.min_nodes or 1, "max_nodes": pool.max_nodes}
                   if pool.autoscaled else {"auto_scaler": False})
        return vultr.KubernetesNodePools(
            f"{name}-{pool.name}", cluster_id=self.cluster.id, label=pool.name, plan=pool.plan or "",
            node_quantity=pool.node_count,
            labels={"modelplane.ai/pool": pool.name},
            taints=[vultr.KubernetesNodePoolsTaintArgs(key="nvidia.com/gpu", value="true", effect="NoSchedule")],
            **scaling,
            opts=pulumi.ResourceOptions.merge(opts, pulumi.ResourceOptions(
                custom_timeouts=POOL_TIMEOUTS, ignore_changes=["nodeQuantity"] if pool.autoscaled else [])))
