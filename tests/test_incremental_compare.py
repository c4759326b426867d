"""`plan --against` reuses what it can: the base's summary from the cache, and the base's fingerprint for every
head model stack whose inputs did not change. The result must be the same, byte for byte, as planning,
composing and fingerprinting both sides in full; these tests hold the two to it on generated fleets and on
the examples, and show the work actually saved."""

from __future__ import annotations

import copy
import json
import pathlib
import random

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import workloads.render
from automation.planning import base_plan as base_plan_module
from automation.planning import compare as compare_module
from automation.planning import stacks as stacks_module
from automation.planning.base_cache import BaseCache, BaseSummary, base_key
from automation.planning.compare import compare, markdown, to_dict
from benchmarks.plan_bench import generate
from fleet.plan_output import plan_to_dict
from fleet.validate import load_fleet
from tests.manifests import run
from tests.test_scheduler_properties import _perturb, fleets

ROOT = pathlib.Path(__file__).resolve().parent.parent


def fleet_of(objects):
    loaded = run(*objects)
    assert loaded.errors == [], [str(p) for p in loaded.errors]
    return loaded.fleet


def outputs(result) -> tuple[str, str, str]:
    return json.dumps(to_dict(result), sort_keys=True), markdown(result), json.dumps(plan_to_dict(result.plan))


def assert_same_as_full(base, head, tmp_path, recorded=None):
    """Full on both sides, incremental without a cache, then with a cold and a warm cache: one answer."""
    full = outputs(compare(base, head, recorded=recorded, incremental=False))
    assert outputs(compare(base, head, recorded=recorded)) == full
    cache = BaseCache(tmp_path)
    assert outputs(compare(base, head, recorded=recorded, cache=cache)) == full  # cold: computes and stores
    assert outputs(compare(base, head, recorded=recorded, cache=cache)) == full  # warm: reads the summary back
    return full


def _edit(objects, kind: str, index: int, change) -> list[dict]:
    objects = copy.deepcopy(objects)
    change([o for o in objects if o["kind"] == kind][index])
    return objects


def _engine_image(md: dict, image: str) -> None:
    md["spec"]["template"]["spec"]["engines"][0]["members"][0]["template"]["spec"]["containers"][0]["image"] = image


EDITS = {
    "one deployment gains a replica": lambda o: _edit(o, "ModelDeployment", 3, lambda d: d["spec"].update(replicas=3)),
    "one deployment's image": lambda o: _edit(o, "ModelDeployment", 5, lambda d: _engine_image(d, "vllm/vllm-openai:v0.12.0")),
    "one deployment's labels": lambda o: _edit(o, "ModelDeployment", 1, lambda d: d["metadata"].update(labels={"tier": "gold"})),
    "a deployment removed": lambda o: [x for x in o if x.get("metadata", {}).get("name") != "model-00002"],
    "a pool shrinks": lambda o: _edit(o, "InferenceCluster", 0, lambda c: c["spec"]["nodePools"][0].update(nodeCount=0)),
    "a cluster removed": lambda o: [x for x in o if x.get("metadata", {}).get("name") != "cluster-0001"],
    "a class changes memory": lambda o: _edit(o, "InferenceClass", 0, lambda k: k["spec"]["devices"][0]["capacity"]["memory"].update(value="16Gi")),
    "nothing": lambda o: copy.deepcopy(o),
}


@pytest.mark.parametrize("edit", EDITS, ids=list(EDITS))
def test_incremental_comparison_is_the_full_one_on_a_generated_fleet(edit, tmp_path):
    objects = generate(24, 6)
    assert_same_as_full(fleet_of(objects), fleet_of(EDITS[edit](objects)), tmp_path)


