"""Manifests written for the reference system validate here unchanged."""

import pathlib

from fleet.validate import load_fleet

DATA = pathlib.Path(__file__).parent / "data" / "reference"


def test_reference_manifests_validate_unchanged():
    loaded = load_fleet([str(DATA)])
    assert loaded.errors == []
    kinds = {o.kind for o in loaded.fleet.objects}
    assert kinds == {"InferenceClass", "InferenceCluster", "InferenceGateway", "ModelCache",
                     "ModelDeployment", "ModelEndpoint", "ModelService", "ModelReplica"}
    assert len(loaded.fleet.objects) == 24
    # the reference system's own infrastructure kinds are skipped with a note, not rejected
    assert sum("skipped" in n for n in loaded.notes) == 2


def test_pd_recipe_reads_as_written():
    loaded = load_fleet([str(DATA / "kimi-k2.yaml")])
    md = loaded.fleet.of("ModelDeployment")[0]
    assert md.spec.template.spec.mode == "PrefillDecode"
    assert [e.phase for e in md.spec.template.spec.engines] == ["Prefill", "Decode"]
    assert [d.count for d in md.spec.template.spec.engines[0].members[0].nodeSelector.devices] == [8, 16]
