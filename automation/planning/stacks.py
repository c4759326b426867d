"""Stack planning, as a pure function: desired manifests + recorded state -> stacks with a change each.

One stack per unit of change:
  platform-<cluster>       the cluster, its GPU pools, serving stack and Gateway
  gateway                  the fleet's front door
  team-<ns>.<cluster>      a team's namespace, NetworkPolicy and device quota on one cluster it uses
  cache-<ns>.<name>        a ModelCache's volumes and hydration jobs
  model-<ns>.<deployment>  a ModelDeployment's replicas on every cluster they landed on
  endpoints-<ns>           the namespace's routable endpoints (one backend each, shared by services)
  service-<ns>.<name>      a ModelService's route

A stack's fingerprint is a hash of what it would register (its component arguments, or its
rendered Kubernetes objects per target). The change kind compares it with the fingerprint
recorded after the stack's last successful update: `create` (never applied), `update`
(different), `none` (same), `delete` (applied before, no longer desired). So editing one
deployment changes only its model stack; a replica added or moved also changes the services
that route to it; a new cluster changes its platform stack, the model stacks the scheduler
moves, and the caches that now stage to it.
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass, field, replace
from enum import StrEnum
from functools import cached_property
from typing import TYPE_CHECKING, Mapping

from automation.planning.payloads import (GatewayPayload, Named, PlatformPayload, StackSpec, WorkloadPayload,
                                          endpoints_fingerprint, fingerprint, from_manifests, object_secrets,
                                          with_sources)
from automation.planning.plan_cache import Known, KnownPlatform, PlanCache
from components.args import control_plane_cluster, every_cluster_args, gateway_args, host_extras, weight_streaming
from components.versions import pinned, project_version
from fleet.plan import PlacedReplica, Plan, dynamo_clusters
from fleet.policy_preview import POLICY_CAUSES
from fleet.scheduler import schedule
from fleet.secrets import SecretRef, kubeconfig_ref
from fleet.stack_id import ORDER, StackId, StackKind
from workloads.gateways import Gateways
from workloads.render import (Backends, Rendered, StackInputs, cache_stack, endpoints_stack, model_stack, object_keys,
                              platform_stack, render, service_stack, stack_inputs, team_stack)

if TYPE_CHECKING:
    from automation.planning.addons import Need
    from fleet.validate import Fleet

class Change(StrEnum):
    """What a run does to a stack: it was never applied, its fingerprint differs, it is no longer desired, or
    nothing. Members are their names' strings, so reports and JSON carry the plain word."""

    create = "create"
    update = "update"
    delete = "delete"
    none = "none"


@dataclass(frozen=True)
class StackChange(Named):
    id: StackId
    change: Change
    depends_on: tuple[str, ...] = ()

    def to_dict(self) -> dict[str, str]:
        return {"name": self.name, "change": str(self.change)}


def cluster_secrets(fleet: Fleet) -> dict[str, list[SecretRef]]:
    """The secrets each cluster's platform stack reads: an Existing cluster's kubeconfig."""
    return {ic.name: [ref] if (ref := kubeconfig_ref(ic)) is not None else [] for ic in fleet.of("InferenceCluster")}


def kind_of(stack: str) -> StackKind:
    return StackId.parse(stack).kind


@dataclass(frozen=True)
class Host:
    """The cluster that hosts the fleet gateway and the control plane's objects, decided once for a fleet
    (`Host.of`, components/args.py `control_plane_cluster`) and passed down: what is given one takes it as it is."""

    cluster: str | None

    @classmethod
    def of(cls, fleet: Fleet, chosen: str | Host | None = None) -> Host:
        """`chosen` when decided already, else decided now (the chosen cluster's name, or None: the fleet's own)."""
        return chosen if isinstance(chosen, Host) else cls(control_plane_cluster(fleet, chosen))


