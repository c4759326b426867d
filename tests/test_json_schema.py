"""The published JSON Schemas: equal to what the API models generate, and accepting every example manifest."""

import json
import pathlib

import jsonschema
import pytest
import yaml

from fleet.api import KINDS
from fleet.json_schema import schema

ROOT = pathlib.Path(__file__).resolve().parent.parent
PUBLISHED = ROOT / "schemas" / "modelplane.ai" / "v1alpha1"
MANIFESTS = sorted((ROOT / "examples").rglob("*.yaml")) + sorted((ROOT / "tests" / "data" / "reference").glob("*.yaml")) \
    + sorted((ROOT / "stacks" / "fleets").rglob("*.yaml"))


@pytest.mark.parametrize("kind", list(KINDS))
def test_published_schema_is_what_the_models_generate(kind):
    assert json.loads((PUBLISHED / f"{kind}.json").read_text()) == schema(kind), \
        "regenerate with `modelplane schema --out schemas`"


def test_every_example_validates_against_its_kind_schema():
    validators = {kind: jsonschema.Draft202012Validator(schema(kind)) for kind in KINDS}
    checked = 0
    for path in MANIFESTS:
        for doc in yaml.safe_load_all(path.read_text()):
            if isinstance(doc, dict) and doc.get("apiVersion") == "modelplane.ai/v1alpha1" and doc.get("kind") in KINDS:
                errors = [e.message for e in validators[doc["kind"]].iter_errors(doc)]
                assert errors == [], (path.name, doc["kind"], errors)
                checked += 1
    assert checked >= 30


def test_the_schema_refuses_what_validate_refuses():
    deployment = schema("ModelDeployment")
    bad = {"apiVersion": "modelplane.ai/v1alpha1", "kind": "ModelDeployment", "metadata": {"name": "x"},
           "spec": {"replicas": 11, "template": {"spec": {"engines": []}}}}
    messages = " ".join(e.message for e in jsonschema.Draft202012Validator(deployment).iter_errors(bad))
    assert "11 is greater than the maximum of 10" in messages
    typo = {**bad, "spec": {"replicas": 1, "replicaz": 1, "template": {"spec": {"engines": []}}}}
    assert any("replicaz" in e.message for e in jsonschema.Draft202012Validator(deployment).iter_errors(typo))


def test_explain_describes_fields_from_the_models(capsys):
    from automation.cli import main

    assert main(["explain", "ModelDeployment.spec.replicas"]) == 0
    assert "FIELD:    spec.replicas <integer> (required) (>= 0, <= 10)" in capsys.readouterr().out
    assert main(["explain", "InferenceCluster.spec.nodePools"]) == 0
    out = capsys.readouterr().out
    assert "nodeCount <integer> (>= 0, default 1)" in out and "name <string> (required)" in out
    assert main(["explain", "ModelDeployment.spec.replicaz"]) == 2
    assert "has no field 'replicaz' (did you mean 'replicas'?)" in capsys.readouterr().err
    assert main(["explain", "ModelDeploymnt"]) == 2
    assert "did you mean 'ModelDeployment'?" in capsys.readouterr().err
