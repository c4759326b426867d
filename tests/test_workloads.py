"""Composition: exact manifests per backend and routing case, and the contracts users rely on."""

import copy

import pytest

from fleet.names import child_name, replica_name
from tests.manifests import cache, cluster, deployment, endpoint, gateway, gpu_class, member, run, service
from tests.rendering import find, one, rendered
from workloads.service_routing import Endpoint, distribute_weights

L4 = gpu_class("l4", 1, "23034Mi")
H100 = gpu_class("h100", 8, "81559Mi", "NVIDIA H100", "Hopper")
DYN = "nvcr.io/nvidia/ai-dynamo/vllm-runtime:0.6.1"
LABELS = lambda name, cluster_name, index=0: {  # noqa: E731
    "modelplane.ai/deployment": name, "modelplane.ai/cluster": cluster_name,
    "modelplane.ai/replica-index": str(index), "modelplane.ai/replica": replica_name(name, cluster_name, index)}
PROBE = {"httpGet": {"path": "/health", "port": 8000}, "initialDelaySeconds": 30, "periodSeconds": 10, "timeoutSeconds": 5}
GPU_TOLERATIONS = [{"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"},  # our GPU pools' taint
                   {"key": "kubernetes.azure.com/scalesetpriority", "operator": "Equal", "value": "spot",
                    "effect": "NoSchedule"}]  # AKS's own, on spot pools


def test_native_deployment_exact():
    md = deployment("qwen", replicas=1, engines=[{"name": "vllm", "copies": 2, "members": [member()]}],
                    modelCacheRef={"name": "weights"})
    md["spec"]["template"]["spec"]["engines"][0]["members"][0]["template"]["metadata"] = {"labels": {"team": "nlp"}}
    _, result = rendered(L4, cluster("a", pools=(("gpu", "l4", 2),)), cache(), md)
    replica = replica_name("qwen", "a", 0)
    workload = child_name(replica, "vllm")
    labels = LABELS("qwen", "a")
    deployment_obj = [d for d in find(result, "Deployment", stack="model-ml-team.qwen") if d["metadata"]["name"] == workload][0]
    assert deployment_obj == {
        "apiVersion": "apps/v1", "kind": "Deployment",
        "metadata": {"name": workload, "namespace": "ml-team", "labels": labels,
                     "annotations": {"pulumi.com/timeoutSeconds": "3600",  # GPU scale-up and weights take long
                                     # created after its claim template; the cache's claim is another stack's
                                     "config.kubernetes.io/depends-on": "resource.k8s.io/namespaces/ml-team/"
                                     f"ResourceClaimTemplate/{child_name(replica, 'vllm', 'standalone', 'devices')}"}},
        "spec": {"replicas": 2, "selector": {"matchLabels": {"modelplane.ai/workload": workload}}, "template": {
            "metadata": {"labels": {"team": "nlp", **labels, "modelplane.ai/serving": replica, "modelplane.ai/workload": workload}},
            "spec": {
                "nodeSelector": {"modelplane.ai/pool": "gpu"},
                "tolerations": GPU_TOLERATIONS,
                "containers": [{
                    "name": "engine", "image": "vllm/vllm-openai:v0.11.0", "args": ["--model=/mnt/models"],
                    "env": [{"name": "MODELPLANE_SERVED_MODEL_NAME", "value": "ml-team/qwen"}],
                    "ports": [{"name": "http", "containerPort": 8000, "protocol": "TCP"}], "readinessProbe": PROBE,
                    "volumeMounts": [{"name": "dshm", "mountPath": "/dev/shm"}, {"name": "model-cache", "mountPath": "/mnt/models"}],
                    "resources": {"claims": [{"name": "devices"}]}}],
                "volumes": [{"name": "dshm", "emptyDir": {"medium": "Memory"}},
                            {"name": "model-cache", "persistentVolumeClaim": {"claimName": child_name("modelcache", "ml-team", "weights")}}],
                "resourceClaims": [{"name": "devices", "resourceClaimTemplateName": child_name(replica, "vllm", "standalone", "devices")}],
            }}},
    }
    assert one(result, "ResourceClaimTemplate") == {
        "apiVersion": "resource.k8s.io/v1", "kind": "ResourceClaimTemplate",
        "metadata": {"name": child_name(replica, "vllm", "standalone", "devices"), "namespace": "ml-team", "labels": labels},
        "spec": {"spec": {"devices": {"requests": [{"name": "gpu", "exactly": {
            "deviceClassName": "gpu.nvidia.com", "count": 1,
            "selectors": [{"cel": {"expression": 'device.capacity["gpu.nvidia.com"].memory.compareTo(quantity("20Gi")) >= 0'}}]}}]}}},
    }


