"""`modelplane migrate`: v0.3.1-shaped InferenceGateways, ModelServices and ModelEndpoints rewritten in the v0.5 shape.

Pure: text in, text out. Each object is migrated as data first (`migrate_object`: the v0.5 object, what changed, and
what the user should know or do), checked against the v0.5 models, then written back into the text by editing only
the lines of the fields that change, so comments and layout elsewhere stay. A document whose fields are not each on
lines of their own (flow style: `spec: {url: ...}`) is written out again whole, and a note says its comments went.
The edited text is parsed back and must read as the migrated data, else the documents are written out whole.

What each kind becomes (the reference's v0.3.1 -> v0.5.0 changes, shared/reference/modelplane-v0.5.md section 5):
- InferenceGateway: `backend` and its block -> `clusterName` (given: the cluster the v0.3.1 front door runs on);
  backend Envoy's `tls` -> `tls.certificateRefs`, its `access.apiKeys` Secret -> `auth` selecting Secrets by a label.
  What the v0.5 gateway has no field for (team limits, JWT, retry and ejection settings) is refused, object by
  object: such a gateway stays v0.3.1.
- ModelService: every entry gets a `name` (from its selector: the deployment's name, else a label's value).
- ModelEndpoint: `url` and `rewritePath` -> `origin` and `api.prefix` (the path a caller's `/v1/...` lands on).
"""

from __future__ import annotations

import copy
import re
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import urlsplit

import yaml

from fleet.api.common import is_dns_label
from fleet.api.gateway import V031_KEYS, V05_KEYS
from fleet.api.service import V031_ENDPOINT_KEYS, V05_ENDPOINT_KEYS
from fleet.loader import Document, parse_text
from fleet.problems import Problem, format_path
from fleet.validate import validate_document

API_VERSION = "modelplane.ai/v1alpha1"
KEYS_LABEL = "modelplane.ai/gateway-keys"  # the label a migrated API-key gateway selects its Secret by
ENVOY_MAPPED = {"tls", "metallb", "access"}  # the v0.3.1 envoy block's fields that have a v0.5 counterpart


@dataclass
class Migrated:
    """One object's migration: the v0.5 data (None: not migrated), what changed, notes, and why it could not be."""

    data: dict | None
    changes: list[tuple[tuple, str]] = field(default_factory=list)  # (field path, what changed)
    notes: list[tuple[tuple, str]] = field(default_factory=list)  # (field path, what the user should know or do)
    refused: list[tuple[tuple, str]] = field(default_factory=list)  # (field path, why it stays v0.3.1)


@dataclass
class FileMigration:
    source: str
    before: str
    after: str
    changes: list[Problem] = field(default_factory=list)  # as located lines: FILE:LINE: Kind/name: path: change
    notes: list[Problem] = field(default_factory=list)  # warnings: what to know or do
    problems: list[Problem] = field(default_factory=list)  # errors: objects left as they were, and why

    @property
    def changed(self) -> bool:
        return self.after != self.before


def needs_migration(data: Any) -> bool:
    """A gateway, service or endpoint written in the v0.3.1 shape (the keys decide, as the API models read them)."""
    if not isinstance(data, dict) or data.get("apiVersion") != API_VERSION or not isinstance(data.get("spec"), dict):
        return False
    spec, kind = data["spec"], data.get("kind")
    if kind == "InferenceGateway":
        return any(k in spec for k in V031_KEYS) and not any(k in spec for k in V05_KEYS)
    if kind == "ModelEndpoint":
        return any(k in spec for k in V031_ENDPOINT_KEYS) and not any(k in spec for k in V05_ENDPOINT_KEYS)
    if kind == "ModelService":
        entries = spec.get("endpoints")
        return isinstance(entries, list) and "timeouts" not in spec and bool(entries) \
            and all(isinstance(e, dict) and "name" not in e for e in entries)
    return False


