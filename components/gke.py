"""A GKE InferenceCluster: VPC and subnet, a regional cluster, a system pool, and a GPU pool per node pool.

Every resource uses an explicit `gcp.Provider` for the cluster's project and region, so nothing
depends on ambient credentials' defaults. GPU pools are set up for DRA as GKE documents it:
GKE's device plugin is off (node label `gke-no-default-nvidia-gpu-device-plugin=true`) and GKE's
automatic driver installation is disabled (documented as unsupported with DRA); the serving
stack installs the driver with a DaemonSet and points the NVIDIA DRA driver at it. Nodes carry
the `nvidia.com/gpu` NoSchedule taint and the `modelplane.ai/pool` label.

Node counts: GKE's `node_count` and `initial_node_count` are per zone, the fleet's are totals.
A fixed pool over zones gets total / zones per zone (`validate` refuses counts that do not
divide); a fixed pool without zones, and every autoscaled pool, uses the autoscaler's *total*
limits, so the nodes GKE creates are the nodes the planner counts. `initial_node_count`
(which forces replacement) is ignored after creation, so resizing never replaces a GPU pool.

The Filestore CSI add-on backs the `modelplane-rwx` StorageClass that model caches use.
Clusters and networks are protected (and GKE deletion protection is on) unless the stack's
`modelplane:deletionProtection` is false: destroying a cluster is always a deliberate step.
"""

from __future__ import annotations

import pulumi
import pulumi_gcp as gcp

from components.args import ClusterArgs, GpuPoolArgs
from components.kubernetes import exec_kubeconfig
from components.workspace_credentials import MOUNTED
from components.serving_stack import ClusterFacts
from components.inference_cluster import InferenceClusterComponent
from fleet.inventory import CACHE_STORAGE_CLASSES

TYPE = "modelplane:gke:InferenceCluster"
POD_RANGE, SERVICE_RANGE, NODE_RANGE = "10.1.0.0/16", "10.2.0.0/16", "10.0.0.0/20"
RWX_CLASS = CACHE_STORAGE_CLASSES["GKE"]  # the class caches stage to (fleet/inventory.py)
POOL_TIMEOUTS = pulumi.CustomTimeouts(create="60m", update="60m", delete="60m")  # GPU capacity can take long
CLUSTER_TIMEOUTS = pulumi.CustomTimeouts(create="45m", update="45m", delete="45m")


