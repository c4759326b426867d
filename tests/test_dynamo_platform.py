"""The Dynamo path end to end: one pinned release (its CRDs bundled), Grove and the ClusterTopology the graphs name,
KV offload and weight streaming, and `InferenceCluster.spec.stack` (the reference's PR #406)."""

from __future__ import annotations

import copy
import pathlib

import pytest
import yaml

from automation.checks.deployability import check_fleet
from automation.checks.offline import unwrap
from automation.checks.offline_preview import all_stacks
from components.versions import CHARTS, DYNAMO_CRDS_RELEASE, MODEL_EXPRESS_IMAGE
from fleet.scheduler import schedule
from tests.manifests import cluster, deployment, errors, gpu_class, member, run, example_documents
from tests.rendering import find, one, rendered
from workloads import dynamo_platform
from workloads.schemas import check

ROOT = pathlib.Path(__file__).resolve().parent.parent
UPSTREAM = ROOT / "workloads" / "crds" / "upstream"
DYN = "nvcr.io/nvidia/ai-dynamo/vllm-runtime:1.2.1"
CLIQUE = "nvidia.com/gpu.clique"
HOST = "kubernetes.io/hostname"


def h100(name="h100", topology: dict | None = None, provider: str | None = None) -> dict:
    klass = gpu_class(name, 8, "81559Mi", "NVIDIA H100", "Hopper", provider=provider)
    if topology is not None:
        klass["spec"]["topology"] = topology
    return klass


def gang(name="big", image=DYN, capabilities=(), annotations=None, engines_mode=None) -> dict:
    members = [member("Leader", gpus=8, image=image), member("Worker", gpus=8, nodes=1, image=image)]
    md = deployment(name, engines=[{"name": "e", "copies": 1, "members": members,
                                    **({"capabilities": list(capabilities)} if capabilities else {})}])
    if annotations:
        md["metadata"]["annotations"] = annotations
    return md


def dynamo_cluster(name="a", pools=(("h", "h100", 2),), stack: str | None = "Dynamo", **kw) -> dict:
    ic = cluster(name, pools=pools, **kw)
    if stack is not None:
        ic["spec"]["stack"] = stack
    return ic


# ---- one release, end to end ---------------------------------------------------------------------------------

def served(path: pathlib.Path) -> set[str]:
    crd = yaml.safe_load(path.read_text())
    return {f"{crd['spec']['group']}/{v['name']}" for v in crd["spec"]["versions"] if v.get("served")}


def test_the_pinned_chart_is_the_release_of_the_bundled_crds():
    chart = CHARTS["dynamo"]
    assert (chart.chart, chart.version) == ("dynamo-platform", DYNAMO_CRDS_RELEASE)
    notice = (UPSTREAM / "NOTICE.md").read_text()
    [row] = [line for line in notice.splitlines() if line.startswith("| nvidia.com_dynamographdeployments.yaml |")]
    assert f"release v{DYNAMO_CRDS_RELEASE}" in row
    # what the deployability check says the release serves is what its CRDs serve
    graphs = served(UPSTREAM / "nvidia.com_dynamographdeployments.yaml")
    assert graphs == {"nvidia.com/v1alpha1", "nvidia.com/v1beta1"} == {v for v in chart.serves if v.startswith("nvidia.com/")}
    assert served(UPSTREAM / "grove.io_clustertopologies.yaml") <= set(chart.serves)
    # its CRDs come with the release (Helm's crds/ on first install), not from another chart
    assert not chart.skip_crds and ("grove.io", "ClusterTopology") in chart.crds
    assert "dynamo-crds" not in CHARTS


@pytest.mark.parametrize("mode", ["aggregated", "disaggregated", "multinode"])
def test_rendered_graphs_validate_against_the_pinned_release(mode):
    klass = h100(topology={"nvlinkDomainLabel": CLIQUE})
    if mode == "multinode":
        md = gang(capabilities=["NVLinkDomain", "KVOffload"])
    else:
        engines = [{"name": "vllm", "members": [member(gpus=1, image=DYN)], "capabilities": ["KVOffload"]}]
        if mode == "disaggregated":
            engines = [{"name": phase, "phase": phase.capitalize(), "members": [member(gpus=1, image=DYN)],
                        "capabilities": ["KVOffload"]} for phase in ("prefill", "decode")]
        md = deployment("svc", engines=engines,
                        **({"serving": {"mode": "PrefillDecode"}} if mode == "disaggregated" else {}))
    _, result = rendered(klass, cluster("a", pools=(("h", "h100", 2),)), md)
    graph = one(result, "DynamoGraphDeployment")
    assert graph["apiVersion"] == "nvidia.com/v1beta1" and check(graph) == []


