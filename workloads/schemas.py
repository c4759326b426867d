"""Check every object against the schema its cluster will enforce, before anything is applied.

Custom resources: the bundled CRDs (workloads/crds/), converted from OpenAPI v3 to JSON
Schema the way the API server reads them:
- defaults are applied first (the server defaults, then validates: a `required` field with
  a default may be omitted);
- unknown fields are rejected, as `kubectl apply --validate=strict` does, except inside
  objects marked `x-kubernetes-preserve-unknown-fields` or that declare their own
  `additionalProperties` (maps);
- `x-kubernetes-int-or-string` accepts an integer or a string;
- `nullable` admits null;
- an object's top-level `metadata` is checked as ObjectMeta (string labels and annotations).
CEL `x-kubernetes-validations` on the object's root (e.g. the operator's "Stack name must be no more
than 42 characters") are evaluated with cel-python; rules on nested fields are not (none of the bundled
CRDs' root rules needs a Kubernetes-only CEL function), and admission webhooks are not run.

Core kinds: the JSON schemas shipped by the kubernetes-validate package (strict, read as its data), with one
validator built per kind and reused.

Speed: each kind's schema is also compiled by jsonschema-rs (Rust), which answers first; jsonschema
re-checks only what it refuses, for the verdict and the messages (about 8x faster at fleet scale).
"""

from __future__ import annotations

import copy
import hashlib
import importlib.util
import json
import re
from dataclasses import dataclass
from functools import cached_property, lru_cache
from pathlib import Path
from typing import Any

import yaml

from fleet.disk_cache import DiskCache

CRD_DIR = Path(__file__).parent / "crds"
KUBERNETES_VERSION = "1.35"
_Loader = getattr(yaml, "CSafeLoader", yaml.SafeLoader)

OBJECT_META = {
    "type": "object",
    "required": ["name"],
    "properties": {
        "name": {"type": "string", "minLength": 1, "maxLength": 253},
        "namespace": {"type": "string", "maxLength": 63},
        "labels": {"type": "object", "additionalProperties": {"type": "string", "maxLength": 63}},
        "annotations": {"type": "object", "additionalProperties": {"type": "string"}},
        "generateName": {"type": "string"},
        "finalizers": {"type": "array", "items": {"type": "string"}},
        "ownerReferences": {"type": "array", "items": {"type": "object"}},
    },
    "additionalProperties": False,
}


def to_json_schema(node, top: bool = True):
    """Convert one OpenAPI v3 schema node (recursively) to a strict JSON Schema."""
    if isinstance(node, list):
        return [to_json_schema(n, False) for n in node]
    if not isinstance(node, dict):
        return node
    out: dict[str, Any] = {}
    for key, value in node.items():
        if key in ("properties", "patternProperties"):
            out[key] = {k: to_json_schema(v, False) for k, v in value.items()}
        elif key in ("items", "additionalProperties", "not") and isinstance(value, dict):
            out[key] = to_json_schema(value, False)
        elif key in ("allOf", "anyOf", "oneOf"):
            out[key] = [to_json_schema(v, False) for v in value]
        elif key.startswith("x-kubernetes-") or key in ("description", "nullable", "format", "example"):
            continue
        else:
            out[key] = value
    if node.get("x-kubernetes-int-or-string") and "anyOf" not in out:
        out.pop("type", None)
        out["anyOf"] = [{"type": "integer"}, {"type": "string"}]
    if node.get("nullable") and isinstance(out.get("type"), str):
        out["type"] = [out["type"], "null"]
    if (out.get("type") == "object" and "properties" in out and "additionalProperties" not in out
            and not node.get("x-kubernetes-preserve-unknown-fields")):
        out["additionalProperties"] = False
    if top:
        out.setdefault("properties", {})["metadata"] = OBJECT_META
    return out


def with_defaults(data, schema):
    """`data` with the schema's defaults filled in, as the API server does before validating. Copy on write: the
    parts no default touches are shared with `data`, which is never changed (an object with nothing to default,
    however large, costs a walk of the parts of the schema that hold defaults, not a copy)."""
    found = _DEFAULTS.get(id(schema))
    if found is None or found[0] is not schema:
        found = _DEFAULTS[id(schema)] = (schema, _defaults_in(schema))  # the schema is kept: its id stays its own
    return data if found[1] is None else _fill(data, found[1])


_ABSENT = object()
_IMMUTABLE = (str, int, float, bool, type(None))


