"""The portal places one written deployment against a kept ledger (fleet/incremental.py). Two properties, on
random and generated fleets, over sequences of writes made without any full plan in between:

1. Whenever the full plan of the same fleet and reservations leaves every other deployment as it was, the written
   deployment's replicas (with their placements), its shortfall and its dropped replicas are the full plan's.
2. The ledger after the writes is the ledger built afresh from the same fleet and reservations.
"""

from __future__ import annotations

import json
import random

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from benchmarks.plan_bench import generate
from fleet.incremental import CHARGES_KEPT, FleetLedger
from fleet.plan_output import plan_to_dict
from fleet import incremental
from fleet.scheduler import PlanMemo, schedule
from fleet.validate import Fleet
from tests.manifests import run
from tests.scheduling import md, mem
from tests.test_scheduler_properties import fleets


def _edit(objects: list[dict], rnd: random.Random) -> tuple[list[dict], str, bool]:
    """One write: (objects after it, the deployment's key, whether it was deleted)."""
    objects = json.loads(json.dumps(objects))
    deployments = [o for o in objects if o["kind"] == "ModelDeployment"]
    action = rnd.choice(["add", "scale", "scale", "reshape", "select", "remove"] if deployments else ["add"])
    if action == "add":
        taken = {o["metadata"]["name"] for o in deployments}
        name = next(f"new{i}" for i in range(len(taken) + 1) if f"new{i}" not in taken)
        new = md(name, rnd.randint(1, 4), gpus=rnd.choice([1, 2, 8]),
                 cel=mem(rnd.choice([10, 40, 70])), namespace=rnd.choice(["a", "b"]))
        objects.append(new)
        target = new
    else:
        target = rnd.choice(deployments)
        spec = target["spec"]
        if action == "scale":
            spec["replicas"] = rnd.randint(1, 6)
        elif action == "reshape":
            spec["template"]["spec"]["engines"][0]["copies"] = rnd.choice([1, 2, 3])
        elif action == "select":
            spec["template"]["spec"]["clusterSelector"] = {"matchLabels": {"region": rnd.choice(["us", "eu"])}}
        else:
            objects.remove(target)
    meta = target["metadata"]
    return objects, f"{meta.get('namespace', 'default')}/{meta['name']}", action == "remove"


def _only(plan, key: str) -> tuple:
    mine = plan.only(deployment=key)
    return (json.dumps(plan_to_dict(mine), sort_keys=True), [(r.name, r.placement) for r in mine.replicas])


def _writes(objects: list[dict], rnd: random.Random, steps: int) -> int:
    """Apply `steps` writes through the ledger; returns how many were compared with a full plan."""
    fleet = run(*objects).fleet
    reserved = [r.recorded() for r in schedule(fleet, []).replicas]
    ledger = FleetLedger(fleet, reserved)
    compared = 0
    for _ in range(steps):
        objects, key, removed = _edit(objects, rnd)
        loaded = run(*objects)
        assert loaded.errors == [], [str(p) for p in loaded.errors]
        fleet = loaded.fleet
        full = schedule(fleet, reserved)
        if removed:
            ledger.remove(key)
            mine = []
        else:
            written = next(d for d in fleet.of("ModelDeployment") if f"{d.namespace}/{d.name}" == key)
            got = ledger.place(written)
            mine = [r.recorded() for r in got.replicas]
            others_before = sorted((r for r in reserved if f"{r.namespace}/{r.deployment}" != key), key=repr)
            others_after = sorted((r.recorded() for r in full.replicas if r.key != key), key=repr)
            if others_after == others_before:
                assert _only(got, key) == _only(full, key)
                compared += 1
        reserved = [r for r in reserved if f"{r.namespace}/{r.deployment}" != key] + mine
        assert ledger.states() == FleetLedger(fleet, reserved).states()
    return compared


