"""The compiled (jsonschema-rs) validator that answers first never lets through what jsonschema refuses.

`workloads.schemas.check` asks the compiled validator, and asks jsonschema only when it refuses; so the fast
path is safe exactly when it refuses everything jsonschema refuses. For every kind the examples render (and
every operator object), each object and many broken copies of it (an unknown field, a wrong type, a missing
field, an empty or malformed string, at paths spread over the object) get the same verdict from both.
"""

from __future__ import annotations

import copy
import pathlib
import random

import pytest

from automation.operator.export import ExportOptions, export
from automation.operator.validation import CRDS
from automation.planning.stacks import desired_state
from fleet.validate import load_fleet
from workloads import schemas

COMMIT = "0123456789abcdef0123456789abcdef01234567"
ROOT = pathlib.Path(__file__).resolve().parent.parent
PER_KIND = 120  # broken copies per kind


def _objects() -> list[tuple[dict, pathlib.Path]]:
    desired = desired_state(load_fleet([str(ROOT / "examples")]).fleet)
    out, seen = [], set()
    for _, _, obj in desired.rendered.objects():
        if (obj["apiVersion"], obj["kind"]) not in seen:
            seen.add((obj["apiVersion"], obj["kind"]))
            out.append((obj, schemas.CRD_DIR))
    files = export(desired, ExportOptions(backend="s3://b", git_url="https://g/x", git_ref=COMMIT, secrets=("cloud",),
                                                   gcp_credentials=("gcp", "key.json")))
    for objects in files.values():
        for obj in objects:
            if (obj["apiVersion"], obj["kind"], "operator") not in seen:
                seen.add((obj["apiVersion"], obj["kind"], "operator"))
                out.append((obj, CRDS))
    return out


def _paths(value, path=()):
    yield path
    if isinstance(value, dict):
        for key, sub in value.items():
            yield from _paths(sub, (*path, key))
    elif isinstance(value, list):
        for index, sub in enumerate(value):
            yield from _paths(sub, (*path, index))


def _broken(obj: dict, rnd: random.Random):
    paths = [p for p in _paths(obj) if p]
    for _ in range(PER_KIND):
        path = rnd.choice(paths)
        broken = copy.deepcopy(obj)
        parent = broken
        for part in path[:-1]:
            parent = parent[part]
        last, value = path[-1], parent[path[-1]]
        how = rnd.choice(["unknown field", "wrong type", "missing", "bad string"])
        if how == "unknown field" and isinstance(value, dict):
            value["zzUnknownField"] = "x"
        elif how == "missing" and isinstance(parent, dict):
            del parent[last]
        elif how == "bad string" and isinstance(value, str):
            parent[last] = rnd.choice(["", "Not A DNS Name!", "-1", "x" * 300])
        else:  # a value of another type
            parent[last] = 12345 if isinstance(value, str) else "not-a-" + type(value).__name__
        yield f"{how} at {'.'.join(map(str, path))}", broken


CASES = _objects()


@pytest.mark.parametrize("obj,crds", CASES, ids=[f"{o['apiVersion']}/{o['kind']}" for o, _ in CASES])
def test_the_fast_validator_refuses_whatever_jsonschema_refuses(obj, crds):
    checker = schemas._checker(obj["apiVersion"], obj["kind"], crds)
    assert checker is not None and checker.fast is not None  # every kind we emit has the fast path

    def verdicts(candidate: dict) -> tuple[bool, bool]:
        data = candidate if checker.defaults is None else schemas.with_defaults(candidate, checker.defaults)
        return checker.fast.is_valid(data), checker.exact.is_valid(data)

    assert verdicts(obj) == (True, True)
    rnd = random.Random(f"{obj['apiVersion']}/{obj['kind']}")
    refused = 0
    for what, broken in _broken(obj, rnd):
        fast, exact = verdicts(broken)
        assert fast or not exact, f"jsonschema accepts but the fast path refuses: fine, but check {what}"
        assert exact or not fast, f"the fast path lets through what jsonschema refuses: {what}"
        refused += not exact
    assert refused > PER_KIND // 10  # the broken copies really exercise refusals


