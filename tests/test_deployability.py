"""The deployability check: every rule, as table rows of a passing and a failing graph, then real fleets.

A graph is what the offline preview records (stacks, their order, resources with provider,
cluster, inputs and what they wait for). The rows build small graphs by hand, so that each
rule is shown to fail where a real API server or cloud would refuse, and to pass where it
would accept; the fleet tests run every stack's real program and expect zero violations.
"""

from __future__ import annotations

import copy
import pathlib

import pytest
import yaml

from automation.checks.deployability import RULES, ClusterFacts, Graph, check, check_fleet
from automation.checks.offline import Registered
from automation.checks.offline_preview import StackPreview, all_stacks
from components.serving_stack import envoy_gateway_values
from fleet.validate import load_fleet

ROOT = pathlib.Path(__file__).resolve().parent.parent


# ---- a small graph builder ------------------------------------------------------------------------------

def r(type_: str, name: str, inputs: dict | None = None, *, cluster: str | None = "c1", waits: tuple = (),
      provider: str | None = None, providers: dict | None = None) -> dict:
    """A resource spec; `waits` names resources of the same stack it depends on."""
    return {"type": type_, "name": name, "inputs": inputs or {}, "cluster": cluster, "waits": waits,
            "provider": provider if provider is not None else ("c1-k8s" if type_.startswith("kubernetes:") else None),
            "providers": providers or {}}


def obj(api: str, kind: str, name: str, namespace: str | None = None, **rest) -> tuple[str, dict]:
    meta = {"name": name, **({"namespace": namespace} if namespace else {})}
    return f"kubernetes:{api}:{kind}", {"metadata": meta, **rest}


def k(api: str, kind: str, name: str, namespace: str | None = None, waits: tuple = (), cluster: str = "c1", **rest) -> dict:
    type_, inputs = obj(api, kind, name, namespace, **rest)
    return r(type_, name if namespace is None else f"{namespace}/{name}", inputs, waits=waits, cluster=cluster)


def release(key: str, namespace: str, waits: tuple = (), create_namespace: bool = True, values: dict | None = None,
            cluster: str = "c1") -> dict:
    return r("kubernetes:helm.sh/v3:Release", f"rel-{key}",
             {"name": f"mp-{key}", "namespace": namespace, "createNamespace": create_namespace, "values": values or {}},
             waits=waits, cluster=cluster)


def crd(group: str, kind: str, plural: str, waits: tuple = ()) -> dict:
    return k("apiextensions.k8s.io/v1", "CustomResourceDefinition", f"{plural}.{group}",
             spec={"group": group, "names": {"kind": kind, "plural": plural}}, waits=waits)


def stack(name: str, resources: list[dict], depends_on: tuple = (), cluster: str | None = None,
          error: str | None = None) -> StackPreview:
    urns = {spec["name"]: f"urn:pulumi:{name}::p::{spec['type']}::{spec['name']}" for spec in resources}
    registered = [Registered(urns[s["name"]], s["type"], s["name"], None, True, copy.deepcopy(s["inputs"]),
                             list(s["waits"]), s["provider"], s["providers"], s["cluster"],
                             dependency_urns=[urns[w] for w in s["waits"]]) for s in resources]
    return StackPreview(name, registered, error, name.split("-", 1)[0], list(depends_on), cluster)


def graph(*stacks: StackPreview, clusters: dict | None = None, owners: dict | None = None) -> Graph:
    return Graph(list(stacks), clusters if clusters is not None else {"c1": ClusterFacts("EKS", "us-west-2")},
                 owners or {})


def namespace(name: str, waits: tuple = ()) -> dict:
    return k("core/v1", "Namespace", name, waits=waits)


# ---- the rows: (rule, passing graph, failing graph, fragment of the failing message) ------------------------

def _one_owner_pass():
    return graph(stack("platform-c1", [namespace("ml")]), stack("model-a", [k("apps/v1", "Deployment", "d", "ml")],
                                                               depends_on=("platform-c1",)))


def _one_owner_fail():
    return graph(stack("platform-c1", [namespace("ml")]), stack("gateway", [namespace("ml")], depends_on=("platform-c1",)))


def _one_owner_crd_twice():
    return graph(stack("platform-c1", [release("keda", "keda"), crd("keda.sh", "ScaledObject", "scaledobjects")]))


def _one_owner_other_cluster():
    other = k("core/v1", "Namespace", "ml", cluster="c2")
    return graph(stack("platform-c1", [namespace("ml")]), stack("platform-c2", [other]))


def _namespace_pass():
    return graph(stack("platform-c1", [namespace("team")]),
                 stack("model-a", [k("v1", "ConfigMap", "x", "team")], depends_on=("platform-c1",)))


def _namespace_not_earlier():
    return graph(stack("platform-c1", [namespace("team")]), stack("model-a", [k("v1", "ConfigMap", "x", "team")]))


def _namespace_same_stack_waits():
    return graph(stack("s", [namespace("team"), k("v1", "ConfigMap", "x", "team", waits=("team",))]))


def _namespace_same_stack_races():
    return graph(stack("s", [namespace("team"), k("v1", "ConfigMap", "x", "team")]))


def _namespace_release_creates():
    return graph(stack("s", [release("metallb", "metallb-system"),
                             k("metallb.io/v1beta1", "IPAddressPool", "p", "metallb-system", waits=("rel-metallb",)),
                             crd("metallb.io", "IPAddressPool", "ipaddresspools")]))


def _namespace_release_needs_one():
    return graph(stack("s", [release("nvidia-dra-driver", "dra", create_namespace=False)]))


