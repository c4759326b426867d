"""A desired stack (`StackSpec`): what its program runs (its payload, decided by planning:
automation/planning/stacks.py) and the fingerprint of what it would register: a hash of its arguments or rendered
objects, with where its secrets come from folded in."""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Iterable, Mapping

from components.args import ClusterArgs, GatewayArgs
from fleet.memory import RecordedReplica
from fleet.plan import PlacedReplica
from fleet.secrets import SecretRef
from fleet.stack_id import ORDER, StackId, StackKind
from workloads.cache import secret_refs
from workloads.gateways import Gateways
from workloads.service_routing import GATEWAY_OF_ANNOTATION, PLACEHOLDER_ANNOTATION

if TYPE_CHECKING:
    from fleet.validate import Fleet


@dataclass(frozen=True)
class PlatformPayload:
    """What a platform stack's program runs: one cluster's typed arguments, the chart versions and, on the cluster
    that hosts the fleet gateway, MetalLB's address pool and whether its Envoy Gateway counts global rate limits.
    Decided here; the program reads only this."""

    cluster: ClusterArgs
    versions: dict[str, str]
    project: str
    metallb_pool: str | None = None
    rate_limit: bool = False  # hosts an Envoy fleet gateway with per-team limits: a rate-limit store
    # The fleet's front door is Envoy: the operator's Programs read this stack's `gatewayServiceSpec` output, so a
    # platform stack applied before that output existed runs once more when a fleet turns to Envoy.
    envoy_front_door: bool = False
    trust_manager: bool = False  # hosts an Envoy front door: trust-manager publishes its client CA
    # The Envoy front door's client CA (PEM) as the gateway stack recorded it: the cluster gateway's fleet listener
    # accepts its client certificates; none yet: no fleet listener (workloads/front_door_mtls.py)
    client_cas: tuple[str, ...] = ()

    def fingerprinted(self) -> dict[str, Any]:
        # `dynamo` and `addons` only when set: a cluster that uses neither kept the fingerprint it had before them
        cluster = self.cluster.model_dump(exclude={field for field, default in (("dynamo", False), ("addons", "Install"),
                                                                                 ("load_balancer", False))
                                                   if getattr(self.cluster, field) == default})
        return {"cluster": cluster, "versions": self.versions, "project": self.project,
                **({"metallbPool": self.metallb_pool} if self.metallb_pool else {}),
                **({"rateLimit": True} if self.rate_limit else {}),
                **({"frontDoor": "Envoy"} if self.envoy_front_door else {}),
                **({"trustManager": True} if self.trust_manager else {}),
                **({"clientCAs": list(self.client_cas)} if self.client_cas else {})}


@dataclass(frozen=True)
class GatewayPayload:
    """What the gateway stack's program runs: the fleet gateway's arguments and the cluster that hosts it."""

    gateway: GatewayArgs
    versions: dict[str, str]
    host: str | None
    project: str

    def fingerprinted(self) -> dict[str, Any]:
        return {"gateway": self.gateway.fingerprinted(), "versions": self.versions, "host": self.host,
                "project": self.project}


@dataclass(frozen=True)
class WorkloadPayload:
    """What a team, cache, model, endpoints or service stack applies: its rendered objects per target (a cluster,
    or `control-plane`, which `host` is). `replicas`: a model stack's, whose `placements` are recorded once it
    applied (what it remembers, not what it registers: not fingerprinted)."""

    objects: dict[str, list[dict]]
    project: str
    host: str | None = None
    replicas: tuple[PlacedReplica, ...] = ()

    @property
    def placements(self) -> tuple[RecordedReplica, ...]:
        # asked for only by what runs or exports the stack: most plans never build them
        return tuple(r.recorded() for r in self.replicas)

    def fingerprinted(self) -> dict[str, Any]:
        return {"objects": self.objects, "project": self.project,
                **({"host": self.host} if "control-plane" in self.objects else {})}


Payload = PlatformPayload | GatewayPayload | WorkloadPayload

class Named:
    """What a stack is called, read from its identity (the one place names come from)."""

    id: StackId

    @property
    def name(self) -> str:
        return str(self.id)

    @property
    def kind(self) -> StackKind:
        return self.id.kind

    @property
    def rank(self) -> int:
        return ORDER[self.kind]


