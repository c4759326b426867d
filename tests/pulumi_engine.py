"""The program side of the Pulumi CLI double: a DIY backend, a resource monitor, and mocked providers.

`tests/pulumi_double.py` answers the commands; this module does what the real engine does for
`up`, `preview`, `destroy` and `refresh`, as strictly as the real one where this project can
break it:

- The backend is a `file://` folder that must exist (the DIY backend refuses a missing one,
  pulumi/pulumi#15841). Each stack's checkpoint is `<folder>/.pulumi/stacks/<project>/<stack>.json`
  and an update holds `<folder>/.pulumi/locks/organization/<project>/<stack>/<id>.json`; a second
  update of a locked stack is refused, `cancel` removes the lock.
- The program runs: an inline program through the automation API's language server (`--client`),
  a local one (`Pulumi.yaml`'s `main`, runtime python) in a subprocess with the SDK's
  `pulumi-language-python-exec`. Its registrations reach the resource monitor served here; its
  `pulumi.export`s become the stack's outputs (secrets stay secret). A program that raises fails
  the update, and what it created before stays in the checkpoint, as with the real engine.
- Steps are computed against the checkpoint: create, update (inputs differ), same, replace (an
  input the provider replaces on changed; `deleteBeforeReplace` orders the delete first) and delete
  (registered before, not now; after the program succeeded). A `protect`ed resource is never
  deleted (the update or destroy fails naming it); `retainOnDelete` leaves it in the cloud
  (`retained.jsonl`).
- Providers are mocked: a custom resource's outputs are its inputs plus what a provider would add
  (`automation/checks/fake_outputs.py`, then `resourceOutputs` in control.json). What the real
  providers refuse is refused: GKE deletes a cluster only once `deletionProtection` is false in its
  state; pulumi-kubernetes returns an object's status only when it awaits it (`pulumi.com/waitFor`,
  or a kind it awaits by itself), so a Gateway with `pulumi.com/skipAwait` has no address yet.
- `StackReference` reads the referenced stack's checkpoint: an unknown stack fails, a missing output
  reads as absent (what `get_output` turns into an unknown).

Control (control.json, see pulumi_double): `resourceOutputs: {stack: {type or type::name: outputs}}`,
`failOn: {stack: {"resource": type or name, "error": text}}` (that resource's create fails after the
ones before it were created), `replaceOn: {type: [input keys]}`.
"""

from __future__ import annotations

import base64
import hashlib
import json
import os
import re
import subprocess
import threading
import time
import uuid
from concurrent import futures
from pathlib import Path
from typing import Any, Callable

# grpc and protobuf are imported where the engine runs a program: most CLI commands (config, outputs) need neither,
# and the double is a process per command

SECRET_SIG = "4dabf18193072939515e22adb298388d"
SECRET_VALUE = "1b47061264138c4ac30d75fd1eb44270"
UNKNOWN = "04da6b54-80e4-46f7-96ec-b56ff0331ba9"
STACK_TYPE = "pulumi:pulumi:Stack"
# The front door's client CA as trust-manager publishes it (public: a certificate, no key)
FAKE_CLIENT_CA = "-----BEGIN CERTIFICATE-----\nZmFrZSBmcm9udCBkb29yIENB\n-----END CERTIFICATE-----\n"
STACK_NAME = re.compile(r"^[A-Za-z0-9_.-]+$")


class Refused(Exception):
    """What the real CLI would refuse: message on stderr, exit code 1 (6 for a stack that does not exist, as the CLI
    of 3.277 exits)."""

    def __init__(self, message: str, code: int = 1):
        super().__init__(message)
        self.code = code


class Failed(Refused):
    """An operation the engine ran and that failed: the CLI prints its diagnostics on stdout, nothing on stderr."""


# ---- the backend ---------------------------------------------------------------------------------

