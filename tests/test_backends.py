"""The backend decision table (docs/backends.md), row by row, and how its errors reach users."""

import pytest

from fleet.backends import EngineFacts, decide, dynamo_framework
from tests.manifests import deployment, errors, member, mutate

VLLM = "vllm/vllm-openai:v0.11.0"
DYN = "nvcr.io/nvidia/ai-dynamo/vllm-runtime:0.6.1"
SINGLE = ("Standalone",)
GANG = ("Leader", "Worker")


def facts(roles=SINGLE, image=VLLM, capabilities=(), name="e"):
    return EngineFacts(name, roles, (image,) * len(roles), tuple(capabilities))


# (row, engines, mode, annotation, expected backends or error fragment, needs NVIDIA)
TABLE = [
    ("1 single-pod, default", [facts()], "Unified", None, ["native"], False),
    ("2 multi-pod gang, default", [facts(GANG)], "Unified", None, ["llm-d"], False),
    ("3 PrefillDecode, default", [facts(name="p"), facts(name="d")], "PrefillDecode", None, ["llm-d", "llm-d"], False),
    ("4 capability + Dynamo image", [facts(GANG, DYN, ["KVOffload"])], "Unified", None, ["dynamo"], True),
    ("4b single-pod capability + Dynamo image", [facts(SINGLE, DYN, ["WeightStreaming"])], "Unified", None, ["dynamo"], True),
    ("5 annotation dynamo + Dynamo image", [facts(GANG, DYN)], "Unified", "dynamo", ["dynamo"], True),
    ("6 capability, not a Dynamo image", [facts(GANG, VLLM, ["NVLinkDomain"])], "Unified", None,
     "Dynamo is required (capabilities NVLinkDomain) but the image is not a Dynamo runtime", None),
    ("6b annotation dynamo, not a Dynamo image", [facts(GANG)], "Unified", "dynamo",
     "Dynamo is required (modelplane.ai/backend: dynamo)", None),
    ("7 PD: one engine's capability takes both to Dynamo", [facts(SINGLE, DYN, ["KVOffload"], "p"), facts(SINGLE, DYN, (), "d")],
     "PrefillDecode", None, ["dynamo", "dynamo"], True),
    ("7b PD: partner without a Dynamo image", [facts(SINGLE, DYN, ["KVOffload"], "p"), facts(SINGLE, VLLM, (), "d")],
     "PrefillDecode", None, "Dynamo is required (another engine of the replica needs it)", None),
    ("8 annotation llm-d on a single-pod engine", [facts()], "Unified", "llm-d", ["llm-d"], False),
    ("9 annotation llm-d with a capability", [facts(GANG, DYN, ["KVOffload"])], "Unified", "llm-d",
     "capabilities KVOffload need Dynamo, but modelplane.ai/backend forces llm-d", None),
    ("10 annotation native on a gang", [facts(GANG)], "Unified", "native", "native serves one Standalone pod", None),
    ("10b annotation native on PrefillDecode", [facts(name="p"), facts(name="d")], "PrefillDecode", "native",
     "native serves one Standalone pod", None),
    ("11 annotation native on a single-pod engine", [facts()], "Unified", "native", ["native"], False),
    ("12 Dynamo image alone changes nothing", [facts(GANG, DYN)], "Unified", None, ["llm-d"], False),
    ("13 unknown annotation value", [facts()], "Unified", "triton", "unknown backend 'triton'", None),
    ("7c Unified: one engine's capability takes the replica to Dynamo",
     [facts(GANG, DYN, ["KVOffload"], "a"), facts(SINGLE, DYN, (), "b")], "Unified", None, ["dynamo", "dynamo"], True),
    ("14 annotation llm-d on PrefillDecode", [facts(name="p"), facts(name="d")], "PrefillDecode", "llm-d", ["llm-d", "llm-d"], False),
]


@pytest.mark.parametrize("engines,mode,annotation,expected,nvidia", [r[1:] for r in TABLE], ids=[r[0] for r in TABLE])
def test_decision_table(engines, mode, annotation, expected, nvidia):
    decisions, errs = decide(engines, mode, annotation)
    if isinstance(expected, str):
        assert decisions == [] and any(expected in message for _, message in errs), errs
    else:
        assert errs == []
        assert [d.backend for d in decisions] == expected
        assert all(d.needs_nvidia == nvidia for d in decisions)
        assert all(d.reason for d in decisions)


@pytest.mark.parametrize("image,framework", [
    ("nvcr.io/nvidia/ai-dynamo/vllm-runtime:0.6.1", "vllm"),
    ("nvcr.io/nvidia/ai-dynamo/sglang-runtime:1.0.0", "sglang"),
    ("nvcr.io/nvidia/ai-dynamo/tensorrtllm-runtime@sha256:abc", "trtllm"),
    ("registry.local/mirror/ai-dynamo/vllm-runtime", "vllm"),
    ("vllm/vllm-openai:v0.11.0", None),
    ("nvcr.io/nvidia/ai-dynamo/vllm-runtime-debug:1", None),
    ("nvcr.io/nvidia/dynamo/vllm-runtime:1", None),
])
def test_dynamo_runtime_images(image, framework):
    assert dynamo_framework(image) == framework


def test_errors_are_located_on_the_engine_or_the_annotation():
    gang = deployment(engines=[{"name": "e", "capabilities": ["KVOffload"],
                                "members": [member("Leader"), member("Worker", nodes=1)]}])
    found = errors(gang)
    assert found == ["spec.template.spec.engines[0]: Dynamo is required (capabilities KVOffload) but the image is not a "
                     "Dynamo runtime (an ai-dynamo/vllm-runtime, sglang-runtime or tensorrtllm-runtime image)"]
    bad = mutate(deployment(), "metadata.annotations", {"modelplane.ai/backend": "triton"})
    assert errors(bad) == ["metadata.annotations[modelplane.ai/backend]: unknown backend 'triton' (one of native, llm-d, dynamo)"]
    unknown_capability = mutate(gang, "spec.template.spec.engines[0].capabilities", ["Magic"])
    assert any("capabilities[0]" in e and "'KVOffload', 'WeightStreaming' or 'NVLinkDomain'" in e for e in errors(unknown_capability))


def test_every_backend_the_fleet_decides_has_one_that_composes_it():
    """fleet/backends.py decides among BACKENDS; workloads/backends/registry.py composes each of them, by name."""
    from fleet.backends import BACKENDS as DECIDED
    from workloads.backends.registry import BACKENDS as COMPOSED

    assert sorted(COMPOSED) == sorted(DECIDED)
    assert all(b.name == name for name, b in COMPOSED.items())
