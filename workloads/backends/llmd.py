"""The llm-d backend: multi-pod gangs as LeaderWorkerSets, and prefill/decode shaping.

- A Leader+Worker engine is a LeaderWorkerSet (replicas = copies, size = 1 + worker.nodes).
  The leader serves (port 8000, probe, the serving label); workers carry no serving label,
  so routing never targets them. Both get MODELPLANE_LEADER_ADDRESS and MODELPLANE_RANK.
- A PrefillDecode replica: each engine's serving pods get `llm-d.ai/role: prefill|decode`,
  `llm-d.ai/inference-serving: "true"` and `app: <replica>`. Decode serves on the user's
  `--port` (default 8001) behind the routing sidecar on 8000, a native sidecar
  (initContainer with restartPolicy Always) as llm-d runs it. Both phases get the NIXL
  side-channel env unless the user set it.
"""

from __future__ import annotations

from fleet.names import bounded, child_name
from workloads.backends import native
from workloads.context import EngineContext, ReplicaContext
from workloads.pods import ENGINE_PORT, PROBE, claim_template, engine_container, pod_template
from workloads.versions import ROUTING_SIDECAR_IMAGE

LWS_NAME_LIMIT = 52  # LWS names its worker StatefulSets <lws>-<group>; a StatefulSet name must leave room for its revision hash
DECODE_DEFAULT_PORT = 8001
NIXL_PORT = 5557
LEADER_ENV = [{"name": "MODELPLANE_LEADER_ADDRESS", "value": "$(LWS_LEADER_ADDRESS)"},
              {"name": "MODELPLANE_RANK", "value": "$(LWS_WORKER_INDEX)"}]


def workload_name(ctx: ReplicaContext, engine: EngineContext) -> str:
    return bounded(child_name(ctx.name, engine.name), LWS_NAME_LIMIT)


def build_lws(ctx: ReplicaContext, engine: EngineContext, pod_labels: dict | None = None, shape=None) -> list[dict]:
    name = workload_name(ctx, engine)
    leader = next(m for m in engine.members if m.role in ("Leader", "Standalone"))  # every engine has one (validated)
    worker = next((m for m in engine.members if m.role == "Worker"), None)
    serving_labels = {**ctx.labels, "modelplane.ai/serving": ctx.name, "modelplane.ai/workload": name,
                      "modelplane.ai/lws-role": "leader", **(pod_labels or {})}
    leader_template = pod_template(leader, serving_labels, engine_container(leader, serving=True, first_env=LEADER_ENV))
    if shape is not None:
        shape(leader_template)
    objects = []
    lws_spec: dict = {"replicas": engine.spec.copies, "startupPolicy": "LeaderCreated",
                      "rolloutStrategy": {"type": "RollingUpdate"}}
    if worker is None:  # llm-d forced on a single-pod engine: a gang of one
        lws_spec["leaderWorkerTemplate"] = {"size": 1, "workerTemplate": leader_template}
    else:
        size = 1 + (worker.spec.worker.nodes if worker.spec.worker else 1)
        worker_labels = {**ctx.labels, "modelplane.ai/workload": name, "modelplane.ai/lws-role": "worker"}
        worker_container = engine_container(worker, serving=False, first_env=LEADER_ENV, inject_model=False,
                                            always_args=False)
        lws_spec["leaderWorkerTemplate"] = {"size": size, "restartPolicy": "RecreateGroupOnPodRestart",
                                            "leaderTemplate": leader_template,
                                            "workerTemplate": pod_template(worker, worker_labels, worker_container)}
    for member in engine.members:
        claim = claim_template(member, dict(ctx.labels))
        if claim:
            objects.append(claim)
    objects.append({
        "apiVersion": "leaderworkerset.x-k8s.io/v1", "kind": "LeaderWorkerSet",
        "metadata": {"name": name, "namespace": ctx.workload_namespace, "labels": dict(ctx.labels)},
        "spec": lws_spec,
    })
    return objects


# ---- prefill/decode ------------------------------------------------------------------------------


def _flag(args: list[str], flag: str) -> str | None:
    for i, arg in enumerate(args):
        if arg.startswith(flag + "="):
            return arg.split("=", 1)[1]
        if arg == flag and i + 1 < len(args):
            return args[i + 1]
    return None


def decode_port(engine: EngineContext) -> int:
    serving = next(m for m in engine.members if m.role in ("Leader", "Standalone"))
    value = _flag(list(serving.spec.template.spec.containers[0].args or []), "--port")
    return int(value) if value and value.isdigit() else DECODE_DEFAULT_PORT


def kv_connector(image: str) -> str:
    return "sglang" if "sglang" in image else "nixlv2"


def _nixl(template: dict) -> None:
    container = template["spec"]["containers"][0]
    env = container.setdefault("env", [])
    names = {e["name"] for e in env}
    if "VLLM_NIXL_SIDE_CHANNEL_HOST" not in names:
        env.append({"name": "VLLM_NIXL_SIDE_CHANNEL_HOST", "valueFrom": {"fieldRef": {"fieldPath": "status.podIP"}}})
    if "VLLM_NIXL_SIDE_CHANNEL_PORT" not in names:
        env.append({"name": "VLLM_NIXL_SIDE_CHANNEL_PORT", "value": str(NIXL_PORT)})
    container.setdefault("ports", []).append({"name": "nixl", "containerPort": NIXL_PORT, "protocol": "TCP"})


def _decode_shape(port: int, image: str):
    def shape(template: dict) -> None:
        _nixl(template)
        container = template["spec"]["containers"][0]
        container["ports"][0]["containerPort"] = port
        container["readinessProbe"]["httpGet"]["port"] = port
        template["spec"]["initContainers"] = [{
            "name": "routing-proxy", "image": ROUTING_SIDECAR_IMAGE, "restartPolicy": "Always",
            "args": [f"--port={ENGINE_PORT}", f"--vllm-port={port}", f"--kv-connector={kv_connector(image)}",
                     "--secure-proxy=false", "--zap-log-level=1"],
            "ports": [{"name": "http", "containerPort": ENGINE_PORT, "protocol": "TCP"}],
            "readinessProbe": {"httpGet": {"path": "/health", "port": ENGINE_PORT}, **PROBE},
            "securityContext": {"allowPrivilegeEscalation": False, "runAsNonRoot": True},
        }]
    return shape


def build_pd(ctx: ReplicaContext) -> list[dict]:
    objects = []
    for engine in ctx.engines:
        phase = (engine.spec.phase or "").lower()  # both engines of a PrefillDecode replica have one (validated)
        labels = {"llm-d.ai/role": phase, "llm-d.ai/inference-serving": "true", "app": ctx.name}
        image = engine.members[0].spec.template.spec.containers[0].image
        shape = _decode_shape(decode_port(engine), image) if phase == "decode" else _nixl
        if engine.multi_pod:
            objects += build_lws(ctx, engine, labels, shape)
        else:
            objects += native.build(ctx, engine, labels, shape)
    return objects
