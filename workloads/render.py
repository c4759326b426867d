"""Everything each stack would create, as plain Kubernetes objects per target.

Stacks (named by fleet/stack_id.py):
  team-<ns>.<cluster>       per cluster the team uses: its namespace, NetworkPolicy and device quota
  model-<ns>.<deployment>   per placed replica, on its cluster: workloads, claims, routing, autoscaling
  endpoints-<ns>            on the control plane: one backend per endpoint that any service selects
  service-<ns>.<name>       on the control plane: the route of a ModelService
  cache-<ns>.<name>         per cluster the cache stages to: volume, hydration job, token Secret

A target is a workload cluster's name or `control-plane`. Health: a replica gets an
endpoint only when it is ready and its cluster has a gateway address. Rendering shows the
intended end state: a placed replica counts as ready unless an observed ModelReplica says it
is not, and a gateway address not known yet (it exists once the platform stack applied) is a
marked placeholder that still validates.
"""

from __future__ import annotations

import hashlib
import json
from collections import Counter
from dataclasses import dataclass, field
from functools import cached_property, lru_cache
from typing import TYPE_CHECKING, Iterable, Mapping, NamedTuple

from fleet import tenancy
from fleet.inventory import ClusterView, build_clusters
from fleet.plan import PlacedReplica, Plan
from fleet.problems import Problem
from fleet.stack_id import StackId, StackKind
from fleet.team_policy import Policies, not_resident, origin_refused
from workloads import ai_gateway, autoscaling, fleet_autoscaling, fleet_data_plane, front_door_mtls, routing
from workloads.backends import registry as serving_backends
from workloads.readiness import READY_WHEN, with_prerequisites
from workloads.tenancy import control_plane_namespace, replica_devices, team_objects
from workloads.cache import cache_objects, hydrated_clusters
from workloads.context import ReplicaContext, replica_context, replica_labels
from workloads.gateways import Gateways
from workloads.service_routing import (PENDING_FRONT_DOOR, Endpoint, EndpointIndex, backend_objects,
                                       distribute_weights, route_objects, select, service_address)

if TYPE_CHECKING:
    from fleet.api.gateway import Envoy
    from fleet.api.policy import TeamPolicy
    from fleet.api.service import EndpointSpec
    from fleet.validate import Fleet

CONTROL_PLANE = "control-plane"


# Stack names are asked for per replica and per object, by render and by every stack's dependencies: each is
# built once (a StackId and its text: a few microseconds, tens of thousands of times in a large fleet).
@lru_cache(maxsize=1 << 16)
def model_stack(namespace: str, name: str) -> str:
    return str(StackId.model(namespace, name))


@lru_cache(maxsize=1 << 16)
def service_stack(namespace: str, name: str) -> str:
    return str(StackId.service(namespace, name))


def cache_stack(namespace: str, name: str) -> str:
    return str(StackId.cache(namespace, name))


@lru_cache(maxsize=1 << 16)
def team_stack(namespace: str, cluster: str) -> str:
    return str(StackId.team(namespace, cluster))


@lru_cache(maxsize=1 << 12)
def platform_stack(cluster: str) -> str:
    return str(StackId.platform(cluster))


@lru_cache(maxsize=1 << 12)
def endpoints_stack(namespace: str) -> str:
    return str(StackId.endpoints(namespace))


class ModelStacks:
    """Each deployment's model stack, composed when asked: each of its replicas' objects on the replica's cluster.
    `render --out` leaves model stacks to its forked writers, each composing its share where it writes it."""

    def __init__(self, fleet: Fleet, plan: Plan):
        self.fleet, self._plan = fleet, plan
        self._deployments = {(d.namespace, d.name): d for d in fleet.of("ModelDeployment")}
        self._chosen = tenancy.mode(fleet)
        self._fleet_host = envoy_front_door(fleet) is not None

    @cached_property
    def replicas(self) -> dict[str, list[PlacedReplica]]:
        """Stack -> its replicas, in plan order (grouped when first asked: `render` composes replica by replica)."""
        out: dict[str, list[PlacedReplica]] = {}
        for placed in self._plan.replicas:
            out.setdefault(model_stack(placed.namespace, placed.deployment), []).append(placed)
        return out

    def replica(self, placed: PlacedReplica) -> list[dict]:
        md = self._deployments[(placed.namespace, placed.deployment)]
        return compose_replica(replica_context(md, placed, tenancy.workload_namespace(md.namespace, self._chosen),
                                               self._fleet_host))

    def compose(self, stack: str) -> dict[str, list[dict]]:
        """Target -> the stack's objects there, as `render` adds them."""
        out: dict[str, list[dict]] = {}
        for placed in self.replicas[stack]:
            out.setdefault(placed.cluster, []).extend(self.replica(placed))
        return out


