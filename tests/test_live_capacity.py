"""Live capacity (fleet/live_capacity.py): free devices read from a cluster's Nodes, ResourceSlices and allocated
ResourceClaims, and plans made with them. The objects are the local fleet's simulated hardware
(automation/local/hardware.py: what its API servers hold), with claims allocated as the scheduler's DRA plugin
writes them; tests/realengine/test_real_live_capacity.py reads the same from real API servers."""

from __future__ import annotations

import copy
import json
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from automation.local.hardware import hardware
from fleet.inventory import build_clusters
from fleet.capacity import LiveCapacity, declared
from fleet.live_capacity import capacity_to_dict, observe
from fleet.validate import load_fleet
from fleet.plan import Cause
from fleet.scheduler import schedule

READ_AT = "2026-12-07T04:00:00+00:00"


@pytest.fixture()
def fleet():
    loaded = load_fleet(("local-fleet/",))
    assert not loaded.errors
    return loaded.fleet


def objects(fleet, cluster: str):
    ic = next(c for c in fleet.of("InferenceCluster") if c.name == cluster)
    hw = hardware(ic, {c.name: c for c in fleet.of("InferenceClass")})
    for node in hw.nodes:  # as kubelet (kwok here) reports them
        node["status"]["conditions"] = [{"type": "Ready", "status": "True"}]
    return hw.nodes, hw.slices


def claim(name: str, node: str, devices: list[str], owner: str | None = None, namespace: str = "other-team"):
    """A ResourceClaim allocated `devices` of `node`'s slice, owned by pod `owner` when given."""
    meta: dict = {"name": name, "namespace": namespace}
    if owner:
        meta["ownerReferences"] = [{"apiVersion": "v1", "kind": "Pod", "name": owner, "uid": "u"}]
    return {"metadata": meta, "status": {"allocation": {"devices": {"results": [
        {"request": "gpu", "driver": "gpu.nvidia.com", "pool": node, "device": d} for d in devices]}}}}


def replica_pod(name: str, namespace: str = "ml-team"):
    return {"metadata": {"name": name, "namespace": namespace, "labels": {"modelplane.ai/replica": "r"}}}


def live(fleet, cluster, nodes, slices, claims=(), pods=(), autoscaling=None):
    view = next(c for c in build_clusters(fleet) if c.name == cluster)
    return observe(view, autoscaling or {}, nodes, slices, list(claims), list(pods), READ_AT)


def both(fleet, a_claims=(), b_claims=(), pods=(), mutate=None):
    a_nodes, a_slices = objects(fleet, "local-a")
    b_nodes, b_slices = objects(fleet, "local-b")
    if mutate:
        mutate(a_nodes, b_nodes)
    return LiveCapacity({"local-a": live(fleet, "local-a", a_nodes, a_slices, a_claims, pods),
                         "local-b": live(fleet, "local-b", b_nodes, b_slices, b_claims, pods)})


def where(plan):
    return sorted(f"{r.deployment}@{r.cluster}:{r.placement.engines[0].pool}" for r in plan.replicas)


def free(capacity, fleet, cluster, pool="l4" ):
    found = next(c for c in capacity_to_dict(fleet, capacity) if c["cluster"] == cluster)
    return next(p for p in found["pools"] if p["name"] == pool)


def test_nothing_taken_plans_as_declared(fleet):
    declared_plan = schedule(fleet, [])
    fleet.live = both(fleet)
    assert where(schedule(fleet, [])) == where(declared_plan)
    assert free(fleet.live, fleet, "local-a")["free"] == {"gpu": 2}
    assert free(fleet.live, fleet, "local-b", "h100")["free"] == {"gpu": 8}


