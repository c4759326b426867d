"""TeamPolicy at plan time (issue 64, docs/teams.md#team-policy): residency fails closed, GPU budgets are charged
kept replicas first, and every refusal names the policy and the field. Written as an attacker would try: a team
asking for more through replicas, autoscaling maxima, a second deployment or the portal's one-deployment writes,
or for somewhere else through its own clusterSelector, a default policy's gap, or a cluster whose label is
removed while its replicas run. Then a property on random fleets: no plan puts a team over a budget or outside
its residency."""

from __future__ import annotations

import random
from collections import Counter

import pytest

from fleet.incremental import FleetLedger
from fleet.plan import Cause
from fleet.scheduler import PlanMemo, schedule
from fleet.budgets import budget_rows, replica_use
from fleet.team_policy import Policies, not_resident
from tests.manifests import errors, run
from tests.scheduling import H100, L4, L4X8, cluster, md, plan_of, unscheduled, where


def policy(name="ml-team", gpus=None, residency=None, origins=None, default=False, **spec):
    body: dict = {"gpus": gpus or [], **spec}
    if residency is not None:
        body["residency"] = {"clusterSelector": residency, "externalOrigins": origins or []}
    if default:
        body["defaultForNamespaces"] = True
    return {"apiVersion": "modelplane.ai/v1alpha1", "kind": "TeamPolicy", "metadata": {"name": name}, "spec": body}


EU = {"matchLabels": {"example.org/jurisdiction": "eu"}}
US, EU_LABELS = {"example.org/jurisdiction": "us"}, {"example.org/jurisdiction": "eu"}


def reasons_of(plan) -> str:
    return "\n".join(r for u in plan.unscheduled for r in u.reasons)


def causes(plan) -> set[Cause]:
    return {r.cause for u in plan.unscheduled for r in u.reasons} | {d.reason.cause for d in plan.dropped}


def recorded(plan):
    return [r.recorded() for r in plan.replicas]


# ---- the API ----------------------------------------------------------------------------------------------------

@pytest.mark.parametrize("spec, fragment", [
    ({"residency": {"clusterSelector": {}}}, "selects every cluster"),
    ({"residency": {"clusterSelector": {"matchExpressions": [{"key": "j", "operator": "DoesNotExist"}]}}},
     "operator"),
    ({"residency": {"clusterSelector": {"matchExpressions": [{"key": "j", "operator": "In"}]}}}, "needs at least one"),
    ({"residency": {"clusterSelector": {"matchExpressions": [{"key": "j", "operator": "Exists", "values": ["x"]}]}}},
     "must be empty"),
    ({"residency": {"clusterSelector": EU, "externalOrigins": ["https://api.example.com/v1"]}}, "is not an origin"),
    ({"gpus": [{"count": 8}, {"count": 4}]}, "duplicate budget"),
    ({"gpus": [{"count": 8, "split": {"clusters": {"a": 4}, "proportional": True}}]}, "one of clusters"),
    ({"gpus": [{"count": -1}]}, "greater than or equal"),
    ({"tokens": {"services": [{"name": "q", "perHour": 1}, {"name": "q", "perHour": 2}]}}, "duplicate service"),
])
def test_a_policy_that_could_not_be_enforced_is_refused_naming_the_field(spec, fragment):
    found = errors({"apiVersion": "modelplane.ai/v1alpha1", "kind": "TeamPolicy", "metadata": {"name": "ml-team"},
                    "spec": spec})
    assert any(fragment in e for e in found), found


def test_a_policy_is_named_after_its_namespace_unless_it_is_the_default():
    assert any("is not a namespace name" in e for e in errors(policy(name="ml.team")))
    assert errors(policy(name="fleet.default", default=True)) == []


# ---- residency --------------------------------------------------------------------------------------------------

def fleet_eu_us(*extra, eu_pools=(("gpu", "l4", 2),)):
    return [L4, H100, cluster("eu", pools=eu_pools, labels=EU_LABELS),
            cluster("us", pools=(("gpu", "l4", 4),), labels=US), *extra]


