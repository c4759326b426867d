"""What the clouds' resources say: each is pinned to its cluster's provider and region, and the taints a cloud
puts on a pool's nodes are tolerated by the pods placed there."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Iterable

from automation.checks.graph import Graph, Node, Violation, violation
from automation.checks.offline import unwrap

CLOUD_PACKAGES = ("gcp:", "aws:", "eks:", "azure-native:", "nebius:", "vultr:", "civo:")
CLOUD_PROVIDERS = {"pulumi:providers:gcp", "pulumi:providers:aws", "pulumi:providers:azure-native",
                   "pulumi:providers:nebius", "pulumi:providers:vultr", "pulumi:providers:civo"}



def pinned(graph: Graph) -> Iterable[Violation]:
    """Cloud resources use an explicit provider of their cluster's region; Kubernetes resources name their cluster."""
    for stack in graph.stacks:
        providers = {r.name: r for r in stack.resources if r.type in CLOUD_PROVIDERS}
        facts = graph.clusters.get(stack.cluster or "")
        for r in stack.resources:
            if r.type.startswith("kubernetes:") and r.cluster is None and (r.custom or r.type.startswith("kubernetes:yaml")):
                yield Violation(stack.name, r.name, "pinned", "uses no explicit Kubernetes provider: it would apply to "
                                                              "whatever cluster the ambient kubeconfig names")
            if not r.type.startswith(CLOUD_PACKAGES) or r.type in CLOUD_PROVIDERS:
                continue
            package = r.type.split(":", 1)[0]
            name = r.provider or r.providers.get(package) or r.providers.get("aws" if package == "eks" else package)
            provider = providers.get(name or "")
            if provider is None:
                yield Violation(stack.name, r.name, "pinned", "uses no explicit cloud provider: its region and "
                                                              "credentials would come from the environment")
                continue
            inputs = unwrap(provider.inputs)
            region = inputs.get("location" if provider.type == "pulumi:providers:azure-native" else "region")
            if provider.type == "pulumi:providers:vultr":  # Vultr's provider has no region: the VKE cluster names it
                region = unwrap(r.inputs).get("region", facts.region if facts else None)
            if facts and facts.region and region != facts.region:
                yield Violation(stack.name, r.name, "pinned", f"its provider {provider.name} is for region "
                                                              f"{region}, not the cluster's {facts.region}")
            if provider.type == "pulumi:providers:gcp" and not inputs.get("project"):
                yield Violation(stack.name, r.name, "pinned", f"its provider {provider.name} names no project")


@dataclass(frozen=True)
class Taint:
    key: str
    value: str | None
    effect: str


@dataclass(frozen=True)
class Toleration:
    key: str | None
    operator: str
    value: str | None
    effect: str | None


POOL_LABEL = "modelplane.ai/pool"
CLOUD_EFFECTS = {"NO_SCHEDULE": "NoSchedule", "NO_EXECUTE": "NoExecute", "PREFER_NO_SCHEDULE": "PreferNoSchedule"}
# Taints a cloud puts on a pool's nodes itself: AKS on every spot pool (and it refuses to remove it).
AKS_SPOT_TAINT = Taint("kubernetes.azure.com/scalesetpriority", "spot", "NoSchedule")
# Node daemons GPU nodes need, and where their chart's values take tolerations.
NODE_DAEMONS = {"node-feature-discovery": ("worker", "tolerations"), "nvidia-dra-driver": ("kubeletPlugin", "tolerations")}


def _taint_text(text: str) -> Taint:
    head, _, effect = text.partition(":")
    key, _, value = head.partition("=")
    return Taint(key, value or None, effect)


def _cloud_taints(items) -> list[Taint]:
    """Taints as a cloud's API writes them (`NO_SCHEDULE`), as Kubernetes does (`NoSchedule`)."""
    return [Taint(t["key"], t.get("value"), CLOUD_EFFECTS.get(t.get("effect"), t.get("effect"))) for t in items or []]


