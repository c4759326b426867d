"""The simulated hardware of a local cluster, from its InferenceCluster and InferenceClasses: one Node per declared
node of each pool (labels, taints, capacity as the platform stack's node pools would give them), the DRA
DeviceClasses of the classes' devices, and one ResourceSlice per node and driver publishing the class's devices
with their attributes and capacity, as the device's DRA driver would.

Pure: Kubernetes objects as plain dicts. kwok (`automation/local/control_plane.py`) keeps the Nodes alive and runs
the pods scheduled on them; nothing here ever has an address that is dialled (node addresses are documentation
addresses, RFC 5737).
"""

from __future__ import annotations

from dataclasses import dataclass

from fleet.api.cluster import InferenceCluster
from fleet.api.inference_class import InferenceClass
from workloads.pods import GPU_TOLERATION

# kwok manages the Nodes carrying this annotation (its --manage-nodes-with-annotation-selector)
KWOK_ANNOTATION = ("kwok.x-k8s.io/node", "fake")
POOL_LABEL = "modelplane.ai/pool"
SIMULATED_LABEL = "modelplane.ai/simulated"
# what a simulated node offers besides its devices: a large GPU host's CPU and memory
NODE_CAPACITY = {"cpu": "192", "memory": "2Ti", "pods": "110", "ephemeral-storage": "4Ti"}


@dataclass(frozen=True)
class Hardware:
    nodes: list[dict]
    device_classes: list[dict]
    slices: list[dict]
    storage: list[dict]  # the cache StorageClass the cluster names and its pre-made volumes (a shared filer)


def node_name(pool: str, index: int) -> str:
    return f"{pool}-{index}"


SYSTEM_POOL = "system"


def hardware(cluster: InferenceCluster, classes: dict[str, InferenceClass]) -> Hardware:
    # the cluster's own system node, untainted and without devices, where add-ons' controllers run (as every
    # real cluster has one besides its GPU pools)
    nodes: list[dict] = [_node(node_name(SYSTEM_POOL, 0), SYSTEM_POOL, cluster, gpu=False, system=True)]
    slices: list[dict] = []
    drivers: dict[str, str] = {}  # deviceClassName -> driver
    for pool in cluster.spec.nodePools:
        icl = classes.get(pool.className)
        dra = [d for d in (icl.spec.devices if icl else []) if d.claim == "DRA"]
        gpu = any(d.deviceClassName for d in dra)
        for i in range(pool.nodeCount):
            name = node_name(pool.name, i)
            nodes.append(_node(name, pool.name, cluster, gpu))
            by_driver: dict[str, list[dict]] = {}
            for device in dra:
                if device.deviceClassName:
                    drivers.setdefault(device.deviceClassName, device.driver)
                for n in range(device.count):
                    entry: dict = {"name": f"{device.name}-{n}"}
                    if device.attributes:
                        entry["attributes"] = {k: v.model_dump(exclude_none=True, by_alias=True) for k, v in device.attributes.items()}
                    if device.capacity:
                        entry["capacity"] = {k: v.model_dump(exclude_none=True, by_alias=True) for k, v in device.capacity.items()}
                    by_driver.setdefault(device.driver, []).append(entry)
            slices += [_slice(name, driver, devices) for driver, devices in sorted(by_driver.items())]
    classes_out = [{"apiVersion": "resource.k8s.io/v1", "kind": "DeviceClass",
                    "metadata": {"name": name, "labels": {SIMULATED_LABEL: "true"}},
                    "spec": {"selectors": [{"cel": {"expression": f'device.driver == "{driver}"'}}]}}
                   for name, driver in sorted(drivers.items())]
    return Hardware(nodes, classes_out, slices, storage(cluster))


# a filer's pre-made ReadWriteMany volumes: enough for a ModelCache per namespace of a test fleet; nothing mounts
# them (no container runs), the real PersistentVolume controller binds each claim to one
FILER_VOLUMES = 4
FILER_VOLUME_SIZE = "4Ti"


def storage(cluster: InferenceCluster) -> list[dict]:
    """The StorageClass an Existing cluster names for its caches (`existing.cache.storageClassName`), with no
    provisioner, and statically made volumes of it, as an on-premise filer's administrator would make them."""
    existing = cluster.spec.cluster.existing
    name = existing.cache.storageClassName if existing and existing.cache else None
    if not name:
        return []
    labels = {SIMULATED_LABEL: "true"}
    volumes = [{"apiVersion": "v1", "kind": "PersistentVolume",
                "metadata": {"name": f"{name}-{i}", "labels": labels},
                "spec": {"capacity": {"storage": FILER_VOLUME_SIZE}, "accessModes": ["ReadWriteMany"],
                         "persistentVolumeReclaimPolicy": "Retain", "storageClassName": name,
                         "hostPath": {"path": f"/var/lib/modelplane-local/{name}-{i}"}}}
               for i in range(FILER_VOLUMES)]
    return [{"apiVersion": "storage.k8s.io/v1", "kind": "StorageClass", "metadata": {"name": name, "labels": labels},
             "provisioner": "kubernetes.io/no-provisioner", "volumeBindingMode": "Immediate"}, *volumes]


def _node(name: str, pool: str, cluster: InferenceCluster, gpu: bool, system: bool = False) -> dict:
    taints = [] if system else [{"key": t.key, "value": t.value, "effect": t.effect} if t.value is not None
                                else {"key": t.key, "effect": t.effect} for t in cluster.spec.taints or []]
    if gpu:  # as GPU node pools are tainted by the clouds (and the platform stacks' pools)
        taints.append({"key": GPU_TOLERATION["key"], "value": "present", "effect": "NoSchedule"})
    return {
        "apiVersion": "v1", "kind": "Node",
        "metadata": {"name": name, "annotations": {KWOK_ANNOTATION[0]: KWOK_ANNOTATION[1]},
                     "labels": {POOL_LABEL: pool, SIMULATED_LABEL: "true", "kubernetes.io/hostname": name,
                                "kubernetes.io/os": "linux", "kubernetes.io/arch": "amd64", "type": "kwok"}},
        "spec": {"taints": taints} if taints else {},
        "status": {"capacity": dict(NODE_CAPACITY), "allocatable": dict(NODE_CAPACITY)},
    }


def _slice(node: str, driver: str, devices: list[dict]) -> dict:
    return {"apiVersion": "resource.k8s.io/v1", "kind": "ResourceSlice",
            "metadata": {"name": f"{node}-{driver}".replace("/", "-"), "labels": {SIMULATED_LABEL: "true"}},
            "spec": {"driver": driver, "nodeName": node,
                     "pool": {"name": node, "generation": 1, "resourceSliceCount": 1}, "devices": devices}}