def test_model_arg_is_not_injected_over_the_users_own():
    md = deployment("qwen", modelCacheRef={"name": "weights"})
    md["spec"]["template"]["spec"]["engines"][0]["members"][0]["template"]["spec"]["containers"][0]["args"] = ["--model", "x"]
    _, result = rendered(L4, cluster("a"), cache(), md)
    workload = [d for d in find(result, "Deployment") if "engine" in str(d)][0]
    assert workload["spec"]["template"]["spec"]["containers"][0]["args"] == ["--model", "x"]


def gang(name="big", image="vllm/vllm-openai:v0.11.0", workers=2, **spec):
    members = [member("Leader", gpus=8, image=image), member("Worker", gpus=8, nodes=workers, image=image)]
    members[0]["template"]["spec"]["containers"][0]["env"] = [{"name": "USER_VAR", "value": "1"}]
    return deployment(name, engines=[{"name": "e", "copies": 1, "members": members}], **spec)


def test_llmd_leaderworkerset_exact_parts():
    _, result = rendered(H100, cluster("a", pools=(("h", "h100", 3),)), gang())
    lws = one(result, "LeaderWorkerSet")
    replica = replica_name("big", "a", 0)
    template = lws["spec"]["leaderWorkerTemplate"]
    assert lws["spec"]["replicas"] == 1 and template["size"] == 3
    leader, worker = template["leaderTemplate"], template["workerTemplate"]
    assert leader["metadata"]["labels"]["modelplane.ai/serving"] == replica
    assert leader["metadata"]["labels"]["modelplane.ai/lws-role"] == "leader"
    assert "modelplane.ai/serving" not in worker["metadata"]["labels"]  # routing never targets workers
    assert leader["spec"]["containers"][0]["env"] == [
        {"name": "MODELPLANE_SERVED_MODEL_NAME", "value": "ml-team/big"},
        {"name": "MODELPLANE_LEADER_ADDRESS", "value": "$(LWS_LEADER_ADDRESS)"},
        {"name": "MODELPLANE_RANK", "value": "$(LWS_WORKER_INDEX)"}, {"name": "USER_VAR", "value": "1"}]
    assert worker["spec"]["containers"][0]["env"][:3] == leader["spec"]["containers"][0]["env"][:3]
    assert "ports" not in worker["spec"]["containers"][0] and "readinessProbe" not in worker["spec"]["containers"][0]
    assert leader["spec"]["containers"][0]["readinessProbe"] == PROBE
    assert {c["metadata"]["name"] for c in find(result, "ResourceClaimTemplate")} == {
        child_name(replica, "e", "leader", "devices"), child_name(replica, "e", "worker", "devices")}
    assert worker["spec"]["resourceClaims"][0]["resourceClaimTemplateName"] == child_name(replica, "e", "worker", "devices")


def pd_deployment(image="vllm/vllm-openai:v0.11.0", decode_args=("--port=8200", "--block-size=128"), **spec):
    engines = [{"name": "prefill", "phase": "Prefill", "members": [member(gpus=8, image=image)]},
               {"name": "decode", "phase": "Decode", "members": [member(gpus=8, image=image)]}]
    engines[1]["members"][0]["template"]["spec"]["containers"][0]["args"] = list(decode_args)
    return deployment("pd", engines=engines, serving={"mode": "PrefillDecode"}, **spec)


def test_prefill_decode_shaping():
    _, result = rendered(H100, cluster("a", pools=(("h", "h100", 2),)), pd_deployment())
    replica = replica_name("pd", "a", 0)
    deployments = {d["metadata"]["name"]: d for d in find(result, "Deployment")}
    prefill = deployments[child_name(replica, "prefill")]["spec"]["template"]
    decode = deployments[child_name(replica, "decode")]["spec"]["template"]
    for pod, role in ((prefill, "prefill"), (decode, "decode")):
        assert {k: pod["metadata"]["labels"][k] for k in ("llm-d.ai/role", "llm-d.ai/inference-serving", "app")} == {
            "llm-d.ai/role": role, "llm-d.ai/inference-serving": "true", "app": replica}
        env = {e["name"]: e for e in pod["spec"]["containers"][0]["env"]}
        assert env["VLLM_NIXL_SIDE_CHANNEL_HOST"]["valueFrom"] == {"fieldRef": {"fieldPath": "status.podIP"}}
    engine = decode["spec"]["containers"][0]
    assert engine["ports"][0]["containerPort"] == 8200 and engine["readinessProbe"]["httpGet"]["port"] == 8200
    [sidecar] = decode["spec"]["initContainers"]
    assert sidecar["name"] == "routing-proxy" and sidecar["restartPolicy"] == "Always"
    assert sidecar["args"][:3] == ["--port=8000", "--vllm-port=8200", "--kv-connector=nixlv2"]
    assert "initContainers" not in prefill["spec"]
    assert prefill["spec"]["containers"][0]["ports"][0]["containerPort"] == 8000
    config = one(result, "ConfigMap")["data"]["epp-config.yaml"]
    assert "prefill-filter" in config and "decode-filter" in config and "blockSizeTokens: 128" in config


