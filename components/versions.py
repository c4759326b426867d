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

from dataclasses import dataclass, replace
from functools import lru_cache
from typing import Mapping

CertManager = ("cert-manager.io", ("Certificate", "CertificateRequest", "Issuer", "ClusterIssuer"))
Acme = ("acme.cert-manager.io", ("Order", "Challenge"))
Trust = ("trust.cert-manager.io", ("Bundle",))
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
# Grove (the platform chart's subchart, with its crds/) and what the graphs' topology names.
Grove = ("grove.io", ("ClusterTopology", "PodClique", "PodCliqueScalingGroup", "PodCliqueSet"))
GroveScheduler = ("scheduler.grove.io", ("PodGang",))
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
    serves: tuple[str, ...] = ()  # the apiVersions its CRDs serve at this version (group/version; empty: unchecked)
    webhooks: tuple[tuple[str, str], ...] = ()  # (group, kind) its admission webhook validates or mutates
    webhook_ready_from: str | None = None  # the first version whose readiness waits for its webhook to serve
    local: str | None = None  # a chart folder or archive on this machine, in place of the repository (a mirror)

    @property
    def oci(self) -> bool:
        return self.repo.startswith("oci://")


CHARTS: dict[str, Chart] = {c.key: c for c in (
    Chart("cert-manager", "cert-manager", "https://charts.jetstack.io", "v1.17.1", "cert-manager",
          crds=kinds(CertManager, Acme), serves=("cert-manager.io/v1", "acme.cert-manager.io/v1"),
          webhooks=kinds(CertManager)),
    # On the cluster that hosts an Envoy front door: publishes its client CA's certificate (never its key) in a
    # ConfigMap (workloads/front_door_mtls.py). Its Bundle CRD is bundled for the schema check (NOTICE.md).
    Chart("trust-manager", "trust-manager", "https://charts.jetstack.io", "v0.20.3", "cert-manager",
          crds=kinds(Trust), serves=("trust.cert-manager.io/v1alpha1",), webhooks=kinds(Trust)),
    # Envoy Gateway's own CRDs from its CRD chart (Gateway API CRDs off: they come from the bundled files),
    # then the controller with its CRDs off. The version the Envoy AI Gateway below is built on and tested with
    # (COMPATIBLE): v0.5 is "built on Envoy Gateway v1.6", its CI runs v1.6.2.
    Chart("envoy-gateway-crds", "gateway-crds-helm", "oci://docker.io/envoyproxy", "v1.6.2", "envoy-gateway-system",
          crds=kinds(EnvoyGatewayKinds), serves=("gateway.envoyproxy.io/v1alpha1",)),
    Chart("envoy-gateway", "gateway-helm", "oci://docker.io/envoyproxy", "v1.6.2", "envoy-gateway-system",
          skip_crds=True),
    # Envoy AI Gateway: the extension server that lets Envoy Gateway route to InferencePools.
    Chart("ai-gateway-crds", "ai-gateway-crds-helm", "oci://docker.io/envoyproxy", "v0.5.0", "envoy-ai-gateway-system",
          crds=kinds(AiGatewayKinds)),
    Chart("ai-gateway", "ai-gateway-helm", "oci://docker.io/envoyproxy", "v0.5.0", "envoy-ai-gateway-system",
          skip_crds=True),
    Chart("lws", "lws", "oci://registry.k8s.io/lws/charts", "0.10.0", "lws-system", crds=kinds(Lws),
          serves=("leaderworkerset.x-k8s.io/v1",), webhooks=kinds(Lws)),
    Chart("node-feature-discovery", "node-feature-discovery", "oci://registry.k8s.io/nfd/charts", "0.18.3",
          "node-feature-discovery", crds=kinds(Nfd), serves=("nfd.k8s-sigs.io/v1alpha1",)),
    Chart("nvidia-dra-driver", "dra-driver-nvidia-gpu", "oci://registry.k8s.io/dra-driver-nvidia/charts", "0.4.0",
          "dra-driver-nvidia-gpu", crds=kinds(NvidiaDra)),
    Chart("keda", "keda", "https://kedacore.github.io/charts", "2.20.2", "keda", crds=kinds(Keda),
          serves=("keda.sh/v1alpha1",), webhooks=kinds(Keda)),
    Chart("prometheus", "kube-prometheus-stack", "https://prometheus-community.github.io/helm-charts", "72.6.2",
          "monitoring", crds=kinds(Monitoring), serves=("monitoring.coreos.com/v1", "monitoring.coreos.com/v1alpha1")),
    # Dynamo 1.2.1: its CRDs are in the operator subchart's crds/ (Helm installs them on first install) and the
    # operator's `crd-apply` init container applies the same CRDs on every upgrade (`dynamo-operator.upgradeCRD`).
    # They are bundled as workloads/crds/upstream/nvidia.com_dynamographdeployments.yaml (DYNAMO_CRDS_RELEASE); a
    # test holds the two to one release. Grove (its subchart, with its crds/) gang-schedules multinode components.
    # NATS keeps state on a volume.
    Chart("dynamo", "dynamo-platform", "https://helm.ngc.nvidia.com/nvidia/ai-dynamo", "1.2.1", "dynamo-system",
          crds=kinds(Dynamo, Grove, GroveScheduler), needs_volumes=True,
          serves=("nvidia.com/v1alpha1", "nvidia.com/v1beta1", "grove.io/v1alpha1", "scheduler.grove.io/v1alpha1")),
    # Traefik's own CRDs are not needed (its kubernetesCRD provider is off) and its Gateway API CRDs are ours.
    Chart("traefik", "traefik", "https://traefik.github.io/charts", "40.2.0", "traefik-system", skip_crds=True),
    # Its webhook validates address pools; before 0.13.7 the controller was ready before the webhook served, so an
    # IPAddressPool applied right after the release was refused ("failed calling webhook ... connection refused").
    Chart("metallb", "metallb", "https://metallb.github.io/metallb", "0.14.9", "metallb-system", crds=kinds(MetalLb),
          serves=("metallb.io/v1beta1", "metallb.io/v1beta2"), webhooks=kinds(MetalLb), webhook_ready_from="0.13.7"),
    # Nebius: a StorageClass (mounted-fs-path.csi.nebius.ai) over the shared filesystem mounted on every node,
    # one directory per volume: ReadWriteMany for model caches. Nebius's own chart, as its docs install it.
    Chart("nebius-csi-mounted-fs-path", "csi-mounted-fs-path", "oci://cr.eu-north1.nebius.cloud/mk8s/helm", "0.1.5",
          "kube-system"),
    # EKS: scales managed node groups whose maxNodeCount exceeds nodeCount.
    Chart("cluster-autoscaler", "cluster-autoscaler", "https://kubernetes.github.io/autoscaler", "9.57.0", "kube-system"),
)}

