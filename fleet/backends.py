"""Which serving path composes an engine: native, llm-d or NVIDIA Dynamo.

The whole rule, as a table with reasons, is in docs/backends.md; tests check it row by row.

In short: a single-pod engine is a plain Deployment (native); a multi-pod gang and both
engines of a PrefillDecode replica go to llm-d; Dynamo serves an engine when it needs
something only Dynamo ships (an engine `capabilities` entry: KVOffload, WeightStreaming,
NVLinkDomain) or the deployment asks for it (annotation `modelplane.ai/backend: dynamo`),
provided the engine image is a Dynamo runtime (vLLM, SGLang or TensorRT-LLM) and the
pool it is placed on has NVIDIA devices. The annotation `modelplane.ai/backend:
llm-d|native` forces those paths where they can serve. A replica whose engines would mix
Dynamo with another path is served by Dynamo as a whole (one graph, one frontend). An explicit request that cannot hold is a validation error.

On a cluster whose `spec.stack` is Dynamo (the reference's PR #406), a replica with a multi-pod gang is served by
Dynamo there (its Grove gang-schedules the gang) when its images are Dynamo runtimes, its pools are NVIDIA and
the deployment does not force llm-d or native: `on_dynamo_stack`, applied per placed replica.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

BACKEND_ANNOTATION = "modelplane.ai/backend"
BACKENDS = ("native", "llm-d", "dynamo")
NVIDIA_DRIVER = "gpu.nvidia.com"
# Dynamo's runtime images: .../ai-dynamo/vllm-runtime, sglang-runtime, tensorrtllm-runtime (any registry, any tag).
_DYNAMO_IMAGE = re.compile(r"(^|/)ai-dynamo/(vllm|sglang|tensorrtllm)-runtime(:|@|$)")
_FRAMEWORK = {"vllm": "vllm", "sglang": "sglang", "tensorrtllm": "trtllm"}


def dynamo_framework(image: str) -> str | None:
    """The Dynamo backendFramework for a Dynamo runtime image, or None if the image is not one."""
    m = _DYNAMO_IMAGE.search(image)
    return _FRAMEWORK[m.group(2)] if m else None


@dataclass(frozen=True)
class EngineFacts:
    """What the rule looks at for one engine."""

    name: str
    roles: tuple[str, ...]
    images: tuple[str, ...]
    capabilities: tuple[str, ...]

    @property
    def single_pod(self) -> bool:
        return self.roles == ("Standalone",)


@dataclass(frozen=True)
class Decision:
    backend: str
    reason: str
    needs_nvidia: bool = False  # placement must pick a pool whose claimed devices are NVIDIA


def engine_facts(engine) -> EngineFacts:
    return EngineFacts(engine.name, tuple(m.role for m in engine.members),
                       tuple(c.image for m in engine.members for c in m.template.spec.containers),
                       tuple(engine.capabilities or ()))


def decide(engines: list[EngineFacts], mode: str, requested: str | None) -> tuple[list[Decision], list[tuple[int, str]]]:
    """Decisions per engine, and errors as (engine index or -1 for the annotation, message)."""
    errors: list[tuple[int, str]] = []
    if requested is not None and requested not in BACKENDS:
        return [], [(-1, f"unknown backend {requested!r} (one of {', '.join(BACKENDS)})")]
    wants_dynamo = [bool(e.capabilities) or requested == "dynamo" for e in engines]
    if any(wants_dynamo):
        wants_dynamo = [True] * len(engines)  # a replica has one serving path: one Dynamo graph, one frontend
    for i, e in enumerate(engines):
        if e.capabilities and requested in ("llm-d", "native"):
            errors.append((i, f"capabilities {', '.join(e.capabilities)} need Dynamo, but {BACKEND_ANNOTATION} "
                              f"forces {requested}"))
        elif wants_dynamo[i] and not all(dynamo_framework(image) for image in e.images):
            why = f"capabilities {', '.join(e.capabilities)}" if e.capabilities else (
                f"{BACKEND_ANNOTATION}: dynamo" if requested == "dynamo" else "another engine of the replica needs it")
            errors.append((i, f"Dynamo is required ({why}) but the image is not a Dynamo runtime "
                              "(an ai-dynamo/vllm-runtime, sglang-runtime or tensorrtllm-runtime image)"))
        elif requested == "native" and (mode == "PrefillDecode" or not e.single_pod):
            errors.append((i, "native serves one Standalone pod per copy outside PrefillDecode; "
                              "this engine needs llm-d or dynamo"))
    if errors:
        return [], errors
    decisions = []
    for e, dynamo in zip(engines, wants_dynamo):
        if dynamo:
            why = (f"needs {', '.join(e.capabilities)}, which only Dynamo ships" if e.capabilities
                   else f"{BACKEND_ANNOTATION}: dynamo" if requested == "dynamo" else "another engine of the replica uses Dynamo")
            decisions.append(Decision("dynamo", f"{why}; Dynamo runtime image; placed on NVIDIA devices", True))
        elif mode == "PrefillDecode":
            decisions.append(Decision("llm-d", "PrefillDecode: llm-d prefill/decode roles with the routing sidecar"))
        elif requested == "llm-d":
            decisions.append(Decision("llm-d", f"{BACKEND_ANNOTATION}: llm-d (a LeaderWorkerSet behind an InferencePool)"))
        elif e.single_pod:
            decisions.append(Decision("native", "one Standalone pod per copy: a plain Deployment"))
        else:
            decisions.append(Decision("llm-d", f"multi-pod gang ({', '.join(e.roles)}): a LeaderWorkerSet "
                                               "behind an InferencePool"))
    return decisions, []


def deployment_decisions(md) -> tuple[list[Decision], list[tuple[int, str]]]:
    spec = md.spec.template.spec
    requested = (md.metadata.annotations or {}).get(BACKEND_ANNOTATION)
    return decide([engine_facts(e) for e in spec.engines], spec.mode, requested)


def on_dynamo_stack(backends: tuple[tuple[str, str, str], ...], gang: bool, dynamo_images: bool, nvidia: bool,
                    requested: str | None) -> tuple[tuple[str, str, str], ...]:
    """The replica's (engine, backend, reason) on a Dynamo-stack cluster; `gang`: an engine spans several pods."""
    if not gang or not dynamo_images or not nvidia or requested in ("llm-d", "native") or \
            all(b == "dynamo" for _, b, _ in backends):
        return backends
    why = "spec.stack Dynamo on its cluster: Dynamo (with Grove) serves its multi-pod gang; Dynamo runtime images"
    return tuple((engine, "dynamo", why) for engine, _, _ in backends)