def test_decode_port_defaults_to_8001_and_user_nixl_env_wins():
    md = pd_deployment(decode_args=())
    md["spec"]["template"]["spec"]["engines"][1]["members"][0]["template"]["spec"]["containers"][0]["env"] = [
        {"name": "VLLM_NIXL_SIDE_CHANNEL_PORT", "value": "6000"}]
    _, result = rendered(H100, cluster("a", pools=(("h", "h100", 2),)), md)
    decode = [d for d in find(result, "Deployment") if "decode" in d["metadata"]["name"]][0]["spec"]["template"]["spec"]
    assert decode["containers"][0]["ports"][0]["containerPort"] == 8001
    env = [e for e in decode["containers"][0]["env"] if e["name"] == "VLLM_NIXL_SIDE_CHANNEL_PORT"]
    assert env == [{"name": "VLLM_NIXL_SIDE_CHANNEL_PORT", "value": "6000"}]


def nvl72_class() -> dict:
    """H100 devices on a class that names the NVLink domain's node label (as GB200/GB300 NVL72 classes do)."""
    klass = copy.deepcopy(H100)
    klass["spec"]["topology"] = {"nvlinkDomainLabel": "nvidia.com/gpu.clique"}
    return klass


def test_dynamo_graph_exact():
    md = gang("dyn", image=DYN, workers=1)
    md["spec"]["template"]["spec"]["engines"][0]["capabilities"] = ["KVOffload", "NVLinkDomain"]
    _, result = rendered(nvl72_class(), cluster("a", pools=(("h", "h100", 2),)), md)
    replica = replica_name("dyn", "a", 0)
    graph = one(result, "DynamoGraphDeployment")
    assert graph["metadata"]["name"] == replica and graph["spec"]["backendFramework"] == "vllm"
    frontend, worker = graph["spec"]["components"]
    assert frontend["type"] == "frontend" and frontend["podTemplate"]["spec"]["containers"][0]["image"] == DYN
    assert worker == {**worker, "name": "e", "type": "worker", "replicas": 1, "multinode": {"nodeCount": 2},
                      "topologyConstraint": {"packDomain": "block"}}
    # the NVLink domain is Grove's `block` level of the ClusterTopology Grove makes and reads, `grove-topology`
    assert graph["spec"]["topologyConstraint"] == {"clusterTopologyName": "grove-topology"}
    main = worker["podTemplate"]["spec"]["containers"][0]
    assert main["name"] == "main" and main["resources"] == {"claims": [{"name": "devices"}]}
    # KVOffload: KVBM's disk tier on a local volume, and udev for cuFile (no sizes set: no size limit, no memory)
    assert {"name": "DYN_KVBM_DISK_CACHE_DIR", "value": "/kvbm-cache"} in main["env"]
    assert {"name": "kvbm-cache", "emptyDir": {}} in worker["podTemplate"]["spec"]["volumes"]
    assert {"name": "udev", "mountPath": "/run/udev", "readOnly": True} in main["volumeMounts"]
    assert worker["podTemplate"]["spec"]["nodeSelector"] == {"modelplane.ai/pool": "h"}
    assert not find(result, "LeaderWorkerSet") and not find(result, "InferencePool")
    route = one(result, "HTTPRoute", stack="model-ml-team.dyn")
    assert route["spec"]["rules"][0]["backendRefs"] == [{"name": f"{replica}-frontend", "port": 8000}]


def test_dynamo_prefill_decode_components():
    md = pd_deployment(image=DYN)
    md["spec"]["template"]["spec"]["engines"][0]["capabilities"] = ["KVOffload"]
    _, result = rendered(H100, cluster("a", pools=(("h", "h100", 2),)), md)
    graph = one(result, "DynamoGraphDeployment")
    assert [(c["name"], c["type"]) for c in graph["spec"]["components"]] == [
        ("frontend", "frontend"), ("prefill", "prefill"), ("decode", "decode")]
    assert not find(result, "Deployment")


