"""InferenceCluster: one GPU cluster of the fleet, provisioned (GKE, EKS, ...) or brought as is."""

from __future__ import annotations

from typing import Annotated, Any, ClassVar, Literal

from pydantic import Field

from fleet.api.common import (RESERVED_PREFIX, Condition, Int, Resource, Rule, Str, Strict, label_rules,
                              secret_reference_rules, unique)
from fleet.api.inference_class import Device

Source = Literal["GKE", "EKS", "AKS", "Nebius", "Vultr", "Civo", "Existing"]


class Credentials(Strict):
    type: Literal["ProviderConfig", "ClusterProviderConfig"] = "ClusterProviderConfig"
    name: str = "default"


class SecretKeyRef(Strict):
    name: Annotated[str, Str(1, 253)]
    key: str = "kubeconfig"


class IdentitySecretRef(Strict):
    name: Annotated[str, Str(1, 253)]
    key: str = "private_key"
    type: Literal[
        "GoogleApplicationCredentials", "AWSWebIdentityCredentials", "NebiusServiceAccountCredentials"
    ] = "GoogleApplicationCredentials"


class CacheSettings(Strict):
    storageClassName: Annotated[str, Str(1, 253)] | None = None


# Who installs the cluster's add-ons (the CRDs and charts the serving stack needs): Install, the platform stack
# (the default); Verify, the cluster's own platform team: the platform stack installs none of them, and `up` checks
# first that the cluster serves what is placed there (automation/planning/addons.py).
AddOns = Literal["Install", "Verify"]


class ExistingCluster(Strict):
    secretRef: SecretKeyRef
    identitySecretRef: IdentitySecretRef | None = None
    cache: CacheSettings | None = None
    # Not in the reference's API (an optional addition, like cache.storageClassName an admin's setting): who
    # installs the add-ons of a cluster that is brought as is.
    addons: AddOns = "Install"


class RegionalCluster(Strict):
    region: Annotated[str, Str(1, 32)]
    kubernetesVersion: str | None = None
    credentials: Credentials | None = None


class GKECluster(RegionalCluster):
    kubernetesVersion: str = "1.35"
    # Not in the reference's XRD (its design document shows it): the Google Cloud project to create the cluster
    # in. Without it, the platform stack's `gcp:project` config names it; never the ambient environment.
    project: Annotated[str, Str(6, 30, r"^[a-z][-a-z0-9]*[a-z0-9]$")] | None = None


class EKSCluster(RegionalCluster):
    region: Annotated[str, Str(1)]
    kubernetesVersion: str = "1.36"


class VultrCluster(RegionalCluster):
    region: Annotated[str, Str(1)]
    kubernetesVersion: str = "v1.36.1+3"


class CivoCluster(Strict):
    """The reference's v0.5.0 (not in a stored XRD): the region is what its tests and docs show (e.g. `LON1`)."""

    region: Annotated[str, Str(1, 32)]
    kubernetesVersion: str | None = None  # not in the reference: Civo's latest stable k3s when unset
    credentials: Credentials | None = None


class AKSCluster(Strict):
    location: Annotated[str, Str(1)]
    kubernetesVersion: str = "1.34"
    credentials: Credentials | None = None


class NebiusCluster(Strict):
    kubernetesVersion: str = "1.34"
    credentials: Credentials | None = None
    # Not in the reference's API: the Nebius project (parent ID) to create the cluster in; without it the stack's
    # nebius:parentId config, or the Nebius CLI profile's project.
    projectId: Annotated[str, Str(1, 64)] | None = None


class ClusterSource(Strict):
    source: Source
    existing: ExistingCluster | None = None
    gke: GKECluster | None = None
    eks: EKSCluster | None = None
    aks: AKSCluster | None = None
    nebius: NebiusCluster | None = None
    vultr: VultrCluster | None = None
    civo: CivoCluster | None = None


class Taint(Strict):
    key: Annotated[str, Str(1)]
    value: str | None = None
    effect: Literal["NoSchedule", "NoExecute"]


