"""The graph the deployability check reads: every stack's registered resources, as Kubernetes objects where they
are, with what runs before what.

"Before" is what the engine guarantees: an earlier stack is one this stack (transitively)
depends on; inside a stack, a resource that this one (transitively) waits for, where waiting
for a component means waiting for everything in it, and a ConfigGroup creates its Namespaces
and CRDs before its other objects.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from functools import cached_property
from typing import Iterable

from automation.checks.offline import Registered, unwrap
from automation.checks.offline_preview import StackPreview
from components.versions import Chart, by_release_name
from fleet.team_policy import Policies

RELEASE = "kubernetes:helm.sh/v3:Release"
CLUSTER_SCOPED = {"Namespace", "CustomResourceDefinition", "StorageClass", "ClusterRole", "ClusterRoleBinding",
                  "PriorityClass", "GatewayClass", "DeviceClass", "PersistentVolume", "IngressClass", "RuntimeClass",
                  "ValidatingWebhookConfiguration", "MutatingWebhookConfiguration", "ClusterIssuer",
                  "ClusterTriggerAuthentication", "ClusterTopology", "CSIDriver", "ResourceSlice", "APIService"}


@dataclass(frozen=True)
class Violation:
    stack: str
    resource: str
    rule: str
    message: str

    def __str__(self) -> str:
        return f"{self.stack}: {self.resource}: {self.rule}: {self.message}"


@dataclass(frozen=True)
class ClusterFacts:
    """What the check knows of a cluster from the fleet: its source, region and admin-provided storage, and whether
    its platform team provides its add-ons (their CRDs, controllers and namespaces are then not in the graph:
    `up` checks the cluster serves what is placed there before anything is applied, automation/planning/addons.py)."""

    source: str
    region: str | None = None
    storage_classes: frozenset[str] = frozenset()  # Existing: the classes its admin provides
    verify_addons: bool = False  # Existing with spec.cluster.existing.addons: Verify
    labels: tuple[tuple[str, str], ...] = ()  # its InferenceCluster's metadata.labels: what residency selects


@dataclass
class Node:
    """One registered resource in its stack, with what the rules read of it as Kubernetes object."""

    stack: str
    resource: Registered
    group: str = ""
    kind: str = ""
    namespace: str | None = None
    name: str = ""

    @property
    def label(self) -> str:
        return self.resource.name

    @cached_property
    def inputs(self) -> dict:
        """Unwrapped once: the rules read a node's inputs many times (a Helm release's values are large)."""
        return unwrap(self.resource.inputs)

    @property
    def cluster(self) -> str | None:
        return self.resource.cluster


def parse_type(type_: str) -> tuple[str, str] | None:
    """`kubernetes:<group>/<version>:<Kind>` -> (group, kind); None for what is not a Kubernetes object."""
    if not type_.startswith("kubernetes:") or type_.count(":") != 2:
        return None
    _, api_version, kind = type_.split(":")
    group = api_version.rsplit("/", 1)[0] if "/" in api_version else ""
    if group in ("helm.sh", "yaml", "kustomize"):
        return None
    return ("" if group == "core" else group), kind


@dataclass
class Graph:
    stacks: list[StackPreview]
    clusters: dict[str, ClusterFacts] = field(default_factory=dict)
    owners: dict[str, set[str]] = field(default_factory=dict)  # stack name -> what it stands for (kind/ns/name)
    policies: Policies = field(default_factory=lambda: Policies([]))  # the fleet's TeamPolicies

    @cached_property
    def nodes(self) -> list[Node]:
        out = []
        for stack in self.stacks:
            for r in stack.resources:
                node = Node(stack.name, r)
                parsed = parse_type(r.type)
                if parsed is not None and r.custom:
                    node.group, node.kind = parsed
                    meta = unwrap(r.inputs.get("metadata")) or {}
                    node.name = meta.get("name") or r.name
                    node.namespace = None if node.kind in CLUSTER_SCOPED else (meta.get("namespace") or "default")
                out.append(node)
        return out

    @cached_property
    def objects(self) -> list[Node]:
        return [n for n in self.nodes if n.kind]

    @cached_property
    def releases(self) -> list[Node]:
        return [n for n in self.nodes if n.resource.type == RELEASE]

    @cached_property
    def _earlier(self) -> dict[str, set[str]]:
        direct = {s.name: set(s.depends_on) for s in self.stacks}
        out: dict[str, set[str]] = {}

        def visit(name: str, seen: frozenset = frozenset()) -> set[str]:
            if name not in out:
                found: set[str] = set()
                for dep in direct.get(name, ()):
                    if dep not in seen:
                        found |= {dep} | visit(dep, seen | {name})
                out[name] = found
            return out[name]

        for name in direct:
            visit(name)
        return out

    @cached_property
    def _waits(self) -> dict[str, set[str]]:
        """urn -> every urn it waits for, transitively, inside its stack (components expanded to their contents)."""
        by_urn = {n.resource.urn: n.resource for n in self.nodes}
        children: dict[str, list[str]] = {}
        for n in self.nodes:
            if n.resource.parent_urn:
                children.setdefault(n.resource.parent_urn, []).append(n.resource.urn)
        memo: dict[str, set[str]] = {}

        def contents(urn: str) -> set[str]:
            found = {urn}
            for child in children.get(urn, []):
                found |= contents(child)
            return found

        def waits(urn: str, stack: frozenset = frozenset()) -> set[str]:
            if urn in memo:
                return memo[urn]
            found: set[str] = set()
            resource = by_urn.get(urn)
            for dep in resource.dependency_urns if resource else []:
                if dep in stack:
                    continue
                for item in contents(dep):
                    found.add(item)
                    found |= waits(item, stack | {urn})
            memo[urn] = found
            return found

        return {urn: waits(urn) for urn in by_urn}

    def before(self, first: Node, then: Node) -> bool:
        """Does `first` exist before `then` is created?"""
        if first.stack != then.stack:
            return first.stack in self._earlier.get(then.stack, set())
        return first.resource.urn in self._waits.get(then.resource.urn, set())

    def exists_before(self, candidates: Iterable[Node], then: Node) -> bool:
        return any(self.before(c, then) for c in candidates)

    def chart(self, release: Node) -> Chart | None:
        return by_release_name(str(release.inputs.get("name") or ""))

    @cached_property
    def _releases_by_cluster(self) -> dict[str | None, list[Node]]:
        out: dict[str | None, list[Node]] = {}
        for release in self.releases:
            out.setdefault(release.cluster, []).append(release)
        return out

    def releases_on(self, cluster: str | None) -> list[Node]:
        """The Helm releases on one cluster (indexed once: rules ask per release, and a fleet has thousands)."""
        return self._releases_by_cluster.get(cluster, [])

    def addons_provided(self, cluster: str | None) -> bool:
        """Its platform team provides the cluster's add-ons: what they install is checked live, not here."""
        facts = self.clusters.get(cluster or "")
        return facts is not None and facts.verify_addons


def violation(node: Node, rule: str, message: str) -> Violation:
    return Violation(node.stack, node.label, rule, message)
