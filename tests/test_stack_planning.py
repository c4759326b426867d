"""The stack planner, table-driven: every change kind, which stacks a change touches, order and waves."""

import copy
import pathlib

import pytest

from automation.planning.compare import compare
from automation.planning.stacks import desired_state, StackChange, changes, waves
from fleet.scheduler import schedule
from fleet.stack_id import StackId
from tests.manifests import run, example_documents

ROOT = pathlib.Path(__file__).resolve().parent.parent
EXAMPLES = example_documents()  # examples/, less its v0.3.1 variant (tests/manifests.py)


def find(docs, kind, name):
    return next(d for d in docs if d["kind"] == kind and d["metadata"]["name"] == name)


def edit_image(docs):
    md = find(docs, "ModelDeployment", "kimi-k2")
    md["spec"]["template"]["spec"]["engines"][0]["members"][0]["template"]["spec"]["containers"][0]["image"] = "vllm/vllm-openai:v0.12.0"


def add_replica(docs):
    find(docs, "ModelDeployment", "qwen3-8b")["spec"]["replicas"] = 3


def add_cluster(docs):
    new = copy.deepcopy(find(docs, "InferenceCluster", "gke-us-central"))
    new["metadata"]["name"] = "gke-eu-west"
    new["metadata"]["labels"] = {"region": "eu", "cloud": "gcp"}
    new["spec"]["cluster"]["gke"]["region"] = "europe-west4"
    for pool in new["spec"]["nodePools"]:  # zones of the new region (validate refuses us-central1's there)
        if pool.get("zones"):
            pool["zones"] = [f"europe-west4-{z.rsplit('-', 1)[1]}" for z in pool["zones"]]
    docs.append(new)


def remove_service(docs):
    docs.remove(find(docs, "ModelService", "kimi-k2"))


def add_deployment(docs):
    md = copy.deepcopy(find(docs, "ModelDeployment", "qwen3-8b"))
    md["metadata"]["name"] = "qwen3-8b-canary"
    md["spec"]["replicas"] = 1
    docs.append(md)


def retag_gateway(docs):
    find(docs, "InferenceGateway", "default")["spec"]["traefik"]["version"] = "41.0.0"


def nothing(docs):
    pass


# (edit, {stack: change} for every stack that changes)
ROWS = [
    ("no change", nothing, {}),
    ("edit one deployment's image", edit_image, {"model-ml-team.kimi-k2": "update"}),
    # the team's quota grows, the new replica gets an endpoint, the service routes to it
    ("add a replica", add_replica, {"model-ml-team.qwen3-8b": "update", "team-ml-team.gke-us-central": "update",
                                    "endpoints-ml-team": "update", "service-ml-team.qwen3-8b": "update"}),
    # the cache stages to the new cluster, so the team's namespace is created there first
    ("add a cluster", add_cluster, {"platform-gke-eu-west": "create", "cache-ml-team.qwen3-coder": "update",
                                    "team-ml-team.gke-eu-west": "create"}),
    # its endpoints go with it: no other service routes to them
    ("remove a service", remove_service, {"service-ml-team.kimi-k2": "delete", "endpoints-ml-team": "update"}),
    ("add a deployment", add_deployment, {"model-ml-team.qwen3-8b-canary": "create",
                                          "team-ml-team.gke-us-central": "update"}),
    ("bump the fleet gateway", retag_gateway, {"gateway": "update"}),
]


@pytest.mark.parametrize("edit,expected", [r[1:] for r in ROWS], ids=[r[0] for r in ROWS])
def test_a_change_touches_only_its_stacks(edit, expected):
    head = copy.deepcopy(EXAMPLES)
    edit(head)
    base = run(*EXAMPLES).fleet
    # once the base is applied: its placements are the record both sides are planned with (without a record, a
    # cluster that sorts first by name would take replicas planned afresh)
    recorded = [r.recorded() for r in schedule(base).replicas]
    result = compare(base, run(*head).fleet, recorded=recorded)
    assert {s.name: s.change for s in result.changed} == expected
    assert all(s.change == "none" for s in result.stacks if s.name not in expected)


def test_change_kinds_against_recorded_fingerprints():
    loaded = run(*EXAMPLES)
    schedule(loaded.fleet)
    desired = desired_state(loaded.fleet).specs
    recorded = {name: spec.fingerprint for name, spec in desired.items()}
    recorded["model-ml-team.qwen3-8b"] = "stale"
    recorded["model-ml-team.old"] = "abc"
    del recorded["gateway"]
    kinds = {c.name: c.change for c in changes(desired, recorded)}
    assert kinds["model-ml-team.qwen3-8b"] == "update" and kinds["gateway"] == "create"
    assert kinds["model-ml-team.old"] == "delete" and kinds["platform-byo-eu"] == "none"