def with_services(objects: list[dict], backend: str = "Traefik") -> list[dict]:
    """The fleet with a gateway and a ModelService per deployment, some of them also sending a weighted share to
    their team's next deployment (an endpoint two services route to), and a ModelEndpoint in every team."""
    objects = copy.deepcopy(objects)
    settings = {"traefik": {"version": "40.2.0"}} if backend == "Traefik" else {"envoy": {}}
    objects.append({"apiVersion": "modelplane.ai/v1alpha1", "kind": "InferenceGateway", "metadata": {"name": "default"},
                    "spec": {"backend": backend, **settings}})
    deployments = [o for o in objects if o["kind"] == "ModelDeployment"]
    for i, md in enumerate(deployments):
        ns, name = md["metadata"]["namespace"], md["metadata"]["name"]
        entries = [{"selector": {"matchLabels": {"modelplane.ai/deployment": name}}, "weight": 3}]
        partner = next((d for d in deployments[i + 1:] if d["metadata"]["namespace"] == ns), None)
        if i % 3 == 0 and partner is not None:
            entries.append({"selector": {"matchLabels": {"modelplane.ai/deployment": partner["metadata"]["name"]}},
                            "weight": 1})
        objects.append({"apiVersion": "modelplane.ai/v1alpha1", "kind": "ModelService",
                        "metadata": {"name": f"svc-{name}", "namespace": ns}, "spec": {"endpoints": entries}})
    for ns in sorted({md["metadata"]["namespace"] for md in deployments}):
        objects.append({"apiVersion": "modelplane.ai/v1alpha1", "kind": "ModelEndpoint",
                        "metadata": {"name": "hosted", "namespace": ns, "labels": {"modelplane.ai/deployment": "hosted"}},
                        "spec": {"url": "https://api.example.com/v1", "rewritePath": "/"}})
    return objects


SERVICE_EDITS = {
    **EDITS,
    "a service's weight": lambda o: _edit(o, "ModelService", 2, lambda s: s["spec"]["endpoints"][0].update(weight=7)),
    "a service removed": lambda o: [x for x in o if not (x["kind"] == "ModelService" and
                                                         x["metadata"]["name"] == "svc-model-00004")],
    "an external endpoint's address": lambda o: _edit(o, "ModelEndpoint", 1, lambda e: e["spec"].update(
        url="https://api.example.org/v1")),
}


@pytest.mark.parametrize("backend", ["Traefik", "Envoy"])
@pytest.mark.parametrize("edit", SERVICE_EDITS, ids=list(SERVICE_EDITS))
def test_incremental_comparison_is_the_full_one_on_a_fleet_with_services(edit, backend, tmp_path):
    objects = with_services(generate(24, 6), backend)
    assert_same_as_full(fleet_of(objects), fleet_of(SERVICE_EDITS[edit](objects)), tmp_path)


def _control_plane_first(objects: list[dict]) -> list[dict]:
    """A cluster whose name sorts first joins: it hosts the control plane from now on."""
    first = copy.deepcopy(next(o for o in objects if o["kind"] == "InferenceCluster"))
    first["metadata"]["name"] = "a-first"
    first["spec"]["cluster"]["existing"]["secretRef"]["name"] = "a-first-kubeconfig"
    return [*objects, first]


REUSE_EDITS = {**SERVICE_EDITS, "a cluster that becomes the control plane": _control_plane_first}


@pytest.mark.parametrize("edit", REUSE_EDITS, ids=list(REUSE_EDITS))
def test_stacks_not_composed_again_have_the_same_fingerprints_and_dependencies(edit):
    """A desired state that reuses the stacks whose inputs did not change (the portal's replans, a comparison's
    head) has every stack as composing it afresh gives: fingerprint, targets and what it runs after (an
    endpoints stack after the model stacks it points at, though its objects were not composed)."""
    from automation.planning.plan_cache import PlanCache
    from automation.planning.stacks import desired_state

    objects = with_services(generate(24, 6))
    before = desired_state(fleet_of(objects), cache=PlanCache(known={}))
    head = fleet_of(REUSE_EDITS[edit](objects))
    recorded = [r.recorded() for r in before.plan.replicas]
    again = desired_state(head, recorded, cache=PlanCache(known=before.known()))
    full = desired_state(head, recorded)

    def stacks(state) -> dict:
        return {name: (spec.fingerprint, spec.depends_on, spec.targets) for name, spec in state.specs.items()}

    assert stacks(again) == stacks(full)
    assert any(d.startswith("model-") for name, spec in full.specs.items() if name.startswith("endpoints-")
               for d in spec.depends_on)
    if edit == "one deployment's image":
        assert {name.split("-")[0] for name in again.reused} >= {"model", "team", "service", "endpoints"}


