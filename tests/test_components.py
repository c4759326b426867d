"""Pulumi components under the mock runtime: what each registers, its parents and key inputs."""

import pathlib

import pulumi
import pytest
import yaml

from automation.checks.offline import OfflineRunError, is_secret, run
from components.args import cluster_args
from components.eks import EksInferenceCluster
from components.existing import ExistingInferenceCluster
from components.gke import GkeInferenceCluster
from components.kubernetes import provider
from components.serving_stack import ServingStack
from fleet.validate import load_fleet
from components.platform import platform
from tests.pulumi_mocks import inputs, named, of_type, registered

ROOT = pathlib.Path(__file__).resolve().parent.parent


@pytest.fixture(scope="module")
def example_fleet():
    return load_fleet([str(ROOT / "examples")]).fleet


def fleet_of(name: str):
    loaded = load_fleet([str(ROOT / "stacks" / "fleets" / name)])
    assert not loaded.errors
    return loaded.fleet


def test_gke_cluster_and_gpu_pools():
    fleet = fleet_of("gcp-dev")
    args = cluster_args(fleet, "dev-us-central")
    seen = []

    async def program():
        cluster = GkeInferenceCluster("dev-us-central", args, deletion_protection=False)
        seen.append(await cluster.kubeconfig.is_secret())
        seen.append("gke-gcloud-auth-plugin" in await cluster.kubeconfig.future())

    resources = registered(program)
    assert seen == [True, True]
    component = named(resources, "dev-us-central", "modelplane:gke:InferenceCluster")
    assert component.parent is None
    children = [r for r in resources if r.parent == "dev-us-central"]
    assert {r.type for r in children} == {"gcp:compute/network:Network", "gcp:compute/subnetwork:Subnetwork",
                                          "gcp:container/cluster:Cluster", "gcp:container/nodePool:NodePool",
                                          "pulumi:providers:gcp"}
    gcp_provider = inputs(named(resources, "dev-us-central-gcp"))
    assert gcp_provider["project"] == "my-gcp-project" and gcp_provider["region"] == "us-central1"
    assert all(r.provider == "dev-us-central-gcp" for r in children if r.type.startswith("gcp:"))
    cluster = inputs(of_type(resources, "gcp:container/cluster:Cluster")[0])
    assert cluster["removeDefaultNodePool"] is True and cluster["location"] == "us-central1"
    assert cluster["minMasterVersion"] == "1.35" and cluster["deletionProtection"] is False
    pool = inputs(named(resources, "dev-us-central-l4"))
    config = pool["nodeConfig"]
    assert config["machineType"] == "g2-standard-8" and config["spot"] is True
    # GKE's DRA guide: no automatic driver installation, no GKE device plugin
    assert config["guestAccelerators"] == [{"type": "nvidia-l4", "count": 1,
                                            "gpuDriverInstallationConfig": {"gpuDriverVersion": "INSTALLATION_DISABLED"}}]
    assert config["labels"] == {"modelplane.ai/pool": "l4", "gke-no-default-nvidia-gpu-device-plugin": "true",
                                "nvidia.com/gpu.present": "true"}
    assert config["taints"] == [{"key": "nvidia.com/gpu", "value": "present", "effect": "NO_SCHEDULE"}]
    assert pool["autoscaling"] == {"totalMinNodeCount": 0, "totalMaxNodeCount": 4, "locationPolicy": "ANY"}
    assert pool["nodeLocations"] == ["us-central1-a"] and "nodeCount" not in pool
    assert named(resources, "dev-us-central-system")


def test_gke_fixed_size_pool_and_default_deletion_protection(example_fleet):
    args = cluster_args(example_fleet, "gke-us-central")
    resources = registered(lambda: GkeInferenceCluster("gke-us-central", args))
    assert inputs(of_type(resources, "gcp:container/cluster:Cluster")[0])["deletionProtection"] is True
    pool = inputs(named(resources, "gke-us-central-l4"))
    assert pool["autoscaling"]["totalMaxNodeCount"] == 4 and pool["initialNodeCount"] == 1
    assert pool["nodeConfig"]["diskSizeGb"] == 200


