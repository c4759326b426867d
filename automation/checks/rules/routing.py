"""Traffic that arrives: routes attach to gateways able to serve their backends, Envoy Gateway references name
what exists, and APIServices reach pods that listen."""

from __future__ import annotations

from typing import Iterable

from automation.checks.graph import Graph, Node, Violation, violation
from fleet.team_policy import not_resident
from workloads.service_routing import FLEET_GATEWAY

# GatewayClass controllers that route HTTPRoutes to InferencePools natively.
NATIVE_INFERENCE_CONTROLLERS = {"networking.gke.io/gateway", "istio.io/gateway-controller", "kgateway.dev/kgateway"}
ENVOY_CONTROLLER = "gateway.envoyproxy.io/gatewayclass-controller"


def inference_routing(graph: Graph) -> Iterable[Violation]:
    """Every HTTPRoute attaches to a Gateway created on its cluster (else it is accepted and routes nothing), and one
    that sends traffic to an InferencePool lands on a Gateway whose controller can serve it."""
    by_key: dict[tuple[str | None, str, str | None, str | None], Node] = {
        (n.cluster, n.kind, n.namespace, n.name): n for n in graph.objects}
    for route in graph.objects:
        if route.kind != "HTTPRoute":
            continue
        spec = route.inputs.get("spec") or {}
        pools = [ref for rule in spec.get("rules") or [] for ref in rule.get("backendRefs") or []
                 if ref.get("kind") == "InferencePool"]
        for parent in spec.get("parentRefs") or []:
            key = (route.cluster, "Gateway", parent.get("namespace") or route.namespace, parent.get("name"))
            gateway = by_key.get(key)
            if gateway is None:
                # the fleet gateway's Gateway comes from the gateway stack, which an InferenceGateway asks for
                fix = (": add an InferenceGateway to the manifests (the fleet gateway's stack creates it)"
                       if (key[2], key[3]) == (FLEET_GATEWAY["namespace"], FLEET_GATEWAY["name"]) else "")
                yield violation(route, "inference-routing", f"its parent Gateway {key[2]}/{key[3]} is not created on "
                                                            f"{route.cluster}: the route would route nothing{fix}")
                continue
            if not pools:
                continue
            class_name = (gateway.inputs.get("spec") or {}).get("gatewayClassName")
            gateway_class = by_key.get((route.cluster, "GatewayClass", None, class_name))
            controller = ((gateway_class.inputs.get("spec") or {}).get("controllerName") if gateway_class else None)
            problem = _inference_controller_problem(graph, route.cluster, controller)
            if gateway_class is None:
                yield violation(route, "inference-routing", f"GatewayClass {class_name} of its Gateway is not created on "
                                                            f"{route.cluster}")
            elif problem:
                yield violation(route, "inference-routing", f"routes to an InferencePool through GatewayClass {class_name}, "
                                                            f"but {problem}")


ENVOY_GATEWAY_GROUP = "gateway.envoyproxy.io"
ENVOY_POLICIES = ("BackendTrafficPolicy", "ClientTrafficPolicy", "SecurityPolicy", "EnvoyExtensionPolicy")


def gateway_references(graph: Graph) -> Iterable[Violation]:
    """Envoy Gateway resolves an HTTPRoute's Backends and filters, and a policy's targets, by name in the object's
    own namespace on its cluster: one that names nothing there is accepted and does nothing (a route whose Backend
    is missing answers 500). A route to Backends needs an Envoy Gateway to serve it."""
    by_key: dict[tuple[str | None, str, str | None, str | None], Node] = {
        (n.cluster, n.kind, n.namespace, n.name): n for n in graph.objects}
    for node in graph.objects:
        spec = node.inputs.get("spec") or {}
        refs: list[tuple[str, str, str]] = []
        if node.kind == "HTTPRoute":
            for rule in spec.get("rules") or []:
                refs += [("Backend", ref.get("kind", ""), ref.get("name", "")) for ref in rule.get("backendRefs") or []
                         if ref.get("group") == ENVOY_GATEWAY_GROUP]
                refs += [("filter", f["extensionRef"].get("kind", ""), f["extensionRef"].get("name", ""))
                         for f in rule.get("filters") or [] if f.get("type") == "ExtensionRef"
                         and (f.get("extensionRef") or {}).get("group") == ENVOY_GATEWAY_GROUP]
        elif node.group == ENVOY_GATEWAY_GROUP and node.kind in ENVOY_POLICIES:
            refs += [("target", t.get("kind", ""), t.get("name", "")) for t in spec.get("targetRefs") or []]
        for role, kind, name in refs:
            if (node.cluster, kind, node.namespace, name) not in by_key:
                yield violation(node, "gateway-references", f"its {role} {kind} {node.namespace}/{name} is not created "
                                                            f"on {node.cluster}: Envoy Gateway would resolve nothing")
        if node.kind != "HTTPRoute" or not any(role == "Backend" for role, _, _ in refs):
            continue
        for parent in spec.get("parentRefs") or []:
            gateway = by_key.get((node.cluster, "Gateway", parent.get("namespace") or node.namespace, parent.get("name")))
            class_name = ((gateway.inputs.get("spec") or {}).get("gatewayClassName") if gateway else None)
            gateway_class = by_key.get((node.cluster, "GatewayClass", None, class_name))
            controller = (gateway_class.inputs.get("spec") or {}).get("controllerName") if gateway_class else None
            if gateway is not None and controller != ENVOY_CONTROLLER:
                yield violation(node, "gateway-references", f"routes to Envoy Gateway Backends through GatewayClass "
                                                            f"{class_name}, whose controller {controller} cannot")


