"""The portal served inside the control-plane cluster as an aggregated API (`v1alpha1.modelplane.ai`).

The API server proxies `/apis/modelplane.ai/v1alpha1/...` to `modelplane serve` running in the cluster, after
authenticating the caller; the portal trusts the proxy's client certificate (the cluster's request-header CA, from
the `kube-system/extension-apiserver-authentication` ConfigMap) and its `X-Remote-User`/`X-Remote-Group` headers,
and asks the cluster whether that user may do what it asks (a SubjectAccessReview). So `kubectl get
modeldeployments` against the control-plane cluster works with the cluster's own users and RBAC.

Asked for by InferenceGateway annotations (the gateway stack deploys it, on the control-plane cluster):

    modelplane.ai/aggregated-api: enabled                   turn it on
    modelplane.ai/aggregated-api-image: <image>             an image with this project installed (the project's
                                                            Dockerfile): the default path, it starts in seconds
    modelplane.ai/aggregated-api-source: <pip requirement>   or this project, installed at start into the operator's
                                                            Pulumi image (minutes), e.g.
                                                            "modelplane-pulumi @ git+https://github.com/org/repo@<commit>"
    modelplane.ai/aggregated-api-executor: none | operator  default none (`--no-apply`): accept and plan only
                                                            (fleet autoscaling needs operator: fleet_autoscaling.py)
    modelplane.ai/aggregated-api-serving-secret: <name>     a kubernetes.io/tls Secret you made in the portal's
    modelplane.ai/aggregated-api-ca-bundle: <base64 PEM>    namespace, and the CA that signed it; default a
                                                            cert-manager Certificate (the platform stack installs it)

The portal reads its tokens (and `operator-settings.yaml` with the operator executor) from the Secret
`modelplane-portal` in its namespace, which you create; its SQLite database is on a volume of its own.
"""

from __future__ import annotations

import base64
import binascii
import re

GROUP = "modelplane.ai"
VERSION = "v1alpha1"
PREFIX = "modelplane.ai/aggregated-api"
NAMESPACE = "modelplane-portal"
NAME = "modelplane-portal"
CONFIG_SECRET = "modelplane-portal"  # the user's: tokens.yaml (and operator-settings.yaml)
TLS_SECRET = "modelplane-portal-tls"
PORT = 8443  # the portal's TLS port in the pod; the Service's 443 points at it
# The operator's workspace image (automation/operator/export.py PULUMI_IMAGE; a test holds them equal): a pinned
# image with Python, which installs this project from its repository at a commit, as the workspaces do.
DEFAULT_IMAGE = "pulumi/pulumi:3.272.0-nonroot"
FRONT_PROXY_DIR = "/run/front-proxy"
LABELS = {"app.kubernetes.io/name": NAME, "app.kubernetes.io/part-of": "modelplane"}
KNOWN = {PREFIX, f"{PREFIX}-source", f"{PREFIX}-image", f"{PREFIX}-executor", f"{PREFIX}-serving-secret",
         f"{PREFIX}-ca-bundle"}
DNS_LABEL = re.compile(r"^[a-z0-9]([-a-z0-9]{0,61}[a-z0-9])?$")


def enabled(annotations: dict[str, str] | None) -> bool:
    return (annotations or {}).get(PREFIX) == "enabled"


def errors(annotations: dict[str, str] | None) -> list[tuple[str, str]]:
    """What is wrong with the InferenceGateway's aggregated-API annotations, as (key, message)."""
    annotations = annotations or {}
    keys = {k for k in annotations if k.startswith(PREFIX)}
    if not keys:
        return []
    if not enabled(annotations):
        return [(PREFIX, f"must be 'enabled' to serve the aggregated API (found {annotations.get(PREFIX)!r})")]
    found = [(key, "unknown aggregated-api annotation") for key in sorted(keys - KNOWN)]
    if f"{PREFIX}-source" not in annotations and f"{PREFIX}-image" not in annotations:
        found.append((f"{PREFIX}-image", "name an image with modelplane installed (built from the project's "
                                         "Dockerfile, docs/portal.md); or a -source to install at start (minutes)"))
    if annotations.get(f"{PREFIX}-executor", "none") not in ("none", "operator"):
        found.append((f"{PREFIX}-executor", "must be 'none' or 'operator'"))
    secret, bundle = annotations.get(f"{PREFIX}-serving-secret"), annotations.get(f"{PREFIX}-ca-bundle")
    if (secret is None) != (bundle is None):
        found.append((f"{PREFIX}-serving-secret", "goes with -ca-bundle (the CA the API server verifies it with)"))
    if secret is not None and not DNS_LABEL.match(secret):
        found.append((f"{PREFIX}-serving-secret", "must be a Secret's name"))
    if bundle is not None:
        try:
            if b"BEGIN CERTIFICATE" not in base64.b64decode(bundle, validate=True):
                raise ValueError
        except (binascii.Error, ValueError):
            found.append((f"{PREFIX}-ca-bundle", "must be base64 of PEM certificates"))
    return found


