"""The deployability check: would a real API server and cloud accept every stack, the first time?

Mocked programs prove what is registered, not that it applies. This check reads what every
stack of a fleet registers (the offline preview) as one graph and enforces, once, the rules a
real first `up` enforces: who creates each object's namespace, CRD and storage class, on which
cluster, in which stack and order; that exactly one stack owns each object; that routes reach
gateways able to serve their backends; that cloud resources are pinned to their cluster's region.

"Before" is what the engine guarantees: an earlier stack is one this stack (transitively)
depends on; inside a stack, a resource that this one (transitively) waits for, where waiting
for a component means waiting for everything in it, and a ConfigGroup creates its Namespaces
and CRDs before its other objects.

Each rule is a function from the graph to violations, listed in RULES with its id; every
violation names the stack, the resource and the rule.
"""

from __future__ import annotations

from workloads.service_routing import FLEET_GATEWAY

from dataclasses import dataclass, field
from functools import cached_property
from typing import Callable, Iterable, TYPE_CHECKING

from automation.planning.addons import BUILT_IN_GROUPS, BUILT_IN_NAMESPACES, TRAEFIK_WATCHES
from automation.checks.offline import Registered, unwrap
from automation.checks.offline_preview import StackPreview
from components.versions import CHARTS, COMPATIBLE, Chart, by_release_name, minor
from fleet.semver import SemverError, parse_semver
from fleet.stack_id import MAX_LENGTH, StackId
from workloads.readiness import awaited

if TYPE_CHECKING:
    from fleet.validate import Fleet

RELEASE = "kubernetes:helm.sh/v3:Release"
CLUSTER_SCOPED = {"Namespace", "CustomResourceDefinition", "StorageClass", "ClusterRole", "ClusterRoleBinding",
                  "PriorityClass", "GatewayClass", "DeviceClass", "PersistentVolume", "IngressClass", "RuntimeClass",
                  "ValidatingWebhookConfiguration", "MutatingWebhookConfiguration", "ClusterIssuer",
                  "ClusterTriggerAuthentication", "ClusterTopology", "CSIDriver", "ResourceSlice", "APIService"}
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
CLOUD_PACKAGES = ("gcp:", "aws:", "eks:", "azure-native:", "nebius:", "vultr:", "civo:")
CLOUD_PROVIDERS = {"pulumi:providers:gcp", "pulumi:providers:aws", "pulumi:providers:azure-native",
                   "pulumi:providers:nebius", "pulumi:providers:vultr", "pulumi:providers:civo"}


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
# GatewayClass controllers that route HTTPRoutes to InferencePools natively.
NATIVE_INFERENCE_CONTROLLERS = {"networking.gke.io/gateway", "istio.io/gateway-controller", "kgateway.dev/kgateway"}
ENVOY_CONTROLLER = "gateway.envoyproxy.io/gatewayclass-controller"


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


# ---- the rules -----------------------------------------------------------------------------------


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


def _storage_classes(graph: Graph) -> dict[tuple, list[Node]]:
    out: dict[tuple, list[Node]] = {}
    for node in graph.objects:
        if node.kind == "StorageClass":
            out.setdefault((node.cluster, node.name), []).append(node)
    return out


