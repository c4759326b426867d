"""An EKS InferenceCluster: a VPC with a public subnet per zone, the cluster, a system node
group, a GPU managed node group per node pool, and the add-ons a first apply needs.

Every resource uses an explicit `aws.Provider` for the cluster's region. The VPC and IAM are
plain pulumi_aws resources (visible, and tested, as children); the cluster is a pulumi_eks
component of which only plain outputs are read; node groups are EKS managed node groups.

What a real first apply needs, and AWS does not do by itself:
- the control plane needs subnets in two zones at least, even when every pool sits in one;
- node groups depend on their role's policy attachments (on destroy, the policies outlive the nodes);
- a fixed node group name cannot be replaced in place: `delete_before_replace`;
- managed node groups do not scale themselves: where a pool can grow, the serving stack installs
  cluster-autoscaler (its IAM role comes from here, through EKS Pod Identity) and `desired_size` is
  ignored after creation;
- volumes: the EBS CSI driver (block volumes, the `gp3` default StorageClass, which Dynamo's etcd
  and NATS claim) and the EFS CSI driver with a file system, mount targets and the
  `modelplane-rwx-efs` StorageClass (ReadWriteMany, what model caches use).

GPU groups run the EKS-optimized NVIDIA AMI (AL2023, driver and toolkit included; the NVIDIA DRA
driver advertises devices), carry the `nvidia.com/gpu` NoSchedule taint and the `modelplane.ai/pool`
label, and can use a capacity reservation (capacity blocks) or EFA where the pool declares them.
The VPC and the cluster are protected unless `modelplane:deletionProtection` is false.
"""

from __future__ import annotations

import json

import pulumi
import pulumi_aws as aws
import pulumi_eks as eks

from components.args import ClusterArgs, GpuPoolArgs
from components.serving_stack import ClusterFacts
from components.versions import CLUSTER_AUTOSCALER_DRA_FROM, CLUSTER_AUTOSCALER_IMAGE, CLUSTER_AUTOSCALER_TAGS, minor
from components.inference_cluster import InferenceClusterComponent
from fleet.inventory import CACHE_STORAGE_CLASSES

TYPE = "modelplane:eks:InferenceCluster"
VPC_CIDR = "10.0.0.0/16"
SUBNET_CIDRS = ["10.0.0.0/20", "10.0.16.0/20", "10.0.32.0/20", "10.0.48.0/20", "10.0.64.0/20", "10.0.80.0/20"]
NODE_POLICIES = ["AmazonEKSWorkerNodePolicy", "AmazonEKS_CNI_Policy", "AmazonEC2ContainerRegistryReadOnly",
                 "AmazonSSMManagedInstanceCore"]
RWX_CLASS = CACHE_STORAGE_CLASSES["EKS"]  # the class caches stage to (fleet/inventory.py)
BLOCK_CLASS = "gp3"
POOL_TIMEOUTS = pulumi.CustomTimeouts(create="60m", update="60m", delete="60m")
AUTOSCALED = pulumi.ResourceOptions(ignore_changes=["scalingConfig.desiredSize"])  # cluster-autoscaler owns it
AUTOSCALER_SERVICE_ACCOUNT = "cluster-autoscaler"
# What cluster-autoscaler needs to discover and resize managed node groups (AWS's documented minimum).
AUTOSCALER_ACTIONS = ["autoscaling:DescribeAutoScalingGroups", "autoscaling:DescribeAutoScalingInstances",
                      "autoscaling:DescribeLaunchConfigurations", "autoscaling:DescribeScalingActivities",
                      "autoscaling:DescribeTags", "autoscaling:SetDesiredCapacity",
                      "autoscaling:TerminateInstanceInAutoScalingGroup", "ec2:DescribeImages",
                      "ec2:DescribeInstanceTypes", "ec2:DescribeLaunchTemplateVersions", "ec2:GetInstanceTypesFromInstanceRequirements",
                      "eks:DescribeNodegroup"]