def _crd_pass():
    return graph(stack("platform-c1", [crd("example.com", "Widget", "widgets")]),
                 stack("model-a", [k("example.com/v1", "Widget", "w", "default")], depends_on=("platform-c1",)))


def _crd_missing():
    return graph(stack("model-a", [k("example.com/v1", "Widget", "w", "default")]))


def _crd_chart_declared():
    return graph(stack("s", [release("keda", "keda"), k("keda.sh/v1alpha1", "ScaledObject", "so", "default",
                                                        waits=("rel-keda",))]))


def _crd_chart_skips_its_crds():
    return graph(stack("s", [release("envoy-gateway", "envoy-gateway-system"),
                             k("gateway.envoyproxy.io/v1alpha1", "EnvoyProxy", "p", "envoy-gateway-system",
                               waits=("rel-envoy-gateway",))]))


EFS = "efs.csi.aws.com"
EFS_ADDON = r("aws:eks/addon:Addon", "efs-addon", {"addonName": "aws-efs-csi-driver"}, cluster=None, provider="aws")
AWS = r("pulumi:providers:aws", "aws", {"region": "us-west-2"}, cluster=None, provider="")


def _rwx_class(provisioner: str = EFS, waits: tuple = ("efs-addon",)) -> dict:
    return k("storage.k8s.io/v1", "StorageClass", "rwx", provisioner=provisioner, waits=waits)


def _pvc(storage_class: str | None, mode: str = "ReadWriteMany") -> dict:
    spec = {"accessModes": [mode], "resources": {"requests": {"storage": "1Gi"}}}
    if storage_class is not None:
        spec["storageClassName"] = storage_class
    return k("core/v1", "PersistentVolumeClaim", "cache", "default", spec=spec)


def _storage(pvc: dict, sc: dict | None = None, platform: tuple = (AWS, EFS_ADDON)) -> Graph:
    resources = list(platform) + [sc or _rwx_class()]
    return graph(stack("platform-c1", resources, cluster="c1"), stack("cache-a", [pvc], depends_on=("platform-c1",)))


def _dynamo_on_eks(default_class: bool) -> Graph:
    annotations = {"storageclass.kubernetes.io/is-default-class": "true"} if default_class else {}
    ebs = r("aws:eks/addon:Addon", "ebs-addon", {"addonName": "aws-ebs-csi-driver"}, cluster=None, provider="aws")
    sc = k("storage.k8s.io/v1", "StorageClass", "gp3", provisioner="ebs.csi.aws.com", waits=("ebs-addon",),
           metadata={"name": "gp3", "annotations": annotations})
    return graph(stack("platform-c1", [AWS, ebs, sc, release("dynamo", "dynamo-system", waits=("gp3",))], cluster="c1"))


def _routing(ai_gateway: bool = True, values: dict | None = None, controller: str = "gateway.envoyproxy.io/gatewayclass-controller"):
    platform = [
        release("envoy-gateway", "envoy-gateway-system", values=envoy_gateway_values() if values is None else values),
        k("gateway.networking.k8s.io/v1", "GatewayClass", "envoy", spec={"controllerName": controller}),
        k("gateway.networking.k8s.io/v1", "Gateway", "inference-gateway", "modelplane-system",
          spec={"gatewayClassName": "envoy"}),
    ] + ([release("ai-gateway", "envoy-ai-gateway-system")] if ai_gateway else [])
    route = k("gateway.networking.k8s.io/v1", "HTTPRoute", "r", "default", spec={
        "parentRefs": [{"name": "inference-gateway", "namespace": "modelplane-system"}],
        "rules": [{"backendRefs": [{"group": "inference.networking.k8s.io", "kind": "InferencePool", "name": "pool"}]}]})
    return graph(stack("platform-c1", platform), stack("model-a", [route], depends_on=("platform-c1",)))


def _fleet_route(backend: str = "ep-a", filter_name: str = "host", target: str = "qwen",
                 controller: str = "gateway.envoyproxy.io/gatewayclass-controller"):
    """An Envoy fleet gateway's service: its route to a Backend through a filter, and a policy targeting the route."""
    platform = [k("gateway.networking.k8s.io/v1", "GatewayClass", "envoy", spec={"controllerName": controller}),
                k("gateway.networking.k8s.io/v1", "Gateway", "modelplane", "modelplane-system",
                  spec={"gatewayClassName": "envoy"})]
    endpoints = [k("gateway.envoyproxy.io/v1alpha1", "Backend", "ep-a", "ml")]
    service = [
        k("gateway.networking.k8s.io/v1", "HTTPRoute", "qwen", "ml", spec={
            "parentRefs": [{"name": "modelplane", "namespace": "modelplane-system"}],
            "rules": [{"filters": [{"type": "ExtensionRef", "extensionRef": {
                "group": "gateway.envoyproxy.io", "kind": "HTTPRouteFilter", "name": filter_name}}],
                "backendRefs": [{"group": "gateway.envoyproxy.io", "kind": "Backend", "name": backend}]}]}),
        k("gateway.envoyproxy.io/v1alpha1", "HTTPRouteFilter", "host", "ml"),
        k("gateway.envoyproxy.io/v1alpha1", "BackendTrafficPolicy", "qwen", "ml", spec={"targetRefs": [
            {"group": "gateway.networking.k8s.io", "kind": "HTTPRoute", "name": target}]})]
    return graph(stack("platform-c1", platform), stack("endpoints-ml", endpoints, depends_on=("platform-c1",)),
                 stack("service-ml.qwen", service, depends_on=("platform-c1", "endpoints-ml")))