def storage(graph: Graph) -> Iterable[Violation]:
    """Claims use a StorageClass that exists before them (RWX claims an RWX provisioner), every StorageClass's
    CSI driver is installed first, and charts that claim volumes land where a default StorageClass exists."""
    classes = _storage_classes(graph)
    cluster_of_stack = {s.name: s.cluster for s in graph.stacks if s.cluster}
    platform_resources: dict[str, list[Node]] = {}
    for node in graph.nodes:
        if node.stack in cluster_of_stack:
            platform_resources.setdefault(cluster_of_stack[node.stack], []).append(node)
    for node in graph.objects:
        if node.kind == "StorageClass":
            provisioner = node.inputs.get("provisioner")
            if provisioner in CSI_DRIVERS:
                what, matches = CSI_DRIVERS[provisioner]
                drivers = [n for n in platform_resources.get(node.cluster or "", []) if matches(n.resource)]
                if not graph.exists_before(drivers, node):
                    yield violation(node, "storage", f"StorageClass {node.name} uses {provisioner}, but {what} is not "
                                                     f"installed on {node.cluster} before it")
        if node.kind != "PersistentVolumeClaim":
            continue
        spec = node.inputs.get("spec") or {}
        name = spec.get("storageClassName")
        facts = graph.clusters.get(node.cluster or "")
        source = facts.source if facts else ""
        rwx = "ReadWriteMany" in (spec.get("accessModes") or [])
        if name is None:
            name = CLOUD_DEFAULT_CLASS.get(source) or next((c.name for c in graph.objects if c.kind == "StorageClass"
                                                            and c.cluster == node.cluster and _is_default(c)), None)
            if name is None:
                if source not in TRUSTED_DEFAULT_CLASS:
                    yield violation(node, "storage", f"the claim names no StorageClass and {node.cluster} has no default one")
                continue
        created = classes.get((node.cluster, name), [])  # the default class's name too: a stack may create it
        if created:
            if not graph.exists_before(created, node):
                yield violation(node, "storage", f"StorageClass {name} is created on {node.cluster} only after this claim")
            elif rwx and created[0].inputs.get("provisioner") not in RWX_PROVISIONERS:
                yield violation(node, "storage", f"ReadWriteMany claim on StorageClass {name}, whose provisioner "
                                                 f"{created[0].inputs.get('provisioner')} cannot share a volume")
        elif name in CLOUD_STORAGE.get(source, {}):
            if rwx and CLOUD_STORAGE[source][name] not in RWX_PROVISIONERS:
                yield violation(node, "storage", f"ReadWriteMany claim on {source}'s {name}, which cannot share a volume")
        elif not (facts and name in facts.storage_classes):
            yield violation(node, "storage", f"StorageClass {name!r} is not created on {node.cluster} by an earlier stack "
                                             "and is not one the cloud or the cluster's admin provides")
    for node in graph.releases:
        chart = graph.chart(node)
        if chart is None or not chart.needs_volumes:
            continue
        facts = graph.clusters.get(node.cluster or "")
        if facts is None or facts.source in TRUSTED_DEFAULT_CLASS or facts.source in CLOUD_DEFAULT_CLASS:
            continue  # the cloud (or the cluster's admin) has a default class
        defaults = [c for c in graph.objects if c.kind == "StorageClass" and c.cluster == node.cluster and _is_default(c)]
        if not graph.exists_before(defaults, node):
            yield violation(node, "storage", f"chart {chart.chart} claims volumes, but {node.cluster} has no default "
                                             "StorageClass created before it")


def _is_default(node: Node) -> bool:
    annotations = (node.inputs.get("metadata") or {}).get("annotations") or {}
    return annotations.get(DEFAULT_CLASS_ANNOTATION) == "true"


