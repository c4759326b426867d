"""A Civo InferenceCluster: a firewall, a Civo Kubernetes (k3s) cluster with a system pool, and a GPU node pool per
node pool (pulumi-civo), as the reference's v0.5.0 composes a `CivoCluster` (region, and per pool its size and
node count).

Every resource uses an explicit Civo provider for the cluster's region; its token is the machine's CIVO_TOKEN (read
by the provider itself, never by this program). `civo.KubernetesCluster` needs a firewall (`firewall_id`) and its
first pool (`pools`): the system pool. Each GPU pool is a `civo.KubernetesNodePool` with the class's `size` (e.g.
`an.g1.l40s.kube.x1`), `node_count`, the `modelplane.ai/pool` node label and the `nvidia.com/gpu=true:NoSchedule`
taint. Civo's pools are fixed: this project does not autoscale them yet (validate refuses min/maxNodeCount on
Civo). Civo volumes are ReadWriteOnce: model caches never stage here (fleet/inventory.py). The kubeconfig is the
one Civo issues (`kubeconfig`, kept in state with `write_kubeconfig`): a secret output. The firewall and cluster
are protected unless `modelplane:deletionProtection` is false.

The reference's serving stack also installs NVIDIA's GPU Operator on Civo (driver only: toolkit and device plugin
off, so the DRA driver alone allocates GPUs); this project's serving stack has no GPU Operator yet
(docs/platform.md, "Civo").
"""

from __future__ import annotations

import pulumi
import pulumi_civo as civo

from components.args import ClusterArgs, GpuPoolArgs
from components.serving_stack import ClusterFacts
from components.inference_cluster import InferenceClusterComponent

TYPE = "modelplane:civo:InferenceCluster"
SYSTEM_SIZE = "g4s.kube.large"  # 4 vCPU, 8 GiB: the serving stack's controllers
POOL_TIMEOUTS = pulumi.CustomTimeouts(create="60m", update="60m", delete="60m")
CLUSTER_TIMEOUTS = pulumi.CustomTimeouts(create="45m", update="45m", delete="45m")
GPU_TAINT = {"key": "nvidia.com/gpu", "value": "true", "effect": "NoSchedule"}


class CivoInferenceCluster(InferenceClusterComponent):
    """Outputs: kubeconfig (secret), cluster_identifier, facts."""

    def __init__(self, name: str, args: ClusterArgs, deletion_protection: bool = True,
                 opts: pulumi.ResourceOptions | None = None):
        super().__init__(TYPE, name, None, opts)
        self.provider = civo.Provider(f"{name}-civo", region=args.region,
                                      opts=pulumi.ResourceOptions(parent=self))
        child = pulumi.ResourceOptions(parent=self, provider=self.provider)
        protected = pulumi.ResourceOptions.merge(child, pulumi.ResourceOptions(protect=deletion_protection))
        self.firewall = civo.Firewall(f"{name}-firewall", name=f"{args.name}-firewall", region=args.region,
                                      create_default_rules=True, opts=protected)
        self.cluster = civo.KubernetesCluster(
            name, name=args.name, region=args.region, firewall_id=self.firewall.id, cluster_type="k3s",
            kubernetes_version=args.kubernetes_version, write_kubeconfig=True,
            pools=civo.KubernetesClusterPoolsArgs(label="system", size=SYSTEM_SIZE, node_count=1,
                                                  labels={"modelplane.ai/role": "system"}),
            opts=pulumi.ResourceOptions.merge(protected, pulumi.ResourceOptions(custom_timeouts=CLUSTER_TIMEOUTS)))
        self.gpu_pools = [self._gpu_pool(name, pool, child) for pool in args.pools]
        self.kubeconfig: pulumi.Output[str] = pulumi.Output.secret(self.cluster.kubeconfig)
        self.cluster_identifier = args.name
        self.facts = ClusterFacts()  # no RWX StorageClass; Civo's load balancers give the Gateway an address
        self.register_outputs({"kubeconfig": self.kubeconfig, "clusterIdentifier": self.cluster_identifier})

    def _gpu_pool(self, name: str, pool: GpuPoolArgs, opts: pulumi.ResourceOptions):
        return civo.KubernetesNodePool(
            f"{name}-{pool.name}", cluster_id=self.cluster.id, label=pool.name, size=pool.size or "",
            node_count=pool.node_count, labels={"modelplane.ai/pool": pool.name},
            taints=[civo.KubernetesNodePoolTaintArgs(**GPU_TAINT)],
            opts=pulumi.ResourceOptions.merge(opts, pulumi.ResourceOptions(custom_timeouts=POOL_TIMEOUTS)))