def _pinned(region: str = "us-west-2", with_provider: bool = True, k8s_cluster: str | None = "c1"):
    vpc = r("aws:ec2/vpc:Vpc", "vpc", {}, cluster=None, provider="aws" if with_provider else "")
    workload = k("v1", "ConfigMap", "x", "default")
    workload["cluster"] = k8s_cluster
    return graph(stack("platform-c1", [r("pulumi:providers:aws", "aws", {"region": region}, cluster=None, provider=""),
                                       vpc, workload], cluster="c1"))


def _quota(release_waits: bool):
    quota = k("core/v1", "ResourceQuota", "allow-critical-pods", "dra", spec={"hard": {"pods": "10"}})
    return graph(stack("s", [namespace("dra"), quota,
                             release("nvidia-dra-driver", "dra", create_namespace=False,
                                     waits=("dra", "dra/allow-critical-pods") if release_waits else ("dra",))]))


def _aggregated(service_port: int = 443, target: str = "https", container_port: str = "https",
                api_service: bool = True) -> Graph:
    """The portal as an APIService: APIService -> Service port -> the Deployment's container port; a ScaledObject
    scaling a ModelDeployment through it."""
    labels = {"app": "portal"}
    portal = [
        namespace("portal"),
        k("apps/v1", "Deployment", "portal", "portal", waits=("portal",), spec={"selector": {"matchLabels": labels},
          "template": {"metadata": {"labels": labels}, "spec": {"containers": [
              {"name": "p", "ports": [{"name": container_port, "containerPort": 8443}]}]}}}),
        k("core/v1", "Service", "portal", "portal", waits=("portal",), spec={"selector": labels, "ports": [
            {"port": service_port, "targetPort": target}]}),
    ]
    if api_service:
        portal.append(k("apiregistration.k8s.io/v1", "APIService", "v1alpha1.modelplane.ai", spec={
            "group": "modelplane.ai", "version": "v1alpha1", "service": {"name": "portal", "namespace": "portal"}}))
    scaler = k("keda.sh/v1alpha1", "ScaledObject", "qwen", "ml", spec={"scaleTargetRef": {
        "apiVersion": "modelplane.ai/v1alpha1", "kind": "ModelDeployment", "name": "qwen"}})
    return graph(stack("gateway", portal), stack("endpoints-ml", [scaler]))


def _workload(annotations: dict, kind: str = "LeaderWorkerSet", api: str = "leaderworkerset.x-k8s.io/v1"):
    return graph(stack("model-ml.qwen", [k(api, kind, "qwen-0", "ml", metadata={"name": "qwen-0", "namespace": "ml",
                                                                                  "annotations": annotations})]))


def _traefik(kinds: tuple[str, ...]):
    names = {"GatewayClass": "gatewayclasses", "Gateway": "gateways", "HTTPRoute": "httproutes",
             "GRPCRoute": "grpcroutes", "TLSRoute": "tlsroutes", "ReferenceGrant": "referencegrants"}
    crds = [crd("gateway.networking.k8s.io", kind, names[kind]) for kind in kinds]
    return graph(stack("gateway", [*crds, release("traefik", "traefik", waits=tuple(c["name"] for c in crds))]))


def _with(spec: dict, **inputs) -> dict:
    return {**spec, "inputs": {**spec["inputs"], **inputs}}


def _aks_pool(spot: bool) -> dict:
    return r("azure-native:containerservice:AgentPool", "c1-a100",
             {"nodeTaints": ["nvidia.com/gpu=true:NoSchedule"], "nodeLabels": {"modelplane.ai/pool": "a100"},
              **({"scaleSetPriority": "Spot"} if spot else {})}, cluster=None)  # a cloud resource: its stack's cluster


GPU = {"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"}
SPOT = {"key": "kubernetes.azure.com/scalesetpriority", "operator": "Equal", "value": "spot", "effect": "NoSchedule"}


def _pool_pods(spot: bool, tolerations: list[dict]):
    pod = {"nodeSelector": {"modelplane.ai/pool": "a100"}, "tolerations": tolerations, "containers": [{"name": "e"}]}
    workload = k("leaderworkerset.x-k8s.io/v1", "LeaderWorkerSet", "qwen-0", "ml",
                 spec={"leaderWorkerTemplate": {"workerTemplate": {"spec": pod}}})
    return graph(stack("platform-c1", [_aks_pool(spot)], cluster="c1"),
                 stack("model-ml.qwen", [workload], depends_on=("platform-c1",)))


def _pool_daemon(tolerations: list[dict]):
    dra = release("nvidia-dra-driver", "dra", values={"kubeletPlugin": {"tolerations": tolerations}})
    return graph(stack("platform-c1", [_aks_pool(True), dra], cluster="c1"))


def _metallb(*, waits: bool = True, version: str = "0.14.9", skip_await: bool = False):
    installed = _with(release("metallb", "metallb-system"), version=version, skipAwait=skip_await)
    pool = k("metallb.io/v1beta1", "IPAddressPool", "modelplane", "metallb-system",
             waits=("rel-metallb",) if waits else ())
    return graph(stack("platform-c1", [installed, pool]))


def _served(api: str):
    return graph(stack("platform-c1", [release("lws", "lws-system")]),
                 stack("model-ml.qwen", [k(api, "LeaderWorkerSet", "qwen-0", "ml")], depends_on=("platform-c1",)))


def _dynamo_graph(api: str):
    """A graph on a cluster with the pinned Dynamo platform (1.2.1 serves nvidia.com v1alpha1 and v1beta1)."""
    return graph(stack("platform-c1", [release("dynamo", "dynamo-system")]),
                 stack("model-ml.qwen", [k(api, "DynamoGraphDeployment", "qwen-0", "ml")], depends_on=("platform-c1",)))


