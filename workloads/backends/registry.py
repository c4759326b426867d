"""The serving backends behind one protocol: what composes a replica's workloads and what KEDA scales, per backend.

fleet/backends.py decides each engine's backend; a replica has one serving path, so a Dynamo replica is Dynamo's
whole (one graph), and a PrefillDecode replica is llm-d's whole (prefill and decode roles behind one sidecar).
Otherwise each engine is composed by its own backend, in the replica's engine order.
"""

from __future__ import annotations

from typing import Protocol

from workloads.backends import dynamo, llmd, native
from workloads.context import EngineContext, ReplicaContext


class Backend(Protocol):
    name: str  # an engine's `backend` (fleet/backends.py BACKENDS)

    def serves_whole(self, ctx: ReplicaContext) -> bool:
        """Does this backend compose the whole replica (every engine at once)?"""
        ...

    def replica(self, ctx: ReplicaContext) -> list[dict]:
        """The whole replica's workloads (when `serves_whole`)."""
        ...

    def engine(self, ctx: ReplicaContext, engine: EngineContext) -> list[dict]:
        """One engine's workloads."""
        ...

    def scale_target(self, ctx: ReplicaContext, engine: EngineContext) -> dict | None:
        """The workload KEDA scales for the engine (its copies), or None when the backend scales its own."""
        ...


def _deployment_target(ctx: ReplicaContext, engine: EngineContext) -> dict:
    return {"apiVersion": "apps/v1", "kind": "Deployment", "name": native.workload_name(ctx, engine)}


class Native:
    name = "native"

    def serves_whole(self, ctx: ReplicaContext) -> bool:
        return False

    def replica(self, ctx: ReplicaContext) -> list[dict]:
        raise NotImplementedError("native composes one engine at a time")

    def engine(self, ctx: ReplicaContext, engine: EngineContext) -> list[dict]:
        return native.build(ctx, engine)

    def scale_target(self, ctx: ReplicaContext, engine: EngineContext) -> dict | None:
        return _deployment_target(ctx, engine)


class LlmD:
    name = "llm-d"

    def serves_whole(self, ctx: ReplicaContext) -> bool:
        return ctx.mode == "PrefillDecode"

    def replica(self, ctx: ReplicaContext) -> list[dict]:
        return llmd.build_pd(ctx)

    def engine(self, ctx: ReplicaContext, engine: EngineContext) -> list[dict]:
        return llmd.build_lws(ctx, engine)

    def scale_target(self, ctx: ReplicaContext, engine: EngineContext) -> dict | None:
        if not engine.multi_pod and ctx.mode == "PrefillDecode":  # a one-pod prefill or decode role: a Deployment
            return _deployment_target(ctx, engine)
        return {"apiVersion": "leaderworkerset.x-k8s.io/v1", "kind": "LeaderWorkerSet",
                "name": llmd.workload_name(ctx, engine)}


class Dynamo:
    name = "dynamo"

    def serves_whole(self, ctx: ReplicaContext) -> bool:
        return all(e.backend == "dynamo" for e in ctx.engines)

    def replica(self, ctx: ReplicaContext) -> list[dict]:
        return dynamo.build(ctx)

    def engine(self, ctx: ReplicaContext, engine: EngineContext) -> list[dict]:
        # fleet/backends.py gives every engine of a replica Dynamo or none: a Dynamo engine is never composed alone
        return llmd.build_lws(ctx, engine)

    def scale_target(self, ctx: ReplicaContext, engine: EngineContext) -> dict | None:
        return None  # Dynamo scales its graphs with its own planner


# In the order a replica is offered to them whole: Dynamo first (every engine Dynamo's), then llm-d (PrefillDecode).
BACKENDS: dict[str, Backend] = {b.name: b for b in (Dynamo(), LlmD(), Native())}


def backend(name: str) -> Backend:
    """The backend of that name (every engine's is one of fleet/backends.py BACKENDS, validated)."""
    return BACKENDS[name]


def compose(ctx: ReplicaContext) -> list[dict]:
    """One replica's workloads: the backend that serves it whole, else each engine's own, in engine order."""
    whole = next((b for b in BACKENDS.values() if b.serves_whole(ctx)), None)
    if whole is not None:
        return whole.replica(ctx)
    return [obj for engine in ctx.engines for obj in backend(engine.backend).engine(ctx, engine)]