def migrate_object(data: dict, gateway_cluster: str | None) -> Migrated:
    kind = data.get("kind")
    out = copy.deepcopy(data)
    if kind == "InferenceGateway":
        return _gateway(out, gateway_cluster)
    if kind == "ModelService":
        return _service(out)
    return _endpoint(out)


def _gateway(data: dict, cluster: str | None) -> Migrated:
    spec = data["spec"]
    result = Migrated(data)
    if cluster is None:
        result.refused.append((("spec",), "the v0.5 shape needs spec.clusterName, the InferenceCluster the gateway "
                                          "runs on: give --gateway-cluster NAME"))
        return result
    new: dict[str, Any] = {"clusterName": cluster}
    result.changes.append((("spec", "clusterName"), f"set to {cluster}"))
    backend = spec.get("backend")
    result.changes.append((("spec", "backend"), f"removed ({backend}: the v0.5 gateway is an Envoy AI Gateway)"))
    traefik = spec.get("traefik") if isinstance(spec.get("traefik"), dict) else {}
    envoy = spec.get("envoy") if isinstance(spec.get("envoy"), dict) else {}
    if "traefik" in spec:
        result.changes.append((("spec", "traefik"), "removed"))
    if "envoy" in spec:
        result.changes.append((("spec", "envoy"), "removed"))
    if traefik.get("metallb") or envoy.get("metallb"):
        block = "traefik" if traefik.get("metallb") else "envoy"
        result.notes.append((("spec", block, "metallb"), (
            "the v0.5 gateway takes its address from its cluster's own load balancer: on an Existing cluster, "
            "give MetalLB that address pool there")))
    for name in sorted(set(envoy) - ENVOY_MAPPED):
        if envoy.get(name):
            result.refused.append((("spec", "envoy", name), (
                f"the v0.5 InferenceGateway has no field for {name} (its retries and ejection are fixed: 3 retries, "
                "ejection after 5 consecutive 5xx): keep this gateway in the v0.3.1 shape, or remove envoy." + name)))
    tls = envoy.get("tls")
    if isinstance(tls, dict) and tls.get("certificateSecretName"):
        new["tls"] = {"certificateRefs": [{"name": tls["certificateSecretName"]}]}
        result.changes.append((("spec", "tls"), "from envoy.tls.certificateSecretName"))
    access = envoy.get("access")
    if isinstance(access, dict) and access:
        unmapped = [k for k in access if k != "apiKeys" and access[k]]
        keys = access.get("apiKeys")
        if isinstance(keys, dict) and keys.get("header", "Authorization") != "Authorization":
            unmapped.append("apiKeys.header")
        for name in unmapped:
            result.refused.append((("spec", "envoy", "access", *name.split(".")), (
                f"the v0.5 InferenceGateway has no field for access.{name} (it authenticates callers by API key "
                "and does not authorize or limit them): keep this gateway in the v0.3.1 shape")))
        if isinstance(keys, dict) and keys.get("secretName") and not unmapped:
            new["auth"] = {"method": "APIKey",
                           "apiKey": {"secretSelector": {"matchLabels": {KEYS_LABEL: data["metadata"]["name"]}}}}
            result.changes.append((("spec", "auth"), "from envoy.access.apiKeys"))
            result.notes.append((("spec", "auth"), (
                f"label the Secret modelplane-system/{keys['secretName']} with {KEYS_LABEL}="
                f"{data['metadata']['name']}: the v0.5 gateway selects its callers' Secrets by label (each entry "
                "is still one caller: its name the caller, its value the key)")))
    data["spec"] = new
    result.notes.append((("spec",), (
        "v0.5 callers send the model as <namespace>/<service> to the gateway's /v1 (status.endpoints.openAI), "
        "not to a per-service address")))
    return result


_NOT_NAME = re.compile(r"[^a-z0-9-]+")


