"""Placement stability (docs/scheduling.md, "Stability"): one added replica moves no replica of another deployment
unless it takes capacity that replica needed, with or without a record; and every road that plans a HEAD (`plan`,
`plan --against`, `preview --offline`, `preview --offline --changed-against`) gives the same placements for the
same manifests and record."""

import copy
import json
import random
import shutil
from collections import defaultdict
from pathlib import Path

import pytest
import yaml
from click.testing import CliRunner
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from automation.cli import cli
from fleet.scheduler import schedule
from tests.manifests import run
from tests.scheduling import md, mem
from tests.test_scheduler_properties import fleets

ROOT = Path(__file__).resolve().parent.parent


def where(plan, but: str | None = None) -> dict[str, list]:
    """Each deployment's replicas as (cluster, engine pools), leaving out deployment `but`."""
    out: dict[str, list] = defaultdict(list)
    for r in plan.replicas:
        if r.key != but:
            out[r.key].append((r.cluster, tuple((e.engine, e.pool) for e in r.placement.engines)))
    return {k: sorted(v) for k, v in out.items()}


def add_one_replica(objects: list[dict], rnd: random.Random) -> tuple[list[dict], str]:
    """The head: one deployment gains a replica, or a new one-replica deployment arrives; and its key."""
    head = copy.deepcopy(objects)
    deployments = [o for o in head if o["kind"] == "ModelDeployment"]
    if rnd.random() < 0.7:
        target = rnd.choice(deployments)
        target["spec"]["replicas"] += 1
        return head, f"{target['metadata']['namespace']}/{target['metadata']['name']}"
    head.append(md("added", 1, gpus=rnd.choice([1, 2, 8]), cel=mem(rnd.choice([10, 40, 70])), namespace="a"))
    return head, "a/added"


def ample(objects: list[dict]) -> list[dict]:
    """The same fleet with every pool far larger than any plan of it can fill: no placement ever lacks room."""
    objects = copy.deepcopy(objects)
    for o in objects:
        if o["kind"] == "InferenceCluster":
            for pool in o["spec"]["nodePools"]:
                pool["nodeCount"] = 400
    return objects


def a_record(objects: list[dict], rnd: random.Random) -> list:
    """Nothing, or what `up` recorded of an earlier version of the fleet (some deployments fewer replicas)."""
    if rnd.random() < 0.4:
        return []
    earlier = copy.deepcopy(objects)
    for o in earlier:
        if o["kind"] == "ModelDeployment":
            o["spec"]["replicas"] = rnd.randint(1, o["spec"]["replicas"])
    return [r.recorded() for r in schedule(run(*earlier).fleet).replicas]


@settings(max_examples=120, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(fleets(), st.randoms(use_true_random=False))
def test_with_room_for_everything_an_added_replica_moves_nothing_else(objects, rnd):
    """Where nothing is ever short of room, no other deployment's replica may move: neither planned from nothing
    nor planned with a record. (Ranked on the ledger as it was, a new replica made its cluster look tighter and
    drew other deployments' new replicas there.)"""
    base = ample(objects)
    head, changed = add_one_replica(base, rnd)
    recorded = a_record(base, rnd)
    before = schedule(run(*base).fleet, recorded)
    after = schedule(run(*head).fleet, recorded)
    assert where(after, but=changed) == where(before, but=changed)
    assert not after.dropped or after.dropped == before.dropped


@settings(max_examples=120, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(fleets(), st.randoms(use_true_random=False))
def test_an_added_replica_that_finds_no_room_moves_nothing(objects, rnd):
    """On any fleet, tight or not: an added replica that is not placed took no capacity, so nothing else changes."""
    head, changed = add_one_replica(objects, rnd)
    recorded = a_record(objects, rnd)
    before = schedule(run(*objects).fleet, recorded)
    after = schedule(run(*head).fleet, recorded)
    if len(where(after).get(changed, [])) > len(where(before).get(changed, [])):
        return  # it was placed: what it took may force others to move, which the test above rules out otherwise
    assert where(after, but=changed) == where(before, but=changed)


def _placements(document: dict) -> list:
    return sorted((r["deployment"], r["name"], r["cluster"]) for r in document["replicas"])


def _stack_objects(document: dict) -> dict[str, list]:
    return {s["name"]: s["resources"] for s in document["stacks"]}


def add_a_replica(fleet: Path) -> None:
    path = fleet / "models" / "qwen3-8b.yaml"
    path.write_text(path.read_text().replace("  replicas: 2\n", "  replicas: 3\n", 1))


def remove_a_cluster(fleet: Path) -> None:
    """byo-eu goes: its replica needs an H100 that only eks-us-west has, where a replica of qwen3-8b sits unrecorded."""
    path = fleet / "platform" / "clusters.yaml"
    docs = [d for d in yaml.safe_load_all(path.read_text()) if d and d["metadata"]["name"] != "byo-eu"]
    path.write_text(yaml.safe_dump_all(docs, sort_keys=False))


@pytest.mark.parametrize("edit", [add_a_replica, remove_a_cluster], ids=["add a replica", "remove a cluster"])
def test_every_preview_of_a_head_shows_the_same_placements(edit, tmp_path, monkeypatch):
    """A change to the examples (their observed ModelReplica is the record): `plan`, `plan --against`, `preview
    --offline` and `preview --offline --changed-against` agree on the HEAD, down to the objects of every stack the
    comparison previews (the team's ResourceQuota among them). When the record is not the base's plan, as here, a
    head planned with the base's placements instead (as before issue 31) disagrees with the full preview."""
    base, head = tmp_path / "base", tmp_path / "head"
    shutil.copytree(ROOT / "examples", base)
    shutil.copytree(ROOT / "examples", head)
    edit(head)
    monkeypatch.setenv("MODELPLANE_CACHE_DIR", str(tmp_path / "cache"))
    state = ["--state", str(tmp_path / "state")]

    def invoke(*args: str) -> dict:
        result = CliRunner().invoke(cli, [*args, *state], catch_exceptions=False)
        assert result.exit_code == 0, result.output
        return json.loads(result.stdout)

    plan = invoke("plan", "-f", str(head), "-o", "json")
    against = invoke("plan", "-f", str(head), "--against", str(base), "-o", "json")
    assert _placements(plan) == _placements(against)
    full = _stack_objects(invoke("preview", "--offline", "-f", str(head), "-o", "json"))
    changed = _stack_objects(invoke("preview", "--offline", "-f", str(head), "--changed-against", str(base),
                                    "-o", "json"))
    assert changed and set(changed) <= set(full)
    assert any(name.startswith("team-") for name in changed)  # the quota the replicas' devices count against
    for name, resources in changed.items():
        assert resources == full[name], name