def test_a_graph_of_a_version_the_release_does_not_serve_is_refused(tmp_path):
    """The deployability check's rule, on a whole fleet: the pinned 1.2.1 serves v1beta1 graphs (0.6.1 did not)."""
    fleet = run(h100(topology={"nvlinkDomainLabel": CLIQUE}), dynamo_cluster(),
                gang(capabilities=["NVLinkDomain"])).fleet
    previews = all_stacks(fleet, "a")
    assert [str(v) for v in check_fleet(fleet, previews)] == []
    previews = copy.deepcopy(previews)  # previews are memoized: change a copy
    for preview in previews:
        for r in preview.resources:
            if r.type == "kubernetes:nvidia.com/v1beta1:DynamoGraphDeployment":
                r.type = "kubernetes:nvidia.com/v1beta2:DynamoGraphDeployment"
    refused = [str(v) for v in check_fleet(fleet, previews)]
    assert len(refused) == 1 and "DynamoGraphDeployment nvidia.com/v1beta2 is not served on a (its CRD serves " \
        "nvidia.com/v1alpha1, nvidia.com/v1beta1)" in refused[0]


# ---- Grove and topology --------------------------------------------------------------------------------------

def platform_of(previews, cluster_name="a"):
    [stack] = [p for p in previews if p.name == f"platform-{cluster_name}"]
    return stack.resources


# What the pinned chart makes of the release's values, read from dynamo-platform 1.2.1 and its Grove subchart
# (grove-charts v0.1.0-alpha.8, as aenix-org/package-nvidia-dynamo e221b354 vendors both) and from ai-dynamo/grove at
# v0.1.0-alpha.8. Neither chart has a values.schema.json: these are their templates' and Grove's own rules.
GROVE_ALIAS = "grove"  # dynamo-platform Chart.yaml: grove-charts v0.1.0-alpha.8, alias grove, if global.grove.install
GROVE_CONFIG_DEFAULTS = {"topologyAwareScheduling": {"enabled": False}}  # grove-charts values.yaml `config`
REMOVED_VALUES = [("grove", "enabled"), ("nats", "enabled"), ("etcd", "enabled"), ("kai-scheduler", "enabled")]
GROVE_DOMAINS = ("region", "zone", "datacenter", "block", "rack", "host", "numa")  # topologyDomainOrder, broadest first
GROVE_TOPOLOGY = "grove-topology"  # DefaultClusterTopologyName: the only ClusterTopology alpha.8 makes and reads


def coalesced(defaults: dict, values: dict) -> dict:
    """Helm's merge of a release's values over a chart's: maps merge key by key, anything else replaces."""
    out = dict(defaults)
    for key, value in values.items():
        out[key] = coalesced(out[key], value) if isinstance(value, dict) and isinstance(out.get(key), dict) else value
    return out


def grove_tas(values: dict) -> dict:
    """`topologyAwareScheduling` of Grove's OperatorConfiguration as grove-charts' `operator.config.data` template
    renders it from the release's values: `enabled`, and each level's `domain` and `key` (nothing else of a level)."""
    tas = coalesced({"config": GROVE_CONFIG_DEFAULTS}, values.get(GROVE_ALIAS, {}))["config"]["topologyAwareScheduling"]
    out = {"enabled": tas["enabled"]}
    if tas.get("levels"):
        out["levels"] = [{"domain": level["domain"], "key": level["key"]} for level in tas["levels"]]
    return out


