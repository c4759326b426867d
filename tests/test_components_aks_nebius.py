"""AKS and Nebius clusters under the mock runtime: GPU pools as the manifests say, secret kubeconfigs,
the serving stack through a provider built from them, and every stack passing the deployability check."""

from __future__ import annotations

import pathlib

import pytest
import yaml

from automation.checks.deployability import check_fleet
from automation.checks.offline import is_secret
from automation.checks.offline_preview import all_stacks
from components.args import cluster_args
from fleet.validate import load_fleet
from components.platform import platform
from tests.manifests import errors, gpu_class
from tests.pulumi_mocks import inputs, named, of_type, registered

ROOT = pathlib.Path(__file__).resolve().parent.parent
CONCEPTS = ROOT / "tests" / "data" / "reference" / "concepts.yaml"


@pytest.fixture(scope="module")
def concepts():
    return load_fleet([str(CONCEPTS)]).fleet


def _platform(fleet, cluster: str):
    import pulumi

    return registered(lambda: platform(fleet, pulumi.Config("modelplane")), f"platform-{cluster}",
                      {"modelplane:cluster": cluster, "modelplane:gateway": "false"})


def test_aks_cluster_gpu_pool_and_serving_stack(concepts):
    resources = _platform(concepts, "aks-westeurope")
    provider = named(resources, "aks-westeurope-azure", "pulumi:providers:azure-native")
    assert inputs(provider)["location"] == "westeurope"
    assert all(r.provider == "aks-westeurope-azure" for r in resources if r.type.startswith("azure-native:"))
    cluster = inputs(of_type(resources, "azure-native:containerservice:ManagedCluster")[0])
    assert cluster["location"] == "westeurope" and cluster["kubernetesVersion"] == "1.34"
    assert cluster["networkProfile"]["networkPluginMode"] == "overlay"
    assert cluster["agentPoolProfiles"][0]["vmSize"] == "Standard_D4s_v5"
    pool = inputs(named(resources, "aks-westeurope-gpuh100", "azure-native:containerservice:AgentPool"))
    assert pool["vmSize"] == "Standard_ND96isr_H100_v5" and pool["count"] == 1 and pool["mode"] == "User"
    assert pool["nodeTaints"] == ["nvidia.com/gpu=true:NoSchedule"]
    assert pool["nodeLabels"] == {"modelplane.ai/pool": "gpuh100"} and pool["availabilityZones"] == ["1"]
    assert pool["gpuProfile"] == {"driver": "Install"} and pool["enableAutoScaling"] is False
    k8s = named(resources, "aks-westeurope-k8s", "pulumi:providers:kubernetes")
    assert is_secret(k8s.inputs["kubeconfig"]) and inputs(k8s)["kubeconfig"].startswith("apiVersion: v1")
    releases = [r for r in of_type(resources, "kubernetes:helm.sh/v3:Release")]
    assert releases and all(r.provider == "aks-westeurope-k8s" for r in releases)
    storage = inputs(named(resources, "aks-westeurope-serving-modelplane-rwx-fs"))
    assert storage["provisioner"] == "file.csi.azure.com" and storage["parameters"] == {"skuName": "Premium_LRS"}
    dra = next(inputs(r) for r in releases if inputs(r)["name"] == "mp-nvidia-dra-driver")
    assert "nvidiaDriverRoot" not in dra["values"]  # AKS installs the driver on the host (root /)


def test_aks_autoscaled_spot_pool(tmp_path):
    fleet = _fleet(tmp_path, "AKS", {"aks": {"location": "eastus"}},
                   {"provider": "AKS", "aks": {"vmSize": "Standard_NC24ads_A100_v4"}},
                   {"name": "a100", "nodeCount": 1, "minNodeCount": 0, "maxNodeCount": 4, "spot": True,
                    "zones": ["eastus-1", "eastus-2"]})
    resources = _platform(fleet, "c1")
    pool = named(resources, "c1-a100", "azure-native:containerservice:AgentPool")
    values = inputs(pool)
    assert (values["enableAutoScaling"], values["minCount"], values["maxCount"]) == (True, 0, 4)
    assert values["scaleSetPriority"] == "Spot" and values["availabilityZones"] == ["1", "2"]
    assert pool.options["ignoreChanges"] == ["count"]  # the autoscaler owns it


