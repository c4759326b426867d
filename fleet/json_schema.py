"""A JSON Schema per modelplane.ai kind, generated from the API models, so editors validate manifests.

The files under `schemas/modelplane.ai/v1alpha1/` are this module's output (`modelplane schema --out
schemas`); a test keeps them equal to what the models generate and checks that every example
validates against them. They check shapes, types, enums and bounds; the cross-field rules (and CEL)
are `modelplane validate`'s.

A spec read in either of the reference's shapes (v0.3.1 and v0.5: `oneOf` the two) is also described as one object
with the fields of both, each marked with its shape (`x-modelplane-shape`) and what each shape requires
(`x-modelplane-required`): `modelplane explain`, the portal's OpenAPI and so `kubectl explain` read those properties;
an editor checks the `oneOf`.
"""

from __future__ import annotations

import json
from pathlib import Path

from typing import Any

from fleet.api import API_VERSION, KINDS
from fleet.api.common import SHAPE_KEY

SHAPE = SHAPE_KEY  # on a spec model's schema (json_schema_extra) and on each merged property
REQUIRED_IN = "x-modelplane-required"  # shape -> the fields that shape requires

SCHEMA_DRAFT = "https://json-schema.org/draft/2020-12/schema"


def schema(kind: str) -> dict:
    model = KINDS[kind][0]
    out = model.model_json_schema()
    _merge_shapes(out, out.get("$defs", {}))
    return {"$schema": SCHEMA_DRAFT, "$id": f"https://modelplane.ai/schemas/{API_VERSION}/{kind}.json",
            "title": f"{kind} ({API_VERSION})", **{k: v for k, v in out.items() if k != "title"}}


def _merge_shapes(node: Any, defs: dict) -> None:
    """In place: each `oneOf` of shaped models also gets the properties of all of them (see the module's doc)."""
    if isinstance(node, list):
        for item in node:
            _merge_shapes(item, defs)
        return
    if not isinstance(node, dict):
        return
    options = node.get("oneOf")
    shaped = [defs.get(o.get("$ref", "").rsplit("/", 1)[-1], {}) for o in options or []]
    if shaped and all(SHAPE in d for d in shaped):
        properties: dict[str, Any] = {}
        for d in shaped:
            for name, prop in d.get("properties", {}).items():
                marked = {**prop, SHAPE: d[SHAPE]}
                marked["description"] = f"({d[SHAPE]} shape) {prop.get('description', '')}".strip()
                properties.setdefault(name, marked)
        node.update({"type": "object", "properties": properties, "additionalProperties": False,
                     REQUIRED_IN: {d[SHAPE]: d.get("required", []) for d in shaped},
                     "description": "One of two shapes: " + " or ".join(
                         f"{d[SHAPE]} ({', '.join(d.get('required', [])) or 'no required field'} required)"
                         for d in shaped)})
    for key, value in node.items():
        if key != "oneOf":
            _merge_shapes(value, defs)


def write(folder: Path) -> list[Path]:
    """Write one file per kind under folder/<group>/<version>/; returns the paths."""
    target = folder / API_VERSION
    target.mkdir(parents=True, exist_ok=True)
    paths = []
    for kind in KINDS:
        path = target / f"{kind}.json"
        path.write_text(json.dumps(schema(kind), indent=2, sort_keys=True) + "\n")
        paths.append(path)
    return paths