@dataclass
class Rendered:
    stacks: dict[str, dict[str, list[dict]]] = field(default_factory=dict)
    addresses: dict[str, str] = field(default_factory=dict)  # service stack -> the ModelService address
    # every problem; with `deferred`, no collisions: `collisions` finds them once the deferred stacks are
    # composed (`render --out`'s writers do)
    problems: list[Problem] = field(default_factory=list)
    endpoints: list[Endpoint] = field(default_factory=list)  # every routable endpoint, composed or given
    routes: dict[tuple[str, str], list[str]] = field(default_factory=dict)  # (ns, service) -> endpoint names
    cache_clusters: dict[tuple[str, str], list[str]] = field(default_factory=dict)  # (ns, cache) -> clusters
    front_door_tls: bool = False  # the fleet gateway serves only HTTPS: service addresses are https
    backends: dict[str, Backends] = field(default_factory=dict)  # endpoints stack -> what it owns (composed or not)
    placement_labels: dict[str, dict[str, str]] = field(default_factory=dict)  # `cluster_placement_labels`
    # v0.5 endpoint -> "" when its credential's Secret has the key, else why not (`ai_gateway.credentials`)
    credentials: dict[tuple[str, str], str] = field(default_factory=dict)
    deferred: ModelStacks | None = None  # model stacks left to compose: their targets are in `stacks`, empty

    def add(self, stack: str, target: str, objects: list[dict]) -> None:
        self.stacks.setdefault(stack, {}).setdefault(target, []).extend(objects)

    def targets(self, stack: str) -> dict[str, list[dict]]:
        """Target -> the stack's objects there; a deferred stack is composed now."""
        if self.deferred is not None and stack in self.deferred.replicas:
            return self.deferred.compose(stack)
        return self.stacks[stack]

    def objects(self):
        """(stack, target, object) of every object, deferred ones composed as they are reached."""
        for stack in sorted(self.stacks):
            targets = self.targets(stack)
            for target in sorted(targets):
                for obj in targets[target]:
                    yield stack, target, obj


# GPU scale-up plus image pull plus weight loading takes far longer than Pulumi's 10-minute default wait for a
# workload to become ready: the Kubernetes provider reads this annotation as the object's own timeout.
READY_TIMEOUT = {"pulumi.com/timeoutSeconds": "3600"}
WAITED_KINDS = ("Deployment", "LeaderWorkerSet", "DynamoGraphDeployment", "StatefulSet")


def with_ready_timeout(objects: list[dict]) -> list[dict]:
    for obj in objects:
        if obj["kind"] in WAITED_KINDS:
            meta = obj["metadata"]
            wait = {"pulumi.com/waitFor": READY_WHEN[obj["kind"]]} if obj["kind"] in READY_WHEN else {}
            meta["annotations"] = {**READY_TIMEOUT, **wait, **(meta.get("annotations") or {})}
    return objects


def compose_replica(ctx: ReplicaContext) -> list[dict]:
    """All of one replica's objects on its cluster: its backends' workloads, then routing and scaling."""
    objects = serving_backends.compose(ctx)
    objects += routing.replica_surface(ctx)
    objects += autoscaling.scaled_objects(ctx)
    return with_prerequisites(with_ready_timeout(objects))


def _replica_ready(fleet: Fleet) -> dict[tuple[str, str], bool]:
    """Observed readiness of ModelReplicas given as input: (namespace, name) -> ready."""
    out = {}
    for mr in fleet.of("ModelReplica"):
        conditions = {c.get("type"): c.get("status") for c in (mr.status or {}).get("conditions", []) if isinstance(c, dict)}
        for kind in ("ModelReady", "Ready"):
            if kind in conditions:
                out[(mr.namespace, mr.name)] = conditions[kind] == "True"
                break
    return out


def cluster_placement_labels(fleet: Fleet) -> dict[str, dict[str, str]]:
    """Cluster -> its `spec.placement.metadata.labels` (the reference's v0.5), for the clusters that have some: stamped
    on every ModelReplica and ModelEndpoint composed there."""
    return {ic.name: labels for ic in fleet.of("InferenceCluster") if (labels := ic.spec.placement_labels)}


def placeholder_address(cluster: str) -> str:
    return f"{cluster}.gateway.pending.modelplane.invalid"


