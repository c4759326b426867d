"""The deployability check: would a real API server and cloud accept every stack, the first time?

Mocked programs prove what is registered, not that it applies. This check reads what every
stack of a fleet registers (the offline preview) as one graph and enforces, once, the rules a
real first `up` enforces: who creates each object's namespace, CRD and storage class, on which
cluster, in which stack and order; that exactly one stack owns each object; that routes reach
gateways able to serve their backends; that cloud resources are pinned to their cluster's region.

The graph and what runs before what are automation/checks/graph.py; the rules, one module per idea, are
automation/checks/rules/. Each rule is a function from the graph to violations, listed in RULES with its id;
every violation names the stack, the resource and the rule.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Callable, Iterable, Mapping, TYPE_CHECKING

from automation.checks.graph import ClusterFacts, Graph, Violation
from automation.checks.offline_preview import StackPreview
from automation.checks.rules.charts import (compatible_versions, controller_prerequisites, served_versions,
                                            webhooks_ready)
from automation.checks.rules.clouds import pinned, pool_taints_tolerated
from automation.checks.rules.objects import (crds_installed, namespaces_exist, one_owner, programs_run,
                                             quota_before_release, stack_names, workloads_awaited)
from automation.checks.rules.routing import api_services, gateway_references, inference_routing, resident_routes
from automation.checks.rules.storage import storage
from fleet.stack_id import StackId, StackKind

if TYPE_CHECKING:
    from automation.planning.stacks import StackChange, StackSpec
    from fleet.validate import Fleet

__all__ = ["RULES", "ClusterFacts", "Findings", "Graph", "Violation", "by_cause", "check", "check_changes", "check_fleet",
           "undeployable"]

RULES: dict[str, Callable[[Graph], Iterable[Violation]]] = {
    "api-service": api_services,
    "pool-taints": pool_taints_tolerated,
    "webhook-ready": webhooks_ready,
    "served-version": served_versions,
    "compatible-versions": compatible_versions,
    "awaited": workloads_awaited,
    "controller-prerequisites": controller_prerequisites,
    "program": programs_run,
    "one-owner": one_owner,
    "namespace": namespaces_exist,
    "crd": crds_installed,
    "storage": storage,
    "inference-routing": inference_routing,
    "gateway-references": gateway_references,
    "residency": resident_routes,
    "pinned": pinned,
    "quota-before-release": quota_before_release,
    "stack-names": stack_names,
}


def check(graph: Graph, rules: Iterable[str] | None = None) -> list[Violation]:
    out: list[Violation] = []
    for rule in rules or RULES:
        out += RULES[rule](graph)
    return sorted(set(out), key=lambda v: (v.stack, v.resource, v.rule, v.message))


# ---- from a fleet ------------------------------------------------------------------------------------


def cluster_facts(fleet: Fleet, specs: Mapping[str, StackSpec] | None = None) -> dict[str, ClusterFacts]:
    """Each cluster's facts, read from the arguments its platform stack runs with (`PlatformPayload`) when `specs`
    hold them all: what the check sees is what the program is given. Else (no specs, or a platform stack known by
    its fingerprint alone) from the fleet, as planning makes those arguments."""
    from automation.planning.payloads import PlatformPayload
    from components.args import ClusterArgs, every_cluster_args

    platforms = [spec.payload for spec in (specs or {}).values() if spec.kind == StackKind.platform]
    given = [payload.cluster for payload in platforms if isinstance(payload, PlatformPayload)]
    args_of: Mapping[str, ClusterArgs] = {args.name: args for args in given} \
        if specs is not None and len(given) == len(platforms) else every_cluster_args(fleet)
    labels = {ic.name: dict(ic.metadata.labels or {}) for ic in fleet.of("InferenceCluster")}
    out = {}
    for name, args in args_of.items():
        provided = {args.cache_storage_class} if args.source == "Existing" and args.cache_storage_class else set()
        out[name] = ClusterFacts(args.source, args.region, frozenset(provided), args.verifies_addons,
                                 tuple(sorted(labels.get(name, {}).items())))
    return out


def stack_owners(fleet: Fleet) -> dict[str, set[str]]:
    """The stack each workload object's stack name maps to (a collision means two objects share a stack)."""
    from workloads.render import cache_stack, model_stack, service_stack

    owners: dict[str, set[str]] = {}
    for kind, name_of in (("ModelDeployment", model_stack), ("ModelService", service_stack), ("ModelCache", cache_stack)):
        for obj in fleet.of(kind):
            owners.setdefault(name_of(obj.namespace, obj.name), set()).add(f"{kind}/{obj.namespace}/{obj.name}")
    for ic in fleet.of("InferenceCluster"):
        owners.setdefault(str(StackId.platform(ic.name)), set()).add(f"InferenceCluster/{ic.name}")
    return owners


def check_fleet(fleet: Fleet, previews: list[StackPreview],
                specs: Mapping[str, StackSpec] | None = None) -> list[Violation]:
    """`specs`: the desired stacks the previews are of: the clusters' facts are read from them (`cluster_facts`).
    Which objects each stack stands for is read from the fleet: two objects that map to one stack name are one
    spec, so the specs cannot show a collision (`stack_owners`)."""
    from fleet.team_policy import Policies

    return check(Graph(previews, cluster_facts(fleet, specs), stack_owners(fleet), Policies.of(fleet)))


