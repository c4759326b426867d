"""A GKE InferenceCluster: VPC and subnet, a regional cluster, a system pool, and a GPU pool per node pool.

GPU pools are set up for DRA: GKE's own device plugin is turned off with the node label
`gke-no-default-nvidia-gpu-device-plugin=true` (only one advertiser of a GPU per node), GKE
keeps installing the driver (the serving stack points the NVIDIA DRA driver at it), nodes
carry the `nvidia.com/gpu` NoSchedule taint and the `modelplane.ai/pool` label the scheduler
pins pods with.
"""

from __future__ import annotations

import pulumi
import pulumi_gcp as gcp

from components.args import ClusterArgs, GpuPoolArgs

TYPE = "modelplane:gke:InferenceCluster"
POD_RANGE, SERVICE_RANGE, NODE_RANGE = "10.1.0.0/16", "10.2.0.0/16", "10.0.0.0/20"


def kubeconfig(name: str, endpoint: str, ca: str) -> str:
    """A kubeconfig for GKE using gke-gcloud-auth-plugin (no long-lived credential inside)."""
    return f"""apiVersion: v1
kind: Config
clusters:
- name: {name}
  cluster:
    server: https://{endpoint}
    certificate-authority-data: {ca}
contexts:
- name: {name}
  context: {{cluster: {name}, user: {name}}}
current-context: {name}
users:
- name: {name}
  user:
    exec:
      apiVersion: client.authentication.k8s.io/v1beta1
      command: gke-gcloud-auth-plugin
      provideClusterInfo: true
      installHint: Install gke-gcloud-auth-plugin (gcloud components install gke-gcloud-auth-plugin)
"""


class GkeInferenceCluster(pulumi.ComponentResource):
    """Outputs: kubeconfig (secret), cluster_identifier, pools."""

    def __init__(self, name: str, args: ClusterArgs, deletion_protection: bool = True,
                 opts: pulumi.ResourceOptions | None = None):
        super().__init__(TYPE, name, None, opts)
        child = pulumi.ResourceOptions(parent=self)
        self.network = gcp.compute.Network(f"{name}-vpc", auto_create_subnetworks=False, opts=child)
        self.subnet = gcp.compute.Subnetwork(
            f"{name}-nodes", region=args.region, network=self.network.id, ip_cidr_range=NODE_RANGE,
            secondary_ip_ranges=[
                gcp.compute.SubnetworkSecondaryIpRangeArgs(range_name="pods", ip_cidr_range=POD_RANGE),
                gcp.compute.SubnetworkSecondaryIpRangeArgs(range_name="services", ip_cidr_range=SERVICE_RANGE),
            ], opts=child)
        self.cluster = gcp.container.Cluster(
            name, location=args.region, network=self.network.id, subnetwork=self.subnet.id,
            remove_default_node_pool=True, initial_node_count=1,
            min_master_version=args.kubernetes_version,
            release_channel=gcp.container.ClusterReleaseChannelArgs(channel="REGULAR"),
            ip_allocation_policy=gcp.container.ClusterIpAllocationPolicyArgs(
                cluster_secondary_range_name="pods", services_secondary_range_name="services"),
            deletion_protection=deletion_protection,
            opts=child)
        self.system_pool = gcp.container.NodePool(
            f"{name}-system", cluster=self.cluster.id, location=args.region,
            autoscaling=gcp.container.NodePoolAutoscalingArgs(total_min_node_count=1, total_max_node_count=3),
            initial_node_count=1,
            node_config=gcp.container.NodePoolNodeConfigArgs(machine_type="e2-standard-4", disk_size_gb=100,
                                                             labels={"modelplane.ai/role": "system"}),
            opts=child)
        self.gpu_pools = [self._gpu_pool(name, args, pool, child) for pool in args.pools]
        self.kubeconfig = pulumi.Output.secret(pulumi.Output.all(
            self.cluster.name, self.cluster.endpoint, self.cluster.master_auth.cluster_ca_certificate,
        ).apply(lambda v: kubeconfig(v[0], v[1], v[2])))
        self.cluster_identifier = args.name
        self.register_outputs({"kubeconfig": self.kubeconfig, "clusterIdentifier": self.cluster_identifier})

    def _gpu_pool(self, name: str, args: ClusterArgs, pool: GpuPoolArgs, opts: pulumi.ResourceOptions):
        accelerators = []
        if pool.accelerator_type:
            accelerators.append(gcp.container.NodePoolNodeConfigGuestAcceleratorArgs(
                type=pool.accelerator_type, count=pool.accelerator_count,
                gpu_driver_installation_config=gcp.container.NodePoolNodeConfigGuestAcceleratorGpuDriverInstallationConfigArgs(
                    gpu_driver_version="LATEST")))
        autoscaling = None
        if pool.autoscaled:
            autoscaling = gcp.container.NodePoolAutoscalingArgs(
                total_min_node_count=pool.min_nodes or 0, total_max_node_count=pool.max_nodes, location_policy="ANY")
        return gcp.container.NodePool(
            f"{name}-{pool.name}", cluster=self.cluster.id, location=args.region,
            node_locations=pool.zones or None,
            initial_node_count=pool.node_count if pool.autoscaled else None,
            node_count=None if pool.autoscaled else pool.node_count,
            autoscaling=autoscaling,
            node_config=gcp.container.NodePoolNodeConfigArgs(
                machine_type=pool.machine_type, disk_size_gb=pool.disk_size_gb, guest_accelerators=accelerators,
                spot=pool.spot,
                labels={"modelplane.ai/pool": pool.name, "gke-no-default-nvidia-gpu-device-plugin": "true"},
                taints=[gcp.container.NodePoolNodeConfigTaintArgs(key="nvidia.com/gpu", value="present",
                                                                  effect="NO_SCHEDULE")],
                oauth_scopes=["https://www.googleapis.com/auth/cloud-platform"]),
            opts=opts)
