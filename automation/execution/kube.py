"""The control-plane cluster's API, as the operator executor uses it: server-side apply, get, list, delete.

`KubeAPI` is the seam; `KubeClient` implements it with the official Kubernetes client, which reads the
kubeconfig as kubectl does (client certificates, tokens, and exec plugins such as gke-gcloud-auth-plugin
or `aws eks get-token`). Requests are plain REST on a fixed table of the kinds the executor writes, so
no discovery round-trips are made. Every failure is a `KubeError`, one line naming the verb, the object
and the API server's own message; a credential never appears in one.
"""

from __future__ import annotations

import json
import logging
import re
from contextlib import contextmanager
from pathlib import Path
from typing import TYPE_CHECKING, Any, Iterable, Iterator, Mapping, Protocol

import yaml

from automation.execution.runner import AutomationError
from fleet.loader import yaml_problem

if TYPE_CHECKING:
    from automation.planning.addons import Served
    from fleet.validate import Fleet

FIELD_MANAGER = "modelplane"
# (apiVersion, kind) -> (resource, namespaced): the kinds the executor writes and reads.
RESOURCES: dict[tuple[str, str], tuple[str, bool]] = {
    ("v1", "Namespace"): ("namespaces", False),
    ("v1", "ServiceAccount"): ("serviceaccounts", True),
    ("rbac.authorization.k8s.io/v1", "ClusterRoleBinding"): ("clusterrolebindings", False),
    ("pulumi.com/v1", "Stack"): ("stacks", True),
    ("pulumi.com/v1", "Program"): ("programs", True),
    # a provisioned cluster's load balancers, drained before it is destroyed (automation/execution/load_balancers.py)
    ("v1", "Service"): ("services", True),
    ("gateway.networking.k8s.io/v1", "Gateway"): ("gateways", True),
    # the local fleet's simulated hardware and add-ons (automation/local/), and what its tests read back
    ("v1", "Node"): ("nodes", False),
    ("v1", "Pod"): ("pods", True),
    ("v1", "ConfigMap"): ("configmaps", True),
    ("apps/v1", "Deployment"): ("deployments", True),
    ("resource.k8s.io/v1", "DeviceClass"): ("deviceclasses", False),
    ("resource.k8s.io/v1", "ResourceSlice"): ("resourceslices", False),
    ("resource.k8s.io/v1", "ResourceClaim"): ("resourceclaims", True),
    ("apiextensions.k8s.io/v1", "CustomResourceDefinition"): ("customresourcedefinitions", False),
    ("storage.k8s.io/v1", "StorageClass"): ("storageclasses", False),
    ("v1", "PersistentVolume"): ("persistentvolumes", False),
    ("v1", "PersistentVolumeClaim"): ("persistentvolumeclaims", True),
    ("admissionregistration.k8s.io/v1", "MutatingWebhookConfiguration"): ("mutatingwebhookconfigurations", False),
    ("admissionregistration.k8s.io/v1", "ValidatingWebhookConfiguration"): ("validatingwebhookconfigurations", False),
    ("leaderworkerset.x-k8s.io/v1", "LeaderWorkerSet"): ("leaderworkersets", True),
    ("batch/v1", "Job"): ("jobs", True),
}


class KubeError(AutomationError):
    def __init__(self, message: str, status: int = 0):
        super().__init__(message)
        self.status = status


ALL_NAMESPACES = "*"  # a namespaced kind's collection across every namespace (list only)


def resource_path(api_version: str, kind: str, namespace: str | None, name: str | None = None) -> str:
    """The REST path of a collection (name None) or of one object."""
    try:
        resource, namespaced = RESOURCES[(api_version, kind)]
    except KeyError:
        raise KubeError(f"{api_version} {kind}: not a kind the operator executor writes") from None
    base = f"/api/{api_version}" if "/" not in api_version else f"/apis/{api_version}"
    if namespaced and namespace == ALL_NAMESPACES and name is None:
        pass  # /api/v1/services: every namespace's
    elif namespaced:
        if not namespace or namespace == ALL_NAMESPACES:
            raise KubeError(f"{kind}/{name}: a namespaced kind needs a namespace")
        base += f"/namespaces/{namespace}"
    return f"{base}/{resource}" + (f"/{name}" if name else "")


def describe(obj: dict) -> str:
    meta = obj.get("metadata") or {}
    where = f"{meta['namespace']}/" if meta.get("namespace") else ""
    return f"{obj.get('kind')} {where}{meta.get('name')}"


class KubeAPI(Protocol):
    def apply(self, obj: dict) -> dict:
        """Server-side apply (field manager `modelplane`, conflicts forced); returns the object as stored."""
        ...

    def get(self, api_version: str, kind: str, namespace: str | None, name: str) -> dict | None:
        """The object, or None when it does not exist."""
        ...

    def list(self, api_version: str, kind: str, namespace: str | None, label_selector: str = "") -> list[dict]:
        ...

    def delete(self, api_version: str, kind: str, namespace: str | None, name: str) -> bool:
        """Ask for the object's deletion (finalizers run); False when it was already gone."""
        ...