def grove_refuses(tas: dict) -> list[str]:
    """Grove's configuration validation (operator/api/config/validation): with it on, levels are required, each a
    known domain, domains and keys unique. A refused configuration stops the operator at start."""
    if not tas["enabled"]:
        return []
    levels = tas.get("levels", [])
    out = ["levels are required when topology is enabled"] if not levels else []
    out += [f"unknown domain {level['domain']}" for level in levels if level["domain"] not in GROVE_DOMAINS]
    for field in ("domain", "key"):
        seen = [level[field] for level in levels]
        out += [f"duplicate {field} {v}" for v in sorted({v for v in seen if seen.count(v) > 1})]
    return out


def grove_topology(tas: dict) -> dict | None:
    """The ClusterTopology Grove makes at start from its configuration (internal/clustertopology): `grove-topology`,
    its levels sorted broadest first; none (deleted) while topology-aware scheduling is off."""
    if not tas["enabled"]:
        return None
    levels = sorted(tas["levels"], key=lambda level: GROVE_DOMAINS.index(level["domain"]))
    return {"apiVersion": "grove.io/v1alpha1", "kind": "ClusterTopology", "metadata": {"name": GROVE_TOPOLOGY},
            "spec": {"levels": levels}}


def pack_domains(graph: dict) -> list[str]:
    spec = graph["spec"]
    return [c["topologyConstraint"]["packDomain"] for c in [spec, *spec["components"]]
            if "packDomain" in c.get("topologyConstraint", {})]


ZONE, RACK = "topology.kubernetes.io/zone", "example.com/rack"


@pytest.mark.parametrize("topology,capabilities,levels", [
    (None, (), []),  # no class declares one: Grove keeps its default, off, and no graph asks for a domain
    ({"nvlinkDomainLabel": CLIQUE}, ["NVLinkDomain"], [("zone", ZONE), ("block", CLIQUE), ("host", HOST)]),
    ({"nvlinkDomainLabel": CLIQUE, "rackLabel": RACK, "zoneLabel": "example.com/zone"}, ["NVLinkDomain", "KVOffload"],
     [("zone", "example.com/zone"), ("block", CLIQUE), ("rack", RACK), ("host", HOST)]),
    ({"rackLabel": RACK}, [], [("zone", ZONE), ("rack", RACK), ("host", HOST)]),  # levels, but nothing packed
], ids=["none", "nvlink", "nvlink-rack-zone", "rack-only"])
def test_grove_is_configured_with_the_fleets_levels_and_reads_the_topology_the_graphs_name(topology, capabilities,
                                                                                            levels):
    """The platform's values turn Grove's topology-aware scheduling on with the cluster's levels where its classes
    declare some: the pinned Grove (v0.1.0-alpha.8) then makes `grove-topology` from them, the one ClusterTopology it
    reads, and admits the graphs' packDomains; with it off (the chart's default) it refuses any topology constraint.
    Checked against the chart's templates and Grove's rules (above), and Grove's ClusterTopology against its CRD."""
    annotations = None if capabilities else {"modelplane.ai/backend": "dynamo"}
    fleet = run(h100(topology=topology), cluster("a", pools=(("h", "h100", 2),)),
                gang(capabilities=capabilities, annotations=annotations)).fleet
    previews = all_stacks(fleet, "a")
    resources = platform_of(previews)
    [release] = [r for r in resources if r.type == "kubernetes:helm.sh/v3:Release" and r.inputs["name"] == "mp-dynamo"]
    values = unwrap(release.inputs)["values"]
    assert values["global"]["grove"] == {"install": True}  # the subchart is installed, so its values apply
    assert not [f"{a}.{b}" for a, b in REMOVED_VALUES if b in values.get(a, {})]  # the chart's validate-values
    tas = grove_tas(values)
    assert tas == ({"enabled": True, "levels": [{"domain": d, "key": k} for d, k in levels]} if levels
                   else {"enabled": False})
    assert grove_refuses(tas) == []
    made = grove_topology(tas)
    assert made is None if not levels else check(made) == []  # Grove's own CRD (grove.io_clustertopologies.yaml)
    # the graphs name that topology, and pack only into domains it has (Dynamo's webhook and Grove's check both)
    graphs = [unwrap(r.inputs) for p in previews for r in p.resources if r.type.endswith(":DynamoGraphDeployment")]
    assert len(graphs) == 1
    [graph] = graphs
    if "NVLinkDomain" in capabilities:
        assert graph["spec"]["topologyConstraint"] == {"clusterTopologyName": GROVE_TOPOLOGY}
        assert made is not None and set(pack_domains(graph)) == {"block"} <= {lv["domain"] for lv in made["spec"]["levels"]}
    else:
        assert "topologyConstraint" not in graph["spec"] and pack_domains(graph) == []
    # Grove owns its ClusterTopology: no stack creates one (one of another name would be ignored)
    assert not [r for p in previews for r in p.resources if r.type.endswith(":ClusterTopology")]
    assert [str(v) for v in check_fleet(fleet, previews)] == []