def _served_by_crd(api: str):
    definition = k("apiextensions.k8s.io/v1", "CustomResourceDefinition", "widgets.example.com",
                   spec={"group": "example.com", "names": {"kind": "Widget", "plural": "widgets"},
                         "versions": [{"name": "v1", "served": True}, {"name": "v1beta1", "served": False}]})
    return graph(stack("s", [definition, k(api, "Widget", "w", "ml", waits=("widgets.example.com",))]))


def _pair(envoy: str):
    return graph(stack("platform-c1", [_with(release("envoy-gateway", "envoy-gateway-system"), version=envoy),
                                       _with(release("ai-gateway", "envoy-ai-gateway-system"), version="v0.5.0")]))


def _resident_route(gateway_region: str | None = "us", namespace: str = "ml-team"):
    """ml-team's route on the fleet gateway of c1, whose region is `gateway_region` (None: no labels), under a
    TeamPolicy that keeps ml-team in region us: a render built by hand, as a foreign front door would compose it."""
    from fleet.api.policy import TeamPolicy
    from fleet.team_policy import Policies

    policy = TeamPolicy.model_validate({"apiVersion": "modelplane.ai/v1alpha1", "kind": "TeamPolicy",
                                        "metadata": {"name": "ml-team"}, "spec": {"residency": {"clusterSelector": {
                                            "matchLabels": {"region": "us"}}}}})
    route = k("gateway.networking.k8s.io/v1", "HTTPRoute", "qwen", namespace,
              spec={"parentRefs": [{"name": "modelplane", "namespace": "modelplane-system"}], "rules": []})
    labels = (("region", gateway_region),) if gateway_region else ()
    out = graph(stack("service-ml-team.qwen", [route]), clusters={"c1": ClusterFacts("EKS", "us-west-2", labels=labels)})
    out.policies = Policies([policy])
    return out


ALL_ROUTES = ("GatewayClass", "Gateway", "HTTPRoute", "GRPCRoute", "TLSRoute", "ReferenceGrant")
ROWS = [
    ("pool-taints", lambda: _pool_pods(True, [GPU, SPOT]), lambda: _pool_pods(True, [GPU]),
     "do not tolerate kubernetes.azure.com/scalesetpriority=spot:NoSchedule"),  # AKS taints spot pools itself
    ("pool-taints", lambda: _pool_pods(False, [GPU]), lambda: _pool_pods(False, []), "nvidia.com/gpu=true:NoSchedule"),
    ("pool-taints", lambda: _pool_daemon([GPU, SPOT]), lambda: _pool_daemon([GPU]), "devices would never be advertised"),
    ("webhook-ready", _metallb, lambda: _metallb(waits=False), "not created after its release"),
    ("webhook-ready", _metallb, lambda: _metallb(version="0.13.5"), "pin metallb >= 0.13.7"),
    ("webhook-ready", _metallb, lambda: _metallb(skip_await=True), "does not wait for its pods"),
    ("served-version", lambda: _served("leaderworkerset.x-k8s.io/v1"), lambda: _served("leaderworkerset.x-k8s.io/v1alpha1"),
     "LeaderWorkerSet leaderworkerset.x-k8s.io/v1alpha1 is not served on c1"),
    ("served-version", lambda: _dynamo_graph("nvidia.com/v1beta1"), lambda: _dynamo_graph("nvidia.com/v1beta2"),
     "DynamoGraphDeployment nvidia.com/v1beta2 is not served on c1 (its CRD serves nvidia.com/v1alpha1, nvidia.com/v1beta1)"),
    ("served-version", lambda: _served_by_crd("example.com/v1"), lambda: _served_by_crd("example.com/v1beta1"),
     "its CRD serves example.com/v1"),
    ("compatible-versions", lambda: _pair("v1.6.2"), lambda: _pair("v1.9.0"), "built on envoy-gateway 1.6.x"),
    ("awaited", lambda: _workload({"pulumi.com/waitFor": "condition=Available"}),
     lambda: _workload({"pulumi.com/timeoutSeconds": "3600"}), "Pulumi would not wait for LeaderWorkerSet qwen-0"),
    ("awaited", lambda: _workload({}, "Deployment", "apps/v1"),
     lambda: _workload({"pulumi.com/skipAwait": "true"}, "Deployment", "apps/v1"), "would not wait for Deployment"),
    ("controller-prerequisites", lambda: _traefik(ALL_ROUTES), lambda: _traefik(ALL_ROUTES[:4]),
     "waits on TLSRoute.gateway.networking.k8s.io"),
    ("one-owner", _one_owner_pass, _one_owner_fail, "also created by platform-c1/ml"),
    ("one-owner", _one_owner_other_cluster, _one_owner_crd_twice, "the CRD of ScaledObject.keda.sh on c1 is also created by"),
    ("namespace", _namespace_pass, _namespace_not_earlier, "namespace 'team' on c1 is not created"),
    ("namespace", _namespace_same_stack_waits, _namespace_same_stack_races, "namespace 'team' on c1 is not created"),
    ("namespace", _namespace_release_creates, _namespace_release_needs_one, "namespace 'dra' on c1"),
    ("crd", _crd_pass, _crd_missing, "no CRD for Widget.example.com is installed on c1"),
    ("crd", _crd_chart_declared, _crd_chart_skips_its_crds, "no CRD for EnvoyProxy.gateway.envoyproxy.io"),
    ("storage", lambda: _storage(_pvc("rwx")), lambda: _storage(_pvc("nope")), "StorageClass 'nope' is not created"),
    ("storage", lambda: _storage(_pvc("rwx")), lambda: _storage(_pvc("rwx"), _rwx_class("ebs.csi.aws.com", ())),
     "cannot share a volume"),
    ("storage", lambda: _storage(_pvc("rwx")), lambda: _storage(_pvc("rwx"), _rwx_class(EFS, ()), (AWS,)),
     "aws-efs-csi-driver is not installed on c1"),
    ("storage", lambda: _dynamo_on_eks(True), lambda: _dynamo_on_eks(False), "claims volumes, but c1 has no default"),
    ("inference-routing", _routing, lambda: _routing(ai_gateway=False), "only with the Envoy AI Gateway controller"),
    ("inference-routing", _routing, lambda: _routing(values={}), "backendResources does not list InferencePool"),
    ("inference-routing", lambda: _routing(controller="istio.io/gateway-controller"),
     lambda: _routing(controller="traefik.io/gateway-controller"), "cannot route to InferencePools"),
    ("gateway-references", _fleet_route, lambda: _fleet_route(backend="ep-b"), "its Backend Backend ml/ep-b is not created"),
    ("gateway-references", _fleet_route, lambda: _fleet_route(filter_name="hst"), "its filter HTTPRouteFilter ml/hst"),
    ("gateway-references", _fleet_route, lambda: _fleet_route(target="qwn"), "its target HTTPRoute ml/qwn is not created"),
    ("gateway-references", _fleet_route, lambda: _fleet_route(controller="traefik.io/gateway-controller"),
     "whose controller traefik.io/gateway-controller cannot"),
    ("residency", _resident_route, lambda: _resident_route("eu"),
     "serves team ml-team through the fleet gateway on c1, which is outside TeamPolicy ml-team "
     "spec.residency.clusterSelector (region=eu"),
    ("residency", lambda: _resident_route("eu", namespace="search"), lambda: _resident_route(None),
     "outside TeamPolicy ml-team spec.residency.clusterSelector (no region"),
    ("pinned", _pinned, lambda: _pinned(with_provider=False), "uses no explicit cloud provider"),
    ("pinned", _pinned, lambda: _pinned(region="eu-west-1"), "is for region eu-west-1, not the cluster's us-west-2"),
    ("pinned", _pinned, lambda: _pinned(k8s_cluster=None), "uses no explicit Kubernetes provider"),
    ("quota-before-release", lambda: _quota(True), lambda: _quota(False), "is not created before this release"),
    ("stack-names", lambda: graph(owners={"model-ml-team.qwen": {"ModelDeployment/ml-team/qwen"}}),
     lambda: graph(owners={"model-ml-team.qwen": {"ModelDeployment/ml-team/qwen", "ModelDeployment/ml/team-qwen"}}),
     "one stack name for 2 objects"),
    ("stack-names", lambda: graph(owners={"model-ml-team.qwen": {"ModelDeployment/ml-team/qwen"}}),
     lambda: graph(owners={"model-ml-team." + "q" * 90: {"ModelDeployment/ml-team/" + "q" * 90}}),
     "Pulumi accepts at most 100"),
    ("program", lambda: graph(stack("s", [])), lambda: graph(stack("s", [], error="RunError: boom")), "boom"),
    ("api-service", _aggregated, lambda: _aggregated(service_port=8443), "has no port 443"),
    ("api-service", _aggregated, lambda: _aggregated(target="http"), "sends port 443 to 'http', which no pod"),
    ("api-service", _aggregated, lambda: _aggregated(container_port="web"), "which no pod it selects listens on"),
    ("api-service", _aggregated, lambda: _aggregated(api_service=False),
     "scales ModelDeployment of modelplane.ai, which no APIService serves on c1"),
]


