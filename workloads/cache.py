"""ModelCache: weights staged once per cluster on a shared (RWX) volume.

Per matched cluster: a PersistentVolumeClaim on the cluster's RWX StorageClass and a
hydration Job that downloads the HuggingFace repo (at the revision, if given) into it once
(a marker file makes reruns no-ops). The token comes from a Secret on the workload cluster
that the cache stack creates from a Pulumi secret; it is never written into a manifest:
`render` shows that Secret with a marked placeholder instead of the value.
"""

from __future__ import annotations

import shlex

from fleet.names import child_name
from fleet.secrets import SecretRef
from workloads.context import cache_pvc_name
from workloads.versions import HUGGINGFACE_HUB, HYDRATION_IMAGE

MOUNT = "/mnt/artifact"
MARKER = ".modelplane-hydrated"


def token_secret_name(cache) -> str:
    return child_name("modelcache", cache.namespace, cache.name, "auth")


def hydration_script(repo: str, revision: str | None) -> str:
    download = ["hf", "download", repo, "--local-dir", MOUNT]
    if revision:
        download += ["--revision", revision]
    return "\n".join([
        "set -eu",
        f"if [ -f {MOUNT}/{MARKER} ]; then echo 'already hydrated'; exit 0; fi",
        f"pip install --no-cache-dir --quiet {shlex.quote(HUGGINGFACE_HUB)}",
        " ".join(shlex.quote(p) for p in download),
        f"touch {MOUNT}/{MARKER}",
    ])


SECRET_SOURCE_ANNOTATION = "modelplane.ai/secret-source"  # <namespace>/<name> of the user's Secret


def secret_refs(obj: dict) -> dict[str, SecretRef]:
    """The user's Secret keys a rendered placeholder Secret is filled from: {key: SecretRef}."""
    source = (obj["metadata"].get("annotations") or {}).get(SECRET_SOURCE_ANNOTATION)
    if obj["kind"] != "Secret" or not source:
        return {}
    namespace, _, name = source.partition("/")
    return {key: SecretRef(namespace, name, key) for key in obj.get("stringData", {})}


HYDRATED_TTL_SECONDS = 3600  # a finished hydration Job is garbage-collected an hour later


def hydrated_clusters(cache) -> set[str]:
    """Clusters where an observed status (the cache given as `kubectl get -o yaml` shows it) says the weights are
    staged: the hydration Job has done its work there and leaves the stack."""
    status = cache.status if isinstance(cache.status, dict) else {}
    return {str(c.get("name")) for c in status.get("clusters") or []
            if isinstance(c, dict) and c.get("phase") == "Ready"}


def cache_objects(cache, storage_class: str, namespace: str, hydrated: bool = False) -> list[dict]:
    """The cache's objects on one cluster, in `namespace` (the team's workload namespace there); without the
    hydration Job once the cluster's copy is `hydrated`."""
    hf = cache.spec.huggingFace
    pvc = cache_pvc_name(cache.namespace, cache.name)
    labels = {"modelplane.ai/modelcache": cache.name}
    meta = {"namespace": namespace, "labels": labels}
    objects: list[dict] = []
    env = []
    if hf.authSecret:
        secret = token_secret_name(cache)
        objects.append({
            "apiVersion": "v1", "kind": "Secret", "type": "Opaque",
            "metadata": {"name": secret, **meta, "annotations": {
                "modelplane.ai/placeholder": f"value comes from the Secret {cache.namespace}/{hf.authSecret.name}, "
                                            "as a Pulumi secret",
                SECRET_SOURCE_ANNOTATION: f"{cache.namespace}/{hf.authSecret.name}"}},
            "stringData": {hf.authSecret.key: "<secret: set at apply time, never rendered>"},
        })
        env.append({"name": "HF_TOKEN", "valueFrom": {"secretKeyRef": {"name": secret, "key": hf.authSecret.key}}})
    objects.append({
        "apiVersion": "v1", "kind": "PersistentVolumeClaim", "metadata": {"name": pvc, **meta},
        "spec": {"accessModes": ["ReadWriteMany"], "storageClassName": storage_class,
                 "resources": {"requests": {"storage": f"{hf.sizeGiB}Gi"}}},
    })
    if hydrated:
        return objects
    container = {"name": "hydrate", "image": HYDRATION_IMAGE, "command": ["/bin/sh", "-c"],
                 "args": [hydration_script(hf.repo, hf.revision)],
                 "volumeMounts": [{"name": "artifact", "mountPath": MOUNT}]}
    if env:
        container["env"] = env
    objects.append({
        "apiVersion": "batch/v1", "kind": "Job",
        # Hydrating a large model can take hours: the stack does not wait for the Job to finish.
        "metadata": {"name": child_name("modelcache", cache.namespace, cache.name, "hydrate"), **meta,
                     "annotations": {"pulumi.com/skipAwait": "true"}},
        "spec": {"backoffLimit": 3, "ttlSecondsAfterFinished": HYDRATED_TTL_SECONDS,
                 "template": {"metadata": {"labels": labels}, "spec": {
            "restartPolicy": "OnFailure", "containers": [container],
            "volumes": [{"name": "artifact", "persistentVolumeClaim": {"claimName": pvc}}]}}},
    })
    return objects
