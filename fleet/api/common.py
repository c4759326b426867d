"""Pieces shared by every modelplane.ai/v1alpha1 kind.

Field names are the manifest's own camelCase names, on purpose: a pydantic error
location is then exactly the YAML path a user reads, and nothing maps between two
spellings. Models are strict (no "1" for 1, no "yes" for true) and forbid unknown
fields, like `kubectl apply --validate=strict` against the reference's CRDs.
Cross-field rules (the reference's CEL `x-kubernetes-validations`) live next to each
kind as plain functions yielding (path, message), so each is one table row in tests.
"""

from __future__ import annotations

import json
import re
from typing import Annotated, Any, ClassVar, Iterable, Iterator, Literal

from pydantic import BaseModel, ConfigDict, Field
from pydantic_core import PydanticCustomError

GROUP = "modelplane.ai"
API_VERSION = "modelplane.ai/v1alpha1"
RESERVED_PREFIX = "modelplane.ai/"

Rule = Iterator[tuple[tuple, str]]  # what a rule function yields: (field path, message)

# The reference's two shapes of the kinds upstream changed in v0.5.0 (InferenceGateway, ModelService, ModelEndpoint):
# an object is read in the one its keys say (each kind's `shape`); kinds that read the same in both say SHAPE_BOTH.
SHAPE_V031, SHAPE_V05, SHAPE_BOTH = "v0.3.1", "v0.5", "both"


SHAPE_KEY = "x-modelplane-shape"  # in the JSON Schema: the shape a model or field belongs to (fleet/json_schema.py)
MIGRATE_HINT = "`modelplane migrate -f FILE` rewrites v0.3.1 gateways, services and endpoints in the v0.5 shape"


def one_shape(value: Any, v031_keys: Iterable[str], v05_keys: Iterable[str], what: str) -> Any:
    """A spec's keys of both shapes refused, naming each side's (`what`: "an InferenceGateway", "a ModelEndpoint")."""
    if isinstance(value, dict):
        old, new = [k for k in v031_keys if k in value], [k for k in v05_keys if k in value]
        if old and new:
            raise PydanticCustomError("shape", (
                f"has {', '.join(old)} (the v0.3.1 shape) and {', '.join(new)} (the v0.5 shape): {what} is one or the "
                f"other; {MIGRATE_HINT}"))
    return value


def shape_tag(shape: str) -> str:
    """A union member's tag: pydantic puts it in an error's location, which fleet/validate.py drops (it is in
    brackets), so a problem names the field as the manifest spells it."""
    return f"[{shape}]"


class Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", strict=True, validate_default=False)


def Str(min_length: int = 1, max_length: int | None = None, pattern: str | None = None) -> Any:
    """String constraints, used as `Annotated[str, Str(1, 253)]` (a type checker reads the `str`)."""
    return Field(min_length=min_length, max_length=max_length, pattern=pattern)


def Int(ge: int | None = None, le: int | None = None) -> Any:
    """Integer bounds, used as `Annotated[int, Int(1, 64)]`."""
    return Field(ge=ge, le=le)


MAX_ANNOTATIONS = 256 * 1024  # Kubernetes' TotalAnnotationSizeLimitB; managedFields get the same bound
Labels = Annotated[dict[str, Annotated[str, Field(max_length=63)]], Field(max_length=32)]
Annotations = Annotated[dict[str, Annotated[str, Field(max_length=8192)]], Field(max_length=32)]


class ObjectMeta(Strict):
    """Kubernetes ObjectMeta. Server-written fields are accepted so that `kubectl get -o yaml` output loads."""

    name: Annotated[str, Str(1, 253)]
    namespace: Annotated[str, Str(1, 63)] | None = None
    labels: dict[str, str] | None = None
    annotations: dict[str, str] | None = None
    generateName: str | None = None
    uid: str | None = None
    resourceVersion: str | None = None
    generation: int | None = None
    creationTimestamp: Any = None
    deletionTimestamp: Any = None
    deletionGracePeriodSeconds: int | None = None
    finalizers: list[str] | None = None
    ownerReferences: list[dict[str, Any]] | None = None
    managedFields: list[dict[str, Any]] | None = None
    selfLink: str | None = None


class Condition(BaseModel):
    model_config = ConfigDict(extra="allow")
    type: str
    status: Literal["True", "False", "Unknown"]
    reason: str | None = None
    message: str | None = None
    lastTransitionTime: Any = None
    observedGeneration: int | None = None


class MatchLabels(Strict):
    matchLabels: dict[str, str] | None = None


class RequiredMatchLabels(Strict):
    matchLabels: dict[str, str]


class SelectorLabels(Strict):
    """A v0.5 selector: 1 to 16 labels, values of at most 63 characters (the XRDs' bounds)."""

    matchLabels: Annotated[dict[str, Annotated[str, Field(max_length=63)]], Field(min_length=1, max_length=16)]


class LocalRef(Strict):
    name: Annotated[str, Str(1)]