@settings(max_examples=120, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(fleets(), st.randoms(use_true_random=False))
def test_a_written_deployment_is_placed_as_the_full_plan_places_it(objects, rnd):
    _writes(objects, rnd, 6)


def test_writes_on_a_generated_fleet_are_placed_as_the_full_plan_places_them():
    compared = _writes(generate(120, 20), random.Random(3), 40)
    assert compared >= 30, f"only {compared} of 40 writes left the other deployments alone"


def test_a_full_fleet_still_says_why_nothing_fits():
    from tests.manifests import cluster, gpu_class

    objects = [gpu_class("k", 1, "24Gi"), cluster("c0", pools=(("p", "k", 1),)), md("first", 1, gpus=1, cel=mem(10))]
    fleet = run(*objects).fleet
    ledger = FleetLedger(fleet, [r.recorded() for r in schedule(fleet, []).replicas])
    second = run(*objects, md("second", 2, gpus=1, cel=mem(10))).fleet
    plan = ledger.place(next(d for d in second.of("ModelDeployment") if d.name == "second"))
    assert plan.replicas == [] and plan.unscheduled[0].missing == 2
    assert any("c0/p" in reason for reason in plan.unscheduled[0].reasons), plan.unscheduled[0].reasons


def test_a_write_taken_back_leaves_the_ledger_as_it_was():
    objects = generate(60, 10)
    fleet = run(*objects).fleet
    ledger = FleetLedger(fleet, [r.recorded() for r in schedule(fleet, []).replicas])
    before = ledger.states()
    written = fleet.of("ModelDeployment")[3].model_copy(deep=True)
    written.spec.replicas += 3
    saved = ledger.saved(f"{written.namespace}/{written.name}")
    assert ledger.place(written).replicas and ledger.states() != before
    ledger.restore(f"{written.namespace}/{written.name}", saved)
    assert ledger.states() == before
    fresh = md("fresh", 2, gpus=1, cel=mem(10), namespace="a")
    added = next(d for d in run(*objects, fresh).fleet.of("ModelDeployment") if d.name == "fresh")
    saved = ledger.saved("a/fresh")
    ledger.place(added)
    ledger.restore("a/fresh", saved)
    assert ledger.states() == before and ledger.reserved("a/fresh") == []


def test_the_full_plan_reconciling_a_deployment_the_ledger_no_longer_holds_leaves_nothing_of_it():
    """The background replan stores reservations for deployments a later write deleted: they hold nothing."""
    objects = generate(60, 10)
    fleet = run(*objects).fleet
    reserved = [r.recorded() for r in schedule(fleet, []).replicas]
    ledger = FleetLedger(fleet, reserved)
    gone = fleet.of("ModelDeployment")[5]
    key = f"{gone.namespace}/{gone.name}"
    ledger.remove(key)
    ledger.reserve(key, [r for r in reserved if f"{r.namespace}/{r.deployment}" == key])
    left = run(*[o for o in objects if o["metadata"].get("name") != gone.name or o["kind"] != "ModelDeployment"]).fleet
    assert ledger.reserved(key) == []
    assert ledger.states() == FleetLedger(left, [r for r in reserved if f"{r.namespace}/{r.deployment}" != key]).states()


def test_the_ledgers_memo_does_not_grow_with_writes(monkeypatch):
    """The portal keeps one ledger for its life: after hundreds of writes its memo holds a few charged ledgers per
    cluster (the newest), not one per write, and lets go of the ledger states it interned past its limit (here
    made smaller); each write is placed as by a ledger that never forgets, and the ledger is the one built afresh."""
    objects = generate(60, 10)
    fleet = run(*objects).fleet
    reserved = [r.recorded() for r in schedule(fleet, []).replicas]
    remembering = FleetLedger(fleet, reserved)
    monkeypatch.setattr(incremental, "LEDGER_STATES_PER_CLUSTER", 2)
    memo = PlanMemo()
    ledger = FleetLedger(fleet, reserved, memo)
    at_start = len(memo.state_ids)
    deployments = fleet.of("ModelDeployment")
    states, forgot = [], 0
    for i in range(300):
        written = deployments[i % 17].model_copy(deep=True)
        written.spec.replicas = 1 + (i * 7) % 5
        key = f"{written.namespace}/{written.name}"
        assert _only(ledger.place(written), key) == _only(remembering.place(written), key)
        forgot += bool(states) and len(memo.state_ids) < states[-1]
        states.append(len(memo.state_ids))
        reserved = [r for r in reserved if f"{r.namespace}/{r.deployment}" != key] + ledger.reserved(key)
        deployments[i % 17] = written
    clusters = len(fleet.of("InferenceCluster"))
    # past the limit (those at the start and 2 per cluster), never more than one write interns
    assert forgot and max(states) < at_start + 2 * 10 + 100, (forgot, at_start, max(states))
    assert len(memo.charged) <= CHARGES_KEPT * clusters, len(memo.charged)
    current = Fleet(objects=[o for o in fleet.objects if o.kind != "ModelDeployment"] + deployments)
    assert ledger.states() == FleetLedger(current, reserved).states() == remembering.states()
    again = FleetLedger(current, reserved, memo)  # another ledger on the same memo keeps only what it holds
    assert again.states() == ledger.states() and len(memo.charged) <= clusters