def platform_inputs(fleet: Fleet, host: str | None, versions: dict | None = None, client_cas: tuple[str, ...] = (),
                    dynamo: frozenset[str] = frozenset()) -> str:
    """A digest of everything `platform_specs` reads: every InferenceCluster, InferenceClass and InferenceGateway
    whole, whether any deployment streams weights (the one thing it reads of deployments), the clusters with
    Dynamo-served replicas (`dynamo_clusters`: the one thing it reads of the plan), the cluster that hosts the
    control plane, the chart versions, this release, which clusters' kubeconfigs a Secret manifest gives
    (`from_manifests`) and the recorded front door CAs. A deployment, service or cache changed without moving a
    Dynamo replica to or from a cluster: same digest."""
    kubeconfigs = from_manifests(fleet, [ref for refs in cluster_secrets(fleet).values() for ref in refs])
    digest = hashlib.sha256(json.dumps([host, pinned(versions), project_version(), weight_streaming(fleet),
                                        kubeconfigs, list(client_cas), sorted(dynamo)]).encode())
    for kind in ("InferenceCluster", "InferenceClass", "InferenceGateway"):
        for obj in fleet.of(kind):
            digest.update(fleet.text_of(obj).encode() + b"\0")
    return digest.hexdigest()


def platform_specs(fleet: Fleet, host: str | None, versions: dict | None = None,
                   client_cas: tuple[str, ...] = (), dynamo: frozenset[str] = frozenset()) -> dict[str, StackSpec]:
    """The platform stacks (one per cluster) and the gateway stack: what `modelplane up` and a laptop's
    `pulumi up --stack platform-<cluster>` (components/platform.py) both run, with the same fingerprint. `client_cas`:
    the front door's client CA as the record holds it (`Gateways.client_cas`), for an Envoy front door only.
    `dynamo`: the clusters whose replicas need the Dynamo platform (`dynamo_clusters` of the plan and the record)."""
    stacks: dict[str, StackSpec] = {}
    release = project_version()
    gateway = gateway_args(fleet, host)
    secrets = cluster_secrets(fleet)
    envoy = gateway is not None and gateway.backend == "Envoy"
    for name, args in every_cluster_args(fleet).items():
        if name in dynamo:
            args = args.model_copy(update={"dynamo": True})
        metallb, rate_limit, trust_manager = host_extras(gateway, name, host)
        platform = PlatformPayload(args, pinned(versions), release, metallb, rate_limit, envoy_front_door=envoy,
                                   trust_manager=trust_manager, client_cas=tuple(client_cas) if envoy else ())
        id = StackId.platform(name)
        digest = with_sources(fingerprint(platform.fingerprinted()), from_manifests(fleet, secrets.get(name, [])))
        stacks[str(id)] = StackSpec(id, digest, targets=[name], payload=platform)
    if gateway is not None:
        front = GatewayPayload(gateway, pinned(versions), host, release)
        # a v0.5 gateway's caller Secrets come from the fleet's secret store: where from is part of it
        digest = with_sources(fingerprint(front.fingerprinted()),
                              from_manifests(fleet, object_secrets({"gateway": gateway.front_door})))
        stacks["gateway"] = StackSpec(StackId.gateway(), digest,
                                      depends_on=[str(StackId.platform(host))] if host else [], targets=["control-plane"],
                                      payload=front)
    return stacks


