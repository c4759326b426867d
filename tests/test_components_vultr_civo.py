"""Vultr and Civo clusters under the mock runtime: the cluster, its GPU pools with the class's plan or size and the
manifests' counts, a secret kubeconfig the serving stack's provider is built from; and their validation rules, each
bad field one message naming file, object and field."""

from __future__ import annotations

import pathlib

import pytest
import yaml

from automation.checks.offline import is_secret
from tests.manifests import cluster, gpu_class
from tests.pulumi_mocks import inputs, named, of_type
from tests.test_components_aks_nebius import _fleet, _platform

ROOT = pathlib.Path(__file__).resolve().parent.parent
CONCEPTS = ROOT / "tests" / "data" / "reference" / "concepts.yaml"
VULTR = {"vultr": {"region": "ewr"}}
VULTR_CLASS = {"provider": "Vultr", "vultr": {"plan": "vcg-l40s-16c-180g-48vram"}}
CIVO = {"civo": {"region": "LON1"}}
CIVO_CLASS = {"provider": "Civo", "civo": {"size": "an.g1.l40s.kube.x1", "accelerator": {"type": "l40s", "count": 1}}}
VULTR_POOLS = "vultr:index/kubernetesNodePools:KubernetesNodePools"
CIVO_POOL = "civo:index/kubernetesNodePool:KubernetesNodePool"


def test_vultr_cluster_gpu_pool_and_serving_stack(tmp_path):
    fleet = _fleet(tmp_path, "Vultr", VULTR, VULTR_CLASS, {"name": "l40s", "nodeCount": 2})
    resources = _platform(fleet, "c1")
    named(resources, "c1-vultr", "pulumi:providers:vultr")
    assert all(r.provider == "c1-vultr" for r in resources if r.type.startswith("vultr:"))
    vke = named(resources, "c1", "vultr:index/kubernetes:Kubernetes")
    spec = inputs(vke)
    assert (spec["label"], spec["region"], spec["version"]) == ("c1", "ewr", "v1.36.1+3")  # the reference's default
    system = spec["nodePools"]
    assert (system["plan"], system["nodeQuantity"], system["minNodes"], system["maxNodes"]) == ("vc2-6c-16gb", 1, 1, 2)
    assert vke.options["protect"] is True
    (pool,) = of_type(resources, VULTR_POOLS)
    values = inputs(pool)
    assert (values["plan"], values["nodeQuantity"], values["autoScaler"]) == ("vcg-l40s-16c-180g-48vram", 2, False)
    assert values["label"] == "l40s" and values["labels"] == {"modelplane.ai/pool": "l40s"}
    assert values["taints"] == [{"key": "nvidia.com/gpu", "value": "true", "effect": "NoSchedule"}]
    assert vke.urn in pool.dependency_urns  # attached to the cluster's id
    k8s = named(resources, "c1-k8s", "pulumi:providers:kubernetes")
    assert is_secret(k8s.inputs["kubeconfig"]) and inputs(k8s)["kubeconfig"] == "apiVersion: v1\nkind: Config\n"
    releases = of_type(resources, "kubernetes:helm.sh/v3:Release")
    assert releases and all(r.provider == "c1-k8s" for r in releases)
    # no RWX class on Vultr: no StorageClass is made for caches
    assert not of_type(resources, "kubernetes:storage.k8s.io/v1:StorageClass")


def test_vultr_autoscaled_pool_and_unprotected_cluster(tmp_path):
    from tests.pulumi_mocks import registered

    import pulumi

    from components.platform import platform

    fleet = _fleet(tmp_path, "Vultr", VULTR, VULTR_CLASS,
                   {"name": "l40s", "nodeCount": 1, "minNodeCount": 1, "maxNodeCount": 5})
    resources = registered(lambda: platform(fleet, pulumi.Config("modelplane")), "platform-c1",
                           {"modelplane:cluster": "c1", "modelplane:gateway": "false",
                            "modelplane:deletionProtection": "false"})
    pool = named(resources, "c1-l40s", VULTR_POOLS)
    values = inputs(pool)
    assert (values["autoScaler"], values["minNodes"], values["maxNodes"], values["nodeQuantity"]) == (True, 1, 5, 1)
    assert pool.options["ignoreChanges"] == ["nodeQuantity"]  # the autoscaler owns it
    assert "protect" not in named(resources, "c1", "vultr:index/kubernetes:Kubernetes").options


