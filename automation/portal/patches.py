"""PATCH bodies applied to an object as stored, and the field managers of server-side apply, as the Kubernetes API
server has them for custom resources (docs/portal.md, "Verbs and watch").

Pure functions on plain JSON objects: the portal calls them inside its write transaction, on the object it read
there, so a patch is never applied to a copy read before another write committed.

Lists are atomic (owned and replaced whole), as a CRD's lists are without `x-kubernetes-list-type` markers.
"""

from __future__ import annotations

import copy
import json
from datetime import datetime, timezone
from types import MappingProxyType
from typing import Any

import jsonpatch  # RFC 6902 with its `test` op and JSON pointers: kept by the python-json-patch project, small, pure
import jsonpointer

from automation.portal.service import MAX_OBJECT, ApiError

MERGE, JSON_PATCH, STRATEGIC, APPLY = ("application/merge-patch+json", "application/json-patch+json",
                                       "application/strategic-merge-patch+json", "application/apply-patch+yaml")
PATCH_TYPES = (JSON_PATCH, MERGE, APPLY)
# server-written metadata: never owned by a manager, never taken from a patch's config
SYSTEM_METADATA = ("name", "namespace", "uid", "resourceVersion", "generation", "creationTimestamp", "managedFields",
                   "selfLink", "deletionTimestamp", "deletionGracePeriodSeconds", "generateName")
Path = tuple[str, ...]
MISSING = object()
# A JSON patch's budget (docs/portal.md, "Threat model"): at most the API server's number of operations, and the values
# its add, replace and copy operations put in, at most one object's worth in all (the API server's json-patch has an
# accumulated copy size limit too). Counted before each operation runs: 20 copies of an object into itself doubled it
# 20 times, to 2.7 GB in 36 s of the one writer's time, before the result's size was ever looked at.
MAX_OPERATIONS = 10_000
MAX_PATCH_GROWTH = MAX_OBJECT


def unsupported(content_type: str) -> ApiError:
    return ApiError(415, "UnsupportedMediaType",
                    f"the body of the request was in an unknown format ({content_type[:80] or 'none'}) - accepted "
                    f"media types include: {', '.join(PATCH_TYPES)}")


def merge_patch(target: Any, patch: Any) -> Any:
    """RFC 7386: null removes, objects merge key by key, anything else replaces (ten lines, as the RFC gives them:
    no library needed)."""
    if not isinstance(patch, dict):
        return copy.deepcopy(patch)
    result = dict(target) if isinstance(target, dict) else {}
    for key, value in patch.items():
        if value is None:
            result.pop(key, None)
        else:
            result[key] = merge_patch(result.get(key), value)
    return result


def json_patch(target: Any, raw: bytes) -> Any:
    """RFC 6902, applied in place to `target` (a copy the caller made). A malformed patch is a 400, one that does not
    apply (a failing `test`, a missing path) a 422, as the API server answers them; one past its budget (above) a 413,
    before the operation that would pass it runs."""
    try:
        operations = json.loads(raw)
    except (ValueError, RecursionError):
        raise ApiError(400, "BadRequest", "the body is not a JSON patch (a JSON list of operations)") from None
    if not isinstance(operations, list) or not all(isinstance(op, dict) for op in operations):
        raise ApiError(400, "BadRequest", "a JSON patch is a list of operation objects")
    if len(operations) > MAX_OPERATIONS:  # the API server's words
        raise ApiError(413, "RequestEntityTooLarge", f"The allowed maximum operations in a JSON patch is "
                                                     f"{MAX_OPERATIONS}, got {len(operations)}")
    try:
        patch = jsonpatch.JsonPatch(operations)  # every operation checked before any runs
        added = 0
        for index, operation in enumerate(patch):
            steps, size = _measured(target, operation)
            added += size
            if added > MAX_PATCH_GROWTH:
                raise ApiError(413, "RequestEntityTooLarge", f"the JSON patch's operation {index} ({operation['op']}) "
                               f"would take what its add, replace and copy operations put in past {MAX_PATCH_GROWTH} "
                               "bytes")
            target = _Steps(steps).apply(target, in_place=True)
        return target
    except jsonpatch.JsonPatchTestFailed as exc:
        raise ApiError(422, "Invalid", f"the JSON patch's test failed: {str(exc)[:200]}") from None
    except jsonpatch.JsonPatchConflict as exc:
        raise ApiError(422, "Invalid", f"the JSON patch does not apply: {str(exc)[:200]}") from None
    except (jsonpatch.JsonPatchException, jsonpatch.JsonPointerException, TypeError, KeyError, IndexError) as exc:
        raise ApiError(400, "BadRequest", f"the JSON patch is malformed: {str(exc)[:200]}") from None


