"""An EKS InferenceCluster: a VPC with a public subnet per zone, the cluster, a system node
group, and a GPU managed node group per node pool.

The VPC and IAM are plain pulumi_aws resources, so they are visible (and tested) as children;
the cluster is a pulumi_eks component, of which only plain outputs (`kubeconfig_json`,
`node_security_group_id`) are read, and node groups are EKS managed node groups
(pulumi_aws), so every one of their settings is visible offline. GPU groups run the EKS-optimized NVIDIA AMI (AL2023, driver and
toolkit included; the NVIDIA DRA driver advertises devices), carry the `nvidia.com/gpu`
NoSchedule taint and the `modelplane.ai/pool` label, and can use a capacity reservation
(capacity blocks) or EFA where the pool declares them.
"""

from __future__ import annotations

import json

import pulumi
import pulumi_aws as aws
import pulumi_eks as eks

from components.args import ClusterArgs, GpuPoolArgs

TYPE = "modelplane:eks:InferenceCluster"
VPC_CIDR = "10.0.0.0/16"
SUBNET_CIDRS = ["10.0.0.0/20", "10.0.16.0/20", "10.0.32.0/20", "10.0.48.0/20", "10.0.64.0/20", "10.0.80.0/20"]
NODE_POLICIES = ["AmazonEKSWorkerNodePolicy", "AmazonEKS_CNI_Policy", "AmazonEC2ContainerRegistryReadOnly",
                 "AmazonSSMManagedInstanceCore"]


def zones_of(args: ClusterArgs) -> list[str]:
    """Zones of every pool, in order; the region's a, b and c when no pool names any."""
    zones: list[str] = []
    for pool in args.pools:
        for zone in pool.zones:
            if zone not in zones:
                zones.append(zone)
    return zones or [f"{args.region}{letter}" for letter in "abc"]


class EksInferenceCluster(pulumi.ComponentResource):
    """Outputs: kubeconfig (secret), cluster_identifier."""

    def __init__(self, name: str, args: ClusterArgs, opts: pulumi.ResourceOptions | None = None):
        super().__init__(TYPE, name, None, opts)
        child = pulumi.ResourceOptions(parent=self)
        zones = zones_of(args)[: len(SUBNET_CIDRS)]
        tags = {"modelplane.ai/cluster": args.name}
        self.vpc = aws.ec2.Vpc(f"{name}-vpc", cidr_block=VPC_CIDR, enable_dns_hostnames=True, enable_dns_support=True,
                               tags={**tags, "Name": f"{name}-vpc"}, opts=child)
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
        for policy in NODE_POLICIES:
            aws.iam.RolePolicyAttachment(f"{name}-{policy}", role=self.node_role.name,
                                         policy_arn=f"arn:aws:iam::aws:policy/{policy}", opts=child)
        subnet_ids = [s.id for s in self.subnets.values()]
        # Remote pulumi_eks components get plain values (names, ARNs), never resource objects: only their
        # plain outputs are read, and a resource reference crossing into a remote component cannot be
        # checked offline.
        self.cluster_name = args.name
        self.cluster = eks.Cluster(
            name, name=self.cluster_name, vpc_id=self.vpc.id, public_subnet_ids=subnet_ids, skip_default_node_group=True,
            version=args.kubernetes_version, create_oidc_provider=True,
            authentication_mode=eks.AuthenticationMode.API,
            access_entries={"nodes": eks.AccessEntryArgs(principal_arn=self.node_role.arn, type=eks.AccessEntryType.EC2_LINUX)},
            opts=child)
        self.system_group = aws.eks.NodeGroup(
            f"{name}-system", cluster_name=self.cluster_name, node_role_arn=self.node_role.arn,
            instance_types=["m6i.xlarge"], subnet_ids=subnet_ids, labels={"modelplane.ai/role": "system"},
            scaling_config=aws.eks.NodeGroupScalingConfigArgs(min_size=1, max_size=3, desired_size=2), tags=tags,
            opts=pulumi.ResourceOptions(parent=self, depends_on=[self.cluster]))
        self.gpu_groups = [self._gpu_group(name, pool, child) for pool in args.pools]
        self.kubeconfig = pulumi.Output.secret(self.cluster.kubeconfig_json)
        self.cluster_identifier = args.name
        self.register_outputs({"kubeconfig": self.kubeconfig, "clusterIdentifier": self.cluster_identifier})

    def _gpu_group(self, name: str, pool: GpuPoolArgs, opts: pulumi.ResourceOptions):
        subnets = [self.subnets[z].id for z in pool.zones if z in self.subnets] or [s.id for s in self.subnets.values()]
        if pool.efa:  # EFA instances in one zone, close together
            subnets = subnets[:1]
        minimum = pool.min_nodes if pool.min_nodes is not None else pool.node_count
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
        if pool.efa:
            group = aws.ec2.PlacementGroup(f"{name}-{pool.name}", strategy="cluster", opts=opts)
            template_args["placement"] = aws.ec2.LaunchTemplatePlacementArgs(group_name=group.name)
            template_args["network_interfaces"] = [aws.ec2.LaunchTemplateNetworkInterfaceArgs(
                device_index=0, network_card_index=0, interface_type="efa", delete_on_termination="true",
                security_groups=[self.cluster.node_security_group_id])]
        template = aws.ec2.LaunchTemplate(f"{name}-{pool.name}", **template_args, opts=opts)
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
            opts=pulumi.ResourceOptions.merge(opts, pulumi.ResourceOptions(depends_on=[self.cluster])))