def inference_routing(graph: Graph) -> Iterable[Violation]:
    """Every HTTPRoute attaches to a Gateway created on its cluster (else it is accepted and routes nothing), and one
    that sends traffic to an InferencePool lands on a Gateway whose controller can serve it."""
    by_key: dict[tuple[str | None, str, str | None, str | None], Node] = {
        (n.cluster, n.kind, n.namespace, n.name): n for n in graph.objects}
    for route in graph.objects:
        if route.kind != "HTTPRoute":
            continue
        spec = route.inputs.get("spec") or {}
        pools = [ref for rule in spec.get("rules") or [] for ref in rule.get("backendRefs") or []
                 if ref.get("kind") == "InferencePool"]
        for parent in spec.get("parentRefs") or []:
            key = (route.cluster, "Gateway", parent.get("namespace") or route.namespace, parent.get("name"))
            gateway = by_key.get(key)
            if gateway is None:
                # the fleet gateway's Gateway comes from the gateway stack, which an InferenceGateway asks for
                fix = (": add an InferenceGateway to the manifests (the fleet gateway's stack creates it)"
                       if (key[2], key[3]) == (FLEET_GATEWAY["namespace"], FLEET_GATEWAY["name"]) else "")
                yield violation(route, "inference-routing", f"its parent Gateway {key[2]}/{key[3]} is not created on "
                                                            f"{route.cluster}: the route would route nothing{fix}")
                continue
            if not pools:
                continue
            class_name = (gateway.inputs.get("spec") or {}).get("gatewayClassName")
            gateway_class = by_key.get((route.cluster, "GatewayClass", None, class_name))
            controller = ((gateway_class.inputs.get("spec") or {}).get("controllerName") if gateway_class else None)
            problem = _inference_controller_problem(graph, route.cluster, controller)
            if gateway_class is None:
                yield violation(route, "inference-routing", f"GatewayClass {class_name} of its Gateway is not created on "
                                                            f"{route.cluster}")
            elif problem:
                yield violation(route, "inference-routing", f"routes to an InferencePool through GatewayClass {class_name}, "
                                                            f"but {problem}")


ENVOY_GATEWAY_GROUP = "gateway.envoyproxy.io"
ENVOY_POLICIES = ("BackendTrafficPolicy", "ClientTrafficPolicy", "SecurityPolicy", "EnvoyExtensionPolicy")


def gateway_references(graph: Graph) -> Iterable[Violation]:
    """Envoy Gateway resolves an HTTPRoute's Backends and filters, and a policy's targets, by name in the object's
    own namespace on its cluster: one that names nothing there is accepted and does nothing (a route whose Backend
    is missing answers 500). A route to Backends needs an Envoy Gateway to serve it."""
    by_key: dict[tuple[str | None, str, str | None, str | None], Node] = {
        (n.cluster, n.kind, n.namespace, n.name): n for n in graph.objects}
    for node in graph.objects:
        spec = node.inputs.get("spec") or {}
        refs: list[tuple[str, str, str]] = []
        if node.kind == "HTTPRoute":
            for rule in spec.get("rules") or []:
                refs += [("Backend", ref.get("kind", ""), ref.get("name", "")) for ref in rule.get("backendRefs") or []
                         if ref.get("group") == ENVOY_GATEWAY_GROUP]
                refs += [("filter", f["extensionRef"].get("kind", ""), f["extensionRef"].get("name", ""))
                         for f in rule.get("filters") or [] if f.get("type") == "ExtensionRef"
                         and (f.get("extensionRef") or {}).get("group") == ENVOY_GATEWAY_GROUP]
        elif node.group == ENVOY_GATEWAY_GROUP and node.kind in ENVOY_POLICIES:
            refs += [("target", t.get("kind", ""), t.get("name", "")) for t in spec.get("targetRefs") or []]
        for role, kind, name in refs:
            if (node.cluster, kind, node.namespace, name) not in by_key:
                yield violation(node, "gateway-references", f"its {role} {kind} {node.namespace}/{name} is not created "
                                                            f"on {node.cluster}: Envoy Gateway would resolve nothing")
        if node.kind != "HTTPRoute" or not any(role == "Backend" for role, _, _ in refs):
            continue
        for parent in spec.get("parentRefs") or []:
            gateway = by_key.get((node.cluster, "Gateway", parent.get("namespace") or node.namespace, parent.get("name")))
            class_name = ((gateway.inputs.get("spec") or {}).get("gatewayClassName") if gateway else None)
            gateway_class = by_key.get((node.cluster, "GatewayClass", None, class_name))
            controller = (gateway_class.inputs.get("spec") or {}).get("controllerName") if gateway_class else None
            if gateway is not None and controller != ENVOY_CONTROLLER:
                yield violation(node, "gateway-references", f"routes to Envoy Gateway Backends through GatewayClass "
                                                            f"{class_name}, whose controller {controller} cannot")


