"""Volumes that bind: claims name a StorageClass that exists first (and can share a volume when they ask to),
each class's CSI driver is installed first, and charts that claim volumes land where a default class exists."""

from __future__ import annotations

from typing import Callable, Iterable, Iterator

from automation.checks.graph import RELEASE, Graph, Node, Violation, violation
from automation.checks.offline import Registered

# StorageClasses a cloud creates itself, and which of them is its default.
CLOUD_STORAGE = {"GKE": {"standard-rwo": "pd.csi.storage.gke.io", "premium-rwo": "pd.csi.storage.gke.io",
                         "standard": "kubernetes.io/gce-pd"},
                 "AKS": {"managed-csi": "disk.csi.azure.com", "managed-csi-premium": "disk.csi.azure.com",
                         "azurefile-csi": "file.csi.azure.com", "azurefile-csi-premium": "file.csi.azure.com"},
                 "Vultr": {"vultr-block-storage": "block.csi.vultr.com"}, "Civo": {"civo-volume": "csi.civo.com"}}
CLOUD_DEFAULT_CLASS = {"GKE": "standard-rwo", "AKS": "managed-csi", "Vultr": "vultr-block-storage", "Civo": "civo-volume"}
# Sources whose clusters bring a default StorageClass this check cannot name: an existing cluster's admin's,
# Nebius Managed Kubernetes' own.
TRUSTED_DEFAULT_CLASS = {"Existing", "Nebius"}
RWX_PROVISIONERS = {"filestore.csi.storage.gke.io", "efs.csi.aws.com", "file.csi.azure.com", "nfs.csi.k8s.io",
                    "mounted-fs-path.csi.nebius.ai",
                    "cephfs.csi.ceph.com", "lustre.csi.aws.com", "lustre.csi.storage.gke.io"}
DEFAULT_CLASS_ANNOTATION = "storageclass.kubernetes.io/is-default-class"


def _eks_addon(name: str) -> Callable[[Registered], bool]:
    return lambda r: r.type == "aws:eks/addon:Addon" and r.inputs.get("addonName") == name


def _filestore_addon(r: Registered) -> bool:
    config = (r.inputs.get("addonsConfig") or {}).get("gcpFilestoreCsiDriverConfig") or {}
    return r.type == "gcp:container/cluster:Cluster" and config.get("enabled") is True


# A StorageClass's provisioner runs only where its CSI driver is installed: what installs it, per provisioner.
CSI_DRIVERS: dict[str, tuple[str, Callable[[Registered], bool]]] = {
    "ebs.csi.aws.com": ("the EKS add-on aws-ebs-csi-driver", _eks_addon("aws-ebs-csi-driver")),
    "efs.csi.aws.com": ("the EKS add-on aws-efs-csi-driver", _eks_addon("aws-efs-csi-driver")),
    "filestore.csi.storage.gke.io": ("the GKE cluster's Filestore CSI add-on", _filestore_addon),
    "mounted-fs-path.csi.nebius.ai": ("Nebius's chart csi-mounted-fs-path",
                                      lambda r: r.type == RELEASE and r.inputs.get("name") == "mp-nebius-csi-mounted-fs-path"),
}


def _storage_classes(graph: Graph) -> dict[tuple, list[Node]]:
    out: dict[tuple, list[Node]] = {}
    for node in graph.objects:
        if node.kind == "StorageClass":
            out.setdefault((node.cluster, node.name), []).append(node)
    return out


def storage(graph: Graph) -> Iterable[Violation]:
    """Claims use a StorageClass that exists before them (RWX claims an RWX provisioner), every StorageClass's
    CSI driver is installed first, and charts that claim volumes land where a default StorageClass exists."""
    yield from _csi_drivers_first(graph)
    classes = _storage_classes(graph)
    for node in graph.objects:
        if node.kind == "PersistentVolumeClaim":
            problem = _claim_problem(graph, node, classes)
            if problem:
                yield violation(node, "storage", problem)
    yield from _volume_charts_have_a_default(graph)


