"""Secret values the fleet's manifests refer to, from where the user keeps them; never printed.

A ModelCache names `huggingFace.authSecret` (name, key) in its namespace; an Existing InferenceCluster
names `existing.secretRef` (name, key), a kubeconfig, in `modelplane-system` as in the reference. The
values come from, first to last:

1. `v1/Secret` manifests given with `-f` next to the fleet (`data` base64, or `stringData`), matched by
   namespace and name; a Secret written without a namespace matches a reference from any namespace;
2. environment variables `MODELPLANE_SECRET_<NAMESPACE>_<NAME>_<KEY>` (upper case, `-` and `.` as `_`),
   which is also how a Pulumi ESC environment hands them over: `esc run <env> -- modelplane up ...`;
3. files `<secrets dir>/<namespace>/<name>/<key>` (`--secrets-dir`; the layout of a mounted Secret).

A `SecretValue` never shows its text in `repr`, `str` or an f-string; `reveal()` is the one way out, used
only where the value goes into a Pulumi secret.
"""

from __future__ import annotations

import base64
import binascii
import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Mapping

from fleet.errors import ModelplaneError

CLUSTER_SECRETS_NAMESPACE = "modelplane-system"  # where the reference keeps kubeconfig Secrets


class SecretValue:
    __slots__ = ("_text",)

    def __init__(self, text: str):
        self._text = text

    def reveal(self) -> str:
        return self._text

    def __repr__(self) -> str:
        return "SecretValue(<hidden>)"

    __str__ = __repr__

    def __format__(self, spec: str) -> str:
        return "<hidden>"

    def __eq__(self, other: object) -> bool:
        return isinstance(other, SecretValue) and other._text == self._text

    def __hash__(self) -> int:
        return hash(self._text)


@dataclass(frozen=True)
class SecretRef:
    namespace: str
    name: str
    key: str

    def __str__(self) -> str:
        return f"{self.namespace}/{self.name} key {self.key!r}"

    @property
    def environment_variable(self) -> str:
        raw = f"MODELPLANE_SECRET_{self.namespace}_{self.name}_{self.key}"
        return raw.upper().replace("-", "_").replace(".", "_")


class SecretManifestError(ModelplaneError, ValueError):
    pass


def secret_from_manifest(data: dict) -> tuple[str | None, str, dict[str, SecretValue]]:
    """(namespace or None, name, values) of a `v1/Secret` manifest; the message of an error never has a value."""
    meta = data.get("metadata")
    if not isinstance(meta, dict) or not isinstance(meta.get("name"), str) or not meta["name"]:
        raise SecretManifestError("metadata.name: required string field is missing")
    namespace = meta.get("namespace")
    if namespace is not None and not isinstance(namespace, str):
        raise SecretManifestError("metadata.namespace: must be a string")
    values: dict[str, SecretValue] = {}
    for field_name in ("data", "stringData"):
        block = data.get(field_name)
        if block is None:
            continue
        if not isinstance(block, dict):
            raise SecretManifestError(f"{field_name}: must be a mapping of keys to values")
        for key, value in block.items():
            if not isinstance(value, str):
                raise SecretManifestError(f"{field_name}.{key}: must be a string")
            if field_name == "data":
                try:
                    value = base64.b64decode(value, validate=True).decode()
                except (binascii.Error, UnicodeDecodeError):
                    raise SecretManifestError(f"data.{key}: is not base64 of UTF-8 text") from None
            values[str(key)] = SecretValue(value)  # stringData wins over data, as the API server merges them
    return namespace, meta["name"], values


@dataclass
class SecretStore:
    manifests: dict[tuple[str | None, str], dict[str, SecretValue]] = field(default_factory=dict)
    environ: Mapping[str, str] = field(default_factory=lambda: os.environ)
    directory: Path | None = None

    def add_manifest(self, namespace: str | None, name: str, values: dict[str, SecretValue]) -> None:
        self.manifests[(namespace, name)] = values

    def get(self, ref: SecretRef) -> SecretValue | None:
        for key in ((ref.namespace, ref.name), (None, ref.name)):
            values = self.manifests.get(key)
            if values is not None and ref.key in values:
                return values[ref.key]
        if ref.environment_variable in self.environ:
            return SecretValue(self.environ[ref.environment_variable])
        if self.directory is not None:
            path = self.directory / ref.namespace / ref.name / ref.key
            if path.is_file():
                return SecretValue(path.read_text().rstrip("\n"))
        return None

    def where_to_put(self, ref: SecretRef) -> str:
        """How a user gives this value (for messages; names the places, never a value)."""
        places = [f"a v1/Secret {ref.namespace}/{ref.name} with key {ref.key!r} given with -f",
                  f"${ref.environment_variable}"]
        if self.directory is not None:
            places.append(str(self.directory / ref.namespace / ref.name / ref.key))
        return ", or ".join(places)


def cache_token_ref(cache) -> SecretRef | None:
    auth = cache.spec.huggingFace.authSecret if cache.spec.huggingFace else None
    return SecretRef(cache.namespace, auth.name, auth.key) if auth else None


def kubeconfig_ref(cluster) -> SecretRef | None:
    existing = cluster.spec.cluster.existing
    if existing is None:
        return None
    return SecretRef(CLUSTER_SECRETS_NAMESPACE, existing.secretRef.name, existing.secretRef.key)
