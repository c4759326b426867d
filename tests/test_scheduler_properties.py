"""Property tests of the scheduler on random fleets.

- No node is ever overcommitted: an independent exact bin-packing check (not the
  scheduler's ledger) confirms every pool's pods fit its nodes.
- The plan does not depend on the order documents (or recorded placements) come in.
- A remembered replica is either kept exactly where it was, or dropped with a reason.
"""

import json
import random
from collections import defaultdict

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from fleet.plan_output import plan_to_dict
from benchmarks.plan_bench import generate
from fleet.scheduler import PlanMemo, schedule
from tests.manifests import cluster, gpu_class, member, run
from tests.scheduling import md, mem

MEMORIES = [16, 24, 48, 80, 141]


@st.composite
def fleets(draw):
    classes = {}
    for i in range(draw(st.integers(1, 3))):
        count = draw(st.sampled_from([1, 2, 4, 8]))
        memory = draw(st.sampled_from(MEMORIES))
        classes[f"k{i}"] = gpu_class(f"k{i}", count, f"{memory}Gi")
    clusters = []
    for i in range(draw(st.integers(1, 4))):
        pools = tuple((f"p{j}", draw(st.sampled_from(sorted(classes))), draw(st.integers(0, 3)))
                      for j in range(draw(st.integers(1, 3))))
        labels = {"region": draw(st.sampled_from(["us", "eu"]))}
        clusters.append(cluster(f"c{i}", pools=pools, labels=labels))
    deployments = []
    for i in range(draw(st.integers(1, 6))):
        gpus = draw(st.sampled_from([1, 1, 2, 4, 8]))
        cel = mem(draw(st.sampled_from([10, 20, 40, 70])))
        shape = draw(st.sampled_from(["single", "gang", "copies", "two-engines"]))
        if shape == "single":
            engines = [{"name": "e", "members": [member(gpus=gpus, cel=cel)]}]
        elif shape == "copies":
            engines = [{"name": "e", "copies": draw(st.integers(1, 3)), "members": [member(gpus=gpus, cel=cel)]}]
        elif shape == "gang":
            engines = [{"name": "e", "members": [member("Leader", gpus=gpus, cel=cel),
                                                   member("Worker", gpus=gpus, cel=cel, nodes=draw(st.integers(1, 2)))]}]
        else:
            engines = [{"name": "a", "members": [member(gpus=gpus, cel=cel)]},
                       {"name": "b", "members": [member(gpus=draw(st.sampled_from([1, 2])), cel=cel)]}]
        spec = {}
        if draw(st.booleans()):
            spec["clusterSelector"] = {"matchLabels": {"region": draw(st.sampled_from(["us", "eu"]))}}
        deployments.append(md(f"d{i}", draw(st.integers(1, 4)), engines=engines,
                              namespace=draw(st.sampled_from(["a", "b"])), **spec))
    return list(classes.values()) + clusters + deployments


def plan_for(objects, recorded=()):
    loaded = run(*objects)
    assert loaded.errors == [], [str(p) for p in loaded.errors]
    return loaded.fleet, schedule(loaded.fleet, list(recorded))


def packs(pods: list[int], nodes: int, capacity: int) -> bool:
    """Exact: can these per-pod device counts be packed into `nodes` bins of `capacity`?"""
    pods = sorted(pods, reverse=True)
    bins = [capacity] * nodes

    def place(i: int) -> bool:
        if i == len(pods):
            return True
        tried = set()
        for b in range(nodes):
            if bins[b] >= pods[i] and bins[b] not in tried:
                tried.add(bins[b])
                bins[b] -= pods[i]
                if place(i + 1):
                    return True
                bins[b] += pods[i]
        return False

    return place(0)


