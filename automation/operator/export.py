"""The fleet's stacks as Pulumi Kubernetes Operator (PKO v2) objects: `modelplane operator export`.

Each desired stack becomes what the operator needs to run it in the control-plane cluster:

* platform and gateway stacks: a `pulumi.com/v1 Stack` whose source is this project's git repository
  (its root `Pulumi.yaml`, project `modelplane`), with the stack's config inline (`modelplane:fleet`, the
  fleet's path in that repository, and `modelplane:cluster` or `modelplane:gatewayOnly`);
* team, cache, model, endpoints and service stacks: a `pulumi.com/v1 Program` (Pulumi YAML) holding exactly
  the objects `render` writes for the stack, applied per target cluster with a Kubernetes provider built from
  that cluster's platform stack's `kubeconfig` output (a `pulumi:pulumi:StackReference`), and a Stack that
  runs it (`programRef`). A placeholder Secret (a cache's token) becomes a Kubernetes Secret resource whose
  value comes from a secret config key the Stack fills from a Kubernetes Secret (`secretsRef`): no value
  is ever written.

`prerequisites` are the planner's dependencies; workload stacks are destroyed with their Stack object
(`destroyOnFinalize`), platform stacks never are (clusters are destroyed only on purpose). Credentials
reach every workspace from the Secrets named with `--secret` (`envFrom`), never inline. Every workspace installs
exactly the package versions this machine runs: a constraints file in a ConfigMap, mounted and named by
PIP_CONSTRAINT (automation/operator/constraints.py). The same input gives byte-identical files, and every object is checked
against the operator's own CRDs (v2.9.0) before it is written (automation/operator/validation.py).
"""

from __future__ import annotations

import functools
import hashlib
import json
import re
from dataclasses import dataclass
from importlib.metadata import version
from pathlib import Path
from typing import Iterable

from automation.operator import constraints
from automation.operator.pulumi_yaml import NotLiteral, escaped
from automation.planning.payloads import PlatformPayload
from automation.planning.stacks import DesiredState, StackSpec
from components.workspace_credentials import GCP_FILE, MOUNTED, NEBIUS_FILE
from fleet.errors import ModelplaneError
from fleet.stack_id import StackId, StackKind, backend_name
from workloads.cache import secret_refs
from workloads.service_routing import GATEWAY_OF_ANNOTATION, PLACEHOLDER_ANNOTATION
from workloads.yamlio import dump_fast

LAPTOP_PROJECT = "modelplane"  # the root Pulumi.yaml: platform and gateway stacks run from the repository
# The Pulumi image the workspaces run in. PKO's default `restricted` profile runs it as a non-root user, and only
# the kitchen-sink image `pulumi/pulumi` has `-nonroot` tags (`pulumi-python` has none). Its CLI is at least the
# Python SDK pyproject.toml pins (tests/test_operator.py checks it). The workspace's `pulumi install` installs the
# platform program's dependencies from infra/requirements.txt: the Python host reads the program's folder.
PULUMI_IMAGE = "pulumi/pulumi:3.272.0-nonroot"
# The Kubernetes provider a Program's workspace runs: the one the local executor runs (the installed
# pulumi-kubernetes SDK's plugin), never whichever is newest when the workspace starts. Every Kubernetes resource of
# a Program uses the explicit provider that carries it.
KUBERNETES_PLUGIN = version("pulumi-kubernetes")
SERVICE_ACCOUNT = "modelplane-stacks"
COMMIT = re.compile(r"^[0-9a-f]{40}$")
MAX_NAME = 42  # the operator's Stack CRD refuses longer names (a CEL rule on the object)
# PKO names the Stack's Workspace after it, and the Workspace's Service and StatefulSet `<name>-workspace`: a
# Service name is a DNS-1035 label (a letter first, no `.`), and a StatefulSet's pods carry the label
# `controller-revision-hash: <statefulset>-<10 characters>`, at most 63. 42 + 10 + 1 + 10 = 63: the CEL limit holds.
DNS_1035 = re.compile(r"^[a-z]([-a-z0-9]*[a-z0-9])?$")
# The workspaces' compute: the operator's webhook defaults a workspace to a 64Mi memory request, and its agent
# limits itself to the request (AGENT_MEMLIMIT). The platform program installs and runs the cloud SDKs; a
# Program (Pulumi YAML) runs the Kubernetes provider only.
WORKSPACE_RESOURCES = {
    "repository": {"requests": {"cpu": "1", "memory": "2Gi"}, "limits": {"memory": "4Gi"}},
    "program": {"requests": {"cpu": "250m", "memory": "512Mi"}, "limits": {"memory": "1Gi"}},
}
# gitAuth for a private repository, by mode: the Secret's keys (accessToken; sshPrivateKey; username and password).
GIT_AUTH_MODES = ("accessToken", "sshAuth", "basicAuth")
STACK_ANNOTATION = "modelplane.ai/stack"  # the full stack name, when the object's name had to be shortened
FINGERPRINT_ANNOTATION = "modelplane.ai/fingerprint"  # what the Stack runs: the executor's record of what is applied
PLACEMENTS_ANNOTATION = "modelplane.ai/placements"  # a model Stack's replicas as placed: the planner's memory
KIND_LABEL = "modelplane.ai/stack-kind"


