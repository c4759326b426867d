"""`modelplane preview --offline`: every stack's real program under Pulumi's mocks.

The stacks are the ones `up` would run (the same desired state, the same inline programs and
stack config), so what this lists is what the automation layer would ask of the engine. Per
stack: the resources its program would register (type, name, parent, inputs with secrets
masked), the explicit provider each uses and, for Kubernetes resources, the cluster it lands
on. No CLI, no credentials, no cloud: what providers would compute is unknown, so this reviews
what the programs ask for, not what a cloud would answer. Secret config the programs need
(kubeconfigs of existing clusters, tokens) is replaced by a masked placeholder. The
deployability check (automation/checks/deployability.py) then reads the whole graph.
"""

from __future__ import annotations

import hashlib
import json
from collections import OrderedDict
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Callable, Mapping

from automation.checks.offline import Registered, run
from automation.execution.programs import program_for, stack_config
from automation.projects import project_of
from automation.planning.payloads import StackSpec
from automation.planning.plan_cache import KnownPlatform
from automation.planning.stacks import DesiredState, Host, desired_state, platform_inputs, platform_specs
from fleet.plan import dynamo_clusters
from workloads.render import CONTROL_PLANE

if TYPE_CHECKING:
    from fleet.validate import Fleet
    from workloads.gateways import Gateways

PLACEHOLDER = "offline preview: no kubeconfig is read"
K8S_PROVIDER = "pulumi:providers:kubernetes"


@dataclass
class StackPreview:
    name: str
    resources: list[Registered]
    error: str | None = None
    kind: str = ""
    depends_on: list[str] = field(default_factory=list)  # stacks that run before this one
    cluster: str | None = None  # platform stacks: the InferenceCluster they create

    def to_dict(self) -> dict:
        out = {"name": self.name, "resources": [r.to_dict() for r in self.resources]}
        if self.error:
            out["error"] = self.error
        return out


def _existing_kubeconfigs(fleet: Fleet) -> dict[str, str]:
    return {f"modelplane:{ic.existing_block.secretRef.name}": PLACEHOLDER
            for ic in fleet.of("InferenceCluster") if ic.spec.cluster.source == "Existing"}


def _workload_secrets(spec: StackSpec) -> dict[str, str]:
    from components.workload_objects import is_placeholder_secret, secret_config_key

    return {f"modelplane:{secret_config_key(o, k)}": PLACEHOLDER for objs in spec.objects.values()
            for o in objs if is_placeholder_secret(o) for k in o.get("stringData", {})}


FIRST_IN_GROUP = ("Namespace", "CustomResourceDefinition")  # a ConfigGroup creates these before its other objects


def expand(registered: list[Registered]) -> list[Registered]:
    """A ConfigGroup registers one child per object; under mocks it has none, so list its objects as it would.

    Each child waits for what the group waits for, and for the group's Namespaces and CRDs (the group
    orders those first).
    """
    out = []
    for r in registered:
        out.append(r)
        if r.type != "kubernetes:yaml/v2:ConfigGroup":
            continue
        children = []
        for obj in r.inputs.get("objs") or []:
            meta = obj.get("metadata", {})
            name = f"{meta.get('namespace')}/{meta['name']}" if meta.get("namespace") else meta["name"]
            type_ = f"kubernetes:{obj['apiVersion']}:{obj['kind']}"
            children.append(Registered(f"{r.urn}$${type_}::{name}", type_, name, r.name, True,
                                       {k: v for k, v in obj.items() if k not in ("apiVersion", "kind")},
                                       list(r.depends_on), provider=r.provider, dependency_urns=list(r.dependency_urns),
                                       parent_urn=r.urn))
        first = [c.urn for c in children if c.type.rsplit(":", 1)[-1] in FIRST_IN_GROUP]
        for child in children:
            if child.type.rsplit(":", 1)[-1] not in FIRST_IN_GROUP:
                child.dependency_urns += first
        out += children
    return out


def _without_schemas(obj: dict) -> dict:
    """A CRD as the deployability check reads it (group, names, versions served), without its schemas: they are
    most of a platform stack's registered bytes (about 0.5 MB each), and a fleet previews hundreds of them."""
    spec = obj.get("spec") or {}
    versions = [{k: v for k, v in version.items() if k != "schema"} for version in spec.get("versions") or []]
    return {**obj, "spec": {**spec, "versions": versions}}