@dataclass
class StackSpec(Named):
    """A desired stack: what its program needs (payload), and the fingerprint of what it would register."""

    id: StackId
    fingerprint: str
    depends_on: list[str] = field(default_factory=list)  # names of stacks that run before it
    targets: list[str] = field(default_factory=list)  # clusters (or control-plane) the stack writes to
    # what the stack's program needs (None: a deletion, or a stack known from a kept summary, never run)
    payload: Payload | None = field(default=None, repr=False)

    @classmethod
    def for_deletion(cls, id: StackId) -> StackSpec:
        """A recorded stack that is no longer desired: enough to select and destroy it (its program never runs)."""
        return cls(id, "")

    @property
    def objects(self) -> dict[str, list[dict]]:
        """A workload stack's rendered objects per target ({} for other stacks)."""
        return self.payload.objects if isinstance(self.payload, WorkloadPayload) else {}

    @property
    def host(self) -> str | None:
        """The cluster hosting the control plane, for stacks that write there."""
        return self.payload.host if isinstance(self.payload, (GatewayPayload, WorkloadPayload)) else None

    @property
    def placements(self) -> tuple[RecordedReplica, ...]:
        return self.payload.placements if isinstance(self.payload, WorkloadPayload) else ()

    @property
    def versions(self) -> dict[str, str]:
        return self.payload.versions if isinstance(self.payload, (PlatformPayload, GatewayPayload)) else {}



def fingerprint(value: object) -> str:
    return hashlib.sha256(json.dumps(value, sort_keys=True, default=str).encode()).hexdigest()[:16]


def from_manifests(fleet: Fleet, refs: Iterable[SecretRef]) -> list[str]:
    """Those of a stack's secrets whose value a Secret manifest of the fleet gives (`namespace/name key 'key'`),
    sorted. Part of the stack's fingerprint: a value that comes from the fleet's files (a pull request) instead of
    what the one running the command gives, or back, is a change of the stack. Only whether it is a manifest, and
    never a value: the environment and --secrets-dir differ between machines that run the same fleet, and a file's
    name between checkouts of it (docs/teams.md, where secret values come from)."""
    return sorted({str(ref) for ref in refs if fleet.secrets.manifest_of(ref) is not None})


def with_sources(digest: str, manifests: list[str]) -> str:
    """A stack's fingerprint with its secrets given by manifests (`from_manifests`) folded in; the same without."""
    return fingerprint({"fingerprint": digest, "secretsFromManifests": manifests}) if manifests else digest


def object_secrets(objects: Mapping[str, list[dict]]) -> list[SecretRef]:
    """The user's Secrets a workload stack's rendered objects are filled from (its placeholder Secrets')."""
    return [ref for objs in objects.values() for o in objs if o["kind"] == "Secret" for ref in secret_refs(o).values()]


def gateway_clusters(objects: Mapping[str, list[dict]]) -> list[str]:
    """The clusters whose gateway addresses an endpoints stack's EndpointSlices point at."""
    return sorted({(o["metadata"].get("annotations") or {})[GATEWAY_OF_ANNOTATION] for objs in objects.values()
                   for o in objs if o["kind"] == "EndpointSlice"
                   and GATEWAY_OF_ANNOTATION in (o["metadata"].get("annotations") or {})})


def endpoints_fingerprint(payload: WorkloadPayload, gateways: Gateways) -> str:
    """An endpoints stack's fingerprint: its objects with each replica slice's address left out, and the recorded
    gateway address of every cluster they point at instead. The program reads the live address when it applies,
    so its program records the fingerprint of the addresses it read (automation/execution/programs.py): a later change of
    one re-runs it."""
    def without_address(o: dict) -> dict:
        annotations = o["metadata"].get("annotations") or {}
        if o["kind"] not in ("EndpointSlice", "Service") or GATEWAY_OF_ANNOTATION not in annotations:
            return o
        meta = {**o["metadata"], "annotations": {k: v for k, v in annotations.items() if k != PLACEHOLDER_ANNOTATION}}
        derived = ("endpoints", "addressType") if o["kind"] == "EndpointSlice" else ("spec",)
        return {**{k: v for k, v in o.items() if k not in derived}, "metadata": meta}

    objects = {t: [without_address(o) for o in objs] for t, objs in payload.objects.items()}
    addresses = {c: gateways.clusters.get(c) for c in gateway_clusters(payload.objects)}
    return fingerprint({**payload.fingerprinted(), "objects": objects, "gateways": addresses})