def _entry_name(labels: dict, taken: set[str], index: int) -> str:
    """A name for a v0.3.1 entry: its deployment's name, else a label value, made a DNS label; unique."""
    ordered = sorted(labels.items(), key=lambda kv: kv[0] != "modelplane.ai/deployment")
    base = ""
    for _, value in ordered:
        candidate = _NOT_NAME.sub("-", str(value).lower()).strip("-")[:63].strip("-")
        if candidate and is_dns_label(candidate):
            base = candidate
            break
    base = base or f"entry-{index}"
    name, n = base, 2
    while name in taken:
        suffix = f"-{n}"
        name, n = base[:63 - len(suffix)].rstrip("-") + suffix, n + 1
    taken.add(name)
    return name


def _service(data: dict) -> Migrated:
    result = Migrated(data)
    taken: set[str] = set()
    entries = data["spec"]["endpoints"]
    for i, entry in enumerate(entries):
        selector = entry.get("selector")
        found = selector.get("matchLabels") if isinstance(selector, dict) else None
        labels: dict = found if isinstance(found, dict) else {}
        name = _entry_name(labels, taken, i)
        entries[i] = {"name": name, **entry}
        result.changes.append((("spec", "endpoints", i, "name"), f"named {name}"))
        if len(labels) > 16:
            result.refused.append((("spec", "endpoints", i, "selector", "matchLabels"),
                                   "the v0.5 shape selects by at most 16 labels"))
    result.notes.append((("spec",), (
        "v0.5 gateways wait for a request at most 300s and for an endpoint's silence at most 60s unless "
        "spec.timeouts says otherwise; callers name this service as the model, <namespace>/<name>")))
    return result


def _endpoint(data: dict) -> Migrated:
    spec = data["spec"]
    result = Migrated(data)
    url, rewrite = spec.get("url"), spec.get("rewritePath")
    parts = urlsplit(url) if isinstance(url, str) else None
    if parts is None or parts.scheme not in ("http", "https") or not parts.hostname:
        result.refused.append((("spec", "url"), "not an http:// or https:// URL with a host"))
        return result
    origin = f"{parts.scheme}://{parts.netloc}"
    if rewrite is not None:
        # the v0.3.1 route replaced `/<ns>/<service>/` with rewritePath: a caller's `/v1/...` reached `<rewrite>v1/...`
        prefix = str(rewrite).rstrip("/") + "/v1"
        how = f"rewritePath {rewrite!r}: a caller's /v1/... reached {prefix}/..."
    else:
        prefix = parts.path.rstrip("/") or "/v1"
        how = "the url's path (without rewritePath the v0.3.1 route passed /<namespace>/<service>/ through)"
        result.notes.append((("spec", "api", "prefix"), (
            f"rewritePath was unset, so v0.3.1 sent the service's own path to this backend; {prefix} is taken "
            "from the url: check it is where the backend serves its API")))
    data["spec"] = {**{k: v for k, v in spec.items() if k not in V031_ENDPOINT_KEYS},
                    "origin": origin, "api": {"prefix": prefix}}
    result.changes.append((("spec", "origin"), f"{origin} (from url)"))
    result.changes.append((("spec", "api", "prefix"), f"{prefix} (from {how})"))
    result.notes.append((("spec", "model"), (
        "v0.5 callers name the service (<namespace>/<service>) as the model: set spec.model to the name this "
        "backend knows the model by, else that name reaches it")))
    return result


# ---- writing it back into the text -------------------------------------------------------------------

def _indent(line: str) -> int:
    return len(line) - len(line.lstrip(" "))


def _quiet(line: str) -> bool:
    """Blank or a comment alone."""
    stripped = line.strip()
    return not stripped or stripped.startswith("#")


def _key_at(lines: list[str], doc: Document, path: tuple) -> int | None:
    """The 0-based line where the key at `path` starts its own line (after an item's `- ` at most), else None."""
    line = doc.lines.get(path)
    if line is None:
        return None
    text = lines[line - 1].lstrip(" ")
    text = text[2:].lstrip(" ") if text.startswith("- ") else text
    key = str(path[-1])
    return line - 1 if any(text.startswith(f"{q}{key}{q}:") for q in ("", '"', "'")) else None


