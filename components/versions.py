"""Pinned versions of everything the platform installs, in one place.

Override any entry per stack with structured config, e.g.
`pulumi config set --path 'modelplane:versions.keda' 2.20.2`.
"""

from __future__ import annotations

from dataclasses import dataclass

# chart name, repository (https or oci), version, namespace
CHARTS: dict[str, tuple[str, str, str, str]] = {
    "cert-manager": ("cert-manager", "https://charts.jetstack.io", "v1.17.1", "cert-manager"),
    "envoy-gateway": ("gateway-helm", "oci://docker.io/envoyproxy", "v1.9.0", "envoy-gateway-system"),
    "lws": ("lws", "oci://registry.k8s.io/lws/charts", "0.10.0", "lws-system"),
    "node-feature-discovery": ("node-feature-discovery", "oci://registry.k8s.io/nfd/charts", "0.18.3",
                               "node-feature-discovery"),
    "nvidia-dra-driver": ("dra-driver-nvidia-gpu", "oci://registry.k8s.io/dra-driver-nvidia/charts", "0.4.0",
                          "dra-driver-nvidia-gpu"),
    "keda": ("keda", "https://kedacore.github.io/charts", "2.20.2", "keda"),
    "prometheus": ("kube-prometheus-stack", "https://prometheus-community.github.io/helm-charts", "72.6.2", "monitoring"),
    "dynamo": ("dynamo-platform", "https://helm.ngc.nvidia.com/nvidia/ai-dynamo", "0.6.1", "dynamo-system"),
    "traefik": ("traefik", "https://traefik.github.io/charts", "40.2.0", "traefik-system"),
    "metallb": ("metallb", "https://metallb.github.io/metallb", "0.14.9", "metallb-system"),
}


@dataclass(frozen=True)
class Chart:
    key: str
    chart: str
    repo: str
    version: str
    namespace: str

    @property
    def oci(self) -> bool:
        return self.repo.startswith("oci://")


def chart(key: str, overrides: dict[str, str] | None = None) -> Chart:
    name, repo, version, namespace = CHARTS[key]
    return Chart(key, name, repo, (overrides or {}).get(key, version), namespace)