def v05_endpoint_problems(name: str, spec: EndpointSpec) -> list[str]:
    """What the v0.3.1 front door (routes by path, passes the body through, attaches nothing) cannot do for a v0.5
    ModelEndpoint a service routes to: these are the v0.5 gateway's, which is not composed yet."""
    out = []
    later = "the v0.5 gateway's work, which is not composed yet"
    if spec.model is not None:
        out.append(f"ModelEndpoint {name} sets model: the v0.3.1 front door does not rewrite the request's model "
                   f"({later}); leave it unset and have callers send the name the backend knows")
    if spec.credential is not None:
        out.append(f"ModelEndpoint {name} sets credential: the v0.3.1 front door attaches no credential ({later})")
    if spec.api.schema_ != "OpenAI":
        out.append(f"ModelEndpoint {name} speaks the {spec.api.schema_} API: the v0.3.1 front door serves the OpenAI "
                   f"API only ({later})")
    if spec.rewrite_path is None:
        out.append(f"ModelEndpoint {name} has api.prefix {spec.api.prefix!r}: the v0.3.1 front door reaches a "
                   "backend by replacing the service's path with the prefix less its `v1`, so the prefix must end "
                   "in /v1")
    return out


def v05_gateway_problems(fleet: Fleet) -> list[Problem]:
    """The v0.5 gateways this project does not compose yet: all but the first by name (one gateway stack per fleet,
    on the control plane's host, which a v0.5 gateway's cluster is: components/args.py `control_plane_cluster`);
    and each `tls.certificateRefs` Secret the gateway stack cannot copy to the gateway's cluster."""
    newer = sorted((g for g in fleet.of("InferenceGateway") if g.v05 is not None), key=lambda g: g.name)
    return [fleet.problem(other, ("spec", "clusterName"), (
        f"this project composes one v0.5 InferenceGateway per fleet yet (InferenceGateway/{newer[0].name}, on "
        f"{newer[0].v05.clusterName if newer[0].v05 else '?'}), so nothing is rendered or applied while there are "
        f"more; serve several regions from one gateway's cluster for now, or split the fleet"))
        for other in newer[1:]] + [
        fleet.problem(g, path, message) for g in newer if g.v05 is not None
        for path, message in ai_gateway.certificate_problems(
            g.v05, {where: sorted(values) for where, values in fleet.secrets.manifests.items()})]


def v05_gateway(fleet: Fleet):
    """The v0.5 InferenceGateway composed (the first by name), or None."""
    newer = sorted((g for g in fleet.of("InferenceGateway") if g.v05 is not None), key=lambda g: g.name)
    return newer[0] if newer else None


def envoy_front_door(fleet: Fleet) -> Envoy | None:
    """The fleet data plane's settings when the InferenceGateway's backend is Envoy (workloads/fleet_data_plane.py).
    A v0.5 gateway runs on the same Envoy front door (its Backends, its mTLS hop): the defaults, which its own
    policies (workloads/ai_gateway.py) replace where it routes."""
    from fleet.api.gateway import Envoy

    gateway = v05_gateway(fleet) or next(iter(fleet.of("InferenceGateway")), None)
    if gateway is not None and gateway.v05 is not None:
        return Envoy()
    return gateway.envoy if gateway is not None else None


