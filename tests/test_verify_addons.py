"""Existing clusters whose platform team manages the add-ons (`spec.cluster.existing.addons: Verify`): the platform
program installs none there (under mocks), what each such cluster must serve is derived from the plan's stacks
(automation/planning/addons.py), and `up` refuses, applying nothing, while a cluster does not serve it (through the
real CLI against the Pulumi CLI double, with the cluster's discovery answered by a double)."""

from __future__ import annotations

import copy
import dataclasses
import json
import pathlib

import pytest
import yaml

from automation.cli import main
from automation.execution import session
from automation.execution.programs import program_for, stack_config
from automation.projects import project_of
from automation.planning.addons import Need, Served, missing
from automation.checks.offline import run, unwrap
from automation.planning.stacks import Change, StackChange, desired_state
from fleet.stack_id import StackId
from tests.manifests import example_documents, run as load

ROOT = pathlib.Path(__file__).resolve().parent.parent
KUBECONFIG = "apiVersion: v1\nkind: Config\n"
RELEASE = "kubernetes:helm.sh/v3:Release"
EXAMPLES = example_documents()  # the v0.5 fleet (its v0.3 variant beside it would duplicate every object)


def verified(docs: list[dict], cluster: str = "byo-eu", **spec) -> list[dict]:
    """The manifests with `cluster` in Verify mode (and `spec` fields set on it)."""
    docs = copy.deepcopy(docs)
    for d in docs:
        if d["kind"] == "InferenceCluster" and d["metadata"]["name"] == cluster:
            d["spec"]["cluster"]["existing"]["addons"] = "Verify"
            d["spec"].update(spec)
    return docs


def fleet_of(docs: list[dict]):
    loaded = load(text="---\n".join(yaml.safe_dump(d, sort_keys=False) for d in docs))
    assert loaded.errors == []
    return loaded.fleet


@pytest.fixture(scope="module")
def examples():
    fleet = fleet_of(verified(EXAMPLES))
    return fleet, desired_state(fleet)


def registered(spec, fleet, config: dict | None = None):
    config = config or {"modelplane:byo-eu-kubeconfig": KUBECONFIG}
    return run(program_for(spec, fleet), project_of(spec.kind), spec.name, {**stack_config(spec), **config}, list(config))


def custom_kinds(resources) -> set[tuple[str, str]]:
    """(apiVersion, kind) of every Kubernetes object a program registered."""
    out = set()
    for r in resources:
        parts = r.type.split(":")
        if r.type.startswith("kubernetes:") and len(parts) == 3 and r.custom and not r.type.startswith(
                ("kubernetes:helm.sh", "kubernetes:yaml")):
            out.add((parts[1].replace("core/", ""), parts[2]))
    return out


# ---- the platform program -------------------------------------------------------------------------------------


def test_the_platform_stack_of_a_verify_cluster_installs_no_addon(examples):
    fleet, desired = examples
    verify = registered(desired.specs["platform-byo-eu"], fleet)
    install = registered(desired.specs["platform-eks-us-west"], fleet, {})  # the same program, installing them
    for resources, wanted in ((install, True), (verify, False)):
        releases = [r for r in resources if r.type == RELEASE]
        crds = [r for r in resources if r.type == "kubernetes:yaml/v2:ConfigGroup"
                and any(o["kind"] == "CustomResourceDefinition" for o in unwrap(r.inputs)["objs"])]
        assert bool(releases) is wanted and bool(crds) is wanted
    assert not [r for r in verify if "CustomResourceDefinition" in r.type]
    # its own objects are still made, none in a namespace of an add-on
    kinds = custom_kinds(verify)
    assert {("v1", "Namespace"), ("gateway.networking.k8s.io/v1", "GatewayClass"),
            ("gateway.networking.k8s.io/v1", "Gateway"), ("gateway.envoyproxy.io/v1alpha1", "EnvoyProxy")} <= kinds
    namespaces = {unwrap(r.inputs).get("metadata", {}).get("namespace") for r in verify if r.type.startswith("kubernetes:")}
    assert namespaces - {None} == {"modelplane-system"}