# ---- causes before consequences ------------------------------------------------------------------------


@dataclass
class Findings:
    """The check's violations, causes first. A stack whose program fails (rule `program`) registers nothing after
    the failure, so what runs after it on its cluster misses what it would have created (namespaces, CRDs, storage
    classes, gateways): those violations follow from it, and are kept under it (`causes`), not listed before it."""

    causes: list[tuple[Violation, list[Violation]]] = field(default_factory=list)  # a failed program, what follows
    others: list[Violation] = field(default_factory=list)

    def __len__(self) -> int:
        return len(self.others) + sum(1 + len(followers) for _, followers in self.causes)

    def ordered(self) -> list[tuple[Violation, str | None]]:
        """Every violation, each failed program followed by what follows from it, then the rest: (violation, the
        stack it follows from, or None)."""
        out: list[tuple[Violation, str | None]] = []
        for cause, followers in self.causes:
            out += [(cause, None)] + [(v, cause.stack) for v in followers]
        return out + [(v, None) for v in self.others]

    @property
    def followed(self) -> list[tuple[str, int]]:
        """(failed stack, how many violations follow from it), for each failed stack with any."""
        return [(cause.stack, len(followers)) for cause, followers in self.causes if followers]

    def summary(self) -> str:
        """`N deployability violation(s), K of them because STACK cannot run`."""
        because = "".join(f", {count} of them because {stack} cannot run" for stack, count in self.followed)
        return f"{len(self)} deployability violation(s){because}"

    def lines(self, every: bool = False, listed_by: str = "--verbose") -> list[str]:
        """One line per violation, each failed program first with a line counting what follows from it (`every`:
        listed under it instead; `listed_by`: the option that lists them)."""
        out: list[str] = []
        for cause, followers in self.causes:
            out.append(str(cause))
            if followers and every:
                out += [f"  - {v}" for v in followers]
            elif followers:
                out.append(f"  + {len(followers)} violation(s) that follow from it: what runs after {cause.stack} "
                           f"misses what it would create ({listed_by} lists them)")
        return out + [str(v) for v in self.others]


def by_cause(violations: Iterable[Violation], previews: list[StackPreview]) -> Findings:
    """Sort violations into causes and consequences. A violation follows from a failed stack when it is in that
    stack, or in one that runs after it (depends on it, at any depth) and, when the failed stack makes a cluster (a
    platform stack), is about a resource on that cluster."""
    violations = list(violations)
    direct = {s.name: set(s.depends_on) for s in previews}
    later: dict[str, set[str]] = {}

    def earlier(name: str) -> set[str]:  # every stack that runs before `name`
        if name not in later:
            later[name] = set()
            for dep in direct.get(name, ()):
                later[name] |= {dep} | earlier(dep)
        return later[name]

    clusters: dict[tuple[str, str], set[str | None]] = {}
    for stack in previews:
        for r in stack.resources:
            clusters.setdefault((stack.name, r.name), set()).add(r.cluster)
    made = {s.name: s.cluster for s in previews}
    failed = [v for v in violations if v.rule == "program"]
    found = Findings(causes=[(cause, []) for cause in failed])
    for v in violations:
        if v.rule == "program":
            continue
        for cause, followers in found.causes:
            cluster = made.get(cause.stack)
            if v.stack == cause.stack or (cause.stack in earlier(v.stack) and (
                    cluster is None or cluster in clusters.get((v.stack, v.resource), set()))):
                followers.append(v)
                break
        else:
            found.others.append(v)
    return found


def check_changes(fleet: Fleet, specs: dict[str, StackSpec], items: list[StackChange] | None = None,
                  config: dict[str, str] | None = None, jobs: int | None = None) -> Findings:
    """The deployability check: what a real API server or cloud would refuse, each failed program first with what
    follows from it (deployability.by_cause). Every road that applies runs it first (the CLI, the portal's worker).
    `items`: the changes about to run; the check then sees them and what they meet (`around`: their clusters' other
    stacks, their dependents, what all of those need), not the stacks that neither change nor meet a changed one
    (they apply as they did). Every stack when `items` is None or destroys one (a destroyed stack may be what an
    unchanged one needs). `jobs`: previewing processes (forked; 1 in a long-lived process with threads of its own,
    the portal's)."""
    from automation.checks.offline_preview import all_stacks, around
    from automation.planning.stacks import Change

    deletes = items is None or any(c.change == Change.delete for c in items)
    changed = None if deletes else {c.name for c in items or ()}
    only = None if changed is None else around(specs, changed)
    if only is not None and not only:
        return Findings()
    previews = all_stacks(fleet, specs=specs, only=only, config=config, jobs=jobs)
    return by_cause(check_fleet(fleet, previews, specs), previews)


def undeployable(fleet: Fleet, specs: dict[str, StackSpec], items: list[StackChange] | None = None,
                 config: dict[str, str] | None = None, jobs: int | None = None) -> list[str]:
    """`check_changes`, one line each, every failed program before what follows from it."""
    return [str(v) for v, _ in check_changes(fleet, specs, items, config, jobs).ordered()]