def test_civo_cluster_gpu_pool_and_serving_stack(tmp_path):
    fleet = _fleet(tmp_path, "Civo", CIVO, CIVO_CLASS, {"name": "l40s", "nodeCount": 3})
    resources = _platform(fleet, "c1")
    provider = named(resources, "c1-civo", "pulumi:providers:civo")
    assert inputs(provider)["region"] == "LON1" and "token" not in inputs(provider)  # CIVO_TOKEN: the plugin's
    assert all(r.provider == "c1-civo" for r in resources if r.type.startswith("civo:"))
    firewall = named(resources, "c1-firewall", "civo:index/firewall:Firewall")
    cluster_ = named(resources, "c1", "civo:index/kubernetesCluster:KubernetesCluster")
    spec = inputs(cluster_)
    assert (spec["name"], spec["region"], spec["clusterType"], spec["writeKubeconfig"]) == ("c1", "LON1", "k3s", True)
    assert spec["pools"]["size"] == "g4s.kube.large" and spec["pools"]["nodeCount"] == 1
    assert firewall.urn in cluster_.dependency_urns and cluster_.options["protect"] is True
    (pool,) = of_type(resources, CIVO_POOL)
    values = inputs(pool)
    assert (values["size"], values["nodeCount"], values["label"]) == ("an.g1.l40s.kube.x1", 3, "l40s")
    assert values["labels"] == {"modelplane.ai/pool": "l40s"}
    assert values["taints"] == [{"key": "nvidia.com/gpu", "value": "true", "effect": "NoSchedule"}]
    assert cluster_.urn in pool.dependency_urns
    k8s = named(resources, "c1-k8s", "pulumi:providers:kubernetes")
    assert is_secret(k8s.inputs["kubeconfig"]) and inputs(k8s)["kubeconfig"] == "apiVersion: v1\nkind: Config\n"
    assert of_type(resources, "kubernetes:helm.sh/v3:Release")
    assert not of_type(resources, "kubernetes:storage.k8s.io/v1:StorageClass")  # Civo volumes are ReadWriteOnce


def test_reference_vultr_example_previews_and_passes_the_check():
    """The reference's own Vultr cluster (concepts.yaml): provisioned now, its stack passes every rule."""
    from automation.checks.deployability import check_fleet
    from automation.checks.offline_preview import all_stacks
    from fleet.validate import load_fleet

    loaded = load_fleet([str(CONCEPTS)])
    assert not [p for p in loaded.problems if "Vultr clusters are not provisioned" in p.message]
    previews = [p for p in all_stacks(loaded.fleet) if p.name == "platform-vultr-ewr"]
    assert previews and previews[0].error is None, previews[0].error
    assert {"vultr:index/kubernetes:Kubernetes", VULTR_POOLS} <= {r.type for r in previews[0].resources}
    assert not [str(v) for v in check_fleet(loaded.fleet, previews) if str(v).startswith("platform-vultr-ewr")]


def test_caches_never_stage_on_vultr_or_civo(tmp_path):
    from fleet.inventory import build_clusters

    for source, block, provisioning in (("Vultr", VULTR, VULTR_CLASS), ("Civo", CIVO, CIVO_CLASS)):
        fleet = _fleet(tmp_path, source, block, provisioning, {"name": "l40s", "nodeCount": 1})
        (view,) = build_clusters(fleet)
        assert view.source == source and view.cache_storage_class is None


@pytest.mark.parametrize("source,block,provisioning,pool,field,fragment", [
    ("Civo", {"civo": {}}, CIVO_CLASS, {}, "spec.cluster.civo.region", "required field is missing"),
    ("Civo", CIVO, CIVO_CLASS, {"maxNodeCount": 4}, "spec.nodePools[0].maxNodeCount", "not autoscaled"),
    ("Civo", CIVO, {"provider": "Civo", "civo": {}}, {}, "spec.provisioning.civo.size", "required field is missing"),
    ("Civo", CIVO, VULTR_CLASS, {}, "spec.nodePools[0].className", "provisions for Vultr, but this cluster's source is Civo"),
    ("Vultr", {"vultr": {}}, VULTR_CLASS, {}, "spec.cluster.vultr.region", "required field is missing"),
    ("Vultr", VULTR, VULTR_CLASS, {"nodeCount": 0}, "spec.nodePools[0].nodeCount", "at least one node"),
    ("Vultr", VULTR, {"provider": "Vultr", "vultr": {}}, {}, "spec.provisioning.vultr.plan", "required field is missing"),
])
def test_a_bad_field_is_one_message_naming_file_object_and_field(tmp_path, capsys, source, block, provisioning, pool,
                                                                 field, fragment):
    from automation.cli import main

    icl = gpu_class("g")
    icl["spec"]["provisioning"] = provisioning
    ic = cluster(pools=(("l40s", "g", 1),))
    ic["spec"]["cluster"] = {"source": source, **block}
    ic["spec"]["nodePools"][0].update(pool)
    path = tmp_path / "fleet.yaml"
    path.write_text(yaml.safe_dump_all([icl, ic]))
    assert main(["validate", "-f", str(path)]) == 1
    err = capsys.readouterr().err
    assert "1 error(s)" in err and "Traceback" not in err
    lines = [line for line in err.splitlines() if line.startswith(f"{path}:") and "warning:" not in line]
    kind = "InferenceClass/g" if field.startswith("spec.provisioning") else "InferenceCluster/c1"
    assert len(lines) == 1, lines
    assert f": {kind}: {field}: " in lines[0] and fragment in lines[0], lines