@pytest.mark.parametrize("variant", ["standard", "fleet-listener", "dynamo"])
def test_what_the_platform_stack_makes_on_a_verify_cluster_is_what_up_checks(variant):
    """The needs list declares the serving stack's objects (automation/planning/addons.py platform_objects): every
    kind it registers there is checked."""
    docs = verified(EXAMPLES, **({"stack": "Dynamo"} if variant == "dynamo" else {}))
    fleet = fleet_of(docs)
    desired = desired_state(fleet)
    spec = desired.specs["platform-byo-eu"]
    if variant == "fleet-listener":  # an Envoy front door's CA is recorded: the fleet listener's objects are made
        spec = dataclasses.replace(spec, payload=dataclasses.replace(spec.payload, client_cas=("PEM",)))
    made = custom_kinds(registered(spec, fleet))
    from automation.planning.stacks import addon_needs

    needs = addon_needs({**desired.specs, spec.name: spec})["byo-eu"]
    checked = {(n.api_version, n.kind) for n in needs if spec.name in n.needed_by and not n.namespace}
    assert made - {("v1", k) for k in ("Namespace", "ConfigMap", "Service")} - {("apps/v1", "Deployment")} == checked
    if variant == "fleet-listener":
        assert ("cert-manager.io/v1", "Certificate") in checked
    if variant == "dynamo":  # ModelExpress runs in the Dynamo platform's namespace, which is the platform team's
        assert [n.name for n in needs if n.namespace] == ["dynamo-system"]


# ---- what is needed ---------------------------------------------------------------------------------------------


def test_the_needs_of_a_verify_cluster_come_from_what_the_plan_places_there(examples):
    _, desired = examples
    assert set(desired.needs) == {"byo-eu"}  # the provisioned clusters get their add-ons from their stacks
    needs = {(n.api_version, n.kind): n for n in desired.needs["byo-eu"]}
    placed = {r.deployment for r in desired.plan.replicas if r.cluster == "byo-eu"}
    assert placed == {"qwen3-coder"}  # a two-node engine: a LeaderWorkerSet, served by LWS
    lws = needs[("leaderworkerset.x-k8s.io/v1", "LeaderWorkerSet")]
    assert lws.needed_by == ("model-ml-team.qwen3-coder",) and "LeaderWorkerSet" in lws.addon and "lws" in lws.addon
    assert needs[("resource.k8s.io/v1", "ResourceClaimTemplate")].addon.startswith("Kubernetes 1.34")
    assert needs[("gateway.envoyproxy.io/v1alpha1", "EnvoyProxy")].needed_by == ("platform-byo-eu",)
    # what the endpoint picker of its InferencePool watches, though no object of ours is one
    assert ("llm-d.ai/v1alpha2", "InferenceObjective") in needs
    # the models placed elsewhere need nothing of it
    assert not [n for n in desired.needs["byo-eu"] if "qwen3-8b" in " ".join(n.needed_by)]


def test_a_fleet_without_verify_clusters_needs_nothing():
    assert desired_state(fleet_of(EXAMPLES)).needs == {}


# ---- what the cluster serves ------------------------------------------------------------------------------------

ROUTE = Need("b", "gateway.networking.k8s.io/v1", "HTTPRoute", addon="the Gateway API's CRDs",
             needed_by=("model-ml.q",))
LWS = Need("b", "leaderworkerset.x-k8s.io/v1", "LeaderWorkerSet", addon="LeaderWorkerSet (chart lws 0.10.0)",
           needed_by=("model-ml.q", "model-ml.r"))
DYNAMO_NS = Need("b", "v1", "Namespace", "dynamo-system", "the Dynamo platform's namespace", ("platform-b",))


