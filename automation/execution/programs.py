"""The inline Pulumi program of each stack kind, built from the fleet and the stack's spec.

Platform and gateway stacks run the platform program (infra/) for one cluster, or for the
fleet gateway. Cache, model and service stacks apply their rendered objects to each target,
with a Kubernetes provider built from the target cluster's kubeconfig, read from its platform
stack's outputs through a StackReference (the secret stays a secret).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Callable, Mapping

import pulumi

from automation.projects import PLATFORM_PROJECT
from automation.record.applied import RECORD_OUTPUT, record_output
from automation.planning.payloads import GatewayPayload, PlatformPayload, WorkloadPayload, endpoints_fingerprint
from components.args import gateway_cluster_output
from components.fleet_gateway import FleetGateway
from components.kubernetes import provider
from components.workload_objects import WorkloadObjects, secret_config_key
from fleet.secrets import kubeconfig_ref
from fleet.stack_id import StackId, backend_name
from components.platform import chart_sources, cluster_stack
from workloads.cache import secret_refs
from workloads.gateways import GATEWAY_CLUSTER_OUTPUT, Gateways
from workloads.service_routing import (GATEWAY_OF_ANNOTATION, PLACEHOLDER_ANNOTATION, gateway_endpoints,
                                       gateway_service_spec, slice_address_type)

if TYPE_CHECKING:
    from automation.planning.stacks import StackSpec
    from fleet.validate import Fleet


def organization() -> str:
    """The backend's organization: the account's on Pulumi Cloud, the literal `organization` on DIY backends."""
    return pulumi.get_organization() or "organization"


def platform_reference(cluster: str, org: str | None = None, fleet_name: str | None = None) -> str:
    """The fully qualified name of a platform stack (in the fleet `fleet_name`, when several share a backend)."""
    return f"{org or organization()}/{PLATFORM_PROJECT}/{backend_name(StackId.platform(cluster), fleet_name)}"


def stack_config(spec, settings: Mapping[str, str] | None = None) -> dict[str, str]:
    """Plain config each stack's program reads. `settings`: what the user gave (`--config`, `--config-file`:
    gcp:project, a provider's region or profile), for the programs that create cloud resources."""
    host = spec.host
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


def filled_objects(spec: StackSpec) -> list[list[dict]]:
    """The objects whose placeholder Secrets a stack's program fills: a workload stack's, or the gateway stack's own
    (a v0.5 gateway's copies of its callers' Secrets, workloads/ai_gateway.py `caller_secret_objects`)."""
    if isinstance(spec.payload, GatewayPayload):
        return [spec.payload.gateway.front_door]
    return list(spec.objects.values())


def stack_secrets(spec: StackSpec, fleet: Fleet) -> dict[str, str]:
    """The values of the stack's placeholder Secrets that the fleet's secret store has (config key -> value)."""
    out = {}
    for objects in filled_objects(spec):
        for obj in objects:
            for key, ref in secret_refs(obj).items():
                value = fleet.secrets.get(ref)
                if value is not None:
                    out[secret_config_key(obj, key)] = value.reveal()
    return out


def missing_secrets(spec: StackSpec, fleet: Fleet) -> list[str]:
    """What the stack needs and nothing provides, each with where to give it (never a value)."""
    out: dict[str, None] = {}  # once each: a cache's Secret is rendered once per cluster it stages weights on
    for objects in filled_objects(spec):
        for obj in objects:
            for ref in secret_refs(obj).values():
                if fleet.secrets.get(ref) is None:
                    out[f"{spec.name}: Secret {ref} has no value: give {fleet.secrets.where_to_put(ref)}"] = None
    return list(out)


def recorded(program: Callable[[], None], fingerprint: Callable[[], pulumi.Output[str] | str],
             placements: list | None = None, versions: Mapping[str, str] | None = None) -> Callable[[], None]:
    """`program`, exporting the stack's record (`automation/record/applied.py`) once every resource it registered was
    applied: the record's value waits on every resource's URN, which resolves only when its step succeeded, so
    a failed update never records a fingerprint (the engine keeps the outputs of the last update instead)."""
    def run() -> None:
        created: list[pulumi.Resource] = []

        def collect(args: pulumi.ResourceTransformationArgs) -> None:
            created.append(args.resource)
            return None

        pulumi.runtime.register_stack_transformation(collect)
        program()
        applied = pulumi.Output.all(fingerprint(), *[r.urn for r in created])
        # unhooked once the URNs are taken: something the SDK keeps between runs in one process holds a resource's
        # transformations, and through `collect` every resource of the run and its outputs. Previews (many
        # stacks a process) and the portal's worker kept each platform stack's, about 4 MB, until they exited.
        root = pulumi.runtime.get_root_resource()
        if root is not None:
            root._transformations = [t for t in root._transformations or [] if t is not collect]
        for resource in created:
            resource._transformations = [t for t in resource._transformations if t is not collect]
        created.clear()
        pulumi.export(RECORD_OUTPUT, applied.apply(lambda values: record_output(values[0], placements or [], versions)))
    return run


