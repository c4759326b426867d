"""What a pull request's base planned to, kept by the content hash of everything it was computed from.

`plan --against BASE` in CI plans the base (the target branch) for every pull request, though the base
rarely changes between them. The first comparison stores the base's summary: its replicas, each model, team,
service and endpoints stack's input digest, the digest of its platform stacks' inputs, and the fingerprint of
every stack it composed: a stack whose inputs were the same in the head it was compared with was not composed, and its
fingerprint is `SAME` and its inputs (automation/planning/compare.py). Later comparisons against the same base
read it back instead of planning the base again, and compose only the head's stacks whose inputs differ from
the base's; one that needs a fingerprint the summary lacks plans the base once more, and the summary kept then
knows both.

The key hashes the validated base objects, the recorded placements and gateway addresses it was planned with,
the control plane and this project's own code, so a summary is never reused across a change to any of them. A
second key, of the base's files as read (names and bytes) with the same placements, control plane and code, leads to the same
summary without parsing the base: the same bytes load to the same objects. The summary holds
no secret (secret values are never rendered, so no fingerprint depends on them); it names the secrets the
base's Secret manifests give (a stack's fingerprint holds which of its secrets a manifest gives, and `review`
names where each comes from), and the objects' key hashes those names too. It is written and read as
fleet/disk_cache.py says: only in a folder that is the user's alone, authenticated with a key made there, so an
entry edited by hand or by anyone else, or copied from another cache, is ignored and rewritten; what is read is
also checked for its shape.

Where: $MODELPLANE_CACHE_DIR, else $XDG_CACHE_HOME/modelplane, else ~/.cache/modelplane; the newest
KEEP summaries are kept.
"""

from __future__ import annotations

import hashlib
import json
import os
from dataclasses import asdict, dataclass, field
from functools import lru_cache
from pathlib import Path
from typing import TYPE_CHECKING

from automation.planning.plan_cache import SAME, Known
from automation.planning.stacks import DesiredState, kind_of
from fleet.memory import RecordedReplica
from fleet.disk_cache import DiskCache
from fleet.stack_id import StackKind
from workloads.gateways import Gateways

if TYPE_CHECKING:
    from fleet.capacity import LiveCapacity
    from fleet.validate import Fleet

FORMAT = 7
KEEP = 16
_SOURCES = ("fleet", "workloads", "components", "automation")  # the code a summary was computed by


@dataclass(frozen=True)
class BaseReplica:
    name: str
    key: str  # namespace/deployment
    cluster: str


@dataclass
class BaseSummary:
    replicas: list[BaseReplica]
    fingerprints: dict[str, str]  # every stack
    known: dict[str, Known]  # model, team, service and endpoints stacks: input digest and fingerprint
    platform: str | None = None  # the digest of what its platform and gateway stacks were computed from
    manifests: list[str] = field(default_factory=list)  # the secrets its Secret manifests give (names, no value)
    policies: dict | None = None  # its team policies' budgets and use (fleet/policy_preview.py): the use before

    def digests(self) -> dict[str, str]:
        """The digest of each stack's inputs: those of `known`, and the platform and gateway
        stacks' (their one `platform`)."""
        out = {name: k.inputs for name, k in self.known.items()}
        if self.platform is not None:
            out.update((name, self.platform) for name in self.fingerprints
                       if kind_of(name) in (StackKind.platform, StackKind.gateway))
        return out

    def completed_by(self, other: BaseSummary) -> BaseSummary:
        """This summary with the fingerprints it lacks (`SAME`) taken from `other`, a summary of the same base."""
        fingerprints, known = dict(self.fingerprints), dict(self.known)
        mine, theirs = self.digests(), other.digests()
        for name, fingerprint in self.fingerprints.items():
            computed = other.fingerprints.get(name)
            if fingerprint.startswith(SAME) and computed is not None and not computed.startswith(SAME) \
                    and name in mine and theirs.get(name) == mine[name]:
                fingerprints[name] = computed
                if name in known:
                    known[name] = other.known[name]
        return BaseSummary(self.replicas, fingerprints, known, self.platform, self.manifests, self.policies)

    @classmethod
    def of(cls, state: DesiredState, fleet: Fleet | None = None) -> BaseSummary:
        """`fleet`: the base's, whose team policies' use is kept (none: not kept)."""
        from fleet.policy_preview import policies_to_dict

        policies = policies_to_dict(fleet, state.plan) if fleet is not None else None
        return cls([BaseReplica(r.name, r.key, r.cluster) for r in state.plan.replicas],
                   {name: spec.fingerprint for name, spec in state.specs.items()},
                   state.known(), state.platform.inputs if state.platform is not None else None, state.manifests,
                   policies)

    def to_json(self) -> str:
        return json.dumps({"format": FORMAT,
                           "replicas": [{"name": r.name, "key": r.key, "cluster": r.cluster} for r in self.replicas], "fingerprints": self.fingerprints,
                           "known": {name: list(k) for name, k in self.known.items()}, "platform": self.platform,
                           "manifests": self.manifests, "policies": self.policies},
                          sort_keys=True)

    @classmethod
    def from_json(cls, text: str) -> BaseSummary:
        data = json.loads(text)
        if data.get("format") != FORMAT:
            raise ValueError(f"summary format {data.get('format')!r}, expected {FORMAT}")
        return cls([BaseReplica(**r) for r in data["replicas"]], dict(data["fingerprints"]),
                   {name: Known(k[0], k[1], tuple(tuple(key) for key in k[2])) for name, k in data["known"].items()},
                   data["platform"], [str(m) for m in data["manifests"]],
                   dict(data["policies"]) if data["policies"] is not None else None)