def desired_stacks(fleet: Fleet, plan: Plan, rendered: Rendered, versions: dict | None = None,
                   control_plane: str | Host | None = None, known: Mapping[str, str] | None = None,
                   gateways: Gateways | None = None, platform: Mapping[str, StackSpec] | None = None,
                   dynamo: frozenset[str] | None = None) -> dict[str, StackSpec]:
    """`known`: fingerprints of rendered stacks whose objects were not composed (`render(reuse=...)`).
    `gateways`: the recorded gateway addresses (part of the endpoints stacks' fingerprints). `platform`: this
    fleet's platform and gateway stacks, when the caller has them (`KnownPlatform`). `dynamo`: the clusters that
    need the Dynamo platform (default: the plan's, `dynamo_clusters`)."""
    known = known or {}
    host = Host.of(fleet, control_plane).cluster
    # copies: linking sets each spec's dependencies, and the caller's specs stay as they were
    stacks = {name: replace(spec, depends_on=list(spec.depends_on)) for name, spec in platform.items()} \
        if platform is not None else platform_specs(fleet, host, versions, (gateways or Gateways()).client_cas,
                                                    dynamo if dynamo is not None else dynamo_clusters(plan))
    release = project_version()
    placed: dict[str, list[PlacedReplica]] = {}
    for r in plan.replicas:  # what to remember once the model stack applied (not part of its fingerprint)
        placed.setdefault(model_stack(r.namespace, r.deployment), []).append(r)
    for name, targets in rendered.stacks.items():
        order = sorted(targets)
        on_control_plane = "control-plane" in targets
        # only stacks on the control plane care which cluster hosts it
        payload = WorkloadPayload({t: targets[t] for t in order}, release, host if on_control_plane else None,
                                  tuple(placed.get(name, ())))
        # every target's platform stack runs first; the control plane's is the host's
        deps = [platform_stack(t) for t in order if t != "control-plane"]
        if host and on_control_plane:
            deps.append(platform_stack(host))
        id = StackId.parse(name)
        # a stack from `known` keeps its fingerprint: only model, team, service and endpoints stacks are, and they
        # read no secret; a composed one holds where its secrets come from
        digest = known.get(name) or (endpoints_fingerprint(payload, gateways or Gateways()) if id.kind == StackKind.endpoints
                                     else with_sources(fingerprint(payload.fingerprinted()),
                                                       from_manifests(fleet, object_secrets(payload.objects))))
        stacks[name] = StackSpec(id, digest, deps, order, payload)
    _link(fleet, plan, stacks, host, rendered.backends)
    return stacks


def _link(fleet: Fleet, plan: Plan, stacks: dict[str, StackSpec], host: str | None,
          backends: Mapping[str, Backends]) -> None:
    """Dependencies beyond targets: a team's namespace on a cluster before its objects there, models after their
    caches, a namespace's endpoints after the models they point at, services after the gateway and their endpoints."""
    for spec in stacks.values():
        if spec.kind in ("model", "cache", "endpoints", "service") and spec.id.namespace:
            clusters = [host if t == "control-plane" else t for t in spec.targets]
            spec.depends_on += [team_stack(spec.id.namespace, c) for c in clusters if c]
    for md in fleet.of("ModelDeployment"):
        model = stacks.get(model_stack(md.namespace, md.name))
        ref = md.spec.template.spec.modelCacheRef
        if model is not None and ref and cache_stack(md.namespace, ref.name) in stacks:
            model.depends_on.append(cache_stack(md.namespace, ref.name))
    served = {(r.namespace, r.name): model_stack(r.namespace, r.deployment) for r in plan.replicas}
    for name, owned in backends.items():  # read from what it owns, whether its objects were composed or not
        spec = stacks[name]
        if owned.scaled:  # KEDA scales a ModelDeployment through the gateway stack's APIService
            spec.depends_on.append("gateway")
        spec.depends_on += [serving for ep in owned.endpoints if (serving := served.get((ep.namespace, ep.name)))]
    for ms in fleet.of("ModelService"):
        service = stacks.get(service_stack(ms.namespace, ms.name))
        if service is not None:
            service.depends_on += ["gateway", endpoints_stack(ms.namespace)]
    for spec in stacks.values():
        spec.depends_on = sorted(d for d in set(spec.depends_on) if d in stacks)


def addon_needs(specs: Mapping[str, StackSpec]) -> dict[str, tuple[Need, ...]]:
    """What each Existing cluster whose platform team manages its add-ons must serve for these stacks
    (automation/planning/addons.py `Need`), from their payloads: the workload stacks' rendered objects, the platform
    stack's and, on the fleet gateway's host, the gateway stack's. {} for a fleet without such a cluster."""
    verify = [spec.payload.cluster.name for spec in specs.values()
              if isinstance(spec.payload, PlatformPayload) and spec.payload.cluster.verifies_addons]
    if not verify:
        return {}
    from automation.planning import addons

    placed: list[tuple[str, str, list[dict]]] = []
    watched: list[tuple[str, str, str, str]] = []
    for name, spec in specs.items():
        payload = spec.payload
        if isinstance(payload, PlatformPayload) and payload.cluster.name in verify:
            placed.append((payload.cluster.name, name, addons.platform_objects(payload.cluster, payload.client_cas)))
        elif isinstance(payload, GatewayPayload) and payload.host in verify:
            objects, kinds = addons.gateway_uses(payload.gateway)
            placed.append((str(payload.host), name, objects))
            watched += [(str(payload.host), name, group, kind) for group, kind in kinds]
        elif isinstance(payload, WorkloadPayload):
            for target, objects in payload.objects.items():
                cluster = payload.host if target == "control-plane" else target
                if cluster is not None:
                    placed.append((cluster, name, objects))
    return addons.needs(verify, placed, watched)