def render(fleet: Fleet, plan: Plan, host: str | None = None, reuse: Mapping[str, tuple] | None = None,
           gateways: Gateways | None = None, inputs: StackInputs | None = None,
           deferred: ModelStacks | None = None) -> Rendered:
    """`host`: the cluster that hosts the control plane, where each team with ModelServices needs its namespace
    (owned, like on every cluster the team uses, by `team-<ns>.<cluster>`, so its owner never changes).

    `gateways`: the gateway addresses the applied platform and gateway stacks output (an InferenceCluster's or
    InferenceGateway's observed `status` comes first); with none known, an address is a marked placeholder.

    `reuse`: stacks whose objects the caller already knows (their inputs did not change, see `stack_inputs`), with
    those objects' identities (`object_keys`): they are not composed, the stacks keep their targets with no
    objects, and collisions are found from the identities. `inputs`: `stack_inputs` of this plan, host and
    gateways, when the caller has them.

    `deferred`: this plan's model stacks, left to compose (`Rendered.deferred`), and their collisions to find."""
    reuse = reuse or {}
    out = Rendered(placement_labels=cluster_placement_labels(fleet), credentials=ai_gateway.credentials(fleet))
    # the cluster views: for routing and team stacks (given with `inputs`) and caches
    clusters = {c.name: c for c in build_clusters(fleet)} if inputs is None or fleet.of("ModelCache") else {}
    chosen = tenancy.mode(fleet)
    envoy = envoy_front_door(fleet)
    models = deferred or ModelStacks(fleet, plan)
    for placed in plan.replicas:
        stack = model_stack(placed.namespace, placed.deployment)
        if deferred is not None or stack in reuse:  # its objects are known, or composed later: its targets alone are needed
            out.add(stack, placed.cluster, [])
        else:
            out.add(stack, placed.cluster, models.replica(placed))
    out.deferred = deferred
    routes = inputs.routing if inputs is not None else routing_plan(fleet, plan, gateways, host, clusters)
    out.problems += routes.problems
    out.endpoints, out.front_door_tls = list(routes.endpoints), routes.front_door_tls
    out.addresses, out.routes, out.backends = dict(routes.addresses), dict(routes.routes), dict(routes.backends)
    newest = v05_gateway(fleet)
    for stack, (ms, chosen_endpoints) in routes.services.items():
        out.add(stack, CONTROL_PLANE, [] if stack in reuse else
                [ai_gateway.route_object(ms, chosen_endpoints, newest.name, newest.v05, ms.spec.effective_timeouts)]
                if newest is not None and newest.v05 is not None else
                fleet_data_plane.route_objects(ms, chosen_endpoints, envoy) if envoy is not None else
                route_objects(ms, chosen_endpoints))
    for stack, backends in routes.backends.items():  # one owner for each endpoint's objects, however many services share it
        out.add(stack, CONTROL_PLANE, [] if stack in reuse else
                [obj for ep in backends.endpoints for obj in backend_objects(ep, envoy=envoy is not None)]
                + [fleet_data_plane.backend_object(t) for t in backends.tiered] + client_grants(backends)
                + [obj for r in backends.routed for obj in ai_gateway.endpoint_objects(r)]
                + backends.scaled)
    policies = Policies.of(fleet)
    for cache in fleet.of("ModelCache"):
        for cluster in cache_targets(cache, clusters.values(), policies.for_namespace(cache.namespace)):
            out.add(cache_stack(cache.namespace, cache.name), cluster.name,
                    cache_objects(cache, str(cluster.cache_storage_class),
                                  tenancy.workload_namespace(cache.namespace, chosen),
                                  hydrated=cluster.name in hydrated_clusters(cache)))
            out.cache_clusters.setdefault((cache.namespace, cache.name), []).append(cluster.name)
    teams = inputs.teams if inputs is not None else team_stacks(fleet, plan, host, routes.serving, clusters.values())
    for stack, team in teams.items():
        if stack in reuse:
            out.add(stack, team.cluster, [])
            continue
        objects = team_objects(team.team, team.namespace, Counter(dict(team.devices))) if team.owns else []
        if team.control_plane_namespace:  # teams share `default`: the route namespace alone
            objects.insert(0, control_plane_namespace(team.team))
        out.add(stack, team.cluster, objects)
    if deferred is None:
        out.problems += collisions(fleet, out, reuse)
    return out


def client_grants(backends: Backends) -> list[dict]:
    """The ReferenceGrant that lets a namespace's Backends present the front door's client certificate, where
    one of them reaches a replica (workloads/front_door_mtls.py)."""
    namespaces = sorted({t.endpoint.namespace for t in backends.tiered if t.endpoint.composed})
    return [front_door_mtls.client_certificate_grant(ns) for ns in namespaces]


class Backends(NamedTuple):
    """A namespace's endpoints stack: the endpoints any of its services route to (by name), the Backends of those
    they reach under Envoy (by name), and its fleet autoscalers."""

    endpoints: list[Endpoint]
    tiered: list[fleet_data_plane.Tiered]
    scaled: list[dict]
    routed: list[ai_gateway.Routed] = []  # under a v0.5 gateway: each endpoint's AIServiceBackend and credential


@dataclass
class Routing:
    """What the control plane's routing is composed from: every routable endpoint, what each ModelService routes
    to, each namespace's `Backends`, with the problems found on the way, and per service and endpoints stack a
    digest of all of it that the stack's objects read (equal digests: equal objects)."""

    endpoints: list[Endpoint]
    problems: list[Problem]
    services: dict[str, tuple]  # service stack -> (its ModelService, its weighted endpoints or, under Envoy, tiers)
    backends: dict[str, Backends]  # endpoints stack -> what it owns
    addresses: dict[str, str]  # service stack -> the ModelService's address
    routes: dict[tuple[str, str], list[str]]  # (namespace, service) -> the endpoints it routes to
    front_door_tls: bool
    digests: dict[str, str]
    serving: set[str]  # teams with routes, backends or fleet autoscalers on the control plane


