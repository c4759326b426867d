"""The platform program: clusters, their GPU pools, serving stacks and the fleet gateway.

`pulumi up` from a laptop runs it with the fleet manifests named in stack config
(`modelplane:fleet`, a file or folder, relative to the project). Optional config:
  modelplane:cluster              only this InferenceCluster (the automation layer's platform-<cluster> stacks)
  modelplane:gateway              true/false: include the fleet gateway (default: true when no cluster is named)
  modelplane:gatewayOnly          true: only the fleet gateway (the automation layer's `gateway` stack)
  modelplane:controlPlaneCluster  the InferenceCluster that hosts the fleet gateway (default: the first)
  modelplane:controlPlaneKubeconfig  (secret) a kubeconfig for a separate control-plane cluster instead
  modelplane:deletionProtection   GKE deletion protection (default true)
  modelplane:versions             chart version overrides, e.g. {keda: 2.20.2}
  modelplane:clusterCredentials   "mounted": GKE and Nebius kubeconfigs sign in from the files an operator
                                  workspace mounts (components/workspace_credentials.py); default: the CLIs' sign-in
Stack outputs per cluster: kubeconfig (secret), gatewayAddress (and the replica slices' gatewayEndpoints and
gatewayAddressType made from it, and the replica Services' gatewayServiceSpec under an Envoy fleet gateway),
pools (name, nodes, devices).
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import TYPE_CHECKING

import pulumi

from components.args import (ClusterArgs, cluster_args, control_plane_cluster, gateway_args, host_extras,
                             gateway_cluster_output)
from components.clusters import InvalidFleet, cluster_component
from components.fleet_gateway import FleetGateway
from components.kubernetes import provider
from components.serving_stack import ServingStack
from fleet.plan import dynamo_clusters
from fleet.scheduler import schedule
from fleet.secrets import kubeconfig_ref
from fleet.validate import load_fleet
from workloads.gateways import GATEWAY_CLUSTER_OUTPUT
from workloads.service_routing import gateway_endpoints, gateway_service_spec, slice_address_type

if TYPE_CHECKING:
    from fleet.validate import Fleet

def project_root() -> Path:
    """The folder holding Pulumi.yaml. The CLI runs the program in `main` (infra/), so relative config paths
    are resolved here, never against the working directory."""
    root = pulumi.get_root_directory()
    if root and (Path(root) / "Pulumi.yaml").is_file():
        return Path(root)
    return Path(__file__).resolve().parent.parent  # a program run outside the CLI (tests, the automation layer)


def load(path: str):
    full = path if os.path.isabs(path) else str(project_root() / path)
    loaded = load_fleet([full])
    if loaded.errors:
        raise InvalidFleet("invalid fleet manifests:\n" + "\n".join(str(p) for p in loaded.errors))
    return loaded.fleet


def published_pools(args: ClusterArgs) -> list[dict]:
    return [{"name": p.name, "nodes": p.capacity_nodes,
             "devices": [{"name": d.name, "driver": d.driver, "count": d.count, "claim": d.claim} for d in p.devices]}
            for p in args.pools]


def chart_sources(config: pulumi.Config) -> dict[str, str]:
    """`modelplane:chartSources`: where each chart is fetched from (components/versions.py `located`), as an
    air-gapped platform team writes it once in stack config (or `modelplane up --chart-source`)."""
    from components.versions import chart_sources_problems

    try:
        value = config.get_object("chartSources") or {}
    except Exception:  # noqa: BLE001 - Pulumi raises its own error type for a value that is not JSON
        raise InvalidFleet("modelplane:chartSources: not a JSON or YAML mapping") from None
    problems = chart_sources_problems(value)
    if problems:
        raise InvalidFleet("modelplane:" + "; ".join(problems))
    return dict(value)


def cluster_stack(args: ClusterArgs, config: pulumi.Config, versions: dict, metallb_pool: str | None = None,
                  stored_kubeconfig: str | None = None, rate_limit: bool = False, trust_manager: bool = False,
                  client_cas: tuple[str, ...] = ()):
    """One cluster, its GPU pools, serving stack and Gateway; returns its Kubernetes provider, serving stack and
    the outputs other stacks read. Built from typed arguments only, so a cluster no longer in the fleet can be
    run again from what its stack recorded (`clusterArgs`), to lift its protection before it is destroyed."""
    cluster = cluster_component(args, config, stored_kubeconfig)
    k8s_provider = provider(args.name, cluster.kubeconfig, parent=cluster)
    stack = ServingStack(f"{args.name}-serving", args, k8s_provider, depends_on=list(cluster.gpu_pools), versions=versions,
                         facts=cluster.facts, metallb_pool=metallb_pool, rate_limit=rate_limit,
                         trust_manager=trust_manager, client_cas=client_cas, sources=chart_sources(config),
                         crd_provider=provider(args.name, cluster.kubeconfig, parent=cluster, adopt=True),
                         opts=pulumi.ResourceOptions(parent=cluster))
    outputs = {"kubeconfig": cluster.kubeconfig, "gatewayAddress": stack.gateway_address,
               # what a replica's EndpointSlice holds for this gateway: the operator's Programs use it as is
               "gatewayEndpoints": stack.gateway_address.apply(gateway_endpoints),
               "gatewayAddressType": stack.gateway_address.apply(slice_address_type),
               "gatewayServiceSpec": stack.gateway_address.apply(gateway_service_spec),
               "pools": published_pools(args),
               "clusterArgs": {"args": args.model_dump(mode="json"), "metallbPool": metallb_pool,
                               **({"rateLimit": True} if rate_limit else {}),
                               **({"trustManager": True} if trust_manager else {}),
                               **({"clientCAs": list(client_cas)} if client_cas else {})}}
    return k8s_provider, stack, outputs


def recorded_cluster(recorded: dict, config: pulumi.Config | None = None) -> dict:
    """Run one cluster's stack again from its recorded `clusterArgs` output (the cluster left the fleet)."""
    config = config or pulumi.Config("modelplane")
    args = ClusterArgs.model_validate(recorded["args"])
    _, _, outputs = cluster_stack(args, config, config.get_object("versions") or {}, recorded.get("metallbPool"),
                                  rate_limit=bool(recorded.get("rateLimit")),
                                  trust_manager=bool(recorded.get("trustManager")),
                                  client_cas=tuple(recorded.get("clientCAs") or ()))
    for key, value in outputs.items():
        pulumi.export(key, value)
    return outputs


