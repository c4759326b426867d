"""What every cluster component is (one per InferenceCluster `spec.cluster.source`), for the platform program.

The platform program (components/platform.py) reads the same four things of any of them: its kubeconfig, its
identifier, its facts (what the serving stack needs to know of it) and its GPU pools (what the serving stack waits
for). components/clusters.py makes the one of a source.
"""

from __future__ import annotations

from typing import Sequence

import pulumi

from components.serving_stack import ClusterFacts


class InferenceClusterComponent(pulumi.ComponentResource):
    """A cluster component: its constructor sets these, and registers `kubeconfig` and `clusterIdentifier`."""

    kubeconfig: pulumi.Output[str]  # secret
    cluster_identifier: str  # the cluster's name, which never changes (components/kubernetes.py)
    facts: ClusterFacts
    gpu_pools: Sequence[pulumi.Resource]  # its GPU node pools or groups; none where the nodes are not ours