@dataclass(frozen=True)
class _Defaults:
    """The parts of a schema node that default something, at any depth (a CRD's schema has hundreds of properties
    and a few defaults: walking only these was most of checking an HTTPRoute)."""
    properties: tuple[tuple[str, Any, "_Defaults | None"], ...]  # (key, its default or _ABSENT, what it holds)
    declared: frozenset[str]  # every property the node declares: the keys `additional` does not cover
    additional: "_Defaults | None"  # additionalProperties' defaults, for each undeclared key
    items: "_Defaults | None"  # a list's items' defaults


_DEFAULTS: dict[int, tuple[dict, _Defaults | None]] = {}


def _defaults_in(schema) -> _Defaults | None:
    """What `schema` defaults, or None when nothing beneath it has a default."""
    if not isinstance(schema, dict):
        return None
    properties = []
    declared = schema.get("properties") or {}
    for key, sub in declared.items():
        if isinstance(sub, dict) and ((inner := _defaults_in(sub)) is not None or "default" in sub):
            properties.append((key, sub.get("default", _ABSENT), inner))
    additional, items = _defaults_in(schema.get("additionalProperties")), _defaults_in(schema.get("items"))
    if not properties and additional is None and items is None:
        return None
    return _Defaults(tuple(properties), frozenset(declared), additional, items)


def _fill(data, defaults: _Defaults):
    if isinstance(data, dict):
        out = None
        for key, default, inner in defaults.properties:
            if key in data:
                if inner is None or (value := _fill(data[key], inner)) is data[key]:
                    continue
            elif default is _ABSENT:
                continue
            elif type(default) in _IMMUTABLE:  # most defaults ("TCP", 1, true): nothing to copy
                value = default if inner is None else _fill(default, inner)
            else:
                value = copy.deepcopy(default) if inner is None else _fill(copy.deepcopy(default), inner)
            out = dict(data) if out is None else out
            out[key] = value
        if (extra := defaults.additional) is not None:
            for key, item in data.items():
                if key not in defaults.declared and (value := _fill(item, extra)) is not item:
                    out = dict(data) if out is None else out
                    out[key] = value
        return data if out is None else out
    if isinstance(data, list) and defaults.items is not None:
        items = [_fill(item, defaults.items) for item in data]
        return data if all(a is b for a, b in zip(items, data)) else items
    return data


@lru_cache(maxsize=None)
def _served(directory: Path, group: str) -> dict[tuple[str, str], dict]:
    """(apiVersion, kind) -> the OpenAPI v3 schema of every served version of the CRDs of API `group` in
    `directory`. CRD files are named `<group>_<plural>.yaml`, as upstream ships them (a test holds every file to
    it), so only the group's files are parsed: the folder is megabytes of YAML, and every render worker checks."""
    out: dict[tuple[str, str], dict] = {}
    if not group:
        return out
    for path in sorted(directory.rglob(f"{group}_*.yaml")):
        for crd in crds_in(path):
            if crd.get("kind") != "CustomResourceDefinition" or crd["spec"]["group"] != group:
                continue
            kind = crd["spec"]["names"]["kind"]
            for version in crd["spec"]["versions"]:
                if version.get("served", True):
                    out[(f"{group}/{version['name']}", kind)] = version["schema"]["openAPIV3Schema"]
    return out


CRD_CACHE_FORMAT = "1"


def crds_in(path: Path, cache: Path | None = None) -> list[dict]:
    """The documents of one CRD file. YAML is parsed once per content (LeaderWorkerSet's CRD alone is 1.3 MB, 0.4 s
    to parse), then read back as JSON, ten times faster, by every render writer and portal process: kept in the
    cache folder (`cache`, default fleet/disk_cache.py's) under the hash of the file's bytes."""
    raw = path.read_bytes()
    store = DiskCache(cache)
    entry = f"crds/{hashlib.sha256(CRD_CACHE_FORMAT.encode() + raw).hexdigest()}.json"
    kept = store.read(entry)  # authenticated: a schema edited in the cache would let invalid objects through
    if kept is not None:
        try:
            documents = json.loads(kept)
            if isinstance(documents, list) and all(isinstance(d, dict) for d in documents):
                return documents
        except ValueError:  # another format: parse the YAML
            pass
    documents = [d for d in yaml.load_all(raw.decode("utf-8"), Loader=_Loader) if d]
    try:
        text = json.dumps(documents)
    except (TypeError, ValueError):  # a value JSON cannot hold: never cached
        return documents
    if json.loads(text) == documents:  # only what reads back the same (JSON turns non-string keys into strings)
        store.write(entry, text)
    return documents