def _inference_controller_problem(graph: Graph, cluster: str | None, controller: str | None) -> str | None:
    if controller in NATIVE_INFERENCE_CONTROLLERS:
        return None
    if controller != ENVOY_CONTROLLER:
        return f"its controller {controller} cannot route to InferencePools"
    if graph.addons_provided(cluster):  # the platform team's Envoy Gateway and Envoy AI Gateway: docs/platform.md
        return None
    releases = {chart.key: r for r in graph.releases_on(cluster) if (chart := graph.chart(r)) is not None}
    if "ai-gateway" not in releases:
        return f"Envoy Gateway serves InferencePools only with the Envoy AI Gateway controller, not installed on {cluster}"
    envoy = releases.get("envoy-gateway")
    manager = ((((envoy.inputs.get("values") if envoy else None) or {}).get("config") or {})
               .get("envoyGateway") or {}).get("extensionManager") or {}
    resources = manager.get("backendResources") or []
    if not any(r.get("kind") == "InferencePool" and r.get("group") == "inference.networking.k8s.io" and r.get("version") == "v1"
               for r in resources):
        return "Envoy Gateway's extensionManager.backendResources does not list InferencePool (inference.networking.k8s.io/v1)"
    if not ((manager.get("service") or {}).get("fqdn") or {}).get("hostname", "").startswith("ai-gateway-controller."):
        return "Envoy Gateway's extensionManager.service does not point at the AI gateway controller"
    if "xdsTranslator" not in (manager.get("hooks") or {}):
        return "Envoy Gateway's extensionManager has no xdsTranslator hooks"
    return None


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


# What a model stack's success must mean: the workload serves.
SERVING_KINDS = {"Deployment", "StatefulSet", "LeaderWorkerSet", "DynamoGraphDeployment"}
# The CRDs a gateway controller's informers wait on before it serves anything (chart release name -> (group, kind)).
INFORMERS = {"traefik": list(TRAEFIK_WATCHES)}


def workloads_awaited(graph: Graph) -> Iterable[Violation]:
    """A model stack succeeds only once its workloads serve: each is a kind Pulumi awaits, or says what to wait for."""
    for node in graph.objects:
        if node.stack.startswith("model-") and node.kind in SERVING_KINDS:
            annotations = (node.inputs.get("metadata") or {}).get("annotations") or {}
            if not awaited(node.kind, annotations):
                yield violation(node, "awaited", f"Pulumi would not wait for {node.kind} {node.name} to be ready (give "
                                                 "it a pulumi.com/waitFor annotation): its stack would succeed, and "
                                                 "ReplicasReady turn True, while nothing serves")


def controller_prerequisites(graph: Graph) -> Iterable[Violation]:
    """A gateway controller's informers wait on CRDs: each is installed before its release on that cluster."""
    installers = crd_installers(graph)
    for release in graph.releases:
        chart = graph.chart(release)
        if graph.addons_provided(release.cluster):  # the CRDs are the platform team's, checked live before apply
            continue
        for group, kind in INFORMERS.get(chart.key, []) if chart else ():
            if not graph.exists_before(installers.get((release.cluster, group, kind), []), release):
                yield violation(release, "controller-prerequisites", f"its controller waits on {kind}.{group}, whose CRD "
                                                                    f"is not installed on {release.cluster} before it: "
                                                                    "it would never serve")


def _version(release: Node, chart: Chart) -> str:
    return str(release.inputs.get("version") or chart.version)


def _older(version: str, than: str) -> bool:
    try:
        return parse_semver(version, normalize=True) < parse_semver(than, normalize=True)
    except SemverError:
        return False  # not a version this check can order: nothing to say


