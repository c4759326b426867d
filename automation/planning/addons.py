"""What an Existing cluster whose platform team manages its add-ons must serve (`spec.cluster.existing.addons:
Verify`), and how what it serves falls short.

On such a cluster the platform stack installs no add-on (components/serving_stack.py): no CRD, no chart. What the
project applies there still uses theirs: HTTPRoutes and Gateways the Gateway API's CRDs, InferencePools the
inference extension's, LeaderWorkerSets LWS's, ResourceClaimTemplates DRA's `resource.k8s.io/v1`, Certificates
cert-manager's... `needs` derives, once per plan, every API (group, version and kind) and every namespace the
stacks' objects use on each such cluster, from the stacks themselves: the workload stacks' rendered objects, and
what the platform and gateway stacks make there (`platform_objects`, `gateway_uses`). It travels on the desired
state (automation/planning/stacks.py `addon_needs`, `DesiredState.needs`): `up`, `preview` and the portal's worker check it
against the cluster's discovery before anything is applied (automation/execution/session.py `unserved_addons`), and
`plan` shows it. `missing` is the comparison, one line per API the cluster does not serve.

What discovery cannot show is not checked: that the controllers behind the CRDs run, and how they are configured
(Envoy Gateway's extension server for InferencePools, the NVIDIA DRA driver's DeviceClasses, Node Feature
Discovery, an Envoy Gateway rate-limit backend). docs/platform.md says so.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Iterable, Mapping

from components.versions import CHARTS
from workloads import dynamo_platform, front_door_mtls

if TYPE_CHECKING:
    from components.args import ClusterArgs, GatewayArgs

# Groups every supported API server serves at the versions the project uses: never checked.
BUILT_IN_GROUPS = {"", "apps", "batch", "rbac.authorization.k8s.io", "storage.k8s.io", "networking.k8s.io", "policy",
                   "autoscaling", "discovery.k8s.io", "apiextensions.k8s.io", "resource.k8s.io", "scheduling.k8s.io",
                   "coordination.k8s.io", "admissionregistration.k8s.io", "node.k8s.io", "certificates.k8s.io",
                   "apiregistration.k8s.io"}
# Built-in groups whose version the project uses is served only from some Kubernetes release on: checked.
VERSION_GATED = {"resource.k8s.io": "Kubernetes 1.34 or later (Dynamic Resource Allocation's resource.k8s.io/v1)"}
BUILT_IN_NAMESPACES = {"default", "kube-system", "kube-public", "kube-node-lease"}
SYSTEM_NAMESPACE = front_door_mtls.NAMESPACE  # modelplane-system, which the platform stack creates everywhere
# CRDs the project bundles (workloads/crds/upstream, installed by components/crds.py where it installs add-ons).
BUNDLED = {"gateway.networking.k8s.io": "the Gateway API's CRDs (standard channel)",
           "inference.networking.k8s.io": "the Gateway API Inference Extension's CRDs",
           "inference.networking.x-k8s.io": "the Gateway API Inference Extension's CRDs",
           "llm-d.ai": "llm-d's router CRDs"}
# The add-on each chart is, as a platform team knows it (components/versions.py keys).
ADDON_NAMES = {"cert-manager": "cert-manager", "trust-manager": "trust-manager", "envoy-gateway-crds": "Envoy Gateway",
               "envoy-gateway": "Envoy Gateway", "ai-gateway-crds": "Envoy AI Gateway", "ai-gateway": "Envoy AI Gateway",
               "lws": "LeaderWorkerSet", "node-feature-discovery": "Node Feature Discovery",
               "nvidia-dra-driver": "the NVIDIA DRA driver", "keda": "KEDA",
               "prometheus": "the Prometheus Operator (kube-prometheus-stack)", "dynamo": "the Dynamo platform",
               "metallb": "MetalLB", "traefik": "Traefik"}
# Kinds a controller of ours watches without the project creating any: it fails to start while they are not served.
WATCHED = {
    # the llm-d endpoint picker of every InferencePool (workloads/routing.py endpoint_picker)
    ("inference.networking.k8s.io", "InferencePool"): (
        "the llm-d endpoint picker watches it",
        (("inference.networking.x-k8s.io", "InferenceObjective"), ("llm-d.ai", "InferenceObjective"),
         ("llm-d.ai", "InferenceModelRewrite"))),
}
# Traefik's Gateway provider waits on informers for these before it serves anything (the fleet gateway's release).
TRAEFIK_WATCHES = tuple(("gateway.networking.k8s.io", kind) for kind in
                        ("GatewayClass", "Gateway", "HTTPRoute", "GRPCRoute", "TLSRoute", "ReferenceGrant"))


@dataclass(frozen=True, order=True)
class Need:
    """One thing a Verify cluster must serve: an API (`api_version` and `kind`), or, kind `Namespace`, the
    namespace `name` (an add-on's, where an object of ours goes). `needed_by`: the stacks that use it."""

    cluster: str
    api_version: str
    kind: str
    name: str = ""
    addon: str = ""
    needed_by: tuple[str, ...] = field(default=(), compare=False)

    @property
    def group(self) -> str:
        return self.api_version.rpartition("/")[0]

    @property
    def namespace(self) -> bool:
        return self.kind == "Namespace"

    def describe(self) -> str:
        return f"namespace {self.name}" if self.namespace else f"{self.api_version} {self.kind}"

    def to_dict(self) -> dict:
        return {"cluster": self.cluster, "apiVersion": self.api_version, "kind": self.kind,
                **({"name": self.name} if self.name else {}), "addon": self.addon, "neededBy": list(self.needed_by)}


@dataclass(frozen=True)
class Served:
    """What a cluster's discovery says, for the groups and namespaces asked about: apiVersion -> the kinds served
    there (every version of each group asked about, so a kind served at another version can be named), and which
    of the namespaces asked about exist."""

    kinds: Mapping[str, frozenset[str]]
    namespaces: frozenset[str] = frozenset()


def addon_of(group: str, kind: str) -> str:
    """What provides a kind: a chart the project pins (and installs where it manages the add-ons), its bundled CRDs,
    or a Kubernetes release."""
    for spec in CHARTS.values():
        if (group, kind) in spec.crds:
            return f"{ADDON_NAMES.get(spec.key, spec.key)} (the project pins chart {spec.chart} {spec.version})"
    if group in BUNDLED:
        return f"{BUNDLED[group]} (bundled in workloads/crds/upstream)"
    return VERSION_GATED.get(group, f"an add-on that serves {group}")


def namespace_owner(namespace: str) -> str:
    keys = [spec.key for spec in CHARTS.values() if spec.namespace == namespace]
    return f"{ADDON_NAMES.get(keys[0], keys[0])}'s namespace" if keys else "a namespace no stack of ours creates"


def platform_objects(args: ClusterArgs, client_cas: tuple[str, ...] = ()) -> list[dict]:
    """The objects the serving stack makes on a Verify cluster (components/serving_stack.py: a test holds the two
    together): its namespace, Gateway, GatewayClass and EnvoyProxy, the fleet listener's objects, and where Dynamo
    serves, ModelExpress."""
    def meta(name: str, namespace: str | None = SYSTEM_NAMESPACE) -> dict:
        return {"name": name, **({"namespace": namespace} if namespace else {})}

    out: list[dict] = [
        {"apiVersion": "v1", "kind": "Namespace", "metadata": meta(SYSTEM_NAMESPACE, None)},
        {"apiVersion": "gateway.envoyproxy.io/v1alpha1", "kind": "EnvoyProxy", "metadata": meta("inference-gateway")},
        {"apiVersion": "gateway.networking.k8s.io/v1", "kind": "GatewayClass", "metadata": meta("envoy", None)},
        {"apiVersion": "gateway.networking.k8s.io/v1", "kind": "Gateway", "metadata": meta("inference-gateway")},
        *front_door_mtls.cluster_listener_objects(client_cas)]
    if args.needs_dynamo:
        out += dynamo_platform.model_express_objects("") if args.model_express else []
    return out


def gateway_uses(gateway: GatewayArgs) -> tuple[list[dict], list[tuple[str, str]]]:
    """The fleet gateway stack's objects on its host (components/fleet_gateway.py), and the kinds its Traefik
    watches. Its Traefik release is the InferenceGateway's own front door (its spec names the version), so the
    gateway stack installs it on a Verify host too."""
    from workloads.aggregated_api import objects as aggregated_api

    gateway_meta = {"name": "modelplane", "namespace": SYSTEM_NAMESPACE}
    if gateway.backend == "Traefik":
        return ([{"apiVersion": "gateway.networking.k8s.io/v1", "kind": "GatewayClass", "metadata": {"name": "traefik"}},
                 {"apiVersion": "gateway.networking.k8s.io/v1", "kind": "Gateway", "metadata": gateway_meta},
                 *_aggregated(aggregated_api, gateway)], list(TRAEFIK_WATCHES))
    return ([{"apiVersion": "gateway.envoyproxy.io/v1alpha1", "kind": "EnvoyProxy",
              "metadata": {"name": "modelplane-fleet", "namespace": SYSTEM_NAMESPACE}},
             {"apiVersion": "gateway.networking.k8s.io/v1", "kind": "Gateway", "metadata": gateway_meta},
             *gateway.front_door, *front_door_mtls.gateway_ca_objects(gateway.name),
             *_aggregated(aggregated_api, gateway)], [])


def _aggregated(build, gateway: GatewayArgs) -> list[dict]:
    try:
        return build(gateway.aggregated_api)
    except ValueError:  # the gateway stack's program refuses these annotations, naming them
        return []


def _checked(group: str) -> bool:
    return group not in BUILT_IN_GROUPS or group in VERSION_GATED


def needs(verify: Iterable[str], placed: Iterable[tuple[str, str, Iterable[dict]]],
          watched: Iterable[tuple[str, str, str, str]] = ()) -> dict[str, tuple[Need, ...]]:
    """Per Verify cluster (`verify`), everything the objects placed there use that its platform team provides,
    sorted. `placed`: (cluster, stack, objects) of every stack, on any cluster (only Verify clusters' count);
    `watched`: (cluster, stack, group, kind) of kinds a release watches without any object of them
    (automation/planning/stacks.py `addon_needs` walks the stacks)."""
    from workloads.schemas import stored_version

    verify = set(verify)
    apis: dict[tuple[str, str, str], dict[str, None]] = {}  # (cluster, apiVersion, kind) -> the stacks using it
    namespaces: dict[tuple[str, str], dict[str, None]] = {}  # (cluster, namespace) -> the stacks with objects there
    created: set[tuple[str, str]] = set()  # (cluster, namespace) a stack of ours creates

    def use(cluster: str, stack: str, api_version: str, kind: str) -> None:
        group = api_version.rpartition("/")[0]
        if _checked(group):
            apis.setdefault((cluster, api_version, kind), {})[stack] = None
        implied = WATCHED.get((group, kind))
        for other_group, other_kind in implied[1] if implied else ():
            use(cluster, stack, stored_version(other_group, other_kind) or f"{other_group}/v1", other_kind)

    for cluster, stack, objects in placed:
        if cluster not in verify:
            continue
        for obj in objects:
            meta = obj.get("metadata") or {}
            use(cluster, stack, obj["apiVersion"], obj["kind"])
            if obj["kind"] == "Namespace":
                created.add((cluster, meta.get("name", "")))
            elif meta.get("namespace"):
                namespaces.setdefault((cluster, meta["namespace"]), {})[stack] = None
    for cluster, stack, group, kind in watched:
        if cluster in verify:
            use(cluster, stack, stored_version(group, kind) or f"{group}/v1", kind)
    out: dict[str, list[Need]] = {cluster: [] for cluster in sorted(verify)}
    for (cluster, api_version, kind), stacks in apis.items():
        out[cluster].append(Need(cluster, api_version, kind, addon=addon_of(api_version.rpartition("/")[0], kind),
                                 needed_by=tuple(sorted(stacks))))
    for (cluster, namespace), stacks in namespaces.items():
        if namespace not in BUILT_IN_NAMESPACES and (cluster, namespace) not in created:
            out[cluster].append(Need(cluster, "v1", "Namespace", namespace, namespace_owner(namespace),
                                     tuple(sorted(stacks))))
    return {cluster: tuple(sorted(found)) for cluster, found in out.items()}


def missing(needed: Iterable[Need], served: Served) -> list[str]:
    """One line per need the cluster does not meet: the cluster, the API and version (or namespace), what provides
    it, and which stacks need it."""
    out = []
    for need in needed:
        if need.namespace:
            if need.name in served.namespaces:
                continue
            problem = f"namespace {need.name} does not exist ({need.addon})"
        else:
            if need.kind in served.kinds.get(need.api_version, frozenset()):
                continue
            others = sorted(v for v, kinds in served.kinds.items() if v.startswith(f"{need.group}/") and need.kind in kinds)
            problem = (f"{need.api_version} {need.kind} is not served" + (f" (only {', '.join(others)})" if others else "")
                       + f": it comes with {need.addon}")
        out.append(f"InferenceCluster/{need.cluster}: {problem}; needed by {', '.join(need.needed_by)} "
                   "(spec.cluster.existing.addons is Verify: its platform team installs it)")
    return out