@pytest.mark.parametrize("tas,refused", [
    ({"enabled": True}, ["levels are required when topology is enabled"]),
    ({"enabled": True, "levels": [{"domain": "block", "key": CLIQUE}, {"domain": "rack", "key": CLIQUE}]},
     [f"duplicate key {CLIQUE}"]),
    ({"enabled": True, "levels": [{"domain": "nvlink", "key": CLIQUE}]}, ["unknown domain nvlink"]),
    ({"enabled": False}, []),
])
def test_the_rules_the_values_are_held_to_refuse_what_grove_refuses(tas, refused):
    assert grove_refuses(tas) == refused


def test_nvlink_packing_with_no_pool_declaring_a_domain_is_a_validate_error_naming_the_pool():
    found = errors(h100(), cluster("a", pools=(("h", "h100", 2),)), gang(capabilities=["NVLinkDomain"]))
    assert found == ["spec.template.spec.engines[0].capabilities: engine e is packed into one NVLink domain "
                     "(NVLinkDomain), but no pool's class declares one: a/h (class h100) (set "
                     "spec.topology.nvlinkDomainLabel on the InferenceClass, e.g. nvidia.com/gpu.clique)"]


def test_placement_keeps_nvlink_engines_on_pools_whose_class_names_the_domain():
    loaded = run(h100("plain"), h100("nvl", topology={"nvlinkDomainLabel": CLIQUE}),
                 cluster("a", pools=(("p", "plain", 4),)), cluster("b", pools=(("n", "nvl", 2),)),
                 gang(capabilities=["NVLinkDomain"]))
    assert loaded.errors == []
    plan = schedule(loaded.fleet)
    assert [(r.cluster, r.placement.engines[0].pool) for r in plan.replicas] == [("b", "n")]
    # two replicas: b is full after one, and a's pool says why it cannot take the other
    two = gang(capabilities=["NVLinkDomain"])
    two["spec"]["replicas"] = 2
    loaded = run(h100("plain"), h100("nvl", topology={"nvlinkDomainLabel": CLIQUE}),
                 cluster("a", pools=(("p", "plain", 4),)), cluster("b", pools=(("n", "nvl", 2),)), two)
    [short] = schedule(loaded.fleet).unscheduled
    assert any("engine e is packed into one NVLink domain (NVLinkDomain), but class plain of this pool declares "
               "none (spec.topology.nvlinkDomainLabel)" in reason for reason in short.reasons), short.reasons


@pytest.mark.parametrize("topology,field,message", [
    ({"nvlinkDomainLabel": "not a label"}, "nvlinkDomainLabel", "is not a qualified name"),
    ({"rackLabel": "example.com/" + "r" * 60}, "rackLabel", "longer than 63 characters"),
])
def test_topology_labels_are_label_keys(topology, field, message):
    found = errors(h100(topology=topology))
    assert len(found) == 1 and found[0].startswith(f"spec.topology.{field}: ") and message in found[0]


def test_one_cluster_topology_cannot_hold_two_labels_for_one_domain():
    found = errors(h100("x", topology={"nvlinkDomainLabel": CLIQUE}),
                   h100("y", topology={"nvlinkDomainLabel": "example.com/nvl"}),
                   cluster("a", pools=(("p", "x", 1), ("q", "y", 1))))
    assert found == ["spec.nodePools: classes x and y name different labels for the block domain "
                     "('nvidia.com/gpu.clique', 'example.com/nvl'); one ClusterTopology serves the cluster"]