def test_eks_cluster_vpc_and_gpu_node_groups():
    fleet = fleet_of("aws-prod")
    args = cluster_args(fleet, "prod-us-east")
    resources = registered(lambda: EksInferenceCluster("prod-us-east", args))
    component = named(resources, "prod-us-east", "modelplane:eks:InferenceCluster")
    assert component.parent is None and all(r.parent == "prod-us-east" for r in resources if r is not component)
    subnets = of_type(resources, "aws:ec2/subnet:Subnet")
    assert sorted(inputs(s)["availabilityZone"] for s in subnets) == ["us-east-2a", "us-east-2b"]
    eks = [r for r in resources if r.type == "eks:index:Cluster"][0]
    assert eks.custom is False and inputs(eks)["skipDefaultNodeGroup"] is True and inputs(eks)["version"] == "1.34"
    h100 = inputs(named(resources, "prod-us-east-h100", "aws:eks/nodeGroup:NodeGroup"))
    assert h100["amiType"] == "AL2023_x86_64_NVIDIA" and h100["instanceTypes"] == ["p5.48xlarge"]
    assert h100["capacityType"] == "CAPACITY_BLOCK"
    assert h100["scalingConfig"] == {"minSize": 2, "maxSize": 2, "desiredSize": 2}
    assert h100["labels"] == {"modelplane.ai/pool": "h100"}
    assert h100["taints"] == [{"key": "nvidia.com/gpu", "value": "true", "effect": "NO_SCHEDULE"}]
    assert h100["clusterName"] == "prod-us-east" and len(h100["subnetIds"]) == 1
    template = inputs(named(resources, "prod-us-east-h100", "aws:ec2/launchTemplate:LaunchTemplate"))
    assert template["capacityReservationSpecification"]["capacityReservationTarget"] == {
        "capacityReservationId": "cr-0a1b2c3d4e5f60718"}
    assert template["instanceMarketOptions"] == {"marketType": "capacity-block"}
    assert template["networkInterfaces"][0]["interfaceType"] == "efa"
    # the EFA interface is the node's only one: it carries the cluster security group the system nodes (CoreDNS) are
    # in, never pulumi-eks' node security group (which it does not create: managed node groups only)
    assert template["networkInterfaces"][0]["securityGroups"] == ["sg-0cluster"]
    assert inputs(eks)["skipDefaultSecurityGroups"] is True
    assert inputs(of_type(resources, "aws:ec2/placementGroup:PlacementGroup")[0])["strategy"] == "cluster"
    l4 = inputs(named(resources, "prod-us-east-l4", "aws:eks/nodeGroup:NodeGroup"))
    assert l4["scalingConfig"] == {"minSize": 1, "maxSize": 6, "desiredSize": 2} and l4["capacityType"] == "ON_DEMAND"
    attachments = of_type(resources, "aws:iam/rolePolicyAttachment:RolePolicyAttachment")
    assert len(attachments) == 6  # the node role's four, and one each for the EBS and EFS CSI drivers' roles
    # node groups outlive their role's policies on destroy, are replaced delete-first (fixed names), and their
    # desired size belongs to the autoscaler once created (where it scales them)
    node_policies = {a.name for a in attachments if "CSI" not in inputs(a)["policyArn"]}
    for group in of_type(resources, "aws:eks/nodeGroup:NodeGroup"):
        assert node_policies <= set(group.depends_on) and group.options["deleteBeforeReplace"] is True
        assert group.options["customTimeouts"]["create"] == "60m"
    assert named(resources, "prod-us-east-l4", "aws:eks/nodeGroup:NodeGroup").options["ignoreChanges"] == ["scalingConfig.desiredSize"]
    assert "ignoreChanges" not in named(resources, "prod-us-east-h100", "aws:eks/nodeGroup:NodeGroup").options
    aws_provider = inputs(named(resources, "prod-us-east-aws"))
    assert aws_provider["region"] == "us-east-2"
    assert all(r.provider == "prod-us-east-aws" for r in resources if r.type.startswith("aws:"))
    assert eks.providers == {"aws": "prod-us-east-aws"}
    assert named(resources, "prod-us-east-vpc").options["protect"] is True and eks.options["protect"] is True
    addons = {inputs(a)["addonName"] for a in of_type(resources, "aws:eks/addon:Addon")}
    assert addons == {"eks-pod-identity-agent", "aws-ebs-csi-driver", "aws-efs-csi-driver"}
    assert len(of_type(resources, "aws:efs/mountTarget:MountTarget")) == 2
    assert of_type(resources, "aws:eks/podIdentityAssociation:PodIdentityAssociation")  # cluster-autoscaler (l4 can grow)