def test_both_sides_are_planned_on_the_control_plane_asked_for(tmp_path):
    """`review --control-plane X` and `preview --changed-against` with it: the base is planned on X too when it has
    that cluster, so a deployment's change shows the same stacks as with the default host; a head that adds X is
    compared with a base on its own host. Incremental, cold and kept summaries, and full: one answer."""
    objects = with_services(generate(24, 6))
    edited = EDITS["one deployment's image"](objects)
    base, head, added = fleet_of(objects), fleet_of(edited), fleet_of(_control_plane_first(edited))

    def changed(result: tuple) -> list[str]:
        return [s["name"] for s in json.loads(result[0])["stacks"] if s["change"] != "none"]

    default = outputs(compare(base, head))
    for fleet, host in ((head, "cluster-0003"), (added, "a-first")):
        full = outputs(compare(base, fleet, incremental=False, control_plane=host))
        cache = BaseCache(tmp_path / host)
        for _ in range(2):  # cold, then from the kept summary
            assert outputs(compare(base, fleet, cache=cache, control_plane=host)) == full
        assert outputs(compare(base, fleet, control_plane=host)) == full
    assert changed(outputs(compare(base, head, control_plane="cluster-0003"))) == changed(default)
    moved = changed(outputs(compare(base, added, control_plane="a-first")))
    assert "gateway" in moved and any(name.startswith("service-") for name in moved)  # the control plane moved


def test_an_endpoints_stack_follows_the_recorded_gateway_address_it_is_fingerprinted_with():
    """A cluster whose status gives its gateway address routes by that address, but its endpoints stack is
    fingerprinted with the address its platform stack recorded (what the program reads when it applies): a new
    recorded address changes the stack though its objects do not, so it is composed again."""
    from automation.planning.plan_cache import PlanCache
    from automation.planning.stacks import desired_state
    from tests.manifests import cluster, deployment, gateway, gpu_class, service
    from workloads.gateways import Gateways

    status = {"gateway": {"address": "10.0.0.1"}, "conditions": [{"type": "Ready", "status": "True"}]}
    fleet = fleet_of([gpu_class("l4", 1, "24Gi"), cluster("c1", pools=(("gpu", "l4", 4),), status=status), gateway(),
                      deployment("qwen"), service("qwen")])
    before = desired_state(fleet, cache=PlanCache(known={}), gateways=Gateways({"c1": "10.0.0.1"}))
    moved = Gateways({"c1": "10.0.0.2"})
    again = desired_state(fleet, cache=PlanCache(known=before.known()), gateways=moved)
    full = desired_state(fleet, gateways=moved)
    assert "endpoints-ml-team" not in again.reused and "service-ml-team.qwen" in again.reused
    assert again.specs["endpoints-ml-team"].fingerprint == full.specs["endpoints-ml-team"].fingerprint \
        != before.specs["endpoints-ml-team"].fingerprint