def _server_message(body: Any) -> str:
    try:
        status = json.loads(body)
        return str(status.get("message") or status.get("reason") or "").strip()
    except (TypeError, ValueError, AttributeError):
        return ""


def _without_values(message: str) -> str:
    """The client's message without the kubeconfig's values. It shows an entry it could not read as a dict, and that
    entry can be a user's, with its token (`Expected key user in PATH/{'name': 'u', 'token': '...'}`); it names a
    missing file by the value given for its path, which is the key itself when a key was pasted where its path goes
    (`client-key:` for `client-key-data:`); and an exec or gcp plugin's failure carries its command line and stderr."""
    message = re.sub(r"\{.*\}", "{...}", message, flags=re.S)
    message = re.sub(r"File does not exist: .*", "a file it names does not exist (or is a value given where its path "
                     "goes: certificate-authority, client-certificate, client-key, tokenFile?)", message, flags=re.S)
    message = re.sub(r"^((?:exec|cmd-path): process returned -?\d+).*", r"\1 (its output is not shown)", message,
                     flags=re.S)
    return " ".join(message.split())


class _PluginOutput(logging.Filter):
    """The client logs an exec plugin's failure on the root logger with the plugin's stderr: said without it."""

    def filter(self, record: logging.LogRecord) -> bool:
        if "kubernetes" in record.pathname and record.name == "root":
            record.msg, record.args = "kubeconfig: %s", (_without_values(record.getMessage()),)
        return True


def _quiet_plugins() -> None:
    root = logging.getLogger()
    if not any(isinstance(f, _PluginOutput) for f in root.filters):
        root.addFilter(_PluginOutput())