def pool_sizing(pool: GpuPoolArgs) -> dict:
    """GKE's per-zone counts (or total autoscaling limits) for the fleet's totals."""
    zones = len(pool.zones)
    if pool.autoscaled:
        per_zone = -(-pool.node_count // zones) if zones else None
        return {"initial_node_count": per_zone, "autoscaling": {"total_min_node_count": pool.min_nodes or 0,
                                                                "total_max_node_count": pool.max_nodes,
                                                                "location_policy": "ANY"}}
    if zones:
        return {"node_count": pool.node_count // zones}
    # no zones: GKE picks them, so only total limits give an exact count
    return {"autoscaling": {"total_min_node_count": pool.node_count, "total_max_node_count": pool.node_count,
                            "location_policy": "BALANCED"}}


def kubeconfig(name: str, endpoint: str, ca: str, credentials: str = "") -> str:
    """A kubeconfig for GKE using gke-gcloud-auth-plugin: by default it asks gcloud for its signed-in account (a
    laptop); `credentials="mounted"` (an operator workspace, components/workspace_credentials.py) makes it use
    Application Default Credentials instead, i.e. the key file GOOGLE_APPLICATION_CREDENTIALS names. The flag is
    the plugin's own: kubernetes/cloud-provider-gcp's gke-gcloud-auth-plugin takes
    `--use_application_default_credentials` to read GOOGLE_APPLICATION_CREDENTIALS rather than shell out to gcloud
    (kubernetes/cloud-provider-gcp issue 654 describes that flag and its env var)."""
    args = ["--use_application_default_credentials"] if credentials == MOUNTED else None
    return exec_kubeconfig(name, endpoint, ca, "gke-gcloud-auth-plugin", args, provide_cluster_info=True,
                           install_hint="Install gke-gcloud-auth-plugin (gcloud components install gke-gcloud-auth-plugin)")


class GkeInferenceCluster(InferenceClusterComponent):
    """Outputs: kubeconfig (secret), cluster_identifier, pools."""

    def __init__(self, name: str, args: ClusterArgs, deletion_protection: bool = True, project: str | None = None,
                 credentials: str = "", opts: pulumi.ResourceOptions | None = None):
        super().__init__(TYPE, name, None, opts)
        self.provider = gcp.Provider(f"{name}-gcp", project=args.project or project, region=args.region,
                                     opts=pulumi.ResourceOptions(parent=self))
        child = pulumi.ResourceOptions(parent=self, provider=self.provider)
        protected = pulumi.ResourceOptions.merge(child, pulumi.ResourceOptions(protect=deletion_protection))
        self.network = gcp.compute.Network(f"{name}-vpc", auto_create_subnetworks=False, opts=protected)
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
            addons_config=gcp.container.ClusterAddonsConfigArgs(
                gcp_filestore_csi_driver_config=gcp.container.ClusterAddonsConfigGcpFilestoreCsiDriverConfigArgs(
                    enabled=True)),
            opts=pulumi.ResourceOptions.merge(protected, pulumi.ResourceOptions(custom_timeouts=CLUSTER_TIMEOUTS)))
        self.system_pool = gcp.container.NodePool(
            f"{name}-system", cluster=self.cluster.id, location=args.region,
            autoscaling=gcp.container.NodePoolAutoscalingArgs(total_min_node_count=1, total_max_node_count=3),
            initial_node_count=1,
            node_config=gcp.container.NodePoolNodeConfigArgs(machine_type="e2-standard-4", disk_size_gb=100,
                                                             labels={"modelplane.ai/role": "system"}),
            opts=pulumi.ResourceOptions.merge(child, pulumi.ResourceOptions(
                ignore_changes=["initialNodeCount"], custom_timeouts=POOL_TIMEOUTS)))
        self.gpu_pools = [self._gpu_pool(name, args, pool, child) for pool in args.pools]
        self.facts = ClusterFacts(
            storage_classes=[{
                "metadata": {"name": RWX_CLASS}, "provisioner": "filestore.csi.storage.gke.io",
                "parameters": {"tier": "enterprise", "network": self.network.name},
                "volume_binding_mode": "Immediate", "allow_volume_expansion": True}],
            storage_ready=[self.cluster],
            gpu_driver_installer=any(p.accelerator_type for p in args.pools))
        self.kubeconfig: pulumi.Output[str] = pulumi.Output.secret(pulumi.Output.all(
            self.cluster.name, self.cluster.endpoint, self.cluster.master_auth.cluster_ca_certificate,
        ).apply(lambda v: kubeconfig(v[0], v[1], v[2], credentials)))
        self.cluster_identifier = args.name
        self.register_outputs({"kubeconfig": self.kubeconfig, "clusterIdentifier": self.cluster_identifier})

    def _gpu_pool(self, name: str, args: ClusterArgs, pool: GpuPoolArgs, opts: pulumi.ResourceOptions):
        accelerators = []
        if pool.accelerator_type:
            accelerators.append(gcp.container.NodePoolNodeConfigGuestAcceleratorArgs(
                type=pool.accelerator_type, count=pool.accelerator_count,
                gpu_driver_installation_config=gcp.container.NodePoolNodeConfigGuestAcceleratorGpuDriverInstallationConfigArgs(
                    gpu_driver_version="INSTALLATION_DISABLED")))
        sizing = pool_sizing(pool)
        autoscaling = sizing.get("autoscaling")
        return gcp.container.NodePool(
            f"{name}-{pool.name}", cluster=self.cluster.id, location=args.region,
            node_locations=pool.zones or None,
            initial_node_count=sizing.get("initial_node_count"),
            node_count=sizing.get("node_count"),
            autoscaling=gcp.container.NodePoolAutoscalingArgs(**autoscaling) if autoscaling else None,
            node_config=gcp.container.NodePoolNodeConfigArgs(
                machine_type=pool.machine_type, disk_size_gb=pool.disk_size_gb, guest_accelerators=accelerators,
                spot=pool.spot,
                labels={"modelplane.ai/pool": pool.name, "gke-no-default-nvidia-gpu-device-plugin": "true",
                        "nvidia.com/gpu.present": "true"},
                taints=[gcp.container.NodePoolNodeConfigTaintArgs(key="nvidia.com/gpu", value="present",
                                                                  effect="NO_SCHEDULE")],
                oauth_scopes=["https://www.googleapis.com/auth/cloud-platform"]),
            # the autoscaler owns the size of an autoscaled pool; initialNodeCount would replace the pool
            opts=pulumi.ResourceOptions.merge(opts, pulumi.ResourceOptions(
                ignore_changes=["initialNodeCount"] + (["nodeCount"] if autoscaling else []),
                custom_timeouts=POOL_TIMEOUTS)))