def _measured(target: Any, operation: dict) -> tuple[list[dict], int]:
    """The steps that make the operation, and the bytes (as JSON) it puts into the document: its value, or what it
    copies. A copy is an add of its source's JSON text decoded again (the text is its measure; decoding it, in C, is
    ten times faster than a deep copy), a replace a remove and an add (RFC 6902 defines it so). Measuring a source
    costs no more than copying it would: it lies in a document that is within its budget so far."""
    kind, path = operation["op"], operation["path"]
    if kind in ("add", "replace"):
        size = len(json.dumps(operation.get("value"), separators=(",", ":")))
        if kind == "add" or path == "":
            return [operation], size
        return [{"op": "remove", "path": path}, {"op": "add", "path": path, "value": operation.get("value")}], size
    if kind == "copy":
        source = jsonpointer.resolve_pointer(target, operation["from"], MISSING)
        if source is not MISSING:
            text = json.dumps(source, separators=(",", ":"))
            return [{"op": "add", "path": path, "value": json.loads(text)}], len(text)
    return [operation], 0  # remove, move, test put nothing new in (and a copy from nowhere fails as it runs)


_AddOperation: Any = jsonpatch.AddOperation  # its stubs leave out the _apply and _add it documents for subclasses


class _Add(_AddOperation):
    """An add that inserts its value as it is: the library deep-copies it (up to a second per megabyte of small
    values) lest the document share it with the patch, which here is parsed for this one request and applied once."""

    def _apply(self, obj: Any, journal: Any) -> Any:
        if "value" not in self.operation:
            return super()._apply(obj, journal)  # the library's error
        return self._add(obj, self.operation["value"], journal)


class _Steps(jsonpatch.JsonPatch):
    operations = MappingProxyType({**jsonpatch.JsonPatch.operations, "add": _Add})


# ---- field managers ---------------------------------------------------------------------------------------------

def tracked(body: dict) -> dict:
    """What managers own of an object: everything but its identity, server-written metadata and status."""
    out = {k: v for k, v in body.items() if k not in ("apiVersion", "kind", "status", "metadata")}
    meta = {k: v for k, v in (body.get("metadata") or {}).items() if k not in SYSTEM_METADATA}
    if meta:
        out["metadata"] = meta
    return out


def leaves(obj: dict, prefix: Path = ()) -> set[Path]:
    """The fields an object sets: paths to its scalars, its (atomic) lists and its empty maps."""
    out: set[Path] = set()
    for key, value in obj.items():
        path = (*prefix, key)
        if isinstance(value, dict) and value:
            out |= leaves(value, path)
        else:
            out.add(path)
    return out


def value_at(obj: Any, path: Path) -> Any:
    for key in path:
        if not isinstance(obj, dict) or key not in obj:
            return MISSING
        obj = obj[key]
    return obj


def to_fields(paths: set[Path]) -> dict:
    """Paths as FieldsV1 (`{"f:spec": {"f:replicas": {}}}`)."""
    out: dict = {}
    for path in sorted(paths):
        node = out
        for key in path:
            node = node.setdefault(f"f:{key}", {})
    return out


def from_fields(fields: Any, prefix: Path = ()) -> set[Path]:
    """FieldsV1 as paths; a list's items (`k:`, `v:`, `i:`) or `.` make their list the field, lists being atomic."""
    out: set[Path] = set()
    if not isinstance(fields, dict):
        return out
    for key, child in fields.items():
        if not isinstance(key, str) or not key.startswith("f:"):
            if prefix:
                out.add(prefix)
            continue
        below = from_fields(child, (*prefix, key[2:]))
        out |= below or {(*prefix, key[2:])}
    return out


Managers = dict[tuple[str, str], set[Path]]  # (manager, operation) -> the fields it owns


def managers_of(body: dict | None) -> Managers:
    out: Managers = {}
    entries = ((body or {}).get("metadata") or {}).get("managedFields")
    for entry in entries if isinstance(entries, list) else []:
        if isinstance(entry, dict) and isinstance(entry.get("manager"), str) and entry.get("operation") in (
                "Apply", "Update"):
            out.setdefault((entry["manager"], entry["operation"]), set()).update(from_fields(entry.get("fieldsV1")))
    return out


Trie = dict  # paths as nested maps, key by key; None marks where a path ends


def _trie(*groups: set[Path]) -> Trie:
    root: Trie = {}
    for paths in groups:
        for path in paths:
            node = root
            for key in path:
                node = node.setdefault(key, {})
            node[None] = True
    return root


def _overlaps(path: Path, trie: Trie) -> bool:
    """Whether `path` is a prefix of a path in `trie`, or has one as its prefix: one walk down, so an apply costs its
    paths times their depth, not the paths of one manager times another's (managedFields are the client's to send,
    up to 256 KiB of them)."""
    node = trie
    for key in path:
        if None in node:
            return True
        below = node.get(key)
        if below is None:
            return False
        node = below
    return True


