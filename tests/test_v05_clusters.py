"""Modelplane v0.5's InferenceCluster additions (shared/reference/modelplane-v0.5.md §2.7), held to the XRD the
reference cites (shared/schemas/modelplane/v0.5/inferenceclusters.yaml): `spec.stack` immutable once applied,
`spec.placement.metadata.labels` stamped on what is composed there, `status.gateway`."""

from __future__ import annotations

import pytest

from automation.record.applied import Applied, AppliedStack
from fleet.validate import STACK_IMMUTABLE, stack_transitions
from tests.manifests import cluster, gpu_class, run

L4 = gpu_class("l4", 1, "23034Mi")


def with_stack(name: str, stack: str | None) -> dict:
    ic = cluster(name, pools=(("gpu", "l4", 1),))
    if stack is not None:
        ic["spec"]["stack"] = stack
    return ic


def platform_record(stack: str | None, fingerprint: str = "f1") -> AppliedStack:
    args = {"name": "a", "source": "Existing", "pools": []}
    if stack is not None:
        args["stack"] = stack
    return AppliedStack(fingerprint, outputs={"clusterArgs": {"args": args, "metallbPool": None}})


@pytest.mark.parametrize("recorded,now,refused", [
    # the XRD: `stack` enum [Standard, Dynamo], default Standard; rule `self == oldSelf`
    (None, "Dynamo", False),  # not applied yet: a new cluster takes any stack
    ("Standard", None, False),  # the default is Standard: unchanged
    ("Standard", "Standard", False),
    ("Dynamo", "Dynamo", False),
    ("Standard", "Dynamo", True),
    ("Dynamo", "Standard", True),
    ("Dynamo", None, True),  # dropping the field is the default, Standard: a change
])
def test_spec_stack_is_immutable_against_what_the_record_applied(recorded, now, refused):
    loaded = run(L4, with_stack("a", now))
    assert not loaded.errors, [str(e) for e in loaded.errors]
    record = Applied({"platform-a": platform_record(recorded)} if recorded else {}, "memory")
    problems = stack_transitions(loaded.fleet, record.serving_stacks())
    assert bool(problems) == refused
    if refused:
        [p] = problems
        assert (p.object, p.path) == ("InferenceCluster/a", "spec.stack") and p.line > 0 and not p.warning
        # upstream's CEL message first, word for word, then what was applied and how to recreate
        assert p.message.startswith(STACK_IMMUTABLE + " (applied as ")
        assert STACK_IMMUTABLE == "spec.stack is immutable; recreate the cluster to change its serving stack."
        assert "--prune --yes-destroy-clusters" in p.message


@pytest.mark.parametrize("entry,expected", [
    (platform_record("Dynamo"), {"a": "Dynamo"}),
    (platform_record(None), {}),  # a record from before spec.stack existed says nothing
    (platform_record("Dynamo", fingerprint=""), {}),  # an update that never finished is not a record
    (AppliedStack("f1", outputs={}), {}),
])
def test_the_record_says_which_stack_a_cluster_applied_only_when_it_knows(entry, expected):
    assert Applied({"platform-a": entry, "model-ml.x": AppliedStack("f2")}, "memory").serving_stacks() == expected
