"""The fleet scheduler, table-driven: every reference rule and every improvement over it.

Each case is (id, fleet, before, expectations). `before`, when given, is a first fleet
whose plan is applied and remembered (as the automation layer records it) before the
fleet under test is planned. Expectations:
  where        exact replicas as name@cluster:pool(+pool per further engine), sorted
  unscheduled  {deployment name: missing replicas}
  reasons      fragments that must appear among the unscheduled reasons
  dropped      fragments that must appear among the dropped/moved reasons ("" = none dropped)
"""

import json
import pickle
from dataclasses import dataclass, field

import pytest

from fleet.names import replica_name
from fleet.plan import Cause
from tests.scheduling import (
    H100, H100_IB, H200, L4, L4X8, NICS_ONLY, T4, arch, cluster, dropped, gang, gpu_class, md, mem, member,
    pd, plan_of, ready, reasons, unscheduled, where,
)


@dataclass
class Case:
    id: str
    fleet: list
    where: list | None = None
    unscheduled: dict = field(default_factory=dict)
    reasons: list = field(default_factory=list)
    before: list | None = None
    dropped: list | None = None


def c(name, *pools, labels=None, taints=None, status=None, cache_class="rwx"):
    return cluster(name, pools=pools or (("gpu", "l4", 1),), labels=labels, taints=taints, status=status,
                   cache_class=cache_class)


AMD = gpu_class("mi300", 8, "192Gi", "AMD MI300X", "CDNA3")
AMD["spec"]["devices"][0].update(driver="gpu.amd.com", deviceClassName="gpu.amd.com")
AMD["spec"]["devices"][0]["capacity"] = {"memory": {"value": "192Gi"}}
DYNAMO_IMAGE = "nvcr.io/nvidia/ai-dynamo/vllm-runtime:0.6.1"


def dynamo_md(capabilities=("KVOffload",), cel='device.capacity["gpu.nvidia.com"].memory.compareTo(quantity("70Gi")) >= 0 '
              '|| device.capacity["gpu.amd.com"].memory.compareTo(quantity("70Gi")) >= 0'):
    members = [member("Leader", gpus=8, cel=cel, image=DYNAMO_IMAGE), member("Worker", gpus=8, cel=cel, nodes=1, image=DYNAMO_IMAGE)]
    return md("dyn", engines=[{"name": "e", "capabilities": list(capabilities), "members": members}])


TOL_RESEARCH = [{"key": "dedicated", "operator": "Equal", "value": "research", "effect": "NoSchedule"}]
RESEARCH = [{"key": "dedicated", "value": "research", "effect": "NoSchedule"}]
DRAIN = [{"key": "maintenance", "effect": "NoExecute"}]
CACHE = {"apiVersion": "modelplane.ai/v1alpha1", "kind": "ModelCache", "metadata": {"name": "w", "namespace": "ml-team"},
         "spec": {"source": "HuggingFace", "huggingFace": {"repo": "x/y", "sizeGiB": 10},
                  "clusterSelector": {"matchLabels": {"region": "eu"}}}}
CACHE_NO_SELECTOR = {**CACHE, "spec": {k: v for k, v in CACHE["spec"].items() if k != "clusterSelector"}}
EU, US = {"region": "eu"}, {"region": "us"}


def cached(deployment, name="w"):
    deployment["spec"]["template"]["spec"]["modelCacheRef"] = {"name": name}
    return deployment