# ---- KV offload and weight streaming -------------------------------------------------------------------------

def single(capabilities, env=None) -> dict:
    m = member(gpus=1, image=DYN)
    if env:
        m["template"]["spec"]["containers"][0]["env"] = [{"name": k, "value": v} for k, v in env.items()]
    return deployment("svc", engines=[{"name": "vllm", "members": [m], "capabilities": list(capabilities)}])


def test_kv_offload_gives_kvbm_its_disk_and_host_memory():
    env = {"DYN_KVBM_CPU_CACHE_GB": "100", "DYN_KVBM_DISK_CACHE_GB": "500"}
    _, offloaded = rendered(h100(), cluster("a", pools=(("h", "h100", 1),)), single(["KVOffload"], env))
    _, plain = rendered(h100(), cluster("a", pools=(("h", "h100", 1),)),
                        single([], env) | {"metadata": {"name": "svc", "namespace": "ml-team",
                                                        "annotations": {"modelplane.ai/backend": "dynamo"}}})
    worker = one(offloaded, "DynamoGraphDeployment")["spec"]["components"][1]["podTemplate"]
    main = worker["spec"]["containers"][0]
    assert {"name": "kvbm-cache", "emptyDir": {"sizeLimit": "500Gi"}} in worker["spec"]["volumes"]
    assert {"name": "kvbm-cache", "mountPath": "/kvbm-cache"} in main["volumeMounts"]
    assert main["resources"]["requests"] == {"memory": "200Gi"}  # twice the CPU tier, as Dynamo's example
    unchanged = one(plain, "DynamoGraphDeployment")["spec"]["components"][1]["podTemplate"]
    assert "requests" not in unchanged["spec"]["containers"][0]["resources"]
    assert not [v for v in unchanged["spec"]["volumes"] if v["name"] in ("kvbm-cache", "udev")]
    assert check(one(offloaded, "DynamoGraphDeployment")) == []


def test_weight_streaming_runs_model_express_on_the_cluster_and_points_the_operator_at_it():
    def platform(*objects):
        fleet = run(h100(), cluster("a", pools=(("h", "h100", 2),)), *objects).fleet
        return platform_of(all_stacks(fleet, "a")), fleet

    streaming, fleet = platform(single(["WeightStreaming"]))
    without, _ = platform(single(["KVOffload"]))
    values = unwrap(next(r for r in streaming if r.inputs.get("name") == "mp-dynamo").inputs)["values"]
    assert values["dynamo-operator"]["modelExpressURL"] == \
        "http://modelexpress-server.dynamo-system.svc.cluster.local:8001"
    [server] = [r for r in streaming if r.type == "kubernetes:apps/v1:Deployment" and r.name.endswith("model-express")]
    assert server.inputs["spec"]["template"]["spec"]["containers"][0]["image"] == MODEL_EXPRESS_IMAGE
    assert [r for r in streaming if r.type == "kubernetes:core/v1:Service" and r.name.endswith("model-express")]
    assert not [r for r in without if r.name.endswith("model-express")]
    assert "modelExpressURL" not in unwrap(next(r for r in without if r.inputs.get("name") == "mp-dynamo").inputs)[
        "values"]["dynamo-operator"]
    for manifest in dynamo_platform.model_express_objects(MODEL_EXPRESS_IMAGE):
        assert check(manifest) == []
    assert [str(v) for v in check_fleet(fleet, all_stacks(fleet, "a"))] == []


# ---- spec.stack ----------------------------------------------------------------------------------------------

@pytest.mark.parametrize("stack", ["Standard", "Dynamo", None])
def test_spec_stack_is_accepted(stack):
    assert errors(h100(), dynamo_cluster(stack=stack)) == []


def test_spec_stack_refuses_other_values():
    found = errors(h100(), dynamo_cluster(stack="Grove"))
    assert len(found) == 1 and found[0].startswith("spec.stack: ")