def test_a_resident_team_is_placed_only_in_its_jurisdiction_and_the_rest_is_unscheduled_naming_the_policy():
    plan = plan_of(*fleet_eu_us(policy(residency=EU), md(replicas=4)))
    assert where(plan) == ["m@eu:gpu", "m@eu:gpu"]
    assert unscheduled(plan) == {"m": 2}
    assert "us: outside TeamPolicy ml-team spec.residency.clusterSelector" in reasons_of(plan)
    assert "example.org/jurisdiction=us" in reasons_of(plan)


def test_the_teams_own_cluster_selector_cannot_reach_outside_its_jurisdiction():
    plan = plan_of(*fleet_eu_us(policy(residency=EU), md(clusterSelector={"matchLabels": US})))
    assert where(plan) == []
    text = reasons_of(plan)
    assert "outside TeamPolicy ml-team spec.residency.clusterSelector" in text  # us: the policy says why
    assert "not selected" in text  # eu: its own selector says why


@pytest.mark.parametrize("selector", [
    {"matchLabels": {"example.org/jurisdiction": "eu"}},
    {"matchExpressions": [{"key": "example.org/jurisdiction", "operator": "NotIn", "values": ["us"]}]},
    {"matchExpressions": [{"key": "example.org/jurisdiction", "operator": "Exists"}]},
])
def test_a_cluster_with_no_label_fails_closed_whatever_the_operator(selector):
    fleet = [L4, cluster("bare", pools=(("gpu", "l4", 4),)), policy(residency=selector), md()]
    plan = plan_of(*fleet)
    assert where(plan) == []
    assert "no example.org/jurisdiction" in reasons_of(plan)


def test_removing_the_label_while_replicas_run_moves_them_home_and_says_why():
    first = plan_of(*fleet_eu_us(policy(residency=EU), md(replicas=2)), recorded=())
    assert where(first) == ["m@eu:gpu", "m@eu:gpu"]
    unlabelled = [L4, H100, cluster("eu", pools=(("gpu", "l4", 2),)),
                  cluster("eu-2", pools=(("gpu", "l4", 2),), labels=EU_LABELS),
                  cluster("us", pools=(("gpu", "l4", 4),), labels=US), policy(residency=EU), md(replicas=2)]
    plan = plan_of(*unlabelled, recorded=recorded(first))
    assert where(plan) == ["m@eu-2:gpu", "m@eu-2:gpu"]
    assert [d.reason.cause for d in plan.dropped] == [Cause.RESIDENCY, Cause.RESIDENCY]
    assert all("cluster eu is outside TeamPolicy ml-team" in d.reason for d in plan.dropped)


def test_a_default_policy_governs_every_namespace_without_its_own():
    fleet = fleet_eu_us(policy("fleet-default", residency=EU, default=True),
                        policy("research", residency={"matchLabels": US}),
                        md("a", namespace="ml-team"), md("b", namespace="research"))
    plan = plan_of(*fleet)
    assert sorted((r.namespace, r.cluster) for r in plan.replicas) == [("ml-team", "eu"), ("research", "us")]


def test_a_fleet_without_policies_plans_as_before():
    fleet = fleet_eu_us(md(replicas=5))
    assert where(plan_of(*fleet)) == where(plan_of(*fleet, policy("other-team", gpus=[{"count": 0}], residency=EU)))


# ---- GPU budgets --------------------------------------------------------------------------------------------------

def test_replicas_over_the_budget_are_unscheduled_with_budget_use_and_request():
    plan = plan_of(L4, cluster("c", pools=(("gpu", "l4", 8),)), policy(gpus=[{"count": 3}]), md(replicas=5))
    assert len(plan.replicas) == 3 and unscheduled(plan) == {"m": 2}
    assert reasons_of(plan) == ("over TeamPolicy ml-team spec.gpus[0]: budget 3 devices of any class, in use 3, "
                                "this replica asks 1")


def test_the_budget_counts_each_replica_at_its_autoscaling_maximum():
    scaled = md(replicas=2)
    scaled["metadata"]["annotations"] = {"modelplane.ai/autoscaling": "keda", "modelplane.ai/autoscaling-max-copies": "4"}
    plan = plan_of(L4, cluster("c", pools=(("gpu", "l4", 16),)), policy(gpus=[{"count": 6}]), scaled)
    assert len(plan.replicas) == 1  # 4 devices each at their maximum: a second would hold 8 of 6
    assert "in use 4, this replica asks 4" in reasons_of(plan)


