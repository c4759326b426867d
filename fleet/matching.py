"""Matching a member's per-node device requests to the devices of one node.

A request is served by one device entry of the node whose CEL selectors all hold and
which has `count` devices free. Requests are assigned by an exact search (backtracking
over the few requests and entries), so overlapping requests are never falsely rejected
the way first-fit would, and the answer does not depend on the order requests are
written in: requests are tried most-constrained first, then by name.
"""

from __future__ import annotations

from dataclasses import dataclass

from fleet.device_selectors import SelectorEvaluator
from fleet.inventory import PoolKind
from fleet.shapes import MemberShape


@dataclass(frozen=True)
class MemberMatch:
    """A member against one pool kind, capacity ignored."""

    candidates: tuple[tuple[int, ...], ...]  # per request (member.requests order): entries it may use
    empty_node: tuple[int, ...] | None  # an assignment on an empty node, or None if none exists
    reason: str | None = None  # why it does not fit, for people

    @property
    def fits(self) -> bool:
        return self.empty_node is not None

    @property
    def node(self) -> tuple[int, ...]:
        """The empty-node assignment of a member that fits (check `fits` first)."""
        if self.empty_node is None:
            raise ValueError(f"the member does not fit: {self.reason}")
        return self.empty_node


def _selector_text(selectors: tuple[str, ...]) -> str:
    text = " && ".join(selectors)
    return text if len(text) <= 90 else text[:87] + "..."


def match_member(member: MemberShape, kind: PoolKind, cel: SelectorEvaluator) -> MemberMatch:
    candidates = []
    for request in member.requests:
        matching = [i for i, d in enumerate(kind.devices) if cel.matches_all(request.selectors, d.facts)]
        if not matching:
            failed = [e for e in (cel.error(request.selectors, d.facts) for d in kind.devices) if e]
            if failed and len(failed) == len(kind.devices):
                return MemberMatch((), None, f"request {request.name}: the selector could not be evaluated on this "
                                             f"pool's devices ({failed[0]}): {_selector_text(request.selectors)}")
            return MemberMatch((), None, f"no device matches request {request.name} ({_selector_text(request.selectors)})")
        big_enough = [i for i in matching if kind.devices[i].count >= request.count]
        if not big_enough:
            best = max(kind.devices[i].count for i in matching)
            return MemberMatch((), None, f"request {request.name} needs {request.count} devices per node, "
                                         f"a node has {best}")
        # claimable (DRA) devices first, then the class's own order
        big_enough.sort(key=lambda i: (not kind.devices[i].claimable, i))
        candidates.append(tuple(big_enough))
    options = tuple(candidates)
    empty = assign(member, options, kind.full)
    if empty is None:
        names = ", ".join(f"{r.name}x{r.count}" for r in member.requests)
        return MemberMatch(options, None, f"requests {names} do not fit on one node together")
    return MemberMatch(options, empty)


def assign(member: MemberShape, candidates: tuple[tuple[int, ...], ...], free: tuple[int, ...]) -> tuple[int, ...] | None:
    """Entry index per request such that no entry is over-used on a node with `free` devices, or None."""
    if not member.requests:
        return ()
    order = sorted(range(len(member.requests)), key=lambda i: (len(candidates[i]), member.requests[i].name))
    remaining = list(free)
    chosen: list[int] = [-1] * len(member.requests)

    def search(k: int) -> bool:
        if k == len(order):
            return True
        i = order[k]
        need = member.requests[i].count
        for entry in candidates[i]:
            if remaining[entry] >= need:
                remaining[entry] -= need
                chosen[i] = entry
                if search(k + 1):
                    return True
                remaining[entry] += need
        return False

    return tuple(chosen) if search(0) else None


def claims(member: MemberShape, kind: PoolKind, assignment: tuple[int, ...]) -> bool:
    """Does the member claim a DRA device with this assignment? Members that don't, cost nothing."""
    return any(kind.devices[e].claimable for e in assignment)


def demand(member: MemberShape, kind: PoolKind, assignment: tuple[int, ...]) -> tuple[int, ...]:
    """Devices of each entry that one pod takes on its node."""
    used = [0] * len(kind.devices)
    for request, entry in zip(member.requests, assignment):
        used[entry] += request.count
    return tuple(used)
