"""What earlier plans computed that a later one reuses: the same answer as without it, only cheaper.

One collaborator for every caller that plans again: the portal's replans (automation/portal/service.py keeps one
for its process) and `plan --against`, whose head reuses its base's summary (automation/planning/compare.py).
`desired_state(..., cache=...)` gives the state it gives without the cache (tests/test_incremental_compare.py,
tests/test_portal_incremental.py).
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from typing import TYPE_CHECKING, Mapping, NamedTuple

from automation.planning.payloads import StackSpec
from components.args import fleet_gateway
from fleet.scheduler import PlanMemo
from fleet.stack_id import StackId

if TYPE_CHECKING:
    from fleet.plan import Plan
    from fleet.validate import Fleet
    from workloads.render import StackInputs

# The fingerprint of a stack not composed: its inputs were those of the stack it is compared with (`SAME` and the
# digest of those inputs), so it is the same as that stack's, whatever both are (automation/planning/compare.py).
SAME = "same-inputs:"


class Known(NamedTuple):
    """A stack as computed before: the digest of its inputs (`stack_inputs`), its fingerprint, and its
    objects' identities (`object_keys`, for collisions with other stacks)."""

    inputs: str
    fingerprint: str
    objects: tuple[tuple[str, str, str, str, str], ...] = ()


class KnownPlatform(NamedTuple):
    """The platform and gateway stacks as computed before, and the digest of what they were computed from
    (`platform_inputs`): a fleet with the same digest has the same platform and gateway stacks."""

    inputs: str
    specs: dict[str, StackSpec]

    @classmethod
    def fingerprinted(cls, inputs: str, fingerprints: Mapping[str, str], host: str | None) -> KnownPlatform:
        """The platform and gateway stacks of a kept summary (of a fleet whose platform inputs were `inputs`, with
        the control plane on `host`), known by their fingerprints alone: a head is compared with them, and they
        are never run (they have no payload)."""
        specs = {}
        for name, digest in fingerprints.items():
            if name == "gateway":
                specs[name] = StackSpec(StackId.gateway(), digest, [str(StackId.platform(host))] if host else [],
                                        ["control-plane"])
            elif name.startswith("platform-"):
                id = StackId.parse(name)
                specs[name] = StackSpec(id, digest, targets=[str(id.cluster)])
        return cls(inputs, specs)

    @classmethod
    def unchanged(cls, inputs: str, fleet: Fleet, host: str | None) -> KnownPlatform:
        """The platform and gateway stacks of a fleet compared with another whose `platform_inputs` are the same
        (`inputs`): the same on both sides, so neither computed nor fingerprinted (`SAME`)."""
        names = [str(StackId.platform(ic.name)) for ic in fleet.of("InferenceCluster")]
        names += ["gateway"] if fleet_gateway(fleet) is not None else []
        return cls.fingerprinted(inputs, dict.fromkeys(names, SAME + inputs), host)


@dataclass
class PlanCache:
    """`memo`: what earlier plans in this process computed (fleet/scheduler.py). `known`: stacks computed before
    (the last replan's, a pull request's base's): one whose inputs are the same as then keeps its fingerprint and
    is not composed again; given (even empty), the state's stack inputs and platform digest are computed, so that
    it can be remembered. `platform`: the platform and gateway stacks computed before, taken when this fleet's
    `platform_inputs` are theirs. `plan` and `inputs`: this fleet's plan with this record and its stacks' inputs
    (`stack_inputs`, with this control plane), when the caller made them: for one fleet only (`for_fleet`)."""

    memo: PlanMemo = field(default_factory=PlanMemo)
    known: Mapping[str, Known] | None = None
    platform: KnownPlatform | None = None
    plan: Plan | None = None
    inputs: StackInputs | None = None

    def for_fleet(self, plan: Plan | None = None, inputs: StackInputs | None = None) -> PlanCache:
        """This cache (the same memo) with what the caller computed for the one fleet it plans next."""
        return replace(self, plan=plan, inputs=inputs)

    def remember(self, known: Mapping[str, Known], platform: KnownPlatform | None) -> None:
        """Keep what a desired state computed (its `known()` and `platform`), for the next plan in this process (its
        fleet's plan and inputs are not kept: the next fleet is another)."""
        self.known, self.platform, self.plan, self.inputs = known, platform, None, None
