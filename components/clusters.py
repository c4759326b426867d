"""The cluster components' registry: the one of each InferenceCluster `spec.cluster.source`, made from its
arguments (components/inference_cluster.py says what every one of them has). Clouds whose SDK is large are imported
only where a fleet uses them."""

from __future__ import annotations

from typing import Callable

import pulumi

from components.args import ClusterArgs
from components.eks import EksInferenceCluster
from components.existing import ExistingInferenceCluster, read_kubeconfig
from components.gke import GkeInferenceCluster
from components.inference_cluster import InferenceClusterComponent
from fleet.errors import ModelplaneError


class InvalidFleet(ModelplaneError, pulumi.RunError):
    """Bad manifests: one line per problem, no traceback (RunError prints only its message)."""


# How a source's cluster is made: (its arguments, the stack's `modelplane` config, the kubeconfig stored with the
# fleet, whether to protect it from deletion) -> the component.
Make = Callable[[ClusterArgs, pulumi.Config, "str | None", bool], InferenceClusterComponent]


def _gke(args: ClusterArgs, config: pulumi.Config, stored: str | None, protect: bool) -> InferenceClusterComponent:
    project = args.project or pulumi.Config("gcp").get("project")
    if not project:
        raise InvalidFleet(f"InferenceCluster/{args.name}: spec.cluster.gke.project is not set and the stack has no "
                           "gcp:project config: name the Google Cloud project to create the cluster in (set "
                           "spec.cluster.gke.project, or give gcp:project: `modelplane up --config "
                           "gcp:project=PROJECT`, `pulumi config set gcp:project PROJECT`)")
    return GkeInferenceCluster(args.name, args, deletion_protection=protect, project=project,
                               credentials=config.get("clusterCredentials") or "")


def _eks(args: ClusterArgs, config: pulumi.Config, stored: str | None, protect: bool) -> InferenceClusterComponent:
    return EksInferenceCluster(args.name, args, deletion_protection=protect)


def _aks(args: ClusterArgs, config: pulumi.Config, stored: str | None, protect: bool) -> InferenceClusterComponent:
    from components.aks import AksInferenceCluster  # the Azure SDK is large: imported only where used

    return AksInferenceCluster(args.name, args, deletion_protection=protect)


def _nebius(args: ClusterArgs, config: pulumi.Config, stored: str | None, protect: bool) -> InferenceClusterComponent:
    from components.nebius import NebiusInferenceCluster

    return NebiusInferenceCluster(args.name, args, deletion_protection=protect,
                                  project=pulumi.Config("nebius").get("parentId"),
                                  credentials=config.get("clusterCredentials") or "")


def _vultr(args: ClusterArgs, config: pulumi.Config, stored: str | None, protect: bool) -> InferenceClusterComponent:
    from components.vultr import VultrInferenceCluster

    return VultrInferenceCluster(args.name, args, deletion_protection=protect)


def _civo(args: ClusterArgs, config: pulumi.Config, stored: str | None, protect: bool) -> InferenceClusterComponent:
    from components.civo import CivoInferenceCluster

    return CivoInferenceCluster(args.name, args, deletion_protection=protect)


def _existing(args: ClusterArgs, config: pulumi.Config, stored: str | None, protect: bool) -> InferenceClusterComponent:
    return ExistingInferenceCluster(args.name, args, read_kubeconfig(args, config, stored))


CLUSTERS: dict[str, Make] = {"GKE": _gke, "EKS": _eks, "AKS": _aks, "Nebius": _nebius, "Vultr": _vultr,
                             "Civo": _civo, "Existing": _existing}


def cluster_component(args: ClusterArgs, config: pulumi.Config,
                      stored_kubeconfig: str | None = None) -> InferenceClusterComponent:
    """The cluster of `args.source`; `stored_kubeconfig`: an Existing cluster's, stored with the fleet."""
    make = CLUSTERS.get(args.source)
    if make is None:
        raise InvalidFleet(f"InferenceCluster/{args.name}: spec.cluster.source: {args.source} clusters cannot be "
                           "provisioned by this project yet; bring them as source Existing")
    return make(args, config, stored_kubeconfig, config.get_bool("deletionProtection", True))
