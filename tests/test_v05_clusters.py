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


# ---- spec.placement.metadata.labels ----------------------------------------------------------------------------------

def placed(name: str, labels: dict | None) -> dict:
    ic = cluster(name, pools=(("gpu", "l4", 1),))
    if labels is not None:
        ic["spec"]["placement"] = {"metadata": {"labels": labels}}
    return ic


@pytest.mark.parametrize("labels,error", [
    ({"example.org/region": "eu", "tier": "gold"}, None),
    ({}, None),
    # the XRD's CEL rule and message, word for word
    ({"modelplane.ai/region": "eu"}, ("spec.placement.metadata.labels[modelplane.ai/region]",
                                      "spec.placement.metadata.labels must not use the reserved modelplane.ai/ prefix.")),
    ({f"k{i}": "v" for i in range(17)}, ("spec.placement.metadata.labels", "at most 16")),  # maxProperties: 16
    ({"region": "e" * 64}, ("spec.placement.metadata.labels.region", "at most 63")),  # maxLength: 63
    # stamped on objects as labels, so Kubernetes' label rules hold too (the XRD leaves them to the API server)
    ({"bad key!": "x"}, ("spec.placement.metadata.labels.bad key!", "not a qualified name")),
    ({"region": "eu west"}, ("spec.placement.metadata.labels.region", "not a valid label value")),
], ids=["ok", "empty", "reserved", "seventeen", "long-value", "bad-key", "bad-value"])
def test_placement_labels_follow_the_xrds_rules(labels, error):
    problems = [(p.path, p.message) for p in run(L4, placed("a", labels)).errors]
    if error is None:
        assert problems == []
    else:
        path, fragment = error
        assert any(p == path and fragment in m for p, m in problems), problems


def test_a_service_selecting_a_placement_label_picks_the_endpoints_composed_on_those_clusters():
    from automation.planning.conditions import Observed, composed, snapshot
    from automation.planning.stacks import desired_state
    from tests.manifests import deployment, service

    md = deployment("qwen", replicas=3)
    # the deployment's own label of the same key loses to the cluster's: where it runs is the cluster's fact
    md["spec"]["template"]["metadata"] = {"labels": {"example.org/region": "mars", "team": "nlp"}}
    eu = service("eu", deployment_name="qwen")
    eu["spec"]["endpoints"][0]["selector"]["matchLabels"] = {"example.org/region": "eu", "team": "nlp"}
    loaded = run(L4, placed("eu-1", {"example.org/region": "eu"}), placed("eu-2", {"example.org/region": "eu"}),
                 placed("us-1", {"example.org/region": "us"}), md, eu, service("all", deployment_name="qwen"))
    assert not loaded.errors, [str(e) for e in loaded.errors]
    desired = desired_state(loaded.fleet)
    by_cluster = {r.cluster: r.name for r in desired.plan.replicas}
    assert set(by_cluster) == {"eu-1", "eu-2", "us-1"}
    routes = desired.rendered.routes
    assert sorted(routes[("ml-team", "eu")]) == sorted([by_cluster["eu-1"], by_cluster["eu-2"]])
    assert len(routes[("ml-team", "all")]) == 3  # a service without the label still routes to every replica
    # the composed objects users' tools list carry them: ModelEndpoints and ModelReplicas alike
    snap = snapshot(desired)
    shown = {(o["kind"], o["metadata"]["name"]): o["metadata"]["labels"] for o in composed("ml-team", snap, Observed())}
    for cluster_name, replica in by_cluster.items():
        region = cluster_name.split("-")[0]
        for kind in ("ModelEndpoint", "ModelReplica"):
            labels = shown[(kind, replica)]
            assert labels["example.org/region"] == region and labels["modelplane.ai/cluster"] == cluster_name, kind
    assert shown[("ModelEndpoint", by_cluster["us-1"])]["team"] == "nlp"  # template labels still reach endpoints


def test_a_relabelled_cluster_reruns_no_model_stack():
    """The labels are for selection (routing reads them); they are not on the workloads, so relabelling a cluster
    never rolls its replicas' pods."""
    from automation.planning.stacks import desired_state
    from tests.manifests import deployment, service

    def specs(region: str):
        loaded = run(L4, placed("a", {"example.org/region": region}), deployment("qwen"), service("qwen"))
        return {name: spec.fingerprint for name, spec in desired_state(loaded.fleet).specs.items()}

    before, after = specs("eu"), specs("us")
    changed = {name for name in before if before[name] != after.get(name)}
    assert "model-ml-team.qwen" not in changed


# ---- status.gateway ---------------------------------------------------------------------------------------------

CA = "-----BEGIN CERTIFICATE-----\nMIIB\n-----END CERTIFICATE-----\n"


@pytest.mark.parametrize("gateway,error", [
    ({"address": "203.0.113.9", "hostname": "gateway-a-1f2e3.modelplane-system.svc.cluster.local",
      "caCertificate": CA}, None),
    ({"address": "203.0.113.9"}, None),  # v0.3.1's shape
    ({"address": "203.0.113.9", "caCertificate": "x" * 16385}, "status.gateway.caCertificate"),  # maxLength 16384
], ids=["v0.5", "v0.3.1", "ca-too-long"])
def test_a_v05_clusters_observed_gateway_status_loads(gateway, error):
    """A v0.5 cluster as `kubectl get -o yaml` prints it is observed state: its status.gateway loads, and its
    address is what routing reads."""
    from tests.manifests import deployment

    ic = cluster("a", pools=(("gpu", "l4", 1),))
    ic["status"] = {"conditions": [{"type": "Ready", "status": "True"}], "gateway": gateway}
    loaded = run(L4, ic, deployment("qwen"))
    paths = [p.path for p in loaded.errors]
    if error is not None:
        assert error in paths, paths
        return
    assert paths == []
    from automation.planning.stacks import desired_state

    [ep] = [e for e in desired_state(loaded.fleet).rendered.endpoints if e.composed]
    assert ep.url.startswith("http://203.0.113.9/")


@pytest.mark.parametrize("outputs,gateway", [
    ({}, None),
    ({"gatewayAddress": "203.0.113.9"}, {"address": "203.0.113.9"}),
    # a hostname or CA in the record is only ever what the platform stack output: today it outputs neither, and
    # upstream publishes the hostname only with the serving CA and a fleet gateway's client CA (fail closed)
    ({"gatewayAddress": "203.0.113.9", "clusterArgs": {"args": {"stack": "Standard"}, "clientCAs": [CA]}},
     {"address": "203.0.113.9"}),
], ids=["nothing", "address", "address-and-client-ca"])
def test_a_clusters_status_gateway_shows_only_what_the_record_holds(outputs, gateway):
    from automation.planning.conditions import Observed, with_status

    ic = cluster("a", pools=(("gpu", "l4", 1),))
    observed = Observed({"platform-a": {"fingerprint": "f1", "outputs": outputs, "appliedAt": "t"}})
    status = with_status(ic, {"fingerprints": {"platform-a": "f1"}}, observed, [])["status"]
    assert status.get("gateway") == gateway