@dataclass
class DesiredState:
    """The plan, the objects every stack would create, and the stacks: one computation for every caller."""

    plan: Plan
    rendered: Rendered
    specs: dict[str, StackSpec]
    inputs: StackInputs | None = None  # of the model, team, service and endpoints stacks (when asked for)
    reused: dict[str, tuple] = field(default_factory=dict)  # stacks from `known` (not composed): their identities
    platform: KnownPlatform | None = None  # the platform and gateway stacks with their inputs (when asked for)
    manifests: list[str] = field(default_factory=list)  # the secrets the fleet's Secret manifests give (no value)

    def digests(self) -> dict[str, str]:
        """The digest of each stack's inputs, where known: the model, team, service and endpoints stacks' (`inputs`),
        and the platform and gateway stacks' (their one `platform_inputs`)."""
        out = dict(self.inputs.digests) if self.inputs is not None else {}
        if self.platform is not None:
            out.update(dict.fromkeys(self.platform.specs, self.platform.inputs))
        return out

    def known(self) -> dict[str, Known]:
        """Every stack with input digests (`inputs`) as a `PlanCache`'s `known` reuses it next time."""
        return {name: Known(digest, self.specs[name].fingerprint, self.reused.get(name) or object_keys(self.rendered, name))
                for name, digest in (self.inputs.digests if self.inputs is not None else {}).items()}

    @cached_property
    def needs(self) -> dict[str, tuple[Need, ...]]:
        """What each Existing cluster whose platform team manages its add-ons must serve (`addon_needs`): computed
        once, read by `up`'s check before anything is applied and by `plan`."""
        if self.reused:
            raise ValueError("the objects of reused stacks were not composed: what they need is not known")
        return addon_needs(self.specs)

    @cached_property
    def problems(self) -> list[str]:
        """Objects that could not be applied: collisions, and objects their cluster's schema rejects."""
        return self.problems_in(None)

    @cached_property
    def warnings(self) -> list[str]:
        """What the composition withheld and why (a route a TeamPolicy forbids): applied without it, said."""
        return [str(p) for p in self.rendered.problems if p.warning]

    def problems_in(self, stacks: set[str] | None) -> list[str]:
        """The same, schema-checking only the objects of `stacks` (None: every stack; none of them reused)."""
        if self.reused and (stacks is None or stacks & self.reused.keys()):
            raise ValueError("the objects of reused stacks were not composed: they cannot be checked")
        return rendered_problems(self.rendered, stacks)


def rendered_problems(rendered: Rendered, stacks: set[str] | None = None) -> list[str]:
    """Collisions, and objects (of `stacks`; None: all) that their cluster's schema rejects."""
    from workloads.schemas import check  # jsonschema and the CRDs: only for what checks objects (25 ms to import)

    out = [str(p) for p in rendered.problems if not p.warning]
    for stack, target, obj in rendered.objects():
        if stacks is None or stack in stacks:
            out += [f"{stack}/{target}: {obj['kind']}/{obj['metadata']['name']}: {m}" for m in check(obj)]
    return out