def platform(fleet: Fleet, config: pulumi.Config | None = None, gateway_kubeconfig=None, only: str | None = None,
             gateway_only: bool | None = None) -> dict:
    """Create every platform component of the fleet (or of one cluster); returns the outputs it exported.

    `gateway_kubeconfig` (an Output) hosts the fleet gateway on a cluster whose platform stack is another stack.
    `only` (one cluster) and `gateway_only` are the stack's own, from its name (automation/execution/programs.py); without
    them the config's `cluster` and `gatewayOnly` say.
    """
    config = config or pulumi.Config("modelplane")
    versions = config.get_object("versions") or {}
    only = only or config.get("cluster") or None  # Pulumi.yaml declares "" as the default: every cluster
    names = [c.name for c in fleet.of("InferenceCluster")]
    if only and only not in names:
        raise InvalidFleet(f"modelplane:cluster names {only!r}, which is not an InferenceCluster in the fleet")
    separate = config.get_secret("controlPlaneKubeconfig")
    try:
        host = None if separate is not None else control_plane_cluster(fleet, config.get("controlPlaneCluster") or None)
    except ValueError as exc:
        raise InvalidFleet(f"modelplane:controlPlaneCluster: {exc}") from None
    gateway = gateway_args(fleet, host)
    outputs: dict = {}
    providers: dict = {}
    serving: dict = {}
    gateway_only = config.get_bool("gatewayOnly", False) if gateway_only is None else gateway_only
    # the Dynamo platform where the fleet's plan places Dynamo-served replicas (or spec.stack asks for it)
    dynamo = dynamo_clusters(schedule(fleet)) if not gateway_only else frozenset()
    for name in [] if gateway_only else [only] if only else names:
        args = cluster_args(fleet, name).model_copy(update={"dynamo": name in dynamo})
        ref = kubeconfig_ref(next(c for c in fleet.of("InferenceCluster") if c.name == name))
        stored = fleet.secrets.get(ref) if ref else None
        # a whole fleet in one stack knows no front door's CA before it runs: its fleet listeners stay closed
        metallb_pool, rate_limit, trust_manager = host_extras(gateway, name, host)
        providers[name], serving[name], outputs[name] = cluster_stack(
            args, config, versions, metallb_pool, stored.reveal() if stored else None, rate_limit=rate_limit,
            trust_manager=trust_manager)
    if gateway and (gateway_only or config.get_bool("gateway", not only)):
        if separate is not None:  # a control-plane cluster no platform stack manages
            front = FleetGateway("fleet-gateway", gateway, provider("control-plane", separate), versions=versions,
                                 standalone=True, sources=chart_sources(config),
                                 crd_provider=provider("control-plane", separate, adopt=True))
        elif host in providers:  # the host's serving stack is in this stack: wait for it
            front = FleetGateway("fleet-gateway", gateway, providers[host], versions=versions, after=[serving[host]],
                                 sources=chart_sources(config))
        elif gateway_kubeconfig is not None and host is not None:  # the host's platform stack ran before this one
            front = FleetGateway("fleet-gateway", gateway, provider("control-plane", gateway_kubeconfig, cluster=host),
                                 versions=versions, sources=chart_sources(config))
        else:
            raise InvalidFleet("the fleet gateway needs a cluster: set modelplane:controlPlaneCluster to an "
                               "InferenceCluster in this stack, or modelplane:controlPlaneKubeconfig (secret)")
        outputs["gateway"] = {"address": front.address}
        cluster = gateway_cluster_output(gateway, host)
        if cluster is not None:  # a v0.5 gateway: its clusterName, immutable once applied (automation/record)
            outputs["gateway"][GATEWAY_CLUSTER_OUTPUT] = cluster
    flat = outputs[only] if only and only in outputs else outputs.get("gateway") if gateway_only else None
    if flat is not None:  # one cluster's or the gateway's stack: flat outputs other stacks reference
        for key, value in flat.items():
            pulumi.export(key, value)
    else:
        for name, value in outputs.items():
            pulumi.export(name, value)
    return outputs


def main() -> None:
    """The whole fleet in one stack (a laptop sandbox), or the gateway alone for the operator executor
    (`controlPlaneStack`). Stacks named as `modelplane up` names them run infra/laptop.py instead."""
    config = pulumi.Config("modelplane")
    gateway_kubeconfig = None
    reference = config.get("controlPlaneStack")
    if reference:  # the gateway stack alone (the operator executor): the host's platform stack ran before it
        gateway_kubeconfig = pulumi.StackReference("control-plane-platform", stack_name=reference).get_output(
            "kubeconfig")
    platform(load(config.require("fleet")), config, gateway_kubeconfig)