CASES = [
    # ---- basics and spreading (reference §2.7) ------------------------------------------------
    Case("one replica, one cluster", [L4, c("a"), md()], ["m@a:gpu"]),
    Case("spread across clusters", [L4, c("a", ("gpu", "l4", 4)), c("b", ("gpu", "l4", 4)), md(replicas=2)],
         ["m@a:gpu", "m@b:gpu"]),
    Case("spread before packing even with more room on one", [L4, c("a", ("gpu", "l4", 9)), c("b"), md(replicas=2)],
         ["m@a:gpu", "m@b:gpu"]),
    Case("pack when forced, ties by cluster name", [L4X8, c("a", ("gpu", "l4x8", 1)), c("b", ("gpu", "l4x8", 1)), md(replicas=3)],
         ["m@a:gpu", "m@a:gpu", "m@b:gpu"]),
    Case("ties broken by cluster name", [L4, c("b"), c("a"), md()], ["m@a:gpu"]),
    # a pool's answer is computed once per kind and state and said of each pool: names are never mixed up
    Case("alike pools of one cluster are told apart", [L4X8, c("a", ("p1", "l4x8", 1), ("p2", "l4x8", 1)),
         md(gpus=8, replicas=2)], ["m@a:p1", "m@a:p2"]),
    Case("alike pools of two clusters are told apart", [L4X8, c("a", ("x", "l4x8", 1)), c("b", ("y", "l4x8", 1)),
         md(gpus=8, replicas=2)], ["m@a:x", "m@b:y"]),
    Case("no clusters at all", [L4, md()], [], {"m": 1}, ["the fleet has no InferenceCluster"]),
    Case("partial placement reports the shortfall", [L4, c("a"), md(replicas=3)], ["m@a:gpu"], {"m": 2},
         ["a/gpu: engine e needs 1 standalone pod(s) with 1 gpu on one node each; 0 fit"]),
    # ---- cluster selection ------------------------------------------------------------------------
    Case("cluster selector picks labelled clusters", [L4, c("a", labels=EU), c("b", labels=US),
         md(clusterSelector={"matchLabels": US})], ["m@b:gpu"]),
    Case("cluster selector matches none, says why", [L4, c("byo-eu", labels=EU), md(clusterSelector={"matchLabels": US})],
         [], {"m": 1}, ["byo-eu: not selected (region=eu, wants region=us)"]),
    Case("cluster selector on a missing label", [L4, c("a"), md(clusterSelector={"matchLabels": US})], [], {"m": 1},
         ["a: not selected (no region, wants region=us)"]),
    # ---- device matching ----------------------------------------------------------------------------
    Case("CEL selects the pool whose devices match", [L4, T4, c("a", ("t4", "t4", 4), ("l4", "l4", 1)), md()], ["m@a:l4"]),
    Case("no device matches, says which request", [T4, c("a", ("t4", "t4", 4)), md()], [], {"m": 1},
         ["a/t4: engine e, standalone: no device matches request gpu"]),
    Case("more devices per node than a node has", [H100, c("a", ("h", "h100", 4)), md(gpus=16, cel=arch("Hopper"))], [], {"m": 1},
         ["a/h: engine e, standalone: request gpu needs 16 devices per node, a node has 8"]),
    Case("unknown attribute domain is a non-match", [L4, c("a"), md(cel='device.attributes["amd.com"].family == "x"')],
         [], {"m": 1}, ["request gpu: the selector could not be evaluated"]),
    Case("missing class means no devices", [c("a", ("gpu", "nope", 3)), md()], [], {"m": 1},
         ["a/gpu: InferenceClass 'nope' not found"]),
    # ---- gangs, engines and pools --------------------------------------------------------------------
    Case("gang fits on one pool", [H100, c("a", ("h", "h100", 2)), gang()], ["g@a:h"]),
    Case("gang needs its nodes on one pool", [H100, c("a", ("h", "h100", 1)), gang()], [], {"g": 1},
         ["a/h: engine e needs 1 worker pod(s) with 8 gpu on one node each; 0 fit"]),
    Case("gang never split across pools", [H100, c("a", ("h1", "h100", 1), ("h2", "h100", 1)), gang()], [], {"g": 1}),
    Case("gang copies multiply nodes", [H100, c("a", ("h", "h100", 3)), gang(copies=2)], [], {"g": 1}),
    Case("gang copies fit with enough nodes", [H100, c("a", ("h", "h100", 4)), gang(copies=2)], ["g@a:h"]),
    Case("claimless leader rides along for free", [H100, c("a", ("h", "h100", 1)), gang(leader_selector=False)], ["g@a:h"]),
    Case("workers count pods", [H100, c("a", ("h", "h100", 3)), gang(workers=3)], [], {"g": 1}),
    Case("PD engines may use different pools of one cluster",
         [H100, H200, c("a", ("h100", "h100", 1), ("h200", "h200", 1)), pd(prefill_cel=mem(100), decode_cel=mem(70))],
         ["pd@a:h200+h100"]),
    Case("PD engines must share a cluster",
         [H100, H200, c("a", ("h200", "h200", 1)), c("b", ("h100", "h100", 1)), pd(prefill_cel=mem(100), decode_cel=arch("Hopper"))],
         ["pd@a:h200+h200"][:0], {"pd": 1}, ["a: each engine fits alone, but not all together"]),
    Case("engine order does not matter: big first", [H200, H100,
         c("a", ("big", "h200", 1), ("small", "h100", 1)), md(engines=[
             {"name": "b", "members": [member(gpus=8, cel=mem(135))]},
             {"name": "a", "members": [member(gpus=8, cel=mem(75))]}])], ["m@a:big+small"]),
    Case("engine order does not matter: small first", [H200, H100,
         c("a", ("big", "h200", 1), ("small", "h100", 1)), md(engines=[
             {"name": "a", "members": [member(gpus=8, cel=mem(75))]},
             {"name": "b", "members": [member(gpus=8, cel=mem(135))]}])], ["m@a:small+big"]),
    # ---- synthetic devices and stranding --------------------------------------------------------------
    Case("synthetic devices constrain but are not claimed", [H100_IB, c("a", ("h", "h100ib", 1)),
         md(engines=[{"name": "e", "members": [{**member(gpus=8, cel=arch("Hopper")), "nodeSelector": {"devices": [
             {"name": "gpu", "count": 8, "selectors": [{"cel": arch("Hopper")}]},
             {"name": "ib", "count": 8, "selectors": [{"cel": 'device.driver == "infiniband"'}]}]}}]}])], ["m@a:h"]),
    Case("synthetic-only engine is rejected", [NICS_ONLY, c("a", ("n", "nics", 2)),
         md(cel='device.driver == "infiniband"')], [], {"m": 1}, ["a/n: engine e: no member claims a DRA device on this pool"]),
    Case("a GPU member is not stranded on a NIC-only pool", [NICS_ONLY, H100, c("a", ("n", "nics", 2), ("h", "h100", 1)),
         gang(cel='device.driver == "infiniband" || device.driver == "gpu.nvidia.com"', gpus=8)], [], {"g": 1},
         ["a/n: engine e, leader: matches only placement-only devices here, but claims GPUs on another pool"]),
    Case("a pool kind's fit that reads the cluster's other pools is not shared across clusters",
         [H100_IB, L4X8, c("a", ("ib", "h100ib", 2), ("l4", "l4x8", 1)), c("b", ("ib", "h100ib", 2)),
          md("g", engines=[{"name": "e", "members": [
              member("Leader", gpus=8, cel='device.driver == "infiniband" || ' + arch("Ada Lovelace")),
              member("Worker", gpus=8, cel=arch("Hopper"), nodes=1)]}])], ["g@b:ib"]),
    # ---- taints and tolerations ------------------------------------------------------------------------
    Case("NoSchedule taint blocks new replicas", [L4, c("a", taints=RESEARCH), md()], [], {"m": 1},
         ["a: taint dedicated=research:NoSchedule is not tolerated"]),
    Case("Equal toleration admits", [L4, c("a", taints=RESEARCH), md(tolerations=TOL_RESEARCH)], ["m@a:gpu"]),
    Case("Exists without key tolerates everything", [L4, c("a", taints=RESEARCH + DRAIN), md(tolerations=[{"operator": "Exists"}])],
         ["m@a:gpu"]),
    Case("wrong toleration value does not admit", [L4, c("a", taints=RESEARCH),
         md(tolerations=[{"key": "dedicated", "value": "prod", "effect": "NoSchedule"}])], [], {"m": 1}),
    Case("toleration for another effect does not admit", [L4, c("a", taints=RESEARCH),
         md(tolerations=[{"key": "dedicated", "value": "research", "effect": "NoExecute"}])], [], {"m": 1}),
    Case("toleration with empty effect matches all effects", [L4, c("a", taints=RESEARCH),
         md(tolerations=[{"key": "dedicated", "value": "research"}])], ["m@a:gpu"]),
    Case("NoExecute drains kept replicas elsewhere", [L4, c("a", taints=DRAIN), c("b"), md()], ["m@b:gpu"],
         before=[L4, c("a"), md()], dropped=["cluster a is draining: taint maintenance:NoExecute is not tolerated"]),
    Case("NoSchedule keeps kept replicas", [L4, c("a", taints=RESEARCH), c("b"), md()], ["m@a:gpu"],
         before=[L4, c("a"), md()], dropped=[""]),
    # ---- readiness and observed state ------------------------------------------------------------------
    Case("not ready cluster gets no new replicas", [L4, c("a", status={"conditions": [{"type": "Ready", "status": "False",
         "reason": "Provisioning"}], "gateway": {"address": "1.2.3.4"}}), md()], [], {"m": 1},
         ["a: not ready (condition Ready is False: Provisioning)"]),
    Case("no gateway address is not ready", [L4, c("a", status={"conditions": [{"type": "Ready", "status": "True"}]}), md()],
         [], {"m": 1}, ["a: not ready (no gateway address yet)"]),
    Case("observed ready cluster places", [L4, c("a", status=ready()), md()], ["m@a:gpu"]),
    Case("degraded cluster keeps its replicas", [L4, c("a", status={"gateway": {}}), c("b"), md()], ["m@a:gpu"],
         before=[L4, c("a"), md()], dropped=[""]),
    Case("published gpuPools override declared pools", [c("a", ("gpu", "l4", 1), status=ready(gpuPools=[
         {"name": "pub", "nodes": 3, "devices": L4["spec"]["devices"]}])), md(replicas=3)], ["m@a:pub"] * 3),
    Case("maxNodeCount is the capacity when set", [L4, {**c("a"), "spec": {**c("a")["spec"], "nodePools": [
         {"name": "gpu", "className": "l4", "nodeCount": 1, "maxNodeCount": 3}]}}, md(replicas=3)], ["m@a:gpu"] * 3),
    Case("zero nodes and no maximum means no capacity", [L4, c("a", ("gpu", "l4", 0)), md()], [], {"m": 1},
         ["a/gpu: engine e needs 1 standalone pod(s) with 1 gpu on one node each; 0 fit in the free capacity (the pool has 0 nodes)"]),
    # ---- caches ---------------------------------------------------------------------------------------
    Case("cache footprint narrows clusters", [CACHE, L4, c("a", labels=US), c("b", labels=EU), cached(md())], ["m@b:gpu"]),
    Case("cache without selector goes everywhere", [CACHE_NO_SELECTOR, L4, c("a", labels=US), cached(md())], ["m@a:gpu"]),
    Case("cache selector conflicting with the deployment's is an empty intersection",
         [CACHE, L4, c("a", labels=US), c("b", labels=EU), cached(md(clusterSelector={"matchLabels": US}))], [], {"m": 1},
         ["clusterSelector and ModelCache w's clusterSelector select no cluster in common (region=us vs region=eu)"]),
    Case("missing cache: no new replicas", [L4, c("a"), cached(md(), "absent")], [], {"m": 1},
         ["waiting for ModelCache ml-team/absent"]),
    Case("missing cache keeps existing replicas", [L4, c("a", ("gpu", "l4", 2)), cached(md(replicas=2), "absent")],
         ["m@a:gpu"], {"m": 1}, ["waiting for ModelCache"], before=[L4, c("a", ("gpu", "l4", 2)), md()]),
    Case("a cache is only mounted where it can stage", [CACHE_NO_SELECTOR, L4, c("a", cache_class=None), c("b"), cached(md())],
         ["m@b:gpu"]),
    Case("no cluster can stage the cache", [CACHE_NO_SELECTOR, L4, c("a", cache_class=None), cached(md())], [], {"m": 1},
         ["a: cannot stage ModelCache ml-team/w (no RWX storage class"]),
    Case("a cluster that can no longer stage drops its replicas", [CACHE_NO_SELECTOR, L4, c("a", cache_class=None), c("b"),
         cached(md())], ["m@b:gpu"], before=[CACHE_NO_SELECTOR, L4, c("a"), cached(md())],
         dropped=["cluster a cannot stage ModelCache ml-team/w"]),
    # ---- Dynamo placement ----------------------------------------------------------------------------
    Case("Dynamo engines go only to NVIDIA pools", [AMD, H100, c("a-amd", ("m", "mi300", 2)), c("b-nv", ("h", "h100", 2)),
         dynamo_md()], ["dyn@b-nv:h"]),
    Case("Dynamo engine with no NVIDIA pool is unscheduled", [AMD, c("a-amd", ("m", "mi300", 2)), dynamo_md()], [], {"dyn": 1},
         ["a-amd/m: engine e is served by Dynamo, which needs NVIDIA devices (gpu.nvidia.com); this pool's are gpu.amd.com"]),
    Case("without Dynamo the same engine may use AMD", [AMD, c("a-amd", ("m", "mi300", 2)), dynamo_md(capabilities=())],
         ["dyn@a-amd:m"]),
    # ---- retention --------------------------------------------------------------------------------------
    Case("kept replicas do not move to a better cluster", [L4, H100, c("a", ("h", "h100", 1)), c("b", ("l", "l4", 1)), md()],
         ["m@a:h"], before=[H100, c("a", ("h", "h100", 1)), md()], dropped=[""]),
    Case("scale up keeps old replicas and spreads new ones", [L4, c("a", ("gpu", "l4", 3)), c("b", ("gpu", "l4", 3)), md(replicas=3)],
         ["m@a:gpu", "m@a:gpu", "m@b:gpu"], before=[L4, c("a", ("gpu", "l4", 3)), md()], dropped=[""]),
    Case("scale down removes from the most loaded cluster",
         [L4, c("a", ("gpu", "l4", 3)), c("b", ("gpu", "l4", 3)), md(replicas=2)], ["m@a:gpu", "m@b:gpu"],
         before=[L4, c("a", ("gpu", "l4", 3)), c("b", ("gpu", "l4", 3)), md(replicas=3)], dropped=["scaled down to 2"]),
    Case("scale down ties go to the later cluster name",
         [L4, c("a", ("gpu", "l4", 3)), c("b", ("gpu", "l4", 3)), md(replicas=1)], ["m@a:gpu"],
         before=[L4, c("a", ("gpu", "l4", 3)), c("b", ("gpu", "l4", 3)), md(replicas=2)], dropped=["scaled down to 1"]),
    Case("removed cluster: replica re-placed", [L4, c("b"), md()], ["m@b:gpu"], before=[L4, c("a"), md()],
         dropped=["cluster a no longer exists"]),
    Case("cluster no longer selected: replica re-placed", [L4, c("a", labels=US), c("b", labels=EU),
         md(clusterSelector={"matchLabels": EU})], ["m@b:gpu"], before=[L4, c("a", labels=US), md()],
         dropped=["cluster a is no longer selected (region=us, wants region=eu)"]),
    Case("renamed engine: replica re-placed", [L4, c("a", ("gpu", "l4", 2)), md(engines=[{"name": "renamed", "members": [member()]}])],
         ["m@a:gpu"], before=[L4, c("a", ("gpu", "l4", 2)), md()], dropped=["template changed: engines are now renamed, were e"]),
    Case("changed roles: replica re-placed", [H100, c("a", ("h", "h100", 4)), gang()], ["g@a:h"],
         before=[H100, c("a", ("h", "h100", 4)), md("g", engines=[{"name": "e", "members": [member(gpus=8)]}])],
         dropped=["template changed: members of engine e changed"]),
    Case("image change keeps the replica in place", [L4, c("a"), c("b"), md(engines=[{"name": "e", "members": [member(image="vllm:new")]}])],
         ["m@b:gpu"], before=[L4, c("b"), md()], dropped=[""]),
    Case("selector change that still matches keeps the replica", [L4, c("a"), md(cel=mem(16))], ["m@a:gpu"],
         before=[L4, c("a"), md()], dropped=[""]),
    Case("selector change that no longer matches re-places", [L4, H100, c("a", ("l", "l4", 1), ("h", "h100", 1)), md(cel=mem(40))],
         ["m@a:h"], before=[L4, H100, c("a", ("l", "l4", 1), ("h", "h100", 1)), md()],
         dropped=["template or pool changed: a/l: engine e, standalone: no device matches request gpu"]),
    Case("identity is namespace-qualified", [L4, c("a", ("gpu", "l4", 2)), md(namespace="team-b")], ["m@a:gpu"],
         before=[L4, c("a", ("gpu", "l4", 2)), md(namespace="team-a")]),
    Case("other deployments' kept replicas hold their devices", [L4, c("a"), md("old"), md("new")], ["old@a:gpu"], {"new": 1},
         before=[L4, c("a"), md("old")]),
    # ---- improvements over the reference: devices, not nodes ----------------------------------------------
    Case("eight 1-GPU replicas share one 8-GPU node", [L4X8, c("a", ("gpu", "l4x8", 1)), md(replicas=8)], ["m@a:gpu"] * 8),
    Case("three 1-GPU replicas on one node (the reference places one)", [L4X8, c("a", ("gpu", "l4x8", 1)), md(replicas=3)],
         ["m@a:gpu"] * 3),
    Case("never overcommit a node", [L4X8, c("a", ("gpu", "l4x8", 1)), md(replicas=9)], ["m@a:gpu"] * 8, {"m": 1}),
    Case("deployments share a node", [L4X8, c("a", ("gpu", "l4x8", 1)), md("x", gpus=4), md("y", gpus=4)],
         ["x@a:gpu", "y@a:gpu"]),
    Case("a fifth 4-GPU pod needs a third node", [L4X8, c("a", ("gpu", "l4x8", 2)), md("x", gpus=4, replicas=5)],
         ["x@a:gpu"] * 4, {"x": 1}),
    Case("copies count devices", [L4X8, c("a", ("gpu", "l4x8", 1)),
         md(engines=[{"name": "e", "copies": 3, "members": [member(gpus=3)]}])], [], {"m": 1}),
    Case("packing keeps whole nodes free for big gangs", [L4X8, c("a", ("gpu", "l4x8", 2)), md("small", gpus=4, replicas=2),
         md("big", gpus=8)], ["big@a:gpu", "small@a:gpu", "small@a:gpu"]),
    Case("overlapping requests solved exactly (written order a, b)", [
        gpu_class("mix", 1, "80Gi", "X", "Hopper", extra_devices=({"name": "small", "driver": "gpu.nvidia.com",
            "deviceClassName": "gpu.nvidia.com", "count": 1, "capacity": {"memory": {"value": "24Gi"}}},)),
        c("a", ("p", "mix", 1)),
        md(engines=[{"name": "e", "members": [{**member(), "nodeSelector": {"devices": [
            {"name": "any", "count": 1, "selectors": [{"cel": mem(20)}]},
            {"name": "zbig", "count": 1, "selectors": [{"cel": mem(70)}]}]}}]}])], ["m@a:p"]),
    Case("overlapping requests solved exactly (written order b, a)", [
        gpu_class("mix", 1, "80Gi", "X", "Hopper", extra_devices=({"name": "small", "driver": "gpu.nvidia.com",
            "deviceClassName": "gpu.nvidia.com", "count": 1, "capacity": {"memory": {"value": "24Gi"}}},)),
        c("a", ("p", "mix", 1)),
        md(engines=[{"name": "e", "members": [{**member(), "nodeSelector": {"devices": [
            {"name": "zbig", "count": 1, "selectors": [{"cel": mem(70)}]},
            {"name": "any", "count": 1, "selectors": [{"cel": mem(20)}]}]}}]}])], ["m@a:p"]),
    Case("retained replica that grew and no longer fits is re-placed", [H100, c("a", ("h", "h100", 2)), c("b", ("h", "h100", 4)),
         gang(workers=2)], ["g@b:h"], before=[H100, c("a", ("h", "h100", 2)), gang()],
         dropped=["no longer fits on a after its shape grew"]),
    Case("retained replica that grew and fits nowhere is unscheduled", [H100, c("a", ("h", "h100", 2)), gang(workers=2)],
         [], {"g": 1}, before=[H100, c("a", ("h", "h100", 2)), gang()], dropped=["no longer fits on a after its shape grew"]),
    Case("retained replica that grew but still fits stays", [H100, c("a", ("h", "h100", 4)), gang(workers=2)], ["g@a:h"],
         before=[H100, c("a", ("h", "h100", 4)), gang()], dropped=[""]),
    Case("copies growth re-checked", [L4X8, c("a", ("gpu", "l4x8", 1)), c("b", ("gpu", "l4x8", 1)),
         md(engines=[{"name": "e", "copies": 3, "members": [member(gpus=4)]}])], [], {"m": 1},
         before=[L4X8, c("a", ("gpu", "l4x8", 1)), md(engines=[{"name": "e", "copies": 2, "members": [member(gpus=4)]}])],
         dropped=["no longer fits on a after its shape grew"]),
    Case("a pool that shrank drops what no longer fits", [L4, c("a", ("gpu", "l4", 1)), md(replicas=2)], ["m@a:gpu"], {"m": 1},
         before=[L4, c("a", ("gpu", "l4", 2)), md(replicas=2)], dropped=["no longer fits on a"]),
    # ---- improvements: placement policy ---------------------------------------------------------------
    Case("tightest pool in a cluster: small model on small GPU", [L4, H100, c("a", ("h", "h100", 1), ("l", "l4", 1)), md()],
         ["m@a:l"]),
    Case("tightest cluster breaks load ties before names", [L4, H100, c("a-h100", ("h", "h100", 1)), c("b-l4", ("l", "l4", 1)), md()],
         ["m@b-l4:l"]),
    Case("spread still beats tightness", [L4, H100, c("a-h100", ("h", "h100", 1)), c("b-l4", ("l", "l4", 1)), md(replicas=2)],
         ["m@a-h100:h", "m@b-l4:l"]),
    Case("packs onto started nodes before opening new ones", [L4X8, c("a", ("gpu", "l4x8", 2)), md("x", gpus=3),
         md("y", gpus=5), md("z", gpus=8)], ["x@a:gpu", "y@a:gpu", "z@a:gpu"]),
    Case("scarce capacity is shared round-robin", [H100, c("a", ("h", "h100", 2)), md("p", gpus=8, cel=arch("Hopper"), replicas=2),
         md("q", gpus=8, cel=arch("Hopper"), replicas=2)], ["p@a:h", "q@a:h"], {"p": 1, "q": 1}),
]


