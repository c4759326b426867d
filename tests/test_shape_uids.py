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


def test_shapes_are_made_once_per_key_and_the_key_holds_everything_they_read():
    """engine_shapes keeps the shapes of each distinct `shape_key`: a deployment that differs in anything the
    shapes are made from (mode, annotations, an engine's name, copies, phase or capabilities, a member's role, pods,
    images or device requests) gets its own, equal to shapes made afresh (a field left out of the key would give
    a variant the base's); an alike one gets the same object."""
    import copy

    from fleet import shapes
    from tests.manifests import deployment, member, run

    def md(**changes):
        body = deployment("d", engines=[{"name": "e", "members": [member()]}])
        for path, value in changes.items():
            target = body
            *parents, last = path.split(".")
            for step in parents:
                target = target[int(step)] if step.isdigit() else target[step]
            target[last] = value
        loaded = run(copy.deepcopy(body))
        assert not loaded.errors, [str(p) for p in loaded.errors]
        return loaded.fleet.of("ModelDeployment")[0]

    dynamo = "nvcr.io/nvidia/ai-dynamo/vllm-runtime:0.4.0"
    variants = {
        "base": md(),
        "annotations": md(**{"metadata.annotations": {"modelplane.ai/backend": "llm-d"}}),
        "autoscaling": md(**{"metadata.annotations": {"modelplane.ai/autoscaling": "keda",
                                                      "modelplane.ai/autoscaling-max-copies": "3"}}),
        "engine name": md(**{"spec.template.spec.engines.0.name": "f"}),
        "copies": md(**{"spec.template.spec.engines.0.copies": 2}),
        "capabilities": md(**{"spec.template.spec.engines.0.capabilities": ["KVOffload"],
                              "spec.template.spec.engines.0.members.0.template.spec.containers.0.image": dynamo}),
        "image": md(**{"spec.template.spec.engines.0.members.0.template.spec.containers.0.image": dynamo}),
        "count": md(**{"spec.template.spec.engines.0.members.0.nodeSelector.devices.0.count": 2}),
        "device name": md(**{"spec.template.spec.engines.0.members.0.nodeSelector.devices.0.name": "x"}),
        "selector": md(**{"spec.template.spec.engines.0.members.0.nodeSelector.devices.0.selectors":
                          [{"cel": "device.driver == 'gpu.nvidia.com'"}]}),
        "gang": md(**{"spec.template.spec.engines.0.members": [member("Leader"), member("Worker", nodes=2)]}),
        "wider gang": md(**{"spec.template.spec.engines.0.members": [member("Leader"), member("Worker", nodes=3)]}),
        "prefill/decode": md(**{"spec.template.spec.serving": {"mode": "PrefillDecode"},
                                "spec.template.spec.engines": [{"name": "p", "phase": "Prefill", "members": [member()]},
                                                               {"name": "d", "phase": "Decode", "members": [member()]}]}),
    }
    shapes._SHAPES.clear()
    made = {name: shapes.engine_shapes(one) for name, one in variants.items()}
    assert len(shapes._SHAPES) == len(variants)  # every variant has a key of its own
    for name, one in variants.items():
        assert made[name] == shapes.made_shapes(one), name
        assert shapes.engine_shapes(md(**{}) if name == "base" else one) is made[name], name  # kept
