"""Small valid manifests to mutate in tests, and helpers to run them through validation."""

from __future__ import annotations

import copy
import re

import yaml

from fleet.loader import parse_text
from fleet.validate import Loaded, validate_documents

DELETE = object()

GPU_20GI = 'device.capacity["gpu.nvidia.com"].memory.compareTo(quantity("20Gi")) >= 0'


def member(role="Standalone", gpus=1, cel=GPU_20GI, nodes=None, selector=True, image="vllm/vllm-openai:v0.11.0"):
    m = {"role": role, "template": {"spec": {"containers": [{"name": "engine", "image": image}]}}}
    if selector:
        m["nodeSelector"] = {"devices": [{"name": "gpu", "count": gpus, "selectors": [{"cel": cel}]}]}
    if nodes is not None:
        m["worker"] = {"nodes": nodes}
    return m


def deployment(name="qwen", namespace="ml-team", replicas=1, engines=None, **spec):
    tspec = {"engines": engines or [{"name": "vllm", "members": [member()]}]}
    tspec.update(spec)
    return {
        "apiVersion": "modelplane.ai/v1alpha1", "kind": "ModelDeployment",
        "metadata": {"name": name, "namespace": namespace},
        "spec": {"replicas": replicas, "template": {"spec": tspec}},
    }


def gpu_class(name="l4", count=1, memory="23034Mi", product="NVIDIA L4", arch="Ada Lovelace", provider=None, extra_devices=()):
    spec = {"devices": [{
        "name": "gpu", "driver": "gpu.nvidia.com", "deviceClassName": "gpu.nvidia.com", "count": count,
        "attributes": {"productName": {"string": product}, "architecture": {"string": arch}},
        "capacity": {"memory": {"value": memory}},
    }, *extra_devices]}
    if provider == "GKE":
        spec["provisioning"] = {"provider": "GKE", "gke": {"machineType": "g2-standard-8",
                                                           "accelerator": {"type": "nvidia-l4", "count": count}}}
    elif provider == "EKS":
        spec["provisioning"] = {"provider": "EKS", "eks": {"instanceType": "g6.xlarge"}}
    return {"apiVersion": "modelplane.ai/v1alpha1", "kind": "InferenceClass", "metadata": {"name": name}, "spec": spec}


def cluster(name="c1", pools=(("gpu", "l4", 1),), labels=None, source="Existing", taints=None, status=None,
            cache_class="rwx"):
    existing = {"secretRef": {"name": f"{name}-kubeconfig"}}
    if cache_class:
        existing["cache"] = {"storageClassName": cache_class}
    block = {"Existing": {"existing": existing},
             "GKE": {"gke": {"region": "us-central1"}}, "EKS": {"eks": {"region": "us-west-2"}}}[source]
    obj = {
        "apiVersion": "modelplane.ai/v1alpha1", "kind": "InferenceCluster",
        "metadata": {"name": name, **({"labels": labels} if labels else {})},
        "spec": {"cluster": {"source": source, **block},
                 "nodePools": [{"name": p, "className": c, "nodeCount": n} for p, c, n in pools]},
    }
    if taints:
        obj["spec"]["taints"] = taints
    if status is not None:
        obj["status"] = status
    return obj


def service(name="qwen", namespace="ml-team", deployment_name="qwen"):
    return {"apiVersion": "modelplane.ai/v1alpha1", "kind": "ModelService",
            "metadata": {"name": name, "namespace": namespace},
            "spec": {"endpoints": [{"selector": {"matchLabels": {"modelplane.ai/deployment": deployment_name}}}]}}


def cache(name="weights", namespace="ml-team", selector=None):
    obj = {"apiVersion": "modelplane.ai/v1alpha1", "kind": "ModelCache",
           "metadata": {"name": name, "namespace": namespace},
           "spec": {"source": "HuggingFace", "huggingFace": {"repo": "Qwen/Qwen3-8B", "sizeGiB": 20}}}
    if selector:
        obj["spec"]["clusterSelector"] = {"matchLabels": selector}
    return obj