def test_workload_route_and_pool_exact():
    _, result = rendered(L4, cluster("a"), deployment("qwen"))
    replica = replica_name("qwen", "a", 0)
    labels = LABELS("qwen", "a")
    assert one(result, "HTTPRoute", stack="model-ml-team.qwen") == {
        "apiVersion": "gateway.networking.k8s.io/v1", "kind": "HTTPRoute",
        "metadata": {"name": replica, "namespace": "ml-team", "labels": labels},
        "spec": {"parentRefs": [{"name": "inference-gateway", "namespace": "modelplane-system"}], "rules": [{
            "matches": [{"path": {"type": "PathPrefix", "value": f"/ml-team/{replica}/"}}],
            "filters": [{"type": "URLRewrite", "urlRewrite": {"path": {"type": "ReplacePrefixMatch", "replacePrefixMatch": "/"}}}],
            "backendRefs": [{"group": "inference.networking.k8s.io", "kind": "InferencePool", "name": f"{replica}-pool"}],
            "timeouts": {"request": "0s"}}]},
    }
    assert one(result, "InferencePool") == {
        "apiVersion": "inference.networking.k8s.io/v1", "kind": "InferencePool",
        "metadata": {"name": f"{replica}-pool", "namespace": "ml-team", "labels": labels},
        "spec": {"selector": {"matchLabels": {"modelplane.ai/serving": replica}}, "targetPorts": [{"number": 8000}],
                 "endpointPickerRef": {"name": f"{replica}-epp", "port": {"number": 9002}, "failureMode": "FailOpen"}},
    }
    epp = [d for d in find(result, "Deployment") if d["metadata"]["name"] == f"{replica}-epp"][0]
    assert f"--pool-name={replica}-pool" in epp["spec"]["template"]["spec"]["containers"][0]["args"]
    assert epp["spec"]["template"]["metadata"]["annotations"]["modelplane.ai/epp-config-checksum"]
    assert {o["kind"] for o in find(result, "Role") + find(result, "RoleBinding") + find(result, "ServiceAccount")} == {
        "Role", "RoleBinding", "ServiceAccount"}


def test_each_workload_is_created_after_what_its_pods_need_in_its_own_stack():
    """The ConfigGroup creates what a workload's pods need first (cli-utils' depends-on): started before them, a
    Deployment's step waits for pods that cannot be made, and two such steps held both of `--parallel 2`'s slots of a
    model stack until its hour-long readiness timeout (the real engine showed it)."""
    from workloads.readiness import DEPENDS_ON, with_prerequisites

    _, result = rendered(L4, cluster("a"), deployment("qwen"))
    replica = replica_name("qwen", "a", 0)
    depends = {d["metadata"]["name"]: d["metadata"]["annotations"].get(DEPENDS_ON, "").split(",")
               for d in find(result, "Deployment", stack="model-ml-team.qwen")}
    assert depends == {
        child_name(replica, "vllm"): [f"resource.k8s.io/namespaces/ml-team/ResourceClaimTemplate/"
                                      f"{child_name(replica, 'vllm', 'standalone', 'devices')}"],
        f"{replica}-epp": [f"/namespaces/ml-team/ConfigMap/{replica}-epp",
                           f"/namespaces/ml-team/ServiceAccount/{replica}-epp"]}
    for kind in ("ConfigMap", "ServiceAccount"):  # what it names is in the same stack (else the group fails)
        assert [o["metadata"]["name"] for o in find(result, kind, stack="model-ml-team.qwen")] == [f"{replica}-epp"]
    # an object of another stack, or a placeholder Secret made beside the group, is never named
    pod = {"serviceAccountName": "elsewhere", "volumes": [{"name": "t", "secret": {"secretName": "token"}}]}
    objects = [{"apiVersion": "apps/v1", "kind": "Deployment", "metadata": {"name": "d", "namespace": "n"},
                "spec": {"template": {"spec": pod}}},
               {"apiVersion": "v1", "kind": "Secret", "metadata": {"name": "token", "namespace": "n", "annotations": {
                   "modelplane.ai/placeholder": "true"}}}]
    assert DEPENDS_ON not in (with_prerequisites(objects)[0]["metadata"].get("annotations") or {})


@pytest.mark.parametrize("groups,expected", [
    ([(80, 3)], [27, 27, 26]),  # remainder to the first endpoints; GCD 1
    ([(80, 3), (20, 1)], [27, 27, 26, 20]),
    ([(1, 3)], [1, 1, 1]),
    ([(1, 2), (1, 1)], [1, 1, 2]),
    ([(3, 1), (1, 1)], [3, 1]),
    ([(1_000_000, 1), (1, 4)], [1_000_000, 1, 1, 1, 1]),
    ([(5, 0), (2, 2)], [1, 1]),
])
def test_weight_distribution(groups, expected):
    eps = iter(range(100))
    table = [(w, [Endpoint(f"e{next(eps)}", "ns", "http://x/", None) for _ in range(n)]) for w, n in groups]
    assert [w for _, w in distribute_weights(table)] == expected


def test_weights_of_eighty_over_three_split_unevenly_before_reduction():
    table = [(80, [Endpoint(f"e{i}", "ns", "http://x/", None) for i in range(3)]), (1, [Endpoint("z", "ns", "http://x/", None)])]
    assert [w for _, w in distribute_weights(table)] == [27, 27, 26, 1]