def desired_state(fleet: Fleet, recorded=(), control_plane: str | Host | None = None,
                  cache: PlanCache | None = None, *, gateways: Gateways | None = None,
                  explain: bool = False) -> DesiredState:
    """The plan of `fleet` with the record (`recorded` placements, `gateways` their addresses), and its stacks.
    `control_plane`: the cluster asked for (decided here), or the `Host` the caller decided. `cache`: what earlier
    plans computed (`PlanCache`): the same result as without it, only cheaper; the state's `inputs` and
    `platform` are filled when it knows stacks (`known`) or a platform."""
    host = Host.of(fleet, control_plane)
    memo = cache.memo if cache is not None else None
    known = cache.known if cache is not None else None
    given = cache.platform if cache is not None else None
    plan = cache.plan if cache is not None and cache.plan is not None else \
        schedule(fleet, list(recorded), explain=explain, memo=memo)
    inputs = cache.inputs if cache is not None else None
    if inputs is None and known is not None:
        inputs = stack_inputs(fleet, plan, host.cluster, gateways)
    digests = inputs.digests if inputs is not None else {}
    reused = {s: known[s].objects for s, digest in digests.items() if known and s in known and known[s].inputs == digest}
    rendered = render(fleet, plan, host.cluster, reused, gateways, inputs)
    fingerprints = {s: known[s].fingerprint for s in reused} if known else {}
    dynamo = dynamo_clusters(plan, recorded)
    platform_digest = platform_inputs(fleet, host.cluster, client_cas=(gateways or Gateways()).client_cas,
                                      dynamo=dynamo) if known is not None or given is not None else None
    same = given.specs if given is not None and given.inputs == platform_digest else None
    specs = desired_stacks(fleet, plan, rendered, control_plane=host, known=fingerprints, gateways=gateways,
                           platform=same, dynamo=dynamo)
    mine = None
    if platform_digest is not None:
        mine = given if same is not None else KnownPlatform(platform_digest, {
            name: spec for name, spec in specs.items() if spec.kind in (StackKind.platform, StackKind.gateway)})
    return DesiredState(plan, rendered, specs, inputs, reused, mine, fleet.secrets.manifest_refs())


def parked_stacks(fleet: Fleet, plan: Plan | None = None) -> frozenset[str]:
    """The model stacks of the input's ModelDeployments with `spec.replicas: 0`, and (given the plan) of those whose
    every replica a TeamPolicy removes (outside the team's residency, over its budget): never desired (they compose
    nothing), and destroyed once recorded without `--prune`, as the reference prunes a parked deployment's
    replicas (a deployment left out of the input keeps its stack: that input may be part of the fleet). A policy's
    removal is the policy's to enforce: kept, the replicas would run where the policy says they may not."""
    parked = {model_stack(md.namespace, md.name) for md in fleet.of("ModelDeployment") if md.spec.replicas == 0}
    if plan is not None:
        placed = {r.key for r in plan.replicas}
        removed = {d.deployment for d in plan.dropped if d.reason.cause in POLICY_CAUSES} | \
            {u.deployment for u in plan.unscheduled if any(r.cause in POLICY_CAUSES for r in u.reasons)}
        parked |= {model_stack(*key.split("/", 1)) for key in removed - placed}
    return frozenset(parked)


def changes(desired: dict[str, StackSpec], recorded: dict[str, str]) -> list[StackChange]:
    """Every stack with its change kind, in dependency order (deletes last, in reverse order)."""
    out = []
    for spec in sorted(desired.values(), key=lambda s: (s.rank, s.name)):
        before = recorded.get(spec.name)
        change = Change.create if before is None else Change.none if before == spec.fingerprint else Change.update
        out.append(StackChange(spec.id, change, tuple(spec.depends_on)))
    gone = [StackId.parse(name) for name in recorded if name not in desired]
    for id in sorted(gone, key=lambda i: (-i.rank, str(i))):
        out.append(StackChange(id, Change.delete))
    return out


def waves(items: list[StackChange]) -> list[list[StackChange]]:
    """Groups that can run in parallel: each stack after everything it depends on that also runs.

    Deletes run after all updates, dependents first (services before models before platforms).
    """
    active = [c for c in items if c.change in (Change.create, Change.update)]
    names = {c.name for c in active}
    done: set[str] = set()
    out: list[list[StackChange]] = []
    remaining = list(active)
    while remaining:
        ready = [c for c in remaining if all(d in done or d not in names for d in c.depends_on)]
        if not ready:  # a cycle cannot come from the planner; run what is left in rank order
            ready = sorted(remaining, key=lambda c: ORDER[c.kind])[:1]
        out.append(sorted(ready, key=lambda c: c.name))
        done |= {c.name for c in ready}
        remaining = [c for c in remaining if c.name not in done]
    deletes = [c for c in items if c.change == Change.delete]
    for rank in sorted({ORDER[c.kind] for c in deletes}, reverse=True):
        out.append(sorted((c for c in deletes if ORDER[c.kind] == rank), key=lambda c: c.name))
    return out
