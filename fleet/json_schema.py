"""A JSON Schema per modelplane.ai kind, generated from the API models, so editors validate manifests.

The files under `schemas/modelplane.ai/v1alpha1/` are this module's output (`modelplane schema --out
schemas`); a test keeps them equal to what the models generate and checks that every example
validates against them. They check shapes, types, enums and bounds; the cross-field rules (and CEL)
are `modelplane validate`'s.
"""

from __future__ import annotations

import json
from pathlib import Path

from fleet.api import API_VERSION, KINDS

SCHEMA_DRAFT = "https://json-schema.org/draft/2020-12/schema"


def schema(kind: str) -> dict:
    model = KINDS[kind][0]
    out = model.model_json_schema()
    return {"$schema": SCHEMA_DRAFT, "$id": f"https://modelplane.ai/schemas/{API_VERSION}/{kind}.json",
            "title": f"{kind} ({API_VERSION})", **{k: v for k, v in out.items() if k != "title"}}


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