def test_a_dynamo_cluster_installs_the_platform_even_without_nvidia_pools():
    amd = gpu_class("mi300", 8, "196Gi", "AMD Instinct MI300X", "CDNA3")
    amd["spec"]["devices"][0]["driver"] = amd["spec"]["devices"][0]["deviceClassName"] = "gpu.amd.com"
    for stack, installed in (("Standard", False), ("Dynamo", True)):
        fleet = run(amd, dynamo_cluster(pools=(("m", "mi300", 1),), stack=stack)).fleet
        releases = {r.inputs["name"] for r in platform_of(all_stacks(fleet, "a"))
                    if r.type == "kubernetes:helm.sh/v3:Release"}
        assert ("mp-dynamo" in releases) is installed
        # ModelExpress is part of a Dynamo cluster's stack (PR #406)
        assert bool([r for r in platform_of(all_stacks(fleet, "a")) if r.name.endswith("model-express")]) is installed


@pytest.mark.parametrize("stack,image,annotations,kind", [
    ("Standard", DYN, None, "LeaderWorkerSet"),
    ("Dynamo", DYN, None, "DynamoGraphDeployment"),  # Dynamo (with Grove) serves the gang there
    ("Dynamo", "vllm/vllm-openai:v0.11.0", None, "LeaderWorkerSet"),  # not a Dynamo runtime: LWS is on every cluster
    ("Dynamo", DYN, {"modelplane.ai/backend": "llm-d"}, "LeaderWorkerSet"),  # forced
])
def test_a_dynamo_cluster_serves_multi_node_engines_with_dynamo(stack, image, annotations, kind):
    plan, result = rendered(h100(), dynamo_cluster(stack=stack), gang(image=image, annotations=annotations))
    assert len(find(result, kind)) == 1
    other = {"LeaderWorkerSet": "DynamoGraphDeployment", "DynamoGraphDeployment": "LeaderWorkerSet"}[kind]
    assert not find(result, other)
    [replica] = plan.replicas
    assert replica.backends[0][1] == ("dynamo" if kind == "DynamoGraphDeployment" else "llm-d")
    if kind == "DynamoGraphDeployment":
        graph = one(result, "DynamoGraphDeployment")
        assert graph["spec"]["components"][1]["multinode"] == {"nodeCount": 2} and check(graph) == []


def test_single_pod_engines_on_a_dynamo_cluster_stay_native():
    _, result = rendered(h100(), dynamo_cluster(), deployment("one", engines=[
        {"name": "vllm", "members": [member(gpus=1, image=DYN)]}]))
    assert [d["metadata"]["name"] for d in find(result, "Deployment") if "-vllm-" in d["metadata"]["name"]]
    assert not find(result, "DynamoGraphDeployment") and not find(result, "LeaderWorkerSet")



# ---- compared with Dynamo's own recipes ----------------------------------------------------------------------

# The structure of the DynamoGraphDeployments Dynamo publishes (the ai-dynamo 1.6.1 wheel's
# dynamo/profiler/templates/dgd/<framework>/<mode>.yaml, and the multinode shape of its multinode guide): a
# `frontend` component running `python3 -m dynamo.frontend`, and worker components of these types running
# `python3 -m dynamo.<framework>` in a container named `main`, one replica each.
RECIPES = [  # (framework, image, mode, worker component types)
    ("vllm", "vllm-runtime", "agg", ["worker"]),
    ("vllm", "vllm-runtime", "disagg", ["decode", "prefill"]),
    ("sglang", "sglang-runtime", "agg", ["worker"]),
    ("sglang", "sglang-runtime", "disagg", ["decode", "prefill"]),
    ("trtllm", "tensorrtllm-runtime", "agg", ["worker"]),
    ("trtllm", "tensorrtllm-runtime", "disagg", ["decode", "prefill"]),
    ("vllm", "vllm-runtime", "multinode", ["worker"]),
]
# What this project adds to a recipe's pod, and nothing else: the pool pin, GPU taint tolerations, the DRA claim
# (in place of the recipe's nvidia.com/gpu limit), /dev/shm; labels on the pod.
ADDED_POD_FIELDS = {"nodeSelector", "tolerations", "resourceClaims", "volumes"}
ADDED_CONTAINER_FIELDS = {"volumeMounts", "resources"}


