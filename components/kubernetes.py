"""A Kubernetes provider per cluster, from the cluster's kubeconfig output.

`cluster_identifier` is the cluster's name, which never changes: a kubeconfig whose
short-lived token is refreshed on every run then never replaces the provider, and so never
replaces the resources that use it.
"""

from __future__ import annotations

import pulumi
import pulumi_kubernetes as k8s


def provider(name: str, kubeconfig: pulumi.Input[str], parent: pulumi.Resource | None = None,
             depends_on: list | None = None, cluster: str | None = None) -> k8s.Provider:
    """A provider named `<name>-k8s` for the InferenceCluster `cluster` (default: `name`); the preview and the
    deployability check read `clusterIdentifier` to know which cluster a Kubernetes object lands on."""
    return k8s.Provider(
        f"{name}-k8s",
        kubeconfig=kubeconfig,
        cluster_identifier=cluster or name,
        enable_server_side_apply=True,
        opts=pulumi.ResourceOptions(parent=parent, depends_on=depends_on or []),
    )