@lru_cache(maxsize=None)
def stored_version(group: str, kind: str, directory: Path = CRD_DIR) -> str | None:
    """The apiVersion a bundled CRD stores (`group/version`), or None when no bundled file defines the kind: what a
    controller that only watches the kind (the llm-d endpoint picker, Traefik's Gateway provider) is built for."""
    for path in sorted(directory.rglob(f"{group}_*.yaml")):
        for crd in crds_in(path):
            if crd.get("kind") == "CustomResourceDefinition" and crd["spec"]["group"] == group \
                    and crd["spec"]["names"]["kind"] == kind:
                return next((f"{group}/{v['name']}" for v in crd["spec"]["versions"] if v.get("storage")), None)
    return None


def _served_schema(directory: Path, api_version: str, kind: str) -> dict | None:
    group = api_version.rpartition("/")[0]
    return _served(directory, group).get((api_version, kind))


def _root_rules(directory: Path, api_version: str, kind: str) -> list[tuple[str, str]]:
    """The CEL rules on the object's root: (rule, message)."""
    schema = _served_schema(directory, api_version, kind) or {}
    return [(r["rule"], r.get("message") or f"failed rule: {r['rule']}")
            for r in schema.get("x-kubernetes-validations", [])]


@lru_cache(maxsize=None)
def _cel_program(rule: str):
    import celpy

    env = celpy.Environment()
    return env.program(env.compile(rule))


_SELF = re.compile(r"\bself\b")
_SELF_FIELD = re.compile(r"\bself\.([A-Za-z_][A-Za-z0-9_]*)\b(?!\s*\()")


@lru_cache(maxsize=None)
def _fields_read(rules: tuple[str, ...]) -> frozenset[str] | None:
    """The top-level fields the rules read, when they read `self` only as `self.<field>` (not a macro such as
    `self.all(...)`, not `self` whole); else None. Only those fields need turning into CEL values: the operator's
    Stack rule reads `self.metadata.name`, and converting each whole Stack was most of checking it."""
    fields: set[str] = set()
    for rule in rules:
        found = _SELF_FIELD.findall(rule)
        if len(found) != len(_SELF.findall(rule)):
            return None
        fields.update(found)
    return frozenset(fields)


def _rule_failures(data: dict, rules: list[tuple[str, str]]) -> list[str]:
    """The messages of the root rules `data` breaks, as the API server reports them."""
    import celpy
    import celpy.celtypes

    if not rules:
        return []
    fields = _fields_read(tuple(rule for rule, _ in rules))
    activation = {"self": celpy.json_to_cel(data if fields is None else {k: v for k, v in data.items() if k in fields})}
    out = []
    for rule, message in rules:
        try:
            ok = _cel_program(rule).evaluate(activation)
        except Exception as exc:  # an error evaluating a rule is a rejection at the API server too
            out.append(f"(object): {message} ({type(exc).__name__})")
            continue
        if not (isinstance(ok, celpy.celtypes.BoolType) and bool(ok)):  # a non-bool result is a rejection too
            out.append(f"(object): {message}")
    return out


def _crd_schema(api_version: str, kind: str, directory: Path = CRD_DIR) -> dict | None:
    served = _served_schema(directory, api_version, kind)
    return None if served is None else to_json_schema(served)


@lru_cache(maxsize=1)
def _core_folder() -> Path:
    """kubernetes-validate's strict schemas of the newest Kubernetes release up to ours. They are read as the
    package's data: importing its module imports jsonschema (60 ms in every process that checks an object),
    which a check of valid objects never needs."""
    spec = importlib.util.find_spec("kubernetes_validate")
    assert spec is not None and spec.submodule_search_locations, "kubernetes-validate is a dependency"
    return newest_strict(Path(next(iter(spec.submodule_search_locations))) / "kubernetes-json-schema",
                         KUBERNETES_VERSION)


def newest_strict(root: Path, ours: str) -> Path:
    """The folder of strict schemas (`v<major>.<minor>.<patch>-local-strict`) of the newest release whose minor
    version is at most `ours` (`1.35`), versions compared as numbers."""
    limit = tuple(map(int, ours.split(".")))
    releases = [(version, path) for path in root.iterdir()
                if (match := re.fullmatch(r"v(\d+)\.(\d+)\.(\d+)-local-strict", path.name))
                and (version := (int(match[1]), int(match[2]), int(match[3])))[:2] <= limit]
    if not releases:
        raise FileNotFoundError(f"no strict schemas for Kubernetes {ours} or older in {root}")
    return max(releases)[1]


