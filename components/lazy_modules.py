"""The provider SDK modules the stacks' programs use, loaded before programs run side by side in threads.

Pulumi's provider SDKs load their submodules lazily (`pulumi._utils.lazy_import`, a copy of the standard library's
LazyLoader), and that loader is not safe across threads before Python 3.12.3 (CPython gh-114763): the module is
marked loaded before its body has run, so a second thread sees it empty. `up --parallel 8` of a 20-cluster fleet
failed its first platform stacks with "module 'pulumi_kubernetes.core.v1' has no attribute 'Namespace'". PulumiRunner loads
those of each stack's program (Kubernetes', and a platform stack's cloud's) under a lock before it runs, so
only the clouds of the stacks that run cost their second of startup; tests/test_lazy_modules.py fails when a
program loads a lazy module its stack was not given.
"""

from __future__ import annotations

import importlib

KUBERNETES = ("pulumi_kubernetes.apiextensions", "pulumi_kubernetes.apps", "pulumi_kubernetes.apps.v1",
              "pulumi_kubernetes.core", "pulumi_kubernetes.core.v1", "pulumi_kubernetes.helm", "pulumi_kubernetes.helm.v3",
              "pulumi_kubernetes.meta", "pulumi_kubernetes.meta.v1", "pulumi_kubernetes.networking",
              "pulumi_kubernetes.networking.v1", "pulumi_kubernetes.storage",
              "pulumi_kubernetes.storage.v1", "pulumi_kubernetes.yaml", "pulumi_kubernetes.yaml.v2",
              # The groups of the objects a ConfigGroup registers: with the real engine the SDK loads each child's
              # module when the provider returns it (under the mock runtime it never does). Two model stacks at
              # once failed on "pulumi_kubernetes.resource.v1 has no attribute 'ResourceClaimTemplate'".
              "pulumi_kubernetes.autoscaling", "pulumi_kubernetes.autoscaling.v2", "pulumi_kubernetes.batch",
              "pulumi_kubernetes.batch.v1", "pulumi_kubernetes.discovery", "pulumi_kubernetes.discovery.v1",
              "pulumi_kubernetes.policy", "pulumi_kubernetes.policy.v1", "pulumi_kubernetes.rbac",
              "pulumi_kubernetes.rbac.v1", "pulumi_kubernetes.resource", "pulumi_kubernetes.resource.v1",
              "pulumi_kubernetes.scheduling", "pulumi_kubernetes.scheduling.v1")
BY_SOURCE = {  # a cluster's source -> its cloud's modules (each second or so to load: only those a fleet uses)
    "EKS": ("pulumi_aws.ec2", "pulumi_aws.efs", "pulumi_aws.eks", "pulumi_aws.iam"),
    "AKS": ("pulumi_azure_native.containerservice", "pulumi_azure_native.network", "pulumi_azure_native.resources"),
    "GKE": ("pulumi_gcp.compute", "pulumi_gcp.container"),
}


def load(sources: set[str] | frozenset[str] = frozenset(BY_SOURCE)) -> None:
    """Run the body of every module the programs of clusters of these sources use, in this thread (parents before
    their submodules); Kubernetes' always."""
    for name in sorted({*KUBERNETES, *(m for source in sources for m in BY_SOURCE.get(source, ()))}):
        module = importlib.import_module(name)
        hasattr(module, "__all__")  # any attribute but the module's own metadata runs a lazy module's body