def routing_plan(fleet: Fleet, plan: Plan, gateways: Gateways | None, host: str | None,
                 clusters: Mapping[str, ClusterView] | None = None) -> Routing:
    """Health: a replica gets an endpoint only when it is ready and its cluster has a gateway address (known from
    its status, else from `gateways`, the applied stacks' outputs, else a marked placeholder). `host`: the cluster
    that is the control plane these stacks write to (part of their fingerprints). `clusters`: the fleet's, by name
    (`build_clusters`), when the caller has them."""
    clusters = clusters if clusters is not None else {c.name: c for c in build_clusters(fleet)}
    deployments = {(d.namespace, d.name): d for d in fleet.of("ModelDeployment")}
    placement_labels = cluster_placement_labels(fleet)
    ready = _replica_ready(fleet)
    newest = v05_gateway(fleet)
    gateway = newest or next(iter(fleet.of("InferenceGateway")), None)
    envoy = envoy_front_door(fleet)
    problems: list[Problem] = list(v05_gateway_problems(fleet))
    policies = Policies.of(fleet)
    # the cluster whose gateway every request to a service passes through: a v0.5 gateway's, else the control
    # plane's (the v0.3.1 front door's host); a team's policy must allow it (unknown labels: outside, fail closed)
    door = newest.v05.clusterName if newest is not None and newest.v05 is not None else host
    door_labels = clusters[door].labels if door is not None and door in clusters else {}
    endpoints: list[Endpoint] = []
    for placed in plan.replicas:
        cluster = clusters[placed.cluster]
        if not ready.get((placed.namespace, placed.name), True) or (cluster.observed and not cluster.gateway):
            continue  # not ready, or its cluster has no gateway: no endpoint, so no traffic
        if (why := not_resident(policies.for_namespace(placed.namespace), cluster.labels)) is not None:
            # the scheduler places none there; a plan made before the policy may: its team's traffic never goes there
            problems.append(Problem(endpoints_stack(placed.namespace), 0, f"ModelReplica/{placed.name}",
                                    "spec.clusterName", f"cluster {placed.cluster} is {why}: no route to it",
                                    warning=True))
            continue
        md = deployments[(placed.namespace, placed.deployment)]
        known = cluster.gateway or (gateways.clusters.get(cluster.name) if gateways else None)
        address = known or placeholder_address(cluster.name)
        placeholder = None if known else f"gateway address of {cluster.name}, known once its platform stack applies"
        # the reference's v0.5: the deployment's template labels and its cluster's placement labels (which win: a
        # deployment cannot claim another region), then the managed ones
        labels = {**(md.spec.template.metadata.labels if md.spec.template.metadata and md.spec.template.metadata.labels else {}),
                  **placement_labels.get(placed.cluster, {}),
                  **replica_labels(md.name, placed.cluster, placed.index, placed.name)}
        path = routing.replica_path(md.namespace, placed.name)
        # an Envoy front door reaches it on its cluster gateway's mutually authenticated listener (https)
        scheme = "https" if envoy is not None else "http"
        endpoints.append(Endpoint(placed.name, md.namespace, f"{scheme}://{address}{path}v1", path, labels, placeholder,
                                  composed=True, cluster=cluster.name))
    replicas = {(ep.namespace, ep.name) for ep in endpoints}
    for me in fleet.of("ModelEndpoint"):
        if (me.namespace, me.name) in replicas:  # both would be backed by the Service ep-<name>
            problems.append(Problem(endpoints_stack(me.namespace), 0, f"ModelEndpoint/{me.name}", "metadata.name", (
                f"two endpoints are named {me.name!r} in namespace {me.namespace}: this ModelEndpoint and a replica "
                "of a ModelDeployment, whose backends would be the same Service; rename the ModelEndpoint")))
            continue
        origin, field_path = (me.v05.origin, "spec.origin") if me.v05 is not None else (me.url, "spec.url")
        if (refused := origin_refused(policies.for_namespace(me.namespace), origin)) is not None:
            # fleet/validate.py refuses it too; here for every road that renders (the portal's writes): no route to it
            problems.append(Problem(endpoints_stack(me.namespace), 0, f"ModelEndpoint/{me.name}", field_path, refused))
            continue
        endpoints.append(Endpoint(me.name, me.namespace, me.url, me.rewrite_path, dict(me.metadata.labels or {})))
    index = EndpointIndex(endpoints)
    # v0.5 endpoints: under a v0.5 gateway, what their AIServiceBackends are made of; under a v0.3.1 one, what that
    # composition cannot do with them
    specs = {(me.namespace, me.name): me.v05 for me in fleet.of("ModelEndpoint") if me.v05 is not None}
    newer = specs if newest is None else {}
    front_door = (((gateway.status or {}).get("address") if gateway else None) or (gateways and gateways.front_door)
                  or PENDING_FRONT_DOOR)
    tls = bool(envoy and envoy.tls) or bool(newest and newest.v05 and newest.v05.tls)
    out = Routing(endpoints, problems, {}, {}, {}, {}, tls, {}, set())
    envoy_text = fleet.text_of(gateway) if envoy is not None and gateway is not None else ""
    routed: dict[str, dict[str, Endpoint]] = {}  # namespace -> the endpoints any of its services route to
    tiered: dict[str, dict[str, fleet_data_plane.Tiered]] = {}  # namespace -> Backend name -> what it reaches
    ai: dict[str, dict[str, ai_gateway.Routed]] = {}  # namespace -> AIServiceBackend name -> its endpoint
    for ms in fleet.of("ModelService"):
        stack = service_stack(ms.namespace, ms.name)
        chosen: list
        if newest is not None and newest.v05 is not None and not ai_gateway.serves(newest.v05, ms.metadata.labels):
            continue  # the gateway's serviceSelector leaves it out: no route on it
        if door is not None and gateway is not None and (
                why := not_resident(policies.for_namespace(ms.namespace), door_labels)) is not None:
            problems.append(Problem(stack, 0, f"ModelService/{ms.name}", "metadata.namespace", (
                f"the front door (InferenceGateway {gateway.name}) runs on cluster {door}, which is {why}: no "
                f"gateway may serve it, so it gets no route; serve the team from a gateway on a cluster its policy "
                f"allows"), warning=True))  # withheld, not refused: a label removed must take the route down
            continue
        if newest is not None and newest.v05 is not None:
            chosen = ai_gateway.tiers(ms, select(ms, index), specs)
            problems += [Problem(stack, 0, f"ModelService/{ms.name}", "spec.endpoints", message)
                         for message in ai_gateway.endpoint_problems(chosen)]
            selected = [r.endpoint for r in chosen]
            tiered.setdefault(ms.namespace, {}).update({r.backend: ai_gateway.backend_tier(r) for r in chosen})
            ai.setdefault(ms.namespace, {}).update({r.backend: r for r in chosen})
        elif envoy is not None:
            chosen = fleet_data_plane.tiers(ms, select(ms, index))
            problems += [Problem(stack, 0, f"ModelService/{ms.name}", path, message)
                         for path, message in fleet_data_plane.endpoint_problems(ms, chosen)]
            problems += [Problem(stack, 0, f"ModelService/{ms.name}", f"spec.endpoints[{i}].priority", (
                f"priority {entry.priority}: the v0.3.1 Envoy front door serves priority 0 and overflow 1; more "
                "failover tiers are the v0.5 gateway's, which is not composed yet"))
                for i, entry in enumerate(ms.spec.endpoints) if entry.priority > 1]
            selected = [t.endpoint for t in chosen]
            tiered.setdefault(ms.namespace, {}).update({t.backend_name: t for t in chosen})
        else:
            problems += [Problem(stack, 0, f"ModelService/{ms.name}", f"spec.endpoints[{i}].priority",
                                 "overflow endpoints (priority 1) need InferenceGateway backend Envoy; Traefik "
                                 "has no priorities for Gateway API routes")
                         for i, entry in enumerate(ms.spec.endpoints) if entry.priority]
            chosen = distribute_weights(select(ms, index))
            selected = [ep for ep, _ in chosen]
        problems += [Problem(stack, 0, f"ModelService/{ms.name}", "spec.endpoints", message)
                     for ep in selected if (spec := newer.get((ep.namespace, ep.name))) is not None
                     for message in v05_endpoint_problems(ep.name, spec)]
        out.services[stack] = (ms, chosen)
        out.digests[stack] = _digest((host, fleet.text_of(ms), envoy_text, chosen))
        out.addresses[stack] = (service_address(front_door, ms.namespace, ms.name, out.front_door_tls)
                                if newest is None else v05_service_address(front_door, out.front_door_tls))
        routed.setdefault(ms.namespace, {}).update({ep.name: ep for ep in selected})
        out.routes[(ms.namespace, ms.name)] = [ep.name for ep in selected]
    scaled, scaling_problems = fleet_autoscaling.scaled_objects(fleet, endpoints_stack)
    problems += scaling_problems
    out.serving = {ms.namespace for ms in fleet.of("ModelService")} | set(scaled)
    for namespace in sorted(set(routed) | set(scaled)):
        shared, backends, routed_ai = routed.get(namespace, {}), tiered.get(namespace, {}), ai.get(namespace, {})
        if shared or namespace in scaled:
            stack = endpoints_stack(namespace)
            owned = out.backends[stack] = Backends([shared[n] for n in sorted(shared)],
                                                   [backends[n] for n in sorted(backends)], scaled.get(namespace, []),
                                                   [routed_ai[n] for n in sorted(routed_ai)])
            # a replica's slice points at its cluster's gateway: its recorded address is part of the fingerprint
            recorded = {ep.cluster: gateways.clusters.get(ep.cluster) for ep in owned.endpoints
                        if ep.cluster} if gateways else {}
            out.digests[stack] = _digest((host, envoy is not None, owned.endpoints, owned.tiered, owned.routed,
                                          json.dumps(owned.scaled, sort_keys=True), sorted(recorded.items())))
    return out