def _block(lines: list[str], start: int) -> range:
    """The lines of the key on line `start` and of its value: every later line indented deeper (blank lines and
    comments between them too), trailing blank lines and comments excluded."""
    own = _indent(lines[start])
    end = start
    j = start + 1
    while j < len(lines) and not lines[j].startswith(("---", "...")):
        if not _quiet(lines[j]) and _indent(lines[j]) <= own:
            break
        if not _quiet(lines[j]):
            end = j
        j += 1
    return range(start, end + 1)


def _dumped(mapping: dict, indent: int) -> list[str]:
    text = yaml.safe_dump(mapping, sort_keys=False, default_flow_style=False, width=1_000_000)
    return [" " * indent + line for line in text.splitlines()]


class _Edits:
    """Line replacements on one text, applied bottom up so earlier line numbers hold."""

    def __init__(self) -> None:
        self.replace: dict[int, list[str]] = {}  # first line -> its new lines (the old lines: `spans`)
        self.spans: dict[int, int] = {}  # first line -> how many old lines

    def put(self, start: int, count: int, new: list[str]) -> None:
        self.replace[start], self.spans[start] = new, count

    def merge(self, other: _Edits) -> None:
        self.replace.update(other.replace)
        self.spans.update(other.spans)

    def apply(self, lines: list[str]) -> list[str]:
        out = list(lines)
        for start in sorted(self.replace, reverse=True):
            out[start:start + self.spans[start]] = self.replace[start]
        return out


def _edit_gateway(lines: list[str], doc: Document, new_spec: dict, edits: _Edits) -> bool:
    found = [_key_at(lines, doc, ("spec", k)) for k in doc.data["spec"]]  # a v0.3.1 spec: every key goes
    if not found or any(line is None for line in found):
        return False
    blocks = sorted((_block(lines, line) for line in found if line is not None), key=lambda r: r.start)
    first = blocks[0]
    indent = _indent(lines[first.start])
    # every key of the spec is replaced: the new spec's keys where the first was, the others' lines dropped
    edits.put(first.start, len(first), _dumped(new_spec, indent))
    for block in blocks[1:]:
        edits.put(block.start, len(block), [])
    return True


def _edit_service(lines: list[str], doc: Document, new_spec: dict, edits: _Edits) -> bool:
    for i, entry in enumerate(new_spec["endpoints"]):
        first_key = next(iter(doc.data["spec"]["endpoints"][i]), None)
        if first_key is None:
            return False
        key_line = _key_at(lines, doc, ("spec", "endpoints", i, first_key))
        if key_line is None:
            return False
        text = lines[key_line]
        dash = _indent(text)
        name = f"name: {yaml.safe_dump(entry['name']).splitlines()[0]}"
        if text[dash:].startswith("- "):  # `- selector:`: the name takes the dash, the first key moves down
            rest = len(text) - len(text[dash + 1:].lstrip(" "))
            edits.put(key_line, 1, [text[:rest] + name, " " * rest + text[rest:]])
        else:  # `-` alone, the keys below it
            edits.put(key_line, 0, [" " * dash + name])
    return True


def _edit_endpoint(lines: list[str], doc: Document, new_spec: dict, edits: _Edits) -> bool:
    url = _key_at(lines, doc, ("spec", "url"))
    if url is None or len(_block(lines, url)) != 1:
        return False
    indent = _indent(lines[url])
    edits.put(url, 1, _dumped({"origin": new_spec["origin"], "api": new_spec["api"]}, indent))
    if "rewritePath" in doc.data["spec"]:
        rewrite = _key_at(lines, doc, ("spec", "rewritePath"))
        if rewrite is None:
            return False
        block = _block(lines, rewrite)
        edits.put(block.start, len(block), [])
    return True


EDITORS = {"InferenceGateway": _edit_gateway, "ModelService": _edit_service, "ModelEndpoint": _edit_endpoint}