def assert_no_overcommit(fleet, plan):
    classes = {c.name: c for c in fleet.of("InferenceClass")}
    pools = {}
    for ic in fleet.of("InferenceCluster"):
        for p in ic.spec.nodePools:
            pools[(ic.name, p.name)] = (p.capacity_nodes, classes[p.className].spec.devices[0].count)
    pods = defaultdict(list)
    for r in plan.replicas:
        for e in r.placement.engines:
            for m in e.members:
                per_pod = sum(count for _, _, count in m.devices)
                if per_pod:
                    pods[(r.cluster, e.pool)] += [per_pod] * m.pods
    for key, counts in pods.items():
        nodes, capacity = pools[key]
        assert packs(counts, nodes, capacity), f"{key}: pods {counts} do not fit {nodes} node(s) of {capacity}"


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(fleets())
def test_no_node_is_ever_overcommitted(objects):
    fleet, plan = plan_for(objects)
    assert_no_overcommit(fleet, plan)
    # every replica either placed or counted as unscheduled
    wanted = sum(d.spec.replicas for d in fleet.of("ModelDeployment"))
    assert len(plan.replicas) + sum(u.missing for u in plan.unscheduled) == wanted


@settings(max_examples=100, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(fleets(), st.randoms(use_true_random=False))
def test_plan_does_not_depend_on_input_order(objects, rnd):
    _, first = plan_for(objects)
    recorded = [r.recorded() for r in first.replicas]
    baseline = json.dumps(plan_to_dict(plan_for(objects, recorded)[1]))
    shuffled = list(objects)
    rnd.shuffle(shuffled)
    shuffled_recorded = list(recorded)
    rnd.shuffle(shuffled_recorded)
    assert json.dumps(plan_to_dict(plan_for(shuffled, shuffled_recorded)[1])) == baseline


def _perturb(objects, rnd: random.Random):
    """Change the fleet a little: resize pools, scale deployments, drop a cluster."""
    out = []
    for obj in objects:
        obj = json.loads(json.dumps(obj))
        if obj["kind"] == "InferenceCluster":
            if rnd.random() < 0.15:
                continue
            for pool in obj["spec"]["nodePools"]:
                pool["nodeCount"] = max(0, pool["nodeCount"] + rnd.choice([-1, 0, 0, 1]))
        elif obj["kind"] == "ModelDeployment":
            obj["spec"]["replicas"] = max(1, min(10, obj["spec"]["replicas"] + rnd.choice([-1, 0, 1])))
            if rnd.random() < 0.2:
                obj["spec"]["template"]["spec"]["engines"][0]["copies"] = rnd.choice([1, 2])
        out.append(obj)
    return out


@settings(max_examples=120, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(fleets(), st.randoms(use_true_random=False))
def test_kept_replicas_never_move_without_a_reason(objects, rnd):
    _, first = plan_for(objects)
    recorded = [r.recorded() for r in first.replicas]
    fleet, second = plan_for(_perturb(objects, rnd), recorded)
    assert_no_overcommit(fleet, second)
    now = {(r.namespace, r.deployment, r.name): r for r in second.replicas}
    dropped = {(d.deployment, d.name): d.reason for d in second.dropped}
    for old in recorded:
        placed = now.get((old.namespace, old.deployment, old.name))
        if placed is not None and placed.state == "kept":
            assert placed.cluster == old.cluster and placed.index == old.index
            assert [e.pool for e in placed.placement.engines] == [e.members[0].pool for e in old.engines]
        else:
            deployment_exists = any(d.namespace == old.namespace and d.name == old.deployment
                                    for d in fleet.of("ModelDeployment"))
            if deployment_exists:
                assert dropped.get((f"{old.namespace}/{old.deployment}", old.name)), f"{old.name} moved without a reason"


def _placements(plan) -> list:
    return [(r.key, r.name, r.cluster, r.index, r.placement) for r in plan.replicas]


@settings(max_examples=120, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(fleets(), st.randoms(use_true_random=False))
def test_ranked_fill_places_exactly_as_trying_every_cluster(objects, rnd):
    """The fill keeps a ranking per shape and re-places only on clusters whose ledger changed; `explain` still
    tries every candidate cluster for every replica. Both must give the same plan, with and without memory."""
    loaded = run(*objects)
    ranked, exhaustive = schedule(loaded.fleet), schedule(loaded.fleet, explain=True)
    assert _placements(ranked) == _placements(exhaustive)
    assert ranked.unscheduled == exhaustive.unscheduled and ranked.dropped == exhaustive.dropped
    recorded = [r.recorded() for r in ranked.replicas]
    changed = run(*_perturb(objects, rnd)).fleet
    assert _placements(schedule(changed, recorded)) == _placements(schedule(changed, recorded, explain=True))


def test_every_placement_names_the_cluster_it_is_on():
    """Clusters whose pools are in the same state share one cached placement; each must still name its own."""
    objects = [gpu_class("k", 1, "24Gi")] + [cluster(f"c{i}", pools=(("p", "k", 1),)) for i in range(4)]
    _, plan = plan_for(objects + [md("d", 4, gpus=1, cel=mem(10))])
    assert sorted(r.cluster for r in plan.replicas) == ["c0", "c1", "c2", "c3"]
    assert all(r.placement.cluster == r.cluster for r in plan.replicas)


def _one_deployment_edit(objects, rnd: random.Random) -> list[dict]:
    """What one portal write does: add, scale, reshape or remove one deployment."""
    objects = json.loads(json.dumps(objects))
    deployments = [o for o in objects if o["kind"] == "ModelDeployment"]
    action = rnd.choice(["add", "scale", "reshape", "remove"] if deployments else ["add"])
    if action == "add":
        objects.append(md(f"new{rnd.randrange(1000)}", rnd.randint(1, 3), gpus=rnd.choice([1, 2, 8]),
                          cel=mem(rnd.choice([10, 40, 70])), namespace="a"))
    elif action == "scale":
        target = rnd.choice(deployments)
        target["spec"]["replicas"] = rnd.randint(1, 5)
    elif action == "reshape":
        target = rnd.choice(deployments)
        target["spec"]["template"]["spec"]["engines"][0]["copies"] = rnd.choice([1, 2, 3])
    else:
        objects.remove(rnd.choice(deployments))
    return objects


@settings(max_examples=80, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(fleets(), st.randoms(use_true_random=False))
def test_a_plan_made_with_the_memo_of_earlier_plans_is_the_plan_made_afresh(objects, rnd):
    """The portal's worker keeps a PlanMemo across writes: a sequence of one-deployment writes (and, now and then,
    a platform change) planned with it must give, at every step, exactly the plan computed from nothing."""
    memo = PlanMemo()
    recorded: list = []
    for step in range(6):
        objects = _perturb(objects, rnd) if step == 3 else _one_deployment_edit(objects, rnd)
        fleet = run(*objects).fleet
        remembered, fresh = schedule(fleet, recorded, memo=memo), schedule(fleet, recorded)
        assert plan_to_dict(remembered) == plan_to_dict(fresh)
        assert [r.placement for r in remembered.replicas] == [r.placement for r in fresh.replicas]
        recorded = [r.recorded() for r in fresh.replicas]


def test_the_memo_places_a_write_on_a_large_fleet_as_a_fresh_plan_does():
    objects = generate(300, 40)
    memo = PlanMemo()
    rnd = random.Random(11)
    recorded = [r.recorded() for r in schedule(run(*objects).fleet, [], memo=memo).replicas]
    for _ in range(8):
        objects = _one_deployment_edit(objects, rnd)
        fleet = run(*objects).fleet
        remembered, fresh = schedule(fleet, recorded, memo=memo), schedule(fleet, recorded)
        assert plan_to_dict(remembered) == plan_to_dict(fresh)
        recorded = [r.recorded() for r in fresh.replicas]
    assert memo.retained and memo.charged, "the memo was not used"