def _csi_drivers_first(graph: Graph) -> Iterable[Violation]:
    """A StorageClass whose provisioner needs a CSI driver comes after what installs it on its cluster."""
    cluster_of_stack = {s.name: s.cluster for s in graph.stacks if s.cluster}
    platform_resources: dict[str, list[Node]] = {}
    for node in graph.nodes:
        if node.stack in cluster_of_stack:
            platform_resources.setdefault(cluster_of_stack[node.stack], []).append(node)
    for node in graph.objects:
        provisioner = node.inputs.get("provisioner") if node.kind == "StorageClass" else None
        if provisioner not in CSI_DRIVERS:
            continue
        what, matches = CSI_DRIVERS[provisioner]
        drivers = [n for n in platform_resources.get(node.cluster or "", []) if matches(n.resource)]
        if not graph.exists_before(drivers, node):
            yield violation(node, "storage", f"StorageClass {node.name} uses {provisioner}, but {what} is not "
                                             f"installed on {node.cluster} before it")


def _default_classes(graph: Graph, cluster: str | None) -> Iterator[Node]:
    return (c for c in graph.objects if c.kind == "StorageClass" and c.cluster == cluster and _is_default(c))


def _claim_problem(graph: Graph, claim: Node, classes: dict[tuple, list[Node]]) -> str | None:
    """Why a PersistentVolumeClaim would not bind, or None. Its class is the one it names, else its cluster's
    default; that class is created before it by a stack, or one the cloud or the cluster's admin provides."""
    spec = claim.inputs.get("spec") or {}
    facts = graph.clusters.get(claim.cluster or "")
    source = facts.source if facts else ""
    rwx = "ReadWriteMany" in (spec.get("accessModes") or [])
    name = spec.get("storageClassName")
    if name is None:
        name = CLOUD_DEFAULT_CLASS.get(source) or next((c.name for c in _default_classes(graph, claim.cluster)), None)
    if name is None:
        return None if source in TRUSTED_DEFAULT_CLASS else \
            f"the claim names no StorageClass and {claim.cluster} has no default one"
    created = classes.get((claim.cluster, name), [])  # the default class's name too: a stack may create it
    if created:
        provisioner = created[0].inputs.get("provisioner")
        if not graph.exists_before(created, claim):
            return f"StorageClass {name} is created on {claim.cluster} only after this claim"
        if rwx and provisioner not in RWX_PROVISIONERS:
            return f"ReadWriteMany claim on StorageClass {name}, whose provisioner {provisioner} cannot share a volume"
        return None
    if name in CLOUD_STORAGE.get(source, {}):
        if rwx and CLOUD_STORAGE[source][name] not in RWX_PROVISIONERS:
            return f"ReadWriteMany claim on {source}'s {name}, which cannot share a volume"
        return None
    if facts and name in facts.storage_classes:
        return None
    return (f"StorageClass {name!r} is not created on {claim.cluster} by an earlier stack and is not one the cloud "
            "or the cluster's admin provides")


def _volume_charts_have_a_default(graph: Graph) -> Iterable[Violation]:
    """A chart that claims volumes without naming a class lands where a default StorageClass exists before it."""
    for node in graph.releases:
        chart = graph.chart(node)
        if chart is None or not chart.needs_volumes:
            continue
        facts = graph.clusters.get(node.cluster or "")
        if facts is None or facts.source in TRUSTED_DEFAULT_CLASS or facts.source in CLOUD_DEFAULT_CLASS:
            continue  # the cloud (or the cluster's admin) has a default class
        if not graph.exists_before(_default_classes(graph, node.cluster), node):
            yield violation(node, "storage", f"chart {chart.chart} claims volumes, but {node.cluster} has no default "
                                             "StorageClass created before it")


def _is_default(node: Node) -> bool:
    annotations = (node.inputs.get("metadata") or {}).get("annotations") or {}
    return annotations.get(DEFAULT_CLASS_ANNOTATION) == "true"