def v05_service_address(front_door: str, tls: bool) -> str:
    """Under a v0.5 gateway a service has no address of its own: callers name it in the body (`"model":
    "<ns>/<service>"`) at the gateway's OpenAI base URL."""
    return f"{'https' if tls else 'http'}://{front_door}/v1"


def _digest(value: object) -> str:
    return hashlib.sha256(repr(value).encode()).hexdigest()


def cache_targets(cache, clusters: Iterable[ClusterView], policy: TeamPolicy | None = None) -> list[ClusterView]:
    """The clusters a ModelCache stages to: those its selector matches that have a storage class for caches and
    are inside its team's residency (`policy`, its namespace's TeamPolicy: fleet/validate.py warns of a selector
    that reaches further, naming the policy)."""
    selector = cache.spec.clusterSelector.matchLabels if cache.spec.clusterSelector else None
    return [c for c in clusters if c.cache_storage_class
            and not (selector and any(c.labels.get(k) != v for k, v in selector.items()))
            and not_resident(policy, c.labels) is None]


class TeamStack(NamedTuple):
    """What a team's stack on one cluster is composed from (`render` reads nothing else for it)."""

    team: str
    cluster: str
    namespace: str  # the team's workload namespace there
    owns: bool  # the namespace is the team's own: its isolation and device quota are created
    devices: tuple[tuple[str, int], ...]  # devices per class the team's replicas there may claim, sorted
    control_plane_namespace: bool  # the control plane, where the team's routes need their namespace alone