class ExportError(ModelplaneError, ValueError):
    pass


@dataclass(frozen=True)
class ExportOptions:
    backend: str  # s3://, gs://, azblob://, or a Pulumi Cloud URL
    git_url: str  # this project's repository, with the fleet's manifests in it
    git_ref: str  # a 40-hex commit (automation/operator/git_source.py resolves a branch or tag to one)
    repo_dir: str = "."  # where Pulumi.yaml is, in the repository
    fleet_dir: str = "fleet"  # the fleet's manifests, relative to repo_dir (the platform program's modelplane:fleet)
    namespace: str = "modelplane-stacks"
    image: str = PULUMI_IMAGE
    secrets: tuple[str, ...] = ()  # Secret names whose keys become every workspace's environment (credentials)
    organization: str = "organization"  # the backend's (DIY backends: `organization`)
    fleet_name: str | None = None  # --fleet: stacks are <fleet>_<stack> in the backend
    git_auth: tuple[str, str] | None = None  # (mode, Secret name): how the workspaces clone a private repository
    # (Secret, key) of a credential file mounted into every workspace, so GKE and Nebius kubeconfigs work in a pod
    # (components/workspace_credentials.py): a GCP service account key; a Nebius service account's authorized key
    gcp_credentials: tuple[str, str] | None = None
    nebius_credentials: tuple[str, str] | None = None

    def __post_init__(self) -> None:
        if self.backend.startswith("file://"):
            raise ExportError(f"--backend {self.backend!r}: a file:// backend is a folder inside each workspace pod, "
                              "gone when it restarts and seen by no other stack; use s3://, gs://, azblob:// or "
                              "a Pulumi Cloud URL")
        if not self.backend.startswith(("s3://", "gs://", "azblob://", "https://", "http://")):
            raise ExportError(f"--backend {self.backend!r}: expected s3://, gs://, azblob:// or a Pulumi Cloud URL")
        if not self.git_url:
            raise ExportError("--git-url: the repository the operator clones for the platform program is required")
        if not COMMIT.match(self.git_ref):
            raise ExportError(f"--git-ref {self.git_ref!r}: a platform Stack tracking a branch re-runs every cluster "
                              "on every commit; give a 40-hex commit (`modelplane operator export` resolves a branch "
                              "to its commit with git ls-remote)")
        if self.git_auth is not None and self.git_auth[0] not in GIT_AUTH_MODES:
            raise ExportError(f"--git-auth {self.git_auth[0]!r}: expected one of {', '.join(GIT_AUTH_MODES)}")

    @property
    def cloud(self) -> bool:
        return self.backend.startswith(("https://", "http://"))

    def object_name(self, stack: StackId | str) -> str:
        """The name of the stack's Stack and Program objects: fleets sharing a namespace never collide."""
        return object_name(backend_name(stack, self.fleet_name))