STARTUP_PERIOD = 5
# How long a portal may take to serve after its container starts: an image with the project installed (the default
# path, docs/portal.md) imports and serves in seconds; a `-source` install into an empty venv takes minutes.
STARTUP_SECONDS = {"image": 120, "source": 900}
PULL_SECONDS = 180  # pulling the image and scheduling the pod, before the container starts


def _startup_failures(source: str | None) -> int:
    return STARTUP_SECONDS["source" if source else "image"] // STARTUP_PERIOD


def rollout_seconds(source: str | None) -> int:
    """How long the gateway stack waits for the portal's Deployment (`pulumi.com/timeoutSeconds`)."""
    return PULL_SECONDS + STARTUP_SECONDS["source" if source else "image"]


def _command(annotations: dict[str, str]) -> list[str]:
    """A shell line: install the project (when a source is given), fetch the request-header CA, run the portal."""
    source = annotations.get(f"{PREFIX}-source")
    operator = annotations.get(f"{PREFIX}-executor") == "operator"
    bin_dir = "/opt/modelplane/venv/bin/" if source else ""
    install = (f'python3 -m venv /opt/modelplane/venv && {bin_dir}pip install --no-cache-dir --quiet "$MODELPLANE_SOURCE"'
               " && " if source else "")
    serve = " ".join([
        f"exec {bin_dir}modelplane serve --host 0.0.0.0 --port {PORT}", "--tokens /etc/modelplane/tokens.yaml",
        "--data-dir /var/lib/modelplane", "--tls-cert /etc/modelplane-tls/tls.crt --tls-key /etc/modelplane-tls/tls.key",
        f"--requestheader-client-ca {FRONT_PROXY_DIR}/ca.crt",
        f'--requestheader-allowed-names "$(cat {FRONT_PROXY_DIR}/allowed-names)"',
        "--executor operator --operator-settings /etc/modelplane/operator-settings.yaml" if operator else "--no-apply"])
    # the CA is the cluster's, read with the pod's service account (a RoleBinding below lets it)
    return ["sh", "-c", f"{install}{bin_dir}python3 -m automation.portal.front_proxy {FRONT_PROXY_DIR} && {serve}"]