def endpoint(name="ext", namespace="ml-team"):
    return {"apiVersion": "modelplane.ai/v1alpha1", "kind": "ModelEndpoint",
            "metadata": {"name": name, "namespace": namespace},
            "spec": {"url": "https://api.example.com/v1", "rewritePath": "/"}}


def gateway():
    return {"apiVersion": "modelplane.ai/v1alpha1", "kind": "InferenceGateway", "metadata": {"name": "default"},
            "spec": {"backend": "Traefik", "traefik": {"version": "40.2.0"}}}


def replica(name="qwen-abcde", cluster_name="c1", pool="gpu", deployment_name="qwen", index=0, namespace="ml-team"):
    return {
        "apiVersion": "modelplane.ai/v1alpha1", "kind": "ModelReplica",
        "metadata": {"name": name, "namespace": namespace, "labels": {
            "modelplane.ai/deployment": deployment_name, "modelplane.ai/cluster": cluster_name,
            "modelplane.ai/replica-index": str(index)}},
        "spec": {"clusterName": cluster_name, "engines": [{"name": "vllm", "members": [{
            "role": "Standalone", "nodePoolName": pool,
            "deviceRequests": [{"name": "gpu", "deviceClassName": "gpu.nvidia.com", "count": 1,
                                "selectors": [{"cel": GPU_20GI}]}],
            "template": {"spec": {"containers": [{"name": "engine", "image": "vllm/vllm-openai:v0.11.0"}]}}}]}]},
    }


_STEP = re.compile(r"([^.\[\]]+)|\[(\d+)\]|\[([^\]]+)\]")


def _steps(path: str) -> list:
    out = []
    for name, index, key in _STEP.findall(path):
        out.append(int(index) if index else (key or name))
    return out


def mutate(obj: dict, path: str, value) -> dict:
    """A deep copy of obj with the field at a dotted path set (or deleted with DELETE)."""
    obj = copy.deepcopy(obj)
    steps = _steps(path)
    node = obj
    for step in steps[:-1]:
        if isinstance(step, str) and step not in node:
            node[step] = {}
        node = node[step]
    if value is DELETE:
        del node[steps[-1]]
    elif isinstance(node, list) and steps[-1] == len(node):
        node.append(value)
    else:
        node[steps[-1]] = value
    return obj


def run(*objects, text: str | None = None) -> Loaded:
    if text is None:
        text = "---\n".join(yaml.safe_dump(o, sort_keys=False) for o in objects)
    docs, problems = parse_text(text, "test.yaml")
    loaded = validate_documents(docs)
    loaded.problems[:0] = problems
    return loaded


def errors(*objects) -> list[str]:
    return [f"{p.path}: {p.message}" for p in run(*objects).errors]


# The example fleet (examples/), in the v0.5 shape where the reference changed it, and the same fleet with the
# v0.3.1 shapes kept under examples/v0.3/ (a variant: `-f examples/` skips it) in place of those files.
EXAMPLES_DIR = __import__("pathlib").Path(__file__).resolve().parent.parent / "examples"
V031_DIR = EXAMPLES_DIR / "v0.3"
SHAPES = ("v0.5", "v0.3.1")


def example_files(shape: str = "v0.5") -> list:
    """The example fleet's files, for one shape (SHAPES)."""
    files = sorted(p for p in EXAMPLES_DIR.rglob("*.yaml") if V031_DIR not in p.parents)
    if shape == "v0.3.1":
        files = [V031_DIR / p.relative_to(EXAMPLES_DIR) if (V031_DIR / p.relative_to(EXAMPLES_DIR)).exists() else p
                 for p in files]
    return files


def example_documents(shape: str = "v0.5") -> list[dict]:
    return [d for f in example_files(shape) for d in yaml.safe_load_all(f.read_text()) if d]


def example_paths(shape: str = "v0.5") -> list[str]:
    """`-f` arguments for the example fleet in one shape: the folder itself for v0.5, every file for v0.3.1."""
    return [str(EXAMPLES_DIR)] if shape == "v0.5" else [str(f) for f in example_files(shape)]
