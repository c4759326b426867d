"""Secret values the fleet's manifests refer to, from where the user keeps them; never printed.

A ModelCache names `huggingFace.authSecret` (name, key) in its namespace; an Existing InferenceCluster
names `existing.secretRef` (name, key), a kubeconfig, in `modelplane-system` as in the reference. The
values come from, first to last:

1. `v1/Secret` manifests given with `-f` next to the fleet (`data` base64, or `stringData`), matched by
   namespace and name (a Secret must name its namespace: it is read only by references from there). A manifest
   may not give a key that 2. or 3. gives too: the fleet's files (a pull request) would silently replace what
   the person running the command gives, such as a cluster's kubeconfig; that is a validation error naming
   the file, the Secret, the key and the other source, never a value;
2. environment variables `MODELPLANE_SECRET_<NAMESPACE>__<NAME>__<KEY>` (upper case, `-` and `.` as `_`,
   the three parts joined by `__`), which is also how a Pulumi ESC environment hands them over:
   `esc run <env> -- modelplane up ...`. The name is one reference's alone: a namespace and a name never hold
   `__` once encoded, so the first two `__` split them (`ml`/`team-hf` is `ML__TEAM_HF__...`, `ml-team`/`hf` is
   `ML_TEAM__HF__...`). A namespace or name with `--`, or a name with `.`, has no such variable;
3. files `<secrets dir>/<namespace>/<name>/<key>` (`--secrets-dir`; the layout of a mounted Secret), each part
   one path segment, and the file inside its namespace's folder once links are followed (a mounted Secret's own
   links are; a link to another namespace's folder is not).

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
CALLER_KEYS_NAMESPACE = "modelplane-system"  # where a v0.5 gateway's auth.apiKey.secretSelector selects (upstream's)


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
    def environment_variable(self) -> str | None:
        """The one variable that holds this reference's value, or None when its namespace or name could not be
        told apart from another's once encoded."""
        if "--" in self.namespace or "--" in self.name or "." in self.name or "." in self.namespace:
            return None
        parts = (self.namespace, self.name, self.key)
        return "MODELPLANE_SECRET_" + "__".join(p.upper().replace("-", "_").replace(".", "_") for p in parts)

    @property
    def ambiguous_variable(self) -> str:
        """The variable read before issue 28: `ml`/`team-hf` and `ml-team`/`hf` shared it. Never read; named in
        messages so that a user who still sets it knows why it is ignored."""
        raw = f"MODELPLANE_SECRET_{self.namespace}_{self.name}_{self.key}"
        return raw.upper().replace("-", "_").replace(".", "_")

    def file_in(self, directory: Path) -> Path | None:
        """The file holding the value under `directory`, or None when a part is not one path segment or the file
        (links followed) is outside its namespace's folder: a link in one namespace's folder to another's (or a
        namespace's folder that is a link) would hand that namespace's secrets to a reference from this one."""
        parts = (self.namespace, self.name, self.key)
        if any(not p or "/" in p or "\\" in p or "\0" in p or p in (".", "..") for p in parts):
            return None
        path = directory.joinpath(*parts)
        try:
            if not path.resolve(strict=True).is_relative_to(directory.resolve(strict=True) / self.namespace):
                return None
        except (OSError, RuntimeError):  # missing, or a loop of links
            return None
        return path


class SecretManifestError(ModelplaneError, ValueError):
    pass


