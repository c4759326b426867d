"""Pinned versions of everything the platform installs, in one place, with what each chart brings.

Override a version per stack with structured config, e.g.
`pulumi config set --path 'modelplane:versions.keda' 2.20.2`.

Each chart also declares the custom resource kinds it installs (its CRDs) and whether it needs
dynamically provisioned volumes. The deployability check reads these declarations: an object
of a kind no earlier release or CRD object installs, or a chart that needs volumes on a
cluster without a default StorageClass, is refused before anything is applied. A chart whose
CRDs are installed elsewhere (Envoy Gateway's Gateway API CRDs come from the bundled upstream
files) is told not to install them, so every CRD has one owner.
"""

from __future__ import annotations

from dataclasses import dataclass

CertManager = ("cert-manager.io", ("Certificate", "CertificateRequest", "Issuer", "ClusterIssuer"))
Acme = ("acme.cert-manager.io", ("Order", "Challenge"))
EnvoyGatewayKinds = ("gateway.envoyproxy.io", ("EnvoyProxy", "BackendTrafficPolicy", "ClientTrafficPolicy", "SecurityPolicy",
                                              "EnvoyPatchPolicy", "EnvoyExtensionPolicy", "Backend", "HTTPRouteFilter"))
AiGatewayKinds = ("aigateway.envoyproxy.io", ("AIGatewayRoute", "AIServiceBackend", "BackendSecurityPolicy", "MCPRoute",
                                             "GatewayConfig"))
Lws = ("leaderworkerset.x-k8s.io", ("LeaderWorkerSet",))
Nfd = ("nfd.k8s-sigs.io", ("NodeFeature", "NodeFeatureRule", "NodeFeatureGroup"))
NvidiaDra = ("resource.nvidia.com", ("ComputeDomain",))
Keda = ("keda.sh", ("ScaledObject", "ScaledJob", "TriggerAuthentication", "ClusterTriggerAuthentication"))
Monitoring = ("monitoring.coreos.com", ("PodMonitor", "ServiceMonitor", "PrometheusRule", "Prometheus", "Alertmanager",
                                       "AlertmanagerConfig", "Probe", "ScrapeConfig", "PrometheusAgent", "ThanosRuler"))
Dynamo = ("nvidia.com", ("DynamoGraphDeployment", "DynamoComponentDeployment", "DynamoGraphDeploymentRequest",
                         "DynamoGraphDeploymentScalingAdapter", "DynamoModel", "DynamoWorkerMetadata", "DynamoCheckpoint"))
MetalLb = ("metallb.io", ("IPAddressPool", "L2Advertisement", "BGPAdvertisement", "BGPPeer", "BFDProfile", "Community"))


def kinds(*groups: tuple[str, tuple[str, ...]]) -> tuple[tuple[str, str], ...]:
    return tuple((group, kind) for group, names in groups for kind in names)


@dataclass(frozen=True)
class Chart:
    key: str
    chart: str
    repo: str
    version: str
    namespace: str
    crds: tuple[tuple[str, str], ...] = ()  # (group, kind) of every CRD the release installs
    skip_crds: bool = False  # the chart's own crds/ folder is not installed: another owner installs those
    needs_volumes: bool = False  # its pods claim dynamically provisioned volumes (a default StorageClass)

    @property
    def oci(self) -> bool:
        return self.repo.startswith("oci://")


