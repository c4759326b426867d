"""Where a node sits, as the InferenceClasses say it (`spec.topology`), and the topology levels a cluster's Grove gets.

Grove (the gang scheduler of the Dynamo platform) packs a graph's pods into a topology domain of a
`grove.io/v1alpha1` ClusterTopology: levels from broadest to narrowest, each a domain Grove knows (region, zone,
datacenter, block, rack, host, numa) and the node label whose value names it. The Grove of the pinned Dynamo
(dynamo-platform 1.2.1, Grove v0.1.0-alpha.8) reads one ClusterTopology only, `grove-topology`, which it makes
itself from its operator configuration's `topologyAwareScheduling.levels` (workloads/dynamo_platform.py sets them);
it ignores any other, and refuses topology constraints while topology-aware scheduling is off. A cluster's levels
come from the classes of its pools: the zone label (default `topology.kubernetes.io/zone`), the NVLink domain as `block` (an
NVLink domain may span racks, as on NVL36x2, so it sits above `rack` in Grove's order), the rack, and the host.
An engine with the `NVLinkDomain` capability is packed into one `block` (workloads/backends/dynamo.py), so it can only be
placed on a pool whose class names an NVLink-domain label (fleet/placement.py says so per pool).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from fleet.api.cluster import InferenceCluster
    from fleet.api.inference_class import InferenceClass

# The ClusterTopology every graph names: the one Grove v0.1.0-alpha.8 makes from its configuration and reads
# (its DefaultClusterTopologyName); named topologies arrive in later Grove releases.
CLUSTER_TOPOLOGY = "grove-topology"
NVLINK_DOMAIN = "block"  # the Grove domain an NVLink domain is, and the packDomain of NVLinkDomain engines
ZONE_LABEL = "topology.kubernetes.io/zone"
HOST_LABEL = "kubernetes.io/hostname"
ORDER = ("zone", NVLINK_DOMAIN, "rack", "host")  # broadest first


def nvlink_label(icl: InferenceClass | None) -> str | None:
    topology = icl.spec.topology if icl else None
    return topology.nvlinkDomainLabel if topology else None


def class_levels(icl: InferenceClass) -> dict[str, str]:
    """domain -> node label of one class; empty when the class declares no topology."""
    topology = icl.spec.topology
    if topology is None:
        return {}
    levels = {"zone": topology.zoneLabel or ZONE_LABEL, "host": HOST_LABEL}
    if topology.nvlinkDomainLabel:
        levels[NVLINK_DOMAIN] = topology.nvlinkDomainLabel
    if topology.rackLabel:
        levels["rack"] = topology.rackLabel
    return levels


def _declaring(ic: InferenceCluster, classes: dict[str, InferenceClass]) -> list[InferenceClass]:
    names = sorted({p.className for p in ic.spec.nodePools if p.className in classes})
    return [classes[n] for n in names if classes[n].spec.topology is not None]


def cluster_topology(ic: InferenceCluster, classes: dict[str, InferenceClass]) -> list[tuple[str, str]]:
    """The cluster's topology levels (domain, label), broadest first, as its Grove is configured with them; [] when no class of its pools declares
    a topology. Where classes disagree (a `validate` error, `topology_conflicts`), the first class by name wins."""
    merged: dict[str, str] = {}
    for icl in _declaring(ic, classes):
        for domain, key in class_levels(icl).items():
            merged.setdefault(domain, key)
    return [(d, merged[d]) for d in ORDER if d in merged]


def topology_conflicts(ic: InferenceCluster, classes: dict[str, InferenceClass]) -> list[str]:
    """Why one ClusterTopology cannot describe the cluster's pools: two classes naming different labels for one
    domain, or one label for two domains (Grove's CRD requires both to be unique)."""
    problems = []
    seen: dict[str, tuple[str, str]] = {}  # domain -> (label, class)
    for icl in _declaring(ic, classes):
        for domain, key in class_levels(icl).items():
            if domain in seen and seen[domain][0] != key:
                problems.append(f"classes {seen[domain][1]} and {icl.name} name different labels for the {domain} "
                                f"domain ({seen[domain][0]!r}, {key!r}); one ClusterTopology serves the cluster")
            seen.setdefault(domain, (key, icl.name))
    by_key: dict[str, str] = {}
    for domain in ORDER:
        if domain in seen:
            key = seen[domain][0]
            if key in by_key:
                problems.append(f"label {key!r} names both the {by_key[key]} and the {domain} domain")
            by_key.setdefault(key, domain)
    return problems