def test_a_second_deployment_cannot_take_the_budget_a_running_one_holds():
    small = md("small", replicas=2)
    fleet = [L4X8, cluster("c", pools=(("gpu", "l4x8", 2),)), policy(gpus=[{"count": 4}])]
    first = plan_of(*fleet, small)
    big = md("big", replicas=1, gpus=3)  # larger: a fresh plan would fill it first
    plan = plan_of(*fleet, small, big, recorded=recorded(first))
    assert sorted(r.name.split("-")[0] + ":" + r.state for r in plan.replicas) == ["small:kept", "small:kept"]
    assert "over TeamPolicy ml-team spec.gpus[0]: budget 4" in reasons_of(plan)
    assert "in use 2, this replica asks 3" in reasons_of(plan)


def test_a_lowered_budget_drops_kept_replicas_over_it_and_says_so():
    fleet = [L4, cluster("c", pools=(("gpu", "l4", 8),))]
    first = plan_of(*fleet, md(replicas=4))
    plan = plan_of(*fleet, policy(gpus=[{"count": 2}]), md(replicas=4), recorded=recorded(first))
    assert len(plan.replicas) == 2 and all(r.state == "kept" for r in plan.replicas)
    assert [d.reason.cause for d in plan.dropped] == [Cause.OVER_BUDGET] * 2
    assert Cause.OVER_BUDGET in causes(plan)


def test_a_product_budget_sends_the_replica_to_another_product_with_room():
    fleet = [L4, H100, cluster("h", pools=(("gpu", "h100", 1),)), cluster("l", pools=(("gpu", "l4", 4),)),
             policy(gpus=[{"deviceClassName": "gpu.nvidia.com", "productName": "NVIDIA H100", "count": 1}]),
             md(replicas=3, gpus=1)]
    plan = plan_of(*fleet)
    use = Counter(r.cluster for r in plan.replicas)
    assert use["h"] == 1 and use["l"] == 2 and not plan.unscheduled


@pytest.mark.parametrize("split, expected", [
    ({"clusters": {"a": 1, "b": 2}}, {"a": 1, "b": 2}),
    ({"tiers": {"0": 1}}, {"a": 1}),
    ({"proportional": True}, {"a": 1, "b": 3}),  # a has 2 of 8 devices, b 6 of 8: 4 x 2/8 = 1, 4 x 6/8 = 3
])
def test_a_split_budget_caps_each_cluster_or_tier(split, expected):
    a = cluster("a", pools=(("gpu", "l4", 2),))
    b = cluster("b", pools=(("gpu", "l4", 6),))
    b["spec"]["placement"] = {"tier": 1}
    plan = plan_of(L4, a, b, policy(gpus=[{"count": 4, "split": split}]), md(replicas=6))
    assert Counter(r.cluster for r in plan.replicas) == expected
    # the split's caps refuse first where they sum to less than the count; proportional caps sum to it
    assert ("spec.gpus[0]: budget 4" if split.get("proportional") else "spec.gpus[0].split") in reasons_of(plan)


def test_one_deployment_writes_are_held_to_the_team_budget_as_the_whole_plan_is():
    """The portal's write path (fleet/incremental.py): a second deployment written alone sees what the first holds."""
    base = [L4, cluster("c", pools=(("gpu", "l4", 8),)), policy(gpus=[{"count": 3}])]
    first = run(*base, md("a", replicas=2))
    ledger = FleetLedger(first.fleet, recorded(schedule(first.fleet)), PlanMemo())
    second = run(*base, md("a", replicas=2), md("b", replicas=2))
    written = ledger.place(second.fleet.of("ModelDeployment")[1])
    assert len(written.replicas) == 1 and written.unscheduled[0].missing == 1
    assert "budget 3 devices of any class, in use 3, this replica asks 1" in written.unscheduled[0].reasons[0]
    whole = schedule(second.fleet, recorded(schedule(first.fleet)))
    assert Counter(r.deployment for r in whole.replicas) == {"a": 2, "b": 1}