def recipe_deployment(framework: str, image: str, mode: str) -> dict:
    def engine(name: str, phase: str | None, extra: list[str], role="Standalone", nodes=None) -> dict:
        m = member(role, gpus=1 if nodes is None else 8, image=f"nvcr.io/nvidia/ai-dynamo/{image}:1.6.1", nodes=nodes)
        m["template"]["spec"]["containers"][0].update(
            command=["python3", "-m", f"dynamo.{framework}"], args=["--model", "Qwen/Qwen3-0.6B", *extra])
        out = {"name": name, "members": [m]}
        if phase:
            out["phase"] = phase
        return out

    annotations = {"modelplane.ai/backend": "dynamo"}
    if mode == "agg":
        md = deployment("recipe", engines=[engine("worker", None, [])])
    elif mode == "disagg":
        md = deployment("recipe", engines=[engine(p, p.capitalize(), ["--disaggregation-mode", p])
                                           for p in ("prefill", "decode")], serving={"mode": "PrefillDecode"})
    else:
        leader = engine("worker", None, [])
        worker = engine("w", None, [], role="Worker", nodes=1)["members"][0]
        leader["members"][0] = member("Leader", gpus=8, image=leader["members"][0]["template"]["spec"]["containers"][0]["image"])
        leader["members"][0]["template"]["spec"]["containers"][0].update(
            command=["python3", "-m", f"dynamo.{framework}"], args=["--model", "Qwen/Qwen3-0.6B"])
        leader["members"].append(worker)
        md = deployment("recipe", engines=[leader])
    md["metadata"]["annotations"] = annotations
    return md


@pytest.mark.parametrize("framework,image,mode,types", RECIPES, ids=[f"{r[0]}-{r[2]}" for r in RECIPES])
def test_graphs_have_the_structure_of_dynamos_recipes(framework, image, mode, types):
    md = recipe_deployment(framework, image, mode)
    _, result = rendered(h100(), cluster("a", pools=(("h", "h100", 2),)), md)
    graph = one(result, "DynamoGraphDeployment")
    assert check(graph) == []
    frontend, *workers = graph["spec"]["components"]
    assert (frontend["type"], frontend["replicas"]) == ("frontend", 1)
    [front] = frontend["podTemplate"]["spec"]["containers"]
    assert front["name"] == "main" and [*front["command"], *front["args"]][:3] == ["python3", "-m", "dynamo.frontend"]
    assert sorted(w["type"] for w in workers) == types
    engines = {e["name"]: e for e in md["spec"]["template"]["spec"]["engines"]}
    for w in workers:
        spec = w["podTemplate"]["spec"]
        [main] = spec["containers"]
        user = engines[w["name"]]["members"][0]["template"]["spec"]["containers"][0]
        # the engine's container is the user's (image, command and args as written), named `main` as in the recipes
        assert main["name"] == "main"
        assert {k: main[k] for k in ("image", "command", "args")} == {k: user[k] for k in ("image", "command", "args")}
        assert w["replicas"] == 1
        assert set(spec) - {"containers"} <= ADDED_POD_FIELDS
        assert set(main) - {"name", "image", "command", "args", "env"} <= ADDED_CONTAINER_FIELDS
        assert main["resources"] == {"claims": [{"name": "devices"}]} and spec["nodeSelector"] == {"modelplane.ai/pool": "h"}
        if mode == "multinode":
            assert w["multinode"] == {"nodeCount": 2}
        else:
            assert "multinode" not in w
    # the recipes leave backendFramework to the operator's inference; it is set here from the image
    assert graph["spec"]["backendFramework"] == framework


EXAMPLES = example_documents()  # examples/, less its v0.3.1 variant (tests/manifests.py)


def _examples(qwen_image: str | None = None):
    """The example fleet (NVIDIA pools on every cluster, no Dynamo replica), with qwen3-8b's engine image replaced
    (a Dynamo runtime's: served by Dynamo, as its annotation asks)."""
    docs = copy.deepcopy(EXAMPLES)
    if qwen_image is not None:
        md = next(d for d in docs if d["kind"] == "ModelDeployment" and d["metadata"]["name"] == "qwen3-8b")
        if qwen_image == DYN:
            md["metadata"].setdefault("annotations", {})["modelplane.ai/backend"] = "dynamo"
        for engine in md["spec"]["template"]["spec"]["engines"]:
            for m in engine["members"]:
                for c in m["template"]["spec"]["containers"]:
                    c["image"] = qwen_image
    loaded = run(*docs)
    assert not loaded.errors, loaded.errors
    return loaded.fleet