def test_nebius_cluster_gpu_groups_and_infiniband(tmp_path):
    fleet = _fleet(tmp_path, "Nebius", {"nebius": {"projectId": "project-e00abc"}},
                   {"provider": "Nebius", "nebius": {"platform": "gpu-h100-sxm", "preset": "8gpu-128vcpu-1600gb"}},
                   {"name": "h100", "nodeCount": 2, "fabric": {"type": "InfiniBand", "infiniband": {"fabric": "fabric-3"}}},
                   gpus=8)
    resources = _platform(fleet, "c1")
    provider = named(resources, "c1-nebius", "pulumi:providers:nebius")
    assert inputs(provider)["parentId"] == "project-e00abc"
    assert all(r.provider == "c1-nebius" for r in resources if r.type.startswith("nebius:"))
    gpu_cluster = inputs(named(resources, "c1-fabric-3", "nebius:index/computeV1GpuCluster:ComputeV1GpuCluster"))
    assert gpu_cluster["infinibandFabric"] == "fabric-3"
    group = inputs(named(resources, "c1-h100", "nebius:index/mk8sV1NodeGroup:Mk8sV1NodeGroup"))
    template = group["template"]
    assert template["resources"] == {"platform": "gpu-h100-sxm", "preset": "8gpu-128vcpu-1600gb"}
    assert group["fixedNodeCount"] == 2 and "autoscaling" not in group
    assert template["taints"] == [{"key": "nvidia.com/gpu", "value": "true", "effect": "NO_SCHEDULE"}]
    assert template["gpuSettings"] == {"dra": True, "driversPreset": "cuda13.0"}
    assert template["gpuCluster"]["id"]  # joined to the fabric's GPU cluster
    assert template["metadata"]["labels"] == {"modelplane.ai/pool": "h100"}
    k8s = named(resources, "c1-k8s", "pulumi:providers:kubernetes")
    kubeconfig = inputs(k8s)["kubeconfig"]
    assert is_secret(k8s.inputs["kubeconfig"]) and "server: https://127.0.0.1:1" in kubeconfig
    assert "command: nebius" in kubeconfig and "BEGIN CERTIFICATE" not in kubeconfig  # base64, as kubectl expects
    assert of_type(resources, "kubernetes:helm.sh/v3:Release")


def test_nebius_autoscaled_group_and_project_from_stack_config(tmp_path):
    import pulumi

    fleet = _fleet(tmp_path, "Nebius", {"nebius": {}},
                   {"provider": "Nebius", "nebius": {"platform": "gpu-l40s-a", "preset": "1gpu-8vcpu-32gb"}},
                   {"name": "l40s", "nodeCount": 0, "maxNodeCount": 3, "spot": True})
    resources = registered(lambda: platform(fleet, pulumi.Config("modelplane")), "platform-c1",
                           {"modelplane:cluster": "c1", "modelplane:gateway": "false", "nebius:parentId": "project-e00xyz"})
    assert inputs(named(resources, "c1-nebius", "pulumi:providers:nebius"))["parentId"] == "project-e00xyz"
    group = inputs(named(resources, "c1-l40s", "nebius:index/mk8sV1NodeGroup:Mk8sV1NodeGroup"))
    assert group["autoscaling"] == {"minNodeCount": 0, "maxNodeCount": 3} and "preemptible" in group["template"]


def test_reference_aks_and_nebius_examples_preview_and_pass_the_check(concepts):
    previews = {p.name: p for p in all_stacks(concepts)}
    for name, types in (("platform-aks-westeurope", {"azure-native:containerservice:ManagedCluster",
                                                     "azure-native:containerservice:AgentPool"}),
                        ("platform-nebius-eu-north", {"nebius:index/mk8sV1Cluster:Mk8sV1Cluster",
                                                      "nebius:index/mk8sV1NodeGroup:Mk8sV1NodeGroup"})):
        preview = previews[name]
        assert preview.error is None, preview.error
        registered_types = {r.type for r in preview.resources}
        assert types | {"modelplane:cluster:ServingStack", "kubernetes:helm.sh/v3:Release"} <= registered_types
    violations = [str(v) for v in check_fleet(concepts, list(previews.values()))]
    assert not [v for v in violations if v.startswith(("platform-aks-westeurope", "platform-nebius-eu-north"))]


