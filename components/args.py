"""Typed arguments of the platform components, derived from the fleet API objects.

Components take these (pydantic models), never raw manifests: what a component needs is
written down once, validated once, and easy to build in tests.
"""

from __future__ import annotations

from typing import Literal, TYPE_CHECKING

from pydantic import BaseModel, ConfigDict

from fleet.backends import NVIDIA_DRIVER
from fleet.inventory import cache_storage_class
from fleet.secrets import CALLER_KEYS_NAMESPACE
from fleet.topology import cluster_topology

if TYPE_CHECKING:
    from fleet.api.cluster import InferenceCluster
    from fleet.api.gateway import Envoy, InferenceGateway
    from fleet.api.inference_class import InferenceClass
    from fleet.validate import Fleet


class Args(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class PublishedDevice(Args):
    name: str
    driver: str
    count: int
    claim: str


class GpuPoolArgs(Args):
    name: str
    class_name: str
    machine_type: str | None = None  # GKE
    instance_type: str | None = None  # EKS
    vm_size: str | None = None  # AKS
    platform: str | None = None  # Nebius: the compute platform (gpu-h100-sxm) ...
    preset: str | None = None  # ... and its preset (8gpu-128vcpu-1600gb)
    drivers_preset: str | None = None  # Nebius: the GPU drivers image preset
    plan: str | None = None  # Vultr: the VKE node plan (vcg-l40s-16c-180g-48vram)
    size: str | None = None  # Civo: the node size (an.g1.l40s.kube.x1)
    infiniband_fabric: str | None = None  # AKS, Nebius: the InfiniBand fabric of the pool's GPU cluster
    accelerator_type: str | None = None
    accelerator_count: int = 1
    disk_size_gb: int = 100
    zones: list[str] = []
    node_count: int = 1
    min_nodes: int | None = None
    max_nodes: int | None = None
    spot: bool = False
    capacity_reservation_id: str | None = None
    efa: bool = False
    devices: list[PublishedDevice] = []

    @property
    def capacity_nodes(self) -> int:
        return self.max_nodes if self.max_nodes is not None else self.node_count

    @property
    def autoscaled(self) -> bool:
        return self.max_nodes is not None

    @property
    def nvidia(self) -> bool:
        return any(d.driver == NVIDIA_DRIVER and d.claim == "DRA" for d in self.devices)


class TopologyLevel(Args):
    """One level of Grove's ClusterTopology: a domain Grove knows and the node label that names it."""

    domain: Literal["region", "zone", "datacenter", "block", "rack", "host", "numa"]
    key: str


class ClusterArgs(Args):
    name: str
    source: Literal["GKE", "EKS", "AKS", "Nebius", "Vultr", "Civo", "Existing"]
    region: str | None = None
    project: str | None = None  # GKE: the Google Cloud project (else the stack's gcp:project config)
    kubernetes_version: str | None = None
    labels: dict[str, str] = {}
    pools: list[GpuPoolArgs]
    kubeconfig_secret: str | None = None  # Existing: the config key holding the kubeconfig
    cache_storage_class: str | None = None
    stack: Literal["Standard", "Dynamo"] = "Standard"
    topology: list[TopologyLevel] = []  # Grove's ClusterTopology levels, broadest first (fleet/topology.py)
    model_express: bool = False  # run the ModelExpress server (WeightStreaming)
    # a replica placed here (or still applied here) is Dynamo-served: from the plan, not the fleet
    # (fleet/plan.py `dynamo_clusters`, automation/planning/stacks.py `platform_specs`)
    dynamo: bool = False
    # Existing: who installs the add-ons (spec.cluster.existing.addons). Verify: the cluster's platform team; the
    # serving stack installs no CRD and no chart, and `up` first checks the cluster serves what is placed there
    addons: Literal["Install", "Verify"] = "Install"
    # Existing: its LoadBalancer Services get an address (the modelplane.ai/load-balancer annotation), so its
    # Gateway's is waited for; a provisioned cloud cluster's components know theirs
    load_balancer: bool = False

    @property
    def verifies_addons(self) -> bool:
        return self.addons == "Verify"

    @property
    def needs_dynamo(self) -> bool:
        """The Dynamo platform goes where a Dynamo-served replica is placed or still applied, and on a cluster whose
        `spec.stack` is Dynamo; not on every cluster with an NVIDIA pool (an Existing cluster's owners did not ask
        for an operator, Grove and KAI cluster-wide)."""
        return self.stack == "Dynamo" or self.dynamo

    @property
    def nvidia_driver_root(self) -> str:
        return "/home/kubernetes/bin/nvidia" if self.source == "GKE" else "/"


class GatewayArgs(Args):
    name: str = "default"
    backend: Literal["Traefik", "Envoy"] = "Traefik"
    traefik_version: str = ""  # backend Traefik's chart version
    metallb_address_pool: str | None = None
    load_balancer: bool = True  # the host cluster's cloud gives LoadBalancer Services an address
    aggregated_api: dict[str, str] = {}  # the InferenceGateway's modelplane.ai/aggregated-api* annotations
    # backend Envoy: the front door's own policies (workloads/fleet_data_plane.py front_door_objects), and the
    # TLS Secret of its HTTPS listener (none: HTTP)
    front_door: list[dict] = []
    tls_secret: str | None = None
    # a v0.5 gateway (workloads/ai_gateway.py): its Gateway's listeners and its EnvoyProxy's spec
    listeners: list[dict] = []
    proxy: dict = {}

    def fingerprinted(self) -> dict:
        """What the gateway stack's fingerprint holds: a gateway's arguments as they were before backend Envoy (and
        then the v0.5 gateway) existed, so adding them re-ran no earlier fleet's gateway stack."""
        envoy_only = {"backend", "front_door", "tls_secret"} if self.backend == "Traefik" else set()
        v05_only = {"listeners", "proxy"} if not self.listeners else set()
        return self.model_dump(exclude=envoy_only | v05_only)

    @property
    def rate_limit(self) -> bool:
        """The host's Envoy Gateway needs a rate-limit store: the front door has global rate limits."""
        return any(o["kind"] == "BackendTrafficPolicy" for o in self.front_door)


def gateway_cluster_output(gateway: GatewayArgs, host: str | None) -> dict[str, str] | None:
    """What the gateway stack outputs (`GATEWAY_CLUSTER_OUTPUT`) of a v0.5 gateway (the one with listeners of its
    own): its name and its cluster, the "old" side of the XRD's rule that `spec.clusterName` is immutable."""
    return {"name": gateway.name, "clusterName": host} if gateway.listeners and host else None


def host_extras(gateway: GatewayArgs | None, cluster: str, host: str | None) -> tuple[str | None, bool, bool]:
    """What hosting the fleet gateway adds to a cluster's platform stack: MetalLB's address pool (its Gateway
    needs an address first), a rate-limit store (an Envoy front door with global limits) and trust-manager (an
    Envoy front door publishes its client CA with it). Nothing elsewhere."""
    if gateway is None or cluster != host:
        return None, False, False
    return gateway.metallb_address_pool, gateway.rate_limit, gateway.backend == "Envoy"


# Sources whose clusters this project creates or connects to: only these can host the fleet gateway.
HOSTABLE = ("GKE", "EKS", "AKS", "Nebius", "Vultr", "Civo", "Existing")
# Clouds whose LoadBalancer Services get an address by themselves; an Existing cluster needs MetalLB (or its own).
LOAD_BALANCED = ("GKE", "EKS", "AKS", "Nebius", "Vultr", "Civo")
# An Existing cluster whose LoadBalancer Services do get an address (a cloud's controller, MetalLB or kube-vip its
# platform team runs, the local fleet's simulated one) says so with this annotation set to "true": its Gateways'
# addresses are then waited for, so the fleet gateway and `status` know them after the first `up`.
LOAD_BALANCER_ANNOTATION = "modelplane.ai/load-balancer"


def gives_load_balancer(ic: InferenceCluster) -> bool:
    """Does the cluster give a LoadBalancer Service an address by itself (without an InferenceGateway's MetalLB)?"""
    return ic.spec.cluster.source in LOAD_BALANCED or (
        ic.spec.cluster.source == "Existing" and (ic.metadata.annotations or {}).get(LOAD_BALANCER_ANNOTATION) == "true")


def load_balanced(fleet: Fleet) -> set[str]:
    return {c.name for c in fleet.of("InferenceCluster") if gives_load_balancer(c)}


def control_plane_cluster(fleet: Fleet, chosen: str | None = None) -> str | None:
    """The InferenceCluster that hosts the fleet gateway: a v0.5 gateway's `spec.clusterName`, else the chosen one,
    else the first by name that gives its LoadBalancer an address (a cloud's, or an Existing cluster annotated
    `modelplane.ai/load-balancer: "true"`), else the first Existing one (whose gateway gets an address only from the
    InferenceGateway's MetalLB pool: without one, its services stay `pending` in `status`).

    Raises ValueError when the chosen cluster is not in the fleet, cannot host it (a source this project neither
    provisions nor connects to), or is not the cluster a v0.5 gateway names.
    """
    sources = {c.name: c.spec.cluster.source for c in fleet.of("InferenceCluster")}
    v05 = v05_gateway(fleet)
    if v05 is not None and v05.v05 is not None:  # the v0.5 gateway runs on the cluster it names, whatever is chosen
        named = v05.v05.clusterName
        if chosen is not None and chosen != named:
            raise ValueError(f"InferenceGateway/{v05.name} runs on InferenceCluster {named} (its spec.clusterName), "
                             f"not on {chosen!r}")
        if named in sources and sources[named] not in HOSTABLE:
            raise ValueError(f"InferenceGateway/{v05.name}: {named!r} is a {sources[named]} cluster, which this "
                             f"project does not provision: a gateway needs a {', '.join(HOSTABLE)} cluster")
        return named if named in sources else None
    if chosen is not None:
        if chosen not in sources:
            raise ValueError(f"{chosen!r} is not an InferenceCluster of the fleet")
        if sources[chosen] not in HOSTABLE:
            raise ValueError(f"{chosen!r} is a {sources[chosen]} cluster, which this project does not provision: "
                             f"the fleet gateway needs a {', '.join(HOSTABLE)} cluster")
        return chosen
    balanced = load_balanced(fleet)
    ranked = sorted((name not in balanced, name) for name in sources if sources[name] in HOSTABLE)
    return ranked[0][1] if ranked else None


def preferred_control_plane(fleet: Fleet, chosen: str | None) -> str | None:
    """`chosen` when it can host the fleet gateway in this fleet, else the fleet's own (`control_plane_cluster`): a
    pull request's base is planned on the control plane its head is given, unless the head is what adds it."""
    try:
        return control_plane_cluster(fleet, chosen)
    except ValueError:
        return control_plane_cluster(fleet)


def cluster_args(fleet: Fleet, name: str) -> ClusterArgs:
    ic = next(c for c in fleet.of("InferenceCluster") if c.name == name)
    return _cluster_args(ic, {c.name: c for c in fleet.of("InferenceClass")}, weight_streaming(fleet))


def every_cluster_args(fleet: Fleet) -> dict[str, ClusterArgs]:
    """`cluster_args` of every InferenceCluster, in the fleet's order, in one pass."""
    classes = {c.name: c for c in fleet.of("InferenceClass")}
    streaming = weight_streaming(fleet)
    return {ic.name: _cluster_args(ic, classes, streaming) for ic in fleet.of("InferenceCluster")}


def weight_streaming(fleet: Fleet) -> bool:
    """Whether any deployment asks for WeightStreaming: then every cluster that could serve it runs ModelExpress
    (decided from the fleet, not from placement, so that a replica moving does not re-run platform stacks)."""
    return any("WeightStreaming" in (e.capabilities or []) for md in fleet.of("ModelDeployment")
               for e in md.spec.template.spec.engines)


def _cluster_args(ic: InferenceCluster, classes: dict[str, InferenceClass], streaming: bool = False) -> ClusterArgs:
    source = ic.spec.cluster.source
    block = getattr(ic.spec.cluster, source.lower())
    pools = []
    for np in ic.spec.nodePools:
        icl = classes.get(np.className)
        prov = icl.spec.provisioning if icl else None
        gke = prov.gke if prov else None
        eks = prov.eks if prov else None
        aks = prov.aks if prov else None
        nebius = prov.nebius if prov else None
        vultr = prov.vultr if prov else None
        civo = prov.civo if prov else None
        recipe = gke or eks or aks or nebius or vultr or civo
        accelerator = recipe.accelerator if recipe else None
        pools.append(GpuPoolArgs(
            name=np.name, class_name=np.className,
            machine_type=gke.machineType if gke else None,
            instance_type=eks.instanceType if eks else None,
            vm_size=aks.vmSize if aks else None,
            platform=nebius.platform if nebius else None,
            preset=nebius.preset if nebius else None,
            drivers_preset=nebius.driversPreset if nebius else None,
            plan=vultr.plan if vultr else None,
            size=civo.size if civo else None,
            infiniband_fabric=np.fabric.infiniband.fabric if np.fabric and np.fabric.infiniband else None,
            accelerator_type=accelerator.type if accelerator else None,
            accelerator_count=accelerator.count if accelerator else 1,
            disk_size_gb=getattr(recipe, "diskSizeGb", 100),  # Vultr and Civo plans fix their disks
            zones=list(np.zones or []), node_count=np.nodeCount, min_nodes=np.minNodeCount, max_nodes=np.maxNodeCount,
            spot=bool(np.spot), efa=bool(np.fabric and np.fabric.type == "EFA"),
            capacity_reservation_id=np.capacityBlock.capacityReservationId if np.capacityBlock else None,
            devices=[PublishedDevice(name=d.name, driver=d.driver, count=d.count, claim=d.claim)
                     for d in (icl.spec.devices if icl else [])],
        ))
    return ClusterArgs(
        name=ic.name, source=source,
        region=getattr(block, "region", None) or getattr(block, "location", None),
        project=getattr(block, "project", None) or getattr(block, "projectId", None),
        kubernetes_version=getattr(block, "kubernetesVersion", None),
        labels=dict(ic.metadata.labels or {}), pools=pools,
        kubeconfig_secret=ic.existing_block.secretRef.name if source == "Existing" else None,
        addons=ic.existing_block.addons if source == "Existing" else "Install",
        load_balancer=source == "Existing" and gives_load_balancer(ic),
        cache_storage_class=cache_storage_class(ic),
        stack=ic.spec.stack or "Standard",
        topology=[TopologyLevel.model_validate({"domain": d, "key": k}) for d, k in cluster_topology(ic, classes)],
        # ModelExpress is part of a Dynamo cluster's stack (PR #406), and wherever WeightStreaming could be served
        model_express=ic.spec.stack == "Dynamo" or (streaming and any(p.nvidia for p in pools)),
    )


def v05_gateway(fleet: Fleet) -> InferenceGateway | None:
    """The v0.5 InferenceGateway this project composes: the first by name (one per fleet for now; the others are
    refused by workloads/render.py `v05_gateway_problems`)."""
    gateways = sorted((g for g in fleet.of("InferenceGateway") if g.v05 is not None), key=lambda g: g.name)
    return gateways[0] if gateways else None


def fleet_gateway(fleet: Fleet) -> InferenceGateway | None:
    """The InferenceGateway the gateway stack runs: one in the v0.3.1 shape that names its backend's settings, or
    the v0.5 gateway (on its cluster, which is then the control plane's host)."""
    v05 = v05_gateway(fleet)
    if v05 is not None:
        return v05
    ig = next(iter(fleet.of("InferenceGateway")), None)
    if ig is None or ig.v031 is None:
        return None
    return ig if ig.v031.traefik is not None or ig.envoy is not None else None


def gateway_args(fleet: Fleet, host: str | None = None) -> GatewayArgs | None:
    ig = fleet_gateway(fleet)
    if ig is not None and ig.v05 is not None:
        return v05_gateway_args(fleet, ig, host)
    spec = ig.v031 if ig is not None else None
    if ig is None or spec is None:
        return None
    envoy = ig.envoy
    metallb = spec.traefik.metallb if spec.traefik else envoy.metallb if envoy else None
    from workloads.aggregated_api import PREFIX
    from workloads.fleet_data_plane import front_door_objects

    return GatewayArgs(name=ig.name, backend=spec.backend,
                       traefik_version=spec.traefik.version if spec.traefik else "",
                       metallb_address_pool=metallb.addressPool if metallb else None,
                       load_balancer=host in load_balanced(fleet),
                       aggregated_api={k: v for k, v in (ig.metadata.annotations or {}).items() if k.startswith(PREFIX)},
                       front_door=front_door_objects(team_budgets(fleet, envoy)) if envoy else [],
                       tls_secret=envoy.tls.certificateSecretName if envoy and envoy.tls else None)


def team_budgets(fleet: Fleet, envoy: Envoy) -> Envoy:
    """The front door's settings with each team's token budget from its TeamPolicy (fleet/team_policy.py
    `front_door_access`): the team at the front door is the namespace's name. No policy: `envoy` as given."""
    from fleet.team_policy import Policies, front_door_access

    policies = Policies.of(fleet)
    if envoy.access is None or not policies:
        return envoy
    served = {ms.namespace for ms in fleet.of("ModelService")}
    return envoy.model_copy(update={"access": front_door_access(envoy.access, policies, served)})


def v05_gateway_args(fleet: Fleet, ig: InferenceGateway, host: str | None) -> GatewayArgs:
    """A v0.5 gateway on the Envoy front door (workloads/ai_gateway.py): its listeners, its EnvoyProxy, its
    policies, with the caller Secrets its `auth.apiKey.secretSelector` selects."""
    from workloads.aggregated_api import PREFIX
    from workloads.ai_gateway import (PROXY_SERVICE, caller_secret_objects, certificate_secret_objects, gateway_objects,
                                      listeners, proxy_spec)

    spec = ig.v05
    assert spec is not None
    callers = caller_secrets(fleet, ig)
    # the certificates callers are served with, copied from the fleet's Secret manifests (one not given is refused
    # by workloads/render.py `v05_gateway_problems`)
    given = fleet.secrets.manifests
    refs = spec.tls.certificateRefs if spec.tls is not None else []
    certificates = {r.name: sorted(given[("modelplane-system", r.name)]) for r in refs
                    if ("modelplane-system", r.name) in given}
    return GatewayArgs(name=ig.name, backend="Envoy", load_balancer=host in load_balanced(fleet),
                       aggregated_api={k: v for k, v in (ig.metadata.annotations or {}).items() if k.startswith(PREFIX)},
                       front_door=caller_secret_objects(callers) + certificate_secret_objects(certificates)
                       + gateway_objects(spec, sorted(callers)),
                       listeners=listeners(spec),
                       proxy=proxy_spec(PROXY_SERVICE))


def caller_secrets(fleet: Fleet, ig: InferenceGateway) -> dict[str, tuple[dict[str, str], list[str]]]:
    """The Secrets in modelplane-system whose labels `auth.apiKey.secretSelector` matches, among the Secret manifests
    given with the fleet: name -> (labels, keys). Names, labels and keys (the callers' identities) only: the gateway
    stack's program fills the values in, never a plan, a render or a log."""
    spec = ig.v05
    if spec is None or spec.auth is None or spec.auth.apiKey is None:
        return {}
    namespace = CALLER_KEYS_NAMESPACE
    return {name: (fleet.secrets.labels[(namespace, name)], sorted(fleet.secrets.manifests[(namespace, name)]))
            for name in fleet.secrets.selected(namespace, spec.auth.apiKey.secretSelector.matchLabels)}
