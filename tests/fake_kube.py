"""A Kubernetes API server double and a scripted Pulumi Kubernetes Operator, for the operator executor's tests.

The server is as strict as the real one wherever the executor depends on it:
- every request carries the kubeconfig's bearer token (else 401 Unauthorized);
- writes are server-side apply only: PATCH with `application/apply-patch+yaml`, a `fieldManager`, and a body
  whose apiVersion, kind, name and namespace match the URL (else 400/415);
- objects are checked against the operator's CRDs and Kubernetes' schemas, CEL root rules included (422);
- a namespaced object needs its Namespace (404 `namespaces "x" not found`); unknown kinds are 404;
- `metadata.generation` moves only when what is applied outside metadata and status changes; apply never
  writes status; a field the manager no longer applies is gone (the manager owns every field it applied);
- DELETE of an object with finalizers only marks it (`deletionTimestamp`); it goes once they are removed.

The operator is a thread that behaves as PKO v2's Stack and Program controllers do, as far as the executor
can see: a finalizer on every Stack; a Program's artifact revision is its generation; a Stack runs when its
generation, reconcile request or Program revision is new and its prerequisites have succeeded; the result
goes to `status.lastUpdate` and the Ready/Reconciling/Stalled conditions; a deleted Stack is destroyed when
`destroyOnFinalize`, then its finalizer removed. Tests script outcomes per Stack. Nothing here is a cluster.
"""

from __future__ import annotations

import copy
import json
import re
import threading
import time
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from urllib.parse import parse_qs, urlsplit

import yaml

from automation.execution.kube import ALL_NAMESPACES, RESOURCES
from automation.operator.validation import CRDS
from workloads.schemas import check

FINALIZER = "finalizer.stack.pulumi.com"
COMMIT = "0123456789abcdef0123456789abcdef01234567"  # the settings' gitRef: a commit, so nothing asks a remote
TOKEN = "fake-cluster-token-never-printed-7f3a"
BY_RESOURCE = {(api_version, resource): (kind, namespaced)
               for (api_version, kind), (resource, namespaced) in RESOURCES.items()}


@dataclass
class Request:
    method: str
    path: str
    query: dict
    content_type: str
    body: dict | None


def _status(code: int, reason: str, message: str) -> dict:
    return {"apiVersion": "v1", "kind": "Status", "status": "Failure", "code": code, "reason": reason,
            "message": message}


def _parse(path: str):
    """(apiVersion, kind, namespace, name) of a REST path, or None."""
    parts = [p for p in path.split("/") if p]
    if parts[:1] == ["api"]:
        api_version, rest = parts[1], parts[2:]
    elif parts[:1] == ["apis"] and len(parts) >= 3:
        api_version, rest = f"{parts[1]}/{parts[2]}", parts[3:]
    else:
        return None
    namespace = None
    if len(rest) >= 2 and rest[0] == "namespaces" and len(rest) != 2:
        namespace, rest = rest[1], rest[2:]
    if not rest or len(rest) > 2:
        return None
    found = BY_RESOURCE.get((api_version, rest[0]))
    if found is None:
        return None
    kind, namespaced = found
    if namespaced and namespace is None and len(rest) == 1:
        return api_version, kind, ALL_NAMESPACES, None  # a list across every namespace (GET only)
    if namespaced != (namespace is not None):
        return None
    return api_version, kind, namespace, rest[1] if len(rest) == 2 else None