POD_IDENTITY_TRUST = json.dumps({"Version": "2012-10-17", "Statement": [{
    "Effect": "Allow", "Action": ["sts:AssumeRole", "sts:TagSession"],
    "Principal": {"Service": "pods.eks.amazonaws.com"}}]})


def autoscaler_values(cluster_name: str, region: str | None, kubernetes_version: str | None) -> dict:
    """cluster-autoscaler's chart values: the image of the control plane's minor (the chart's default follows the
    chart, not the cluster), and DRA handling on, so that a pending pod's ResourceClaims are simulated against the
    GPU nodes' ResourceSlices. A minor this project has no tag for keeps the chart's image (`validate` warns)."""
    values: dict = {"autoDiscovery": {"clusterName": cluster_name}, "awsRegion": region,
                    "rbac": {"serviceAccount": {"create": True, "name": AUTOSCALER_SERVICE_ACCOUNT}},
                    "extraArgs": {"balance-similar-node-groups": True, "skip-nodes-with-system-pods": False}}
    cluster_minor = minor(kubernetes_version) if kubernetes_version else ""
    tag = CLUSTER_AUTOSCALER_TAGS.get(cluster_minor)
    if tag:
        values["image"] = {"repository": CLUSTER_AUTOSCALER_IMAGE, "tag": tag}
    if not tag or tuple(int(p) for p in cluster_minor.split(".")) >= CLUSTER_AUTOSCALER_DRA_FROM:
        values["extraArgs"]["enable-dynamic-resource-allocation"] = True
    return values


def pool_minimum(pool: GpuPoolArgs) -> int:
    """A node group's minimum size. cluster-autoscaler builds a node group's template from a live node's
    ResourceSlices: from zero nodes it has none, so a pod that claims a GPU through DRA never fits the template and
    the group never grows. A DRA pool that autoscales keeps one node (`validate` says so)."""
    minimum = pool.min_nodes if pool.min_nodes is not None else pool.node_count
    return max(minimum, 1) if pool.autoscaled and pool.nvidia else minimum


def zones_of(args: ClusterArgs) -> list[str]:
    """Zones of every pool, in order, then the region's a, b, c until there are two at least (EKS needs two)."""
    zones: list[str] = []
    for pool in args.pools:
        for zone in pool.zones:
            if zone not in zones:
                zones.append(zone)
    defaults = [f"{args.region}{letter}" for letter in "abc"]
    if not zones:
        return defaults
    for zone in defaults:
        if len(zones) >= 2:
            break
        if zone not in zones:
            zones.append(zone)
    return zones