def test_existing_cluster_provisions_nothing_and_keeps_the_kubeconfig_secret():
    fleet = fleet_of("existing")
    args = cluster_args(fleet, "onprem")
    checks = []

    async def program():
        cluster = ExistingInferenceCluster("onprem", args, "apiVersion: v1\nkind: Config\n")
        provider("onprem", cluster.kubeconfig, parent=cluster)
        checks.append(await cluster.kubeconfig.is_secret())  # secret even when given as plain text

    resources = registered(program)
    assert [r.type for r in resources] == ["modelplane:existing:InferenceCluster", "pulumi:providers:kubernetes"]
    prov = resources[1]
    assert prov.parent == "onprem" and is_secret(prov.inputs["kubeconfig"])
    assert prov.inputs["clusterIdentifier"] == "onprem" and prov.inputs["enableServerSideApply"] == "true"
    assert checks == [True]


def test_serving_stack_releases_crds_and_gateway(example_fleet):
    args = cluster_args(example_fleet, "gke-us-central").model_copy(update={"dynamo": True})  # a Dynamo replica there

    def program():
        ServingStack("gke-serving", args, provider("gke-us-central", "kubeconfig"), versions={"keda": "2.99.0"})

    resources = registered(program)
    releases = {inputs(r)["name"]: inputs(r) for r in of_type(resources, "kubernetes:helm.sh/v3:Release")}
    assert set(releases) == {"mp-cert-manager", "mp-envoy-gateway-crds", "mp-envoy-gateway", "mp-ai-gateway-crds",
                             "mp-ai-gateway", "mp-lws", "mp-node-feature-discovery", "mp-nvidia-dra-driver", "mp-keda",
                             "mp-prometheus", "mp-dynamo"}
    # Envoy Gateway calls the Envoy AI Gateway controller to serve InferencePool backends
    manager = releases["mp-envoy-gateway"]["values"]["config"]["envoyGateway"]["extensionManager"]
    assert manager["backendResources"] == [{"group": "inference.networking.k8s.io", "kind": "InferencePool", "version": "v1"}]
    assert manager["service"]["fqdn"] == {"hostname": "ai-gateway-controller.envoy-ai-gateway-system.svc.cluster.local",
                                          "port": 1063}
    assert manager["hooks"]["xdsTranslator"]["post"] == ["Translation", "Cluster", "Route"]
    assert releases["mp-envoy-gateway"]["skipCrds"] is True  # its CRDs come from its CRD chart and the bundled files
    assert releases["mp-envoy-gateway-crds"]["values"]["crds"]["gatewayAPI"]["enabled"] is False
    assert releases["mp-nvidia-dra-driver"]["createNamespace"] is False  # its namespace and quota come first
    assert all(r["timeout"] == 1200 for r in releases.values())
    assert releases["mp-keda"]["version"] == "2.99.0"  # overridable per stack
    assert releases["mp-lws"]["chart"] == "oci://registry.k8s.io/lws/charts/lws" and releases["mp-lws"]["version"] == "0.10.0"
    assert releases["mp-cert-manager"]["repositoryOpts"] == {"repo": "https://charts.jetstack.io"}
    dra = releases["mp-nvidia-dra-driver"]["values"]
    assert dra["nvidiaDriverRoot"] == "/home/kubernetes/bin/nvidia" and dra["gpuResourcesEnabledOverride"] is True
    assert releases["mp-node-feature-discovery"]["values"]["worker"]["tolerations"][0]["key"] == "nvidia.com/gpu"
    crds = inputs(of_type(resources, "kubernetes:yaml/v2:ConfigGroup")[0])["objs"]
    assert sorted(c["metadata"]["name"] for c in crds) == [
        "backendtlspolicies.gateway.networking.k8s.io", "gatewayclasses.gateway.networking.k8s.io",
        "gateways.gateway.networking.k8s.io", "grpcroutes.gateway.networking.k8s.io",
        "httproutes.gateway.networking.k8s.io", "inferencemodelrewrites.llm-d.ai", "inferenceobjectives.inference.networking.x-k8s.io",
        "inferenceobjectives.llm-d.ai", "inferencepools.inference.networking.k8s.io",
        "referencegrants.gateway.networking.k8s.io", "tlsroutes.gateway.networking.k8s.io"]
    gateway = inputs(of_type(resources, "kubernetes:gateway.networking.k8s.io/v1:Gateway")[0])
    assert gateway["metadata"]["name"] == "inference-gateway" and gateway["metadata"]["namespace"] == "modelplane-system"
    assert gateway["spec"]["listeners"][0]["allowedRoutes"] == {"namespaces": {"from": "All"}}
    assert of_type(resources, "kubernetes:core/v1:ResourceQuota")  # GKE only
    assert all(r.parent == "gke-serving" for r in resources if r.type.startswith("kubernetes:"))