def test_incremental_comparison_is_the_full_one_on_the_examples_under_each_tenancy(tmp_path):
    """The examples have services, endpoints, caches and observed replicas; the tenancy annotation moves every
    team's workloads to `default`, which changes every model stack's inputs."""
    base = load_fleet([str(ROOT / "examples")]).fleet
    for folder in ("models", "platform", "observed"):
        assert any(True for _ in (ROOT / "examples" / folder).iterdir())
    objects = [o.model_dump(mode="json", by_alias=True, exclude_none=True) for o in base.objects]
    shared = copy.deepcopy(objects)
    gateway = next(o for o in shared if o["kind"] == "InferenceGateway")
    gateway["metadata"].setdefault("annotations", {})["modelplane.ai/tenancy"] = "Default"
    scaled = copy.deepcopy(objects)
    next(o for o in scaled if o["kind"] == "ModelDeployment")["spec"]["replicas"] += 1
    for i, head in enumerate((shared, scaled)):
        assert_same_as_full(base, fleet_of(head), tmp_path / str(i))


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture])
@given(fleets(), st.randoms(use_true_random=False))
def test_incremental_comparison_is_the_full_one_on_random_fleets(tmp_path_factory, objects, rnd):
    base = fleet_of(objects)
    recorded = [r.recorded() for r in compare(base, base).plan.replicas] if rnd.random() < 0.5 else None
    cache = tmp_path_factory.mktemp("cache")
    assert_same_as_full(base, fleet_of(_perturb(objects, rnd)), cache, recorded)
    # another head against the same base: the summary kept for the first may lack what this one needs
    assert_same_as_full(base, fleet_of(_perturb(objects, rnd)), cache, recorded)


def test_a_one_deployment_change_composes_only_that_deployment(tmp_path, monkeypatch):
    """Cold, both sides are planned and only the changed deployment is composed, on each; the summary kept knows
    the fingerprints of what it composed. A later head that changes another deployment needs the base's fingerprint
    of it: the base is planned again for that (and the summary completed), never answered from a guess."""
    objects = generate(24, 6)
    base, head = fleet_of(objects), fleet_of(EDITS["one deployment's image"](objects))
    other = fleet_of(_edit(objects, "ModelDeployment", 7, lambda d: _engine_image(d, "vllm/vllm-openai:v0.13.0")))
    composed: list[str] = []
    real = workloads.render.compose_replica
    monkeypatch.setattr(workloads.render, "compose_replica", lambda ctx: composed.append(ctx.md.name) or real(ctx))
    planned: list[object] = []
    real_state = compare_module.desired_state
    for module in (compare_module, base_plan_module):  # the head's state, the base's
        monkeypatch.setattr(module, "desired_state", lambda fleet, *a, **k: planned.append(fleet) or real_state(fleet, *a, **k))
    cache = BaseCache(tmp_path)
    names = [o["metadata"]["name"] for o in objects if o["kind"] == "ModelDeployment"]
    result = compare(base, head, cache=cache)
    assert planned == [head, base] and set(composed) == {names[5]}  # cold: one stack composed, on both sides
    assert [s.name for s in result.changed] == [f"model-team-5.{names[5]}"]
    composed.clear(), planned.clear()
    result = compare(base, head, cache=cache)
    assert planned == [head], "the base was planned again although its summary was cached"
    assert set(composed) == {names[5]}
    assert [s.name for s in result.changed] == [f"model-team-5.{names[5]}"]
    composed.clear(), planned.clear()
    scheduled: list[object] = []
    for module in (compare_module, stacks_module, base_plan_module):  # the head is planned once, though tried
        monkeypatch.setattr(module, "schedule", lambda fleet, *a, _real=module.schedule, **k:
                            scheduled.append(fleet) or _real(fleet, *a, **k))
    partial = compare(base, other, cache=cache)
    assert scheduled.count(other) == 1 and scheduled.count(base) == 1
    assert outputs(partial) == outputs(compare(base, other, incremental=False))
    composed.clear(), planned.clear()
    result = compare(base, other, cache=cache)
    assert planned == [other] and set(composed) == {names[7]}  # the summary now knows it
    assert [s.name for s in result.changed] == [f"model-team-7.{names[7]}"]


