"""A Kubernetes provider per cluster, from the cluster's kubeconfig output.

`cluster_identifier` is the cluster's name, which never changes: a kubeconfig whose
short-lived token is refreshed on every run then never replaces the provider, and so never
replaces the resources that use it.
"""

from __future__ import annotations

import json
import re

import pulumi
import pulumi_kubernetes as k8s


def provider(name: str, kubeconfig: pulumi.Input[str], parent: pulumi.Resource | None = None,
             depends_on: list | None = None, cluster: str | None = None, adopt: bool = False) -> k8s.Provider:
    """A provider named `<name>-k8s` for the InferenceCluster `cluster` (default: `name`); the preview and the
    deployability check read `clusterIdentifier` to know which cluster a Kubernetes object lands on.

    `adopt`: `<name>-k8s-crds`, the same cluster's provider for the shared CRDs alone (components/crds.py), which
    patches an object already there instead of refusing it: since 4.29 pulumi-kubernetes creates with a plain
    create, AlreadyExists unless `upsertExistingObjects`. Only for them: anything else already in a cluster is
    refused, not silently taken over (and later deleted)."""
    return k8s.Provider(
        f"{name}-k8s-crds" if adopt else f"{name}-k8s",
        kubeconfig=kubeconfig,
        cluster_identifier=cluster or name,
        enable_server_side_apply=True,
        upsert_existing_objects=True if adopt else None,
        opts=pulumi.ResourceOptions(parent=parent, depends_on=depends_on or []),
    )


_PLAIN = re.compile(r"^[A-Za-z0-9_-][A-Za-z0-9_./=-]*$")  # `--format`, `json`: as the CLIs write them


def _flow_scalar(arg: str) -> str:
    """An argument in a YAML flow sequence: as it is when plain, else a JSON string (which YAML reads as is)."""
    return arg if _PLAIN.match(arg) else json.dumps(arg)


def exec_kubeconfig(name: str, server: str, ca_data: str, command: str, args: list[str] | None = None,
                    provide_cluster_info: bool = False, install_hint: str = "") -> str:
    """A kubeconfig whose user authenticates through a CLI plugin (no long-lived credential inside).

    `ca_data` is the base64 of the PEM certificate, as `certificate-authority-data` takes it."""
    server = server if server.startswith("https://") else f"https://{server}"
    arguments = f"\n      args: [{', '.join(_flow_scalar(a) for a in args)}]" if args else ""
    return f"""apiVersion: v1
kind: Config
clusters:
- name: {name}
  cluster:
    server: {server}
    certificate-authority-data: {ca_data}
contexts:
- name: {name}
  context: {{cluster: {name}, user: {name}}}
current-context: {name}
users:
- name: {name}
  user:
    exec:
      apiVersion: client.authentication.k8s.io/v1beta1
      command: {command}{arguments}
      provideClusterInfo: {"true" if provide_cluster_info else "false"}
      installHint: {install_hint}
"""