def test_service_route_with_replicas_and_external_https():
    svc = service("qwen", deployment_name="qwen")
    svc["spec"]["endpoints"] = [{"weight": 3, "selector": {"matchLabels": {"modelplane.ai/deployment": "qwen"}}},
                                {"weight": 1, "selector": {"matchLabels": {"provider": "together"}}}]
    ext = endpoint("together")
    ext["metadata"]["labels"] = {"provider": "together"}
    ext["spec"] = {"url": "https://api.together.xyz/v1", "rewritePath": "/v1/"}
    observed = {"gateway": {"address": "34.1.2.3"}, "conditions": [{"type": "Ready", "status": "True"}]}
    _, result = rendered(L4, cluster("a", status=observed), cluster("b", pools=(("gpu", "l4", 1),)),
                         deployment("qwen", replicas=2), svc, ext)
    route = one(result, "HTTPRoute", stack="service-ml-team.qwen")
    assert route["spec"]["parentRefs"] == [{"name": "modelplane", "namespace": "modelplane-system"}]
    assert route["spec"]["rules"][0]["matches"] == [{"path": {"type": "PathPrefix", "value": "/ml-team/qwen/"}}]
    refs = {r["name"]: r for r in route["spec"]["rules"][0]["backendRefs"]}
    ra, rb = replica_name("qwen", "a", 0), replica_name("qwen", "b", 0)
    assert [(r["name"], r["weight"]) for r in route["spec"]["rules"][0]["backendRefs"]] == [
        (f"ep-{ra}", 2), (f"ep-{rb}", 1), ("ep-together", 1)]  # weight 3 split over two replicas: 2 and 1
    assert refs[f"ep-{ra}"]["filters"] == [{"type": "URLRewrite", "urlRewrite": {
        "path": {"type": "ReplacePrefixMatch", "replacePrefixMatch": f"/ml-team/{ra}/"}}}]
    assert refs["ep-together"]["port"] == 443 and refs["ep-together"]["filters"][0]["urlRewrite"] == {
        "path": {"type": "ReplacePrefixMatch", "replacePrefixMatch": "/v1/"}, "hostname": "api.together.xyz"}
    slices = {s["metadata"]["name"]: s for s in find(result, "EndpointSlice")}
    assert slices[f"ep-{ra}"]["addressType"] == "IPv4" and slices[f"ep-{ra}"]["endpoints"][0]["addresses"] == ["34.1.2.3"]
    # a replica's slice names the cluster whose gateway it points at (the endpoints program reads its live address)
    assert slices[f"ep-{ra}"]["metadata"]["annotations"] == {"modelplane.ai/gateway-of": "a"}
    assert slices[f"ep-{rb}"]["addressType"] == "FQDN"
    assert slices[f"ep-{rb}"]["metadata"]["annotations"]["modelplane.ai/placeholder"].startswith("gateway address of b")
    assert slices["ep-together"]["endpoints"][0]["addresses"] == ["api.together.xyz"]
    tls = one(result, "BackendTLSPolicy")
    assert tls["spec"] == {"targetRefs": [{"group": "", "kind": "Service", "name": "ep-together"}],
                           "validation": {"hostname": "api.together.xyz", "wellKnownCACertificates": "System"}}
    assert result.addresses["service-ml-team.qwen"] == "http://fleet-gateway.pending.modelplane.invalid/ml-team/qwen"


def test_endpoints_only_for_ready_replicas_on_clusters_with_a_gateway():
    no_gateway = {"gateway": {}, "conditions": [{"type": "Ready", "status": "True"}]}
    before = rendered(L4, cluster("a"), deployment("qwen"))[0]
    recorded = before.replicas[0]
    replica_manifest = {
        "apiVersion": "modelplane.ai/v1alpha1", "kind": "ModelReplica",
        "metadata": {"name": recorded.name, "namespace": "ml-team", "labels": {
            "modelplane.ai/deployment": "qwen", "modelplane.ai/cluster": "a", "modelplane.ai/replica-index": "0"}},
        "spec": {"clusterName": "a", "engines": [{"name": "vllm", "members": [{
            "role": "Standalone", "nodePoolName": "gpu",
            "deviceRequests": [{"name": "gpu", "deviceClassName": "gpu.nvidia.com", "count": 1}],
            "template": {"spec": {"containers": [{"name": "engine", "image": "vllm/vllm-openai:v0.11.0"}]}}}]}]},
        "status": {"conditions": [{"type": "ModelReady", "status": "False", "reason": "ModelStarting"}]},
    }
    _, not_ready = rendered(L4, cluster("a"), deployment("qwen"), service("qwen"), replica_manifest)
    assert find(not_ready, "Deployment", stack="model-ml-team.qwen")  # the workload is still there
    route = one(not_ready, "HTTPRoute", stack="service-ml-team.qwen")
    assert "backendRefs" not in route["spec"]["rules"][0] and not find(not_ready, "EndpointSlice")
    _, degraded = rendered(L4, cluster("a", status=no_gateway), deployment("qwen"), service("qwen"), replica_manifest)
    assert not find(degraded, "EndpointSlice")


