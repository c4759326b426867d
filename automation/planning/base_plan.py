"""A comparison's base being planned (automation/planning/compare.py `side_by_side`): in this process (`BasePlan`),
or in a forked one (base_beside.BaseBeside), both behind `BaseSide`."""

from __future__ import annotations

from dataclasses import replace
from typing import TYPE_CHECKING, Protocol

from automation.planning.base_cache import BaseSummary
from automation.planning.plan_cache import SAME, Known, KnownPlatform, PlanCache
from automation.planning.stacks import Host, desired_state, platform_inputs
from fleet.plan import dynamo_clusters
from fleet.scheduler import PlanMemo, schedule
from workloads.gateways import Gateways
from workloads.render import StackInputs, stack_inputs

if TYPE_CHECKING:
    from fleet.validate import Fleet


class BaseSide(Protocol):
    """The base of a comparison being planned: here (`BasePlan`) or in a forked process (base_beside.BaseBeside)."""

    def inputs(self) -> tuple[dict[str, str], str]:
        """The digest of each of the base's model, team, service and endpoints stacks' inputs, and of its platform's."""

    def summarise(self, same: set[str], platform_same: bool) -> None:
        """Which stacks have the same inputs as the head's (`same`), and whether its platform has (`platform_same`):
        in the summary they are `SAME`, neither composed nor fingerprinted."""

    def summary(self) -> BaseSummary:
        """The base's summary, composing only the stacks whose inputs are not the head's (`summarise`)."""


class BasePlan:
    """The base planned in this process (`BaseSide`): its plan first, so that the head's reuses its rankings
    (`memo`)."""

    def __init__(self, fleet: Fleet, recorded: list, memo: PlanMemo, host: Host, gateways: Gateways | None):
        self.fleet, self.recorded, self.host, self.gateways = fleet, recorded, host, gateways
        self.cache = PlanCache(memo)
        self.plan = schedule(fleet, recorded, memo=memo)
        self._inputs: StackInputs | None = None
        self._platform = ""
        self._same: tuple[set[str], bool] | None = None

    def inputs(self) -> tuple[dict[str, str], str]:
        self._inputs = stack_inputs(self.fleet, self.plan, self.host.cluster, self.gateways)
        self._platform = platform_inputs(self.fleet, self.host.cluster, dynamo=dynamo_clusters(self.plan, self.recorded))
        return self._inputs.digests, self._platform

    def summarise(self, same: set[str], platform_same: bool) -> None:
        self._same = same, platform_same

    def summary(self) -> BaseSummary:
        assert self._inputs is not None and self._same is not None, "inputs() and summarise() first"
        same, platform_same = self._same
        digests = self._inputs.digests
        known = {name: Known(digests[name], SAME + digests[name]) for name in same}
        platform = KnownPlatform.unchanged(self._platform, self.fleet, self.host.cluster) if platform_same else None
        cache = replace(self.cache.for_fleet(self.plan, self._inputs), known=known, platform=platform)
        return BaseSummary.of(desired_state(self.fleet, self.recorded, self.host, cache, gateways=self.gateways),
                              self.fleet)
