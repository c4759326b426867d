"""What composition needs for one placed replica: its deployment, placement and cluster."""

from __future__ import annotations

from dataclasses import dataclass

from fleet.api.deployment import Engine, ModelDeployment
from fleet.names import child_name
from workloads.pods import MemberContext


@dataclass(frozen=True)
class EngineContext:
    spec: Engine
    pool: str
    backend: str
    members: tuple[MemberContext, ...]

    @property
    def name(self) -> str:
        return self.spec.name

    @property
    def multi_pod(self) -> bool:
        return any(m.role == "Worker" for m in self.members)


@dataclass(frozen=True)
class ReplicaContext:
    md: ModelDeployment
    name: str  # the replica name
    index: int
    cluster: str
    engines: tuple[EngineContext, ...]
    cache_pvc: str | None
    workload_namespace: str  # where its objects live on the cluster (fleet/tenancy.py)
    fleet_host: bool = False  # an Envoy fleet gateway reaches it by Host too (workloads/routing.py fleet_host_route)

    @property
    def namespace(self) -> str:
        """The ModelDeployment's own namespace (the team's): paths and names use it."""
        return self.md.namespace

    @property
    def mode(self) -> str:
        return self.md.spec.template.spec.mode

    @property
    def labels(self) -> dict[str, str]:
        """Managed labels on every object of the replica: users and tools select on these."""
        return replica_labels(self.md.name, self.cluster, self.index, self.name)

    def engine(self, phase: str) -> EngineContext:
        return next(e for e in self.engines if e.spec.phase == phase)


def replica_labels(deployment: str, cluster: str, index: int, replica: str) -> dict[str, str]:
    """`ReplicaContext.labels`, for a replica whose objects are not composed (render reuses its stack's)."""
    return {"modelplane.ai/deployment": deployment, "modelplane.ai/cluster": cluster,
            "modelplane.ai/replica-index": str(index), "modelplane.ai/replica": replica}


def cache_pvc_name(namespace: str, cache: str) -> str:
    return child_name("modelcache", namespace, cache)


def replica_context(md, placed, workload_namespace: str, fleet_host: bool = False) -> ReplicaContext:
    spec = md.spec.template.spec
    cache_pvc = cache_pvc_name(md.namespace, spec.modelCacheRef.name) if spec.modelCacheRef else None
    backends = {name: backend for name, backend, _ in placed.backends}
    specs = {e.name: e for e in spec.engines}
    engines = []
    for placement in placed.placement.engines:
        engine = specs[placement.engine]
        members = tuple(
            MemberContext(placed.name, engine.name, member, placement.pool, mp.devices, cache_pvc, workload_namespace,
                          f"{md.namespace}/{md.name}")
            for member, mp in zip(engine.members, placement.members)
        )
        engines.append(EngineContext(engine, placement.pool, backends[engine.name], members))
    return ReplicaContext(md, placed.name, placed.index, placed.cluster, tuple(engines), cache_pvc, workload_namespace,
                          fleet_host)