def test_only_the_team_stacks_whose_inputs_change_are_composed(monkeypatch):
    """A team stack (namespace, isolation, device quota on one cluster) is composed from the team's devices there:
    an image change leaves every team stack as it was, so none is composed on either side; an added replica
    changes its team's quota on the cluster it lands on, and that stack alone is composed."""
    objects = generate(24, 6)
    base = fleet_of(objects)
    states: list = []
    real_state = compare_module.desired_state
    for module in (compare_module, base_plan_module):
        monkeypatch.setattr(module, "desired_state", lambda *a, **k: states.append(real_state(*a, **k)) or states[-1])
    calls: list[str] = []
    real_objects = workloads.render.team_objects
    monkeypatch.setattr(workloads.render, "team_objects", lambda team, *a: calls.append(team) or real_objects(team, *a))

    def composed(state) -> set[str]:
        return {name for name in state.specs if name.startswith("team-") and name not in state.reused}

    result = compare(base, fleet_of(EDITS["one deployment's image"](objects)))
    teams = {name for name in states[0].specs if name.startswith("team-")}  # the head's (composed first), the base's
    assert len(teams) > 3 and [composed(s) for s in states] == [set(), set()] and calls == []
    assert not any(s.name.startswith("team-") for s in result.changed)
    states.clear()
    result = compare(base, fleet_of(EDITS["one deployment gains a replica"](objects)))
    changed = {s.name for s in result.changed if s.name.startswith("team-")}
    assert len(changed) == 1 and composed(states[0]) == changed  # the head composes the changed one only
    assert composed(states[1]) <= changed  # and the base, when the team was on that cluster before
    assert len(calls) == len(composed(states[0])) + len(composed(states[1]))


def test_the_head_takes_the_bases_platform_stacks_when_their_inputs_are_the_same(monkeypatch, tmp_path):
    """A deployment's change does not touch what the platform and gateway stacks are computed from: they are
    computed on neither side, cold or with the base's summary kept. A change to a cluster does: cold, each side
    computes its own; with a summary that knows the base's, only the head."""
    objects = generate(24, 6)
    objects.append({"apiVersion": "modelplane.ai/v1alpha1", "kind": "InferenceGateway", "metadata": {"name": "default"},
                    "spec": {"backend": "Traefik", "traefik": {"version": "40.2.0"}}})
    computed: list[int] = []
    real = stacks_module.platform_specs
    monkeypatch.setattr(stacks_module, "platform_specs", lambda fleet, *a, **k: computed.append(1) or real(fleet, *a, **k))
    base, head = fleet_of(objects), fleet_of(EDITS["one deployment gains a replica"](objects))
    cache = BaseCache(tmp_path)
    result = compare(base, head, cache=cache)
    assert computed == [] and "gateway" in {s.name for s in result.stacks}
    assert not any(s.name.startswith(("platform-", "gateway")) for s in result.changed)
    assert outputs(compare(base, head, cache=cache)) == outputs(result)  # the summary kept them as `SAME`
    assert computed == []
    labelled = fleet_of(_edit(objects, "InferenceCluster", 1, lambda c: c["metadata"]["labels"].update(tier="gold")))
    result = compare(base, labelled, cache=cache)
    assert len(computed) == 2 and "platform-cluster-0001" in {s.name for s in result.changed}  # the summary lacked them
    computed.clear()
    assert outputs(compare(base, labelled, cache=cache)) == outputs(result)
    assert len(computed) == 1  # now it knows them: the head's only
    computed.clear()
    result = compare(base, fleet_of(EDITS["a pool shrinks"](objects)))
    assert len(computed) == 2 and "platform-cluster-0000" in {s.name for s in result.changed}


