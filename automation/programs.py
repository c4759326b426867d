"""The inline Pulumi program of each stack kind, built from the fleet and the stack's spec.

Platform and gateway stacks run the platform program (infra/) for one cluster, or for the
fleet gateway. Cache, model and service stacks apply their rendered objects to each target,
with a Kubernetes provider built from the target cluster's kubeconfig, read from its platform
stack's outputs through a StackReference (the secret stays a secret).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Callable, Mapping

import pulumi

from components.kubernetes import provider
from fleet.stack_id import StackId, backend_name
from components.workload_objects import WorkloadObjects, secret_config_key
from workloads.cache import secret_refs
from workloads.service_routing import (GATEWAY_OF_ANNOTATION, PLACEHOLDER_ANNOTATION, gateway_endpoints,
                                       slice_address_type)
from infra.program import platform

if TYPE_CHECKING:
    from automation.stacks import StackSpec
    from fleet.validate import Fleet

PLATFORM_PROJECT = "modelplane-platform"
WORKLOAD_PROJECT = "modelplane-workloads"


def project_of(kind: str) -> str:
    return PLATFORM_PROJECT if kind in ("platform", "gateway") else WORKLOAD_PROJECT


def organization() -> str:
    """The backend's organization: the account's on Pulumi Cloud, the literal `organization` on DIY backends."""
    return pulumi.get_organization() or "organization"


def platform_reference(cluster: str, org: str | None = None, fleet_name: str | None = None) -> str:
    """The fully qualified name of a platform stack (in the fleet `fleet_name`, when several share a backend)."""
    return f"{org or organization()}/{PLATFORM_PROJECT}/{backend_name(StackId.platform(cluster), fleet_name)}"


def stack_config(spec, settings: Mapping[str, str] | None = None) -> dict[str, str]:
    """Plain config each stack's program reads. `settings`: what the user gave (`--config`, `--config-file`:
    gcp:project, a provider's region or profile), for the programs that create cloud resources."""
    host = spec.payload.get("host")
    given = dict(settings or {})
    if spec.kind == "platform":
        config = {"modelplane:cluster": str(spec.id.cluster), "modelplane:gateway": "false"}
        return {**given, **config, **({"modelplane:controlPlaneCluster": host} if host else {})}
    if spec.kind == "gateway":
        return {**given, "modelplane:gatewayOnly": "true", **({"modelplane:controlPlaneCluster": host} if host else {})}
    return {}


def kubeconfig_of(reference_name: str, cluster: str, fleet_name: str | None = None) -> pulumi.Output:
    """A platform stack's kubeconfig output (a secret). `get_output`, not `require_output`: during the first
    preview of a fleet the platform stack has no outputs yet, and the value is simply unknown."""
    return pulumi.StackReference(reference_name, stack_name=platform_reference(cluster, None, fleet_name)).get_output(
        "kubeconfig")


def stack_secrets(spec: StackSpec, fleet: Fleet) -> dict[str, str]:
    """The values of the stack's placeholder Secrets that the fleet's secret store has (config key -> value)."""
    out = {}
    for objects in spec.payload.get("objects", {}).values():
        for obj in objects:
            for key, ref in secret_refs(obj).items():
                value = fleet.secrets.get(ref)
                if value is not None:
                    out[secret_config_key(obj, key)] = value.reveal()
    return out


def missing_secrets(spec: StackSpec, fleet: Fleet) -> list[str]:
    """What the stack needs and nothing provides, each with where to give it (never a value)."""
    out = []
    for objects in spec.payload.get("objects", {}).values():
        for obj in objects:
            for ref in secret_refs(obj).values():
                if fleet.secrets.get(ref) is None:
                    out.append(f"{spec.name}: Secret {ref} has no value: give {fleet.secrets.where_to_put(ref)}")
    return out


def program_for(spec: StackSpec, fleet: Fleet, secrets: Mapping[str, str] | None = None,
                fleet_name: str | None = None) -> Callable[[], None]:
    """The stack's inline program. `secrets` (config key -> value) reach it in memory, never as CLI arguments."""
    if spec.kind in ("platform", "gateway"):
        def run_platform() -> None:
            config = pulumi.Config("modelplane")
            kubeconfig = None
            if spec.kind == "gateway" and spec.payload.get("host") and config.get_secret("controlPlaneKubeconfig") is None:
                kubeconfig = kubeconfig_of("gateway-host-platform", spec.payload["host"], fleet_name)
            platform(fleet, config, kubeconfig)
        return run_platform

    values = {**stack_secrets(spec, fleet), **(secrets or {})}

    def run_workloads() -> None:
        for target, objects in sorted(spec.payload["objects"].items()):
            if spec.kind == "endpoints":
                objects = with_live_gateways(spec.name, objects, fleet_name)
            cluster = spec.payload.get("host") if target == "control-plane" else target
            if cluster is None:
                raise pulumi.RunError(f"{spec.name}: no cluster of the fleet can host the control plane (a GKE, EKS or "
                                      "Existing InferenceCluster)")
            kubeconfig = kubeconfig_of(f"{spec.name}-{target}-platform", cluster, fleet_name)
            WorkloadObjects(f"{spec.name}-{target}", objects, provider(target, kubeconfig, cluster=cluster),
                            secrets=values)
    return run_workloads


def with_live_gateways(stack: str, objects: list[dict], fleet_name: str | None = None) -> list:
    """A replica's EndpointSlice points at its cluster's gateway address as that cluster's platform stack outputs it
    when this stack applies (a rendered address is only what the last recorded output said). While the platform
    stack has no address (a first preview, or a cluster whose gateway has none yet), the slice has no endpoints:
    a selectorless Service with an empty slice routes nowhere, instead of to a placeholder."""
    references: dict[str, pulumi.Output] = {}
    out: list = []
    for obj in objects:
        annotations = obj["metadata"].get("annotations") or {}
        cluster = annotations.get(GATEWAY_OF_ANNOTATION)
        if obj["kind"] != "EndpointSlice" or not cluster:
            out.append(obj)
            continue
        if cluster not in references:
            references[cluster] = pulumi.StackReference(
                f"{stack}-{cluster}-gateway", stack_name=platform_reference(cluster, None, fleet_name)).get_output(
                "gatewayAddress")
        rendered: str | None = None if PLACEHOLDER_ANNOTATION in annotations else obj["endpoints"][0]["addresses"][0]

        def live_or_known(live: str | None, known: str | None = rendered) -> str | None:
            return live or known

        address = references[cluster].apply(live_or_known)
        meta = {**obj["metadata"], "annotations": {k: v for k, v in annotations.items() if k != PLACEHOLDER_ANNOTATION}}
        out.append({**obj, "metadata": meta, "addressType": address.apply(slice_address_type),
                    "endpoints": address.apply(gateway_endpoints)})
    return out
