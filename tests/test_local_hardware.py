"""The local fleet's simulated hardware (automation/local/hardware.py): what a cluster's pools and classes declare,
as Nodes, DeviceClasses and ResourceSlices a DRA driver would publish."""

from __future__ import annotations

import pathlib

from automation.local.hardware import KWOK_ANNOTATION, POOL_LABEL, hardware
from fleet.validate import load_fleet

ROOT = pathlib.Path(__file__).resolve().parents[1]


def _fleet(name: str):
    fleet = load_fleet([str(ROOT / name)]).fleet
    return fleet, {c.name: c for c in fleet.of("InferenceClass")}


def test_every_declared_node_is_a_simulated_node_with_its_pools_label_and_the_gpu_taint():
    fleet, classes = _fleet("local-fleet")
    cluster = next(c for c in fleet.of("InferenceCluster") if c.name == "local-a")
    made = hardware(cluster, classes)
    by_name = {n["metadata"]["name"]: n for n in made.nodes}
    assert sorted(by_name) == ["l4-0", "l4-1", "system-0"]
    assert all(n["metadata"]["annotations"][KWOK_ANNOTATION[0]] == KWOK_ANNOTATION[1] for n in made.nodes)
    assert by_name["l4-0"]["metadata"]["labels"][POOL_LABEL] == "l4"
    assert {"key": "nvidia.com/gpu", "value": "present", "effect": "NoSchedule"} in by_name["l4-1"]["spec"]["taints"]
    assert "taints" not in by_name["system-0"]["spec"]  # add-ons' controllers run there


def test_each_node_publishes_its_classs_devices_with_their_attributes_and_capacity():
    fleet, classes = _fleet("local-fleet")
    cluster = next(c for c in fleet.of("InferenceCluster") if c.name == "local-b")
    made = hardware(cluster, classes)
    (slice_,) = made.slices
    assert slice_["spec"]["nodeName"] == "h100-0" and slice_["spec"]["driver"] == "gpu.nvidia.com"
    devices = slice_["spec"]["devices"]
    assert [d["name"] for d in devices] == [f"gpu-{i}" for i in range(8)]
    assert devices[0]["attributes"]["productName"] == {"string": "NVIDIA H100 80GB HBM3"}
    assert devices[0]["attributes"]["cudaComputeCapability"] == {"version": "9.0.0"}
    assert devices[0]["capacity"]["memory"] == {"value": "81559Mi"}
    assert made.device_classes == [{"apiVersion": "resource.k8s.io/v1", "kind": "DeviceClass",
                                    "metadata": {"name": "gpu.nvidia.com", "labels": {"modelplane.ai/simulated": "true"}},
                                    "spec": {"selectors": [{"cel": {"expression": 'device.driver == "gpu.nvidia.com"'}}]}}]


def test_synthetic_devices_are_not_published_and_cluster_taints_reach_gpu_nodes():
    fleet, classes = _fleet("examples")
    byo = next(c for c in fleet.of("InferenceCluster") if c.name == "byo-eu")
    made = hardware(byo, classes)
    drivers = {s["spec"]["driver"] for s in made.slices}
    assert drivers == {"gpu.nvidia.com"}  # the class's InfiniBand NICs are Synthetic: no DRA driver publishes them
    gpu_node = next(n for n in made.nodes if n["metadata"]["name"] == "h100-0")
    assert {"key": "dedicated", "value": "research", "effect": "NoSchedule"} in gpu_node["spec"]["taints"]


def test_a_cluster_that_names_a_cache_storage_class_gets_it_with_pre_made_shared_volumes_and_one_without_none():
    fleet, classes = _fleet("local-fleet")
    by_name = {c.name: c for c in fleet.of("InferenceCluster")}
    storage = hardware(by_name["local-a"], classes).storage
    (klass,) = [o for o in storage if o["kind"] == "StorageClass"]
    volumes = [o for o in storage if o["kind"] == "PersistentVolume"]
    assert klass["metadata"]["name"] == "local-filer" and klass["volumeBindingMode"] == "Immediate"
    assert volumes and all(v["spec"]["storageClassName"] == "local-filer"
                           and v["spec"]["accessModes"] == ["ReadWriteMany"] for v in volumes)
    assert hardware(by_name["local-b"], classes).storage == []


def test_the_lws_webhooks_are_registered_by_loopback_url_and_only_for_leaderworkerset_pods():
    from automation.local.control_plane import LocalCluster
    from automation.local.lifecycle import lws_webhooks
    from automation.local.pki import ensure

    import tempfile

    with tempfile.TemporaryDirectory() as folder:
        pki = ensure(pathlib.Path(folder))
        configs = lws_webhooks(LocalCluster("local-a", 6443, "kubeconfig", [], 9443), pki)
    hooks = [h for c in configs for h in c["webhooks"]]
    assert {c["kind"] for c in configs} == {"MutatingWebhookConfiguration", "ValidatingWebhookConfiguration"}
    assert all(h["clientConfig"]["url"].startswith("https://127.0.0.1:9443/") and "service" not in h["clientConfig"]
               for h in hooks)
    pod_hooks = [h for h in hooks if h["rules"][0]["resources"] == ["pods"]]
    assert len(pod_hooks) == 2 and all(h["objectSelector"]["matchExpressions"][0]["key"]
                                       == "leaderworkerset.sigs.k8s.io/name" for h in pod_hooks)
