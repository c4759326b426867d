"""A Nebius InferenceCluster: a VPC network and subnet, a Managed Kubernetes (mk8s) cluster with a
public endpoint, a system node group, a GPU node group per node pool, and a GPU cluster (an
InfiniBand fabric) per fabric the pools name (pulumi-nebius).

Every resource uses an explicit Nebius provider; the project is `spec.cluster.nebius.projectId`
(an optional addition to the reference's API), else the stack's `nebius:parentId` config, else the
project of the Nebius CLI profile (as the reference takes it from its ProviderConfig). GPU node
groups take the class's platform and preset (e.g. `gpu-h100-sxm` / `8gpu-128vcpu-1600gb`), the
drivers preset, and Nebius's own DRA support (`gpuSettings.dra`), carry the
`nvidia.com/gpu=true:NoSchedule` taint and the `modelplane.ai/pool` label, use preemptible
capacity where asked, and autoscale between the pool's bounds (Nebius scales node groups
itself). The kubeconfig authenticates with the `nebius` CLI, as `nebius mk8s cluster
get-credentials` writes it (no long-lived credential inside). Model caches stage on a shared
filesystem (a Compute Filesystem attached read-write to every node group and mounted by
cloud-init at /mnt/modelplane-cache, as Nebius documents it), through Nebius's
csi-mounted-fs-path driver and the `modelplane-rwx-fs` StorageClass (ReadWriteMany, one directory
per volume). The network and cluster are protected unless `modelplane:deletionProtection` is false.
"""

from __future__ import annotations

import base64

import pulumi
import pulumi_nebius as nebius

from components.args import ClusterArgs, GpuPoolArgs
from components.kubernetes import exec_kubeconfig
from components.workspace_credentials import MOUNTED, NEBIUS_ENDPOINT, NEBIUS_FILE, NEBIUS_PROFILE
from components.serving_stack import ClusterFacts
from components.inference_cluster import InferenceClusterComponent
from fleet.inventory import CACHE_STORAGE_CLASSES
from workloads.pods import GPU_NODE_TOLERATIONS

TYPE = "modelplane:nebius:InferenceCluster"
SYSTEM_PLATFORM, SYSTEM_PRESET = "cpu-d3", "4vcpu-16gb"
POOL_TIMEOUTS = pulumi.CustomTimeouts(create="60m", update="60m", delete="60m")
RWX_CLASS = CACHE_STORAGE_CLASSES["Nebius"]  # the class caches stage to (fleet/inventory.py)
RWX_PROVISIONER = "mounted-fs-path.csi.nebius.ai"
# GPU node groups carry the nvidia.com/gpu NoSchedule taint: without these the driver's node DaemonSet never runs
# where model servers mount their caches. `tolerations` is the top-level key Helm charts conventionally read; the
# chart (0.1.5) is not vendored here, so that its DaemonSet reads it is what a real cluster shows (docs/platform.md).
CSI_VALUES_TOLERATIONS = [dict(t) for t in GPU_NODE_TOLERATIONS]
CACHE_FS_GIB = 2048  # the shared filesystem for model caches (every cache on the cluster shares it)
CACHE_MOUNT, CACHE_TAG = "/mnt/modelplane-cache", "modelplane-cache"
# The API only attaches the filesystem as a virtiofs device; the node mounts it (nofail: a node still boots).
CACHE_CLOUD_INIT = f"""#cloud-config
mounts:
  - [{CACHE_TAG}, {CACHE_MOUNT}, virtiofs, "defaults,nofail", "0", "2"]
runcmd:
  - [modprobe, fuse]
  - [mkdir, -p, {CACHE_MOUNT}]
  - [mount, -a]
"""


GET_TOKEN = ["mk8s", "cluster", "get-token", "--format", "json"]  # as `nebius mk8s cluster get-credentials` writes it