def compact(resources: list[Registered]) -> list[Registered]:
    """Drop CRD schemas from what a preview keeps (a ConfigGroup's objects and its CRD children), so a whole fleet's
    previews fit in memory; nothing the check or the table reads is dropped."""
    for r in resources:
        if r.type == "kubernetes:yaml/v2:ConfigGroup" and r.inputs.get("objs"):
            r.inputs = {**r.inputs, "objs": [_without_schemas(o) if o.get("kind") == "CustomResourceDefinition" else o
                                             for o in r.inputs["objs"]]}
        elif r.type == "kubernetes:apiextensions.k8s.io/v1:CustomResourceDefinition":
            r.inputs = _without_schemas(r.inputs)
    return resources


def locate(resources: list[Registered]) -> list[Registered]:
    """Set `cluster` on every Kubernetes resource, from the `clusterIdentifier` of the provider it uses."""
    clusters = {r.name: r.inputs.get("clusterIdentifier") for r in resources if r.type == K8S_PROVIDER}
    for r in resources:
        if r.type.startswith("kubernetes:") and r.provider in clusters:
            r.cluster = clusters[r.provider]
    return resources


_RAN_HERE = [False]  # a Pulumi program ran in this process: forking it could inherit a half-held runtime


MEMO_SIZE = 4096  # previews: a long-lived process (the portal's worker) re-checks a fleet of this many stacks free
_MEMO: OrderedDict[str, StackPreview] = OrderedDict()


def forget() -> None:
    """Drop the kept previews (a test that changes how programs run, not what they are given)."""
    _MEMO.clear()


def _memo_key(spec: StackSpec, fleet, config: Mapping[str, str]) -> str | None:
    """Everything a stack's program reads: its spec (the fingerprint covers the payload and the release), its
    config and the secrets it is given from the fleet's store (hashed in memory, never kept or shown)."""
    from automation.execution.programs import stack_secrets, stored_kubeconfig

    if spec.payload is None:
        return None
    cluster = getattr(spec.payload, "cluster", None)
    stored = stored_kubeconfig(fleet, cluster.name) if cluster is not None else None
    read = [spec.kind, spec.name, spec.fingerprint, list(spec.depends_on), list(spec.targets), spec.placements,
            sorted(config.items()), stored, sorted(stack_secrets(spec, fleet).items())]
    return hashlib.sha256(json.dumps(read, default=str).encode()).hexdigest()


def preview_stack(spec: StackSpec, fleet, settings: Mapping[str, str] | None = None) -> StackPreview:
    """`settings`: the user's stack config (`--config`), as `up` gives it to the programs. A stack previewed
    before with the same inputs is not run again: its preview is the one kept (previews are read, never changed)."""
    config = {**stack_config(spec, settings), **_existing_kubeconfigs(fleet), **_workload_secrets(spec)}
    key = _memo_key(spec, fleet, config)
    if key is not None and key in _MEMO:
        _MEMO.move_to_end(key)
        return _MEMO[key]
    preview = _run_preview(spec, fleet, config)
    if key is not None and preview.error is None:
        _MEMO[key] = preview
        if len(_MEMO) > MEMO_SIZE:
            _MEMO.popitem(last=False)
    return preview


def _run_preview(spec: StackSpec, fleet, config: dict[str, str]) -> StackPreview:
    secret_keys = [k for k, v in config.items() if v == PLACEHOLDER]
    cluster = spec.id.cluster
    preview = StackPreview(spec.name, [], None, spec.kind, list(spec.depends_on), cluster)
    _RAN_HERE[0] = True
    try:
        registered = run(program_for(spec, fleet), project_of(spec.kind), spec.name, config, secret_keys)
        # in URN order: the engine registers concurrently, so the order of registration varies from run to run
        preview.resources = sorted((r for r in compact(locate(expand(registered)))
                                    if r.type != "pulumi:pulumi:StackReference"), key=lambda r: r.urn)
    except Exception as exc:  # one stack's failure is reported with it; the others still preview
        preview.error = f"{type(exc).__name__}: {exc}"
    return preview


PARALLEL_FROM = 32  # stacks: below this, forking costs more than it saves
_PREVIEWING: tuple[Fleet, list[StackSpec], Mapping[str, str] | None] | None = None  # what forked previewers inherit (never pickled)


def _preview_at(index: int) -> StackPreview:
    assert _PREVIEWING is not None
    fleet, specs, settings = _PREVIEWING
    return preview_stack(specs[index], fleet, settings)