def test_devices_another_workload_holds_spill_the_replica_to_another_cluster(fleet):
    before = where(schedule(fleet, []))
    assert "qwen3-8b@local-a:l4" in " ".join(before)
    fleet.live = both(fleet, a_claims=[claim("theirs-0", "l4-0", ["gpu-0"]), claim("theirs-1", "l4-1", ["gpu-0"])])
    assert free(fleet.live, fleet, "local-a")["free"] == {"gpu": 0}
    assert free(fleet.live, fleet, "local-a")["others"] == {"gpu": 2}
    placed = where(schedule(fleet, []))
    assert [p for p in placed if "qwen3-8b" in p] == ["qwen3-8b@local-b:h100"], placed


def test_devices_our_replicas_hold_stay_theirs(fleet):
    """A kept replica's own devices count as free for it: reading live capacity never moves it."""
    first = schedule(fleet, [])
    recorded = [r.recorded() for r in first.replicas]
    mine = [claim("mine", "l4-0", ["gpu-0"], owner="qwen-pod", namespace="ml-team")]
    fleet.live = both(fleet, a_claims=mine, pods=[replica_pod("qwen-pod")])
    assert free(fleet.live, fleet, "local-a")["ours"] == {"gpu": 1}
    again = schedule(fleet, recorded)
    assert where(again) == where(first) and not again.dropped
    assert {r.state for r in again.replicas} == {"kept"}


def test_a_cordoned_node_stops_counting_but_keeps_what_we_hold_there(fleet):
    first = schedule(fleet, [])
    recorded = [r.recorded() for r in first.replicas]

    def cordon(a_nodes, b_nodes):
        for n in a_nodes:
            if n["metadata"]["name"].startswith("l4-"):
                n["spec"]["unschedulable"] = True
    mine = [claim("mine", "l4-0", ["gpu-0"], owner="qwen-pod", namespace="ml-team")]
    fleet.live = both(fleet, a_claims=mine, pods=[replica_pod("qwen-pod")], mutate=cordon)
    pool = free(fleet.live, fleet, "local-a")
    assert pool["free"] == {"gpu": 0} and pool["unusable"] == {"l4-0": "cordoned", "l4-1": "cordoned"}
    again = schedule(fleet, recorded)
    assert where(again) == where(first) and not again.dropped  # our replica on the cordoned node stays


def test_a_not_ready_node_and_a_foreign_taint_stop_counting(fleet):
    def spoil(a_nodes, b_nodes):
        a_nodes[1]["status"]["conditions"] = [{"type": "Ready", "status": "False"}]
        a_nodes[2].setdefault("spec", {}).setdefault("taints", []).append(
            {"key": "maintenance", "value": "disk", "effect": "NoSchedule"})
    fleet.live = both(fleet, mutate=spoil)
    assert free(fleet.live, fleet, "local-a")["unusable"] == {"l4-0": "not Ready",
                                                                  "l4-1": "taint maintenance=disk:NoSchedule"}
    assert free(fleet.live, fleet, "local-a")["free"] == {"gpu": 0}


def test_an_older_slice_generation_and_a_tainted_device_are_not_counted(fleet):
    nodes, slices = objects(fleet, "local-b")
    stale = copy.deepcopy(slices[0])
    stale["metadata"]["name"] += "-old"
    slices[0]["spec"]["pool"]["generation"] = 2
    slices[0]["spec"]["devices"][3]["taints"] = [{"key": "gpu.nvidia.com/xid", "effect": "NoExecute"}]
    capacity = LiveCapacity({"local-b": live(fleet, "local-b", nodes, [stale, *slices])})
    assert free(capacity, fleet, "local-b", "h100")["published"] == {"gpu": 7}


def test_an_autoscaling_pool_may_still_grow(fleet):
    nodes, slices = objects(fleet, "local-b")
    grown = live(fleet, "local-b", nodes, slices, autoscaling={"h100": 3})
    assert grown.pools[0].growable == 2
    assert free(LiveCapacity({"local-b": grown}), fleet, "local-b", "h100")["free"] == {"gpu": 24}