@pytest.mark.parametrize("needs, served, expected", [
    ([ROUTE, LWS], Served({"gateway.networking.k8s.io/v1": frozenset({"HTTPRoute"}),
                           "leaderworkerset.x-k8s.io/v1": frozenset({"LeaderWorkerSet"})}), []),
    ([ROUTE], Served({}), ["InferenceCluster/b: gateway.networking.k8s.io/v1 HTTPRoute is not served: it comes with "
                           "the Gateway API's CRDs; needed by model-ml.q"]),
    ([LWS], Served({"leaderworkerset.x-k8s.io/v1beta1": frozenset({"LeaderWorkerSet"})}),
     ["InferenceCluster/b: leaderworkerset.x-k8s.io/v1 LeaderWorkerSet is not served (only "
      "leaderworkerset.x-k8s.io/v1beta1): it comes with LeaderWorkerSet (chart lws 0.10.0); needed by model-ml.q, "
      "model-ml.r"]),
    ([ROUTE], Served({"gateway.networking.k8s.io/v1": frozenset({"Gateway"})}),
     ["InferenceCluster/b: gateway.networking.k8s.io/v1 HTTPRoute is not served: it comes with the Gateway API's "
      "CRDs; needed by model-ml.q"]),
    ([DYNAMO_NS], Served({}, frozenset({"dynamo-system"})), []),
    ([DYNAMO_NS], Served({}), ["InferenceCluster/b: namespace dynamo-system does not exist (the Dynamo platform's "
                               "namespace); needed by platform-b"]),
], ids=["served", "missing", "wrong-version", "group-without-kind", "namespace", "no-namespace"])
def test_each_missing_api_is_one_line_naming_the_cluster_the_api_and_its_addon(needs, served, expected):
    suffix = " (spec.cluster.existing.addons is Verify: its platform team installs it)"
    assert missing(needs, served) == [line + suffix for line in expected]


def test_only_the_stacks_about_to_run_are_checked_and_an_unreachable_cluster_is_said(examples):
    fleet, desired = examples
    asked: list[tuple[str, list[str]]] = []

    def nothing_served(cluster, wanted):
        asked.append((cluster, sorted({n.api_version for n in wanted})))
        return Served({})

    model = StackChange(StackId.parse("model-ml-team.qwen3-coder"), Change.update)
    other = StackChange(StackId.parse("model-ml-team.qwen3-8b"), Change.update)
    assert session.unserved_addons(fleet, desired.needs, [other], {}, nothing_served) == [] and asked == []
    lines = session.unserved_addons(fleet, desired.needs, [model], {}, nothing_served)
    assert asked and asked[0][0] == "byo-eu" and "gateway.envoyproxy.io/v1alpha1" not in asked[0][1]  # the platform's
    assert len(lines) == len([n for n in desired.needs["byo-eu"] if "model-ml-team.qwen3-coder" in n.needed_by])
    assert all(line.startswith("InferenceCluster/byo-eu: ") for line in lines)
    # a deletion needs nothing served
    gone = StackChange(StackId.parse("model-ml-team.qwen3-coder"), Change.delete)
    assert session.unserved_addons(fleet, desired.needs, [gone], {}, nothing_served) == []
    # no kubeconfig here to ask with: one line saying where to give it
    lines = session.unserved_addons(fleet, desired.needs, [model], {})
    assert len(lines) == 1 and "--kubeconfig byo-eu=PATH" in lines[0] and "cannot be checked" in lines[0]


# ---- through the CLI ----------------------------------------------------------------------------------------------


def answering(served_except: set[tuple[str, str]]):
    """A discovery double: every API and namespace asked about is served, except `served_except`."""
    def reader(fleet, files):
        def read(cluster, wanted):
            kinds: dict[str, set[str]] = {}
            for n in wanted:
                if not n.namespace and (n.api_version, n.kind) not in served_except:
                    kinds.setdefault(n.api_version, set()).add(n.kind)
            return Served({v: frozenset(k) for v, k in kinds.items()}, frozenset(n.name for n in wanted if n.namespace))
        return read
    return reader