# cluster-autoscaler's image per Kubernetes minor: upstream supports a release only with the same minor of the
# control plane (kubernetes/autoscaler's version table). The newest patch of each minor, from the project's releases.
CLUSTER_AUTOSCALER_IMAGE = "registry.k8s.io/autoscaling/cluster-autoscaler"
CLUSTER_AUTOSCALER_TAGS = {"1.30": "v1.30.2", "1.31": "v1.31.1", "1.32": "v1.32.1", "1.33": "v1.33.6",
                           "1.34": "v1.34.5", "1.35": "v1.35.2", "1.36": "v1.36.1"}
# `--enable-dynamic-resource-allocation` first exists in 1.32 (experimental, off by default); from 1.35 it is locked on.
CLUSTER_AUTOSCALER_DRA_FROM = (1, 32)

# The Dynamo release whose CRDs are bundled (workloads/crds/upstream/NOTICE.md): the pinned chart must be this one.
DYNAMO_CRDS_RELEASE = "1.2.1"
# ModelExpress, the weight-streaming server of a Dynamo cluster (ai-dynamo/modelexpress; no chart in Dynamo 1.2.1).
MODEL_EXPRESS_IMAGE = "nvcr.io/nvidia/ai-dynamo/modelexpress-server:0.2.0"
# The Envoy fleet gateway's global rate-limit store (components/serving_stack.py rate_limit_store).
RATE_LIMIT_STORE_IMAGE = "docker.io/valkey/valkey:8.1-alpine"

# Pairs that must move together: (chart, its version's major.minor) -> (the chart it runs on, the major.minor
# of that chart it is built on and tested with). From each project's compatibility matrix and CI.
COMPATIBLE: dict[tuple[str, str], tuple[str, str]] = {
    ("ai-gateway", "0.5"): ("envoy-gateway", "1.6"),  # Envoy AI Gateway v0.5.x: Envoy Gateway v1.6.x
    ("ai-gateway-crds", "0.5"): ("envoy-gateway-crds", "1.6"),
}


def minor(version: str) -> str:
    """`v1.6.2` -> `1.6`."""
    return ".".join(version.removeprefix("v").split(".")[:2])


def chart(key: str, overrides: dict[str, str] | None = None, sources: Mapping[str, str] | None = None) -> Chart:
    """The pinned chart (its version overridden), fetched from where `sources` says (`located`)."""
    spec = CHARTS[key]
    version = (overrides or {}).get(key)
    if version:
        spec = replace(spec, version=version, serves=())  # what another version serves is not known here
    return located(spec, sources or {})


def located(spec: Chart, sources: Mapping[str, str]) -> Chart:
    """Where a chart is fetched from, for fleets that cannot reach the charts' own repositories (air-gapped,
    sovereign, on-premise; and the local fleet's stand-ins): `sources` maps a chart key to a chart folder or archive
    on the machine that runs the stack (an absolute path), or to a mirror repository (an https:// or oci:// URL
    serving the same chart under the same name and version); the key `*` is the mirror of every chart not named.
    The version stays the pin: a source says where the chart comes from, not what is installed."""
    source = sources.get(spec.key) or sources.get("*")
    if not source:
        return spec
    if source.startswith(("https://", "http://", "oci://")):
        return replace(spec, repo=source.rstrip("/"))
    return replace(spec, local=source)


def chart_sources_problems(value: object) -> list[str]:
    """What is wrong with a `chartSources` setting (stack config `modelplane:chartSources`, `--chart-source`)."""
    if not isinstance(value, dict):
        return ["chartSources must be a mapping of chart key (or *) to a path or repository URL"]
    out = []
    for key, source in value.items():
        if key != "*" and key not in CHARTS:
            out.append(f"chartSources.{key}: not a chart the platform installs (one of: {', '.join(sorted(CHARTS))})")
        elif not isinstance(source, str) or not source:
            out.append(f"chartSources.{key}: must be a chart folder or archive path, or a repository URL")
        elif not source.startswith(("https://", "http://", "oci://", "/")):
            out.append(f"chartSources.{key}: {source[:200]!r} is neither an absolute path nor a repository URL")
    return out


def pinned(overrides: dict[str, str] | None = None) -> dict[str, str]:
    """Every chart's version in use (pins, with overrides): part of a platform stack's fingerprint, so that
    upgrading a pin re-runs the stacks that install it."""
    return {key: chart(key, overrides).version for key in sorted(CHARTS)}


@lru_cache(maxsize=1)  # the installed distribution's metadata, read once a process (about 1.5 ms a read)
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