def object_name(stack: str) -> str:
    """The Kubernetes name of a stack's Stack and Program: a DNS-1035 label of at most 42 characters, so that
    every object PKO derives from it is valid. The stack name itself when it is one (`_` read as `-`); otherwise
    its head, made a label, and a hash of the whole, so `model-ml-team.qwen` and `model-ml.team-qwen` stay apart
    (the full name is annotated). A Program's name is its Pulumi project: part of the stack's identity.

    The hash is 32 bits (longer would rename every live Stack that has one), so two stacks can share a name:
    `object_names` refuses that among one fleet's stacks, and the operator executor refuses to write over, or
    delete, a live Stack annotated as another stack's."""
    name = stack.replace("_", "-")
    if len(name) <= MAX_NAME and DNS_1035.match(name):
        return name
    digest = _digest(stack)
    head = re.sub(r"[^a-z0-9-]+", "-", name.lower())
    head = head if head[:1].isalpha() else f"s-{head}"
    return f"{head[:MAX_NAME - 9].rstrip('-')}-{digest}"


def _digest(stack: str) -> str:
    return hashlib.sha256(stack.encode()).hexdigest()[:8]


def object_names(options: ExportOptions, stacks: Iterable[str]) -> dict[str, str]:
    """Stack -> its operator object name; ExportError when two stacks get the same one (one's Stack and Program
    would replace the other's in the cluster)."""
    owners: dict[str, str] = {}
    for stack in sorted(stacks):
        kube_name = options.object_name(stack)
        if kube_name in owners:
            raise ExportError(f"stacks {owners[kube_name]} and {stack} get the same operator object name "
                              f"{kube_name!r} (its hash collides); nothing was written: rename a cluster or "
                              "deployment so that their stacks differ")
        owners[kube_name] = stack
    return {stack: name for name, stack in owners.items()}


def _stack_name(options: ExportOptions, project: str, stack: StackId, qualified: bool = False) -> str:
    """The stack's name in the backend: fully qualified on Pulumi Cloud (and for a StackReference anywhere)."""
    name = backend_name(stack, options.fleet_name)
    return f"{options.organization}/{project}/{name}" if options.cloud or qualified else name


def _literal(spec: StackSpec, value):
    try:
        return escaped(value)
    except NotLiteral as exc:
        raise ExportError(f"{spec.name}: {exc}") from None


def operator_secret_name(namespace: str, name: str) -> str:
    """The Kubernetes Secret (in the stacks' namespace) that holds a cache token for the operator's workspaces:
    `<namespace>.<name>`. A namespace has no `.`, so the first one splits them and no two references share a
    Secret (`<ns>-<name>` made `ml`/`team-hf` and `ml-team`/`hf` one)."""
    out = f"{namespace}.{name}"
    if len(out) > 253:
        raise ExportError(f"Secret {namespace}/{name}: its operator Secret name {out[:60]}... is longer than "
                          "Kubernetes' 253 characters; use a shorter name")
    return out


def secret_config_key(namespace: str, name: str, key: str) -> str:
    """The Program's configuration key for one Secret value: a name Pulumi YAML reads as one plain root in
    `${...}` (lowercase letters, digits, `-`), derived from the exact (namespace, name, key), so that no text in
    a reference can end the interpolation or reach another key."""
    digest = hashlib.sha256(f"{namespace}\0{name}\0{key}".encode()).hexdigest()[:20]
    return f"secret-{digest}"


def _source(options: ExportOptions) -> dict:
    """A pinned commit: a Stack tracking a branch would re-run on every commit, whichever stacks it touches."""
    out: dict = {"projectRepo": options.git_url, "commit": options.git_ref, "repoDir": options.repo_dir}
    if options.git_auth:
        out["gitAuth"] = _git_auth(*options.git_auth)
    return out