@dataclass
class FakeCluster:
    """The stored objects, what was asked of them, and the operator's script."""

    objects: dict[tuple, dict] = field(default_factory=dict)  # (apiVersion, kind, namespace, name) -> object
    requests: list[Request] = field(default_factory=list)
    lock: threading.RLock = field(default_factory=threading.RLock)
    # keyed by the stack's full name (the Stack's `modelplane.ai/stack` annotation), as tests script them
    outcomes: dict[str, tuple[str, str]] = field(default_factory=dict)  # stack -> (state, message)
    stalls: dict[str, tuple[str, str]] = field(default_factory=dict)  # stack -> (reason, message)
    outputs: dict[str, dict] = field(default_factory=dict)  # stack -> status.outputs
    runs: list[tuple[str, str]] = field(default_factory=list)  # (stack, update type) in the order they ran
    heads: dict[str, str] = field(default_factory=dict)  # the repository's branches: a branch Stack follows its head
    # what each run ran against in the backend: (namespace, Pulumi project, spec.stack, update type). As in PKO,
    # a Program-backed stack's project is its Program's name; a git-backed one's is the repository's Pulumi.yaml.
    backend_runs: list[tuple[str | None, str, str, str]] = field(default_factory=list)
    resource_version: int = 0
    operator_running: bool = True
    # a workload cluster's controllers: the gateway controller (a Gateway's LoadBalancer Service follows it) and
    # the cloud's service controller (a deleted LoadBalancer Service goes once its load balancer is deleted)
    cloud_stuck: bool = False  # the cloud never deletes a load balancer
    deleted_load_balancers: list[str] = field(default_factory=list)  # namespace/name, as the cloud deleted them
    recreated: list[str] = field(default_factory=list)  # Services the gateway controller made again

    def writes(self, method: str | None = None) -> list[Request]:
        return [r for r in self.requests if r.method != "GET" and (method is None or r.method == method)]

    def stacks(self, namespace: str = "modelplane-stacks") -> dict[str, dict]:
        """The Stack objects by the full stack name they are annotated with."""
        with self.lock:
            return {stack_name(o): copy.deepcopy(o) for k, o in self.objects.items()
                    if k[1] == "Stack" and k[2] == namespace}

    def add_namespace(self, name: str) -> None:
        self.objects[("v1", "Namespace", None, name)] = {"apiVersion": "v1", "kind": "Namespace",
                                                         "metadata": {"name": name, "generation": 1}}

    # ---- the API server ----------------------------------------------------------------------

    def handle(self, method: str, path: str, query: dict, content_type: str, body: dict | None) -> tuple[int, dict]:
        with self.lock:
            self.requests.append(Request(method, path, query, content_type, copy.deepcopy(body)))
            target = _parse(path)
            if target is None:
                return 404, _status(404, "NotFound", f"the server could not find the requested resource ({path})")
            api_version, kind, namespace, name = target
            if method == "GET":
                if name is None:
                    return 200, {"kind": f"{kind}List", "apiVersion": api_version,
                                 "items": self._list(api_version, kind, namespace, query.get("labelSelector", [""])[0])}
                obj = self.objects.get((api_version, kind, namespace, name))
                if obj is None:
                    return 404, _status(404, "NotFound", f'{RESOURCES[(api_version, kind)][0]} "{name}" not found')
                return 200, copy.deepcopy(obj)
            if name is None or namespace == ALL_NAMESPACES:
                return 405, _status(405, "MethodNotAllowed", "the server does not allow this method on a collection")
            if method == "PATCH":
                return self._apply(api_version, kind, namespace, name, query, content_type, body)
            if method == "DELETE":
                return self._delete(api_version, kind, namespace, name)
            return 405, _status(405, "MethodNotAllowed", f"{method} is not allowed")

    def _list(self, api_version: str, kind: str, namespace: str | None, selector: str) -> list[dict]:
        def matches(obj: dict) -> bool:
            labels = obj["metadata"].get("labels") or {}
            for term in filter(None, selector.split(",")):
                if term.startswith("!"):
                    if term[1:] in labels:
                        return False
                elif "=" in term:
                    key, value = term.split("=", 1)
                    if labels.get(key) != value:
                        return False
                elif term not in labels:
                    return False
            return True
        return [copy.deepcopy(o) for (v, k, ns, _), o in sorted(self.objects.items(), key=lambda i: str(i[0]))
                if v == api_version and k == kind and namespace in (ns, ALL_NAMESPACES) and matches(o)]

    def _apply(self, api_version, kind, namespace, name, query, content_type, body) -> tuple[int, dict]:
        if content_type != "application/apply-patch+yaml":
            return 415, _status(415, "UnsupportedMediaType", f"the body of the request was in an unknown format: "
                                                            f"{content_type} (only server-side apply is expected)")
        if not query.get("fieldManager"):
            return 422, _status(422, "Invalid", "PatchOptions.meta.k8s.io is invalid: fieldManager: Required value: "
                                                "is required for apply patch")
        if not isinstance(body, dict):
            return 400, _status(400, "BadRequest", "the body is not an object")
        meta = body.get("metadata") or {}
        if (body.get("apiVersion"), body.get("kind")) != (api_version, kind) or meta.get("name") != name:
            return 400, _status(400, "BadRequest", "the API version, kind or name in the body does not match the URL")
        if meta.get("namespace", namespace) != namespace:
            return 400, _status(400, "BadRequest", "the namespace of the object does not match the URL")
        if "status" in body:
            return 400, _status(400, "BadRequest", "status is written through the status subresource")
        if namespace is not None and ("v1", "Namespace", None, namespace) not in self.objects:
            return 404, _status(404, "NotFound", f'namespaces "{namespace}" not found')
        problems = check(body, CRDS)
        if problems:
            return 422, _status(422, "Invalid", f"{kind}.{api_version} \"{name}\" is invalid: {problems[0]}")
        key = (api_version, kind, namespace, name)
        old = self.objects.get(key)
        stored = copy.deepcopy(body)
        stored_meta = stored["metadata"]
        stored_meta.setdefault("namespace", namespace) if namespace else None
        content = {k: v for k, v in body.items() if k not in ("metadata", "status")}
        if old is None:
            stored_meta["generation"] = 1
            stored_meta["uid"] = f"uid-{len(self.requests)}"
        else:
            old_content = {k: v for k, v in old.items() if k not in ("metadata", "status")}
            stored_meta["generation"] = old["metadata"]["generation"] + (content != old_content)
            stored_meta["uid"] = old["metadata"]["uid"]
            for kept in ("finalizers", "deletionTimestamp"):
                if kept in old["metadata"]:
                    stored_meta[kept] = old["metadata"][kept]
            if "status" in old:
                stored["status"] = old["status"]
        self.resource_version += 1
        stored_meta["resourceVersion"] = str(self.resource_version)
        self.objects[key] = stored
        return (200 if old else 201), copy.deepcopy(stored)

    def _delete(self, api_version, kind, namespace, name) -> tuple[int, dict]:
        key = (api_version, kind, namespace, name)
        obj = self.objects.get(key)
        if obj is None:
            return 404, _status(404, "NotFound", f'{RESOURCES[(api_version, kind)][0]} "{name}" not found')
        if obj["metadata"].get("finalizers"):
            obj["metadata"].setdefault("deletionTimestamp", "2026-11-30T00:00:00Z")
            return 200, copy.deepcopy(obj)
        del self.objects[key]
        return 200, _status(200, "", "deleted") | {"status": "Success"}

    # ---- the operator -------------------------------------------------------------------------

    def _program_revision(self, stack: dict) -> str | None:
        ref = (stack["spec"].get("programRef") or {}).get("name")
        if ref is None:  # a git source: its pinned commit, or the head of the branch it follows (polled)
            return stack["spec"].get("commit") or self.heads.setdefault(stack["spec"].get("branch", ""), "1" * 40)
        program = self.objects.get(("pulumi.com/v1", "Program", stack["metadata"]["namespace"], ref))
        return None if program is None else str(program["metadata"]["generation"])

    def _succeeded(self, stack: dict) -> bool:
        last = (stack.get("status") or {}).get("lastUpdate") or {}
        request = (stack["metadata"].get("annotations") or {}).get("pulumi.com/reconciliation-request", "")
        return (last.get("generation") == stack["metadata"]["generation"] and last.get("reconcileRequest", "") == request
                and last.get("state") == "succeeded")

    def add_gateway(self, namespace: str, name: str) -> None:
        """A Gateway, and the LoadBalancer Service its controller made for it in the controller's namespace."""
        with self.lock:
            self.objects[(GATEWAY_API, "Gateway", namespace, name)] = {
                "apiVersion": GATEWAY_API, "kind": "Gateway", "metadata": {"name": name, "namespace": namespace}}
            self._gateway_service(namespace, name)

    def add_load_balancer(self, namespace: str, name: str) -> None:
        with self.lock:
            self.objects[("v1", "Service", namespace, name)] = _load_balancer(namespace, name, {})

    def _gateway_service(self, namespace: str, name: str) -> None:
        labels = {OWNING_NAME: name, OWNING_NAMESPACE: namespace}
        service = f"envoy-{namespace}-{name}"
        self.objects[("v1", "Service", "envoy-gateway-system", service)] = _load_balancer("envoy-gateway-system",
                                                                                           service, labels)

    def _workload_controllers(self) -> None:
        for key, obj in list(self.objects.items()):
            if key[:2] != ("v1", "Service"):
                continue
            labels, meta = obj["metadata"].get("labels") or {}, obj["metadata"]
            owner = (GATEWAY_API, "Gateway", labels.get(OWNING_NAMESPACE), labels.get(OWNING_NAME))
            if OWNING_NAME in labels and owner not in self.objects and not meta.get("deletionTimestamp"):
                meta["deletionTimestamp"] = "2026-11-30T00:00:00Z"  # the controller deletes its Gateway's Service
            if meta.get("deletionTimestamp") and not self.cloud_stuck:
                self.deleted_load_balancers.append(f"{key[2]}/{key[3]}")  # the cloud deleted it: the finalizer goes
                del self.objects[key]
        for key, obj in list(self.objects.items()):  # a Gateway without its Service gets it back
            if key[:2] == (GATEWAY_API, "Gateway") and not any(
                    (o["metadata"].get("labels") or {}).get(OWNING_NAME) == key[3] for k, o in self.objects.items()
                    if k[:2] == ("v1", "Service")):
                self.recreated.append(f"{key[2]}/{key[3]}")
                self._gateway_service(key[2], key[3])

    def step(self) -> None:
        """One pass of the operator's controllers over every Stack (and a workload cluster's controllers)."""
        with self.lock:
            self._workload_controllers()
            for key, stack in list(self.objects.items()):
                if key[1] != "Stack":
                    continue
                name, meta = stack_name(stack), stack["metadata"]
                status = stack.setdefault("status", {})
                if meta.get("deletionTimestamp"):
                    if FINALIZER not in (meta.get("finalizers") or []):
                        del self.objects[key]
                        continue
                    if stack["spec"].get("destroyOnFinalize"):
                        state, message = self.outcomes.get(f"{name}:destroy", ("succeeded", ""))
                        self.runs.append((name, "destroy"))
                        status["lastUpdate"] = {"type": "destroy", "state": state, "message": message,
                                                "generation": meta["generation"]}
                        if state != "succeeded":
                            continue
                    meta["finalizers"] = [f for f in meta["finalizers"] if f != FINALIZER]
                    if not meta["finalizers"]:
                        del self.objects[key]
                    continue
                if FINALIZER not in (meta.get("finalizers") or []):
                    meta.setdefault("finalizers", []).append(FINALIZER)
                request = (meta.get("annotations") or {}).get("pulumi.com/reconciliation-request", "")
                revision = self._program_revision(stack)
                last = status.get("lastUpdate") or {}
                if (last.get("generation") == meta["generation"] and last.get("reconcileRequest", "") == request
                        and last.get("lastAttemptedCommit") == revision):
                    continue  # synced
                status["observedGeneration"] = meta["generation"]
                status["observedReconcileRequest"] = request
                refused = workspace_refused(key[3])
                if refused:  # PKO's Workspace cannot make its Service or StatefulSet: the Stack never runs
                    status["conditions"] = [{"type": "Reconciling", "status": "True", "reason": "WorkspaceNotReady",
                                             "message": refused}]
                    continue
                if name in self.stalls:
                    reason, message = self.stalls[name]
                    status["conditions"] = [{"type": "Stalled", "status": "True", "reason": reason, "message": message},
                                            {"type": "Ready", "status": "False", "reason": "NotReadyStalled"}]
                    continue
                if revision is None:
                    status["conditions"] = [{"type": "Stalled", "status": "True", "reason": "SourceUnavailable",
                                             "message": "Program not found"}]
                    continue
                waiting = [p["name"] for p in stack["spec"].get("prerequisites") or []
                           if not self._succeeded(self.objects.get(("pulumi.com/v1", "Stack", key[2], p["name"]), {})
                                                  or {"metadata": {"generation": -1}, "spec": {}})]
                if waiting:
                    status["conditions"] = [{"type": "Reconciling", "status": "True",
                                             "reason": "PrerequisiteNotSatisfied",
                                             "message": f"unsatisfied prerequisite(s): {', '.join(waiting)}"}]
                    continue
                kind = "preview" if stack["spec"].get("preview") else "up"
                state, message = self.outcomes.get(name, ("succeeded", ""))
                self.runs.append((name, kind))
                project = (stack["spec"].get("programRef") or {}).get("name") or "modelplane"
                self.backend_runs.append((key[2], project, stack["spec"]["stack"], kind))
                status["lastUpdate"] = {"generation": meta["generation"], "reconcileRequest": request, "type": kind,
                                        "state": state, "message": message, "lastAttemptedCommit": revision,
                                        "lastResyncTime": "2026-11-30T00:00:00Z"}
                if state == "succeeded":
                    status["outputs"] = self.outputs.get(name, {})
                    status["conditions"] = [{"type": "Ready", "status": "True", "reason": "ProcessingCompleted"}]
                else:
                    status["conditions"] = [{"type": "Reconciling", "status": "True", "reason": "RetryingAfterFailure",
                                             "message": "1 update failure(s)"},
                                            {"type": "Ready", "status": "False", "reason": "NotReadyInProgress"}]