@pytest.mark.parametrize("provider,block,error", [
    ("AKS", {"vmSize": "Standard_ND96isr_H100_v5"}, None),
    ("AKS", {"vmSize": "Standard_NC24ads_A100_v4"}, "Standard_NC24ads_A100_v4 carries 1 GPU(s) per node, but the class's devices publish 8"),
    ("Nebius", {"platform": "gpu-h100-sxm", "preset": "8gpu-128vcpu-1600gb"}, None),
    ("Nebius", {"platform": "gpu-h100-sxm", "preset": "1gpu-16vcpu-200gb"}, "carries 1 GPU(s) per node, but the class's devices publish 8"),
])
def test_vm_sizes_and_presets_must_carry_the_class_gpus(provider, block, error):
    icl = gpu_class("c", count=8, product="NVIDIA H100 80GB HBM3")
    icl["spec"]["provisioning"] = {"provider": provider, provider.lower(): block}
    found = errors(icl)
    assert (found == []) if error is None else any(error in f for f in found), found


def test_aks_pool_names_follow_azure_rules():
    from tests.manifests import cluster

    ic = cluster(pools=(("gpu-h100", "c", 1),))
    ic["spec"]["cluster"] = {"source": "AKS", "aks": {"location": "westeurope"}}
    icl = gpu_class("c")
    icl["spec"]["provisioning"] = {"provider": "AKS", "aks": {"vmSize": "Standard_NC24ads_A100_v4"}}
    assert any("AKS node pool names are 1 to 12 lowercase letters" in e for e in errors(icl, ic))


def _fleet(tmp_path, source: str, block: dict, provisioning: dict, pool: dict, gpus: int = 1):
    from tests.manifests import cluster

    icl = gpu_class("g", count=gpus)
    icl["spec"]["provisioning"] = provisioning
    ic = cluster(pools=((pool["name"], "g", 1),))
    ic["spec"]["cluster"] = {"source": source, **block}
    ic["spec"]["nodePools"] = [{**pool, "className": "g"}]
    path = tmp_path / "fleet.yaml"
    path.write_text(yaml.safe_dump_all([icl, ic]))
    loaded = load_fleet([str(path)])
    assert not loaded.errors, [str(e) for e in loaded.errors]
    assert cluster_args(loaded.fleet, "c1").source == source
    return loaded.fleet


def test_aks_infiniband_is_a_warning_not_silently_ignored(tmp_path, capsys):
    from automation.cli import main
    from tests.manifests import cluster

    icl = gpu_class("c", count=8, product="NVIDIA H100 80GB HBM3")
    icl["spec"]["provisioning"] = {"provider": "AKS", "aks": {"vmSize": "Standard_ND96isr_H100_v5"}}
    ic = cluster(pools=(("h100", "c", 1),))
    ic["spec"]["cluster"] = {"source": "AKS", "aks": {"location": "eastus"}}
    ic["spec"]["nodePools"][0]["fabric"] = {"type": "InfiniBand", "infiniband": {"fabric": "ib-1"}}
    path = tmp_path / "aks.yaml"
    path.write_text(yaml.safe_dump_all([icl, ic]))
    assert main(["validate", "-f", str(path)]) == 0
    assert "warning: InfiniBand on AKS is not set up by this project yet" in capsys.readouterr().err