def test_defaults_are_filled_in_without_changing_or_copying_the_object():
    schema = {"type": "object", "properties": {
        "spec": {"type": "object", "properties": {
            "strategy": {"type": "object", "default": {}, "properties": {"type": {"type": "string", "default": "Roll"}}},
            "big": {"type": "object", "x-kubernetes-preserve-unknown-fields": True},
            "ports": {"type": "array", "items": {"type": "object", "properties": {
                "protocol": {"type": "string", "default": "TCP"}}}}}}}}
    big = {"a": list(range(1000))}
    obj = {"spec": {"big": big, "ports": [{"port": 80}, {"port": 81, "protocol": "UDP"}]}}
    before = copy.deepcopy(obj)
    out = schemas.with_defaults(obj, schema)
    assert out == {"spec": {"big": big, "strategy": {"type": "Roll"},
                            "ports": [{"port": 80, "protocol": "TCP"}, {"port": 81, "protocol": "UDP"}]}}
    assert obj == before  # the caller's object is never changed
    assert out["spec"]["big"] is big and out["spec"]["ports"][1] is obj["spec"]["ports"][1]  # untouched parts shared
    nothing = {"spec": {"strategy": {"type": "Recreate"}, "ports": []}}
    assert schemas.with_defaults(nothing, schema) is nothing  # nothing to default: no copy at all


def _every_property_walk(data, schema):
    """Defaulting as the API server describes it, walking every property of the schema (the reference the
    walk of only the defaulting parts is held to)."""
    if not isinstance(schema, dict):
        return data
    if isinstance(data, dict):
        out = dict(data)
        properties = schema.get("properties") or {}
        for key, sub in properties.items():
            if isinstance(sub, dict) and key in data:
                out[key] = _every_property_walk(data[key], sub)
            elif isinstance(sub, dict) and "default" in sub:
                out[key] = _every_property_walk(copy.deepcopy(sub["default"]), sub)
        if isinstance(schema.get("additionalProperties"), dict):
            for key in data:
                if key not in properties:
                    out[key] = _every_property_walk(data[key], schema["additionalProperties"])
        return out
    if isinstance(data, list) and isinstance(schema.get("items"), dict):
        return [_every_property_walk(item, schema["items"]) for item in data]
    return data


def test_defaults_fill_in_what_a_walk_of_every_schema_property_fills_in():
    """Each custom resource we emit, and copies of it with fields removed at random (so that their defaults
    apply), defaulted as the reference walk defaults them; the copies are never changed."""
    filled: dict[str, int] = {}
    for obj, crds in CASES:
        schema = schemas._checker(obj["apiVersion"], obj["kind"], crds).defaults
        if schema is None:
            continue
        rnd = random.Random(obj["kind"])
        paths = [p for p in _paths(obj) if p and isinstance(p[-1], str)]
        for _ in range(PER_KIND):
            trimmed = copy.deepcopy(obj)
            for path in rnd.sample(paths, min(len(paths), rnd.randint(1, 4))):
                parent = trimmed
                for part in path[:-1]:
                    parent = parent.get(part) if isinstance(parent, dict) else \
                        parent[part] if isinstance(parent, list) and isinstance(part, int) and part < len(parent) else None
                if isinstance(parent, dict):
                    parent.pop(path[-1], None)
            before = copy.deepcopy(trimmed)
            out = schemas.with_defaults(trimmed, schema)
            assert out == _every_property_walk(trimmed, schema), obj["kind"]
            assert trimmed == before
            filled[obj["kind"]] = filled.get(obj["kind"], 0) + (out != trimmed)
    # the removed fields had defaults in most kinds: the copies exercise defaulting, not only its absence
    assert sum(1 for count in filled.values() if count) >= len(filled) // 2, filled


def test_defaults_fill_in_each_value_of_a_map_and_each_item_of_a_list():
    """No bundled CRD has a default under additionalProperties yet; a map of objects with defaults is defaulted
    value by value, keys the schema declares are left to their own schema."""
    schema = {"type": "object", "properties": {"fixed": {"type": "object"}}, "additionalProperties": {
        "type": "object", "properties": {"weight": {"type": "integer", "default": 1},
                                         "tags": {"type": "array", "items": {"type": "object", "properties": {
                                             "on": {"type": "boolean", "default": True}}}}}}}
    data = {"fixed": {}, "a": {"weight": 5}, "b": {"tags": [{}, {"on": False}]}}
    out = schemas.with_defaults(data, schema)
    assert out == {"fixed": {}, "a": {"weight": 5}, "b": {"weight": 1, "tags": [{"on": True}, {"on": False}]}}
    assert out == _every_property_walk(data, schema)
    assert out["a"] is data["a"] and data["b"] == {"tags": [{}, {"on": False}]}
