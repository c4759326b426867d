"""How a GKE or Nebius cluster's kubeconfig signs in inside a Pulumi Kubernetes Operator workspace pod.

A workspace pod has none of a laptop's sign-ins (no `gcloud auth login`, no Nebius CLI profile): it has only its
environment and what is mounted into it. So the operator export mounts a credential file from a Kubernetes Secret
(the operator settings' `credentials.gcp` / `credentials.nebius`) at the fixed paths below, and sets the platform
stack's `modelplane:clusterCredentials` to `mounted`; the kubeconfigs that stack outputs then make the exec
plugins read those files. The same kubeconfig serves the Programs that read it by StackReference, whose
workspaces get the same mounts. Pure data: the export (automation/operator) and the components share it.
"""

from __future__ import annotations

MOUNTED = "mounted"  # modelplane:clusterCredentials: the kubeconfig signs in from the mounted files
MOUNT_DIR = "/var/run/modelplane/credentials"
GCP_FILE = f"{MOUNT_DIR}/gcp/credentials.json"  # a service account key: Application Default Credentials
NEBIUS_FILE = f"{MOUNT_DIR}/nebius/credentials.json"  # a service account's authorized key (`nebius iam
# auth-public-key generate --output`), which a Nebius CLI profile names with `--service-account-file`
NEBIUS_PROFILE = "modelplane-workspace"  # the CLI profile the kubeconfig creates in the pod from NEBIUS_FILE
NEBIUS_ENDPOINT = "api.nebius.cloud"
