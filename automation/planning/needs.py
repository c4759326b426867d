"""What a platform stack needs at run time that its manifests may not give: a GKE cluster's project.

The platform program takes a GKE cluster's project from `spec.cluster.gke.project`, else from the stack config
`gcp:project` (components/clusters.py `cluster_component`; never from the ambient environment): a cluster with neither
fails its program, and everything that runs after it on that cluster with it. `validate` warns of it (it sees no
stack config), `status` says it of the pending platform stack, and `up` and `preview` list it with everything else
a run needs (automation/execution/pulumi_runner.py `missing_credentials`), given the config they were given.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Mapping

from fleet.stack_id import StackId

if TYPE_CHECKING:
    from fleet.api.cluster import InferenceCluster
    from fleet.validate import Fleet

PROJECT_CONFIG = "gcp:project"
HOW = f"set spec.cluster.gke.project, or give the stack config {PROJECT_CONFIG} (--config {PROJECT_CONFIG}=PROJECT, " \
      "or a --config-file that sets it)"


def without_project(fleet: Fleet, config: Mapping[str, str] | None = None) -> list[InferenceCluster]:
    """The GKE clusters whose platform program finds no project: none in the manifest, none in `config`."""
    if (config or {}).get(PROJECT_CONFIG):
        return []
    return [ic for ic in fleet.of("InferenceCluster")
            if ic.spec.cluster.source == "GKE" and ic.spec.cluster.gke is not None and not ic.spec.cluster.gke.project]


def project_missing(cluster: str) -> str:
    return f"InferenceCluster/{cluster} is GKE and names no Google Cloud project: {HOW}"


def missing_projects(fleet: Fleet, stacks: list[str], config: Mapping[str, str] | None = None) -> list[str]:
    """One line per GKE cluster whose platform stack is among `stacks` and would run without a project."""
    names = set(stacks)
    return [project_missing(ic.name) for ic in without_project(fleet, config) if str(StackId.platform(ic.name)) in names]


WARNING = (f"names no Google Cloud project: its platform stack fails in `up` and `preview` unless they are given the "
           f"stack config {PROJECT_CONFIG} (--config {PROJECT_CONFIG}=PROJECT, or a --config-file that sets it); or "
           "set spec.cluster.gke.project")


def run_time_warnings(fleet: Fleet) -> list:
    """`validate`'s warnings of what fails later unless a run is given what the manifests lack (it sees no stack
    config): each GKE cluster without a project."""
    return [fleet.problem(ic, ("spec", "cluster", "gke"), WARNING, warning=True) for ic in without_project(fleet)]