def test_dynamo_platform_only_where_a_dynamo_replica_is_not_wherever_an_nvidia_pool_is():
    fleet = load_fleet([str(ROOT / "tests" / "data" / "reference" / "concepts.yaml")]).fleet
    args = cluster_args(fleet, "aks-westeurope")
    assert any(p.nvidia for p in args.pools) and not args.dynamo
    resources = registered(lambda: ServingStack("s", args, provider("c", "k")))
    names = {inputs(r)["name"] for r in of_type(resources, "kubernetes:helm.sh/v3:Release")}
    assert "mp-dynamo" not in names and "mp-lws" in names
    assert not of_type(resources, "kubernetes:core/v1:ResourceQuota")  # not GKE


@pytest.mark.parametrize("stack,expected_types", [
    ("gcp-dev", {"modelplane:gke:InferenceCluster", "modelplane:cluster:ServingStack", "modelplane:fleet:Gateway"}),
    ("aws-prod", {"modelplane:eks:InferenceCluster", "modelplane:cluster:ServingStack"}),
    ("existing", {"modelplane:existing:InferenceCluster", "modelplane:cluster:ServingStack", "modelplane:fleet:Gateway"}),
])
def test_example_stacks_run_the_platform_program(stack, expected_types, monkeypatch):
    """As `pulumi up` runs it: the working directory is `main` (infra/), config paths are relative to the root."""
    monkeypatch.chdir(ROOT / "infra")
    config = yaml.safe_load((ROOT / "stacks" / f"Pulumi.{stack}.yaml").read_text())["config"]
    config = {k: v for k, v in config.items() if k.startswith("modelplane:")}
    secrets = {"modelplane:onprem-kubeconfig": "apiVersion: v1\nkind: Config\n"} if stack == "existing" else {}
    from components.platform import main
    resources = run(main, "modelplane", stack, {**config, **secrets}, list(secrets), root_directory=str(ROOT))
    types = {r.type for r in resources}
    assert expected_types <= types
    if stack == "existing":
        assert not [t for t in types if t.startswith(("gcp:", "aws:", "eks:"))]
        assert "kubernetes:metallb.io/v1beta1:IPAddressPool" in types