def webhooks_ready(graph: Graph) -> Iterable[Violation]:
    """An object a chart's admission webhook guards is created after that release, which waits until the
    webhook serves: else the API server refuses it ("failed calling webhook ... connection refused")."""
    guarded: dict[tuple, list[tuple[Node, Chart]]] = {}
    for release in graph.releases:
        chart = graph.chart(release)
        for group, kind in chart.webhooks if chart else ():
            guarded.setdefault((release.cluster, group, kind), []).append((release, chart))  # type: ignore[arg-type]
    for node in graph.objects:
        for release, chart in guarded.get((node.cluster, node.group, node.kind), []):
            version = _version(release, chart)
            if not graph.before(release, node):
                yield violation(node, "webhook-ready", f"{chart.key}'s webhook validates {node.kind}, but the object "
                                                       f"is not created after its release on {node.cluster}: the API "
                                                       "server would refuse it while no webhook serves")
            elif str(release.inputs.get("skipAwait")).lower() == "true":
                yield violation(node, "webhook-ready", f"{chart.key}'s release does not wait for its pods "
                                                       "(skipAwait): its webhook may not serve yet")
            elif chart.webhook_ready_from and _older(version, chart.webhook_ready_from):
                yield violation(node, "webhook-ready", f"{chart.key} {version} reports ready before its webhook "
                                                       f"serves (fixed in {chart.webhook_ready_from}): pin "
                                                       f"{chart.key} >= {chart.webhook_ready_from}")


def served_versions(graph: Graph) -> Iterable[Violation]:
    """A custom resource's apiVersion is one its CRD serves: the CRD object registered on that cluster, or what
    the pinned chart that installs the kind serves (a version the API server does not serve is a 404)."""
    served: dict[tuple, set[str]] = {}
    for node in graph.objects:
        if node.kind == "CustomResourceDefinition":
            spec = node.inputs.get("spec") or {}
            names = spec.get("names") or {}
            versions = {f"{spec.get('group')}/{v.get('name')}" for v in spec.get("versions") or []
                        if v.get("served", True)}
            if versions and names.get("kind"):
                served.setdefault((node.cluster, spec.get("group"), names["kind"]), set()).update(versions)
    for release in graph.releases:
        chart = graph.chart(release)
        if chart and chart.serves and _version(release, chart) == chart.version:
            for group, kind in chart.crds:
                served.setdefault((release.cluster, group, kind), set()).update(
                    v for v in chart.serves if v.startswith(f"{group}/"))
    for node in graph.objects:
        serving = served.get((node.cluster, node.group, node.kind)) or set()
        api_version = node.resource.type.split(":")[1]
        if serving and api_version not in serving:
            yield violation(node, "served-version", f"{node.kind} {api_version} is not served on {node.cluster} "
                                                    f"(its CRD serves {', '.join(sorted(serving))})")


def compatible_versions(graph: Graph) -> Iterable[Violation]:
    """Charts that run on each other are a pair their projects build and test together (COMPATIBLE)."""
    for release in graph.releases:
        chart = graph.chart(release)
        wanted = COMPATIBLE.get((chart.key, minor(_version(release, chart)))) if chart else None
        if chart is None or wanted is None:
            continue
        base, base_minor = wanted
        for other in graph.releases_on(release.cluster):
            other_chart = graph.chart(other)
            if other_chart and other_chart.key == base and minor(_version(other, other_chart)) != base_minor:
                yield violation(release, "compatible-versions",
                                f"{chart.key} {_version(release, chart)} is built on {base} {base_minor}.x, not "
                                f"{_version(other, other_chart)}: pin {base} to {base_minor}.x")


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


def _ports(container: dict) -> set:
    return {p.get(key) for p in container.get("ports") or [] for key in ("name", "containerPort") if p.get(key)}