@lru_cache(maxsize=1)
def code_digest() -> str:
    """This project's code and version: a summary computed by other code is never reused."""
    from components.versions import project_version

    digest = hashlib.sha256(project_version().encode())
    top = Path(__file__).resolve().parent.parent.parent
    for package in _SOURCES:
        for path in sorted((top / package).rglob("*.py")):
            digest.update(str(path.relative_to(top)).encode() + b"\0" + path.read_bytes() + b"\0")
    return digest.hexdigest()


def base_key(fleet: Fleet, recorded: list[RecordedReplica], control_plane: str | None = None,
             gateways: Gateways | None = None) -> str:
    digest = hashlib.sha256(code_digest().encode())
    _context(digest, recorded, control_plane, gateways)
    for obj in fleet.objects:
        digest.update(fleet.text_of(obj).encode() + b"\0")
    digest.update((fleet.live.digest() if fleet.live is not None else "declared").encode())  # what it placed on
    digest.update(json.dumps(fleet.secrets.manifest_refs()).encode())  # fingerprints hold them (payloads.from_manifests)
    return digest.hexdigest()


def source_key(sources: list[tuple[str, bytes]], recorded: list[RecordedReplica],
               control_plane: str | None = None, gateways: Gateways | None = None,
               live: LiveCapacity | None = None) -> str:
    """The base's files as read (name and bytes, in load order), with everything `base_key` holds besides the
    objects (and `live`, the capacity the base is planned on): equal keys load to equal objects, so they lead to the
    same summary without parsing anything."""
    digest = hashlib.sha256(b"sources\0" + code_digest().encode())
    _context(digest, recorded, control_plane, gateways)
    digest.update((live.digest() if live is not None else "declared").encode())
    for name, raw in sources:
        digest.update(name.encode("utf-8", "surrogateescape") + b"\0" + hashlib.sha256(raw).digest())
    return digest.hexdigest()


def _context(digest, recorded: list[RecordedReplica], control_plane: str | None, gateways: Gateways | None) -> None:
    """What a summary was computed with besides the base's objects: the control plane, and the record's placements
    and gateway addresses (an endpoints stack's fingerprint holds them)."""
    addresses = [sorted(gateways.clusters.items()), gateways.front_door] if gateways is not None else None
    digest.update(json.dumps([control_plane, addresses]).encode())
    for r in sorted(recorded, key=lambda r: (r.namespace, r.deployment, r.name, r.cluster, r.index)):
        digest.update(json.dumps(asdict(r), sort_keys=True).encode() + b"\0")


class BaseCache:
    def __init__(self, root: Path | None = None):
        self.cache = DiskCache(root)
        self.root = self.cache.path("plans")

    def get(self, key: str) -> BaseSummary | None:
        name = f"plans/{key}.json"
        content = self.cache.read(name)
        if content is None:
            return None
        try:
            summary = BaseSummary.from_json(content.decode())
        except (ValueError, KeyError, TypeError, AttributeError, IndexError):  # another format: recompute
            return None
        try:
            os.utime(self.cache.path(name))  # most recently used: kept longest
        except OSError:
            pass
        return summary

    def by_sources(self, key: str) -> BaseSummary | None:
        name = f"plans/by-sources/{key}"
        content = self.cache.read(name)
        base = content.decode(errors="replace").strip() if content is not None else ""
        summary = self.get(base) if len(base) == 64 and all(c in "0123456789abcdef" for c in base) else None
        if summary is not None:
            try:
                os.utime(self.cache.path(name))
            except OSError:
                pass
        return summary

    def remember_sources(self, key: str, base: str) -> None:
        self.cache.write(f"plans/by-sources/{key}", base)

    def put(self, key: str, summary: BaseSummary) -> None:
        """Best effort: a cache that cannot be written only makes the next comparison slower."""
        if self.cache.write(f"plans/{key}.json", summary.to_json()):
            try:
                self._prune()
            except OSError:
                return

    def _prune(self) -> None:
        for pattern, keep in (("*.json", KEEP), ("by-sources/*", 4 * KEEP)):
            entries = sorted(self.root.glob(pattern), key=lambda p: p.stat().st_mtime, reverse=True)
            for old in entries[keep:]:
                old.unlink(missing_ok=True)