def test_config_paths_resolve_against_the_project_root_not_the_working_directory(tmp_path, monkeypatch):
    """Regression: the CLI starts the program in infra/, where `stacks/fleets/...` does not exist."""
    from components.platform import main

    (tmp_path / "Pulumi.yaml").write_text("name: modelplane-platform\nruntime: python\n")
    (tmp_path / "fleet").mkdir()
    (tmp_path / "fleet" / "fleet.yaml").write_text((ROOT / "stacks" / "fleets" / "existing" / "fleet.yaml").read_text())
    monkeypatch.chdir(ROOT / "infra")
    config = {"modelplane:fleet": "fleet", "modelplane:onprem-kubeconfig": "apiVersion: v1\nkind: Config\n"}
    resources = run(main, "modelplane", "s", config, ["modelplane:onprem-kubeconfig"], root_directory=str(tmp_path))
    assert named(resources, "onprem", "modelplane:existing:InferenceCluster")
    other = tmp_path / "other"
    other.mkdir()
    (other / "Pulumi.yaml").write_text("name: modelplane-platform\nruntime: python\n")
    monkeypatch.chdir(tmp_path)  # holds fleet/, but the working directory is never what paths resolve against
    with pytest.raises(OfflineRunError, match="other/fleet: no such file"):
        run(main, "modelplane", "s", config, ["modelplane:onprem-kubeconfig"], root_directory=str(other))


def test_platform_outputs_keep_kubeconfigs_secret(example_fleet):
    seen = []

    async def program():
        outputs = platform(example_fleet, pulumi.Config("modelplane"))
        seen.append(sorted(outputs))
        for value in outputs.values():
            if "kubeconfig" in value:
                seen.append(await value["kubeconfig"].is_secret())

    resources = registered(program, "all", {"modelplane:byo-eu-kubeconfig": "apiVersion: v1"}, ["modelplane:byo-eu-kubeconfig"])
    providers = of_type(resources, "pulumi:providers:kubernetes")
    # the fleet gateway uses its host's provider (the first cluster by name that can host it): one owner per object
    # (and each cluster's adopting provider of the shared CRDs alone: components/crds.py)
    assert {p.name for p in providers} == {f"{c}-k8s{crds}" for c in ("gke-us-central", "eks-us-west", "byo-eu")
                                           for crds in ("", "-crds")}
    traefik = named(resources, "fleet-gateway-traefik")
    assert traefik.provider == "eks-us-west-k8s" and "eks-us-west-serving-system" in traefik.depends_on  # a cloud LB host, first by name
    assert all(is_secret(p.inputs["kubeconfig"]) for p in providers)
    assert seen == [["byo-eu", "eks-us-west", "gateway", "gke-us-central"], True, True, True]


def test_missing_existing_kubeconfig_is_one_clear_error(example_fleet):
    from automation.checks.offline import OfflineRunError
    with pytest.raises(OfflineRunError, match=r"InferenceCluster/byo-eu: no kubeconfig; give a v1/Secret modelplane-system/byo-eu-kubeconfig"):
        registered(lambda: platform(example_fleet, pulumi.Config("modelplane")), "x", {"modelplane:cluster": "byo-eu"})


def test_several_stacks_in_one_process_are_stable(example_fleet):
    """Regression: resource references passed into remote components made consecutive mock runs hang."""
    for _ in range(2):
        for cluster in ("eks-us-west", "gke-us-central"):
            assert registered(lambda: platform(example_fleet, pulumi.Config("modelplane")), f"p-{cluster}",
                              {"modelplane:cluster": cluster})