ReservationId = Annotated[str, Str(4, 64, r"^cr-[0-9a-f]+$")]


class CapacityBlock(Strict):
    capacityReservationId: ReservationId


class InfiniBand(Strict):
    fabric: Annotated[str, Str(1, 63)]


class Fabric(Strict):
    type: Literal["None", "EFA", "InfiniBand"] = "None"
    infiniband: InfiniBand | None = None


class NodePool(Strict):
    name: Annotated[str, Str(1, 40)]
    className: Annotated[str, Str(1, 253)]
    nodeCount: Annotated[int, Int(0)] = 1
    minNodeCount: Annotated[int, Int(0)] | None = None
    maxNodeCount: Annotated[int, Int(1)] | None = None
    zones: list[str] | None = None
    capacityBlock: CapacityBlock | None = None
    fabric: Fabric | None = None
    # Not in the reference's API (an optional addition): provision the pool on spot/preemptible capacity.
    spot: bool | None = None

    @property
    def capacity_nodes(self) -> int:
        """Nodes the scheduler may fill: the autoscaling ceiling if set, else the fixed count."""
        return self.maxNodeCount if self.maxNodeCount is not None else self.nodeCount


PLACEMENT_LABELS_RESERVED = "spec.placement.metadata.labels must not use the reserved modelplane.ai/ prefix."


class PlacementMetadata(Strict):
    # The reference's v0.5: at most 16, values at most 63 characters
    labels: Annotated[dict[str, Annotated[str, Field(max_length=63)]], Field(max_length=16)] | None = None


class FoldBack(Strict):
    """How replicas leave this cluster for a cluster of a lower tier that has room again (an optional addition)."""

    maxPerPlan: Annotated[int, Int(0)] = Field(default=1, description="At most this many replicas leave this cluster in one "
                                               "plan to fold back to a lower tier (0: none ever does).")


class Placement(Strict):
    """Facts about where the cluster is (the reference's v0.5): its labels are stamped on every ModelReplica and
    ModelEndpoint composed on it, so a ModelService can select by region or any other fact."""

    metadata: PlacementMetadata | None = None
    # Not in the reference's API (optional additions, docs/scheduling.md#tiers-spill-and-fold-back)
    tier: Annotated[int, Int(0, 9)] = Field(
        default=0, description="The cluster's cost tier, lowest first (by convention 0 on-premise or reserved, 1 cloud "
        "on-demand, 2 spot): new replicas fill the lowest tier with room and spill upward; kept replicas fold back "
        "down when a lower tier has room again.")
    foldBack: FoldBack | None = None

    @property
    def fold_back_limit(self) -> int:
        return self.foldBack.maxPerPlan if self.foldBack else FoldBack().maxPerPlan

    @property
    def labels(self) -> dict[str, str]:
        return dict((self.metadata.labels if self.metadata else None) or {})


class InferenceClusterSpec(Strict):
    cluster: ClusterSource
    taints: list[Taint] | None = None
    # Optional: a cluster without pools offers no capacity, but can host the fleet gateway (a CPU control plane).
    nodePools: list[NodePool] = Field(default_factory=list, max_length=8)
    # The serving stack (the reference's PR #406): Standard, or Dynamo, where the Dynamo platform (Grove, KAI,
    # ModelExpress) is installed and serves the cluster's multi-node engines. Per cluster, and fixed once applied.
    stack: Literal["Standard", "Dynamo"] | None = "Standard"
    placement: Placement | None = None

    @property
    def placement_labels(self) -> dict[str, str]:
        return self.placement.labels if self.placement else {}

    @property
    def tier(self) -> int:
        return self.placement.tier if self.placement else 0

    @property
    def fold_back_limit(self) -> int:
        return self.placement.fold_back_limit if self.placement else FoldBack().maxPerPlan


class GatewayStatus(Strict):
    address: str | None = None
    # the reference's v0.5 (a v0.5 cluster's `kubectl get -o yaml` loads as observed state): the cluster gateway's
    # internal name and its serving CA, for the fleet gateway's mutual TLS; read, never required
    hostname: str | None = None
    caCertificate: Annotated[str, Str(0, 16384)] | None = None


