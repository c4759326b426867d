"""The fleet as the scheduler sees it: clusters, their pools, and what one node of a pool offers.

Observed state wins: an InferenceCluster with a `status` is taken as written (readiness
from its conditions and gateway address, pools from `status.gpuPools` when published).
Without a status, a declared cluster counts as ready, and each pool offers
`maxNodeCount` nodes if set (the pool can grow to it), else `nodeCount`, each node with
the devices of the pool's InferenceClass.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from collections import Counter
from dataclasses import dataclass, field

from fleet.device_facts import DeviceFacts
from fleet.quantity import QuantityError, parse_quantity
from fleet.shapes import HashedOnce, hash_once
from fleet.topology import nvlink_label

if TYPE_CHECKING:
    from fleet.validate import Fleet


@dataclass(frozen=True)
class PoolDevice:
    name: str
    claim: str  # DRA or Synthetic
    device_class: str | None
    count: int  # per node
    facts: DeviceFacts
    memory: int  # bytes of `memory` capacity in any domain; 0 when the device publishes none

    @property
    def claimable(self) -> bool:
        return self.claim == "DRA"


@dataclass(frozen=True)
class PoolKind(HashedOnce):
    """What one node of a pool offers. Pools of the same class share one kind (and cache entries)."""

    devices: tuple[PoolDevice, ...]
    nvlink_domain: str | None = None  # the node label naming a node's NVLink domain (the class's spec.topology)

    __hash__ = hash_once  # used in every cache key

    @property
    def full(self) -> tuple[int, ...]:
        """A node's free devices when nothing runs on it (computed once: every ledger step compares with it)."""
        full = self.__dict__.get("_full")
        if full is None:
            full = tuple(d.count for d in self.devices)
            object.__setattr__(self, "_full", full)
        return full


@dataclass(frozen=True)
class PoolView:
    cluster: str
    name: str
    nodes: int
    kind: PoolKind
    class_name: str | None = None
    problem: str | None = None  # why the pool offers nothing, e.g. its class is missing
    # live capacity (fleet/live_capacity.py): its nodes as the ledger holds them, ((free vector, nodes), ...);
    # None: `nodes` empty nodes, as declared
    free: tuple[tuple[tuple[int, ...], int], ...] | None = None

    def empty_nodes(self) -> Counter | None:
        """The ledger's starting nodes ({free vector: nodes}) when live capacity gave them, else None (all empty)."""
        return Counter(dict(self.free)) if self.free is not None else None


@dataclass(frozen=True)
class ClusterView:
    name: str
    labels: dict = field(default_factory=dict, hash=False, compare=False)
    taints: tuple = ()
    ready: bool = True
    not_ready: str | None = None
    gateway: str | None = None
    pools: tuple[PoolView, ...] = ()
    observed: bool = False  # carried a status
    cache_storage_class: str | None = None  # the RWX StorageClass caches stage to; None: caches cannot stage here
    source: str = "Existing"
    stack: str = "Standard"  # spec.stack: Standard, or Dynamo (fleet/backends.on_dynamo_stack)
    tier: int = 0  # spec.placement.tier: new replicas fill the lowest tier with room first (fleet/scheduler.py)
    fold_back_limit: int = 1  # spec.placement.foldBack.maxPerPlan: replicas that may leave for a lower tier per plan


def device_from_spec(device) -> PoolDevice:
    attributes = tuple(sorted((key, attr.typed()) for key, attr in (device.attributes or {}).items() if attr.typed()))
    capacity = tuple(sorted((key, cap.value) for key, cap in (device.capacity or {}).items()))
    memory = 0
    for key, value in capacity:
        if key == "memory" or key.endswith("/memory"):
            try:
                memory = int(parse_quantity(value))
            except QuantityError:
                memory = 0
    return PoolDevice(device.name, device.claim, device.deviceClassName, device.count,
                      DeviceFacts(device.driver, attributes, capacity), memory)


def _readiness(status) -> tuple[bool, str | None, str | None]:
    if status is None:
        return True, None, None
    address = status.gateway.address if status.gateway and status.gateway.address else None
    conditions = {c.type: c for c in status.conditions or []}
    for wanted in (["Ready"] if "Ready" in conditions else ["ClusterReady", "BackendReady"]):
        condition = conditions.get(wanted)
        if condition is not None and condition.status != "True":
            detail = f": {condition.reason}" if condition.reason else ""
            return False, f"condition {wanted} is {condition.status}{detail}", address
    if address is None:
        return False, "no gateway address yet", None
    return True, None, address


# The RWX StorageClass each platform stack creates for model caches (the reference's names).
# Vultr has none, and an existing cluster has one only if its admin names it.
# The RWX StorageClass each cloud's platform stack creates for model caches.
CACHE_STORAGE_CLASSES = {"GKE": "modelplane-rwx", "EKS": "modelplane-rwx-efs", "AKS": "modelplane-rwx-fs",
                         "Nebius": "modelplane-rwx-fs"}


def cache_storage_class(ic) -> str | None:
    if ic.status and ic.status.cache and ic.status.cache.storageClassName:
        return ic.status.cache.storageClassName
    existing = ic.spec.cluster.existing
    if ic.spec.cluster.source == "Existing":
        return existing.cache.storageClassName if existing and existing.cache else None
    return CACHE_STORAGE_CLASSES.get(ic.spec.cluster.source)


def build_clusters(fleet: Fleet) -> list[ClusterView]:
    classes = {c.name: c for c in fleet.of("InferenceClass")}
    views = []
    # one object per distinct kind: every cache keyed on a kind then finds it by identity, not by comparing devices
    kinds: dict[PoolKind, PoolKind] = {}
    of_class: dict[str, PoolKind] = {}  # a class's kind, made once: thousands of pools share a few classes
    for ic in sorted(fleet.of("InferenceCluster"), key=lambda c: c.name):
        ready, not_ready, address = _readiness(ic.status)
        published = ic.status.gpuPools if ic.status and ic.status.gpuPools else None
        pools = []
        if published is not None:
            class_of = {np.name: np.className for np in ic.spec.nodePools}
            for gp in published:
                class_name = class_of.get(gp.name)
                kind = PoolKind(tuple(device_from_spec(d) for d in gp.devices or []),
                                nvlink_label(classes.get(class_name or "")))
                kind = kinds.setdefault(kind, kind)
                pools.append(PoolView(ic.name, gp.name, max(gp.nodes or 0, 0), kind, class_name))
        else:
            for np in ic.spec.nodePools:
                icl = classes.get(np.className)
                if icl is None:
                    pools.append(PoolView(ic.name, np.name, 0, PoolKind(()), np.className,
                                          f"InferenceClass {np.className!r} not found"))
                    continue
                if np.className not in of_class:
                    kind = PoolKind(tuple(device_from_spec(d) for d in icl.spec.devices), nvlink_label(icl))
                    of_class[np.className] = kinds.setdefault(kind, kind)
                pools.append(PoolView(ic.name, np.name, np.capacity_nodes, of_class[np.className], np.className))
        views.append(ClusterView(ic.name, dict(ic.metadata.labels or {}), tuple(ic.spec.taints or ()),
                                 ready, not_ready, address, tuple(pools), ic.status is not None,
                                 cache_storage_class(ic), ic.spec.cluster.source, ic.spec.stack or "Standard",
                                 ic.spec.tier, ic.spec.fold_back_limit))
    return views