def team_stacks(fleet: Fleet, plan: Plan, host: str | None, serving: set[str],
                clusters: Iterable[ClusterView]) -> dict[str, TeamStack]:
    """Every team stack with what it is composed from: a team on each cluster its replicas or caches use, and on
    the control plane (`host`) when it is `serving` there (`Routing.serving`). A team whose workloads go to a
    shared namespace has a stack only where its routes need their own namespace. `clusters`: the fleet's
    (`build_clusters`)."""
    chosen = tenancy.mode(fleet)
    used: dict[tuple[str, str], Counter[str]] = {}  # (team, cluster) -> devices per class
    for placed in plan.replicas:
        used.setdefault((placed.namespace, placed.cluster), Counter()).update(replica_devices(placed))
    policies = Policies.of(fleet)
    for cache in fleet.of("ModelCache"):
        for view in cache_targets(cache, clusters, policies.for_namespace(cache.namespace)):
            used.setdefault((cache.namespace, view.name), Counter())
    for team in serving if host is not None else ():
        used.setdefault((team, str(host)), Counter())
    out = {}
    for (team, cluster), devices in sorted(used.items()):
        namespace = tenancy.workload_namespace(team, chosen)
        owns = tenancy.owns_namespace(namespace)
        apart = cluster == host and team in serving and tenancy.owns_namespace(team) and namespace != team
        if owns or apart:
            out[team_stack(team, cluster)] = TeamStack(team, cluster, namespace, owns, tuple(sorted(devices.items())),
                                                       apart)
    return out