def test_an_unread_cluster_keeps_its_declared_capacity_and_says_why(fleet):
    a_nodes, a_slices = objects(fleet, "local-a")
    fleet.live = LiveCapacity({"local-a": live(fleet, "local-a", a_nodes, a_slices,
                                               [claim("t0", "l4-0", ["gpu-0"]), claim("t1", "l4-1", ["gpu-0"])]),
                               "local-b": declared("local-b", "not read: cannot reach it")})
    shown = {c["cluster"]: c for c in capacity_to_dict(fleet, fleet.live)}
    assert shown["local-b"]["source"] == "declared" and "cannot reach" in shown["local-b"]["problem"]
    assert shown["local-a"]["readAt"] == READ_AT
    assert [p for p in where(schedule(fleet, [])) if "qwen3-8b" in p] == ["qwen3-8b@local-b:h100"]


def test_a_snapshot_round_trips_and_its_digest_ignores_when_it_was_read(fleet):
    capacity = both(fleet, a_claims=[claim("t0", "l4-0", ["gpu-0"])])
    again = LiveCapacity.from_json(capacity.to_json())
    assert again == capacity
    later = LiveCapacity({k: type(v)(v.cluster, v.source, "2027-01-01T00:00:00+00:00", v.problem, v.pools)
                          for k, v in capacity.clusters.items()})
    assert later.digest() == capacity.digest()
    assert both(fleet).digest() != capacity.digest()


@pytest.mark.parametrize("text, says", [
    ("{", "not JSON"),
    ('{"version": 9}', "not a capacity snapshot"),
    ('{"version": 1, "clusters": [{"cluster": "a", "source": "guessed"}]}', "neither live nor declared"),
    ('{"version": 1, "clusters": [{"source": "live"}]}', "malformed"),
])
def test_a_bad_snapshot_is_one_line_saying_what(text, says):
    with pytest.raises(ValueError, match=says):
        LiveCapacity.from_json(text)


def test_a_replica_on_a_node_that_went_away_is_moved_with_its_reason(fleet):
    """Live capacity lowers capacity only: a replica whose node is gone is re-placed, as when its pool shrinks."""
    first = schedule(fleet, [])
    recorded = [r.recorded() for r in first.replicas]
    b_nodes, b_slices = objects(fleet, "local-b")
    fleet.live = LiveCapacity({"local-b": live(fleet, "local-b", [n for n in b_nodes if n["metadata"]["name"] != "h100-0"],
                                               b_slices)})
    again = schedule(fleet, recorded)
    moved = [d for d in again.dropped if d.cluster == "local-b"]
    assert moved and all(d.reason.cause == Cause.NO_LONGER_FITS for d in moved), again.dropped


# ---- through `modelplane plan` ---------------------------------------------------------------------------------


def run_cli(capsys, *args):
    from automation.cli import main

    code = main(list(args))
    out, err = capsys.readouterr()
    assert "Traceback" not in out + err
    return code, out, err


@pytest.fixture()
def taken(fleet, tmp_path):
    """A snapshot where another team holds both of local-a's L4s."""
    path = tmp_path / "capacity.json"
    path.write_text(both(fleet, a_claims=[claim("t0", "l4-0", ["gpu-0"]), claim("t1", "l4-1", ["gpu-0"])]).to_json())
    return str(path)


def test_plan_from_a_snapshot_places_on_it_and_shows_it(capsys, monkeypatch, tmp_path, taken):
    monkeypatch.chdir(tmp_path)
    fleet_dir = str(Path(__file__).resolve().parents[1] / "local-fleet")
    code, out, err = run_cli(capsys, "plan", "-f", fleet_dir, "--fresh", "--capacity", taken, "-o", "json")
    assert code == 0, err
    document = json.loads(out)
    assert [r["cluster"] for r in document["replicas"] if r["deployment"] == "ml-team/qwen3-8b"] == ["local-b"]
    a = next(c for c in document["capacity"] if c["cluster"] == "local-a")
    assert a["source"] == "live" and a["readAt"] == READ_AT and a["pools"][0]["others"] == {"gpu": 2}
    code, out, err = run_cli(capsys, "plan", "-f", fleet_dir, "--fresh", "-o", "json")
    assert "capacity" not in json.loads(out)  # declared: the output is as before


