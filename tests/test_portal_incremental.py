"""The portal's replan keeps what it can between writes (validated objects, the scheduler's memo, each model
stack's inputs and fingerprint). After every write of a sequence, the result must be exactly the replan of a
process that kept nothing: placements, plan, fingerprints, problems, queued runs and the status snapshot."""

from __future__ import annotations

import copy
import json
import random
import uuid

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from automation.planning import stacks
from automation.portal import service
from benchmarks.plan_bench import generate
from tests.manifests import gateway
from tests.test_scheduler_properties import _one_deployment_edit, fleets


def stored(objects: list[dict]) -> list[str]:
    """As the portal stores them: each with a uid and a resourceVersion that moves when it changes, as JSON text."""
    out = []
    for i, obj in enumerate(objects):
        obj = copy.deepcopy(obj)
        meta = obj["metadata"]
        meta.setdefault("uid", str(uuid.uuid5(uuid.NAMESPACE_URL, f"{obj['kind']}/{meta.get('namespace')}/{meta['name']}")))
        meta["resourceVersion"] = str(hash(json.dumps(obj, sort_keys=True)) % 10**9)  # changes with content
        out.append(json.dumps(obj))
    return out


def replay(sequence: list[list[dict]], monkeypatch) -> None:
    warm = service.Warm()
    placements, desired, applied = "[]", "{}", "{}"
    for objects in sequence:
        bodies = stored(objects)
        monkeypatch.setattr(service, "WARM", warm)
        kept = service.compute_replan(bodies, placements, desired, applied, True)
        monkeypatch.setattr(service, "WARM", service.Warm())
        fresh = service.compute_replan(bodies, placements, desired, applied, True)
        assert kept == fresh
        placements = "[" + ",".join(rows[0][1:-1] for rows in kept.deployments.values() if rows[0] != "[]") + "]"
        desired = kept.fingerprints_json
        applied = json.dumps({name: fp for name, _, fp in kept.runs[::2]})  # half of the runs went through


def test_a_sequence_of_writes_replans_as_from_nothing(monkeypatch):
    rnd = random.Random(5)
    objects = generate(40, 10) + [gateway()]
    sequence = [objects]
    for _ in range(6):
        sequence.append(_one_deployment_edit(sequence[-1], rnd))
    shared = copy.deepcopy(sequence[-1])  # the tenancy switch: every model stack's inputs change
    next(o for o in shared if o["kind"] == "InferenceGateway")["metadata"]["annotations"] = {
        "modelplane.ai/workload-namespaces": "Default"}
    sequence.append(shared)
    shrunk = copy.deepcopy(shared)  # a cluster's pool: the platform stacks are computed again
    next(o for o in shrunk if o["kind"] == "InferenceCluster")["spec"]["nodePools"][0]["nodeCount"] = 0
    sequence += [shrunk, _one_deployment_edit(shrunk, rnd)]
    replay(sequence, monkeypatch)


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture])
@given(fleets(), st.randoms(use_true_random=False))
def test_random_writes_replan_as_from_nothing(monkeypatch, objects, rnd):
    sequence = [objects]
    for _ in range(4):
        sequence.append(_one_deployment_edit(sequence[-1], rnd))
    replay(sequence, monkeypatch)


def test_a_write_composes_only_the_deployment_it_changed(monkeypatch):
    import workloads.render

    objects = generate(30, 8)
    warm = service.Warm()
    monkeypatch.setattr(service, "WARM", warm)
    first = service.compute_replan(stored(objects), "[]", "{}", "{}", False)
    changed = copy.deepcopy(objects)
    target = [o for o in changed if o["kind"] == "ModelDeployment"][4]
    target["spec"]["replicas"] += 1
    composed: list[str] = []
    real = workloads.render.compose_replica
    monkeypatch.setattr(workloads.render, "compose_replica", lambda ctx: composed.append(ctx.md.name) or real(ctx))
    platform: list[int] = []
    real_platform = stacks.platform_specs
    monkeypatch.setattr(stacks, "platform_specs", lambda *a, **k: platform.append(1) or real_platform(*a, **k))
    placements = "[" + ",".join(rows[0][1:-1] for rows in first.deployments.values() if rows[0] != "[]") + "]"
    service.compute_replan(stored(changed), placements, first.fingerprints_json, "{}", False)
    assert set(composed) == {target["metadata"]["name"]}
    assert platform == [], "a deployment's write computed the platform stacks again"


def test_a_write_answers_with_the_placement_the_background_replan_keeps(tmp_path):
    """Through the portal: each ModelDeployment write is placed in its request and answered with that placement;
    once the background replan has planned the fleet after it, the plan holds the same replicas on the same
    clusters and pools, whenever the replan left every other deployment where it was."""
    from tests.portal_server import ADMIN, API, ThreadServer

    objects = generate(40, 8, seed=3)
    rnd = random.Random(8)
    compared = 0
    with ThreadServer(tmp_path, replan_interval=0.05) as server, server.client(ADMIN) as admin:
        for obj in objects:
            meta = obj["metadata"]
            plural = {"InferenceClass": "inferenceclasses", "InferenceCluster": "inferenceclusters",
                      "ModelDeployment": "modeldeployments"}[obj["kind"]]
            path = (f"{API}/namespaces/{meta['namespace']}/{plural}/{meta['name']}" if "namespace" in meta
                    else f"{API}/{plural}/{meta['name']}")
            assert admin.put(path, json=obj).status_code == 201
        server.settle()
        deployments = [o for o in objects if o["kind"] == "ModelDeployment"]
        for _ in range(25):
            before = admin.get("/plan").json()
            target = copy.deepcopy(rnd.choice(deployments))
            target["spec"]["replicas"] = rnd.randint(1, 5)
            key = f"{target['metadata']['namespace']}/{target['metadata']['name']}"
            answer = admin.put(f"{API}/namespaces/{target['metadata']['namespace']}/modeldeployments/"
                               f"{target['metadata']['name']}", json=target)
            assert answer.status_code == 200
            server.settle()
            after = admin.get("/plan").json()
            assert not any(row["pending"] for row in _rows(server)), "settled, yet rows are pending"

            def others(plan):
                return sorted(json.dumps(r, sort_keys=True) for r in plan["replicas"] if r["deployment"] != key)

            if others(after) == others(before):
                placed = sorted((p["cluster"], p["name"], json.dumps(p["engines"], sort_keys=True))
                                for p in answer.json()["status"]["placement"])
                planned = sorted((r["cluster"], r["name"], json.dumps(r["engines"], sort_keys=True))
                                 for r in after["replicas"] if r["deployment"] == key)
                assert placed == planned
                compared += 1
    assert compared >= 20, f"only {compared} of 25 writes left the other deployments alone"


def _rows(server) -> list[dict]:
    from sqlalchemy import select

    from automation.portal.store import reservations

    with server.store.read() as conn:
        return [dict(r) for r in conn.execute(select(reservations)).mappings()]