class EksInferenceCluster(InferenceClusterComponent):
    """Outputs: kubeconfig (secret), cluster_identifier."""

    def __init__(self, name: str, args: ClusterArgs, deletion_protection: bool = True,
                 opts: pulumi.ResourceOptions | None = None):
        super().__init__(TYPE, name, None, opts)
        self.provider = aws.Provider(f"{name}-aws", region=args.region, opts=pulumi.ResourceOptions(parent=self))
        child = pulumi.ResourceOptions(parent=self, provider=self.provider)
        protected = pulumi.ResourceOptions.merge(child, pulumi.ResourceOptions(protect=deletion_protection))
        zones = zones_of(args)[: len(SUBNET_CIDRS)]
        tags = {"modelplane.ai/cluster": args.name}
        self.vpc = aws.ec2.Vpc(f"{name}-vpc", cidr_block=VPC_CIDR, enable_dns_hostnames=True, enable_dns_support=True,
                               tags={**tags, "Name": f"{name}-vpc"}, opts=protected)
        self.gateway = aws.ec2.InternetGateway(f"{name}-igw", vpc_id=self.vpc.id, tags=tags, opts=child)
        self.routes = aws.ec2.RouteTable(f"{name}-public", vpc_id=self.vpc.id, routes=[
            aws.ec2.RouteTableRouteArgs(cidr_block="0.0.0.0/0", gateway_id=self.gateway.id)], tags=tags, opts=child)
        self.subnets: dict[str, aws.ec2.Subnet] = {}
        for zone, cidr in zip(zones, SUBNET_CIDRS):
            subnet = aws.ec2.Subnet(f"{name}-{zone}", vpc_id=self.vpc.id, cidr_block=cidr, availability_zone=zone,
                                    map_public_ip_on_launch=True,
                                    tags={**tags, "kubernetes.io/role/elb": "1"}, opts=child)
            aws.ec2.RouteTableAssociation(f"{name}-{zone}", subnet_id=subnet.id, route_table_id=self.routes.id, opts=child)
            self.subnets[zone] = subnet
        self.node_role = aws.iam.Role(f"{name}-nodes", assume_role_policy=json.dumps({
            "Version": "2012-10-17", "Statement": [{"Effect": "Allow", "Action": "sts:AssumeRole",
                                                    "Principal": {"Service": "ec2.amazonaws.com"}}]}), tags=tags, opts=child)
        self.node_policies = [
            aws.iam.RolePolicyAttachment(f"{name}-{policy}", role=self.node_role.name,
                                         policy_arn=f"arn:aws:iam::aws:policy/{policy}", opts=child)
            for policy in NODE_POLICIES]
        subnet_ids = [s.id for s in self.subnets.values()]
        # Remote pulumi_eks components get plain values (names, ARNs), never resource objects: only their
        # plain outputs are read, and a resource reference crossing into a remote component cannot be
        # checked offline.
        self.cluster_name = args.name
        self.cluster = eks.Cluster(
            # Managed node groups only: no pulumi-eks node security group. Every node (system, GPU, EFA) is in the
            # security group EKS creates for the cluster, which lets its members reach each other on every port.
            name, name=self.cluster_name, vpc_id=self.vpc.id, public_subnet_ids=subnet_ids, skip_default_node_group=True,
            skip_default_security_groups=True,
            version=args.kubernetes_version, create_oidc_provider=True,
            authentication_mode=eks.AuthenticationMode.API,
            access_entries={"nodes": eks.AccessEntryArgs(principal_arn=self.node_role.arn, type=eks.AccessEntryType.EC2_LINUX)},
            opts=pulumi.ResourceOptions(parent=self, providers={"aws": self.provider}, protect=deletion_protection))
        groups = pulumi.ResourceOptions.merge(child, pulumi.ResourceOptions(
            depends_on=[self.cluster, *self.node_policies], delete_before_replace=True, custom_timeouts=POOL_TIMEOUTS))
        self.system_group = aws.eks.NodeGroup(
            f"{name}-system", cluster_name=self.cluster_name, node_role_arn=self.node_role.arn,
            instance_types=["m6i.xlarge"], subnet_ids=subnet_ids, labels={"modelplane.ai/role": "system"},
            scaling_config=aws.eks.NodeGroupScalingConfigArgs(min_size=1, max_size=3, desired_size=2), tags=tags,
            opts=pulumi.ResourceOptions.merge(groups, AUTOSCALED))
        self.gpu_pools = [self._gpu_group(name, pool, groups) for pool in args.pools]
        after_cluster = pulumi.ResourceOptions.merge(child, pulumi.ResourceOptions(depends_on=[self.cluster]))
        pod_identity = aws.eks.Addon(f"{name}-pod-identity", cluster_name=self.cluster_name,
                                     addon_name="eks-pod-identity-agent", opts=after_cluster)
        after_agent = pulumi.ResourceOptions.merge(child, pulumi.ResourceOptions(depends_on=[self.cluster, pod_identity]))
        ebs = self._csi_addon(name, "aws-ebs-csi-driver", "ebs-csi-controller-sa",
                              "arn:aws:iam::aws:policy/service-role/AmazonEBSCSIDriverPolicy", tags, child, after_agent)
        efs = self._csi_addon(name, "aws-efs-csi-driver", "efs-csi-controller-sa",
                              "arn:aws:iam::aws:policy/service-role/AmazonEFSCSIDriverPolicy", tags, child, after_agent)
        self.file_system = self._file_system(name, tags, child)
        autoscaler = None
        if any(p.autoscaled for p in args.pools):
            self.autoscaler_role = self._autoscaler_role(name, tags, child, after_agent)
            autoscaler = autoscaler_values(self.cluster_name, args.region, args.kubernetes_version)
        self.facts = ClusterFacts(
            storage_classes=[
                {"metadata": {"name": RWX_CLASS}, "provisioner": "efs.csi.aws.com",
                 "parameters": {"provisioningMode": "efs-ap", "fileSystemId": self.file_system.id, "directoryPerms": "700"}},
                {"metadata": {"name": BLOCK_CLASS, "annotations": {"storageclass.kubernetes.io/is-default-class": "true"}},
                 "provisioner": "ebs.csi.aws.com", "parameters": {"type": "gp3"}, "volume_binding_mode": "WaitForFirstConsumer"}],
            storage_ready=[ebs, efs, *self.mount_targets],
            autoscaler=autoscaler)
        self.kubeconfig = pulumi.Output.secret(self.cluster.kubeconfig_json)
        self.cluster_identifier = args.name
        self.register_outputs({"kubeconfig": self.kubeconfig, "clusterIdentifier": self.cluster_identifier})

    def _csi_addon(self, name: str, addon: str, service_account: str, policy_arn: str, tags: dict,
                   child: pulumi.ResourceOptions, opts: pulumi.ResourceOptions) -> aws.eks.Addon:
        """An EKS CSI add-on whose controller gets its IAM role through EKS Pod Identity."""
        role = aws.iam.Role(f"{name}-{addon}", assume_role_policy=POD_IDENTITY_TRUST, tags=tags, opts=child)
        attached = aws.iam.RolePolicyAttachment(f"{name}-{addon}", role=role.name, policy_arn=policy_arn, opts=child)
        return aws.eks.Addon(f"{name}-{addon}", cluster_name=self.cluster_name, addon_name=addon,
                             pod_identity_associations=[aws.eks.AddonPodIdentityAssociationArgs(
                                 role_arn=role.arn, service_account=service_account)],
                             opts=pulumi.ResourceOptions.merge(opts, pulumi.ResourceOptions(depends_on=[attached])))

    def _file_system(self, name: str, tags: dict, child: pulumi.ResourceOptions) -> aws.efs.FileSystem:
        """EFS for ReadWriteMany model caches: encrypted, elastic throughput, a mount target per node subnet."""
        group = aws.ec2.SecurityGroup(f"{name}-efs", vpc_id=self.vpc.id, description="NFS from the cluster's VPC",
                                      ingress=[aws.ec2.SecurityGroupIngressArgs(protocol="tcp", from_port=2049, to_port=2049,
                                                                                cidr_blocks=[VPC_CIDR])],
                                      tags=tags, opts=child)
        fs = aws.efs.FileSystem(f"{name}-efs", encrypted=True, throughput_mode="elastic",
                                tags={**tags, "Name": f"{name}-models"}, opts=child)
        self.mount_targets = [aws.efs.MountTarget(f"{name}-efs-{zone}", file_system_id=fs.id, subnet_id=subnet.id,
                                                  security_groups=[group.id], opts=child)
                              for zone, subnet in self.subnets.items()]
        return fs

    def _autoscaler_role(self, name: str, tags: dict, child: pulumi.ResourceOptions, opts: pulumi.ResourceOptions):
        role = aws.iam.Role(f"{name}-cluster-autoscaler", assume_role_policy=POD_IDENTITY_TRUST, tags=tags, opts=child)
        aws.iam.RolePolicy(f"{name}-cluster-autoscaler", role=role.id, policy=json.dumps({
            "Version": "2012-10-17", "Statement": [{"Effect": "Allow", "Action": AUTOSCALER_ACTIONS, "Resource": "*"}]}),
            opts=child)
        aws.eks.PodIdentityAssociation(f"{name}-cluster-autoscaler", cluster_name=self.cluster_name, namespace="kube-system",
                                       service_account=AUTOSCALER_SERVICE_ACCOUNT, role_arn=role.arn, opts=opts)
        return role

    def _gpu_group(self, name: str, pool: GpuPoolArgs, opts: pulumi.ResourceOptions):
        subnets = [self.subnets[z].id for z in pool.zones if z in self.subnets] or [s.id for s in self.subnets.values()]
        if pool.efa:  # EFA instances in one zone, close together
            subnets = subnets[:1]
        minimum = pool_minimum(pool)
        maximum = max(pool.capacity_nodes, minimum, 1)
        capacity_type = "SPOT" if pool.spot else "ON_DEMAND"
        template_args: dict = {"block_device_mappings": [aws.ec2.LaunchTemplateBlockDeviceMappingArgs(
            device_name="/dev/xvda", ebs=aws.ec2.LaunchTemplateBlockDeviceMappingEbsArgs(
                volume_size=pool.disk_size_gb, volume_type="gp3"))]}
        if pool.capacity_reservation_id:  # capacity blocks: the reservation and the capacity-block market
            capacity_type = "CAPACITY_BLOCK"
            template_args["instance_market_options"] = aws.ec2.LaunchTemplateInstanceMarketOptionsArgs(
                market_type="capacity-block")
            template_args["capacity_reservation_specification"] = aws.ec2.LaunchTemplateCapacityReservationSpecificationArgs(
                capacity_reservation_target=aws.ec2.LaunchTemplateCapacityReservationSpecificationCapacityReservationTargetArgs(
                    capacity_reservation_id=pool.capacity_reservation_id))
        child = pulumi.ResourceOptions(parent=self, provider=self.provider)
        if pool.efa:
            group = aws.ec2.PlacementGroup(f"{name}-{pool.name}", strategy="cluster", opts=child)
            template_args["placement"] = aws.ec2.LaunchTemplatePlacementArgs(group_name=group.name)
            template_args["network_interfaces"] = [aws.ec2.LaunchTemplateNetworkInterfaceArgs(
                device_index=0, network_card_index=0, interface_type="efa", delete_on_termination="true",
                # EFA traffic and the node's ordinary traffic share this interface: the cluster security group, as
                # the system nodes (CoreDNS) have, and self-referencing for EFA's all-traffic requirement
                security_groups=[self.cluster.cluster_security_group_id])]
        template = aws.ec2.LaunchTemplate(f"{name}-{pool.name}", **template_args, opts=child)
        return aws.eks.NodeGroup(
            f"{name}-{pool.name}", cluster_name=self.cluster_name, node_role_arn=self.node_role.arn,
            node_group_name=pool.name, ami_type="AL2023_x86_64_NVIDIA",
            instance_types=[pool.instance_type] if pool.instance_type else None,
            capacity_type=capacity_type, subnet_ids=subnets,
            launch_template=aws.eks.NodeGroupLaunchTemplateArgs(id=template.id, version=template.latest_version.apply(str)),
            scaling_config=aws.eks.NodeGroupScalingConfigArgs(min_size=minimum, max_size=maximum,
                                                              desired_size=max(min(pool.node_count, maximum), minimum)),
            labels={"modelplane.ai/pool": pool.name},
            taints=[aws.eks.NodeGroupTaintArgs(key="nvidia.com/gpu", value="true", effect="NO_SCHEDULE")],
            tags={"modelplane.ai/cluster": self.cluster_name, "modelplane.ai/pool": pool.name},
            opts=pulumi.ResourceOptions.merge(opts, AUTOSCALED) if pool.autoscaled else opts)
