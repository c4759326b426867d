"""Modelplane v0.5's InferenceGateway against what the gateway stack applied (shared/reference/modelplane-v0.5.md
§2.1, shared/schemas/modelplane/v0.5/inferencegateways.yaml): `spec.clusterName` immutable once applied, the XRD's
transition rule `self == oldSelf` with "old" what the record holds."""

from __future__ import annotations

import re

import pytest

from automation.record.applied import Applied, AppliedStack
from fleet.validate import gateway_transitions
from tests.manifests import cluster, gpu_class, run

L4 = gpu_class("l4", 1, "23034Mi")


def v05_gateway(name: str = "public", cluster_name: str = "a") -> dict:
    return {"apiVersion": "modelplane.ai/v1alpha1", "kind": "InferenceGateway", "metadata": {"name": name},
            "spec": {"clusterName": cluster_name}}


def gateway_record(name: str | None, cluster_name: str | None, fingerprint: str = "f1") -> AppliedStack:
    outputs: dict = {"address": "203.0.113.7"}
    if name is not None:
        outputs["gatewayCluster"] = {"name": name, "clusterName": cluster_name}
    return AppliedStack(fingerprint, outputs=outputs)


@pytest.mark.parametrize("recorded,now,refused", [
    (None, ("public", "a"), False),  # not applied yet: a new gateway goes on any cluster
    (("public", "a"), ("public", "a"), False),
    (("public", "a"), ("public", "b"), True),  # the XRD: `self == oldSelf`, "spec.clusterName is immutable."
    (("other", "a"), ("public", "b"), False),  # another gateway's record says nothing of this one
])
def test_spec_cluster_name_is_immutable_against_what_the_gateway_stack_applied(recorded, now, refused):
    loaded = run(L4, cluster("a"), cluster("b"), v05_gateway(*now))
    assert not loaded.errors, [str(e) for e in loaded.errors]
    record = Applied({"gateway": gateway_record(*recorded)} if recorded else {}, "memory")
    problems = gateway_transitions(loaded.fleet, record.gateway_clusters())
    assert bool(problems) == refused
    if refused:
        [p] = problems
        assert (p.object, p.path) == ("InferenceGateway/public", "spec.clusterName") and p.line > 0 and not p.warning
        # upstream's CEL message first, word for word, then what was applied and how to recreate
        assert p.message.startswith("spec.clusterName is immutable. (applied on a, now b: ")
        assert "up --prune" in p.message


@pytest.mark.parametrize("entry,expected", [
    (gateway_record("public", "a"), {"public": "a"}),
    (gateway_record(None, None), {}),  # a record from before the output existed (or a v0.3.1 gateway) says nothing
    (gateway_record("public", "a", fingerprint=""), {}),  # an update that never finished is not a record
    (AppliedStack("f1", outputs={"gatewayCluster": "a"}), {}),  # malformed: nothing
])
def test_the_record_says_which_cluster_a_gateway_applied_on_only_when_it_knows(entry, expected):
    assert Applied({"gateway": entry, "platform-a": AppliedStack("f2")}, "memory").gateway_clusters() == expected


def test_up_refuses_a_moved_v05_gateway_against_the_record(tmp_path, monkeypatch, capsys):
    """Through `up` and the program-running double: the gateway stack records the cluster it applied the gateway
    on, and a later `up` with another clusterName applies nothing."""
    from tests.test_lifecycle import make_driver

    driver = make_driver(tmp_path, monkeypatch)
    driver.docs = [v05_gateway("public", "byo-eu") if d["kind"] == "InferenceGateway" else d for d in driver.docs]
    driver.control()
    assert driver.up() == 0, capsys.readouterr().err
    assert driver.recorded()["gateway"]["outputs"]["gatewayCluster"] == {"name": "public", "clusterName": "byo-eu"}
    capsys.readouterr()
    driver.docs = [v05_gateway("public", "eks-us-west") if d["kind"] == "InferenceGateway" else d for d in driver.docs]
    assert driver.up() == 1
    err = capsys.readouterr().err
    assert re.search(r"fleet\.yaml:\d+: InferenceGateway/public: spec\.clusterName: spec\.clusterName is immutable\. "
                     r"\(applied on byo-eu, now eks-us-west", err), err
    assert "nothing was applied" in err and driver.ran("up") == [] and driver.ran("destroy") == []


@pytest.mark.parametrize("gateway,expected", [
    (v05_gateway("public", "a"), {"name": "public", "clusterName": "a"}),
    # a v0.3.1 gateway has no clusterName: nothing recorded
    ({"apiVersion": "modelplane.ai/v1alpha1", "kind": "InferenceGateway", "metadata": {"name": "default"},
      "spec": {"backend": "Traefik", "traefik": {"version": "40.2.0"}}}, None),
])
def test_the_platform_programs_gateway_stack_records_the_same_cluster(gateway, expected):
    """components/platform.py's gateway stack (a laptop's `pulumi up --stack gateway`, the operator's Program) outputs
    what the automation layer's does: the v0.5 gateway's cluster."""
    import pulumi

    from components.platform import platform
    from tests.pulumi_mocks import registered

    loaded = run(L4, cluster("a"), gateway)
    assert not loaded.errors, [str(e) for e in loaded.errors]
    outputs: dict = {}
    registered(lambda: outputs.update(platform(loaded.fleet, pulumi.Config("modelplane"), gateway_only=True,
                                               gateway_kubeconfig="kubeconfig")), "gateway",
               {"modelplane:gatewayOnly": "true", "modelplane:controlPlaneCluster": "a"})
    assert outputs["gateway"].get("gatewayCluster") == expected
