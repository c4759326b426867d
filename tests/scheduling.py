"""A small language for scheduler tests: fleets from a few calls, plans summarised as strings."""

from __future__ import annotations

from fleet.plan import Plan
from fleet.scheduler import schedule
from tests.manifests import cluster, deployment, gpu_class, member, run

L4 = gpu_class("l4", 1, "23034Mi", "NVIDIA L4", "Ada Lovelace")
L4X8 = gpu_class("l4x8", 8, "23034Mi", "NVIDIA L4", "Ada Lovelace")
H100 = gpu_class("h100", 8, "81559Mi", "NVIDIA H100", "Hopper")
H200 = gpu_class("h200", 8, "143771Mi", "NVIDIA H200", "Hopper")
T4 = gpu_class("t4", 1, "15360Mi", "NVIDIA T4", "Turing")
IB_NIC = {"name": "nic", "claim": "Synthetic", "driver": "infiniband", "count": 8}
H100_IB = gpu_class("h100ib", 8, "81559Mi", "NVIDIA H100", "Hopper", extra_devices=(IB_NIC,))
NICS_ONLY = {"apiVersion": "modelplane.ai/v1alpha1", "kind": "InferenceClass", "metadata": {"name": "nics"},
             "spec": {"devices": [IB_NIC]}}


def mem(gi: int) -> str:
    return f'device.capacity["gpu.nvidia.com"].memory.compareTo(quantity("{gi}Gi")) >= 0'


def arch(name: str) -> str:
    return f'device.attributes["gpu.nvidia.com"].architecture == "{name}"'


def md(name="m", replicas=1, gpus=1, cel=None, namespace="ml-team", engines=None, **spec):
    engines = engines or [{"name": "e", "members": [member(gpus=gpus, cel=cel or mem(20))]}]
    return deployment(name=name, namespace=namespace, replicas=replicas, engines=engines, **spec)


def gang(name="g", replicas=1, gpus=8, workers=1, cel=None, copies=1, leader_selector=True, **spec):
    members = [member("Leader", gpus=gpus, cel=cel or mem(20), selector=leader_selector),
               member("Worker", gpus=gpus, cel=cel or mem(20), nodes=workers)]
    return md(name, replicas, engines=[{"name": "e", "copies": copies, "members": members}], **spec)


def pd(name="pd", replicas=1, prefill_cel=None, decode_cel=None, gpus=8):
    engines = [{"name": "prefill", "phase": "Prefill", "members": [member(gpus=gpus, cel=prefill_cel or mem(20))]},
               {"name": "decode", "phase": "Decode", "members": [member(gpus=gpus, cel=decode_cel or mem(20))]}]
    return md(name, replicas, engines=engines, serving={"mode": "PrefillDecode"})


def ready(address="10.0.0.1", **extra):
    return {"gateway": {"address": address}, "conditions": [{"type": "Ready", "status": "True"}], **extra}


def plan_of(*objects, recorded=()) -> Plan:
    loaded = run(*objects)
    assert loaded.errors == [], [str(p) for p in loaded.errors]
    return schedule(loaded.fleet, list(recorded))


def where(plan: Plan) -> list[str]:
    """One string per replica: name@cluster:pool[+pool for each further engine], sorted."""
    return sorted(f"{r.deployment}@{r.cluster}:{'+'.join(e.pool for e in r.placement.engines)}" for r in plan.replicas)


def unscheduled(plan: Plan) -> dict[str, int]:
    return {u.deployment.split("/", 1)[1]: u.missing for u in plan.unscheduled}


def reasons(plan: Plan) -> str:
    return "\n".join(r for u in plan.unscheduled for r in u.reasons)


def dropped(plan: Plan) -> str:
    return "\n".join(f"{d.name}: {d.reason}" for d in plan.dropped)


__all__ = ["L4", "L4X8", "H100", "H200", "T4", "H100_IB", "NICS_ONLY", "IB_NIC", "mem", "arch", "md", "gang", "pd",
           "ready", "plan_of", "where", "unscheduled", "reasons", "dropped", "cluster", "member", "gpu_class"]