def test_services_select_only_their_own_namespace():
    _, result = rendered(L4, cluster("a", pools=(("gpu", "l4", 2),)), deployment("qwen", namespace="team-a"),
                         deployment("qwen2", namespace="team-b"), service("qwen", namespace="team-b", deployment_name="qwen"))
    assert not find(result, "EndpointSlice")


def test_cache_objects_exact():
    md = deployment("qwen", modelCacheRef={"name": "weights"})
    hf_cache = cache()
    hf_cache["spec"]["huggingFace"].update(revision="abc123", authSecret={"name": "hf-token"})
    _, result = rendered(L4, cluster("a", cache_class="cephfs"), cluster("b", cache_class=None), hf_cache, md)
    assert {t for s, t, _ in result.objects() if s == "cache-ml-team.weights"} == {"a"}
    pvc = one(result, "PersistentVolumeClaim")
    assert pvc["spec"] == {"accessModes": ["ReadWriteMany"], "storageClassName": "cephfs",
                           "resources": {"requests": {"storage": "20Gi"}}}
    job = one(result, "Job")
    container = job["spec"]["template"]["spec"]["containers"][0]
    assert "hf download Qwen/Qwen3-8B --local-dir /mnt/artifact --revision abc123" in container["args"][0]
    assert container["env"] == [{"name": "HF_TOKEN", "valueFrom": {"secretKeyRef": {
        "name": child_name("modelcache", "ml-team", "weights", "auth"), "key": "HF_TOKEN"}}}]
    secret = one(result, "Secret")
    assert secret["stringData"] == {"HF_TOKEN": "<secret: set at apply time, never rendered>"}
    assert job["metadata"]["annotations"] == {"pulumi.com/skipAwait": "true"}


def test_autoscaling_scaled_object_and_capacity_for_max_copies():
    md = deployment("qwen")
    md["metadata"]["annotations"] = {"modelplane.ai/autoscaling": "keda", "modelplane.ai/autoscaling-max-copies": "3",
                                     "modelplane.ai/autoscaling-threshold": "10"}
    plan, result = rendered(gpu_class("l4x8", 8, "23034Mi"), cluster("a", pools=(("gpu", "l4x8", 1),)), md)
    replica = replica_name("qwen", "a", 0)
    scaled = one(result, "ScaledObject")
    assert scaled["spec"]["scaleTargetRef"] == {"apiVersion": "apps/v1", "kind": "Deployment", "name": child_name(replica, "vllm")}
    assert (scaled["spec"]["minReplicaCount"], scaled["spec"]["maxReplicaCount"]) == (1, 3)
    assert scaled["spec"]["triggers"][0]["metadata"]["threshold"] == "10"
    assert plan.replicas[0].placement.engines[0].members[0].pods == 3  # devices reserved for the maximum
    engine = [d for d in find(result, "Deployment") if d["metadata"]["name"] == child_name(replica, "vllm")][0]
    assert engine["spec"]["replicas"] == 1  # the workload itself starts at its written copies


@pytest.mark.parametrize("annotations,fragment", [
    ({"modelplane.ai/autoscaling": "hpa"}, "must be 'keda'"),
    ({"modelplane.ai/autoscaling": "keda"}, "required when autoscaling is on"),
    ({"modelplane.ai/autoscaling": "keda", "modelplane.ai/autoscaling-max-copies": "x"}, "whole number"),
    ({"modelplane.ai/autoscaling": "keda", "modelplane.ai/autoscaling-max-copies": "2",
      "modelplane.ai/autoscaling-min-copies": "3"}, "larger than the max"),
    ({"modelplane.ai/autoscaling-max-copies": "2"}, "set modelplane.ai/autoscaling: keda"),
    ({"modelplane.ai/autoscaling": "keda", "modelplane.ai/autoscaling-max-copies": "2", "modelplane.ai/autoscaling-speed": "1"},
     "unknown autoscaling annotation"),
])
def test_autoscaling_annotation_errors(annotations, fragment):
    from tests.manifests import errors
    md = deployment("qwen")
    md["metadata"]["annotations"] = annotations
    assert any(fragment in e for e in errors(md)), errors(md)