def test_the_platform_digest_follows_everything_platform_stacks_are_computed_from():
    objects = generate(6, 3)
    objects.append({"apiVersion": "modelplane.ai/v1alpha1", "kind": "InferenceGateway", "metadata": {"name": "default"},
                    "spec": {"backend": "Traefik", "traefik": {"version": "40.2.0"}}})
    base = fleet_of(objects)
    digest = stacks_module.platform_inputs(base, "cluster-0000")

    def streaming(d):
        d["spec"]["template"]["spec"]["engines"][0]["capabilities"] = ["WeightStreaming"]
        _engine_image(d, "nvcr.io/nvidia/ai-dynamo/vllm-runtime:0.6.1")  # Dynamo streams weights

    def gateway_version(g):
        g["spec"]["traefik"]["version"] = "40.3.0"

    same = [EDITS["one deployment gains a replica"], EDITS["one deployment's image"], EDITS["nothing"]]
    different = [EDITS["a pool shrinks"], EDITS["a cluster removed"], EDITS["a class changes memory"],
                 lambda o: _edit(o, "InferenceCluster", 1, lambda c: c["metadata"].update(labels={"tier": "gold"})),
                 lambda o: _edit(o, "InferenceGateway", 0, gateway_version),
                 lambda o: _edit(o, "ModelDeployment", 2, streaming)]
    assert all(stacks_module.platform_inputs(fleet_of(edit(objects)), "cluster-0000") == digest for edit in same)
    assert all(stacks_module.platform_inputs(fleet_of(edit(objects)), "cluster-0000") != digest for edit in different)
    assert stacks_module.platform_inputs(base, "cluster-0001") != digest
    assert stacks_module.platform_inputs(base, "cluster-0000", {"cert-manager": "v1.18.0"}) != digest


def test_the_cache_key_follows_every_input(tmp_path):
    objects = generate(6, 3)
    base = fleet_of(objects)
    key = base_key(base, [])
    assert base_key(fleet_of(copy.deepcopy(objects)), []) == key  # same content, same key
    assert base_key(fleet_of(EDITS["one deployment's labels"](objects)), []) != key
    assert base_key(fleet_of(EDITS["a pool shrinks"](objects)), []) != key
    recorded = [r.recorded() for r in compare(base, base).plan.replicas]
    assert base_key(base, recorded) != key
    assert base_key(base, [], control_plane="cluster-0001") != key


def test_an_unreadable_summary_is_recomputed_and_replaced(tmp_path):
    objects = generate(6, 3)
    base, head = fleet_of(objects), fleet_of(EDITS["one deployment gains a replica"](objects))
    cache = BaseCache(tmp_path)
    full = outputs(compare(base, head, incremental=False))
    compare(base, head, cache=cache)
    (path,) = (tmp_path / "plans").glob("*.json")
    assert path.stat().st_mode & 0o077 == 0, "summaries are readable by their owner only"
    key = path.name.removesuffix(".json")
    good = cache.get(key)
    assert good is not None
    edited = path.read_bytes().replace(b'"fingerprints": {"', b'"fingerprints": {"x')  # a hand edit: no longer ours
    for junk in (b"{not json", json.dumps({"format": 0}).encode(), edited):
        path.write_bytes(junk)
        assert cache.get(key) is None
        assert outputs(compare(base, head, cache=cache)) == full
        assert cache.get(key) == good  # rewritten whole


def test_the_cache_keeps_only_the_newest_summaries(tmp_path, monkeypatch):
    monkeypatch.setattr("automation.planning.base_cache.KEEP", 3)
    cache = BaseCache(tmp_path)
    summary = BaseSummary([], {}, {})
    for i in range(5):
        cache.put(f"{i:064x}", summary)
    assert len(list((tmp_path / "plans").glob("*.json"))) == 3


def test_a_cache_that_cannot_be_written_only_costs_time(tmp_path):
    blocked = tmp_path / "file"
    blocked.write_text("not a folder")
    objects = generate(6, 3)
    base, head = fleet_of(objects), fleet_of(EDITS["one deployment gains a replica"](objects))
    assert outputs(compare(base, head, cache=BaseCache(blocked))) == outputs(compare(base, head, incremental=False))


def test_random_edits_of_a_generated_fleet(tmp_path):
    """A few random multi-edits at once on a larger generated fleet."""
    rnd = random.Random(3)
    objects = generate(40, 8)
    for i in range(3):
        head = copy.deepcopy(objects)
        for edit in rnd.sample(sorted(EDITS), 3):
            head = EDITS[edit](head)
        assert_same_as_full(fleet_of(objects), fleet_of(head), tmp_path / str(i))