def test_deletion_order_is_explicit(example_fleet):
    """Pulumi deletes in reverse dependency order: what waits for something is deleted before it."""
    resources = registered(lambda: platform(example_fleet, pulumi.Config("modelplane")), "p", {"modelplane:cluster": "gke-us-central"})
    deps = {(r.type, r.name): set(r.depends_on) for r in resources}
    gateway = deps[("kubernetes:gateway.networking.k8s.io/v1:Gateway", "gke-us-central-serving-gateway")]
    assert {"gke-us-central-serving-crds", "gke-us-central-serving-envoy-gateway"} <= gateway  # CRDs outlive their CRs
    for release in of_type(resources, "kubernetes:helm.sh/v3:Release"):
        assert "gke-us-central-l4" in deps[(release.type, release.name)]  # the serving stack goes before the GPU pools
    crds = deps[("kubernetes:yaml/v2:ConfigGroup", "gke-us-central-serving-crds")]
    assert "gke-us-central-l4" in crds
    # the Kubernetes provider is built from the cluster's kubeconfig: everything on it goes before the cluster
    provider_deps = deps[("pulumi:providers:kubernetes", "gke-us-central-k8s")]
    assert "gke-us-central" in provider_deps


@pytest.mark.parametrize("pool,expected", [
    # fleet totals -> what GKE is told (node_count and initial_node_count are per zone; total_* are totals)
    ({"node_count": 4, "zones": ["a", "b"]}, {"node_count": 2}),
    ({"node_count": 3, "zones": []}, {"autoscaling": {"total_min_node_count": 3, "total_max_node_count": 3,
                                                     "location_policy": "BALANCED"}}),
    ({"node_count": 3, "min_nodes": 1, "max_nodes": 8, "zones": ["a", "b"]},
     {"initial_node_count": 2, "autoscaling": {"total_min_node_count": 1, "total_max_node_count": 8, "location_policy": "ANY"}}),
])
def test_gke_counts_are_translated_from_totals(pool, expected):
    from components.args import GpuPoolArgs
    from components.gke import pool_sizing

    assert pool_sizing(GpuPoolArgs(name="p", class_name="c", **pool)) == expected


def test_gke_pools_are_never_replaced_for_a_count_change(example_fleet):
    args = cluster_args(example_fleet, "gke-us-central")
    resources = registered(lambda: GkeInferenceCluster("gke-us-central", args, project="p-1234"))
    pool = named(resources, "gke-us-central-l4")
    assert "initialNodeCount" in pool.options["ignoreChanges"]  # initialNodeCount forces replacement
    assert pool.options["customTimeouts"] == {"create": "60m", "update": "60m", "delete": "60m"}
    cluster = of_type(resources, "gcp:container/cluster:Cluster")[0]
    assert cluster.options["protect"] is True and named(resources, "gke-us-central-vpc").options["protect"] is True
    assert inputs(cluster)["addonsConfig"]["gcpFilestoreCsiDriverConfig"] == {"enabled": True}


def test_eks_control_plane_gets_two_zones_even_when_every_pool_sits_in_one(example_fleet):
    from components.eks import zones_of

    args = cluster_args(example_fleet, "eks-us-west")
    one_zone = args.model_copy(update={"pools": [p.model_copy(update={"zones": ["us-west-2c"]}) for p in args.pools]})
    assert zones_of(one_zone) == ["us-west-2c", "us-west-2a"]
    resources = registered(lambda: EksInferenceCluster("eks-us-west", one_zone))
    subnets = sorted(inputs(s)["availabilityZone"] for s in of_type(resources, "aws:ec2/subnet:Subnet"))
    assert subnets == ["us-west-2a", "us-west-2c"]
    h100 = inputs(named(resources, "eks-us-west-h100", "aws:eks/nodeGroup:NodeGroup"))
    assert len(h100["subnetIds"]) == 1  # the pool itself stays in its zone