def test_long_names_stay_within_63_characters():
    long = "a-very-long-deployment-name-that-goes-on-and-on-for-ever-x"
    assert len(long) == 58
    fleet = [L4, H100, cluster("cluster-with-a-long-name", pools=(("gpu", "l4", 2), ("h", "h100", 4))),
             deployment(long), gang(long[:-1] + "y"), pd_deployment()]
    fleet[-1]["metadata"]["name"] = long[:-1] + "z"
    _, result = rendered(*fleet)
    names = [obj["metadata"]["name"] for _, _, obj in result.objects()]
    assert names and max(len(n) for n in names) <= 63
    label_values = [v for _, _, obj in result.objects() for v in (obj["metadata"].get("labels") or {}).values()]
    assert max(len(v) for v in label_values) <= 63
    assert all(len(o["metadata"]["name"]) <= 52 for o in find(result, "LeaderWorkerSet"))


def shared_gateway():
    """The fleet switch for the reference's behaviour: every team's replicas in `default`."""
    gw = gateway()
    gw["metadata"]["annotations"] = {"modelplane.ai/workload-namespaces": "Default"}
    return gw


def test_two_teams_deploy_the_same_name_to_one_cluster_in_namespaces_of_their_own():
    _, result = rendered(L4, cluster("a", pools=(("gpu", "l4", 2),)), deployment("qwen", namespace="team-a"),
                         deployment("qwen", namespace="team-b"), gateway())
    assert not result.problems
    for team in ("team-a", "team-b"):
        objects = result.stacks[f"model-{team}.qwen"]["a"]
        assert objects and {o["metadata"]["namespace"] for o in objects} == {team}
        isolation = {o["kind"]: o for o in result.stacks[f"team-{team}.a"]["a"]}
        assert isolation["Namespace"]["metadata"] == {"name": team, "labels": {"modelplane.ai/namespace": team}}
        # one replica of one standalone pod with one GPU, plus the one surge pod of a rolling update
        assert isolation["ResourceQuota"]["spec"]["hard"] == {"gpu.nvidia.com.deviceclass.resource.k8s.io/devices": "2"}
        policy = isolation["NetworkPolicy"]["spec"]
        assert policy["podSelector"] == {} and policy["policyTypes"] == ["Ingress"]
        sources = [rule["from"][0] for rule in policy["ingress"]]
        assert {"namespaceSelector": {"matchLabels": {"kubernetes.io/metadata.name": "envoy-gateway-system"}}} in sources


def test_the_reference_behaviour_keeps_every_replica_in_default_and_names_the_real_cause_of_a_collision():
    _, result = rendered(L4, cluster("a", pools=(("gpu", "l4", 2),)), deployment("qwen", namespace="team-a"),
                         deployment("qwen", namespace="team-b"), shared_gateway())
    assert {o["metadata"]["namespace"] for o in result.stacks["model-team-a.qwen"]["a"]} == {"default"}
    assert not [s for s in result.stacks if s.startswith("team-")]  # `default` is nobody's to create or fence
    message = result.problems[0].message
    assert "team-a/qwen and team-b/qwen share the workload namespace `default`" in message
    assert "modelplane.ai/workload-namespaces: Default" in message


def test_a_team_namespace_that_is_a_system_namespace_is_refused_unless_teams_share_default():
    refused = run(L4, cluster("a"), deployment("qwen", namespace="monitoring"), gateway())
    assert any(p.path == "metadata.namespace" and "system namespace" in p.message for p in refused.errors)
    shared = run(L4, cluster("a"), deployment("qwen", namespace="monitoring"), shared_gateway())
    assert not any(p.path == "metadata.namespace" for p in shared.problems)


def test_an_unknown_workload_namespace_mode_is_refused_with_a_suggestion():
    gw = gateway()
    gw["metadata"]["annotations"] = {"modelplane.ai/workload-namespaces": "Defualt"}
    assert any("did you mean 'Default'" in p.message for p in run(L4, cluster("a"), deployment("qwen"), gw).errors)


def test_gateway_address_from_observed_inference_gateway():
    gw = gateway()
    gw["status"] = {"address": "203.0.113.7"}
    _, result = rendered(L4, cluster("a"), deployment("qwen"), service("qwen"), gw)
    assert result.addresses["service-ml-team.qwen"] == "http://203.0.113.7/ml-team/qwen"