def objects(annotations: dict[str, str] | None) -> list[dict]:
    """Everything the aggregated API needs in the control-plane cluster; [] when it is not asked for.
    Raises ValueError naming the annotations when they are wrong."""
    annotations = dict(annotations or {})
    if not enabled(annotations):
        return []
    wrong = errors(annotations)
    if wrong:
        raise ValueError("; ".join(f"{key}: {message}" for key, message in wrong))
    meta = {"namespace": NAMESPACE, "labels": dict(LABELS)}
    service_dns = [f"{NAME}.{NAMESPACE}.svc", f"{NAME}.{NAMESPACE}.svc.cluster.local"]
    user_secret = annotations.get(f"{PREFIX}-serving-secret")
    tls_secret = user_secret or TLS_SECRET
    out: list[dict] = [
        {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": NAMESPACE, "labels": dict(LABELS)}},
        {"apiVersion": "v1", "kind": "ServiceAccount", "metadata": {"name": NAME, **meta}},
        # TokenReview and SubjectAccessReview: how the portal asks the cluster who may do what
        {"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRoleBinding",
         "metadata": {"name": f"{NAME}:system:auth-delegator", "labels": dict(LABELS)},
         "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": "system:auth-delegator"},
         "subjects": [{"kind": "ServiceAccount", "name": NAME, "namespace": NAMESPACE}]},
        # the request-header client CA: which proxy's X-Remote-User to believe
        {"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "RoleBinding",
         "metadata": {"name": f"{NAME}:extension-apiserver-authentication-reader", "namespace": "kube-system",
                      "labels": dict(LABELS)},
         "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "Role",
                     "name": "extension-apiserver-authentication-reader"},
         "subjects": [{"kind": "ServiceAccount", "name": NAME, "namespace": NAMESPACE}]},
        {"apiVersion": "v1", "kind": "PersistentVolumeClaim", "metadata": {"name": f"{NAME}-data", **meta},
         "spec": {"accessModes": ["ReadWriteOnce"], "resources": {"requests": {"storage": "1Gi"}}}},
    ]
    if user_secret is None:  # a CA of the portal's own, made and renewed by cert-manager, and a certificate it signs
        issuer = {"apiVersion": "cert-manager.io/v1", "kind": "Issuer"}
        certificate = {"apiVersion": "cert-manager.io/v1", "kind": "Certificate"}
        out += [
            {**issuer, "metadata": {"name": f"{NAME}-selfsigned", **meta}, "spec": {"selfSigned": {}}},
            {**certificate, "metadata": {"name": f"{NAME}-ca", **meta},
             "spec": {"isCA": True, "commonName": f"{NAME} CA", "secretName": f"{NAME}-ca",
                      "privateKey": {"algorithm": "ECDSA", "size": 256},
                      "issuerRef": {"name": f"{NAME}-selfsigned", "kind": "Issuer", "group": "cert-manager.io"}}},
            {**issuer, "metadata": {"name": f"{NAME}-ca", **meta}, "spec": {"ca": {"secretName": f"{NAME}-ca"}}},
            {**certificate, "metadata": {"name": TLS_SECRET, **meta},
             "spec": {"secretName": TLS_SECRET, "dnsNames": service_dns, "usages": ["server auth"],
                      "privateKey": {"algorithm": "ECDSA", "size": 256, "rotationPolicy": "Always"},
                      "issuerRef": {"name": f"{NAME}-ca", "kind": "Issuer", "group": "cert-manager.io"}}},
        ]
    source = annotations.get(f"{PREFIX}-source")
    container = {
        "name": "portal", "image": annotations.get(f"{PREFIX}-image", DEFAULT_IMAGE), "command": _command(annotations),
        "env": ([{"name": "MODELPLANE_SOURCE", "value": source}] if source else [])
        + [{"name": "MODELPLANE_CACHE_DIR", "value": "/var/lib/modelplane/cache"}],
        "ports": [{"name": "https", "containerPort": PORT, "protocol": "TCP"}],
        "readinessProbe": {"httpGet": {"path": "/readyz", "port": "https", "scheme": "HTTPS"}, "periodSeconds": 10},
        # Start-up has its own allowance (an install at start takes minutes, an image's portal seconds); liveness
        # only begins after it, so a hung portal is restarted in a minute, not after a fixed five-minute delay.
        "startupProbe": {"httpGet": {"path": "/healthz", "port": "https", "scheme": "HTTPS"},
                         "periodSeconds": STARTUP_PERIOD, "failureThreshold": _startup_failures(source)},
        "livenessProbe": {"httpGet": {"path": "/healthz", "port": "https", "scheme": "HTTPS"}, "periodSeconds": 20},
        "resources": {"requests": {"cpu": "500m", "memory": "1Gi"}, "limits": {"memory": "2Gi"}},
        "securityContext": {"allowPrivilegeEscalation": False, "runAsNonRoot": True,
                            "capabilities": {"drop": ["ALL"]}},
        "volumeMounts": [{"name": "config", "mountPath": "/etc/modelplane", "readOnly": True},
                         {"name": "tls", "mountPath": "/etc/modelplane-tls", "readOnly": True},
                         {"name": "data", "mountPath": "/var/lib/modelplane"},
                         {"name": "front-proxy", "mountPath": FRONT_PROXY_DIR},
                         {"name": "install", "mountPath": "/opt/modelplane"}],
    }
    out += [
        # the gateway stack waits for the portal as long as its start may take, not Pulumi's default ten minutes
        {"apiVersion": "apps/v1", "kind": "Deployment",
         "metadata": {"name": NAME, **meta, "annotations": {"pulumi.com/timeoutSeconds": str(rollout_seconds(source))}},
         "spec": {"replicas": 1, "strategy": {"type": "Recreate"},  # one SQLite writer at a time
                  "selector": {"matchLabels": dict(LABELS)},
                  "template": {"metadata": {"labels": dict(LABELS)}, "spec": {
                      "serviceAccountName": NAME,
                      "securityContext": {"runAsNonRoot": True, "runAsUser": 1000, "fsGroup": 1000},
                      "containers": [container],
                      "volumes": [{"name": "config", "secret": {"secretName": CONFIG_SECRET}},
                                  {"name": "tls", "secret": {"secretName": tls_secret}},
                                  {"name": "data", "persistentVolumeClaim": {"claimName": f"{NAME}-data"}},
                                  {"name": "front-proxy", "emptyDir": {}},
                                  {"name": "install", "emptyDir": {}}]}}}},
        {"apiVersion": "v1", "kind": "Service", "metadata": {"name": NAME, **meta},
         "spec": {"selector": dict(LABELS), "ports": [{"name": "https", "port": 443, "targetPort": "https",
                                                         "protocol": "TCP"}]}},
    ]
    api_service: dict = {
        "apiVersion": "apiregistration.k8s.io/v1", "kind": "APIService",
        "metadata": {"name": f"{VERSION}.{GROUP}", "labels": dict(LABELS)},
        "spec": {"group": GROUP, "version": VERSION, "groupPriorityMinimum": 1000, "versionPriority": 15,
                 "service": {"name": NAME, "namespace": NAMESPACE, "port": 443}}}
    if user_secret is None:  # cert-manager's cainjector writes spec.caBundle from the certificate's CA
        api_service["metadata"]["annotations"] = {"cert-manager.io/inject-ca-from": f"{NAMESPACE}/{TLS_SECRET}"}
    else:
        api_service["spec"]["caBundle"] = annotations[f"{PREFIX}-ca-bundle"]
    return out + [api_service]