def api_services(graph: Graph) -> Iterable[Violation]:
    """An APIService's Service exists on its cluster with the port it names, and that Service's target port is a
    port of the pods it selects (else the API server's proxy gets no answer and the whole group is unavailable);
    a ScaledObject scaling an aggregated kind (a ModelDeployment) finds its group's APIService on its cluster."""
    services = {(n.cluster, n.namespace, n.name): n for n in graph.objects if n.kind == "Service"}
    workloads = [n for n in graph.objects if n.kind in ("Deployment", "StatefulSet")]
    groups = {(n.cluster, (n.inputs.get("spec") or {}).get("group")) for n in graph.objects if n.kind == "APIService"}
    for node in graph.objects:
        if node.kind == "ScaledObject":
            target = (node.inputs.get("spec") or {}).get("scaleTargetRef") or {}
            group = str(target.get("apiVersion") or "").rpartition("/")[0]
            if group == "modelplane.ai" and (node.cluster, group) not in groups:  # served by the portal alone
                yield violation(node, "api-service", f"scales {target.get('kind')} of {group}, which no APIService "
                                                     f"serves on {node.cluster}")
        if node.kind != "APIService":
            continue
        ref = (node.inputs.get("spec") or {}).get("service") or {}
        key = (node.cluster, str(ref.get("namespace")), str(ref.get("name")))
        service = services.get(key)
        if service is None:
            yield violation(node, "api-service", f"its Service {ref.get('namespace')}/{ref.get('name')} is not created "
                                                 f"on {node.cluster}")
            continue
        spec = service.inputs.get("spec") or {}
        port = next((p for p in spec.get("ports") or [] if p.get("port") == ref.get("port", 443)), None)
        if port is None:
            yield violation(node, "api-service", f"its Service {key[1]}/{key[2]} has no port {ref.get('port', 443)}")
            continue
        selector = spec.get("selector") or {}
        target_port = port.get("targetPort", port.get("port"))
        pods = [w for w in workloads if w.cluster == service.cluster and w.namespace == service.namespace
                and selector and selector.items() <= (((w.inputs.get("spec") or {}).get("template") or {})
                                                      .get("metadata", {}).get("labels") or {}).items()]
        containers = [c for w in pods for c in (w.inputs["spec"]["template"].get("spec") or {}).get("containers") or []]
        if not any(target_port in _ports(c) for c in containers):
            yield violation(node, "api-service", f"its Service {key[1]}/{key[2]} sends port {port.get('port')} to "
                                                 f"{target_port!r}, which no pod it selects listens on")


RULES: dict[str, Callable[[Graph], Iterable[Violation]]] = {
    "api-service": api_services,
    "pool-taints": pool_taints_tolerated,
    "webhook-ready": webhooks_ready,
    "served-version": served_versions,
    "compatible-versions": compatible_versions,
    "awaited": workloads_awaited,
    "controller-prerequisites": controller_prerequisites,
    "program": programs_run,
    "one-owner": one_owner,
    "namespace": namespaces_exist,
    "crd": crds_installed,
    "storage": storage,
    "inference-routing": inference_routing,
    "gateway-references": gateway_references,
    "pinned": pinned,
    "quota-before-release": quota_before_release,
    "stack-names": stack_names,
}


def check(graph: Graph, rules: Iterable[str] | None = None) -> list[Violation]:
    out: list[Violation] = []
    for rule in rules or RULES:
        out += RULES[rule](graph)
    return sorted(set(out), key=lambda v: (v.stack, v.resource, v.rule, v.message))


# ---- from a fleet ------------------------------------------------------------------------------------


def cluster_facts(fleet: Fleet) -> dict[str, ClusterFacts]:
    from components.args import every_cluster_args

    out = {}
    for name, args in every_cluster_args(fleet).items():
        provided = {args.cache_storage_class} if args.source == "Existing" and args.cache_storage_class else set()
        out[name] = ClusterFacts(args.source, args.region, frozenset(provided), args.verifies_addons)
    return out


def stack_owners(fleet: Fleet) -> dict[str, set[str]]:
    """The stack each workload object's stack name maps to (a collision means two objects share a stack)."""
    from workloads.render import cache_stack, model_stack, service_stack

    owners: dict[str, set[str]] = {}
    for kind, name_of in (("ModelDeployment", model_stack), ("ModelService", service_stack), ("ModelCache", cache_stack)):
        for obj in fleet.of(kind):
            owners.setdefault(name_of(obj.namespace, obj.name), set()).add(f"{kind}/{obj.namespace}/{obj.name}")
    for ic in fleet.of("InferenceCluster"):
        owners.setdefault(str(StackId.platform(ic.name)), set()).add(f"InferenceCluster/{ic.name}")
    return owners