@pytest.mark.parametrize("case", CASES, ids=[case.id for case in CASES])
def test_scheduler(case):
    recorded = []
    if case.before is not None:
        recorded = [r.recorded() for r in plan_of(*case.before).replicas]
    plan = plan_of(*case.fleet, recorded=recorded)
    if case.where is not None:
        assert where(plan) == sorted(case.where)
    assert unscheduled(plan) == case.unscheduled
    text = reasons(plan)
    for fragment in case.reasons:
        assert fragment in text, text
    if case.dropped is not None:
        if case.dropped == [""]:
            assert plan.dropped == []
        for fragment in case.dropped:
            assert fragment in dropped(plan), dropped(plan)


@pytest.mark.parametrize("before, after, cause", [
    ([L4, c("a", ("gpu", "l4", 3)), c("b", ("gpu", "l4", 3)), md(replicas=3)],
     [L4, c("a", ("gpu", "l4", 3)), c("b", ("gpu", "l4", 3)), md(replicas=2)], Cause.SCALED_DOWN),
    ([L4, c("a"), md()], [L4, c("b"), md()], Cause.CLUSTER_GONE),
    ([L4, c("a", labels=US), md()], [L4, c("a", labels=US), c("b", labels=EU), md(clusterSelector={"matchLabels": EU})],
     Cause.NOT_SELECTED),
    ([L4, c("a", ("gpu", "l4", 2)), md()], [L4, c("a", ("gpu", "l4", 2)),
                                            md(engines=[{"name": "renamed", "members": [member()]}])],
     Cause.TEMPLATE_CHANGED),
])
def test_a_dropped_replica_says_its_cause_apart_from_its_text(before, after, cause):
    """Code asks a reason's cause (automation/planning/compare.py), never its text; the text is unchanged, and a
    pickled plan (the portal's replan runs in another process) keeps the cause."""
    plan = plan_of(*after, recorded=[r.recorded() for r in plan_of(*before).replicas])
    assert [d.reason.cause for d in plan.dropped] == [cause]
    again = pickle.loads(pickle.dumps(plan.dropped[0].reason))
    assert (again, again.cause) == (str(plan.dropped[0].reason), cause)
    assert json.dumps(plan.dropped[0].reason) == json.dumps(str(plan.dropped[0].reason))