@pytest.mark.parametrize("rule,passing,failing,fragment", ROWS, ids=[f"{row[0]}-{i}" for i, row in enumerate(ROWS)])
def test_rule(rule, passing, failing, fragment):
    assert check(passing(), [rule]) == []
    found = check(failing(), [rule])
    assert found and all(v.rule == rule for v in found)
    assert any(fragment in str(v) for v in found), [str(v) for v in found]


def test_every_rule_has_rows():
    assert {row[0] for row in ROWS} == set(RULES)


def test_a_violation_names_stack_resource_and_rule():
    violation = check(_namespace_not_earlier())[0]
    assert str(violation).startswith("model-a: team/x: namespace: ")
    assert (violation.stack, violation.resource, violation.rule) == ("model-a", "team/x", "namespace")


def _on(cluster: str, *, spot: bool, envoy: str, quota_waited: bool) -> StackPreview:
    """One cluster's platform stack: a GPU pool (spot or not) with a DRA driver tolerating only the GPU taint, Envoy
    Gateway at `envoy` beside AI Gateway 0.5, and a ResourceQuota the driver's release waits for or not."""
    pool = _aks_pool(spot)
    pool["name"] = f"{cluster}-a100"
    quota = k("core/v1", "ResourceQuota", "allow-critical-pods", "dra", spec={"hard": {"pods": "10"}}, cluster=cluster)
    dra = release("nvidia-dra-driver", "dra", create_namespace=False, cluster=cluster,
                  values={"kubeletPlugin": {"tolerations": [GPU]}},
                  waits=("dra/allow-critical-pods",) if quota_waited else ())
    return stack(f"platform-{cluster}", [pool, quota, dra,
                                         _with(release("envoy-gateway", "envoy-gateway-system", cluster=cluster),
                                               version=envoy),
                                         _with(release("ai-gateway", "envoy-ai-gateway-system", cluster=cluster),
                                               version="v0.5.0")], cluster=cluster)