def kubeconfig(name: str, endpoint: str, ca: str, credentials: str = "") -> str:
    """A kubeconfig authenticating with the `nebius` CLI: by default with the CLI's signed-in profile (a laptop).

    `credentials="mounted"` (an operator workspace, components/workspace_credentials.py): a fresh pod has no
    profile, so the plugin first makes one from the mounted service-account key, with the flags Nebius documents
    for that (docs.nebius.com, "Authorized keys": `nebius profile create --endpoint api.nebius.cloud
    --service-account-file FILE --profile NAME`, then `--profile NAME` on each command), and asks for the token
    with it. Only the token reaches stdout (the ExecCredential the client reads); the profile's output goes to
    stderr. The pod's image must hold the `nebius` CLI (the operator settings' `image`)."""
    ca_data = base64.b64encode(ca.encode()).decode() if "BEGIN CERTIFICATE" in ca else ca
    hint = "Install the Nebius CLI (https://docs.nebius.com/cli) and sign in"
    if credentials != MOUNTED:
        return exec_kubeconfig(name, endpoint, ca_data, "nebius", GET_TOKEN, install_hint=hint)
    token = " ".join(["nebius", *GET_TOKEN, "--profile", NEBIUS_PROFILE])
    script = (f"{token} 2>/dev/null || {{ nebius profile create --endpoint {NEBIUS_ENDPOINT} --service-account-file "
              f"{NEBIUS_FILE} --profile {NEBIUS_PROFILE} >&2; {token}; }}")
    return exec_kubeconfig(name, endpoint, ca_data, "sh", ["-c", script], install_hint=hint)


def _get(value, snake: str):
    """A field of a provider output, whether it arrives with Python (snake) or wire (camel) keys."""
    if not value:
        return None
    found = getattr(value, snake, None)  # an output type's property
    if found is None and isinstance(value, dict):  # plain data (dict.get: the output types warn on their own get)
        camel = snake.split("_")[0] + "".join(part.title() for part in snake.split("_")[1:])
        found = dict.get(value, snake, dict.get(value, camel))
    return found


def _endpoint(status) -> str:
    return _get(_get(_get(status, "control_plane"), "endpoints"), "public_endpoint") or ""


def _ca(status) -> str:
    return _get(_get(_get(status, "control_plane"), "auth"), "cluster_ca_certificate") or ""