def program_for(spec: StackSpec, fleet: Fleet, secrets: Mapping[str, str] | None = None,
                fleet_name: str | None = None) -> Callable[[], None]:
    """The stack's inline program. `secrets` (config key -> value) reach it in memory, never as CLI arguments."""
    payload = spec.payload
    if isinstance(payload, PlatformPayload):
        def run_platform() -> None:
            stored = stored_kubeconfig(fleet, payload.cluster.name)
            _, _, outputs = cluster_stack(payload.cluster, pulumi.Config("modelplane"), payload.versions,
                                          payload.metallb_pool, stored, rate_limit=payload.rate_limit,
                                          trust_manager=payload.trust_manager, client_cas=payload.client_cas)
            for key, value in outputs.items():  # flat: other stacks reference them
                pulumi.export(key, value)
        return recorded(run_platform, lambda: spec.fingerprint, versions=payload.versions)
    if isinstance(payload, GatewayPayload):
        values = {**stack_secrets(spec, fleet), **(secrets or {})}

        def run_gateway() -> None:
            gateway = gateway_stack(payload, fleet_name, values)
            pulumi.export("address", gateway.address)
            if gateway.client_ca is not None:  # an Envoy front door's (public) client CA, for the platform stacks
                pulumi.export("clientCACertificate", gateway.client_ca)
            cluster = gateway_cluster_output(payload.gateway, payload.host)
            if cluster is not None:  # a v0.5 gateway: its clusterName, immutable once applied
                pulumi.export(GATEWAY_CLUSTER_OUTPUT, cluster)
        return recorded(run_gateway, lambda: spec.fingerprint, versions=payload.versions)
    if not isinstance(payload, WorkloadPayload):  # a stack to destroy: its program never runs
        def refuse() -> None:
            raise pulumi.RunError(f"{spec.name} is no longer desired: it can only be destroyed")
        return refuse
    workload: WorkloadPayload = payload

    values = {**stack_secrets(spec, fleet), **(secrets or {})}
    live: dict[str, pulumi.Output] = {}  # cluster -> its gateway address as its platform stack outputs it now

    def run_workloads() -> None:
        for target, objects in sorted(workload.objects.items()):
            if spec.kind == "endpoints":
                objects = with_live_gateways(spec.name, objects, fleet_name, live)
            cluster = workload.host if target == "control-plane" else target
            if cluster is None:
                raise pulumi.RunError(f"{spec.name}: no cluster of the fleet can host the control plane (a GKE, EKS or "
                                      "Existing InferenceCluster)")
            kubeconfig = kubeconfig_of(f"{spec.name}-{target}-platform", cluster, fleet_name)
            WorkloadObjects(f"{spec.name}-{target}", objects, provider(target, kubeconfig, cluster=cluster),
                            secrets=values, renamed_from=renamed_from(spec, target))

    def fingerprint() -> pulumi.Output[str] | str:
        if spec.kind != "endpoints":
            return spec.fingerprint
        # what the slices hold is what this update applied: the fingerprint of the addresses read now
        clusters = sorted(live)
        return pulumi.Output.all(*[live[c] for c in clusters]).apply(
            lambda addresses: endpoints_fingerprint(workload, Gateways(dict(zip(clusters, addresses)))))
    return recorded(run_workloads, fingerprint, list(workload.placements))


def renamed_from(spec: StackSpec, target: str) -> str | None:
    """The name a stack's objects on `target` had under its first, legacy stack name (automation/execution/migration.py):
    the stack's rename kept their resources, named after the old stack name. Aliased to it (WorkloadObjects), the
    first update after the rename changes nothing. None for a stack that never had another name."""
    legacy = spec.id.legacy_name()
    return f"{legacy}-{target}" if legacy is not None and legacy != spec.name else None