def test_plan_against_a_base_plans_both_sides_on_the_same_capacity(capsys, monkeypatch, tmp_path, taken):
    """Otherwise every replica the snapshot moves would show as a change of the pull request."""
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("MODELPLANE_CACHE_DIR", str(tmp_path / "cache"))
    fleet_dir = str(Path(__file__).resolve().parents[1] / "local-fleet")
    for _ in range(2):  # the second reads the base's summary back: its key holds the capacity
        code, out, err = run_cli(capsys, "plan", "-f", fleet_dir, "--against", fleet_dir, "--fresh",
                                 "--capacity", taken, "-o", "json")
        assert code == 0, err
        changes = json.loads(out)["changes"]
        assert {s["change"] for s in changes["stacks"]} == {"none"}, changes["stacks"]
        assert changes["replicas"] == {"added": [], "removed": [], "moved": []}
    code, out, err = run_cli(capsys, "plan", "-f", fleet_dir, "--against", fleet_dir, "--fresh", "--capacity",
                             taken, "-o", "markdown")
    assert "Capacity the plan was made on" in out and "| local-a | live, read " in out


@pytest.mark.parametrize("given, says", [
    ("missing.json", "cannot read the snapshot"),
    ("bad.json", "not JSON"),
])
def test_a_capacity_that_cannot_be_used_is_one_line_and_exit_2(capsys, monkeypatch, tmp_path, given, says):
    monkeypatch.chdir(tmp_path)
    (tmp_path / "bad.json").write_text("{")
    fleet_dir = str(Path(__file__).resolve().parents[1] / "local-fleet")
    code, out, err = run_cli(capsys, "plan", "-f", fleet_dir, "--fresh", "--capacity", given)
    assert code == 2 and says in err and len(err.strip().splitlines()) == 1, err


# ---- properties ------------------------------------------------------------------------------------------------


def _placed_devices(plan) -> dict[tuple[str, str], int]:
    used: dict[tuple[str, str], int] = {}
    for r in plan.replicas:
        for e in r.placement.engines:
            for m in e.members:
                used[r.cluster, e.pool] = used.get((r.cluster, e.pool), 0) + m.pods * sum(c for _, _, c in m.devices)
    return used


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(seed=st.integers(0, 10_000), taken=st.floats(0.0, 0.9))
def test_no_plan_places_more_devices_than_live_free(seed, taken):
    """Whatever other workloads hold, the devices a plan places on a pool never exceed what the pool has free."""
    from benchmarks.live_capacity import snapshot
    from benchmarks.plan_bench import generate
    from tests.manifests import run

    objects = generate(30, 6, seed=seed)
    loaded = run(*objects)
    fleet = loaded.fleet
    fleet.live = LiveCapacity.from_json(snapshot(objects, seed=seed, taken=taken))
    plan = schedule(fleet, [])
    free = {(c["cluster"], p["name"]): sum(p["free"].values()) for c in capacity_to_dict(fleet, fleet.live)
            for p in c["pools"]}
    for key, used in _placed_devices(plan).items():
        assert used <= free[key], (key, used, free[key])


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(seed=st.integers(0, 10_000))
def test_a_replica_whose_own_devices_are_the_only_ones_taken_is_never_moved(seed):
    """Live capacity where this fleet's replicas hold every device taken plans exactly as declared capacity."""
    from benchmarks.live_capacity import snapshot
    from benchmarks.plan_bench import generate
    from tests.manifests import run

    objects = generate(30, 6, seed=seed)
    fleet = run(*objects).fleet
    first = schedule(fleet, [])
    recorded = [r.recorded() for r in first.replicas]
    fleet.live = LiveCapacity.from_json(snapshot(objects, seed=seed, taken=0.0, ours=_placed_devices(first)))
    again = schedule(fleet, recorded)
    assert not again.dropped
    assert sorted((r.key, r.cluster, r.index) for r in again.replicas) == \
        sorted((r.key, r.cluster, r.index) for r in first.replicas)
