"""The inline Pulumi program of each stack kind, built from the fleet and the stack's spec.

Platform and gateway stacks run the platform program (infra/) for one cluster, or for the
fleet gateway. Cache, model and service stacks apply their rendered objects to each target,
with a Kubernetes provider built from the target cluster's kubeconfig, read from its platform
stack's outputs through a StackReference (the secret stays a secret).
"""

from __future__ import annotations

from typing import Callable

import pulumi

from components.kubernetes import provider
from components.workload_objects import WorkloadObjects
from infra.program import platform

PLATFORM_PROJECT = "modelplane-platform"
WORKLOAD_PROJECT = "modelplane-workloads"


def project_of(kind: str) -> str:
    return PLATFORM_PROJECT if kind in ("platform", "gateway") else WORKLOAD_PROJECT


def platform_reference(cluster: str, organization: str = "organization") -> str:
    """The fully qualified name of a platform stack (DIY backends use the literal organization `organization`)."""
    return f"{organization}/{PLATFORM_PROJECT}/platform-{cluster}"


def stack_config(spec) -> dict[str, str]:
    """Plain config each stack's program reads."""
    if spec.kind == "platform":
        return {"modelplane:cluster": spec.name.removeprefix("platform-"), "modelplane:gateway": "false"}
    if spec.kind == "gateway":
        return {"modelplane:gatewayOnly": "true"}
    return {}


def program_for(spec, fleet, organization: str = "organization") -> Callable[[], None]:
    if spec.kind in ("platform", "gateway"):
        def run_platform() -> None:
            config = pulumi.Config("modelplane")
            kubeconfig = None
            if spec.kind == "gateway" and spec.payload.get("host") and not config.get_secret("controlPlaneKubeconfig"):
                reference = pulumi.StackReference(platform_reference(spec.payload["host"], organization))
                kubeconfig = reference.require_output("kubeconfig")
            platform(fleet, config, kubeconfig)
        return run_platform

    def run_workloads() -> None:
        for target, objects in sorted(spec.payload["objects"].items()):
            cluster = spec.payload.get("host") if target == "control-plane" else target
            kubeconfig = pulumi.StackReference(f"{spec.name}-{target}-platform",
                                               stack_name=platform_reference(cluster, organization)).require_output("kubeconfig")
            WorkloadObjects(f"{spec.name}-{target}", objects, provider(target, kubeconfig))
    return run_workloads