def test_vultr_and_civo_clusters_can_host_the_fleet_gateway():
    """Both are provisioned now, with cloud load balancers: a fleet gateway may run there."""
    from components.args import control_plane_cluster
    from fleet.validate import load_fleet

    fleet = load_fleet([str(CONCEPTS)]).fleet
    assert control_plane_cluster(fleet, "vultr-ewr") == "vultr-ewr"


def test_civo_stacks_pass_the_deployability_check(tmp_path):
    """Civo's resources are cloud resources the check knows: pinned to the cluster's region by an explicit provider,
    their pools' taints read (what runs on GPU nodes must tolerate them)."""
    from automation.checks.deployability import check_fleet
    from automation.checks.offline_preview import all_stacks

    fleet = _fleet(tmp_path, "Civo", CIVO, CIVO_CLASS, {"name": "l40s", "nodeCount": 1})
    previews = [p for p in all_stacks(fleet) if p.name == "platform-c1"]
    assert previews and previews[0].error is None, previews[0].error
    assert not [str(v) for v in check_fleet(fleet, previews) if str(v).startswith("platform-c1")]


@pytest.mark.parametrize("source,block,provisioning", [("Vultr", VULTR, VULTR_CLASS), ("Civo", CIVO, CIVO_CLASS)])
def test_a_dynamo_stack_on_vultr_or_civo_claims_volumes_from_the_clouds_default_class(tmp_path, source, block,
                                                                                      provisioning):
    """Dynamo's NATS claims a volume from the default StorageClass: VKE's (vultr-block-storage) and Civo's
    (civo-volume) are there by themselves, so the check passes the claim."""
    from automation.checks.deployability import check_fleet
    from automation.checks.offline_preview import all_stacks
    from fleet.validate import load_fleet

    icl = gpu_class("g")
    icl["spec"]["provisioning"] = provisioning
    ic = cluster(pools=(("l40s", "g", 1),))
    ic["spec"]["cluster"] = {"source": source, **block}
    ic["spec"]["stack"] = "Dynamo"
    path = tmp_path / "fleet.yaml"
    path.write_text(yaml.safe_dump_all([icl, ic]))
    fleet = load_fleet([str(path)]).fleet
    previews = [p for p in all_stacks(fleet) if p.name == "platform-c1"]
    assert previews and previews[0].error is None, previews[0].error
    assert "mp-dynamo" in {inputs(r).get("name") for r in previews[0].resources
                           if r.type == "kubernetes:helm.sh/v3:Release"}
    assert not [str(v) for v in check_fleet(fleet, previews) if str(v).startswith("platform-c1")]


def test_civo_gpu_pools_warn_that_no_gpu_operator_installs_the_driver(tmp_path, capsys):
    """The reference's serving stack installs NVIDIA's GPU Operator on Civo; this one has none yet: say so."""
    from automation.cli import main

    icl = gpu_class("g")
    icl["spec"]["provisioning"] = CIVO_CLASS
    ic = cluster(pools=(("l40s", "g", 1),))
    ic["spec"]["cluster"] = {"source": "Civo", **CIVO}
    path = tmp_path / "fleet.yaml"
    path.write_text(yaml.safe_dump_all([icl, ic]))
    assert main(["validate", "-f", str(path)]) == 0
    err = capsys.readouterr().err
    assert "InferenceCluster/c1: spec.nodePools[0].className: warning: the serving stack does not install NVIDIA's GPU " \
           "Operator on Civo yet" in err, err