def lock_content(pid: int) -> dict:
    """What a DIY backend's lock file holds: the process that took it, where and when."""
    import getpass
    import socket
    from datetime import datetime, timezone

    return {"pid": pid, "username": getpass.getuser(), "hostname": socket.gethostname(),
            "timestamp": datetime.now(timezone.utc).isoformat(timespec="seconds").replace("+00:00", "Z")}


def _bucket_wait(size: int) -> None:
    """As a bucket answers one request: PULUMI_DOUBLE_LATENCY seconds, plus `size` bytes at
    PULUMI_DOUBLE_BANDWIDTH bytes/s (benchmarks/record_index.py); nothing when unset."""
    latency = float(os.environ.get("PULUMI_DOUBLE_LATENCY") or 0)
    bandwidth = float(os.environ.get("PULUMI_DOUBLE_BANDWIDTH") or 0)
    if latency or bandwidth:
        time.sleep(latency + (size / bandwidth if bandwidth else 0))


class Backend:
    """A DIY `file://` backend folder, as the CLI opens it."""

    def __init__(self, url: str | None):
        if not url:
            raise Refused("error: PULUMI_ACCESS_TOKEN must be set for login during non-interactive CLI sessions")
        if not url.startswith("file://"):
            raise Refused(f"error: the pulumi double serves only file:// backends, not {url}")
        path = url.removeprefix("file://")
        self.root = Path(os.path.expanduser(path))
        if not self.root.is_dir():
            raise Refused(f"error: unable to open bucket {url}: stat {self.root}: no such file or directory")
        self.meta = self.root / ".pulumi"

    def stack_file(self, project: str, stack: str) -> Path:
        return self.meta / "stacks" / project / f"{stack}.json"

    def stacks(self, project: str | None = None) -> list[tuple[str, str]]:
        folder = self.meta / "stacks"
        _bucket_wait(0)  # a listing is one request
        return sorted((p.parent.name, p.stem) for p in folder.glob("*/*.json")
                      if project is None or p.parent.name == project)

    def exists(self, project: str, stack: str) -> bool:
        return self.stack_file(project, stack).is_file()

    def create(self, project: str, stack: str) -> None:
        check_stack_name(stack)
        self.meta.mkdir(exist_ok=True)
        (self.meta / "meta.yaml").write_text("version: 1\n")
        # a new stack's checkpoint has a manifest (its `stack ls` lastUpdate) and no resources, as the CLI writes it
        self.save(project, stack, {"version": 3, "checkpoint": {"stack": f"organization/{project}/{stack}",
                                                                 "latest": {"manifest": {"time": stamp(time.time())},
                                                                            "resources": []}},
                                   "history": []})

    def load(self, project: str, stack: str) -> dict:
        path = self.stack_file(project, stack)
        if not path.is_file():
            raise Refused(f"error: no stack named '{stack}' found", code=6)
        text = path.read_text()
        _bucket_wait(len(text))
        return _transform(json.loads(text), _unseal)

    def save(self, project: str, stack: str, content: dict) -> None:
        """Secrets are kept as ciphertext, as the engine keeps them with the stack's secrets provider."""
        path = self.stack_file(project, stack)
        path.parent.mkdir(parents=True, exist_ok=True)
        tmp = path.with_suffix(f".{os.getpid()}.tmp")
        tmp.write_text(json.dumps(_transform(content, _seal), indent=1, sort_keys=True))
        os.replace(tmp, path)

    def rename(self, project: str, old: str, new: str, new_project: str | None = None) -> None:
        """Rename a stack, into `new_project` too when given (the CLI rewrites every URN's stack and project)."""
        check_stack_name(new)
        target = new_project or project
        if self.exists(target, new):
            raise Refused(f"error: a stack named {new} already exists")
        content = self.load(project, old)
        content["checkpoint"]["stack"] = f"organization/{target}/{new}"
        # every URN carries stack and project, and the root stack resource is named after both
        resources = json.dumps(content["checkpoint"]["latest"]["resources"])
        resources = resources.replace(f'urn:pulumi:{old}::{project}::', f'urn:pulumi:{new}::{target}::')
        resources = resources.replace(f'::{STACK_TYPE}::{project}-{old}"', f'::{STACK_TYPE}::{target}-{new}"')
        content["checkpoint"]["latest"]["resources"] = json.loads(resources)
        self.save(target, new, content)
        self.stack_file(project, old).unlink()

    # locks: one file per running update, as the DIY backend writes them
    def lock_dir(self, project: str, stack: str) -> Path:
        return self.meta / "locks" / "organization" / project / stack

    def lock(self, project: str, stack: str) -> Path:
        folder = self.lock_dir(project, stack)
        held = sorted(folder.glob("*.json")) if folder.is_dir() else []
        if held:  # as the DIY backend names each lock (backend/diy/lock.go)
            named = []
            for path in held:
                lock = json.loads(path.read_text())
                named.append(f"\n  file://{path}: created by {lock.get('username')}@{lock.get('hostname')} (pid "
                             f"{lock.get('pid')}) at {lock.get('timestamp')}")
            raise Refused(f"error: the stack is currently locked by {len(held)} lock(s). Either wait for the other "
                          f"process(es) to end or delete the lock file with `pulumi cancel`.{''.join(named)}")
        folder.mkdir(parents=True, exist_ok=True)
        path = folder / f"{uuid.uuid4()}.json"
        path.write_text(json.dumps(lock_content(os.getpid())))
        return path

    def unlock_all(self, project: str, stack: str) -> None:
        for path in self.lock_dir(project, stack).glob("*.json"):
            path.unlink(missing_ok=True)


