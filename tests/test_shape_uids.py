"""Shapes and pool kinds key the placement caches by `uid`, a number equal values share: equal values must get the
same number, different values never the same one, in this interpreter and after a trip through pickle (the
portal's replan worker sends plans back), and a process that has numbered many values starts again without ever
giving an old number to a new value."""

import pickle
from dataclasses import replace

from fleet import shapes
from fleet.device_facts import DeviceFacts
from fleet.inventory import PoolDevice, PoolKind
from fleet.shapes import EngineShape, MemberShape, Request


def member(count: int = 1) -> MemberShape:
    return MemberShape("Standalone", 1, (Request("gpu", count, ("device.attributes['x'] == 1",)),))


def test_equal_values_share_a_number_and_different_values_never_do():
    a, b, c = member(1), member(1), member(2)
    assert a is not b and a.uid == b.uid and a.uid != c.uid
    engine = EngineShape("vllm", 1, None, (a,))
    assert EngineShape("vllm", 1, None, (b,)).uid == engine.uid
    assert replace(engine, copies=2).uid != engine.uid
    assert EngineShape("vllm", 1, None, (c,)).uid != engine.uid


def test_a_pickled_shape_is_numbered_by_the_interpreter_that_reads_it():
    engine = EngineShape("vllm", 1, None, (member(),))
    state = engine.__getstate__()
    assert "uid" not in state and "_hash" not in state
    back = pickle.loads(pickle.dumps(engine))
    assert back == engine and back.uid == engine.uid and back.members[0].uid == engine.members[0].uid


def test_pool_kinds_are_numbered_by_value():
    def kind(count: int) -> PoolKind:
        return PoolKind((PoolDevice("gpu", "DRA", "gpu.nvidia.com", count, DeviceFacts("gpu.nvidia.com"), 24 * 2**30),))

    assert kind(1).uid == kind(1).uid != kind(2).uid


def test_numbers_are_never_reused_when_the_table_starts_again(monkeypatch):
    monkeypatch.setattr(shapes, "_UIDS", {})
    monkeypatch.setattr(shapes, "MAX_INTERNED", 3)
    seen = {member(n).uid for n in range(1, 4)}
    later = member(4)  # the table is full: it starts again
    assert later.uid not in seen and len(shapes._UIDS) == 1
    again = member(1)  # numbered afresh: a cache entry is missed, never another value's taken
    assert again.uid not in seen | {later.uid}