def test_the_rules_of_one_cluster_read_only_its_own_pools_releases_and_quotas():
    """The check indexes releases, pools and quotas by cluster (a fleet has thousands): a cluster that breaks
    three rules, beside one that keeps them, gives each violation once, on its own stack, and none on the other."""
    facts = {"c1": ClusterFacts("AKS", "westeurope"), "c2": ClusterFacts("AKS", "westeurope")}
    broken = _on("c1", spot=True, envoy="v1.9.0", quota_waited=False)
    kept = _on("c2", spot=False, envoy="v1.6.2", quota_waited=True)
    rules = ["pool-taints", "compatible-versions", "quota-before-release"]
    found = [(v.stack, v.rule) for v in check(graph(broken, kept, clusters=facts), rules)]
    assert found == [("platform-c1", "compatible-versions"), ("platform-c1", "pool-taints"),
                     ("platform-c1", "quota-before-release")]
    assert check(graph(kept, clusters=facts), rules) == []
    both_kept = check(graph(kept, _on("c3", spot=False, envoy="v1.6.2", quota_waited=True), clusters=facts), rules)
    assert both_kept == []


# ---- real fleets: every stack's real program ------------------------------------------------------------

def _violations(paths: list[str], control_plane: str | None = None) -> list[str]:
    loaded = load_fleet(paths)
    assert not loaded.errors, loaded.errors
    return [str(v) for v in check_fleet(loaded.fleet, all_stacks(loaded.fleet, control_plane))]


@pytest.mark.parametrize("path", ["examples", "stacks/fleets/aws-prod", "stacks/fleets/gcp-dev", "stacks/fleets/existing",
                                  "tests/data/reference/kimi-k2.yaml"])
def test_example_fleets_are_deployable(path):
    assert _violations([str(ROOT / path)]) == []


def _generated_fleet(tmp_path: pathlib.Path, gateway: str, host_source: str) -> pathlib.Path:
    """Every source this project provisions, every backend (native, llm-d, Dynamo, prefill/decode), a cache, an
    external https endpoint, and the gateway variant asked for, hosted on a cluster of `host_source`."""
    from tests.manifests import cache, cluster, deployment, endpoint, gpu_class, member, service

    docs = [gpu_class("l4-gke", provider="GKE"), gpu_class("l4-eks", provider="EKS"), gpu_class("l4")]
    names = {"GKE": "a-gke", "EKS": "b-eks", "Existing": "c-onprem"}
    for source, name in names.items():
        ic = cluster(name, pools=(("gpu", {"GKE": "l4-gke", "EKS": "l4-eks", "Existing": "l4"}[source], 2),), source=source,
                     labels={"tier": "gpu"})
        if source == "GKE":
            ic["spec"]["cluster"]["gke"]["project"] = "generated-project"
            ic["spec"]["nodePools"][0].update({"zones": ["us-central1-a", "us-central1-b"]})
        if source == "EKS":
            ic["spec"]["nodePools"][0].update({"maxNodeCount": 4})
        docs.append(ic)
    dynamo_image = "nvcr.io/nvidia/ai-dynamo/vllm-runtime:0.6.1"
    external = endpoint()
    external["metadata"]["labels"] = {"modelplane.ai/deployment": "ext"}
    docs += [
        deployment("native", replicas=3),
        deployment("gang", engines=[{"name": "vllm", "members": [member("Leader"), member("Worker", nodes=1)]}],
                   modelCacheRef={"name": "weights"}),
        deployment("graph", engines=[{"name": "vllm", "capabilities": ["KVOffload"],
                                      "members": [member("Leader", image=dynamo_image),
                                                  member("Worker", nodes=1, image=dynamo_image)]}],
                   modelCacheRef={"name": "weights"}),
        deployment("pd", serving={"mode": "PrefillDecode"},
                   engines=[{"name": "prefill", "phase": "Prefill", "members": [member()]},
                            {"name": "decode", "phase": "Decode", "members": [member()]}]),
        cache(selector={"tier": "gpu"}), external, service("ext", deployment_name="ext"), service("native", deployment_name="native"),
        service("gang", deployment_name="gang"), service("other-team", namespace="research", deployment_name="x"),
    ]
    if gateway != "none":
        gw = {"apiVersion": "modelplane.ai/v1alpha1", "kind": "InferenceGateway", "metadata": {"name": "default"},
              "spec": {"backend": "Traefik", "traefik": {"version": "40.2.0"}}}
        if gateway == "metallb":
            gw["spec"]["traefik"].update({"loadBalancer": "MetalLB", "metallb": {"addressPool": "192.0.2.10-192.0.2.20"}})
        docs.append(gw)
    path = tmp_path / f"fleet-{gateway}-{host_source}.yaml"
    path.write_text(yaml.safe_dump_all(docs, sort_keys=False))
    return path


@pytest.mark.parametrize("gateway,host", [("traefik", "GKE"), ("traefik", "EKS"), ("metallb", "Existing"),
                                          ("traefik", "Existing")])
def test_generated_fleets_are_deployable(tmp_path, gateway, host):
    path = _generated_fleet(tmp_path, gateway, host)
    host_name = {"GKE": "a-gke", "EKS": "b-eks", "Existing": "c-onprem"}[host]
    loaded = load_fleet([str(path)])
    assert not loaded.errors, [str(p) for p in loaded.errors]
    previews = all_stacks(loaded.fleet, host_name)
    kinds = {p.kind for p in previews}
    assert kinds == {"platform", "gateway", "team", "cache", "model", "endpoints", "service"}
    resources = [r for p in previews for r in p.resources]
    types = {r.type for r in resources}
    assert {"kubernetes:nvidia.com/v1beta1:DynamoGraphDeployment", "kubernetes:leaderworkerset.x-k8s.io/v1:LeaderWorkerSet",
            "kubernetes:apps/v1:Deployment", "kubernetes:gateway.networking.k8s.io/v1:BackendTLSPolicy"} <= types
    # the pinned Dynamo platform (1.2.1) serves the v1beta1 graphs (0.6.1 served v1alpha1 only: a 404 on `up`)
    assert [str(v) for v in check_fleet(loaded.fleet, previews)] == []
    gateway_stack = next(p for p in previews if p.name == "gateway")
    assert {r.cluster for r in gateway_stack.resources if r.type.startswith("kubernetes:") and r.custom} == {host_name}