def _seal(value: dict) -> dict:
    plain = json.dumps(value["value"]).encode()
    return {SECRET_SIG: SECRET_VALUE, "ciphertext": "v1:" + base64.b64encode(bytes(b ^ 0x5A for b in plain)).decode()}


def _unseal(value: dict) -> dict:
    plain = bytes(b ^ 0x5A for b in base64.b64decode(value["ciphertext"][3:]))
    return {SECRET_SIG: SECRET_VALUE, "value": json.loads(plain)}


def _transform(value: Any, change: Callable[[dict], dict]) -> Any:
    if isinstance(value, dict):
        if value.get(SECRET_SIG) == SECRET_VALUE and ("value" in value or "ciphertext" in value):
            return change(value) if (("value" in value) == (change is _seal)) else value
        return {k: _transform(v, change) for k, v in value.items()}
    if isinstance(value, list):
        return [_transform(v, change) for v in value]
    return value


def check_stack_name(name: str) -> None:
    if len(name) > 100:
        raise Refused("error: a stack name cannot exceed 100 characters")
    if not STACK_NAME.match(name):
        position, char = next((i, c) for i, c in enumerate(name) if not STACK_NAME.match(c))
        raise Refused("error: a stack name may only contain alphanumeric, hyphens, underscores, or periods: invalid "
                      f"character '{char}' at position {position}")


def stamp(when: float, whole: bool = False) -> str:
    """A time as the CLI prints it in JSON: UTC, milliseconds (whole seconds for history, kept as unix seconds)."""
    millis = 0 if whole else int(when * 1000) % 1000
    return time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(int(when))) + f".{millis:03d}Z"


def outputs_of(checkpoint: dict) -> dict:
    """The stack's outputs: the root Stack resource's outputs, as the CLI reads them."""
    for res in checkpoint["checkpoint"]["latest"]["resources"]:
        if res["type"] == STACK_TYPE:
            return res.get("outputs") or {}
    return {}


def is_secret(value: Any) -> bool:
    return isinstance(value, dict) and value.get(SECRET_SIG) == SECRET_VALUE


def reveal(value: Any) -> Any:
    if is_secret(value):
        return reveal(value.get("value"))
    if isinstance(value, dict):
        return {k: reveal(v) for k, v in value.items()}
    if isinstance(value, list):
        return [reveal(v) for v in value]
    return value