class NebiusInferenceCluster(InferenceClusterComponent):
    """Outputs: kubeconfig (secret), cluster_identifier, facts."""

    def __init__(self, name: str, args: ClusterArgs, deletion_protection: bool = True, project: str | None = None,
                 credentials: str = "", opts: pulumi.ResourceOptions | None = None):
        super().__init__(TYPE, name, None, opts)
        parent_id = args.project or project
        self.provider = nebius.Provider(f"{name}-nebius", parent_id=parent_id, opts=pulumi.ResourceOptions(parent=self))
        child = pulumi.ResourceOptions(parent=self, provider=self.provider)
        protected = pulumi.ResourceOptions.merge(child, pulumi.ResourceOptions(protect=deletion_protection))
        labels = {"modelplane.ai/cluster": args.name}
        self.network = nebius.VpcV1Network(f"{name}-network", name=f"{args.name}-network", parent_id=parent_id,
                                           labels=labels, opts=protected)
        self.subnet = nebius.VpcV1Subnet(f"{name}-nodes", name=f"{args.name}-nodes", network_id=self.network.id,
                                         parent_id=parent_id, labels=labels, opts=child)
        self.cluster = nebius.Mk8sV1Cluster(
            name, name=args.name, parent_id=parent_id, labels=labels,
            control_plane=nebius.Mk8sV1ClusterControlPlaneArgs(
                subnet_id=self.subnet.id, version=args.kubernetes_version,
                endpoints=nebius.Mk8sV1ClusterControlPlaneEndpointsArgs(
                    public_endpoint=nebius.Mk8sV1ClusterControlPlaneEndpointsPublicEndpointArgs())),
            opts=protected)
        after = pulumi.ResourceOptions.merge(child, pulumi.ResourceOptions(custom_timeouts=POOL_TIMEOUTS))
        self.cache_fs = nebius.ComputeV1Filesystem(
            f"{name}-cache-fs", name=f"{args.name}-cache", parent_id=parent_id, type="NETWORK_SSD",
            size_gibibytes=CACHE_FS_GIB, block_size_bytes=4096, labels=labels, opts=child)
        self.filesystems = [nebius.Mk8sV1NodeGroupTemplateFilesystemArgs(  # on every node group: pods may land on any
            attach_mode="READ_WRITE", mount_tag=CACHE_TAG,
            existing_filesystem=nebius.Mk8sV1NodeGroupTemplateFilesystemExistingFilesystemArgs(id=self.cache_fs.id))]
        self.system_group = nebius.Mk8sV1NodeGroup(
            f"{name}-system", name="system", parent_id=self.cluster.id, labels=labels,
            autoscaling=nebius.Mk8sV1NodeGroupAutoscalingArgs(min_node_count=1, max_node_count=2),
            template=nebius.Mk8sV1NodeGroupTemplateArgs(
                resources=nebius.Mk8sV1NodeGroupTemplateResourcesArgs(platform=SYSTEM_PLATFORM, preset=SYSTEM_PRESET),
                metadata=nebius.Mk8sV1NodeGroupTemplateMetadataArgs(labels={"modelplane.ai/role": "system"}),
                filesystems=self.filesystems, cloud_init_user_data=CACHE_CLOUD_INIT),
            opts=after)
        fabrics = sorted({p.infiniband_fabric for p in args.pools if p.infiniband_fabric})
        self.gpu_clusters = {fabric: nebius.ComputeV1GpuCluster(
            f"{name}-{fabric}", name=f"{args.name}-{fabric}", infiniband_fabric=fabric, parent_id=parent_id,
            labels=labels, opts=child) for fabric in fabrics}
        self.gpu_pools = [self._gpu_group(name, pool, labels, after) for pool in args.pools]
        self.kubeconfig: pulumi.Output[str] = pulumi.Output.secret(self.cluster.status.apply(
            lambda status: kubeconfig(args.name, _endpoint(status), _ca(status), credentials)))
        self.cluster_identifier = args.name
        self.facts = ClusterFacts(  # the cluster's default class backs charts' volumes; caches use the shared one
            storage_classes=[{"metadata": {"name": RWX_CLASS}, "provisioner": RWX_PROVISIONER,
                              "reclaim_policy": "Delete", "volume_binding_mode": "WaitForFirstConsumer"}],
            # volumes are directories under the shared filesystem's mount
            storage_charts={"nebius-csi-mounted-fs-path": {"dataDir": f"{CACHE_MOUNT}/csi-mounted-fs-path-data/",
                                                          "tolerations": CSI_VALUES_TOLERATIONS}})
        self.register_outputs({"kubeconfig": self.kubeconfig, "clusterIdentifier": self.cluster_identifier})

    def _gpu_group(self, name: str, pool: GpuPoolArgs, labels: dict, opts: pulumi.ResourceOptions):
        gpu_cluster = self.gpu_clusters.get(pool.infiniband_fabric or "")
        template = nebius.Mk8sV1NodeGroupTemplateArgs(
            resources=nebius.Mk8sV1NodeGroupTemplateResourcesArgs(platform=pool.platform or "", preset=pool.preset),
            boot_disk=nebius.Mk8sV1NodeGroupTemplateBootDiskArgs(size_gibibytes=pool.disk_size_gb, type="NETWORK_SSD"),
            gpu_settings=nebius.Mk8sV1NodeGroupTemplateGpuSettingsArgs(dra=True, drivers_preset=pool.drivers_preset),
            gpu_cluster=nebius.Mk8sV1NodeGroupTemplateGpuClusterArgs(id=gpu_cluster.id) if gpu_cluster else None,
            preemptible=nebius.Mk8sV1NodeGroupTemplatePreemptibleArgs() if pool.spot else None,
            taints=[nebius.Mk8sV1NodeGroupTemplateTaintArgs(key="nvidia.com/gpu", value="true", effect="NO_SCHEDULE")],
            metadata=nebius.Mk8sV1NodeGroupTemplateMetadataArgs(labels={"modelplane.ai/pool": pool.name}),
            filesystems=self.filesystems, cloud_init_user_data=CACHE_CLOUD_INIT)
        sizing: dict = ({"autoscaling": nebius.Mk8sV1NodeGroupAutoscalingArgs(min_node_count=pool.min_nodes or 0,
                                                                              max_node_count=pool.max_nodes)}
                        if pool.autoscaled else {"fixed_node_count": pool.node_count})
        return nebius.Mk8sV1NodeGroup(f"{name}-{pool.name}", name=pool.name, parent_id=self.cluster.id,
                                      labels={**labels, "modelplane.ai/pool": pool.name}, template=template,
                                      **sizing, opts=opts)