def stored_kubeconfig(fleet: Fleet, cluster: str) -> str | None:
    """An Existing cluster's kubeconfig from the fleet's secret store (a Secret given with -f, or a secrets
    folder), when it has one; else the program reads it from its config (`modelplane:kubeconfigFile`, ...)."""
    ic = next((c for c in fleet.of("InferenceCluster") if c.name == cluster), None)
    ref = kubeconfig_ref(ic) if ic is not None else None
    value = fleet.secrets.get(ref) if ref else None
    return value.reveal() if value is not None else None


def gateway_stack(payload: GatewayPayload, fleet_name: str | None = None,
                  secrets: Mapping[str, str] | None = None) -> FleetGateway:
    """The fleet gateway, on the control-plane cluster: a separate one given as config, else its host, whose
    platform stack ran first and whose kubeconfig output it uses. `secrets`: its placeholder Secrets' values."""
    config = pulumi.Config("modelplane")
    separate = config.get_secret("controlPlaneKubeconfig")
    if separate is not None:  # a control-plane cluster no platform stack manages
        return FleetGateway("fleet-gateway", payload.gateway, provider("control-plane", separate),
                            versions=payload.versions, standalone=True, sources=chart_sources(config),
                            crd_provider=provider("control-plane", separate, adopt=True))
    if payload.host is None:
        raise pulumi.RunError("the fleet gateway needs a cluster: no cluster of the fleet can host it (a GKE, EKS, AKS, "
                              "Nebius, Vultr, Civo or Existing InferenceCluster), and no modelplane:controlPlaneKubeconfig is set")
    kubeconfig = kubeconfig_of("gateway-host-platform", payload.host, fleet_name)
    return FleetGateway("fleet-gateway", payload.gateway, provider("control-plane", kubeconfig, cluster=payload.host),
                        versions=payload.versions, sources=chart_sources(config), secrets=secrets)


def with_live_gateways(stack: str, objects: list[dict], fleet_name: str | None = None,
                       references: dict[str, pulumi.Output] | None = None) -> list:
    """A replica's EndpointSlice points at its cluster's gateway address as that cluster's platform stack outputs it
    when this stack applies (a rendered address is only what the last recorded output said). While the platform
    stack has no address (a first preview, or a cluster whose gateway has none yet), the slice has no endpoints:
    a selectorless Service with an empty slice routes nowhere, instead of to a placeholder. Under backend Envoy
    the replica's Service follows the same address (`gateway_service_spec`). `references` collects each
    cluster's live address."""
    references = {} if references is None else references
    known: dict[tuple[str, str], str | None] = {}  # a slice's rendered address, which its Service shares
    for obj in objects:
        annotations = obj["metadata"].get("annotations") or {}
        if obj["kind"] == "EndpointSlice" and GATEWAY_OF_ANNOTATION in annotations:
            key = (obj["metadata"].get("namespace", ""), obj["metadata"]["name"])
            known[key] = None if PLACEHOLDER_ANNOTATION in annotations else obj["endpoints"][0]["addresses"][0]
    out: list = []
    for obj in objects:
        annotations = obj["metadata"].get("annotations") or {}
        cluster = annotations.get(GATEWAY_OF_ANNOTATION)
        if obj["kind"] not in ("EndpointSlice", "Service") or not cluster:
            out.append(obj)
            continue
        if cluster not in references:
            references[cluster] = pulumi.StackReference(
                f"{stack}-{cluster}-gateway", stack_name=platform_reference(cluster, None, fleet_name)).get_output(
                "gatewayAddress")
        rendered = known.get((obj["metadata"].get("namespace", ""), obj["metadata"]["name"]))

        def live_or_known(live: str | None, recorded: str | None = rendered) -> str | None:
            return live or recorded

        address = references[cluster].apply(live_or_known)
        meta = {**obj["metadata"], "annotations": {k: v for k, v in annotations.items() if k != PLACEHOLDER_ANNOTATION}}
        if obj["kind"] == "Service":  # a replica's: port 80, as the platform stack's gatewayServiceSpec
            out.append({**obj, "metadata": meta, "spec": address.apply(gateway_service_spec)})
        else:
            out.append({**obj, "metadata": meta, "addressType": address.apply(slice_address_type),
                        "endpoints": address.apply(gateway_endpoints)})
    return out