def secret(value: Any) -> dict:
    return {SECRET_SIG: SECRET_VALUE, "value": value}


def to_dict(struct) -> dict:
    from google.protobuf import json_format

    return json_format.MessageToDict(struct)


def to_struct(value: dict):
    from google.protobuf import struct_pb2

    out = struct_pb2.Struct()
    out.update(value)
    return out


# ---- mocked providers ----------------------------------------------------------------------------

class Providers:
    """What the providers would answer, and refuse."""

    def __init__(self, stack: str, control: dict):
        self.stack = stack
        self.control = control

    def outputs(self, type_: str, name: str, inputs: dict, awaited: bool) -> dict:
        from automation.checks.fake_outputs import FAKE_OUTPUTS, echoed

        out = echoed(type_, inputs)
        if type_.startswith("kubernetes:") and not awaited:
            out.pop("status", None)  # not awaited: the provider returns the object as created, with no status yet
        else:
            out.update(FAKE_OUTPUTS.get(type_, {}))
            if type_ == "kubernetes:gateway.networking.k8s.io/v1:Gateway":  # one address per Gateway
                digest = int(hashlib.sha256(f"{self.stack}/{name}".encode()).hexdigest(), 16)
                out["status"] = {"addresses": [{"type": "IPAddress", "value": f"198.51.100.{1 + digest % 254}"}]}
        given = (self.control.get("resourceOutputs") or {}).get(self.stack) or {}
        out.update(given.get(type_, {}))
        out.update(given.get(f"{type_}::{name}", {}))
        return out

    def check_create(self, type_: str, name: str) -> None:
        fail = (self.control.get("failOn") or {}).get(self.stack)
        if fail and fail.get("resource") in (type_, name):
            raise Refused(fail.get("error") or f"creating {name} failed")

    def replaces(self, type_: str, old: dict, new: dict) -> list[str]:
        keys = (self.control.get("replaceOn") or {}).get(type_, [])
        return [k for k in keys if old.get(k) != new.get(k)]

    @staticmethod
    def check_delete(resource: dict) -> None:
        """Provider-side deletion guards (the engine's `protect` is checked by the engine)."""
        state = reveal(resource.get("outputs") or resource.get("inputs") or {})
        if resource["type"] == "gcp:container/cluster:Cluster" and state.get("deletionProtection", True) is not False:
            raise Refused(f"deleting {resource['urn']}: Cannot destroy cluster because deletion_protection is set to "
                          "true. Set it to false to proceed with cluster deletion.")


def awaited(type_: str, inputs: dict) -> bool:
    """Whether pulumi-kubernetes would wait for this object to be ready before the step succeeds (one table says which
    kinds Pulumi awaits: workloads/readiness.py)."""
    from workloads.readiness import awaited as awaited_kind

    if not type_.startswith("kubernetes:") or type_.startswith("kubernetes:helm") or "providers" in type_:
        return True
    return awaited_kind(type_.rsplit(":", 1)[-1], (inputs.get("metadata") or {}).get("annotations") or {})


# ---- the engine ----------------------------------------------------------------------------------