def _git_auth(mode: str, secret: str) -> dict:
    def ref(key: str) -> dict:
        return {"type": "Secret", "secret": {"name": secret, "key": key}}
    if mode == "accessToken":
        return {"accessToken": ref("accessToken")}
    if mode == "sshAuth":
        return {"sshAuth": {"sshPrivateKey": ref("sshPrivateKey")}}
    return {"basicAuth": {"userName": ref("username"), "password": ref("password")}}


@functools.cache
def local_constraints() -> tuple[str, str]:
    """(ConfigMap name, constraints file): the local executor's installed versions, read once per process."""
    try:
        text = constraints.constraints_text(constraints.installed_versions())
    except constraints.ConstraintsError as exc:
        raise ExportError(str(exc)) from None
    return constraints.configmap_name(text), text


def constraints_configmap(options: ExportOptions) -> dict:
    name, text = local_constraints()
    return {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": name, "namespace": options.namespace},
            "data": {constraints.KEY: text}}


def _workspace_files(options: ExportOptions) -> dict:
    """What the workspace mounts: the constraints file, with PIP_CONSTRAINT naming it, so `pulumi install` installs
    the local executor's versions; and each credential Secret's one key read-only at the path the kubeconfigs read
    (components/workspace_credentials.py), with GOOGLE_APPLICATION_CREDENTIALS naming the GCP key, which both
    gke-gcloud-auth-plugin's application-default mode and the Google provider read."""
    mounts = [(kind, found, path) for kind, found, path in (
        ("gcp", options.gcp_credentials, GCP_FILE), ("nebius", options.nebius_credentials, NEBIUS_FILE)) if found]
    volumes: list[dict] = [{"name": "modelplane-constraints", "configMap": {
        "name": local_constraints()[0], "items": [{"key": constraints.KEY, "path": constraints.KEY}]}}]
    volumes += [{"name": f"modelplane-{kind}-credentials", "secret": {
        "secretName": secret, "items": [{"key": key, "path": Path(path).name}]}} for kind, (secret, key), path in mounts]
    container: dict = {"name": "pulumi", "volumeMounts": [
        {"name": "modelplane-constraints", "mountPath": constraints.MOUNT_DIR, "readOnly": True}, *(
            {"name": f"modelplane-{kind}-credentials", "mountPath": str(Path(path).parent), "readOnly": True}
            for kind, _, path in mounts)]}
    env = [{"name": constraints.ENV, "value": constraints.FILE}]
    if options.gcp_credentials:
        env.append({"name": "GOOGLE_APPLICATION_CREDENTIALS", "value": GCP_FILE})
    return {"env": env, "podTemplate": {"spec": {"volumes": volumes, "containers": [container]}}}


def _common(options: ExportOptions, spec: StackSpec, source: str) -> dict:
    out: dict = {
        "backend": options.backend,
        "serviceAccountName": SERVICE_ACCOUNT,
        "workspaceTemplate": {"spec": {"image": options.image, "resources": WORKSPACE_RESOURCES[source], **(
            {"envFrom": [{"secretRef": {"name": name}} for name in options.secrets]} if options.secrets else {}),
            **_workspace_files(options)}},
    }
    if spec.depends_on:  # the planner's dependencies, already only desired stacks
        out["prerequisites"] = [{"name": options.object_name(dep)} for dep in spec.depends_on]
    return out


def _metadata(options: ExportOptions, spec: StackSpec) -> dict:
    annotations = {STACK_ANNOTATION: spec.name, FINGERPRINT_ANNOTATION: spec.fingerprint}
    placements = spec.placements
    if placements:  # compact JSON: a Kubernetes object's annotations hold at most 256 KiB together
        annotations[PLACEMENTS_ANNOTATION] = json.dumps([p.to_dict() for p in placements], separators=(",", ":"),
                                                        sort_keys=True)
    return {"name": options.object_name(spec.id), "namespace": options.namespace,
            "labels": {KIND_LABEL: str(spec.kind)}, "annotations": annotations}


def _stack(options: ExportOptions, spec: StackSpec, body: dict) -> dict:
    return {"apiVersion": "pulumi.com/v1", "kind": "Stack", "metadata": _metadata(options, spec), "spec": body}