def test_the_preview_rows_count_what_the_plan_places():
    loaded = run(L4, cluster("c", pools=(("gpu", "l4", 8),)), policy(gpus=[{"count": 3}]), md(replicas=5))
    plan = schedule(loaded.fleet)
    from fleet.inventory import build_clusters
    rows = budget_rows(Policies.of(loaded.fleet), build_clusters(loaded.fleet), plan.replicas)
    assert [(r.namespace, r.field, r.budget, r.used) for r in rows] == [("ml-team", "spec.gpus[0]", 3, 3)]


# ---- a property on random fleets ----------------------------------------------------------------------------------

@pytest.mark.parametrize("seed", range(24))
def test_no_plan_puts_a_team_over_a_budget_or_outside_its_residency(seed):
    rng = random.Random(seed)
    teams = ["a", "b", "c"]
    clusters = []
    for i in range(rng.randint(2, 5)):
        labels = rng.choice([EU_LABELS, US, None])
        clusters.append(cluster(f"c{i}", pools=(("l", "l4", rng.randint(1, 4)), ("h", "h100", rng.randint(0, 2))),
                                labels=labels))
    policies = [policy(t, gpus=[{"count": rng.randint(0, 8)},
                                {"deviceClassName": "gpu.nvidia.com", "productName": "NVIDIA H100",
                                 "count": rng.randint(0, 8)}],
                       residency=rng.choice([EU, {"matchLabels": US}, None])) for t in teams]
    deployments = [md(f"m{i}", namespace=rng.choice(teams), replicas=rng.randint(1, 4), gpus=rng.choice([1, 2, 8]))
                   for i in range(rng.randint(2, 6))]
    loaded = run(L4, H100, *clusters, *policies, *deployments)
    assert loaded.errors == [], [str(p) for p in loaded.errors]
    from fleet.inventory import build_clusters
    views = {c.name: c for c in build_clusters(loaded.fleet)}
    policy_of = Policies.of(loaded.fleet)
    plan = schedule(loaded.fleet)
    memo = PlanMemo()  # the portal's warm replans plan the same as a cold one
    assert [where(schedule(loaded.fleet, memo=memo)) for _ in range(2)] == [where(plan)] * 2
    # the fill's rankings skip places over a budget as trying every candidate does (what --explain does)
    assert where(schedule(loaded.fleet, explain=True)) == where(plan)
    # a second plan on the first one's record: kept replicas are charged first, nothing moves over a budget
    for current in (plan, schedule(loaded.fleet, recorded(plan))):
        for r in current.replicas:
            assert not_resident(policy_of.for_namespace(r.namespace), views[r.cluster].labels) is None
        for t in teams:
            held = Counter()
            for r in current.replicas:
                if r.namespace == t:
                    held.update(replica_use(views[r.cluster], r.placement))
            budgets = policy_of.for_namespace(t).spec.gpus
            assert sum(held.values()) <= budgets[0].count
            assert sum(n for (_, product), n in held.items() if product == "NVIDIA H100") <= budgets[1].count


def test_a_deployment_whose_every_replica_a_policy_removes_has_its_stack_destroyed_without_prune():
    """`up` destroys, without --prune, the model stack of a deployment in the input that a policy leaves no replica
    (kept, its replicas would run where the policy says they may not); other reasons keep the stack as before."""
    from automation.planning.stacks import parked_stacks

    fleet = [L4, cluster("c", pools=(("gpu", "l4", 8),), labels=US)]
    first = plan_of(*fleet, md(replicas=1))
    over = run(*fleet, policy(gpus=[{"count": 0}]), md(replicas=1))
    plan = schedule(over.fleet, recorded(first))
    assert plan.replicas == [] and [d.reason.cause for d in plan.dropped] == [Cause.OVER_BUDGET]
    assert parked_stacks(over.fleet, plan) == {"model-ml-team.m"}
    outside = run(*fleet, policy(residency=EU), md(replicas=1))
    assert parked_stacks(outside.fleet, schedule(outside.fleet, recorded(first))) == {"model-ml-team.m"}
    unselected = run(*fleet, md(replicas=1, clusterSelector={"matchLabels": EU_LABELS}))
    assert parked_stacks(unselected.fleet, schedule(unselected.fleet, recorded(first))) == frozenset()