class Update:
    """One operation's steps against a stack's checkpoint."""

    def __init__(self, project: str, stack: str, old: list[dict], providers: Providers, dry_run: bool,
                 emit: Callable[[dict], None], backend: Backend):
        self.project, self.stack, self.dry_run = project, stack, dry_run
        self.old = {r["urn"]: r for r in old}
        self.providers = providers
        self.emit = emit
        self.backend = backend
        self.new: dict[str, dict] = {}  # urn -> resource, in registration order
        self.changes: dict[str, int] = {}
        self.errors: list[str] = []
        self.retained: list[str] = []
        self.guard = threading.Lock()

    def urn(self, parent: str, type_: str, name: str) -> str:
        if parent and not parent.endswith(f"::{STACK_TYPE}::{self.project}-{self.stack}"):
            type_ = parent.split("::")[2] + "$" + type_
        return f"urn:pulumi:{self.stack}::{self.project}::{type_}::{name}"

    def count(self, op: str) -> None:
        self.changes[op] = self.changes.get(op, 0) + 1

    def step(self, urn: str, type_: str, op: str) -> None:
        self.count(op)
        self.emit({"resourcePreEvent": {"metadata": {"op": op, "urn": urn, "type": type_, "provider": ""}}})

    def register(self, request) -> tuple[str, str, dict]:
        urn = self.urn(request.parent, request.type, request.name)
        with self.guard:  # claimed at once: of two registrations of one URN, the second is refused
            if urn in self.new:
                raise Refused(f"error: Duplicate resource URN '{urn}'; try giving it a unique name")
            self.new[urn] = {"urn": urn, "type": request.type}
        try:
            return self._register(urn, request)
        except Refused:
            with self.guard:  # not created: nothing of it is kept
                self.new.pop(urn, None)
            raise

    def _register(self, urn: str, request) -> tuple[str, str, dict]:
        inputs = to_dict(request.object)
        before = self.old.get(urn)
        is_custom = request.custom or request.remote
        resource = {"urn": urn, "type": request.type, "custom": bool(request.custom), "parent": request.parent or None,
                    "inputs": inputs, "protect": bool(request.protect), "retainOnDelete": bool(request.retainOnDelete),
                    "deleteBeforeReplace": bool(request.deleteBeforeReplace),
                    "dependencies": sorted(request.dependencies), "provider": request.provider or None}
        if request.type == STACK_TYPE or not is_custom:
            op = "same" if before is not None else "create"
            resource["outputs"] = (before or {}).get("outputs", {}) if request.type == STACK_TYPE else {}
            rid = ""
        else:
            wait = awaited(request.type, inputs)
            if before is None:
                op = "create"
            elif before.get("inputs") != inputs:
                op = "replace" if self.providers.replaces(request.type, before.get("inputs") or {}, inputs) else "update"
            else:
                op = "same"
            if op in ("create", "replace") and not self.dry_run:
                self.providers.check_create(request.type, request.name)
            if op == "replace" and not self.dry_run:  # a protected resource is never replaced, in either order
                self._delete(before, replacing=True)
            rid = (before or {}).get("id") if op in ("same", "update") else None
            rid = rid or f"{request.name}-{uuid.uuid4().hex[:8]}"
            resource["id"] = rid
            resource["outputs"] = (before or {}).get("outputs") if op == "same" else \
                self.providers.outputs(request.type, request.name, inputs, wait)
            resource["awaited"] = wait
        self.step(urn, request.type, op)  # the stack resource is a step too, counted as the engine counts it
        with self.guard:
            self.new[urn] = resource
        return urn, rid, resource.get("outputs") or {}

    def read_stack_reference(self, request) -> tuple[str, dict]:
        urn = self.urn(request.parent, request.type, request.name)
        name = request.id or to_dict(request.properties).get("name", "")
        parts = name.split("/")
        if len(parts) != 3:
            raise Refused(f"error: invalid stack reference {name!r}: a DIY backend needs organization/project/stack")
        org, project, stack = parts
        if org != "organization" or not self.backend.exists(project, stack):
            raise Refused(f"error: failed to read StackReference {name}: unknown stack \"{name}\"")
        outputs = outputs_of(self.backend.load(project, stack))
        secret_names = sorted(k for k, v in outputs.items() if is_secret(v))
        state = {"name": name, "outputs": outputs, "secretOutputNames": secret_names}
        with self.guard:
            self.new[urn] = {"urn": urn, "type": request.type, "custom": True, "id": name, "inputs": {"name": name},
                             "outputs": {"name": name}, "external": True, "parent": request.parent or None}
        return urn, state

    def read_bundle_config_map(self, request) -> tuple[str, dict]:
        """A ConfigMap as trust-manager writes it for a Bundle of this stack (its target key holding
        FAKE_CLIENT_CA): the only ConfigMap a program of ours reads. Any other does not exist."""
        urn = self.urn(request.parent, request.type, request.name)
        namespace, _, name = request.id.partition("/")
        with self.guard:
            bundles = [r for r in [*self.new.values(), *self.old.values()]
                       if r.get("type") == "kubernetes:trust.cert-manager.io/v1alpha1:Bundle"
                       and (r.get("inputs") or {}).get("metadata", {}).get("name") == name]
        if not bundles:
            raise Refused(f"error: resource '{request.id}' does not exist")
        key = bundles[0]["inputs"]["spec"]["target"]["configMap"]["key"]
        state = {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": name, "namespace": namespace},
                 "data": {key: FAKE_CLIENT_CA}}
        with self.guard:
            self.new[urn] = {"urn": urn, "type": request.type, "custom": True, "id": request.id, "inputs": {},
                             "outputs": state, "external": True, "parent": request.parent or None}
        return urn, state

    def set_outputs(self, urn: str, outputs: dict) -> None:
        with self.guard:
            if urn in self.new:
                self.new[urn]["outputs"] = outputs

    def _delete(self, resource: dict, replacing: bool = False) -> None:
        check_deletable(resource, replacing)
        if resource.get("retainOnDelete"):
            self.retained.append(resource["urn"])

    def finish(self, program_failed: bool) -> list[dict]:
        """The checkpoint after the program: deletes (only when it succeeded), dependents first. A resource that
        cannot be deleted fails the update; it and what was not deleted yet stay."""
        kept = list(self.new.values())
        gone = [r for urn, r in self.old.items() if urn not in self.new]
        if program_failed:  # what the program never reached stays as it was
            for resource in kept:  # the engine (since 3.112) updates the stack outputs registered, keeps the rest
                if resource["type"] == STACK_TYPE and resource["urn"] in self.old:
                    resource["outputs"] = {**(self.old[resource["urn"]].get("outputs") or {}),
                                           **(resource.get("outputs") or {})}
            return kept + gone
        while gone:
            resource = gone[-1]
            if resource["type"] != STACK_TYPE and not resource.get("external"):
                if not self.dry_run:
                    try:
                        self._delete(resource)
                    except Refused as exc:
                        self.errors.append(str(exc).removeprefix("error: "))
                        return kept + gone
                self.step(resource["urn"], resource["type"], "delete")
            gone.pop()
        return kept