def test_collisions_are_found_with_stacks_that_were_not_composed_again():
    """Two teams' same-named deployments in the shared `default` namespace collide. When one of them is reused
    from before (not composed again), its objects' identities still meet the other's."""
    from automation.planning.plan_cache import PlanCache
    from automation.planning.stacks import desired_state
    from tests.manifests import cluster, deployment, gateway, gpu_class

    shared = gateway()
    shared["metadata"]["annotations"] = {"modelplane.ai/workload-namespaces": "Default"}
    platform = [gpu_class("l4", 1, "24Gi"), cluster("c1", pools=(("gpu", "l4", 4),)), shared]
    before = desired_state(fleet_of([*platform, deployment("qwen", namespace="team-a")]), cache=PlanCache(known={}))
    head = fleet_of([*platform, deployment("qwen", namespace="team-a"), deployment("qwen", namespace="team-b")])
    recorded = [r.recorded() for r in before.plan.replicas]
    again = desired_state(head, recorded, cache=PlanCache(known=before.known()))
    assert set(again.reused) == {"model-team-a.qwen"}
    full = desired_state(head, recorded)
    assert [str(p) for p in again.rendered.problems] == [str(p) for p in full.rendered.problems]
    assert any("already creates this object" in str(p) for p in full.rendered.problems)


def test_a_base_whose_files_are_unchanged_is_not_parsed_again(tmp_path, monkeypatch, capsys):
    """`plan --against` keys the base's summary by its files' bytes too: CI compares every pull request with the
    same base, and then reads the summary back without parsing, validating or planning the base."""
    import automation.cli.plans
    import fleet.loader
    from automation.cli import main

    monkeypatch.setenv("MODELPLANE_CACHE_DIR", str(tmp_path / "cache"))
    # the base in this process, where its parsing is seen (a forked one gives the same answer: test_base_beside.py)
    monkeypatch.setattr(automation.cli.plans, "cpu_to_spare", lambda: False)
    objects = generate(24, 6)
    base, head = tmp_path / "base.yaml", tmp_path / "head.yaml"
    base.write_text(yaml_text(objects))
    head.write_text(yaml_text(EDITS["one deployment's image"](objects)))
    parsed: list[str] = []
    real = fleet.loader.parse_text
    monkeypatch.setattr(fleet.loader, "parse_text", lambda text, source, *a, **k: parsed.append(source) or real(text, source, *a, **k))

    def against(*extra: str) -> str:
        parsed.clear()
        assert main(["plan", "-f", str(head), "--against", str(base), "-o", "json", "--fresh", *extra]) == 0
        return capsys.readouterr().out

    full = against("--no-cache")
    assert parsed == [str(head), str(base)]
    assert against() == full and parsed == [str(head), str(base)]  # the first time: parsed, planned, kept
    assert against() == full and parsed == [str(head)]  # the same bytes: the summary, by the files' key
    base.write_text(base.read_text() + "# a comment: the same objects, other bytes\n")
    assert against() == full and parsed == [str(head), str(base)]  # parsed; the objects' key finds the summary
    assert against() == full and parsed == [str(head)]
    base.write_text(yaml_text(EDITS["one deployment gains a replica"](objects)))
    changed = against()
    assert parsed == [str(head), str(base)] and changed != full
    assert json.loads(changed)["changes"] == json.loads(against("--no-cache"))["changes"]


def test_the_files_key_follows_every_input():
    from automation.planning.base_cache import source_key

    files = [("a.yaml", b"kind: A\n"), ("b.yaml", b"kind: B\n")]
    key = source_key(files, [])
    assert source_key(list(files), []) == key
    assert source_key([("a.yaml", b"kind: A \n"), files[1]], []) != key  # one byte
    assert source_key([("c.yaml", b"kind: A\n"), files[1]], []) != key  # a name
    assert source_key(files[::-1], []) != key  # the order files load in
    assert source_key(files, [], control_plane="c1") != key
    recorded = [r.recorded() for r in compare(fleet_of(generate(4, 2)), fleet_of(generate(4, 2))).plan.replicas]
    assert source_key(files, recorded) != key


def yaml_text(objects) -> str:
    import yaml

    return yaml.safe_dump_all(objects, sort_keys=False)