class _Handler(BaseHTTPRequestHandler):
    cluster: FakeCluster

    def log_message(self, *args) -> None:
        pass

    def _serve(self) -> None:
        if self.headers.get("Authorization") != f"Bearer {TOKEN}":
            self._send(401, _status(401, "Unauthorized", "Unauthorized"))
            return
        url = urlsplit(self.path)
        length = int(self.headers.get("Content-Length") or 0)
        raw = self.rfile.read(length) if length else b""
        body = None
        if raw:
            try:
                body = yaml.safe_load(raw)  # apply-patch bodies are YAML (JSON is YAML)
            except yaml.YAMLError:
                self._send(400, _status(400, "BadRequest", "the body is not YAML or JSON"))
                return
        code, answer = self.server.cluster.handle(  # type: ignore[attr-defined]
            self.command, url.path, parse_qs(url.query), self.headers.get("Content-Type", ""), body)
        self._send(code, answer)

    def _send(self, code: int, body: dict) -> None:
        data = json.dumps(body).encode()
        self.send_response(code)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    do_GET = do_PATCH = do_DELETE = do_POST = do_PUT = _serve


class FakeKube:
    """The server on a loopback port, its operator thread, and a kubeconfig file for it."""

    def __init__(self, folder: Path, operator: bool = True, interval: float = 0.005):
        self.cluster = FakeCluster()
        self.server = ThreadingHTTPServer(("127.0.0.1", 0), _Handler)
        self.server.cluster = self.cluster  # type: ignore[attr-defined]
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}"
        self.kubeconfig = folder / "control-plane.kubeconfig"
        self.kubeconfig.write_text(yaml.safe_dump({
            "apiVersion": "v1", "kind": "Config", "current-context": "control-plane",
            "clusters": [{"name": "cp", "cluster": {"server": self.url}}],
            "users": [{"name": "admin", "user": {"token": TOKEN}}],
            "contexts": [{"name": "control-plane", "context": {"cluster": "cp", "user": "admin"}}]}))
        self._stop = threading.Event()
        self._threads = [threading.Thread(target=self.server.serve_forever, daemon=True)]
        if operator:
            self._threads.append(threading.Thread(target=self._operate, args=(interval,), daemon=True))
        for thread in self._threads:
            thread.start()

    def _operate(self, interval: float) -> None:
        while not self._stop.wait(interval):
            if self.cluster.operator_running:
                self.cluster.step()

    def close(self) -> None:
        self._stop.set()
        self.server.shutdown()
        self.server.server_close()

    def settings(self, folder: Path, **extra) -> Path:
        path = folder / "modelplane-operator.yaml"
        path.write_text(yaml.safe_dump({"backend": "s3://acme-fleet-state", "gitUrl": "https://github.com/acme/fleet",
                                        "gitRef": COMMIT,
                                        "secrets": ["cloud-credentials"], "kubeconfig": str(self.kubeconfig),
                                        "credentials": {"gcp": {"secret": "gcp-workspace"}},  # the examples' GKE
                                        "pollSeconds": 0.01, "timeoutMinutes": 0.5, **extra}))
        return path


