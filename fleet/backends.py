"""Which serving path composes an engine: native, llm-d (and, with composition, Dynamo).

The rule (docs/backends.md has it as a table):
- an engine of a PrefillDecode replica: llm-d (prefill/decode roles, routing sidecar, NIXL);
- a single-pod engine (one Standalone member): native, a plain Deployment;
- a multi-pod engine (Leader plus Workers): llm-d, a LeaderWorkerSet behind an InferencePool.
"""

from __future__ import annotations

from fleet.shapes import EngineShape


def choose_backend(engine: EngineShape, mode: str) -> tuple[str, str]:
    """(backend, reason) for one engine of a replica."""
    if mode == "PrefillDecode":
        return "llm-d", f"PrefillDecode {engine.phase or ''} engine: llm-d prefill/decode with the routing sidecar".replace("  ", " ")
    roles = [m.role for m in engine.members]
    if roles == ["Standalone"]:
        return "native", "one Standalone pod per copy: a plain Deployment"
    return "llm-d", f"multi-pod gang ({len(roles)} members, Leader plus Workers): a LeaderWorkerSet behind an InferencePool"