def check_deletable(resource: dict, replacing: bool = False) -> None:
    """The engine never deletes a protected resource; a provider refuses what its cloud would."""
    if resource.get("protect") and replacing:
        raise Refused(f"error: unable to replace resource \"{resource['urn']}\"\nas it is currently marked for "
                      "protection. To unprotect the resource, remove the `protect` flag from the resource in your "
                      "Pulumi program and run `pulumi up`")
    if resource.get("protect"):
        raise Refused(f"error: resource \"{resource['urn']}\" cannot be deleted\nbecause it is protected. To unprotect "
                      "the resource, either remove the `protect` flag from the resource in your Pulumi program and run "
                      f"`pulumi up`, or use the command:\n`pulumi state unprotect '{resource['urn']}'`")
    if resource.get("custom") and not resource.get("retainOnDelete"):
        Providers.check_delete(resource)


def destroy(resources: list[dict], dry_run: bool, emit: Callable[[dict], None]
            ) -> tuple[list[dict], dict[str, int], list[str], str | None]:
    """Delete everything, dependents first; stop at the first resource that cannot be deleted.
    Returns what is left, the step counts, the retained URNs and the error."""
    left = list(resources)
    changes: dict[str, int] = {}
    retained: list[str] = []
    for resource in reversed(resources):
        if not resource.get("external"):  # the stack resource is deleted (and counted) last, as by the engine
            if not dry_run:
                try:
                    check_deletable(resource)
                except Refused as exc:
                    return left, changes, retained, str(exc).removeprefix("error: ")
                if resource.get("retainOnDelete"):
                    retained.append(resource["urn"])
            changes["delete"] = changes.get("delete", 0) + 1
            emit({"resourcePreEvent": {"metadata": {"op": "delete", "urn": resource["urn"], "type": resource["type"],
                                                    "provider": ""}}})
        if not dry_run:
            left.remove(resource)
    return left, changes, retained, None