class KubeClient:
    """`KubeAPI` over the official Kubernetes client, from a kubeconfig file and (optionally) a context."""

    def __init__(self, kubeconfig: Path, context: str | None = None, timeout: float = 30.0, connections: int = 64,
                 cluster: str = "the control-plane cluster"):
        from kubernetes import client, config
        from kubernetes.config.config_exception import ConfigException

        self.timeout, self.cluster = timeout, cluster
        _quiet_plugins()
        try:
            if not kubeconfig.is_file():
                raise KubeError(f"kubeconfig {kubeconfig}: no such file (settings: kubeconfig, or $KUBECONFIG)")
            configuration = client.Configuration()
            config.load_kube_config(config_file=str(kubeconfig), context=context, client_configuration=configuration,
                                    persist_config=False)
            configuration.connection_pool_maxsize = connections  # one per stack watched at once, no pool warnings
            self.client = client.ApiClient(configuration)
        except ConfigException as exc:
            raise KubeError(f"kubeconfig {kubeconfig}: {_without_values(str(exc))}") from None
        except yaml.YAMLError as exc:  # line, column and problem: PyYAML's own message quotes the line
            raise KubeError(f"kubeconfig {kubeconfig}: not readable as YAML: {yaml_problem(exc)}") from None
        except OSError as exc:  # a file it names (tokenFile) cannot be read: the path may be a pasted value
            raise KubeError(f"kubeconfig {kubeconfig}: cannot read a file it names ({exc.strerror or type(exc).__name__})") from None
        except (AttributeError, TypeError, ValueError, KeyError) as exc:  # a field of the wrong type
            raise KubeError(f"kubeconfig {kubeconfig}: not a kubeconfig the Kubernetes client can read "
                            f"({type(exc).__name__}); check it with `kubectl config view --kubeconfig {kubeconfig}`") from None
        self.server = self.client.configuration.host

    def _call(self, verb: str, what: str, method: str, path: str, *, body: Any = None,
              query: list[tuple[str, str]] | None = None, content_type: str = "application/json") -> Any:
        from kubernetes.client.exceptions import ApiException
        from urllib3.exceptions import HTTPError

        try:
            return self.client.call_api(
                path, method, query_params=query or [], body=body,
                header_params={"Accept": "application/json", "Content-Type": content_type},
                response_type="object", auth_settings=["BearerToken"], _return_http_data_only=True,
                _preload_content=True, _request_timeout=self.timeout)
        except ApiException as exc:
            message = _server_message(exc.body) or exc.reason or "no message"
            raise KubeError(f"{verb} {what}: {exc.status} {message}", exc.status) from None
        except (HTTPError, OSError) as exc:
            raise KubeError(f"{verb} {what}: cannot reach {self.cluster} at {self.server} "
                            f"({type(exc).__name__})") from None

    def apply(self, obj: dict, manager: str = FIELD_MANAGER) -> dict:
        """`manager`: the field manager applying (the local fleet's tests apply as another owner would)."""
        meta = obj["metadata"]
        path = resource_path(obj["apiVersion"], obj["kind"], meta.get("namespace"), meta["name"])
        return self._call("apply", describe(obj), "PATCH", path, body=obj,
                          query=[("fieldManager", manager), ("force", "true")],
                          content_type="application/apply-patch+yaml")

    def apply_status(self, obj: dict) -> dict:
        """Server-side apply of the object's status (what a kubelet or a controller reports)."""
        meta = obj["metadata"]
        path = resource_path(obj["apiVersion"], obj["kind"], meta.get("namespace"), meta["name"]) + "/status"
        body = {"apiVersion": obj["apiVersion"], "kind": obj["kind"], "metadata": {"name": meta["name"]},
                "status": obj.get("status") or {}}
        return self._call("apply", describe(obj) + " status", "PATCH", path, body=body,
                          query=[("fieldManager", FIELD_MANAGER), ("force", "true")],
                          content_type="application/apply-patch+yaml")

    def get(self, api_version: str, kind: str, namespace: str | None, name: str) -> dict | None:
        try:
            return self._call("get", f"{kind} {name}", "GET", resource_path(api_version, kind, namespace, name))
        except KubeError as exc:
            if exc.status == 404:
                return None
            raise

    def list(self, api_version: str, kind: str, namespace: str | None, label_selector: str = "") -> list[dict]:
        query = [("labelSelector", label_selector)] if label_selector else []
        try:
            where = "" if namespace is None else " in every namespace" if namespace == ALL_NAMESPACES else \
                f" in {namespace}"
            found = self._call("list", f"{kind}s{where}", "GET", resource_path(api_version, kind, namespace),
                               query=query)
        except KubeError as exc:
            if exc.status == 404 and kind == "Stack":
                raise KubeError(f"list Stacks: {api_version} is not served by the control-plane cluster: is the "
                                "Pulumi Kubernetes Operator installed? (docs/operator.md)", 404) from None
            raise
        return list((found or {}).get("items") or [])

    def served(self, groups: Iterable[str], namespaces: Iterable[str] = ()) -> Served:
        """What the API server serves of `groups`: every version of each (a group it does not serve is absent) with
        its kinds; and which of `namespaces` exist. One request for the group list, one per served version of a
        group asked about, one per namespace."""
        from automation.planning.addons import Served

        listed = self._call("discover", "API groups", "GET", "/apis") or {}
        versions = {g.get("name"): [v.get("groupVersion") for v in g.get("versions") or []]
                    for g in listed.get("groups") or []}
        kinds: dict[str, frozenset[str]] = {}
        for group in sorted(groups):
            for api_version in versions.get(group, []):
                found = self._call("discover", api_version, "GET", f"/apis/{api_version}") or {}
                kinds[api_version] = frozenset(r.get("kind") for r in found.get("resources") or []
                                               if "/" not in str(r.get("name")))  # not a subresource
        existing = frozenset(n for n in namespaces if self.get("v1", "Namespace", None, n) is not None)
        return Served(kinds, existing)

    def delete(self, api_version: str, kind: str, namespace: str | None, name: str) -> bool:
        try:
            self._call("delete", f"{kind} {name}", "DELETE", resource_path(api_version, kind, namespace, name),
                       body={"apiVersion": "v1", "kind": "DeleteOptions", "propagationPolicy": "Background"})
        except KubeError as exc:
            if exc.status == 404:
                return False
            raise
        return True


@contextmanager
def cluster_client(fleet: Fleet, kubeconfigs: Mapping[str, str], cluster: str, timeout: float) -> Iterator[KubeClient]:
    """A client of an InferenceCluster's API: its kubeconfig file (`kubeconfigs`: cluster -> path), else the fleet's
    Secret holding it, written to a private temporary file for the client and deleted after (never shown).
    AutomationError naming where to give one when neither is here."""
    import tempfile

    from automation.planning.secret_sources import kubeconfig_env
    from fleet.secrets import kubeconfig_ref

    who = f"InferenceCluster/{cluster}"
    if cluster in kubeconfigs:
        yield KubeClient(Path(kubeconfigs[cluster]), timeout=timeout, cluster=who)
        return
    ic = next((c for c in fleet.of("InferenceCluster") if c.name == cluster), None)
    ref = kubeconfig_ref(ic) if ic is not None else None
    value = fleet.secrets.get(ref) if ref is not None else None
    if value is None:
        raise AutomationError(f"no kubeconfig for it is here: give it with --kubeconfig {cluster}=PATH, "
                              f"${kubeconfig_env(cluster)}=PATH" +
                              (f" or {fleet.secrets.where_to_put(ref)}" if ref is not None else ""))
    with tempfile.TemporaryDirectory(prefix="modelplane-") as private:  # 0700: the kubeconfig is a credential
        path = Path(private) / "kubeconfig"
        path.touch(mode=0o600)
        path.write_text(value.reveal())
        yield KubeClient(path, timeout=timeout, cluster=who)