def check_fleet(fleet: Fleet, previews: list[StackPreview]) -> list[Violation]:
    return check(Graph(previews, cluster_facts(fleet), stack_owners(fleet)))


# ---- causes before consequences ------------------------------------------------------------------------


@dataclass
class Findings:
    """The check's violations, causes first. A stack whose program fails (rule `program`) registers nothing after
    the failure, so what runs after it on its cluster misses what it would have created (namespaces, CRDs, storage
    classes, gateways): those violations follow from it, and are kept under it (`causes`), not listed before it."""

    causes: list[tuple[Violation, list[Violation]]] = field(default_factory=list)  # a failed program, what follows
    others: list[Violation] = field(default_factory=list)

    def __len__(self) -> int:
        return len(self.others) + sum(1 + len(followers) for _, followers in self.causes)

    def ordered(self) -> list[tuple[Violation, str | None]]:
        """Every violation, each failed program followed by what follows from it, then the rest: (violation, the
        stack it follows from, or None)."""
        out: list[tuple[Violation, str | None]] = []
        for cause, followers in self.causes:
            out += [(cause, None)] + [(v, cause.stack) for v in followers]
        return out + [(v, None) for v in self.others]

    @property
    def followed(self) -> list[tuple[str, int]]:
        """(failed stack, how many violations follow from it), for each failed stack with any."""
        return [(cause.stack, len(followers)) for cause, followers in self.causes if followers]

    def summary(self) -> str:
        """`N deployability violation(s), K of them because STACK cannot run`."""
        because = "".join(f", {count} of them because {stack} cannot run" for stack, count in self.followed)
        return f"{len(self)} deployability violation(s){because}"

    def lines(self, every: bool = False, listed_by: str = "--verbose") -> list[str]:
        """One line per violation, each failed program first with a line counting what follows from it (`every`:
        listed under it instead; `listed_by`: the option that lists them)."""
        out: list[str] = []
        for cause, followers in self.causes:
            out.append(str(cause))
            if followers and every:
                out += [f"  - {v}" for v in followers]
            elif followers:
                out.append(f"  + {len(followers)} violation(s) that follow from it: what runs after {cause.stack} "
                           f"misses what it would create ({listed_by} lists them)")
        return out + [str(v) for v in self.others]


def by_cause(violations: Iterable[Violation], previews: list[StackPreview]) -> Findings:
    """Sort violations into causes and consequences. A violation follows from a failed stack when it is in that
    stack, or in one that runs after it (depends on it, at any depth) and, when the failed stack makes a cluster (a
    platform stack), is about a resource on that cluster."""
    violations = list(violations)
    direct = {s.name: set(s.depends_on) for s in previews}
    later: dict[str, set[str]] = {}

    def earlier(name: str) -> set[str]:  # every stack that runs before `name`
        if name not in later:
            later[name] = set()
            for dep in direct.get(name, ()):
                later[name] |= {dep} | earlier(dep)
        return later[name]

    clusters: dict[tuple[str, str], set[str | None]] = {}
    for stack in previews:
        for r in stack.resources:
            clusters.setdefault((stack.name, r.name), set()).add(r.cluster)
    made = {s.name: s.cluster for s in previews}
    failed = [v for v in violations if v.rule == "program"]
    found = Findings(causes=[(cause, []) for cause in failed])
    for v in violations:
        if v.rule == "program":
            continue
        for cause, followers in found.causes:
            cluster = made.get(cause.stack)
            if v.stack == cause.stack or (cause.stack in earlier(v.stack) and (
                    cluster is None or cluster in clusters.get((v.stack, v.resource), set()))):
                followers.append(v)
                break
        else:
            found.others.append(v)
    return found
