"""Every validation rule of the API, as table rows: one passing and one failing row each.

A row is (base manifest, field path, new value, expected). `expected` is None when the
mutated manifest must validate, else (field path, message fragment) of the one error
it must produce.
"""

import pytest

from tests.manifests import (
    DELETE, cache, cluster, deployment, endpoint, errors, gateway, gpu_class, member, mutate, replica, service,
)

E = "spec.template.spec.engines"
M0 = f"{E}[0].members[0]"
PD_ENGINES = [
    {"name": "prefill", "phase": "Prefill", "members": [member()]},
    {"name": "decode", "phase": "Decode", "members": [member()]},
]
LW_MEMBERS = [member("Leader"), member("Worker", nodes=1)]


def pd_deployment():
    return deployment(engines=PD_ENGINES, serving={"mode": "PrefillDecode"})


MANY_LABELS = {f"k{i}": "v" for i in range(33)}

ROWS = [
    # --- ModelDeployment: replicas -------------------------------------------------------
    ("replicas max", deployment, "spec.replicas", 10, None),
    ("replicas zero", deployment, "spec.replicas", 0, None),  # parked (v0.5)
    ("replicas over max", deployment, "spec.replicas", 11, ("spec.replicas", "less than or equal to 10")),
    # v0.5 lowered the floor to 0 (the reference's PR #454): -1 is the first value refused
    ("replicas min", deployment, "spec.replicas", -1, ("spec.replicas", "greater than or equal to 0")),
    ("replicas required", deployment, "spec.replicas", DELETE, ("spec.replicas", "required field is missing")),
    ("replicas as string", deployment, "spec.replicas", "2", ("spec.replicas", "valid integer")),
    ("unknown spec field", deployment, "spec.paused", True, ("spec.paused", "unknown field")),
    # --- template labels -------------------------------------------------------------------
    ("template label ok", deployment, "spec.template.metadata.labels", {"team": "nlp"}, None),
    ("template label reserved", deployment, "spec.template.metadata.labels", {"modelplane.ai/x": "y"},
     ("spec.template.metadata.labels[modelplane.ai/x]", "reserved prefix")),
    ("template label bad key", deployment, "spec.template.metadata.labels", {"-bad": "y"},
     ("spec.template.metadata.labels.-bad", "not a qualified name")),
    ("template label bad prefix", deployment, "spec.template.metadata.labels", {"Bad_Prefix/x": "y"},
     ("spec.template.metadata.labels[Bad_Prefix/x]", "invalid prefix")),
    ("template label bad value", deployment, "spec.template.metadata.labels", {"a": "has space"},
     ("spec.template.metadata.labels.a", "not a valid label value")),
    ("template label value too long", deployment, "spec.template.metadata.labels", {"a": "x" * 64},
     ("spec.template.metadata.labels.a", "at most 63 characters")),
    ("template labels too many", deployment, "spec.template.metadata.labels", MANY_LABELS,
     ("spec.template.metadata.labels", "at most 32 items")),
    ("template label bool value", deployment, "spec.template.metadata.labels", {"a": True},
     ("spec.template.metadata.labels.a", "valid string")),
    # --- serving mode and phases -----------------------------------------------------------
    ("prefill decode ok", pd_deployment, f"{E}[1].copies", 2, None),
    ("prefill decode three engines", pd_deployment, f"{E}[2]", {"name": "x", "members": [member()]},
     (E, "PrefillDecode needs exactly 2 engines")),
    ("prefill decode two prefills", pd_deployment, f"{E}[1].phase", "Prefill", (E, "exactly one engine with phase Decode")),
    ("prefill decode no prefill", pd_deployment, f"{E}[0].phase", DELETE, (E, "exactly one engine with phase Prefill")),
    ("phase without PD", deployment, f"{E}[0].phase", "Prefill", (f"{E}[0].phase", "only allowed when serving mode is PrefillDecode")),
    ("bad mode", deployment, "spec.template.spec.serving", {"mode": "Split"}, ("spec.template.spec.serving.mode", "one of 'Unified' or 'PrefillDecode'")),
    ("serving needs mode", deployment, "spec.template.spec.serving", {}, ("spec.template.spec.serving.mode", "required")),
    ("unified explicit ok", deployment, "spec.template.spec.serving", {"mode": "Unified"}, None),
    ("bad phase", deployment, f"{E}[0].phase", "Both", (f"{E}[0].phase", "'Prefill' or 'Decode'")),
    # --- cluster selector, cache ref, tolerations --------------------------------------------
    ("cluster selector ok", deployment, "spec.template.spec.clusterSelector", {"matchLabels": {"region": "us"}}, None),
    ("cluster selector expressions", deployment, "spec.template.spec.clusterSelector", {"matchExpressions": []},
     ("spec.template.spec.clusterSelector.matchExpressions", "unknown field")),
    ("cache ref empty", deployment, "spec.template.spec.modelCacheRef", {"name": ""}, ("spec.template.spec.modelCacheRef.name", "at least 1 character")),
    ("toleration equal ok", deployment, "spec.template.spec.tolerations", [{"key": "a", "value": "b", "effect": "NoSchedule"}], None),
    ("toleration equal needs key", deployment, "spec.template.spec.tolerations", [{"value": "b"}],
     ("spec.template.spec.tolerations[0].key", "operator Equal needs a non-empty key")),
    ("toleration exists ok", deployment, "spec.template.spec.tolerations", [{"operator": "Exists"}], None),
    ("toleration exists with value", deployment, "spec.template.spec.tolerations", [{"key": "a", "operator": "Exists", "value": "b"}],
     ("spec.template.spec.tolerations[0].value", "operator Exists must not set a value")),
    ("toleration bad effect", deployment, "spec.template.spec.tolerations", [{"key": "a", "effect": "PreferNoSchedule"}],
     ("spec.template.spec.tolerations[0].effect", "'NoSchedule' or 'NoExecute'")),
    ("toleration bad operator", deployment, "spec.template.spec.tolerations", [{"key": "a", "operator": "In"}],
     ("spec.template.spec.tolerations[0].operator", "'Exists' or 'Equal'")),
    # --- engines ---------------------------------------------------------------------------
    ("no engines", deployment, "spec.template.spec.engines", [], ("spec.template.spec.engines", "at least 1 item")),
    ("nine engines", deployment, "spec.template.spec.engines", [{"name": f"e{i}", "members": [member()]} for i in range(9)],
     ("spec.template.spec.engines", "at most 8 items")),
    ("eight engines ok", deployment, "spec.template.spec.engines", [{"name": f"e{i}", "members": [member()]} for i in range(8)], None),
    ("duplicate engine names", deployment, "spec.template.spec.engines", [{"name": "a", "members": [member()]}] * 2,
     (f"{E}[1]", "duplicate engine name 'a'")),
    ("engine name too long", deployment, f"{E}[0].name", "e" * 64, (f"{E}[0].name", "at most 63 characters")),
    ("copies max ok", deployment, f"{E}[0].copies", 64, None),
    ("copies over max", deployment, f"{E}[0].copies", 65, (f"{E}[0].copies", "less than or equal to 64")),
    ("copies zero", deployment, f"{E}[0].copies", 0, (f"{E}[0].copies", "greater than or equal to 1")),
    # --- engine shapes ---------------------------------------------------------------------
    ("leader and worker ok", deployment, f"{E}[0].members", LW_MEMBERS, None),
    ("leader alone", deployment, f"{E}[0].members", [member("Leader")], (f"{E}[0].members", "either exactly one Standalone")),
    ("worker alone", deployment, f"{E}[0].members", [member("Worker")], (f"{E}[0].members", "either exactly one Standalone")),
    ("standalone and worker", deployment, f"{E}[0].members", [member(), member("Worker")], (f"{E}[0].members", "either exactly one Standalone")),
    ("two standalones", deployment, f"{E}[0].members", [member(), member()], (f"{E}[0].members", "either exactly one Standalone")),
    ("three members", deployment, f"{E}[0].members", [member("Leader"), member("Worker"), member("Worker")], (f"{E}[0].members", "at most 2 items")),
    ("no member selector", deployment, f"{E}[0].members", [member(selector=False)], (f"{E}[0].members", "at least one member must have a nodeSelector")),
    ("claimless leader ok", deployment, f"{E}[0].members", [member("Leader", selector=False), member("Worker", nodes=2)], None),
    ("bad role", deployment, f"{M0}.role", "Follower", (f"{M0}.role", "'Standalone', 'Leader' or 'Worker'")),
    ("worker on standalone", deployment, f"{M0}.worker", {"nodes": 2}, (f"{M0}.worker", "worker is only allowed on role Worker")),
    ("worker nodes max", deployment, f"{E}[0].members", [member("Leader"), member("Worker", nodes=63)], None),
    ("worker nodes over", deployment, f"{E}[0].members", [member("Leader"), member("Worker", nodes=64)],
     (f"{E}[0].members[1].worker.nodes", "less than or equal to 63")),
    ("worker nodes required", deployment, f"{E}[0].members", [member("Leader"), {**member("Worker"), "worker": {}}],
     (f"{E}[0].members[1].worker.nodes", "required")),
    # --- device requests -------------------------------------------------------------------
    ("device count max", deployment, f"{M0}.nodeSelector.devices[0].count", 64, None),
    ("device count over", deployment, f"{M0}.nodeSelector.devices[0].count", 65, (f"{M0}.nodeSelector.devices[0].count", "less than or equal to 64")),
    ("no devices", deployment, f"{M0}.nodeSelector.devices", [], (f"{M0}.nodeSelector.devices", "at least 1 item")),
    ("device names unique", deployment, f"{M0}.nodeSelector.devices",
     [{"name": "gpu", "selectors": [{"cel": "true"}]}] * 2, (f"{M0}.nodeSelector.devices[1]", "duplicate device request name")),
    ("no selectors", deployment, f"{M0}.nodeSelector.devices[0].selectors", [], (f"{M0}.nodeSelector.devices[0].selectors", "at least 1 item")),
    ("nine selectors", deployment, f"{M0}.nodeSelector.devices[0].selectors", [{"cel": "true"}] * 9,
     (f"{M0}.nodeSelector.devices[0].selectors", "at most 8 items")),
    ("empty selector object", deployment, f"{M0}.nodeSelector.devices[0].selectors", [{}],
     (f"{M0}.nodeSelector.devices[0].selectors[0].cel", "required")),
    ("selector as dra expression", deployment, f"{M0}.nodeSelector.devices[0].selectors", [{"cel": {"expression": "true"}}],
     (f"{M0}.nodeSelector.devices[0].selectors[0].cel", "valid string")),
    ("cel syntax error", deployment, f"{M0}.nodeSelector.devices[0].selectors[0].cel", 'device.capacity[',
     (f"{M0}.nodeSelector.devices[0].selectors[0].cel", "CEL syntax error")),
    ("cel unknown function", deployment, f"{M0}.nodeSelector.devices[0].selectors[0].cel", 'quantiti("1") == 1',
     (f"{M0}.nodeSelector.devices[0].selectors[0].cel", "unknown function 'quantiti'")),
    ("cel too long", deployment, f"{M0}.nodeSelector.devices[0].selectors[0].cel", "true" + " " * 10240,
     (f"{M0}.nodeSelector.devices[0].selectors[0].cel", "at most 10240 characters")),
    ("cel semver ok", deployment, f"{M0}.nodeSelector.devices[0].selectors[0].cel",
     'device.attributes["gpu.nvidia.com"].driverVersion.isGreaterThan(semver("v550", true))', None),
    # --- pod template ------------------------------------------------------------------------
    ("container not engine", deployment, f"{M0}.template.spec.containers[0].name", "main",
     (f"{M0}.template.spec.containers[0].name", "exactly one container must be named 'engine'")),
    ("two containers", deployment, f"{M0}.template.spec.containers", [{"name": "engine", "image": "a"}, {"name": "side", "image": "b"}],
     (f"{M0}.template.spec.containers", "at most 1 item")),
    ("container resources", deployment, f"{M0}.template.spec.containers[0].resources", {"limits": {}},
     (f"{M0}.template.spec.containers[0].resources", "unknown field")),
    ("container image required", deployment, f"{M0}.template.spec.containers[0].image", DELETE,
     (f"{M0}.template.spec.containers[0].image", "required")),
    ("env from secret ok", deployment, f"{M0}.template.spec.containers[0].env",
     [{"name": "HF_TOKEN", "valueFrom": {"secretKeyRef": {"name": "hf", "key": "token"}}}], None),
    ("env bad source", deployment, f"{M0}.template.spec.containers[0].env", [{"name": "X", "valueFrom": {"vaultRef": {}}}],
     (f"{M0}.template.spec.containers[0].env[0].valueFrom.vaultRef", "unknown field")),
    ("pod volumes", deployment, f"{M0}.template.spec.volumes", [], (f"{M0}.template.spec.volumes", "unknown field")),
    ("pull secrets ok", deployment, f"{M0}.template.spec.imagePullSecrets", [{"name": "regcred"}], None),
    ("pod label reserved", deployment, f"{M0}.template.metadata", {"labels": {"modelplane.ai/serving": "x"}},
     (f"{M0}.template.metadata.labels[modelplane.ai/serving]", "reserved prefix")),
    ("pod annotation reserved", deployment, f"{M0}.template.metadata", {"annotations": {"modelplane.ai/a": "x"}},
     (f"{M0}.template.metadata.annotations[modelplane.ai/a]", "reserved prefix")),
    ("pod annotation long value ok", deployment, f"{M0}.template.metadata", {"annotations": {"note": "x" * 8192}}, None),
    ("pod annotation too long", deployment, f"{M0}.template.metadata", {"annotations": {"note": "x" * 8193}},
     (f"{M0}.template.metadata.annotations.note", "at most 8192 characters")),
    ("pod annotation bad key", deployment, f"{M0}.template.metadata", {"annotations": {"a b": "x"}},
     (f"{M0}.template.metadata.annotations.a b", "not a qualified name")),
    # --- metadata ------------------------------------------------------------------------------
    ("bad name", deployment, "metadata.name", "Qwen_8B", ("metadata.name", "not a valid name")),
    ("name required", deployment, "metadata.name", DELETE, ("metadata.name", "required")),
    ("bad namespace", deployment, "metadata.namespace", "ML.Team", ("metadata.namespace", "not a valid namespace")),
    ("status accepted", deployment, "status", {"replicas": {"total": 1, "ready": 1}}, None),
    ("server fields accepted", deployment, "metadata.resourceVersion", "123", None),
    # --- ModelReplica --------------------------------------------------------------------------
    ("replica ok", replica, "spec.clusterName", "c2", None),
    ("replica cluster required", replica, "spec.clusterName", DELETE, ("spec.clusterName", "required")),
    ("replica pool required", replica, "spec.engines[0].members[0].nodePoolName", DELETE, ("spec.engines[0].members[0].nodePoolName", "required")),
    ("replica request needs class", replica, "spec.engines[0].members[0].deviceRequests[0].deviceClassName", DELETE,
     ("spec.engines[0].members[0].deviceRequests[0].deviceClassName", "required")),
    ("replica needs device requests", replica, "spec.engines[0].members[0].deviceRequests", DELETE,
     ("spec.engines[0].members", "at least one member must carry deviceRequests")),
    ("replica empty requests", replica, "spec.engines[0].members[0].deviceRequests", [],
     ("spec.engines[0].members[0].deviceRequests", "at least 1 item")),
    ("replica cluster selector", replica, "spec.clusterSelector", {}, ("spec.clusterSelector", "unknown field")),
    ("replica phase without PD", replica, "spec.engines[0].phase", "Decode", ("spec.engines[0].phase", "only allowed")),
    # --- ModelService / ModelEndpoint ----------------------------------------------------------
    ("service weight max", service, "spec.endpoints[0].weight", 1000000, None),
    ("service weight over", service, "spec.endpoints[0].weight", 1000001, ("spec.endpoints[0].weight", "less than or equal to 1000000")),
    ("service weight zero", service, "spec.endpoints[0].weight", 0, ("spec.endpoints[0].weight", "greater than or equal to 1")),
    ("service no endpoints", service, "spec.endpoints", [], ("spec.endpoints", "at least 1 item")),
    ("service selector required", service, "spec.endpoints[0].selector", DELETE, ("spec.endpoints[0].selector", "required")),
    ("service matchLabels required", service, "spec.endpoints[0].selector", {}, ("spec.endpoints[0].selector.matchLabels", "required")),
    ("endpoint http ok", endpoint, "spec.url", "http://10.0.0.1/ml-team/x/v1", None),
    ("endpoint url required", endpoint, "spec.url", DELETE, ("spec.url", "required")),
    ("endpoint url scheme", endpoint, "spec.url", "api.example.com", ("spec.url", "must start with http:// or https://")),
    ("endpoint reserved label allowed", endpoint, "metadata.labels", {"modelplane.ai/external-provider": "together"}, None),
    # --- ModelCache ------------------------------------------------------------------------------
    ("cache revision ok", cache, "spec.huggingFace.revision", "main", None),
    ("cache bad source", cache, "spec.source", "S3", ("spec.source", "'HuggingFace'")),
    ("cache needs huggingFace", cache, "spec.huggingFace", DELETE, ("spec.huggingFace", "source HuggingFace needs the huggingFace block")),
    ("cache repo required", cache, "spec.huggingFace.repo", DELETE, ("spec.huggingFace.repo", "required")),
    ("cache size max", cache, "spec.huggingFace.sizeGiB", 100000, None),
    ("cache size over", cache, "spec.huggingFace.sizeGiB", 100001, ("spec.huggingFace.sizeGiB", "less than or equal to 100000")),
    ("cache size required", cache, "spec.huggingFace.sizeGiB", DELETE, ("spec.huggingFace.sizeGiB", "required")),
    ("cache auth name required", cache, "spec.huggingFace.authSecret", {"key": "T"}, ("spec.huggingFace.authSecret.name", "required")),
    # --- InferenceCluster ----------------------------------------------------------------------
    ("cluster gke ok", lambda: cluster(source="GKE"), "spec.cluster.gke.kubernetesVersion", "1.34", None),
    ("cluster bad source", cluster, "spec.cluster.source", "OpenShift", ("spec.cluster.source", "'GKE', 'EKS', 'AKS', 'Nebius', 'Vultr', 'Civo' or 'Existing'")),
    ("cluster existing needs block", cluster, "spec.cluster.existing", DELETE, ("spec.cluster.existing", "source Existing needs the existing block")),
    ("cluster gke needs block", cluster, "spec.cluster", {"source": "GKE"}, ("spec.cluster.gke", "source GKE needs the gke block")),
    ("cluster eks needs block", cluster, "spec.cluster", {"source": "EKS"}, ("spec.cluster.eks", "source EKS needs the eks block")),
    ("cluster aks needs block", cluster, "spec.cluster", {"source": "AKS"}, ("spec.cluster.aks", "source AKS needs the aks block")),
    ("cluster nebius needs block", cluster, "spec.cluster", {"source": "Nebius"}, ("spec.cluster.nebius", "source Nebius needs the nebius block")),
    ("cluster nebius empty ok", cluster, "spec.cluster", {"source": "Nebius", "nebius": {}}, None),
    ("cluster vultr needs block", cluster, "spec.cluster", {"source": "Vultr"}, ("spec.cluster.vultr", "source Vultr needs the vultr block")),
    ("cluster vultr ok", cluster, "spec.cluster", {"source": "Vultr", "vultr": {"region": "ewr"}}, None),
    ("cluster vultr needs region", cluster, "spec.cluster", {"source": "Vultr", "vultr": {}}, ("spec.cluster.vultr.region", "required")),
    ("cluster vultr pool needs a node", lambda: cloud_cluster("Vultr"), "spec.nodePools[0].nodeCount", 0, ("spec.nodePools[0].nodeCount", "Vultr node pools have at least one node")),
    ("cluster vultr autoscaler floor", lambda: cloud_cluster("Vultr"), "spec.nodePools[0].minNodeCount", 0, ("spec.nodePools[0].minNodeCount", "at least one node")),
    ("cluster vultr autoscaled ok", lambda: cloud_cluster("Vultr"), "spec.nodePools[0].maxNodeCount", 4, None),
    ("cluster vultr no spot", lambda: cloud_cluster("Vultr"), "spec.nodePools[0].spot", True, ("spec.nodePools[0].spot", "Vultr has no spot capacity")),
    ("cluster civo needs block", cluster, "spec.cluster", {"source": "Civo"}, ("spec.cluster.civo", "source Civo needs the civo block")),
    ("cluster civo ok", cluster, "spec.cluster", {"source": "Civo", "civo": {"region": "LON1"}}, None),
    ("cluster civo needs region", cluster, "spec.cluster", {"source": "Civo", "civo": {}}, ("spec.cluster.civo.region", "required")),
    ("cluster civo region empty", cluster, "spec.cluster", {"source": "Civo", "civo": {"region": ""}}, ("spec.cluster.civo.region", "at least 1 character")),
    ("cluster civo unknown field", cluster, "spec.cluster", {"source": "Civo", "civo": {"region": "LON1", "zone": "a"}}, ("spec.cluster.civo.zone", "unknown field")),
    ("cluster civo not autoscaled", lambda: cloud_cluster("Civo"), "spec.nodePools[0].maxNodeCount", 3, ("spec.nodePools[0].maxNodeCount", "Civo node pools are not autoscaled by this project yet")),
    ("cluster civo no zones", lambda: cloud_cluster("Civo"), "spec.nodePools[0].zones", ["lon1-a"], ("spec.nodePools[0].zones", "remove zones")),
    ("cluster civo no fabric", lambda: cloud_cluster("Civo"), "spec.nodePools[0].fabric", {"type": "InfiniBand", "infiniband": {"fabric": "f"}}, ("spec.nodePools[0].fabric", "no InfiniBand fabric")),
    ("cluster gke region required", cluster, "spec.cluster", {"source": "GKE", "gke": {}}, ("spec.cluster.gke.region", "required")),
    ("cluster gke region too long", cluster, "spec.cluster", {"source": "GKE", "gke": {"region": "r" * 33}}, ("spec.cluster.gke.region", "at most 32")),
    ("cluster secret name required", cluster, "spec.cluster.existing.secretRef", {"key": "k"}, ("spec.cluster.existing.secretRef.name", "required")),
    ("cluster addons verify ok", cluster, "spec.cluster.existing.addons", "Verify", None),
    ("cluster addons unknown", cluster, "spec.cluster.existing.addons", "Skip", ("spec.cluster.existing.addons", "'Install' or 'Verify'")),
    ("cluster addons on GKE refused", lambda: cluster(source="GKE"), "spec.cluster.existing",
     {"secretRef": {"name": "k"}, "addons": "Verify"}, ("spec.cluster.existing.addons", "only an Existing cluster's add-ons")),
    # optional here (the reference requires one): a pool-less cluster hosts the gateway and offers no capacity
    ("cluster no pools ok", cluster, "spec.nodePools", [], None),
    ("cluster nine pools", cluster, "spec.nodePools", [{"name": f"p{i}", "className": "l4"} for i in range(9)], ("spec.nodePools", "at most 8 items")),
    ("cluster duplicate pools", cluster, "spec.nodePools", [{"name": "p", "className": "l4"}] * 2, ("spec.nodePools[1]", "duplicate node pool name 'p'")),
    ("pool name 40 ok", cluster, "spec.nodePools[0].name", "p" * 40, None),
    ("pool name too long", cluster, "spec.nodePools[0].name", "p" * 41, ("spec.nodePools[0].name", "at most 40")),
    ("pool class required", cluster, "spec.nodePools[0].className", DELETE, ("spec.nodePools[0].className", "required")),
    ("pool zero nodes ok", cluster, "spec.nodePools[0].nodeCount", 0, None),
    ("pool negative nodes", cluster, "spec.nodePools[0].nodeCount", -1, ("spec.nodePools[0].nodeCount", "greater than or equal to 0")),
    ("pool max zero", cluster, "spec.nodePools[0].maxNodeCount", 0, ("spec.nodePools[0].maxNodeCount", "greater than or equal to 1")),
    ("pool min over max", cluster, "spec.nodePools[0]", {"name": "p", "className": "l4", "minNodeCount": 3, "maxNodeCount": 2},
     ("spec.nodePools[0].minNodeCount", "larger than maxNodeCount")),
    ("capacity block ok", cluster, "spec.nodePools[0].capacityBlock", {"capacityReservationId": "cr-0abc123"}, None),
    ("capacity block on GKE refused", lambda: cluster(source="GKE"), "spec.nodePools[0].capacityBlock",
     {"capacityReservationId": "cr-0abc123"}, ("spec.nodePools[0].capacityBlock", "EKS only")),
    ("GKE zones divide nodeCount", lambda: cluster(source="GKE"), "spec.nodePools[0]",
     {"name": "p", "className": "l4", "nodeCount": 4, "zones": ["us-central1-a", "us-central1-b"]}, None),
    ("GKE nodeCount not per zone", lambda: cluster(source="GKE"), "spec.nodePools[0]",
     {"name": "p", "className": "l4", "nodeCount": 3, "zones": ["us-central1-a", "us-central1-b"]},
     ("spec.nodePools[0].nodeCount", "cannot be split evenly")),
    ("GKE autoscaled pool any count", lambda: cluster(source="GKE"), "spec.nodePools[0]",
     {"name": "p", "className": "l4", "nodeCount": 3, "maxNodeCount": 5, "zones": ["us-central1-a", "us-central1-b"]}, None),
    ("capacity block bad id", cluster, "spec.nodePools[0].capacityBlock", {"capacityReservationId": "res-1"},
     ("spec.nodePools[0].capacityBlock.capacityReservationId", "pattern")),
    ("fabric efa ok", cluster, "spec.nodePools[0].fabric", {"type": "EFA"}, None),
    ("fabric bad type", cluster, "spec.nodePools[0].fabric", {"type": "RoCE"}, ("spec.nodePools[0].fabric.type", "'None', 'EFA' or 'InfiniBand'")),
    ("infiniband without type", cluster, "spec.nodePools[0].fabric", {"infiniband": {"fabric": "a"}},
     ("spec.nodePools[0].fabric.infiniband", "only allowed with fabric type InfiniBand")),
    ("nebius infiniband needs fabric", cluster, "spec", {"cluster": {"source": "Nebius", "nebius": {}},
                                                        "nodePools": [{"name": "p", "className": "l4", "fabric": {"type": "InfiniBand"}}]},
     ("spec.nodePools[0].fabric.infiniband", "InfiniBand fabric on Nebius needs fabric.infiniband")),
    ("taint ok", cluster, "spec.taints", [{"key": "a", "effect": "NoExecute"}], None),
    ("taint bad effect", cluster, "spec.taints", [{"key": "a", "effect": "PreferNoSchedule"}], ("spec.taints[0].effect", "'NoSchedule' or 'NoExecute'")),
    ("taint effect required", cluster, "spec.taints", [{"key": "a"}], ("spec.taints[0].effect", "required")),
    ("taints unique", cluster, "spec.taints", [{"key": "a", "effect": "NoSchedule"}] * 2, ("spec.taints[1]", "duplicate taint")),
    ("cluster status ok", cluster, "status", {"gateway": {"address": "1.2.3.4"}, "conditions": [{"type": "Ready", "status": "True"}]}, None),
    ("cluster status bad condition", cluster, "status", {"conditions": [{"type": "Ready", "status": "Yes"}]},
     ("status.conditions[0].status", "'True', 'False' or 'Unknown'")),
    # --- InferenceClass ------------------------------------------------------------------------
    ("class gke ok", lambda: gpu_class(provider="GKE"), "spec.provisioning.gke.diskSizeGb", 10, None),
    ("class gke disk too small", lambda: gpu_class(provider="GKE"), "spec.provisioning.gke.diskSizeGb", 9, ("spec.provisioning.gke.diskSizeGb", "greater than or equal to 10")),
    ("class gke needs accelerator", lambda: gpu_class(provider="GKE"), "spec.provisioning.gke.accelerator", DELETE, ("spec.provisioning.gke.accelerator", "required")),
    ("class gke needs machine", lambda: gpu_class(provider="GKE"), "spec.provisioning.gke.machineType", DELETE, ("spec.provisioning.gke.machineType", "required")),
    ("class accelerator count over", lambda: gpu_class(provider="GKE"), "spec.provisioning.gke.accelerator.count", 17, ("spec.provisioning.gke.accelerator.count", "less than or equal to 16")),
    ("class provider needs block", gpu_class, "spec.provisioning", {"provider": "EKS"}, ("spec.provisioning.eks", "provider EKS needs the eks block")),
    ("class aks needs block", gpu_class, "spec.provisioning", {"provider": "AKS"}, ("spec.provisioning.aks", "provider AKS needs the aks block")),
    ("class nebius needs preset", gpu_class, "spec.provisioning", {"provider": "Nebius", "nebius": {"platform": "gpu-h100-sxm"}}, ("spec.provisioning.nebius.preset", "required")),
    ("class vultr needs block", gpu_class, "spec.provisioning", {"provider": "Vultr"}, ("spec.provisioning.vultr", "provider Vultr needs the vultr block")),
    ("class vultr needs plan", gpu_class, "spec.provisioning", {"provider": "Vultr", "vultr": {}}, ("spec.provisioning.vultr.plan", "required")),
    ("class civo ok", gpu_class, "spec.provisioning", {"provider": "Civo", "civo": {"size": "an.g1.l40s.kube.x1", "accelerator": {"type": "l40s", "count": 1}}}, None),
    ("class civo needs block", gpu_class, "spec.provisioning", {"provider": "Civo"}, ("spec.provisioning.civo", "provider Civo needs the civo block")),
    ("class civo needs size", gpu_class, "spec.provisioning", {"provider": "Civo", "civo": {}}, ("spec.provisioning.civo.size", "required")),
    ("class civo accelerator count over", gpu_class, "spec.provisioning", {"provider": "Civo", "civo": {"size": "an.g1.l40s.kube.x1", "accelerator": {"type": "l40s", "count": 17}}}, ("spec.provisioning.civo.accelerator.count", "less than or equal to 16")),
    ("class civo accelerator needs type", gpu_class, "spec.provisioning", {"provider": "Civo", "civo": {"size": "an.g1.l40s.kube.x1", "accelerator": {"count": 1}}}, ("spec.provisioning.civo.accelerator.type", "required")),
    ("class bad provider", gpu_class, "spec.provisioning", {"provider": "OCI"}, ("spec.provisioning.provider", "'GKE', 'EKS', 'AKS', 'Nebius', 'Vultr' or 'Civo'")),
    ("class no devices", gpu_class, "spec.devices", [], ("spec.devices", "at least 1 item")),
    ("class dra needs device class", gpu_class, "spec.devices[0].deviceClassName", DELETE, ("spec.devices[0].deviceClassName", "claim DRA needs deviceClassName")),
    ("class synthetic without device class ok", gpu_class, "spec.devices[0]", {"name": "nic", "claim": "Synthetic", "driver": "ib"}, None),
    ("class bad claim", gpu_class, "spec.devices[0].claim", "Exclusive", ("spec.devices[0].claim", "'DRA' or 'Synthetic'")),
    ("class driver required", gpu_class, "spec.devices[0].driver", DELETE, ("spec.devices[0].driver", "required")),
    ("class device count over", gpu_class, "spec.devices[0].count", 65, ("spec.devices[0].count", "less than or equal to 64")),
    ("class duplicate devices", gpu_class, "spec.devices", [{"name": "g", "driver": "d", "claim": "Synthetic"}] * 2, ("spec.devices[1]", "duplicate device name 'g'")),
    ("attribute two values", gpu_class, "spec.devices[0].attributes.productName", {"string": "L4", "int": 4}, ("spec.devices[0].attributes.productName", "exactly one of")),
    ("attribute no value", gpu_class, "spec.devices[0].attributes.productName", {}, ("spec.devices[0].attributes.productName", "exactly one of")),
    ("attribute int ok", gpu_class, "spec.devices[0].attributes.sm", {"int": 132}, None),
    ("attribute bool ok", gpu_class, "spec.devices[0].attributes.mig", {"bool": False}, None),
    ("attribute version ok", gpu_class, "spec.devices[0].attributes.cc", {"version": "9.0.0"}, None),
    ("attribute version bad", gpu_class, "spec.devices[0].attributes.cc", {"version": "9.0"}, ("spec.devices[0].attributes.cc.version", "not a semantic version")),
    ("attribute unknown type", gpu_class, "spec.devices[0].attributes.cc", {"float": 1.5}, ("spec.devices[0].attributes.cc.float", "unknown field")),
    ("gke machine carries class gpus", lambda: gpu_class(provider="GKE"), "spec.provisioning.gke.machineType", "g2-standard-16", None),
    ("gke machine wrong count", lambda: gpu_class(provider="GKE"), "spec.provisioning.gke.accelerator.count", 2,
     ("spec.provisioning.gke.accelerator.count", "g2-standard-8 carries 1 GPU(s) per node, not 2")),
    ("gke machine wrong accelerator", lambda: gpu_class(provider="GKE"), "spec.provisioning.gke.machineType", "a3-highgpu-8g",
     ("spec.provisioning.gke.accelerator.type", "a3-highgpu-8g carries nvidia-h100-80gb, not nvidia-l4")),
    ("eks instance vs devices", lambda: gpu_class(provider="EKS"), "spec.provisioning.eks.instanceType", "g6.2xlarge", None),
    ("eks instance publishes wrong devices", lambda: gpu_class(provider="EKS"), "spec.provisioning.eks.instanceType", "p5.48xlarge",
     ("spec.provisioning.eks.instanceType", "p5.48xlarge carries 8 GPU(s) per node, but the class's devices publish 1")),
    ("capacity int ok", gpu_class, "spec.devices[0].capacity.memory.value", 8, None),
    ("capacity bad quantity", gpu_class, "spec.devices[0].capacity.memory.value", "80GB", ("spec.devices[0].capacity.memory.value", "invalid quantity")),
    ("capacity value required", gpu_class, "spec.devices[0].capacity.memory", {}, ("spec.devices[0].capacity.memory.value", "required")),
    # --- InferenceGateway ----------------------------------------------------------------------
    ("gateway metallb ok", gateway, "spec.traefik", {"version": "40.2.0", "loadBalancer": "MetalLB", "metallb": {"addressPool": "10.0.0.1-10.0.0.9"}}, None),
    ("gateway needs traefik", gateway, "spec.traefik", DELETE, ("spec.traefik", "backend Traefik needs the traefik block")),
    ("gateway metallb needs block", gateway, "spec.traefik", {"version": "1", "loadBalancer": "MetalLB"}, ("spec.traefik.metallb", "loadBalancer MetalLB needs the metallb block")),
    ("gateway bad backend", gateway, "spec.backend", "Istio", ("spec.backend", "'Traefik' or 'Envoy'")),
    ("gateway traefik block only for traefik", gateway, "spec.backend", "Envoy", ("spec.traefik", "the traefik block is for backend Traefik")),
    ("gateway version required", gateway, "spec.traefik", {}, ("spec.traefik.version", "required")),
    ("gateway namespace ignored", gateway, "metadata.namespace", "anything", None),
]