def platform_objects(options: ExportOptions, spec: StackSpec) -> list[dict]:
    config: dict = {"modelplane:fleet": options.fleet_dir}
    secrets_ref: dict = {}
    if spec.kind == StackKind.platform:
        config.update({"modelplane:cluster": spec.id.name, "modelplane:gateway": "false"})
        if isinstance(spec.payload, PlatformPayload) and _signs_in_from_mounts(options, spec):
            config["modelplane:clusterCredentials"] = MOUNTED
        existing = spec.payload.cluster.kubeconfig_secret if isinstance(spec.payload, PlatformPayload) else None
        if existing:  # an Existing cluster's kubeconfig: the Secret of that name in the stacks' namespace
            secrets_ref[f"modelplane:{existing}"] = {"type": "Secret", "secret": {"name": existing, "key": "kubeconfig"}}
    else:
        config["modelplane:gatewayOnly"] = "true"
    if spec.host:
        config["modelplane:controlPlaneCluster"] = spec.host
        if spec.kind == StackKind.gateway:  # the host's platform stack ran first: the gateway uses its kubeconfig output
            config["modelplane:controlPlaneStack"] = _stack_name(options, LAPTOP_PROJECT,
                                                                 StackId.platform(spec.host), qualified=True)
    body = {"stack": _stack_name(options, LAPTOP_PROJECT, spec.id), **_source(options), "config": config,
            **_common(options, spec, "repository"), "destroyOnFinalize": False}
    if secrets_ref:
        body["secretsRef"] = secrets_ref
    return [_stack(options, spec, body)]


# What a cluster's kubeconfig needs in a workspace pod, by source: the setting that mounts it (docs/operator.md).
CREDENTIAL_SETTINGS = {"GKE": ("gcp_credentials", "credentials.gcp", "--gcp-credentials"),
                       "Nebius": ("nebius_credentials", "credentials.nebius", "--nebius-credentials")}


def credential_problem(options: ExportOptions, spec: StackSpec) -> str | None:
    """Why a GKE or Nebius cluster's stacks could not sign in on the operator, naming the setting, or None.

    Its kubeconfig execs a CLI plugin that, in a fresh workspace pod, has no account to sign in with: it must read
    a mounted credential file (components/workspace_credentials.py), and for Nebius the image must hold the CLI.
    Without them every stack on that cluster would fail at its first Kubernetes object."""
    if spec.kind != "platform" or not isinstance(spec.payload, PlatformPayload):
        return None
    source = spec.payload.cluster.source
    if source not in CREDENTIAL_SETTINGS:
        return None
    field, setting, flag = CREDENTIAL_SETTINGS[source]
    if getattr(options, field) is None:
        return (f"InferenceCluster/{spec.id.name}: a {source} cluster's kubeconfig signs in with a CLI plugin that "
                f"has no account in a workspace pod; set {setting} in the operator settings ({flag} SECRET[:KEY] "
                f"for operator export): a Secret in {options.namespace} holding the service account's credential "
                "file (docs/operator.md, \"Cloud credentials\")")
    if source == "Nebius" and options.image == PULUMI_IMAGE:
        return (f"InferenceCluster/{spec.id.name}: {PULUMI_IMAGE} has no Nebius CLI, which the cluster's kubeconfig "
                "runs; set image in the operator settings (--image for operator export) to a workspace image with "
                "the `nebius` CLI on its PATH (docs/operator.md, \"Cloud credentials\")")
    return None


def credential_problems(options: ExportOptions, specs: Iterable[StackSpec]) -> list[str]:
    return [found for spec in specs if (found := credential_problem(options, spec))]


def _signs_in_from_mounts(options: ExportOptions, spec: StackSpec) -> bool:
    """The platform stack's kubeconfig signs in from the mounted files (ExportError when it cannot sign in)."""
    found = credential_problem(options, spec)
    if found:
        raise ExportError(found)
    assert isinstance(spec.payload, PlatformPayload)
    return spec.payload.cluster.source in CREDENTIAL_SETTINGS