CHARTS: dict[str, Chart] = {c.key: c for c in (
    Chart("cert-manager", "cert-manager", "https://charts.jetstack.io", "v1.17.1", "cert-manager",
          crds=kinds(CertManager, Acme)),
    # Envoy Gateway's own CRDs from its CRD chart (Gateway API CRDs off: they come from the bundled files),
    # then the controller with its CRDs off.
    Chart("envoy-gateway-crds", "gateway-crds-helm", "oci://docker.io/envoyproxy", "v1.9.0", "envoy-gateway-system",
          crds=kinds(EnvoyGatewayKinds)),
    Chart("envoy-gateway", "gateway-helm", "oci://docker.io/envoyproxy", "v1.9.0", "envoy-gateway-system",
          skip_crds=True),
    # Envoy AI Gateway: the extension server that lets Envoy Gateway route to InferencePools.
    Chart("ai-gateway-crds", "ai-gateway-crds-helm", "oci://docker.io/envoyproxy", "v0.5.0", "envoy-ai-gateway-system",
          crds=kinds(AiGatewayKinds)),
    Chart("ai-gateway", "ai-gateway-helm", "oci://docker.io/envoyproxy", "v0.5.0", "envoy-ai-gateway-system",
          skip_crds=True),
    Chart("lws", "lws", "oci://registry.k8s.io/lws/charts", "0.10.0", "lws-system", crds=kinds(Lws)),
    Chart("node-feature-discovery", "node-feature-discovery", "oci://registry.k8s.io/nfd/charts", "0.18.3",
          "node-feature-discovery", crds=kinds(Nfd)),
    Chart("nvidia-dra-driver", "dra-driver-nvidia-gpu", "oci://registry.k8s.io/dra-driver-nvidia/charts", "0.4.0",
          "dra-driver-nvidia-gpu", crds=kinds(NvidiaDra)),
    Chart("keda", "keda", "https://kedacore.github.io/charts", "2.20.2", "keda", crds=kinds(Keda)),
    Chart("prometheus", "kube-prometheus-stack", "https://prometheus-community.github.io/helm-charts", "72.6.2",
          "monitoring", crds=kinds(Monitoring)),
    # Dynamo 0.6.x ships its CRDs as a separate chart, installed before the platform.
    Chart("dynamo-crds", "dynamo-crds", "https://helm.ngc.nvidia.com/nvidia/ai-dynamo", "0.6.1", "dynamo-system",
          crds=kinds(Dynamo)),
    # The platform's etcd and NATS keep state on volumes.
    Chart("dynamo", "dynamo-platform", "https://helm.ngc.nvidia.com/nvidia/ai-dynamo", "0.6.1", "dynamo-system",
          skip_crds=True, needs_volumes=True),
    # Traefik's own CRDs are not needed (its kubernetesCRD provider is off) and its Gateway API CRDs are ours.
    Chart("traefik", "traefik", "https://traefik.github.io/charts", "40.2.0", "traefik-system", skip_crds=True),
    Chart("metallb", "metallb", "https://metallb.github.io/metallb", "0.14.9", "metallb-system", crds=kinds(MetalLb)),
    # EKS: scales managed node groups whose maxNodeCount exceeds nodeCount.
    Chart("cluster-autoscaler", "cluster-autoscaler", "https://kubernetes.github.io/autoscaler", "9.57.0", "kube-system"),
)}


def chart(key: str, overrides: dict[str, str] | None = None) -> Chart:
    spec = CHARTS[key]
    version = (overrides or {}).get(key)
    if not version:
        return spec
    return Chart(spec.key, spec.chart, spec.repo, version, spec.namespace, spec.crds, spec.skip_crds, spec.needs_volumes)


def pinned(overrides: dict[str, str] | None = None) -> dict[str, str]:
    """Every chart's version in use (pins, with overrides): part of a platform stack's fingerprint, so that
    upgrading a pin re-runs the stacks that install it."""
    return {key: chart(key, overrides).version for key in sorted(CHARTS)}


def project_version() -> str:
    """This project's version: part of every stack's fingerprint (a new release may register other resources)."""
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version("modelplane-pulumi")
    except PackageNotFoundError:  # pragma: no cover - running from a checkout that was never installed
        return "0+unknown"


def by_release_name(name: str) -> Chart | None:
    """The chart behind a release named `mp-<key>` (how every release of ours is named)."""
    return CHARTS.get(name.removeprefix("mp-")) if name.startswith("mp-") else None