FRONT_DOOR_ROUTES = ("HTTPRoute", "AIGatewayRoute")


def resident_routes(graph: Graph) -> Iterable[Violation]:
    """A route on the fleet gateway serves its namespace's team through the gateway's cluster: that cluster must be
    inside the team's TeamPolicy residency (fleet/team_policy.py decides; a cluster the check knows no labels of is
    outside, failing closed). workloads/render.py composes no such route; this holds whatever composed it."""
    if not graph.policies:
        return
    front_door = (FLEET_GATEWAY["namespace"], FLEET_GATEWAY["name"])
    for route in graph.objects:
        if route.kind not in FRONT_DOOR_ROUTES or route.namespace in (None, FLEET_GATEWAY["namespace"]):
            continue
        parents = (route.inputs.get("spec") or {}).get("parentRefs") or []
        if not any((p.get("namespace") or route.namespace, p.get("name")) == front_door for p in parents):
            continue
        policy = graph.policies.for_namespace(str(route.namespace))
        facts = graph.clusters.get(route.cluster or "")
        why = not_resident(policy, dict(facts.labels) if facts is not None else {})
        if why is not None:
            yield violation(route, "residency", f"serves team {route.namespace} through the fleet gateway on "
                                                f"{route.cluster}, which is {why}")


def _inference_controller_problem(graph: Graph, cluster: str | None, controller: str | None) -> str | None:
    if controller in NATIVE_INFERENCE_CONTROLLERS:
        return None
    if controller != ENVOY_CONTROLLER:
        return f"its controller {controller} cannot route to InferencePools"
    if graph.addons_provided(cluster):  # the platform team's Envoy Gateway and Envoy AI Gateway: docs/platform.md
        return None
    releases = {chart.key: r for r in graph.releases_on(cluster) if (chart := graph.chart(r)) is not None}
    if "ai-gateway" not in releases:
        return f"Envoy Gateway serves InferencePools only with the Envoy AI Gateway controller, not installed on {cluster}"
    envoy = releases.get("envoy-gateway")
    manager = ((((envoy.inputs.get("values") if envoy else None) or {}).get("config") or {})
               .get("envoyGateway") or {}).get("extensionManager") or {}
    resources = manager.get("backendResources") or []
    if not any(r.get("kind") == "InferencePool" and r.get("group") == "inference.networking.k8s.io" and r.get("version") == "v1"
               for r in resources):
        return "Envoy Gateway's extensionManager.backendResources does not list InferencePool (inference.networking.k8s.io/v1)"
    if not ((manager.get("service") or {}).get("fqdn") or {}).get("hostname", "").startswith("ai-gateway-controller."):
        return "Envoy Gateway's extensionManager.service does not point at the AI gateway controller"
    if "xdsTranslator" not in (manager.get("hooks") or {}):
        return "Envoy Gateway's extensionManager has no xdsTranslator hooks"
    return None


def _ports(container: dict) -> set:
    return {p.get(key) for p in container.get("ports") or [] for key in ("name", "containerPort") if p.get(key)}


def api_services(graph: Graph) -> Iterable[Violation]:
    """An APIService's Service exists on its cluster with the port it names, and that Service's target port is a
    port of the pods it selects (else the API server's proxy gets no answer and the whole group is unavailable);
    a ScaledObject scaling an aggregated kind (a ModelDeployment) finds its group's APIService on its cluster."""
    services = {(n.cluster, n.namespace, n.name): n for n in graph.objects if n.kind == "Service"}
    workloads = [n for n in graph.objects if n.kind in ("Deployment", "StatefulSet")]
    groups = {(n.cluster, (n.inputs.get("spec") or {}).get("group")) for n in graph.objects if n.kind == "APIService"}
    for node in graph.objects:
        if node.kind == "ScaledObject":
            target = (node.inputs.get("spec") or {}).get("scaleTargetRef") or {}
            group = str(target.get("apiVersion") or "").rpartition("/")[0]
            if group == "modelplane.ai" and (node.cluster, group) not in groups:  # served by the portal alone
                yield violation(node, "api-service", f"scales {target.get('kind')} of {group}, which no APIService "
                                                     f"serves on {node.cluster}")
        if node.kind != "APIService":
            continue
        ref = (node.inputs.get("spec") or {}).get("service") or {}
        key = (node.cluster, str(ref.get("namespace")), str(ref.get("name")))
        service = services.get(key)
        if service is None:
            yield violation(node, "api-service", f"its Service {ref.get('namespace')}/{ref.get('name')} is not created "
                                                 f"on {node.cluster}")
            continue
        spec = service.inputs.get("spec") or {}
        port = next((p for p in spec.get("ports") or [] if p.get("port") == ref.get("port", 443)), None)
        if port is None:
            yield violation(node, "api-service", f"its Service {key[1]}/{key[2]} has no port {ref.get('port', 443)}")
            continue
        selector = spec.get("selector") or {}
        target_port = port.get("targetPort", port.get("port"))
        pods = [w for w in workloads if w.cluster == service.cluster and w.namespace == service.namespace
                and selector and selector.items() <= (((w.inputs.get("spec") or {}).get("template") or {})
                                                      .get("metadata", {}).get("labels") or {}).items()]
        containers = [c for w in pods for c in (w.inputs["spec"]["template"].get("spec") or {}).get("containers") or []]
        if not any(target_port in _ports(c) for c in containers):
            yield violation(node, "api-service", f"its Service {key[1]}/{key[2]} sends port {port.get('port')} to "
                                                 f"{target_port!r}, which no pod it selects listens on")