GATEWAY_API = "gateway.networking.k8s.io/v1"
OWNING_NAME, OWNING_NAMESPACE = "gateway.envoyproxy.io/owning-gateway-name", "gateway.envoyproxy.io/owning-gateway-namespace"


def _load_balancer(namespace: str, name: str, labels: dict) -> dict:
    return {"apiVersion": "v1", "kind": "Service",
            "metadata": {"name": name, "namespace": namespace, "labels": labels,
                         "finalizers": ["service.kubernetes.io/load-balancer-cleanup"]},
            "spec": {"type": "LoadBalancer", "ports": [{"port": 80}]}}


def stack_name(stack: dict) -> str:
    return (stack["metadata"].get("annotations") or {}).get("modelplane.ai/stack") or stack["metadata"]["name"]


_DNS_1035 = re.compile(r"^[a-z]([-a-z0-9]*[a-z0-9])?$")


def workspace_refused(name: str) -> str | None:
    """What the API server says to PKO's workspace controller for a Stack named `name`: its Workspace's Service
    and StatefulSet are `<name>-workspace` (a Service name is a DNS-1035 label), and the StatefulSet's pods are
    labelled `controller-revision-hash: <statefulset>-<10 characters>` (a label value: at most 63)."""
    service = f"{name}-workspace"
    if len(service) > 63 or not _DNS_1035.match(service):
        return (f'Service "{service}" is invalid: metadata.name: Invalid value: "{service}": a DNS-1035 label must '
                "consist of lower case alphanumeric characters or '-', start with an alphabetic character, and end "
                "with an alphanumeric character")
    if len(service) + 11 > 63:
        return (f'StatefulSet "{service}" is invalid: spec.template.labels: Invalid value: "{service}-xxxxxxxxxx": '
                "must be no more than 63 characters")
    return None


def wait_until(predicate, timeout: float = 5.0) -> bool:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if predicate():
            return True
        time.sleep(0.01)
    return False