@pytest.mark.parametrize("version, tag, dra", [
    ("1.36", "v1.36.1", True),   # the EKS default minor
    ("1.34", "v1.34.5", True),
    ("1.32", "v1.32.1", True),   # the first release with the DRA flag
    ("1.31", "v1.31.1", False),  # no such flag: passing it would stop the autoscaler at start
    ("1.99", None, True),        # a minor without a pinned tag keeps the chart's image (validate warns)
])
def test_eks_cluster_autoscaler_image_follows_the_control_plane_minor_with_dra_on(version, tag, dra):
    from components.eks import autoscaler_values

    values = autoscaler_values("c", "us-west-2", version)
    assert values.get("image") == ({"repository": "registry.k8s.io/autoscaling/cluster-autoscaler", "tag": tag}
                                   if tag else None)
    assert values["extraArgs"].get("enable-dynamic-resource-allocation") is (True if dra else None)


def test_eks_dra_pool_autoscales_from_one_node_with_a_pinned_dra_autoscaler(tmp_path, capsys):
    """The example's EKS H100 pool (DRA devices) asking to scale from zero: the platform stack installs
    cluster-autoscaler of the cluster's minor with DRA on, and the node group keeps one node, because the
    autoscaler cannot build a DRA template from zero nodes; `validate` says so. Before: the chart's image, no DRA
    flag, a minimum of zero (the example itself now asks for one)."""
    from automation.cli import main

    folder = tmp_path / "platform"
    folder.mkdir()
    for source in (ROOT / "examples" / "platform").glob("*.yaml"):
        (folder / source.name).write_text(source.read_text().replace(
            "minNodeCount: 1  # a DRA pool on EKS", "minNodeCount: 0  # a DRA pool on EKS"))
    loaded = load_fleet([str(folder)])
    assert not loaded.errors
    assert cluster_args(loaded.fleet, "eks-us-west").pools[0].min_nodes == 0
    resources = registered(lambda: platform(loaded.fleet, pulumi.Config("modelplane")), "platform-eks-us-west",
                           {"modelplane:cluster": "eks-us-west", "modelplane:gateway": "false"})
    h100 = inputs(named(resources, "eks-us-west-h100", "aws:eks/nodeGroup:NodeGroup"))
    assert h100["scalingConfig"]["minSize"] == 1 and h100["scalingConfig"]["maxSize"] == 4
    release = next(inputs(r) for r in of_type(resources, "kubernetes:helm.sh/v3:Release")
                   if inputs(r)["name"] == "mp-cluster-autoscaler")
    version = cluster_args(loaded.fleet, "eks-us-west").kubernetes_version
    assert release["values"]["image"]["tag"].startswith(f"v{version}.")
    assert release["values"]["extraArgs"]["enable-dynamic-resource-allocation"] is True
    assert main(["validate", "-f", str(folder)]) == 0
    err = capsys.readouterr().err
    assert "eks-us-west" in err and "cannot grow a DRA pool from zero nodes" in err
    assert main(["validate", "-f", str(ROOT / "examples" / "platform")]) == 0  # the example as shipped: no warning
    assert "cannot grow a DRA pool" not in capsys.readouterr().err


def test_every_cluster_source_has_a_cluster_component():
    """The platform program makes each InferenceCluster source's cluster from one registry (components/clusters.py),
    and each of them is an InferenceClusterComponent (kubeconfig, identifier, facts, GPU pools)."""
    import importlib
    import inspect
    from typing import get_args

    from components.clusters import CLUSTERS
    from components.inference_cluster import InferenceClusterComponent
    from fleet.api.cluster import Source

    assert sorted(CLUSTERS) == sorted(get_args(Source))
    for path in (ROOT / "components").glob("*.py"):
        module = importlib.import_module(f"components.{path.stem}")
        for name, cls in inspect.getmembers(module, inspect.isclass):
            if name.endswith("InferenceCluster") and cls.__module__ == module.__name__:
                assert issubclass(cls, InferenceClusterComponent), name