def _releases(spec, fleet) -> set[str]:
    from automation.execution.programs import program_for, stack_config
    from automation.checks.offline import run as run_program

    kubeconfig = {"modelplane:byo-eu-kubeconfig": "apiVersion: v1\nkind: Config\n"}  # the Existing cluster's
    resources = run_program(program_for(spec, fleet), "modelplane", spec.name, {**stack_config(spec), **kubeconfig},
                            list(kubeconfig))
    return {unwrap(r.inputs)["name"] for r in resources if r.type == "kubernetes:helm.sh/v3:Release"}


def test_the_dynamo_platform_goes_where_dynamo_replicas_are_and_stays_while_they_are_applied():
    """Not on every cluster with an NVIDIA pool (an Existing cluster's owners did not ask for Dynamo's operator,
    Grove and KAI): where a Dynamo-served replica is placed, until the record no longer has one there."""
    from automation.planning.plan_cache import PlanCache
    from automation.planning.stacks import desired_state
    from fleet.plan import dynamo_clusters

    plain = _examples()
    before = desired_state(plain, cache=PlanCache(known={}))
    assert not dynamo_clusters(before.plan)
    assert not [n for n, s in before.specs.items() if s.kind == "platform" and s.payload.cluster.needs_dynamo]
    assert "mp-dynamo" not in _releases(before.specs["platform-byo-eu"], plain)  # Existing, NVIDIA pools

    served = _examples(DYN)  # qwen3-8b is Dynamo-served now
    after = desired_state(served, cache=PlanCache(known={}))
    placed = dynamo_clusters(after.plan)
    assert placed and placed <= {"eks-us-west", "gke-us-central"}
    assert after.platform.inputs != before.platform.inputs  # the platform stacks' cache digest sees it
    for name in ("byo-eu", "eks-us-west", "gke-us-central"):
        was, now = before.specs[f"platform-{name}"], after.specs[f"platform-{name}"]
        assert now.payload.cluster.needs_dynamo == (name in placed)
        assert (now.fingerprint != was.fingerprint) == (name in placed), name
    cluster = sorted(placed)[0]
    assert "mp-dynamo" in _releases(after.specs[f"platform-{cluster}"], served)

    # qwen3-8b no longer Dynamo-served: while its Dynamo replicas are still applied (the record), the platform stays
    # (its model stack is updated after the platform stacks: its graphs must not lose their controller first) ...
    applied = [r.recorded() for r in after.plan.replicas]
    assert {r.cluster for r in applied if r.dynamo} == placed
    left = _examples("vllm/vllm-openai:v0.11.0")
    leaving = desired_state(left, applied)
    assert dynamo_clusters(leaving.plan, applied) == placed
    assert leaving.specs[f"platform-{cluster}"].fingerprint == after.specs[f"platform-{cluster}"].fingerprint
    # ... and once the record no longer has any there, it goes: the platform stack is what it was before
    gone = desired_state(left, [r.recorded() for r in leaving.plan.replicas])
    assert not dynamo_clusters(gone.plan, [r.recorded() for r in leaving.plan.replicas])
    assert gone.specs[f"platform-{cluster}"].fingerprint == before.specs[f"platform-{cluster}"].fingerprint
    assert "mp-dynamo" not in _releases(gone.specs[f"platform-{cluster}"], left)


def test_a_recorded_replica_keeps_whether_it_was_dynamo_served():
    from automation.record.applied import replica_from_dict

    served = _examples(DYN)
    replica = next(r for r in schedule(served).replicas if r.deployment == "qwen3-8b")
    recorded = replica.recorded()
    assert recorded.dynamo and replica_from_dict(recorded.to_dict()).dynamo
    plain = next(r for r in schedule(_examples()).replicas if r.deployment == "qwen3-8b").recorded()
    assert "dynamo" not in plain.to_dict()  # records of other replicas are as they were