def test_two_services_on_one_deployment_share_its_endpoints_and_both_route():
    from automation.planning.stacks import desired_stacks
    from fleet.scheduler import schedule

    loaded = run(L4, cluster("a", pools=(("gpu", "l4", 2),)), deployment("qwen", replicas=2),
                 service("chat"), service("chat-canary"), gateway())
    plan = schedule(loaded.fleet)
    from workloads.render import render

    result = render(loaded.fleet, plan)
    assert not result.problems
    backends = [o for o in result.stacks["endpoints-ml-team"]["control-plane"] if o["kind"] == "Service"]
    assert len(backends) == 2  # one per replica, not one per (service, replica)
    for name in ("chat", "chat-canary"):
        (route,) = result.stacks[f"service-ml-team.{name}"]["control-plane"]
        assert route["kind"] == "HTTPRoute"
        assert sorted(ref["name"] for ref in route["spec"]["rules"][0]["backendRefs"]) == sorted(
            b["metadata"]["name"] for b in backends)
    stacks = desired_stacks(loaded.fleet, plan, result)
    assert stacks["service-ml-team.chat"].depends_on == stacks["service-ml-team.chat-canary"].depends_on
    assert "endpoints-ml-team" in stacks["service-ml-team.chat"].depends_on
    assert "model-ml-team.qwen" in stacks["endpoints-ml-team"].depends_on


def test_an_external_endpoint_named_like_a_replica_is_named_as_the_cause():
    plan, result = rendered(L4, cluster("a"), deployment("qwen"), gateway())
    replica = plan.replicas[0].name
    external = endpoint(replica)
    external["metadata"]["labels"] = {"modelplane.ai/deployment": "qwen"}
    _, result = rendered(L4, cluster("a"), deployment("qwen"), gateway(), external, service("qwen"))
    assert any("two endpoints are named" in p.message and "rename the ModelEndpoint" in p.message for p in result.problems)


# ---- MODELPLANE_SERVED_MODEL_NAME (Modelplane v0.5) ------------------------------------------------------------------

def _engine_containers(result) -> list[dict]:
    """Every engine container the model stacks compose, whatever holds it (Deployment, LWS, Dynamo graph)."""
    out = []
    for _, _, obj in result.objects():
        if obj["kind"] == "Deployment" and obj["metadata"]["labels"].get("modelplane.ai/deployment"):
            out += [c for c in obj["spec"]["template"]["spec"]["containers"] if c["name"] == "engine"]
        elif obj["kind"] == "LeaderWorkerSet":
            for part in ("leaderTemplate", "workerTemplate"):
                out += obj["spec"]["leaderWorkerTemplate"].get(part, {}).get("spec", {}).get("containers", [])
        elif obj["kind"] == "DynamoGraphDeployment":
            out += [c for comp in obj["spec"]["components"] if comp["type"] != "frontend"
                    for c in comp["podTemplate"]["spec"]["containers"]]
    return out


def _dynamo(md: dict) -> dict:
    md["metadata"]["annotations"] = {"modelplane.ai/backend": "dynamo"}
    return md


PD_ENGINES = [{"name": "p", "phase": "Prefill", "members": [member()]},
              {"name": "d", "phase": "Decode", "members": [member()]}]


@pytest.mark.parametrize("name,namespace,md,backend", [
    ("native", "ml-team", lambda: deployment("qwen", namespace="ml-team"), "Deployment"),
    ("llm-d gang", "team-b", lambda: gang("big", namespace="team-b"), "LeaderWorkerSet"),
    ("llm-d prefill/decode", "ml-team", lambda: deployment("pd", engines=copy.deepcopy(PD_ENGINES),
                                                           serving={"mode": "PrefillDecode"}), "Deployment"),
    ("dynamo gang", "ml-team", lambda: _dynamo(gang("dyn", image=DYN)), "DynamoGraphDeployment"),
], ids=lambda v: v if isinstance(v, str) else None)
def test_every_engine_container_gets_the_served_model_name_first(name, namespace, md, backend):
    """Upstream's composed replica: every container carries MODELPLANE_SERVED_MODEL_NAME = <namespace>/<deployment>,
    ahead of any env the user wrote, so `--served-model-name=$(MODELPLANE_SERVED_MODEL_NAME)` in args expands."""
    manifest = md()
    manifest["metadata"]["namespace"] = namespace
    for engine in manifest["spec"]["template"]["spec"]["engines"]:
        for m in engine["members"]:
            c = m["template"]["spec"]["containers"][0]
            c["args"] = [*c.get("args", []), "--served-model-name=$(MODELPLANE_SERVED_MODEL_NAME)"]
            c["env"] = [*c.get("env", []), {"name": "USER_LAST", "value": "x"}]
    _, result = rendered(L4, H100, cluster("a", pools=(("l", "l4", 4), ("h", "h100", 3))), manifest)
    assert not result.problems, [str(p) for p in result.problems]
    assert find(result, backend)
    containers = _engine_containers(result)
    assert containers
    expected = {"name": "MODELPLANE_SERVED_MODEL_NAME", "value": f"{namespace}/{manifest['metadata']['name']}"}
    for container in containers:
        assert container["env"][0] == expected and {"name": "USER_LAST", "value": "x"} in container["env"][1:]
        assert "--served-model-name=$(MODELPLANE_SERVED_MODEL_NAME)" in container["args"]  # passed through as written