class Resource(Strict):
    """Base of every kind: apiVersion, kind, metadata, spec; status is observed state."""

    apiVersion: Literal["modelplane.ai/v1alpha1"]
    kind: str
    metadata: ObjectMeta

    namespaced: ClassVar[bool] = True
    status: Any = None  # observed state; kinds that read it narrow the type

    @property
    def shape(self) -> str:
        """Which of the reference's shapes this object was read in (SHAPE_V031, SHAPE_V05), or SHAPE_BOTH for a kind
        whose manifests read the same in both."""
        return SHAPE_BOTH

    @property
    def name(self) -> str:
        return self.metadata.name

    @property
    def namespace(self) -> str:
        return (self.metadata.namespace or "default") if self.namespaced else ""

    @property
    def ref(self) -> str:
        """Kind/name, or Kind/namespace/name for namespaced kinds: unique in a fleet."""
        if self.namespaced:
            return f"{self.kind}/{self.namespace}/{self.name}"
        return f"{self.kind}/{self.name}"


# ---- rules shared by several kinds ----------------------------------------------------

_DNS1123_SUBDOMAIN = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$")
_DNS1123_LABEL = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$")
_QUALIFIED_NAME = re.compile(r"^([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9]$")
_LABEL_VALUE = re.compile(r"^(([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9])?$")


def is_dns_label(value: str) -> bool:
    return len(value) <= 63 and bool(_DNS1123_LABEL.match(value))


def metadata_rules(meta: ObjectMeta, namespaced: bool) -> Rule:
    if len(meta.name) > 253 or not _DNS1123_SUBDOMAIN.match(meta.name):
        yield ("metadata", "name"), (
            f"{meta.name!r} is not a valid name: lowercase letters, digits, '-' and '.', "
            "starting and ending with a letter or digit"
        )
    if namespaced and meta.namespace is not None and not is_dns_label(meta.namespace):
        yield ("metadata", "namespace"), f"{meta.namespace!r} is not a valid namespace name (a DNS-1123 label)"
    yield from label_rules(meta.labels or {}, ("metadata", "labels"), reserved=False)
    for field, limit in (("annotations", MAX_ANNOTATIONS), ("managedFields", MAX_ANNOTATIONS)):
        value = getattr(meta, field)
        if value and (size := len(json.dumps(value))) > limit:
            yield ("metadata", field), f"is {size:,} bytes; at most {limit:,} (the Kubernetes API server's limit)"


_SECRET_KEY = re.compile(r"^[-._a-zA-Z0-9]+$")


def secret_reference_rules(name: str, key: str, path: tuple) -> Rule:
    """A reference to a Secret's key, by Kubernetes' own rules for both (a name is a DNS subdomain; a key is
    letters, digits, `-`, `_`, `.`, not `.` or `..`): each is then one path segment in --secrets-dir, one part of
    an environment variable's name, and plain text in an operator Program."""
    if len(name) > 253 or not _DNS1123_SUBDOMAIN.match(name):
        yield path + ("name",), (f"{name[:80]!r} is not a Secret name: lowercase letters, digits, '-' and '.', "
                                 "starting and ending with a letter or digit")
    if len(key) > 253 or not _SECRET_KEY.match(key) or key in (".", ".."):
        yield path + ("key",), (f"{key[:80]!r} is not a Secret key: letters, digits, '-', '_' and '.' (not '.' or "
                                "'..'), at most 253")


def key_problem(key: str) -> str | None:
    """Kubernetes qualified-name rules for a label or annotation key."""
    prefix, sep, name = key.rpartition("/")
    if sep and (not prefix or len(prefix) > 253 or not _DNS1123_SUBDOMAIN.match(prefix)):
        return f"key {key!r} has an invalid prefix (a DNS subdomain of at most 253 characters)"
    if not name or len(name) > 63 or not _QUALIFIED_NAME.match(name):
        return (
            f"key {key!r} is not a qualified name (at most 63 letters, digits, '-', '_' or '.', "
            "starting and ending with a letter or digit)"
        )
    return None


def label_rules(labels: dict[str, str], path: tuple, reserved: bool = True, values: bool = True) -> Rule:
    for key in sorted(labels):
        if reserved and key.startswith(RESERVED_PREFIX):
            yield path + (key,), f"label keys under the reserved prefix {RESERVED_PREFIX!r} are set by modelplane"
            continue
        if problem := key_problem(key):
            yield path + (key,), problem
        elif values and not _LABEL_VALUE.match(labels[key]):
            yield path + (key,), (
                f"value {labels[key]!r} is not a valid label value (at most 63 letters, digits, "
                "'-', '_' or '.', starting and ending with a letter or digit)"
            )


def unique(items: list, key, path: tuple, what: str) -> Rule:
    seen: set = set()
    for index, item in enumerate(items):
        k = key(item)
        if k in seen:
            yield path + (index,), f"duplicate {what} {k if isinstance(k, str) else '/'.join(map(str, k))!r}"
        seen.add(k)