def _entries(managers: Managers, api_version: str, stamped: set[tuple[str, str]], before: list) -> list[dict]:
    """managedFields: each manager's entry, its time kept unless it changed now (`stamped`)."""
    times = {(e.get("manager"), e.get("operation")): e.get("time") for e in before if isinstance(e, dict)}
    moment = datetime.now(timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")
    return [{"manager": manager, "operation": operation, "apiVersion": api_version,
             "time": moment if (manager, operation) in stamped or not times.get((manager, operation))
             else times[(manager, operation)], "fieldsType": "FieldsV1", "fieldsV1": to_fields(fields)}
            for (manager, operation), fields in managers.items() if fields]


def _previous_entries(body: dict | None) -> list:
    entries = ((body or {}).get("metadata") or {}).get("managedFields")
    return entries if isinstance(entries, list) else []


def track_update(existing: dict | None, body: dict, manager: str) -> None:
    """An Update (PUT, POST, a non-apply PATCH, /scale) by `manager`: it owns the fields it changed, which the other
    managers lose. managedFields sent in the body replace the stored ones (`[{}]` clears them), as in Kubernetes."""
    sent = body["metadata"].get("managedFields")
    base = body if isinstance(sent, list) and sent else existing
    managers = managers_of(base)
    old, new = tracked(existing or {}), tracked(body)
    changed = {p for p in leaves(new) if value_at(old, p) != value_at(new, p)}
    for key, fields in managers.items():  # a field whose value changed, or that is gone, is no longer theirs
        managers[key] = {p for p in fields if value_at(old, p) == value_at(new, p) and value_at(new, p) is not MISSING}
    if changed:
        managers.setdefault((manager, "Update"), set()).update(changed)
    body["metadata"]["managedFields"] = _entries(managers, body.get("apiVersion", ""), {(manager, "Update")} if changed
                                                 else set(), _previous_entries(base))


def apply(live: dict | None, config: dict, manager: str, force: bool) -> dict:
    """Server-side apply of `config` by `manager` to the object as stored (None: created by it). The fields it
    applied before and no longer applies are removed unless another manager owns them; a field another manager owns
    whose value would change is a 409 Conflict naming each, unless `force` (then that manager loses it)."""
    base = copy.deepcopy(live) if live is not None else {"apiVersion": config.get("apiVersion"),
                                                          "kind": config.get("kind"), "metadata": {}}
    managers = managers_of(live)
    applied = leaves(tracked(config))
    mine = managers.pop((manager, "Apply"), set())
    kept = _trie(applied, *managers.values())
    result = base
    for path in mine - applied:  # dropped from this manager's config: gone, unless another manager keeps it
        if not _overlaps(path, kept):
            _remove(result, path)
    result = merge_patch(result, _without_nulls(tracked(config)))
    conflicts = sorted({(who, path) for (who, operation), fields in managers.items() for path in fields
                        if value_at(base, path) != value_at(result, path)})
    if conflicts and not force:
        raise ApiError(409, "Conflict", f"Apply failed with {len(conflicts)} conflict{'s' * (len(conflicts) > 1)}: "
                       + "; ".join(f'conflict with "{who}": .{".".join(path)}' for who, path in conflicts[:20]),
                       [{"type": "FieldManagerConflict", "message": f'conflict with "{who}"',
                         "field": "." + ".".join(path)} for who, path in conflicts[:100]])
    for key, fields in managers.items():  # forced, or values equal (then owned together)
        managers[key] = {p for p in fields if value_at(base, p) == value_at(result, p)}
    managers[(manager, "Apply")] = applied
    meta = result.setdefault("metadata", {})
    for field in ("name", "namespace"):
        if (config.get("metadata") or {}).get(field) is not None:
            meta[field] = config["metadata"][field]
    meta["managedFields"] = _entries(managers, config.get("apiVersion") or result.get("apiVersion", ""),
                                     {(manager, "Apply")}, _previous_entries(live))
    if not meta["managedFields"]:  # an empty list means "keep the stored ones" to a later Update
        meta.pop("managedFields")
    return result


def _without_nulls(value: Any) -> Any:
    """An applied config's null is "no opinion", not "remove" (merge_patch would read it as remove)."""
    if isinstance(value, dict):
        return {k: _without_nulls(v) for k, v in value.items() if v is not None}
    return value


def _remove(obj: dict, path: Path) -> None:
    """Remove the field, and the maps it leaves empty (no one set them: they held only it)."""
    child = obj.get(path[0])
    if len(path) == 1:
        obj.pop(path[0], None)
    elif isinstance(child, dict):
        _remove(child, path[1:])
        if not child:
            obj.pop(path[0])
