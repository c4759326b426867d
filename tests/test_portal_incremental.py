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

from automation.portal import service
from benchmarks.plan_bench import generate
from tests.manifests import gateway
from tests.test_scheduler_properties import _one_deployment_edit, fleets


def stored(objects: list[dict]) -> list[dict]:
    """As the portal stores them: each with a uid and a resourceVersion that moves when it changes."""
    out = []
    for i, obj in enumerate(objects):
        obj = copy.deepcopy(obj)
        meta = obj["metadata"]
        meta.setdefault("uid", str(uuid.uuid5(uuid.NAMESPACE_URL, f"{obj['kind']}/{meta.get('namespace')}/{meta['name']}")))
        meta["resourceVersion"] = str(hash(json.dumps(obj, sort_keys=True)) % 10**9)  # changes with content
        out.append(obj)
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
        placements, desired = kept["placements"], kept["fingerprints"]
        applied = json.dumps({name: fp for name, _, fp in kept["runs"][::2]})  # half of the runs went through


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
    service.compute_replan(stored(changed), first["placements"], first["fingerprints"], "{}", False)
    assert set(composed) == {target["metadata"]["name"]}
