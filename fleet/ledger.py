"""Free devices per node, per pool: the capacity ledger.

A pool's nodes are identical when empty, so a pool's state is a multiset of per-node
free-device vectors ({vector: number of nodes}): compact for pools of hundreds of nodes,
and hashable so that equal pools share cached placement results. A pod takes its
devices on one node; several pods, of any deployments, share a node while devices
remain. Nothing is ever taken that is not free, so no node is ever overcommitted.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass

from fleet.inventory import PoolKind


@dataclass(frozen=True)
class Score:
    """How tightly a placement fits; smaller is tighter. Compared field by field.

    claimed_memory: memory of the devices taken (big GPUs are not spent on small models);
    stranded_memory / stranded_devices: change in free device memory and count left on
    partially used nodes (packing fills started nodes before opening new ones).
    """

    claimed_memory: int = 0
    stranded_memory: int = 0
    stranded_devices: int = 0

    def __add__(self, other: Score) -> Score:
        return Score(self.claimed_memory + other.claimed_memory, self.stranded_memory + other.stranded_memory,
                     self.stranded_devices + other.stranded_devices)

    def key(self) -> tuple[int, int, int]:
        return (self.claimed_memory, self.stranded_memory, self.stranded_devices)


ZERO = Score()


class PoolState:
    __slots__ = ("kind", "nodes", "_key")

    def __init__(self, kind: PoolKind, node_count: int, nodes: Counter | None = None):
        self.kind = kind
        self.nodes: Counter = nodes if nodes is not None else Counter({kind.full: node_count} if node_count > 0 and kind.devices else {})
        self._key: tuple | None = None

    def copy(self) -> PoolState:
        return PoolState(self.kind, 0, Counter(self.nodes))

    def key(self) -> tuple:
        """Hashable state: equal pools of equal kinds place identically."""
        if self._key is None:
            self._key = (self.kind.uid, tuple(sorted((v, n) for v, n in self.nodes.items() if n > 0)))
        return self._key

    def vectors(self) -> list[tuple[int, ...]]:
        return sorted(v for v, n in self.nodes.items() if n > 0)

    def take(self, vector: tuple[int, ...], used: tuple[int, ...]) -> None:
        self.nodes[vector] -= 1
        if self.nodes[vector] == 0:
            del self.nodes[vector]
        after = tuple(f - u for f, u in zip(vector, used))
        assert min(after, default=0) >= 0, "ledger overcommit"
        self.nodes[after] += 1
        self._key = None

    def free_devices(self) -> dict[str, int]:
        out: dict[str, int] = {}
        for vector, n in self.nodes.items():
            for device, free in zip(self.kind.devices, vector):
                out[device.name] = out.get(device.name, 0) + free * n
        return out

    def idle_nodes(self) -> int:
        return self.nodes.get(self.kind.full, 0)


def pod_score(kind: PoolKind, before: tuple[int, ...], used: tuple[int, ...]) -> Score:
    claimed = sum(u * d.memory for u, d in zip(used, kind.devices) if d.claimable)
    after = tuple(f - u for f, u in zip(before, used))

    def stranded(vector: tuple[int, ...]) -> tuple[int, int]:
        mem = sum(f * d.memory for f, d in zip(vector, kind.devices) if d.claimable)
        cnt = sum(f for f, d in zip(vector, kind.devices) if d.claimable)
        return mem, cnt

    was_started = before != kind.full
    mem_before, cnt_before = stranded(before) if was_started else (0, 0)
    mem_after, cnt_after = stranded(after)
    return Score(claimed, mem_after - mem_before, cnt_after - cnt_before)