PROVISIONING = {"GKE": None, "EKS": None,
                "AKS": {"provider": "AKS", "aks": {"vmSize": "Standard_NV36ads_A10_v5"}},
                "Nebius": {"provider": "Nebius", "nebius": {"platform": "gpu-l40s-a", "preset": "1gpu-8vcpu-32gb"}},
                "Vultr": {"provider": "Vultr", "vultr": {"plan": "vcg-l40s-16c-180g-48vram"}},
                "Civo": {"provider": "Civo", "civo": {"size": "an.g1.l40s.kube.x1"}}}
CLOUD_BLOCKS = {"Vultr": {"vultr": {"region": "ewr"}}, "Civo": {"civo": {"region": "LON1"}}}


def cloud_cluster(source: str) -> dict:
    """A Vultr or Civo cluster with one pool of class l4 (given by `support`)."""
    ic = cluster()
    ic["spec"]["cluster"] = {"source": source, **CLOUD_BLOCKS[source]}
    return ic


def support(obj: dict) -> list[dict]:
    """A provisioned cluster's pools need their class (a missing one is an error): give them one for its cloud."""
    if obj["kind"] != "InferenceCluster":
        return []
    source = obj["spec"].get("cluster", {}).get("source")
    if source not in PROVISIONING:
        return []
    icl = gpu_class(provider=source if source in ("GKE", "EKS") else None)
    if PROVISIONING[source]:
        icl["spec"]["provisioning"] = PROVISIONING[source]
    return [icl]


@pytest.mark.parametrize("factory,path,value,expected", [r[1:] for r in ROWS], ids=[r[0] for r in ROWS])
def test_rule(factory, path, value, expected):
    base = factory()
    assert errors(base, *support(base)) == [], "the base manifest itself must be valid"
    mutated = mutate(base, path, value)
    found = [e for e in errors(mutated, *support(mutated))]
    if expected is None:
        assert found == []
    else:
        field, fragment = expected
        matching = [f for f in found if f.startswith(field + ":") and fragment in f]
        assert matching, f"expected an error at {field} containing {fragment!r}, got {found}"


def test_rules_table_has_both_outcomes_for_every_kind():
    kinds = {}
    for _, factory, _, _, expected in ROWS:
        kinds.setdefault(factory()["kind"], set()).add(expected is None)
    assert all(outcomes == {True, False} for outcomes in kinds.values()), kinds
    assert len(kinds) == 8