def test_generated_fleet_without_a_gateway_has_services_that_would_route_nothing(tmp_path):
    """ModelService routes attach to the fleet gateway's Gateway: without an InferenceGateway, say so."""
    violations = _violations([str(_generated_fleet(tmp_path, "none", "GKE"))])
    assert violations and all(": inference-routing: " in v and "modelplane-system/modelplane is not created" in v
                              and v.startswith("service-") and v.endswith("add an InferenceGateway to the manifests "
                                                                          "(the fleet gateway's stack creates it)")
                              for v in violations), violations


def test_a_cluster_without_its_cloud_project_fails_the_check_naming_what_to_do():
    violations = _violations([str(ROOT / "tests" / "data" / "reference" / "concepts.yaml")])
    programs = [v for v in violations if ": program: " in v]
    assert {v.split(":")[0] for v in programs} == {"platform-gke-us-central"}
    assert all("gke.project" in v for v in programs)
    # AKS, Nebius and Vultr are provisioned: their stacks pass every rule
    assert not [v for v in violations if v.startswith(("platform-aks-westeurope", "platform-nebius-eu-north",
                                                       "platform-vultr-ewr"))]


@pytest.mark.parametrize("stack_name", ["gcp-dev", "aws-prod", "existing"])
def test_the_laptop_stacks_are_deployable(stack_name):
    """`pulumi up` from a laptop runs the whole fleet as one stack: the same rules hold inside it."""
    from automation.checks.offline import run
    from automation.checks.offline_preview import expand, locate
    from components.platform import main

    config = yaml.safe_load((ROOT / "stacks" / f"Pulumi.{stack_name}.yaml").read_text())["config"]
    config = {k: v if isinstance(v, (dict, list)) else str(v) for k, v in config.items()}
    secrets = {"modelplane:onprem-kubeconfig": "apiVersion: v1\nkind: Config\n"} if stack_name == "existing" else {}
    resources = run(main, "modelplane", stack_name, {**config, **secrets}, list(secrets), root_directory=str(ROOT))
    fleet = load_fleet([str(ROOT / config["modelplane:fleet"])]).fleet
    cluster = next(c.name for c in fleet.of("InferenceCluster"))
    preview = StackPreview(stack_name, locate(expand(resources)), None, "platform", [], cluster)
    assert {r.type for r in preview.resources} >= {"kubernetes:helm.sh/v3:Release", "kubernetes:gateway.networking.k8s.io/v1:Gateway"}
    assert [str(v) for v in check_fleet(fleet, [preview])] == []


def test_a_claim_without_a_class_uses_the_default_one():
    eks = _storage(_pvc(None, "ReadWriteOnce"), _rwx_class())
    assert [v.message for v in check(eks, ["storage"])] == ["the claim names no StorageClass and c1 has no default one"]
    gke = _storage(_pvc(None, "ReadWriteOnce"))
    assert check(Graph(gke.stacks, {"c1": ClusterFacts("GKE", "us-central1")}), ["storage"]) == []  # standard-rwo
    assert check(Graph(gke.stacks, {"c1": ClusterFacts("Existing")}), ["storage"]) == []  # the admin's default


def test_previews_keep_what_the_check_reads_of_crds_but_not_their_schemas():
    """A fleet previews hundreds of platform stacks, each registering its CRDs (about 0.5 MB each): kept whole,
    500 clusters needed 3.9 GB. The check reads a CRD's group, names and versions; the schemas are dropped."""
    fleet = load_fleet([str(ROOT / "examples")]).fleet
    previews = all_stacks(fleet)
    crds = [res for p in previews for res in p.resources
            if res.type == "kubernetes:apiextensions.k8s.io/v1:CustomResourceDefinition"]
    assert crds and all(res.inputs["spec"]["group"] and res.inputs["spec"]["names"]["kind"] for res in crds)
    assert all(v.get("name") and "schema" not in v for res in crds for v in res.inputs["spec"]["versions"])
    groups = [res for p in previews for res in p.resources if res.type == "kubernetes:yaml/v2:ConfigGroup"]
    assert all("schema" not in v for g in groups for o in g.inputs.get("objs") or []
               if o.get("kind") == "CustomResourceDefinition" for v in o["spec"]["versions"])
    assert check_fleet(fleet, previews) == []


def test_previews_made_by_several_processes_are_the_ones_one_process_makes(tmp_path):
    """`preview --offline` previews a large fleet in forked processes; the JSON is the same byte for byte as one
    process makes, and the same from run to run (resources in URN order, keys sorted)."""
    import subprocess
    import sys

    from benchmarks.plan_bench import generate

    fleet = tmp_path / "fleet.yaml"
    fleet.write_text(yaml.safe_dump_all(generate(6, 14), sort_keys=False))  # 14 clusters: about 40 stacks
    cli = [sys.executable, "-m", "automation.cli", "preview", "--offline", "-f", str(fleet), "-o", "json"]
    one = subprocess.run([*cli, "--jobs", "1"], cwd=ROOT, capture_output=True, text=True, timeout=600)
    two = subprocess.run([*cli, "--jobs", "2"], cwd=ROOT, capture_output=True, text=True, timeout=600)
    assert one.returncode == two.returncode == 0, one.stderr[-2000:] + two.stderr[-2000:]
    stacks = yaml.safe_load(one.stdout)["stacks"]
    assert len(stacks) >= 32  # enough to be previewed by several processes
    assert two.stdout == one.stdout