class ObservedDevice(Device):
    """A device as a cluster reports it: a count of 0 (drivers not up yet, devices failed) means no capacity."""

    count: Annotated[int, Int(0, 64)] = 1


class GpuPool(Strict):
    name: Annotated[str, Str(1)]
    nodes: int | None = None
    devices: list[ObservedDevice] | None = Field(default=None, max_length=16)


class ClusterStatus(Strict):
    """Observed state; a manifest that carries it describes the cluster as it is."""

    conditions: list[Condition] | None = None
    providerConfigRef: dict[str, Any] | None = None
    gateway: GatewayStatus | None = None
    cache: CacheSettings | None = None
    gpuPools: list[GpuPool] | None = Field(default=None, max_length=8)
    namespace: str | None = None


class InferenceCluster(Resource):
    kind: Literal["InferenceCluster"]
    spec: InferenceClusterSpec
    status: ClusterStatus | None = None

    namespaced: ClassVar[bool] = False

    @property
    def existing_block(self) -> ExistingCluster:
        """The `existing` block of a cluster whose source is Existing (validation guarantees it is there)."""
        if self.spec.cluster.existing is None:
            raise ValueError(f"InferenceCluster/{self.name} has no existing block")
        return self.spec.cluster.existing


def inference_cluster_rules(ic: InferenceCluster) -> Rule:
    cluster = ic.spec.cluster
    block = cluster.source.lower()
    if getattr(cluster, block) is None:
        yield ("spec", "cluster", block), f"source {cluster.source} needs the {block} block"
    if cluster.existing is not None:
        ref = cluster.existing.secretRef
        yield from secret_reference_rules(ref.name, ref.key, ("spec", "cluster", "existing", "secretRef"))
        if cluster.source != "Existing" and "addons" in cluster.existing.model_fields_set:
            yield ("spec", "cluster", "existing", "addons"), (
                f"only an Existing cluster's add-ons can be left to its platform team: this {cluster.source} "
                "cluster is provisioned by its platform stack, which installs them (remove the field, or bring the "
                "cluster as source Existing)")
    labels = ic.spec.placement_labels
    where = ("spec", "placement", "metadata", "labels")
    yield from ((where + (k,), PLACEMENT_LABELS_RESERVED) for k in sorted(labels) if k.startswith(RESERVED_PREFIX))
    yield from label_rules({k: v for k, v in labels.items() if not k.startswith(RESERVED_PREFIX)}, where)
    yield from unique(ic.spec.taints or [], lambda t: (t.key, t.effect), ("spec", "taints"), "taint (key, effect)")
    yield from unique(ic.spec.nodePools, lambda p: p.name, ("spec", "nodePools"), "node pool name")
    for i, pool in enumerate(ic.spec.nodePools):
        path = ("spec", "nodePools", i)
        fabric = pool.fabric or Fabric()
        if fabric.infiniband is not None and fabric.type != "InfiniBand":
            yield path + ("fabric", "infiniband"), "infiniband is only allowed with fabric type InfiniBand"
        if cluster.source == "Nebius" and fabric.type == "InfiniBand" and fabric.infiniband is None:
            yield path + ("fabric", "infiniband"), "an InfiniBand fabric on Nebius needs fabric.infiniband"
        if pool.minNodeCount is not None and pool.maxNodeCount is not None and pool.minNodeCount > pool.maxNodeCount:
            yield path + ("minNodeCount",), "minNodeCount is larger than maxNodeCount"
        region = getattr(getattr(cluster, block), "region", None) if cluster.source in ("GKE", "EKS") else None
        for z, zone in enumerate(pool.zones or []):
            # GKE zones are <region>-<letter>, EKS's <region><letter> (local zones <region>-<place>-<n><letter>)
            if region and not zone.startswith(region):
                yield path + ("zones", z), (f"zone {zone!r} is not in the cluster's region {region!r} ({cluster.source} "
                                            f"zones there start with {region!r})")
