"""`modelplane explain KIND[.field.path]`: what a field is, from the API models (as `kubectl explain` does).

Walks the kind's JSON Schema (fleet/json_schema.py) along the path and describes the field reached:
its type, default, allowed values and bounds, and its sub-fields with theirs.
"""

from __future__ import annotations

from typing import Any

from fleet.api import KINDS
from fleet.errors import ModelplaneError
from fleet.json_schema import REQUIRED_IN, SHAPE, schema


class ExplainError(ModelplaneError, ValueError):
    pass


def _resolve(node: dict, defs: dict) -> dict:
    """Follow $ref, and unwrap `X | None` (anyOf with null) to X."""
    while True:
        if "$ref" in node:
            node = {**defs[node["$ref"].rsplit("/", 1)[-1]], **{k: v for k, v in node.items() if k != "$ref"}}
            continue
        options = [o for o in node.get("anyOf", []) if o.get("type") != "null"]
        if len(options) == 1 and "anyOf" in node:
            node = {**options[0], **{k: v for k, v in node.items() if k != "anyOf"}}
            continue
        return node


def _type(node: dict, defs: dict) -> str:
    node = _resolve(node, defs)
    if "const" in node:
        return f"string ({node['const']!r})"
    if "enum" in node:
        return "one of " + ", ".join(repr(v) for v in node["enum"])
    kind = node.get("type")
    if kind == "array":
        return f"[]{_type(node.get('items', {}), defs)}"
    if kind == "object" and "properties" in node:
        return "object"
    if kind == "object":
        return "map of " + _type(node.get("additionalProperties") or {"type": "any"}, defs)
    if "anyOf" in node:
        return " or ".join(_type(o, defs) for o in node["anyOf"] if o.get("type") != "null")
    return str(kind or "any")


def _facts(node: dict, defs: dict) -> str:
    node = _resolve(node, defs)
    parts = []
    for key, word in (("minimum", ">="), ("maximum", "<="), ("minLength", "length >="), ("maxLength", "length <="),
                      ("minItems", "items >="), ("maxItems", "items <="), ("pattern", "pattern")):
        if key in node:
            parts.append(f"{word} {node[key]}")
    if "default" in node and node["default"] is not None:
        parts.append(f"default {node['default']!r}")
    return f" ({', '.join(parts)})" if parts else ""


def _marks(name: str, child: dict, parent: dict) -> str:
    """` (required)`, or for a field of one of two shapes ` (v0.5 shape, required there)`."""
    if name in parent.get("required", []):
        return " (required)"
    shape = child.get(SHAPE)
    if shape is None:
        return ""
    required = name in parent.get(REQUIRED_IN, {}).get(shape, [])
    return f" ({shape} shape{', required there' if required else ''})"


def explain(target: str) -> str:
    kind, _, path = target.partition(".")
    if kind not in KINDS:
        from fleet.validate import did_you_mean

        raise ExplainError(f"unknown kind {kind!r}{did_you_mean(kind, KINDS)} (known: {', '.join(KINDS)})")
    root = schema(kind)
    defs: dict[str, Any] = root.get("$defs", {})
    node, walked = _resolve(root, defs), [kind]
    mark = ""
    for step in [s for s in path.split(".") if s]:
        if node.get("type") == "array":
            node = _resolve(node.get("items", {}), defs)
        properties = node.get("properties") or {}
        if step not in properties:
            from fleet.validate import did_you_mean

            raise ExplainError(f"{'.'.join(walked)} has no field {step!r}{did_you_mean(step, properties)}"
                               + (f" (fields: {', '.join(properties)})" if properties else ""))
        mark = _marks(step, properties[step], node)
        node, walked = _resolve(properties[step], defs), walked + [step]
    lines = [f"KIND:     {kind}", "VERSION:  modelplane.ai/v1alpha1", ""]
    if path:
        lines += [f"FIELD:    {path} <{_type(node, defs)}>{mark}{_facts(node, defs)}", ""]
        if node.get(REQUIRED_IN):
            lines += [f"          {node.get('description', '')}", ""]
    if node.get("type") == "array":
        node = _resolve(node.get("items", {}), defs)
    properties = node.get("properties") or {}
    if properties:
        lines.append("FIELDS:")
        for name, child in properties.items():
            lines.append(f"  {name} <{_type(child, defs)}>{_marks(name, child, node)}{_facts(child, defs)}")
    return "\n".join(lines) + "\n"