def _provider_resources(options: ExportOptions, target: str, cluster: str) -> dict:
    reference = f"{target}-platform"
    return {
        reference: {"type": "pulumi:pulumi:StackReference", "properties": {
            "name": _stack_name(options, LAPTOP_PROJECT, StackId.platform(cluster), qualified=True)}},
        f"{target}-k8s": {"type": "pulumi:providers:kubernetes", "properties": {
            "kubeconfig": f"${{{reference}.outputs[\"kubeconfig\"]}}", "clusterIdentifier": cluster},
            "options": {"version": KUBERNETES_PLUGIN}},
    }


def _live_gateway(options: ExportOptions, obj: dict, resources: dict) -> dict:
    """A replica's EndpointSlice holds what its cluster's platform stack outputs when the Program runs (the
    laptop's programs read the same outputs, automation/execution/programs.py): never a recorded or placeholder address."""
    annotations = obj["metadata"].get("annotations") or {}
    cluster = annotations.get(GATEWAY_OF_ANNOTATION)
    if obj["kind"] not in ("EndpointSlice", "Service") or not cluster:
        return obj
    reference = f"{cluster}-gateway"
    resources[reference] = {"type": "pulumi:pulumi:StackReference", "properties": {
        "name": _stack_name(options, LAPTOP_PROJECT, StackId.platform(cluster), qualified=True)}}
    meta = {**obj["metadata"], "annotations": {k: v for k, v in annotations.items() if k != PLACEHOLDER_ANNOTATION}}
    if obj["kind"] == "Service":  # backend Envoy: a ClusterIP or an ExternalName, as the address is (port 80)
        return {**obj, "metadata": meta, "spec": f'${{{reference}.outputs["gatewayServiceSpec"]}}'}
    return {**obj, "metadata": meta, "addressType": f'${{{reference}.outputs["gatewayAddressType"]}}',
            "endpoints": f'${{{reference}.outputs["gatewayEndpoints"]}}'}


def workload_objects(options: ExportOptions, spec: StackSpec) -> list[dict]:
    resources: dict = {}
    configuration: dict = {}
    secrets_ref: dict = {}
    for target, objects in sorted(spec.objects.items()):
        cluster = spec.host if target == "control-plane" else target
        if cluster is None:
            raise ExportError(f"{spec.name}: no cluster of the fleet can host the control plane")
        resources.update(_provider_resources(options, target, cluster))
        plain = [o for o in objects if PLACEHOLDER_ANNOTATION not in (o["metadata"].get("annotations") or {})
                 or o["kind"] != "Secret"]
        secrets = [o for o in objects if o not in plain]
        depends: list[str] = []
        for obj in secrets:  # a Secret whose value the Stack reads from a Kubernetes Secret, never written here
            meta = {k: v for k, v in obj["metadata"].items() if k != "annotations"}
            values = {}
            for key, ref in sorted(secret_refs(obj).items()):
                config_key = secret_config_key(ref.namespace, ref.name, key)
                configuration[config_key] = {"type": "String"}
                values[escaped(key)] = f"${{{config_key}}}"
                secrets_ref[config_key] = {
                    "type": "Secret", "secret": {"name": operator_secret_name(ref.namespace, ref.name), "key": key}}
            name = f"{target}-secret-{meta['name']}"
            resources[name] = {"type": "kubernetes:core/v1:Secret",
                               "properties": {"metadata": _literal(spec, meta), "type": _literal(spec, obj.get("type", "Opaque")),
                                              "stringData": values},
                               "options": {"provider": f"${{{target}-k8s}}", "additionalSecretOutputs": ["stringData"]}}
            depends.append(f"${{{name}}}")
        resources[f"{target}-objects"] = {"type": "kubernetes:yaml/v2:ConfigGroup",
                                          "properties": {"objs": [_live_gateway(options, o, resources)
                                                                  for o in _literal(spec, plain)]},
                                          "options": {"provider": f"${{{target}-k8s}}",
                                                      **({"dependsOn": depends} if depends else {})}}
    program: dict = {"resources": resources}
    if configuration:
        program["configuration"] = configuration
    name = options.object_name(spec.id)
    # a Program-backed stack's project is its Program's name
    stack_body = {"stack": _stack_name(options, name, spec.id), "programRef": {"name": name},
                  **_common(options, spec, "program"), "destroyOnFinalize": True}
    if secrets_ref:
        stack_body["secretsRef"] = secrets_ref
    return [{"apiVersion": "pulumi.com/v1", "kind": "Program", "metadata": _metadata(options, spec), "program": program},
            _stack(options, spec, stack_body)]