def test_an_unscheduled_replica_says_its_cause():
    plan = plan_of(L4, c("a"), md(replicas=2))
    assert {r.cause for u in plan.unscheduled for r in u.reasons} == {Cause.NO_PLACE}
    assert {r.cause for u in plan_of(L4, md()).unscheduled for r in u.reasons} == {Cause.NO_CLUSTERS}


def test_table_is_large_enough():
    assert len(CASES) >= 60


def test_replica_names_and_indices():
    plan = plan_of(L4X8, cluster("a", pools=(("gpu", "l4x8", 1),)), md("my-model", replicas=3))
    assert sorted((r.index, r.name) for r in plan.replicas) == [(i, replica_name("my-model", "a", i)) for i in range(3)]
    assert replica_name("my-model", "cluster-a", 0) == "my-model-5ab63"


def test_new_replica_takes_lowest_free_index_on_its_cluster():
    before = plan_of(L4X8, cluster("a", pools=(("gpu", "l4x8", 1),)), md(replicas=3))
    kept = [r.recorded() for r in before.replicas if r.index != 1]
    plan = plan_of(L4X8, cluster("a", pools=(("gpu", "l4x8", 1),)), md(replicas=3), recorded=kept)
    assert sorted((r.index, r.state) for r in plan.replicas) == [(0, "kept"), (1, "new"), (2, "kept")]