def test_up_refuses_a_verify_cluster_that_does_not_serve_what_is_placed_there_and_applies_nothing(
        tmp_path, monkeypatch, capsys):
    from tests.test_lifecycle import make_driver

    double = make_driver(tmp_path, monkeypatch)
    double.docs = verified(EXAMPLES)
    monkeypatch.setattr(session, "kubeconfig_reader", answering({("inference.networking.k8s.io/v1", "InferencePool")}))
    assert double.up() == 1
    err = capsys.readouterr().err
    assert "InferenceCluster/byo-eu: inference.networking.k8s.io/v1 InferencePool is not served" in err
    assert double.ran("up") == [] and double.ran("preview") == [] and double.recorded() == {}  # nothing applied
    monkeypatch.setattr(session, "kubeconfig_reader", answering(set()))
    assert double.up() == 0, capsys.readouterr().err
    assert "platform-byo-eu" in double.recorded() and "model-ml-team.qwen3-coder" in double.recorded()


def test_plan_shows_what_up_will_check(tmp_path, capsys):
    path = tmp_path / "fleet.yaml"
    path.write_text(yaml.safe_dump_all(verified(EXAMPLES), sort_keys=False))
    assert main(["plan", "-f", str(path), "-o", "json", "--fresh"]) == 0
    checks = json.loads(capsys.readouterr().out)["addonChecks"]
    assert {(c["cluster"], c["apiVersion"], c["kind"]) for c in checks} >= {
        ("byo-eu", "leaderworkerset.x-k8s.io/v1", "LeaderWorkerSet"), ("byo-eu", "gateway.networking.k8s.io/v1", "HTTPRoute")}
    assert main(["plan", "-f", str(path), "--fresh"]) == 0
    assert "byo-eu: leaderworkerset.x-k8s.io/v1 LeaderWorkerSet, from LeaderWorkerSet" in capsys.readouterr().out
    assert main(["plan", "-f", str(ROOT / "examples"), "-o", "json", "--fresh"]) == 0
    assert "addonChecks" not in json.loads(capsys.readouterr().out)


def test_verify_on_a_provisioned_cluster_is_refused_naming_file_object_and_field(tmp_path, capsys):
    docs = copy.deepcopy(EXAMPLES)
    gke = next(d for d in docs if d["kind"] == "InferenceCluster" and d["spec"]["cluster"]["source"] == "GKE")
    gke["spec"]["cluster"]["existing"] = {"secretRef": {"name": "x"}, "addons": "Verify"}
    path = tmp_path / "fleet.yaml"
    path.write_text(yaml.safe_dump_all(docs, sort_keys=False))
    assert main(["validate", "-f", str(path)]) == 1
    lines = [line for line in capsys.readouterr().err.splitlines() if "existing.addons" in line]
    assert len(lines) == 1 and lines[0].startswith(f"{path}:")
    assert f"InferenceCluster/{gke['metadata']['name']}: spec.cluster.existing.addons: only an Existing cluster's " \
           "add-ons can be left to its platform team" in lines[0]


def test_the_portals_worker_runs_the_same_check_and_applies_nothing(tmp_path, monkeypatch):
    from automation.portal import worker as worker_module
    from automation.portal.store import Store
    from automation.road.executor import Executor
    from tests.test_orchestrator import FakeRunner, MemoryRecord

    store = Store(f"sqlite:///{tmp_path / 'p.db'}")
    with store.write() as conn:
        for doc in verified(EXAMPLES):
            if doc["apiVersion"].startswith("modelplane.ai/"):
                store.put(conn, doc["kind"], doc["metadata"].get("namespace") or "", doc, None)
        store.enqueue(conn, "model-ml-team.qwen3-coder", "up", "f1")
    runner = FakeRunner()
    worker = worker_module.Worker(store, tmp_path, runner=lambda fleet, state: Executor.ready(runner, MemoryRecord()))
    monkeypatch.setattr(session, "kubeconfig_reader", answering({("leaderworkerset.x-k8s.io/v1", "LeaderWorkerSet")}))
    worker.execute(worker.claim())
    with store.read() as conn:
        [run] = store.list_runs(conn)
    assert run["status"] == "failed" and runner.calls == []
    assert "nothing was applied: InferenceCluster/byo-eu: leaderworkerset.x-k8s.io/v1 LeaderWorkerSet is not served" \
        in run["log"]