def test_a_model_on_an_aks_spot_pool_tolerates_the_taint_aks_puts_there(tmp_path):
    """AKS taints every spot pool `kubernetes.azure.com/scalesetpriority=spot:NoSchedule` and will not remove it:
    the rendered pods and the node daemons the pool needs tolerate it, through the real programs."""
    from tests.manifests import cluster, deployment, gpu_class

    icl = gpu_class("a100", count=1)
    icl["spec"]["provisioning"] = {"provider": "AKS", "aks": {"vmSize": "Standard_NC24ads_A100_v4"}}
    ic = cluster("c1", pools=(("a100", "a100", 1),))
    ic["spec"]["cluster"] = {"source": "AKS", "aks": {"location": "eastus"}}
    ic["spec"]["nodePools"][0]["spot"] = True
    path = tmp_path / "fleet.yaml"
    path.write_text(yaml.safe_dump_all([icl, ic, deployment("qwen")]))
    loaded = load_fleet([str(path)])
    assert not loaded.errors, [str(e) for e in loaded.errors]
    previews = all_stacks(loaded.fleet)
    assert any(p.name == "model-ml-team.qwen" and p.resources for p in previews)
    assert [str(v) for v in check_fleet(loaded.fleet, previews) if v.rule == "pool-taints"] == []
    # and the rule sees the pool: the same fleet's pods without the spot toleration are refused
    from workloads import pods

    untolerant = (pods.GPU_TOLERATION,)
    original, pods.GPU_NODE_TOLERATIONS = pods.GPU_NODE_TOLERATIONS, untolerant
    try:
        found = [str(v) for v in check_fleet(loaded.fleet, all_stacks(loaded.fleet)) if v.rule == "pool-taints"]
    finally:
        pods.GPU_NODE_TOLERATIONS = original
    assert any("scalesetpriority=spot:NoSchedule" in v for v in found), found


def test_a_stack_previewed_again_with_the_same_inputs_is_not_run_again(monkeypatch):
    """The check previews every stack at each `up` and each portal batch: a stack whose inputs are the same is
    not run again; a change to its fingerprint, its config or a secret it is given runs it again."""
    import dataclasses

    import automation.checks.offline_preview as offline_preview
    from automation.planning.stacks import desired_state

    runs: list[str] = []
    real = offline_preview.run
    monkeypatch.setattr(offline_preview, "run", lambda program, project, stack, *a, **k:
                        runs.append(stack) or real(program, project, stack, *a, **k))
    monkeypatch.setenv("MODELPLANE_SECRET_ML_TEAM__HF_TOKEN__HF_TOKEN", "hf_first")
    fleet = load_fleet([str(ROOT / "examples")]).fleet
    spec = desired_state(fleet).specs["cache-ml-team.qwen3-coder"]
    offline_preview.forget()
    first = offline_preview.preview_stack(spec, fleet)
    assert first.error is None and first.resources
    assert offline_preview.preview_stack(spec, fleet) is first and runs == [spec.name]
    offline_preview.preview_stack(dataclasses.replace(spec, fingerprint="another"), fleet)
    offline_preview.preview_stack(spec, fleet, {"modelplane:deletionProtection": "false"})  # config it never reads
    monkeypatch.setenv("MODELPLANE_SECRET_ML_TEAM__HF_TOKEN__HF_TOKEN", "hf_second")
    again = offline_preview.preview_stack(spec, fleet)
    assert runs == [spec.name] * 3 and again is not first
    assert again.to_dict() == first.to_dict()  # the secret is masked: the same resources, run afresh
    platform = desired_state(fleet).specs["platform-byo-eu"]  # a platform program reads the user's config
    offline_preview.preview_stack(platform, fleet)
    offline_preview.preview_stack(platform, fleet, {"modelplane:deletionProtection": "false"})
    offline_preview.preview_stack(platform, fleet)
    assert runs[3:] == [platform.name] * 2


def test_the_check_reads_the_clusters_from_the_specs_it_is_given(monkeypatch):
    """A cluster's facts (source, region, storage, add-on verification) are read from the arguments its platform
    stack runs with, not derived from the fleet again; a platform stack known by its fingerprint alone (no payload)
    is read from the fleet."""
    import dataclasses

    import components.args
    from automation.checks import deployability
    from automation.planning.stacks import desired_state

    fleet = load_fleet([str(ROOT / "examples")]).fleet
    specs = desired_state(fleet).specs
    from_fleet = deployability.cluster_facts(fleet)
    derived: list[object] = []
    real = components.args.every_cluster_args
    monkeypatch.setattr(components.args, "every_cluster_args", lambda f: derived.append(f) or real(f))
    assert deployability.cluster_facts(fleet, specs) == from_fleet and derived == []
    name = "platform-byo-eu"
    payload = specs[name].payload
    assert payload is not None and hasattr(payload, "cluster")
    elsewhere = dataclasses.replace(payload, cluster=payload.cluster.model_copy(update={"region": "elsewhere"}))
    moved = {**specs, name: dataclasses.replace(specs[name], payload=elsewhere)}
    assert deployability.cluster_facts(fleet, moved)["byo-eu"].region == "elsewhere"  # what the program is given
    bare = {**specs, name: dataclasses.replace(specs[name], payload=None)}
    assert deployability.cluster_facts(fleet, bare) == from_fleet and len(derived) == 1
