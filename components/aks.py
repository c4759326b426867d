"""An AKS InferenceCluster: a resource group, a virtual network, the managed cluster with a system
pool, and an agent pool per node pool (pulumi-azure-native).

Every resource uses an explicit `azure-native` Provider for the cluster's location (credentials
from the machine: the Azure CLI login or environment credentials). GPU pools carry the class's
VM size, the `nvidia.com/gpu=true:NoSchedule` taint and the `modelplane.ai/pool` label, spot
capacity where asked, the cluster autoscaler's bounds (AKS scales node pools itself), and AKS's
GPU driver installation (`gpuProfile.driver: Install`, as the reference does): the driver lands on
the host, AKS installs no device plugin, so the NVIDIA DRA driver (root `/`) is the only
advertiser of the GPUs. Networking is Azure CNI overlay. Azure Files backs `modelplane-rwx-fs`
(ReadWriteMany, Premium_LRS), the class model caches use; the CSI driver is part of AKS.

Node counts are totals per pool (one scale set across the pool's zones). An autoscaled pool's
`count` belongs to the autoscaler after creation. The kubeconfig is the cluster's user
credentials (a secret). The resource group, network and cluster are protected unless
`modelplane:deletionProtection` is false.
"""

from __future__ import annotations

import base64

import pulumi
import pulumi_azure_native as azure

from components.args import ClusterArgs, GpuPoolArgs
from components.serving_stack import ClusterFacts
from components.inference_cluster import InferenceClusterComponent
from fleet.inventory import CACHE_STORAGE_CLASSES

TYPE = "modelplane:aks:InferenceCluster"
RWX_CLASS = CACHE_STORAGE_CLASSES["AKS"]  # the class caches stage to (fleet/inventory.py)
SYSTEM_VM_SIZE = "Standard_D4s_v5"
VNET_CIDR, NODE_CIDR, POD_CIDR = "10.0.0.0/16", "10.0.0.0/20", "10.244.0.0/16"
POOL_TIMEOUTS = pulumi.CustomTimeouts(create="60m", update="60m", delete="60m")
CLUSTER_TIMEOUTS = pulumi.CustomTimeouts(create="45m", update="45m", delete="45m")


def first_kubeconfig(result) -> str:
    return base64.b64decode(result.kubeconfigs[0].value).decode()


class AksInferenceCluster(InferenceClusterComponent):
    """Outputs: kubeconfig (secret), cluster_identifier, facts."""

    def __init__(self, name: str, args: ClusterArgs, deletion_protection: bool = True,
                 opts: pulumi.ResourceOptions | None = None):
        super().__init__(TYPE, name, None, opts)
        self.provider = azure.Provider(f"{name}-azure", location=args.region, opts=pulumi.ResourceOptions(parent=self))
        child = pulumi.ResourceOptions(parent=self, provider=self.provider)
        protected = pulumi.ResourceOptions.merge(child, pulumi.ResourceOptions(protect=deletion_protection))
        tags = {"modelplane.ai/cluster": args.name}
        self.group = azure.resources.ResourceGroup(f"{name}-rg", location=args.region, tags=tags, opts=protected)
        self.network = azure.network.VirtualNetwork(
            f"{name}-vnet", resource_group_name=self.group.name, location=args.region,
            address_space=azure.network.AddressSpaceArgs(address_prefixes=[VNET_CIDR]), tags=tags, opts=protected)
        self.subnet = azure.network.Subnet(
            f"{name}-nodes", resource_group_name=self.group.name, virtual_network_name=self.network.name,
            address_prefix=NODE_CIDR, opts=pulumi.ResourceOptions.merge(child, pulumi.ResourceOptions(
                ignore_changes=["routeTable", "networkSecurityGroup"])))  # AKS attaches its own
        self.cluster = azure.containerservice.ManagedCluster(
            name, resource_group_name=self.group.name, location=args.region, dns_prefix=args.name,
            kubernetes_version=args.kubernetes_version, enable_rbac=True,
            identity=azure.containerservice.ManagedClusterIdentityArgs(type="SystemAssigned"),
            network_profile=azure.containerservice.ContainerServiceNetworkProfileArgs(
                network_plugin="azure", network_plugin_mode="overlay", pod_cidr=POD_CIDR),
            agent_pool_profiles=[azure.containerservice.ManagedClusterAgentPoolProfileArgs(
                name="system", mode="System", vm_size=SYSTEM_VM_SIZE, count=1, min_count=1, max_count=2,
                enable_auto_scaling=True, os_type="Linux", vnet_subnet_id=self.subnet.id,
                node_labels={"modelplane.ai/role": "system"})],
            tags=tags,
            opts=pulumi.ResourceOptions.merge(protected, pulumi.ResourceOptions(
                custom_timeouts=CLUSTER_TIMEOUTS, ignore_changes=["agentPoolProfiles[0].count"])))
        self.gpu_pools = [self._gpu_pool(pool, args, child) for pool in args.pools]
        credentials = azure.containerservice.list_managed_cluster_user_credentials_output(
            resource_group_name=self.group.name, resource_name=self.cluster.name,
            opts=pulumi.InvokeOutputOptions(parent=self, provider=self.provider))
        self.kubeconfig: pulumi.Output[str] = pulumi.Output.secret(credentials.apply(first_kubeconfig))
        self.cluster_identifier = args.name
        self.facts = ClusterFacts(
            storage_classes=[{"metadata": {"name": RWX_CLASS}, "provisioner": "file.csi.azure.com",
                              "parameters": {"skuName": "Premium_LRS"}, "allow_volume_expansion": True,
                              "mount_options": ["mfsymlinks", "actimeo=30", "nosharesock"]}],
            storage_ready=[self.cluster])
        self.register_outputs({"kubeconfig": self.kubeconfig, "clusterIdentifier": self.cluster_identifier})

    def _gpu_pool(self, pool: GpuPoolArgs, args: ClusterArgs, child: pulumi.ResourceOptions):
        spot = {"scale_set_priority": "Spot", "scale_set_eviction_policy": "Delete", "spot_max_price": -1} if pool.spot else {}
        scaling = ({"enable_auto_scaling": True, "min_count": pool.min_nodes or 0, "max_count": pool.max_nodes}
                   if pool.autoscaled else {"enable_auto_scaling": False})
        return azure.containerservice.AgentPool(
            f"{args.name}-{pool.name}", resource_group_name=self.group.name, resource_name_=self.cluster.name,
            agent_pool_name=pool.name, mode="User", os_type="Linux", vm_size=pool.vm_size, count=pool.node_count,
            availability_zones=[zone.rsplit("-", 1)[-1] for zone in pool.zones] or None,
            os_disk_size_gb=pool.disk_size_gb, vnet_subnet_id=self.subnet.id,
            node_taints=["nvidia.com/gpu=true:NoSchedule"], node_labels={"modelplane.ai/pool": pool.name},
            gpu_profile=azure.containerservice.GPUProfileArgs(driver="Install"),
            tags={"modelplane.ai/cluster": args.name, "modelplane.ai/pool": pool.name},
            **scaling, **spot,
            opts=pulumi.ResourceOptions.merge(child, pulumi.ResourceOptions(
                custom_timeouts=POOL_TIMEOUTS, ignore_changes=["count"] if pool.autoscaled else [])))