# ---- gRPC services the program talks to ----------------------------------------------------------

def serve(update: Update, log: Callable[[str, str, str], None]):
    """Start the resource monitor and engine services for one update; returns (server, monitor address)."""
    import grpc
    from google.protobuf import empty_pb2
    from pulumi.runtime.proto import engine_pb2_grpc, resource_pb2, resource_pb2_grpc

    class Monitor(resource_pb2_grpc.ResourceMonitorServicer):
        def GetDeploymentInfo(self, request, context):
            return resource_pb2.DeploymentInfo(supportedFeatures=[
                resource_pb2.RESOURCE_MONITOR_FEATURE_SECRETS,
                resource_pb2.RESOURCE_MONITOR_FEATURE_RESOURCE_REFERENCES,
                resource_pb2.RESOURCE_MONITOR_FEATURE_DELETED_WITH,
                resource_pb2.RESOURCE_MONITOR_FEATURE_ALIAS_SPECS])

        def SupportsFeature(self, request, context):
            return resource_pb2.SupportsFeatureResponse(
                hasSupport=request.id in ("secrets", "resourceReferences", "deletedWith", "aliasSpecs"))

        def RegisterResource(self, request, context):
            try:
                urn, rid, outputs = update.register(request)
            except Refused as exc:
                message = str(exc).removeprefix("error: ")
                update.errors.append(message)
                log("error", message, update.urn(request.parent, request.type, request.name))
                context.abort(grpc.StatusCode.UNKNOWN, message)
            return resource_pb2.RegisterResourceResponse(urn=urn, id=rid, object=to_struct(outputs))

        def RegisterResourceOutputs(self, request, context):
            update.set_outputs(request.urn, to_dict(request.outputs))
            return empty_pb2.Empty()

        def ReadResource(self, request, context):
            if request.type not in ("pulumi:pulumi:StackReference", "kubernetes:core/v1:ConfigMap"):
                context.abort(grpc.StatusCode.UNIMPLEMENTED, f"the double reads only StackReferences and trust-manager's "
                                                             f"ConfigMaps, not {request.type}")
            try:
                urn, state = update.read_stack_reference(request) if request.type != "kubernetes:core/v1:ConfigMap" \
                    else update.read_bundle_config_map(request)
            except Refused as exc:
                update.errors.append(str(exc).removeprefix("error: "))
                context.abort(grpc.StatusCode.UNKNOWN, str(exc).removeprefix("error: "))
            return resource_pb2.ReadResourceResponse(urn=urn, properties=to_struct(state))

        def Invoke(self, request, context):
            from automation.checks.fake_outputs import FAKE_CALLS

            if request.tok == "pulumi:pulumi:getResource":
                urn = to_dict(request.args).get("urn")
                found = update.new.get(urn) or update.old.get(urn)
                if found is None:
                    context.abort(grpc.StatusCode.UNKNOWN, f"unknown resource {urn}")
                ret = {"urn": urn, "id": found.get("id", ""), "state": found.get("outputs") or {}}
                return resource_pb2.ResourceInvokeResponse(**{"return": to_struct(ret)})
            return resource_pb2.ResourceInvokeResponse(**{"return": to_struct(dict(FAKE_CALLS.get(request.tok, {})))})

        def RegisterStackTransform(self, request, context):
            context.abort(grpc.StatusCode.UNIMPLEMENTED, "transforms are not announced by this engine")

        def SignalAndWaitForShutdown(self, request, context):
            return empty_pb2.Empty()

    class Engine(engine_pb2_grpc.EngineServicer):
        def __init__(self):
            self.root = ""

        def Log(self, request, context):
            severity = {0: "debug", 1: "info", 2: "warning", 3: "error"}.get(request.severity, "info")
            if severity != "debug":
                log(severity, request.message, request.urn)
            return empty_pb2.Empty()

        def GetRootResource(self, request, context):
            from pulumi.runtime.proto import engine_pb2

            return engine_pb2.GetRootResourceResponse(urn=self.root)

        def SetRootResource(self, request, context):
            from pulumi.runtime.proto import engine_pb2

            self.root = request.urn
            return engine_pb2.SetRootResourceResponse()

    server = grpc.server(futures.ThreadPoolExecutor(max_workers=16))
    resource_pb2_grpc.add_ResourceMonitorServicer_to_server(Monitor(), server)
    engine_pb2_grpc.add_EngineServicer_to_server(Engine(), server)
    port = server.add_insecure_port("127.0.0.1:0")
    server.start()
    return server, f"127.0.0.1:{port}"