def pool_taints(node: Node) -> tuple[str, list[Taint]] | None:
    """A cloud node pool's `modelplane.ai/pool` label and the taints its nodes carry, or None. Every node of the fleet
    is asked: only a pool's inputs are read (and so unwrapped and kept, `Node.inputs`)."""
    type_ = node.resource.type
    if type_ == "azure-native:containerservice:AgentPool":
        inputs = node.inputs
        labels, taints = inputs.get("nodeLabels") or {}, [_taint_text(t) for t in inputs.get("nodeTaints") or []]
        if inputs.get("scaleSetPriority") == "Spot":
            taints.append(AKS_SPOT_TAINT)
    elif type_ == "gcp:container/nodePool:NodePool":
        config = node.inputs.get("nodeConfig") or {}
        labels, taints = config.get("labels") or {}, _cloud_taints(config.get("taints"))
    elif type_ == "aws:eks/nodeGroup:NodeGroup":
        labels, taints = node.inputs.get("labels") or {}, _cloud_taints(node.inputs.get("taints"))
    elif type_.startswith("nebius:") and type_.endswith(":Mk8sV1NodeGroup"):
        template = node.inputs.get("template") or {}
        labels, taints = (template.get("metadata") or {}).get("labels") or {}, _cloud_taints(template.get("taints"))
    elif type_ in ("vultr:index/kubernetesNodePools:KubernetesNodePools", "civo:index/kubernetesNodePool:KubernetesNodePool"):
        labels, taints = node.inputs.get("labels") or {}, _cloud_taints(node.inputs.get("taints"))
    else:
        return None
    return (labels[POOL_LABEL], taints) if POOL_LABEL in labels else None


def _tolerations(items) -> list[Toleration]:
    return [Toleration(t.get("key"), t.get("operator") or "Equal", t.get("value"), t.get("effect"))
            for t in items or [] if isinstance(t, dict)]


def _pod_specs(value) -> Iterable[dict]:
    """Every PodSpec inside an object (a Deployment's template, a LeaderWorkerSet's leader and worker...)."""
    if isinstance(value, dict):
        if isinstance(value.get("containers"), list):
            yield value
        for v in value.values():
            yield from _pod_specs(v)
    elif isinstance(value, list):
        for v in value:
            yield from _pod_specs(v)


def pool_taints_tolerated(graph: Graph) -> Iterable[Violation]:
    """A pod pinned to a pool tolerates every taint its nodes carry, the cloud's own included; a node daemon
    GPU nodes need tolerates every GPU pool's. Else it stays Pending, or the pool never advertises devices."""
    from fleet.taints import describe, untolerated

    pools: dict[tuple, list[Taint]] = {}
    platform_cluster = {s.name: s.cluster for s in graph.stacks}  # a cloud resource's cluster is its stack's
    for node in graph.nodes:
        found = pool_taints(node)
        if found:
            pools[(node.cluster or platform_cluster.get(node.stack), found[0])] = found[1]
    blocking = ("NoSchedule", "NoExecute")
    for node in graph.objects:
        for pod in _pod_specs(node.inputs.get("spec")):
            pool = (pod.get("nodeSelector") or {}).get(POOL_LABEL)
            left = untolerated(pools.get((node.cluster, pool), []), _tolerations(pod.get("tolerations")), blocking)
            if left:
                yield violation(node, "pool-taints", f"its pods on pool {pool} of {node.cluster} do not tolerate "
                                                     f"{', '.join(describe(t) for t in left)}: they would stay Pending")
    by_cluster: dict[str | None, list[tuple[str, list[Taint]]]] = {}  # a daemon's cluster -> its pools, in order
    for (cluster, pool), taints in sorted(pools.items(), key=lambda item: (str(item[0][0]), item[0][1])):
        by_cluster.setdefault(cluster, []).append((pool, taints))
    for release in graph.releases:
        chart = graph.chart(release)
        if chart is None or chart.key not in NODE_DAEMONS:
            continue
        section, key = NODE_DAEMONS[chart.key]
        tolerations = _tolerations(((release.inputs.get("values") or {}).get(section) or {}).get(key))
        for pool, taints in by_cluster.get(release.cluster, ()):
            left = untolerated(taints, tolerations, blocking)
            if left:
                yield violation(release, "pool-taints", f"its {section} pods do not tolerate "
                                                        f"{', '.join(describe(t) for t in left)} on pool {pool}: the "
                                                        "pool's devices would never be advertised")