def test_duplicate_recorded_identity_keeps_the_first_by_name():
    before = plan_of(L4X8, cluster("a", pools=(("gpu", "l4x8", 1),)), md())
    original = before.replicas[0].recorded()
    twin = type(original)(original.namespace, original.deployment, "m-zzzzz", original.cluster, original.index, original.engines)
    plan = plan_of(L4X8, cluster("a", pools=(("gpu", "l4x8", 1),)), md(), recorded=[twin, original])
    assert [r.name for r in plan.replicas] == [original.name]
    assert "duplicate of replica" in dropped(plan) and "m-zzzzz" in dropped(plan)


def test_model_replica_manifests_are_placement_memory():
    from tests.manifests import replica
    plan = plan_of(L4, cluster("c1", pools=(("gpu", "l4", 1),)), cluster("c0", pools=(("gpu", "l4", 1),)),
                   md("qwen", engines=[{"name": "vllm", "members": [member()]}]), replica("qwen-abcde", "c1", "gpu", "qwen"))
    assert [(r.name, r.cluster, r.state) for r in plan.replicas] == [("qwen-abcde", "c1", "kept")]


def test_devices_output_lists_only_claimed_requests():
    plan = plan_of(*CASES[[c.id for c in CASES].index("synthetic devices constrain but are not claimed")].fleet)
    member_placement = plan.replicas[0].placement.engines[0].members[0]
    assert [(n, cls, k) for n, cls, k in member_placement.devices] == [("gpu", "gpu.nvidia.com", 8)]
    assert member_placement.synthetic == (("ib", 8),)


def test_same_named_deployment_in_another_namespace_is_not_ours():
    """The reference retains another namespace's replica as its own (identity by name only)."""
    fleet = [L4, cluster("a", pools=(("gpu", "l4", 2),))]
    theirs = [r.recorded() for r in plan_of(*fleet, md(namespace="team-a")).replicas]
    plan = plan_of(*fleet, md(namespace="team-b"), recorded=theirs)
    assert [(r.key, r.state) for r in plan.replicas] == [("team-b/m", "new")]
    both = plan_of(*fleet, md(namespace="team-a"), md(namespace="team-b"), recorded=theirs)
    assert sorted((r.key, r.state) for r in both.replicas) == [("team-a/m", "kept"), ("team-b/m", "new")]


def test_every_cluster_that_cannot_take_a_replica_is_named_in_its_reasons():
    """Two clusters in the same state share one cached rejection; each must still be listed, by its own name."""
    plan = plan_of(L4, cluster("c1", pools=(("gpu", "l4", 1),)), cluster("c2", pools=(("gpu", "l4", 1),)),
                   md("m", gpus=2))
    assert [line.split(":")[0] for line in plan.unscheduled[0].reasons] == ["c1/gpu", "c2/gpu"]