def secret_from_manifest(data: dict) -> tuple[str, str, dict[str, SecretValue]]:
    """(namespace, name, values) of a `v1/Secret` manifest; the message of an error never has a value."""
    meta = data.get("metadata")
    if not isinstance(meta, dict) or not isinstance(meta.get("name"), str) or not meta["name"]:
        raise SecretManifestError("metadata.name: required string field is missing")
    namespace = meta.get("namespace")
    if not isinstance(namespace, str) or not namespace:  # read from any namespace, it would be any team's
        raise SecretManifestError("metadata.namespace: required: a Secret is read only by references from its own "
                                  f"namespace (a cache's, or {CLUSTER_SECRETS_NAMESPACE} for a cluster's kubeconfig)")
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
    manifests: dict[tuple[str, str], dict[str, SecretValue]] = field(default_factory=dict)
    environ: Mapping[str, str] = field(default_factory=lambda: os.environ)
    directory: Path | None = None

    # where each manifest was given ("file:line"): named by messages and `review`, never a value
    manifest_places: dict[tuple[str, str], str] = field(default_factory=dict)
    # each manifest's metadata.labels: what a v0.5 gateway's auth.apiKey.secretSelector selects by (never a value)
    labels: dict[tuple[str, str], dict[str, str]] = field(default_factory=dict)

    def add_manifest(self, namespace: str, name: str, values: dict[str, SecretValue], where: str = "",
                     labels: dict[str, str] | None = None) -> None:
        self.manifests[(namespace, name)] = values
        self.manifest_places[(namespace, name)] = where
        self.labels[(namespace, name)] = {str(k): str(v) for k, v in (labels or {}).items()}

    def selected(self, namespace: str, match_labels: Mapping[str, str]) -> list[str]:
        """The names of the Secret manifests in `namespace` whose labels carry every entry of `match_labels` (a v0.5
        gateway's `auth.apiKey.secretSelector`), sorted. Manifests only: a value from the environment or the secrets
        folder has no labels to select by."""
        return sorted(name for (ns, name), labels in self.labels.items()
                      if ns == namespace and all(labels.get(k) == v for k, v in match_labels.items()))

    def manifest_of(self, ref: SecretRef) -> str | None:
        """The place ("file:line") of the Secret manifest that gives this reference's value, or None."""
        values = self.manifests.get((ref.namespace, ref.name))
        return self.manifest_places.get((ref.namespace, ref.name), "") if values and ref.key in values else None

    def manifest_refs(self) -> list[str]:
        """Every reference a manifest gives (`namespace/name key 'key'`), sorted: what a stack's fingerprint and
        a kept summary's key hold of the manifests (never a value, nor where: files move between checkouts)."""
        return sorted(str(SecretRef(ns, name, key)) for (ns, name), values in self.manifests.items() for key in values)

    def source_of(self, ref: SecretRef) -> str | None:
        """Where `get` reads this reference's value from, named (never the value), or None."""
        place = self.manifest_of(ref)
        return f"Secret manifest {place}" if place is not None else self.given_elsewhere(ref)

    def get(self, ref: SecretRef) -> SecretValue | None:
        """The value, only from the reference's own namespace (a manifest, its variable, its file)."""
        values = self.manifests.get((ref.namespace, ref.name))
        if values is not None and ref.key in values:
            return values[ref.key]
        variable = ref.environment_variable
        if variable is not None and variable in self.environ:
            return SecretValue(self.environ[variable])
        if self.directory is not None:
            path = ref.file_in(self.directory)
            if path is not None and path.is_file():
                return SecretValue(path.read_text().rstrip("\n"))
        return None

    def given_elsewhere(self, ref: SecretRef) -> str | None:
        """Where the environment or the secrets folder gives this reference's value (a name or a path, never the
        value), or None: a Secret manifest giving it too would replace it (fleet/validate.py refuses that)."""
        variable = ref.environment_variable
        if variable is not None and variable in self.environ:
            return f"${variable}"
        path = ref.file_in(self.directory) if self.directory is not None else None
        return f"--secrets-dir {path}" if path is not None and path.is_file() else None

    def where_to_put(self, ref: SecretRef) -> str:
        """How a user gives this value (for messages; names the places, never a value)."""
        places = [f"a v1/Secret {ref.namespace}/{ref.name} with key {ref.key!r} given with -f"]
        if ref.environment_variable is not None:
            places.append(f"${ref.environment_variable}")
        if self.directory is not None:
            places.append(str(self.directory / ref.namespace / ref.name / ref.key))
        text = ", or ".join(places)
        if ref.ambiguous_variable in self.environ:
            text += f" (${ref.ambiguous_variable} is set but no longer read: its name was another namespace's too)"
        return text


def cache_token_ref(cache) -> SecretRef | None:
    auth = cache.spec.huggingFace.authSecret if cache.spec.huggingFace else None
    return SecretRef(cache.namespace, auth.name, auth.key) if auth else None


def kubeconfig_ref(cluster) -> SecretRef | None:
    existing = cluster.spec.cluster.existing
    if existing is None:
        return None
    return SecretRef(CLUSTER_SECRETS_NAMESPACE, existing.secretRef.name, existing.secretRef.key)