def all_stacks(fleet: Fleet, control_plane: str | None = None, specs: Mapping[str, StackSpec] | None = None,
               on_stack: Callable[[], None] | None = None, jobs: int | None = None,
               only: set[str] | None = None, config: Mapping[str, str] | None = None) -> list[StackPreview]:
    """Every desired stack (`specs`, else planned here with no record) or those named in `only`, previewed in rank
    order; `on_stack` is called after each (a progress bar).

    Each stack's program runs under Pulumi's mocks, a quarter of a second for a platform stack, so a large fleet
    is previewed by `jobs` forked processes (default: one per CPU), each inheriting the fleet; the previews come
    back in order and are the same as one process makes (tested). Only a process that has not run a Pulumi
    program itself forks (the CLI's): a child of one could inherit its runtime mid-way and hang."""
    import multiprocessing
    import os
    from concurrent.futures import ProcessPoolExecutor

    global _PREVIEWING
    if specs is None:
        specs = desired_state(fleet, control_plane=control_plane).specs
    chosen = sorted((s for s in specs.values() if only is None or s.name in only), key=lambda s: (s.rank, s.name))
    jobs = min(jobs or os.cpu_count() or 1, 16)
    if (jobs > 1 and len(chosen) >= PARALLEL_FROM and not _RAN_HERE[0]
            and "fork" in multiprocessing.get_all_start_methods()):
        _PREVIEWING = (fleet, chosen, config)
        try:
            with ProcessPoolExecutor(jobs, mp_context=multiprocessing.get_context("fork")) as pool:
                previews = pool.map(_preview_at, range(len(chosen)), chunksize=4)
                return [_counted(preview, on_stack) for preview in previews]
        finally:
            _PREVIEWING = None
    return [_counted(preview_stack(spec, fleet, config), on_stack) for spec in chosen]


def around(specs: Mapping[str, StackSpec], changed: set[str]) -> set[str]:
    """What a check of `changed` stacks must see: they and every stack writing to a cluster they write to (one
    object with two owners on a cluster is refused; the control plane is its host cluster), every stack that
    depends on a changed one (what it provides may be what they need), and everything all of those depend on
    (what they need), transitively. A stack outside it neither changed nor meets a changed one: it applies as it
    did."""
    def clusters(spec: StackSpec) -> list[str]:
        return [t for t in (spec.host if t == CONTROL_PLANE else t for t in spec.targets) if t]

    dependents: dict[str, set[str]] = {}
    on_cluster: dict[str, set[str]] = {}
    for spec in specs.values():
        for dependency in spec.depends_on:
            dependents.setdefault(dependency, set()).add(spec.name)
        for cluster in clusters(spec):
            on_cluster.setdefault(cluster, set()).add(spec.name)
    seen = set()
    todo = [name for name in changed if name in specs]
    while todo:
        name = todo.pop()
        if name not in seen:
            seen.add(name)
            todo += dependents.get(name, ())
    seen |= {peer for name in changed if name in specs for cluster in clusters(specs[name]) for peer in on_cluster[cluster]}
    todo = list(seen)
    while todo:
        name = todo.pop()
        for dependency in specs[name].depends_on:
            if dependency not in seen and dependency in specs:
                seen.add(dependency)
                todo.append(dependency)
    return seen


def previewed(fleet: Fleet, head: DesiredState, changed: set[str], recorded, control_plane: str | Host | None,
              gateways: Gateways | None = None) -> tuple[DesiredState, set[str]]:
    """What a preview of a change runs: the stacks `around` the `changed` ones, and the head's desired state with
    those composed. `head`: as a comparison composed it (`side_by_side`): only the stacks whose inputs differ from
    the base's, and the platform and gateway stacks perhaps by fingerprint alone (from a kept summary); those are
    made afresh (which clusters a stack writes to is read from them), the workload stacks previewed composed, and
    the others kept as they were, known by their inputs alone (read only the specs of the stacks returned).
    Composing the whole head instead was most of the command's own time."""
    from automation.planning.plan_cache import PlanCache

    host = Host.of(fleet, control_plane)
    cluster = host.cluster
    dynamo = dynamo_clusters(head.plan, recorded)
    platform = KnownPlatform(platform_inputs(fleet, cluster, dynamo=dynamo), platform_specs(fleet, cluster, dynamo=dynamo))
    only = around({**head.specs, **platform.specs}, changed)
    known = {name: kept for name, kept in head.known().items() if name not in only}
    desired = desired_state(fleet, recorded, host, PlanCache(known=known, platform=platform, plan=head.plan,
                                                             inputs=head.inputs), gateways=gateways)
    return desired, only


def _counted(preview: StackPreview, on_stack: Callable[[], None] | None) -> StackPreview:
    if on_stack is not None:
        on_stack()
    return preview