def _core_schema(api_version: str, kind: str) -> dict | None:
    group_version = re.sub(r"^([^./]*)(?:\.[^/]*)?/", r"\1-", api_version)  # rbac.authorization.k8s.io/v1 -> rbac-v1
    try:
        return json.loads((_core_folder() / f"{kind.lower()}-{group_version}.json").read_bytes())
    except FileNotFoundError:
        return None


def _path(error) -> str:
    out = ""
    for part in error.absolute_path:
        out += f"[{part}]" if isinstance(part, int) else (("." if out else "") + str(part))
    return out


def _message(error) -> str:
    message = " ".join(str(error.message).split())
    return message if len(message) <= 240 else message[:237] + "..."


@dataclass(frozen=True)
class _Checker:
    schema: dict
    fast: Any  # jsonschema-rs's (compiled, in Rust), asked first; None where it cannot compile the schema
    defaults: dict | None  # a CRD's schema, whose defaults are applied before validating; None for a core kind
    rules: tuple[tuple[str, str], ...]

    @cached_property
    def exact(self):
        """jsonschema's validator, for the verdict and the messages: built when first asked (jsonschema takes 40 ms
        to import, and a render of valid objects never asks it)."""
        import jsonschema
        from referencing import Registry, Resource

        if self.defaults is not None:
            return jsonschema.Draft202012Validator(self.schema,
                                                   format_checker=jsonschema.Draft202012Validator.FORMAT_CHECKER)
        registry = Resource.from_contents(_core_definitions()) @ (Resource.from_contents(self.schema) @ Registry())
        return jsonschema.Draft202012Validator(self.schema, registry=registry)


def _compiled(schema: dict, registry=None):
    """The schema compiled by jsonschema-rs, about 8x faster than jsonschema on valid objects; None if it refuses it
    (then jsonschema alone checks that kind)."""
    import jsonschema_rs

    try:
        return jsonschema_rs.Draft202012Validator(schema, registry=registry) if registry is not None else \
            jsonschema_rs.Draft202012Validator(schema)
    except (ValueError, jsonschema_rs.ValidationError, jsonschema_rs.ReferencingError):
        return None


@lru_cache(maxsize=1)
def _core_definitions() -> dict:
    """Kubernetes' shared definitions (1.5 MB of JSON): decoded once, not once per kind checked."""
    return json.loads((_core_folder() / "_definitions.json").read_bytes())


@lru_cache(maxsize=1)
def _core_registry():
    import jsonschema_rs

    definitions = _core_definitions()
    return jsonschema_rs.Registry([(definitions["$id"], definitions)])


@lru_cache(maxsize=None)
def _checker(api_version: str, kind: str, crds: Path) -> _Checker | None:
    schema = _crd_schema(api_version, kind, crds)
    if schema is not None:
        return _Checker(schema, _compiled(schema), schema, tuple(_root_rules(crds, api_version, kind)))
    core = _core_schema(api_version, kind)
    if core is None:
        return None
    return _Checker(core, _compiled(core, _core_registry()), None, ())


def check(obj: dict, crds: Path = CRD_DIR) -> list[str]:
    """Problems with one object as 'field.path: message' lines; empty when the object is valid. `crds`: the folder
    of the CRDs custom resources are checked against (the workload clusters' by default).

    The compiled validator answers first; only an object it refuses is checked again by jsonschema, whose verdict
    and messages count (tests hold the two to the same verdicts, so the fast path never lets through what
    jsonschema would refuse)."""
    api_version, kind = obj.get("apiVersion", ""), obj.get("kind", "")
    checker = _checker(api_version, kind, crds)
    if checker is None:
        return [f"apiVersion: no schema known for {api_version} {kind}"]
    data = obj if checker.defaults is None else with_defaults(obj, checker.defaults)
    if checker.fast is not None and checker.fast.is_valid(data):
        found: list[str] = []
    else:
        errors = sorted(checker.exact.iter_errors(data), key=lambda e: (list(map(str, e.absolute_path)), e.message))
        found = [f"{_path(e) or '(object)'}: {_message(e)}" for e in errors]
    return found + (_rule_failures(data, list(checker.rules)) if checker.rules and not found else [])