def _whole(lines: list[str], doc: Document, data: dict, edits: _Edits) -> bool:
    """The document written out again: from its first key to the line before the next `---` (or the end)."""
    start = doc.line - 1
    if start < 0 or _indent(lines[start]) != 0 or lines[start].startswith("-"):  # an item of a List: not rewritten
        return False
    end = start + 1
    while end < len(lines) and not lines[end].startswith(("---", "...")):
        end += 1
    while end - 1 > start and _quiet(lines[end - 1]):
        end -= 1
    edits.put(start, end - start, _dumped(data, 0))
    return True


def migrate_text(text: str, source: str, gateway_cluster: str | None = None) -> FileMigration:
    """The text with every v0.3.1 gateway, service and endpoint in it rewritten in the v0.5 shape."""
    result = FileMigration(source, text, text)
    documents, problems = parse_text(text, source)
    if problems:
        result.problems += problems
        return result
    lines = text.split("\n")
    edits = _Edits()
    expected: list[Any] = []
    whole: list[tuple[Document, dict]] = []
    for doc in documents:
        expected.append(doc.data)
        if not needs_migration(doc.data):
            continue
        label = f"{doc.data['kind']}/{(doc.data.get('metadata') or {}).get('name', '?')}"

        def located(path: tuple, message: str, warning: bool = False, doc: Document = doc, label: str = label) -> Problem:
            return Problem(source, doc.line_of(path), label, format_path(path), message, warning)

        _, invalid, _ = validate_document(doc)  # migrated from what validates only: its meaning is known
        if any(not p.warning for p in invalid):
            result.problems.append(located((), "not migrated: it is not valid as it is (`modelplane validate` says "
                                                "why)"))
            continue
        migrated = migrate_object(doc.data, gateway_cluster)
        if not migrated.refused and migrated.data is not None:
            _, invalid, _ = validate_document(Document(source, doc.line, migrated.data))  # its own lines: none
            migrated.refused += [((), f"the migrated object would not be valid: {p.path}: {p.message}")
                                 for p in invalid if not p.warning]
        if migrated.refused or migrated.data is None:
            result.problems += [located(path, f"not migrated: {message}") for path, message in migrated.refused]
            continue
        expected[-1] = migrated.data
        mine = _Edits()  # kept only if the editor could make every edit it needs
        if EDITORS[doc.data["kind"]](lines, doc, migrated.data["spec"], mine):
            edits.merge(mine)
        else:
            whole.append((doc, migrated.data))
        result.changes += [located(path, message) for path, message in migrated.changes]
        result.notes += [located(path, message, warning=True) for path, message in migrated.notes]
    for doc, data in whole:
        label = f"{data['kind']}/{data['metadata'].get('name')}"
        if not _whole(lines, doc, data, edits):
            result.problems.append(Problem(source, doc.line, label, "",
                                           "not migrated: written in flow style inside a List; migrate it by hand"))
            result.changes = [c for c in result.changes if c.object != label]
            result.notes = [n for n in result.notes if n.object != label]
            expected[documents.index(doc)] = doc.data
            continue
        result.notes.append(Problem(source, doc.line, label, "",
                                    "written out again whole (its fields share lines): its comments were not kept",
                                    True))
    after = "\n".join(edits.apply(lines))
    if _reads_as(after, source, expected):
        result.after = after
        return result
    # the line edits did not give the data they should (a layout they did not foresee): every document written out
    edits = _Edits()
    for doc, data in zip(documents, expected):
        if data is doc.data:
            continue
        if not _whole(lines, doc, data, edits):
            result.changes, result.notes = [], []
            result.problems.append(Problem(source, doc.line, "", "", "not migrated: the file's layout could not be "
                                           "rewritten (an object in flow style inside a List); migrate it by hand"))
            return result
        result.notes.append(Problem(source, doc.line, f"{data['kind']}/{data['metadata'].get('name')}", "",
                                    "written out again whole: its comments were not kept", True))
    result.after = "\n".join(edits.apply(lines))
    return result


def _reads_as(text: str, source: str, expected: list[Any]) -> bool:
    documents, problems = parse_text(text, source)
    return not problems and [d.data for d in documents] == expected