def model_inputs(fleet: Fleet, plan: Plan) -> dict[str, str]:
    """Per model stack, a digest of everything its objects are composed from: the deployment, its replicas'
    placements and backends, the namespace its workloads go to, and the fleet gateway's backend (Envoy's reaches
    replicas by Host) (`compose_replica` reads nothing else).
    Equal digests mean equal objects, so a stack whose digest did not change need not be composed again."""
    chosen = tenancy.mode(fleet)
    fleet_hosts = ["fleet-host"] if envoy_front_door(fleet) else []  # Envoy adds each replica's fleet Host route
    deployments = {(d.namespace, d.name): d for d in fleet.of("ModelDeployment")}
    replicas: dict[tuple[str, str], list[str]] = {}
    for placed in plan.replicas:
        engines = [(e.engine, e.pool, [(m.role, m.pods, m.devices, m.synthetic) for m in e.members])
                   for e in placed.placement.engines]  # not the score: it ranks clusters, composes nothing
        replicas.setdefault((placed.namespace, placed.deployment), []).append(
            repr((placed.name, placed.index, placed.cluster, engines, placed.backends)))
    out = {}
    for key, placed_here in replicas.items():
        md = deployments[key]
        text = "\n".join([fleet.text_of(md), tenancy.workload_namespace(md.namespace, chosen), *fleet_hosts,
                          *sorted(placed_here)])
        out[model_stack(*key)] = hashlib.sha256(text.encode()).hexdigest()
    return out


class StackInputs(NamedTuple):
    """Per model, team, service and endpoints stack, a digest of everything its objects are composed from
    (`model_inputs`, a team stack's `TeamStack`, `Routing.digests`): equal digests mean equal objects, so a stack
    whose digest did not change need not be composed again. `teams` and `routing`: what `render` composes those
    stacks from."""

    digests: dict[str, str]
    teams: dict[str, TeamStack]
    routing: Routing


def stack_inputs(fleet: Fleet, plan: Plan, host: str | None, gateways: Gateways | None = None) -> StackInputs:
    clusters = {c.name: c for c in build_clusters(fleet)}
    routes = routing_plan(fleet, plan, gateways, host, clusters)
    teams = team_stacks(fleet, plan, host, routes.serving, clusters.values())
    digests = model_inputs(fleet, plan)
    for stack, team in teams.items():
        digests[stack] = _digest(team)
    digests.update(routes.digests)
    return StackInputs(digests, teams, routes)


def object_keys(out: Rendered, stack: str) -> tuple[tuple[str, str, str, str, str], ...]:
    """The identity of each of a stack's objects, (target, API group, kind, namespace, name), in `objects()` order."""
    return keys_of(out.stacks.get(stack, {}))


def keys_of(targets: Mapping[str, list[dict]]) -> tuple[tuple[str, str, str, str, str], ...]:
    """`object_keys` of one stack's objects by target."""
    return tuple((target, obj["apiVersion"].split("/")[0], obj["kind"], obj["metadata"].get("namespace", ""),
                  obj["metadata"]["name"]) for target in sorted(targets) for obj in targets[target])


def collisions(fleet: Fleet, out: Rendered, reuse: Mapping[str, tuple] | None = None) -> list[Problem]:
    """Two stacks must never own the same object on the same target: refuse instead of fighting, and say why.
    `reuse`: the object keys (`object_keys`) of stacks whose objects `out` does not hold."""
    chosen = tenancy.mode(fleet)
    owners: dict[tuple, str] = {}
    problems = []
    for stack in sorted(out.stacks):
        for key in (reuse or {}).get(stack) or object_keys(out, stack):
            target, _, kind, namespace, name = key
            if key in owners and owners[key] != stack:
                problems.append(Problem(stack, 0, f"{kind}/{name}", "",
                                        f"on {target}, {owners[key]} already creates this object: "
                                        f"{_collision_cause(owners[key], stack, namespace, chosen)}"))
            owners.setdefault(key, stack)
    return problems


def _collision_cause(first: str, second: str, namespace: str, chosen: str) -> str:
    a, b = StackId.parse(first), StackId.parse(second)
    if a.kind == b.kind == StackKind.model and a.namespace != b.namespace and namespace == tenancy.SHARED_NAMESPACE:
        return (f"deployments {a.namespace}/{a.name} and {b.namespace}/{b.name} share the workload namespace "
                f"`default` ({tenancy.ANNOTATION}: {chosen} on the InferenceGateway) and compose same-named objects; "
                f"rename one, or remove the annotation so that each team gets its own namespace")
    return f"{first} and {second} compose the same object; rename one of the objects they come from"