def shared_objects(options: ExportOptions) -> list[dict]:
    """What every stack's workspace shares: the namespace, its service account (with system:auth-delegator, which
    the operator's workspaces need) and the constraints ConfigMap. The Secrets named with --secret are the user's
    to create."""
    return [
        {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": options.namespace}},
        {"apiVersion": "v1", "kind": "ServiceAccount", "metadata": {"name": SERVICE_ACCOUNT, "namespace": options.namespace}},
        {"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRoleBinding",
         "metadata": {"name": f"{options.namespace}:{SERVICE_ACCOUNT}:system:auth-delegator"},
         "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": "system:auth-delegator"},
         "subjects": [{"kind": "ServiceAccount", "name": SERVICE_ACCOUNT, "namespace": options.namespace}]},
        constraints_configmap(options),
    ]


def export(desired: DesiredState, options: ExportOptions) -> dict[str, list[dict]]:
    """File name -> the objects it holds: `_operator.yaml`, then one `<stack>.yaml` per desired stack."""
    files: dict[str, list[dict]] = {"_operator.yaml": shared_objects(options)}
    names = object_names(options, desired.specs)
    refused = credential_problems(options, desired.specs.values())
    if refused:  # every cluster that cannot sign in, at once
        raise ExportError("\n".join(refused))
    for name, spec in sorted(desired.specs.items()):
        files[f"{names[name]}.yaml"] = stack_objects(options, spec)
    return files


def stack_objects(options: ExportOptions, spec: StackSpec) -> list[dict]:
    """The operator objects that run one stack: its Program (workload stacks) first, then its Stack."""
    if spec.kind in (StackKind.platform, StackKind.gateway):
        return platform_objects(options, spec)
    return workload_objects(options, spec)


PARALLEL_FROM = 256  # files: below this, forking costs more than it saves
_WRITING: tuple[dict[str, list[dict]], Path] | None = None  # what forked writers inherit (never pickled)


def _write_some(names: list[str]) -> None:
    assert _WRITING is not None
    files, out = _WRITING
    for name in names:
        (out / name).write_text("".join(f"---\n{dump_fast(obj)}" for obj in files[name]))


def write(files: dict[str, list[dict]], out: Path, jobs: int | None = None) -> int:
    """Write the files (a folder of them, replaced as a whole like `render --out`, so nothing is written through
    a link planted in it); returns the object count.

    At fleet scale the YAML writer dominates the export, so large exports are written by `jobs` forked processes
    (default: one per CPU), each inheriting the objects rather than receiving a copy; the bytes are the same."""
    import multiprocessing
    import os
    from concurrent.futures import ProcessPoolExecutor

    from workloads.output import OutputError, replacing

    global _WRITING
    names = list(files)
    jobs = min(jobs or os.cpu_count() or 1, 16)
    try:
        with replacing(out, "modelplane operator export") as staging:
            _WRITING = (files, staging)
            try:
                if jobs > 1 and len(names) >= PARALLEL_FROM and "fork" in multiprocessing.get_all_start_methods():
                    with ProcessPoolExecutor(jobs, mp_context=multiprocessing.get_context("fork")) as pool:
                        list(pool.map(_write_some, [names[i::jobs] for i in range(jobs)]))
                else:
                    _write_some(names)
            finally:
                _WRITING = None
    except OutputError as exc:
        raise ExportError(str(exc)) from None
    return sum(len(objects) for objects in files.values())
