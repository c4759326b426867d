"""What the pinned charts need of each other: CRDs their controllers wait on, webhooks that serve before what
they guard, served API versions, and chart versions built to run together."""

from __future__ import annotations

from typing import Iterable

from automation.checks.graph import Graph, Node, Violation, violation
from automation.checks.rules.objects import crd_installers
from automation.planning.addons import TRAEFIK_WATCHES
from components.versions import COMPATIBLE, Chart, minor
from fleet.semver import SemverError, parse_semver

# The CRDs a gateway controller's informers wait on before it serves anything (chart release name -> (group, kind)).
INFORMERS = {"traefik": list(TRAEFIK_WATCHES)}


def controller_prerequisites(graph: Graph) -> Iterable[Violation]:
    """A gateway controller's informers wait on CRDs: each is installed before its release on that cluster."""
    installers = crd_installers(graph)
    for release in graph.releases:
        chart = graph.chart(release)
        if graph.addons_provided(release.cluster):  # the CRDs are the platform team's, checked live before apply
            continue
        for group, kind in INFORMERS.get(chart.key, []) if chart else ():
            if not graph.exists_before(installers.get((release.cluster, group, kind), []), release):
                yield violation(release, "controller-prerequisites", f"its controller waits on {kind}.{group}, whose CRD "
                                                                    f"is not installed on {release.cluster} before it: "
                                                                    "it would never serve")


def _version(release: Node, chart: Chart) -> str:
    return str(release.inputs.get("version") or chart.version)


def _older(version: str, than: str) -> bool:
    try:
        return parse_semver(version, normalize=True) < parse_semver(than, normalize=True)
    except SemverError:
        return False  # not a version this check can order: nothing to say


def webhooks_ready(graph: Graph) -> Iterable[Violation]:
    """An object a chart's admission webhook guards is created after that release, which waits until the
    webhook serves: else the API server refuses it ("failed calling webhook ... connection refused")."""
    guarded: dict[tuple, list[tuple[Node, Chart]]] = {}
    for release in graph.releases:
        chart = graph.chart(release)
        for group, kind in chart.webhooks if chart else ():
            guarded.setdefault((release.cluster, group, kind), []).append((release, chart))  # type: ignore[arg-type]
    for node in graph.objects:
        for release, chart in guarded.get((node.cluster, node.group, node.kind), []):
            version = _version(release, chart)
            if not graph.before(release, node):
                yield violation(node, "webhook-ready", f"{chart.key}'s webhook validates {node.kind}, but the object "
                                                       f"is not created after its release on {node.cluster}: the API "
                                                       "server would refuse it while no webhook serves")
            elif str(release.inputs.get("skipAwait")).lower() == "true":
                yield violation(node, "webhook-ready", f"{chart.key}'s release does not wait for its pods "
                                                       "(skipAwait): its webhook may not serve yet")
            elif chart.webhook_ready_from and _older(version, chart.webhook_ready_from):
                yield violation(node, "webhook-ready", f"{chart.key} {version} reports ready before its webhook "
                                                       f"serves (fixed in {chart.webhook_ready_from}): pin "
                                                       f"{chart.key} >= {chart.webhook_ready_from}")


def served_versions(graph: Graph) -> Iterable[Violation]:
    """A custom resource's apiVersion is one its CRD serves: the CRD object registered on that cluster, or what
    the pinned chart that installs the kind serves (a version the API server does not serve is a 404)."""
    served: dict[tuple, set[str]] = {}
    for node in graph.objects:
        if node.kind == "CustomResourceDefinition":
            spec = node.inputs.get("spec") or {}
            names = spec.get("names") or {}
            versions = {f"{spec.get('group')}/{v.get('name')}" for v in spec.get("versions") or []
                        if v.get("served", True)}
            if versions and names.get("kind"):
                served.setdefault((node.cluster, spec.get("group"), names["kind"]), set()).update(versions)
    for release in graph.releases:
        chart = graph.chart(release)
        if chart and chart.serves and _version(release, chart) == chart.version:
            for group, kind in chart.crds:
                served.setdefault((release.cluster, group, kind), set()).update(
                    v for v in chart.serves if v.startswith(f"{group}/"))
    for node in graph.objects:
        serving = served.get((node.cluster, node.group, node.kind)) or set()
        api_version = node.resource.type.split(":")[1]
        if serving and api_version not in serving:
            yield violation(node, "served-version", f"{node.kind} {api_version} is not served on {node.cluster} "
                                                    f"(its CRD serves {', '.join(sorted(serving))})")


def compatible_versions(graph: Graph) -> Iterable[Violation]:
    """Charts that run on each other are a pair their projects build and test together (COMPATIBLE)."""
    for release in graph.releases:
        chart = graph.chart(release)
        wanted = COMPATIBLE.get((chart.key, minor(_version(release, chart)))) if chart else None
        if chart is None or wanted is None:
            continue
        base, base_minor = wanted
        for other in graph.releases_on(release.cluster):
            other_chart = graph.chart(other)
            if other_chart and other_chart.key == base and minor(_version(other, other_chart)) != base_minor:
                yield violation(release, "compatible-versions",
                                f"{chart.key} {_version(release, chart)} is built on {base} {base_minor}.x, not "
                                f"{_version(other, other_chart)}: pin {base} to {base_minor}.x")