def test_nebius_caches_stage_on_a_shared_filesystem_every_node_mounts(tmp_path):
    """A Compute Filesystem attached read-write to every node group and mounted by cloud-init, Nebius's
    csi-mounted-fs-path driver over it, then the ReadWriteMany class caches use: before it, caches never
    staged on Nebius and its replicas were lost."""
    fleet = _fleet(tmp_path, "Nebius", {"nebius": {"projectId": "project-e00abc"}},
                   {"provider": "Nebius", "nebius": {"platform": "gpu-h100-sxm", "preset": "8gpu-128vcpu-1600gb"}},
                   {"name": "h100", "nodeCount": 1}, gpus=8)
    resources = _platform(fleet, "c1")
    fs = named(resources, "c1-cache-fs", "nebius:index/computeV1Filesystem:ComputeV1Filesystem")
    assert inputs(fs)["type"] == "NETWORK_SSD" and inputs(fs)["parentId"] == "project-e00abc"
    groups = of_type(resources, "nebius:index/mk8sV1NodeGroup:Mk8sV1NodeGroup")
    assert {g.name for g in groups} == {"c1-system", "c1-h100"}
    for group in groups:
        template = inputs(group)["template"]
        (attached,) = template["filesystems"]
        assert attached["attachMode"] == "READ_WRITE" and attached["existingFilesystem"]["id"]
        mounts = yaml.safe_load(template["cloudInitUserData"])["mounts"]
        assert [attached["mountTag"], "/mnt/modelplane-cache", "virtiofs"] == mounts[0][:3]
    driver = next(r for r in of_type(resources, "kubernetes:helm.sh/v3:Release")
                  if inputs(r)["name"] == "mp-nebius-csi-mounted-fs-path")
    assert inputs(driver)["values"]["dataDir"].startswith("/mnt/modelplane-cache/")
    storage = named(resources, "c1-serving-modelplane-rwx-fs")
    assert inputs(storage)["provisioner"] == "mounted-fs-path.csi.nebius.ai"
    assert driver.urn in storage.dependency_urns  # the driver is installed before its class


def test_a_cached_deployment_places_a_replica_on_nebius(tmp_path):
    from fleet.scheduler import schedule
    from tests.manifests import cache, cluster, deployment

    fleet_path = tmp_path / "fleet.yaml"
    icl = gpu_class("h", count=1)
    icl["spec"]["provisioning"] = {"provider": "Nebius", "nebius": {"platform": "gpu-l40s-a", "preset": "1gpu-8vcpu-32gb"}}
    ic = cluster("neb", pools=(("l40s", "h", 1),))
    ic["spec"]["cluster"] = {"source": "Nebius", "nebius": {"projectId": "project-e00abc"}}
    fleet_path.write_text(yaml.safe_dump_all([icl, ic, cache(), deployment("qwen", modelCacheRef={"name": "weights"})]))
    loaded = load_fleet([str(fleet_path)])
    assert not loaded.errors, [str(e) for e in loaded.errors]
    plan = schedule(loaded.fleet)
    assert [(r.deployment, r.cluster) for r in plan.replicas] == [("qwen", "neb")]


def _tolerates(toleration: dict, taint: dict) -> bool:
    """Kubernetes' own rule (a toleration with no key and Exists matches every taint)."""
    effect = {"NO_SCHEDULE": "NoSchedule", "NO_EXECUTE": "NoExecute", "PREFER_NO_SCHEDULE": "PreferNoSchedule"}
    if toleration.get("effect") and toleration["effect"] != effect.get(taint["effect"], taint["effect"]):
        return False
    if toleration.get("operator") == "Exists":
        return not toleration.get("key") or toleration["key"] == taint["key"]
    return toleration.get("key") == taint["key"] and toleration.get("value") == taint.get("value")


@pytest.mark.parametrize("pool", [{"name": "h100", "nodeCount": 1},
                                  {"name": "h100", "nodeCount": 1, "minNodeCount": 0, "maxNodeCount": 4, "spot": True}])
def test_nebius_cache_driver_runs_on_tainted_gpu_nodes(tmp_path, pool):
    """The csi-mounted-fs-path node DaemonSet must run on GPU nodes, where model servers mount their caches: the
    release's values tolerate every taint the GPU node groups carry (before: no tolerations, so no driver there)."""
    fleet = _fleet(tmp_path, "Nebius", {"nebius": {"projectId": "project-e00abc"}},
                   {"provider": "Nebius", "nebius": {"platform": "gpu-h100-sxm", "preset": "8gpu-128vcpu-1600gb"}},
                   pool, gpus=8)
    resources = _platform(fleet, "c1")
    driver = next(r for r in of_type(resources, "kubernetes:helm.sh/v3:Release")
                  if inputs(r)["name"] == "mp-nebius-csi-mounted-fs-path")
    tolerations = inputs(driver)["values"]["tolerations"]
    taints = [t for g in of_type(resources, "nebius:index/mk8sV1NodeGroup:Mk8sV1NodeGroup")
              for t in inputs(g)["template"].get("taints") or []]
    assert taints  # the GPU group is tainted: the case this is about
    for taint in taints:
        assert any(_tolerates(t, taint) for t in tolerations), (taint, tolerations)
