"""Who creates what, once and in order: one owner per object, namespaces and CRDs before what uses them, quotas
before the releases they gate, one stack per object, programs that run, workloads Pulumi waits for."""

from __future__ import annotations

from typing import Iterable

from automation.checks.graph import Graph, Node, Violation, violation
from automation.planning.addons import BUILT_IN_GROUPS, BUILT_IN_NAMESPACES
from components.versions import CHARTS
from fleet.stack_id import MAX_LENGTH
from workloads.readiness import awaited

# What a model stack's success must mean: the workload serves.
SERVING_KINDS = {"Deployment", "StatefulSet", "LeaderWorkerSet", "DynamoGraphDeployment"}


def one_owner(graph: Graph) -> Iterable[Violation]:
    """Each Kubernetes object (and each CRD, and each Helm release) has one owning resource per cluster."""
    owners: dict[tuple, Node] = {}

    def claim(key: tuple, node: Node, what: str):
        if key in owners and owners[key].resource is not node.resource:
            first = owners[key]
            return violation(node, "one-owner", f"{what} on {node.cluster} is also created by {first.stack}/{first.label}: "
                                                "two owners fail on first apply, and deleting either removes it from the other")
        owners.setdefault(key, node)
        return None

    for node in graph.objects:
        found = claim((node.cluster, node.group, node.kind, node.namespace, node.name), node,
                      f"{node.kind} {node.namespace + '/' if node.namespace else ''}{node.name}")
        if found:
            yield found
        if node.kind == "CustomResourceDefinition":
            spec = node.inputs.get("spec") or {}
            found = claim((node.cluster, "crd", spec.get("group"), (spec.get("names") or {}).get("kind")), node,
                          f"the CRD of {(spec.get('names') or {}).get('kind')}.{spec.get('group')}")
            if found:
                yield found
    for node in graph.releases:
        inputs = node.inputs
        found = claim((node.cluster, "helm", inputs.get("namespace"), inputs.get("name")), node,
                      f"Helm release {inputs.get('namespace')}/{inputs.get('name')}")
        if found:
            yield found
        chart = graph.chart(node)
        for group, kind in chart.crds if chart and not chart.skip_crds else ():
            found = claim((node.cluster, "crd", group, kind), node, f"the CRD of {kind}.{group}")
            if found:
                yield found


def namespaces_exist(graph: Graph) -> Iterable[Violation]:
    """Every namespaced object's namespace is built in, or created before it on that cluster."""
    creators: dict[tuple, list[Node]] = {}
    for node in graph.objects:
        if node.kind == "Namespace":
            creators.setdefault((node.cluster, node.name), []).append(node)
    for node in graph.releases:
        if node.inputs.get("createNamespace"):
            creators.setdefault((node.cluster, node.inputs.get("namespace")), []).append(node)
    needs = [(n, n.namespace) for n in graph.objects if n.namespace]
    needs += [(n, n.inputs.get("namespace") or "default") for n in graph.releases if not n.inputs.get("createNamespace")]
    addon_namespaces = {spec.namespace for spec in CHARTS.values()}
    for node, namespace in needs:
        if namespace in BUILT_IN_NAMESPACES or (namespace in addon_namespaces and graph.addons_provided(node.cluster)):
            continue
        if not graph.exists_before(creators.get((node.cluster, namespace), []), node):
            yield violation(node, "namespace", f"namespace {namespace!r} on {node.cluster} is not created by this stack "
                                               "(before this object) or by a stack that runs earlier")


def crd_installers(graph: Graph) -> dict[tuple, list[Node]]:
    """(cluster, group, kind) -> what installs that CRD there: a CRD object, or a chart that declares it."""
    installers: dict[tuple, list[Node]] = {}
    for node in graph.objects:
        if node.kind == "CustomResourceDefinition":
            spec = node.inputs.get("spec") or {}
            installers.setdefault((node.cluster, spec.get("group"), (spec.get("names") or {}).get("kind")), []).append(node)
    for node in graph.releases:
        chart = graph.chart(node)
        for group, kind in chart.crds if chart and not chart.skip_crds else ():
            installers.setdefault((node.cluster, group, kind), []).append(node)
    return installers


def crds_installed(graph: Graph) -> Iterable[Violation]:
    """Every custom resource's CRD is installed before it on that cluster, by a CRD object or a chart that declares it."""
    installers = crd_installers(graph)
    for node in graph.objects:
        if node.group in BUILT_IN_GROUPS or graph.addons_provided(node.cluster):
            continue
        if not graph.exists_before(installers.get((node.cluster, node.group, node.kind), []), node):
            yield violation(node, "crd", f"no CRD for {node.kind}.{node.group} is installed on {node.cluster} before it "
                                         "(a CustomResourceDefinition object, or a chart whose CRDs are declared in "
                                         "components/versions.py)")


def quota_before_release(graph: Graph) -> Iterable[Violation]:
    """A Helm release waits for the ResourceQuotas and LimitRanges of its namespace (they gate its pods)."""
    gates: dict[tuple, list[Node]] = {}  # (cluster, namespace) -> its gates
    for n in graph.objects:
        if n.kind in ("ResourceQuota", "LimitRange"):
            gates.setdefault((n.cluster, n.namespace), []).append(n)
    for release in graph.releases:
        namespace = release.inputs.get("namespace")
        for gate in gates.get((release.cluster, namespace), ()):
            if not graph.before(gate, release):
                yield violation(release, "quota-before-release", f"{gate.kind} {namespace}/{gate.name} ({gate.stack}) is "
                                                                 "not created before this release, whose pods it admits")


def stack_names(graph: Graph) -> Iterable[Violation]:
    """One stack stands for one object: two objects that map to one stack name would share (and fight over) it."""
    for stack, owners in sorted(graph.owners.items()):
        if len(stack) > MAX_LENGTH:  # the backend refuses the stack before anything is created
            yield Violation(stack, "-", "stack-names", f"the stack name has {len(stack)} characters; Pulumi accepts at "
                                                       f"most {MAX_LENGTH}: shorten {', '.join(sorted(owners))}")
        if len(owners) > 1:
            yield Violation(stack, "-", "stack-names", f"one stack name for {len(owners)} objects: {', '.join(sorted(owners))}")


def programs_run(graph: Graph) -> Iterable[Violation]:
    """Every stack's program runs to the end (a failing program applies nothing, and hides what it would create)."""
    for stack in graph.stacks:
        if stack.error:
            yield Violation(stack.name, "-", "program", stack.error)


def workloads_awaited(graph: Graph) -> Iterable[Violation]:
    """A model stack succeeds only once its workloads serve: each is a kind Pulumi awaits, or says what to wait for."""
    for node in graph.objects:
        if node.stack.startswith("model-") and node.kind in SERVING_KINDS:
            annotations = (node.inputs.get("metadata") or {}).get("annotations") or {}
            if not awaited(node.kind, annotations):
                yield violation(node, "awaited", f"Pulumi would not wait for {node.kind} {node.name} to be ready (give "
                                                 "it a pulumi.com/waitFor annotation): its stack would succeed, and "
                                                 "ReplicasReady turn True, while nothing serves")