def test_the_gateway_host_is_decided_once_and_passed_down(monkeypatch):
    """`desired_state` decides the cluster hosting the gateway once and passes it down; given one decided already
    (an `up` decides it from --control-plane), it decides none, and the stacks are those of the cluster chosen."""
    from automation.planning import stacks

    loaded = run(*EXAMPLES)
    decided: list[tuple] = []
    real = stacks.control_plane_cluster
    monkeypatch.setattr(stacks, "control_plane_cluster", lambda *a, **k: decided.append(a) or real(*a, **k))
    chosen = desired_state(loaded.fleet, control_plane="byo-eu")
    assert len(decided) == 1
    given = desired_state(loaded.fleet, control_plane=stacks.Host("byo-eu"))
    assert len(decided) == 1
    assert {n: s.fingerprint for n, s in given.specs.items()} == {n: s.fingerprint for n, s in chosen.specs.items()}
    assert given.specs["gateway"].host == "byo-eu"


def test_dependencies_and_waves():
    loaded = run(*EXAMPLES)
    schedule(loaded.fleet)
    desired = desired_state(loaded.fleet, control_plane="byo-eu").specs
    assert desired["model-ml-team.qwen3-coder"].depends_on == [
        "cache-ml-team.qwen3-coder", "platform-byo-eu", "team-ml-team.byo-eu"]
    # services land on the control plane: the host's platform stack (its CRDs), the gateway (its namespaces), their
    # namespace's endpoints, which wait for the models they point at
    assert desired["service-ml-team.qwen3-8b"].depends_on == [
        "endpoints-ml-team", "gateway", "platform-byo-eu", "team-ml-team.byo-eu"]
    assert {"model-ml-team.qwen3-8b", "platform-byo-eu"} <= set(desired["endpoints-ml-team"].depends_on)
    assert {"team-ml-team.byo-eu", "team-ml-team.gke-us-central"} <= set(desired["cache-ml-team.qwen3-coder"].depends_on)
    assert set(desired["cache-ml-team.qwen3-coder"].depends_on) == {
        "platform-byo-eu", "platform-eks-us-west", "platform-gke-us-central", "team-ml-team.byo-eu",
        "team-ml-team.eks-us-west", "team-ml-team.gke-us-central"}
    groups = [[c.name for c in wave] for wave in waves(changes(desired, {}))]
    position = {name: i for i, wave in enumerate(groups) for name in wave}
    for spec in desired.values():
        assert all(position[d] < position[spec.name] for d in spec.depends_on)
    assert groups[0] == ["platform-byo-eu", "platform-eks-us-west", "platform-gke-us-central"]  # parallel group
    assert desired["gateway"].depends_on == ["platform-byo-eu"]  # hosted where --control-plane says
    assert all(len(set(w)) == len(w) for w in groups)


def test_deletes_run_last_and_dependents_first():
    P, M, S = StackId.platform, StackId.model, StackId.service
    items = [StackChange(P("a"), "delete"), StackChange(M("x", "y"), "delete"), StackChange(S("x", "s"), "delete"),
             StackChange(M("x", "z"), "update", ("platform-b",)), StackChange(P("b"), "create")]
    assert [[c.name for c in w] for w in waves(items)] == [
        ["platform-b"], ["model-x.z"], ["service-x.s"], ["model-x.y"], ["platform-a"]]


def test_none_changes_do_not_run():
    assert waves([StackChange(StackId.platform("a"), "none")]) == []


def test_a_recorded_replica_is_written_as_asdict_writes_it():
    """State files and portal reservations hold RecordedReplica.to_dict(); older ones were written by asdict."""
    import dataclasses
    import json

    from automation.record.applied import replica_from_dict
    from fleet.scheduler import schedule
    from tests.manifests import run
    from benchmarks.plan_bench import generate

    plan = schedule(run(*generate(12, 4)).fleet)
    for r in plan.replicas:
        recorded = r.recorded()
        written = dataclasses.asdict(recorded)
        if not recorded.dynamo:  # written only when true: every other record is as it was
            del written["dynamo"]
        assert json.dumps(recorded.to_dict()) == json.dumps(written)
        assert replica_from_dict(recorded.to_dict()) == recorded