def run_inline(client: str, monitor: str, project: str, stack: str, config: dict[str, str], secret_keys: list[str],
               dry_run: bool, parallel: int, pwd: str) -> str:
    """Ask the automation API's language server (`--client`) to run the program; returns its error, if any."""
    import grpc
    from pulumi.runtime.proto import language_pb2, language_pb2_grpc

    channel = grpc.insecure_channel(client)
    try:
        response = language_pb2_grpc.LanguageRuntimeStub(channel).Run(language_pb2.RunRequest(
            project=project, stack=stack, pwd=pwd, config=config, configSecretKeys=secret_keys, dryRun=dry_run,
            parallel=parallel, monitor_address=monitor, args=[monitor], organization="organization"), timeout=600)
    except grpc.RpcError as exc:
        return f"the language host at {client} failed: {exc.details()}"
    finally:
        channel.close()
    return response.error


# What the Python language host's exec script does for a local program (the SDK does not ship the script).
_PYTHON_HOST = """
import asyncio, json, os, runpy, sys, traceback
import pulumi
from pulumi.runtime import run_in_stack, set_all_config, settings
a = json.loads(sys.argv[1])
settings.reset_options(project=a["project"], stack=a["stack"], monitor_address=a["monitor"], engine_address=a["monitor"],
                       parallel=a["parallel"], preview=a["dry_run"], organization="organization", root_directory=a["root"])
set_all_config(a["config"], a["secret_keys"])
sys.path.insert(0, a["main"])
loop = asyncio.new_event_loop()
asyncio.set_event_loop(loop)
try:
    loop.run_until_complete(run_in_stack(lambda: runpy.run_path(a["main"], run_name="__main__")))
except pulumi.RunError as exc:
    pulumi.log.error(str(exc))
    sys.exit(32)
except Exception:
    pulumi.log.error("Program failed with an unhandled exception:\\n" + traceback.format_exc())
    sys.exit(1)
"""


def run_local(main: Path, monitor: str, project: str, stack: str, config: dict[str, str], secret_keys: list[str],
              dry_run: bool, parallel: int, python: str, root: str) -> str:
    """Run a local Python program as the Python language host does: in its `main` folder, with that interpreter."""
    request = {"project": project, "stack": stack, "monitor": monitor, "parallel": parallel, "dry_run": dry_run,
               "config": config, "secret_keys": secret_keys, "main": str(main), "root": root}
    process = subprocess.run([python, "-c", _PYTHON_HOST, json.dumps(request)], cwd=main, capture_output=True,
                             text=True, timeout=600)
    if process.returncode == 32:
        return "the program failed (see its diagnostics)"
    if process.returncode != 0:
        return (process.stderr.strip().splitlines() or [f"the program exited {process.returncode}"])[-1]
    return ""
