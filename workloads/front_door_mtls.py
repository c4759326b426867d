"""The mutually authenticated hop from an Envoy front door to the cluster gateways (issue 65), as upstream
Modelplane v0.5 builds it.

- **On the front door's cluster** (the gateway stack, `gateway_ca_objects`): cert-manager makes a client CA (a
  self-signed Issuer signs an ECDSA P-256 CA Certificate, which backs a CA Issuer) and from it the front door's
  client certificate. The CA's private key never leaves that cluster: trust-manager copies only the CA's public
  certificate into a ConfigMap, which the gateway stack reads (a ConfigMap, never a Secret) and outputs as
  `clientCACertificate`; the record carries it to every platform stack (`Gateways.client_cas`).
- **On every cluster** (its platform stack, `cluster_listener_objects`): the cluster Gateway gets a listener
  `fleet` (HTTPS, port 443, a serving certificate cert-manager makes on that cluster) that only the front doors'
  clients can use: a ClientTrafficPolicy requires a client certificate signed by one of their CAs (a ConfigMap of
  their PEMs). A replica's routes attach to that listener alone (workloads/routing.py), so neither its path nor its
  fleet Host is served on the plain HTTP listener.
- **Fail closed.** Until a front door's CA is recorded (the first `up`, before the gateway stack applied) the
  `fleet` listener does not exist: the replicas' routes name a listener the Gateway does not have, so they attach
  nowhere and nothing serves them. The listener opens when the platform stack runs with the CA
  (automation/execution/session.py runs the platform stacks again in the same `up`).
- **The front door's side** (workloads/fleet_data_plane.py `backend_object`): each replica's Backend speaks TLS
  to the `fleet` listener with SNI its fleet Host and presents the client certificate (a ReferenceGrant in
  `modelplane-system` lets each team namespace's Backends name it). It does not verify the cluster gateway's
  serving certificate (each cluster's CA would have to travel back to the front door): the hop is encrypted and
  the cluster authenticates the front door, not yet the reverse.

A Traefik front door gets none of this: Traefik's Gateway API provider cannot present a client certificate to a
backend (client certificates belong to its own ServersTransport CRD, which this project does not enable), and it
authenticates no caller either, so a cluster gateway's path route grants nothing the front door does not.
"""

from __future__ import annotations

NAMESPACE = "modelplane-system"  # both sides: the front door's host and every cluster's gateway
CLUSTER_GATEWAY = {"name": "inference-gateway", "namespace": NAMESPACE}  # every cluster's own Gateway
CA = "modelplane-front-door-ca"  # the CA Certificate, its Secret, its Issuer, the Bundle and its ConfigMap
CLIENT = "modelplane-front-door-client"  # the front door's client Certificate and its Secret
ROOT = "modelplane-front-door-root"  # the self-signed Issuer that signs the CA
CA_KEY = "ca.crt"  # what trust-manager and Envoy Gateway read a CA from
FLEET_LISTENER, FLEET_PORT = "fleet", 443
CLIENT_CAS = "modelplane-fleet-client-cas"  # a cluster's ConfigMap of the front doors' CAs
SERVING = "modelplane-fleet-listener"  # a cluster's serving Certificate (and Secret) for the fleet listener
SERVING_ISSUER = "modelplane-fleet-listener-root"
CLIENT_VALIDATION = "modelplane-fleet-clients"  # the ClientTrafficPolicy on the fleet listener
CERT_MANAGER = "cert-manager.io/v1"
ECDSA = {"algorithm": "ECDSA", "size": 256}
# The trust-manager Bundle waits until it has written its ConfigMap, so the gateway stack reads it after.
SYNCED = {"pulumi.com/waitFor": "condition=Synced"}


def _meta(name: str) -> dict:
    return {"name": name, "namespace": NAMESPACE, "labels": {"app.kubernetes.io/managed-by": "modelplane"}}


def _issuer(name: str, spec: dict) -> dict:
    return {"apiVersion": CERT_MANAGER, "kind": "Issuer", "metadata": _meta(name), "spec": spec}


def _issuer_ref(name: str) -> dict:
    return {"group": "cert-manager.io", "kind": "Issuer", "name": name}


def gateway_ca_objects(gateway: str) -> list[dict]:
    """The front door's client CA and client certificate, and the Bundle that publishes the CA's certificate (the
    gateway stack's, on its host). The CA lasts ten years (a new one closes every cluster listener until the
    platform stacks run with it); the client certificate 90 days, renewed 30 days before it expires."""
    bundle_meta = {"name": CA, "labels": {"app.kubernetes.io/managed-by": "modelplane"}, "annotations": dict(SYNCED)}
    return [
        _issuer(ROOT, {"selfSigned": {}}),
        {"apiVersion": CERT_MANAGER, "kind": "Certificate", "metadata": _meta(CA), "spec": {
            "isCA": True, "commonName": f"Modelplane front door CA {gateway}", "secretName": CA,
            "duration": "87600h", "privateKey": dict(ECDSA), "issuerRef": _issuer_ref(ROOT)}},
        _issuer(CA, {"ca": {"secretName": CA}}),
        {"apiVersion": CERT_MANAGER, "kind": "Certificate", "metadata": _meta(CLIENT), "spec": {
            "commonName": f"modelplane-front-door-{gateway}", "secretName": CLIENT, "duration": "2160h",
            "renewBefore": "720h", "privateKey": dict(ECDSA), "usages": ["digital signature", "client auth"],
            "issuerRef": _issuer_ref(CA)}},
        # the CA's public certificate only (its Secret's ca.crt), into a ConfigMap in the same namespace
        {"apiVersion": "trust.cert-manager.io/v1alpha1", "kind": "Bundle", "metadata": bundle_meta, "spec": {
            "sources": [{"secret": {"name": CA, "key": CA_KEY}}],
            "target": {"configMap": {"key": CA_KEY},
                       "namespaceSelector": {"matchLabels": {"kubernetes.io/metadata.name": NAMESPACE}}}}},
    ]


def client_certificate_ref() -> dict:
    """What a front door's Backend presents to a cluster's fleet listener."""
    return {"group": "", "kind": "Secret", "name": CLIENT, "namespace": NAMESPACE}


def client_certificate_grant(namespace: str) -> dict:
    """Lets the Backends of `namespace` (a team's, where its endpoints live) name the client certificate's Secret:
    one per namespace, owned by that namespace's endpoints stack."""
    return {"apiVersion": "gateway.networking.k8s.io/v1", "kind": "ReferenceGrant",
            "metadata": {"name": f"front-door-client-{namespace}"[:253], "namespace": NAMESPACE,
                         "labels": {"app.kubernetes.io/managed-by": "modelplane"}},
            "spec": {"from": [{"group": "gateway.envoyproxy.io", "kind": "Backend", "namespace": namespace}],
                     "to": [{"group": "", "kind": "Secret", "name": CLIENT}]}}


def fleet_parent_ref() -> dict:
    """A replica route's only parent: the cluster Gateway's fleet listener."""
    return {**CLUSTER_GATEWAY, "sectionName": FLEET_LISTENER}


def fleet_listener() -> dict:
    return {"name": FLEET_LISTENER, "port": FLEET_PORT, "protocol": "HTTPS",
            "tls": {"mode": "Terminate", "certificateRefs": [{"group": "", "kind": "Secret", "name": SERVING}]},
            "allowedRoutes": {"namespaces": {"from": "All"}}}


def gateway_listeners(client_cas: tuple[str, ...]) -> list[dict]:
    """The cluster Gateway's listeners: plain HTTP (the path routes of a fleet with no Envoy front door), and the
    fleet listener only once a front door's CA is known: with none, it does not exist (fail closed)."""
    http = {"name": "http", "port": 80, "protocol": "HTTP", "allowedRoutes": {"namespaces": {"from": "All"}}}
    return [http, fleet_listener()] if client_cas else [http]


def cluster_listener_objects(client_cas: tuple[str, ...]) -> list[dict]:
    """What the fleet listener needs on a cluster, made before the listener exists: its serving certificate, the
    front doors' CAs and the policy that requires a client certificate from one of them. Nothing without a CA."""
    if not client_cas:
        return []
    gateway_ref = {"group": "gateway.networking.k8s.io", "kind": "Gateway", "name": CLUSTER_GATEWAY["name"],
                   "sectionName": FLEET_LISTENER}
    return [
        _issuer(SERVING_ISSUER, {"selfSigned": {}}),
        {"apiVersion": CERT_MANAGER, "kind": "Certificate", "metadata": _meta(SERVING), "spec": {
            "commonName": "fleet.modelplane.internal", "dnsNames": ["*.fleet.modelplane.internal"],
            "secretName": SERVING, "privateKey": dict(ECDSA), "usages": ["digital signature", "server auth"],
            "issuerRef": _issuer_ref(SERVING_ISSUER)}},
        {"apiVersion": "v1", "kind": "ConfigMap", "metadata": _meta(CLIENT_CAS),
         "data": {CA_KEY: "".join(pem if pem.endswith("\n") else pem + "\n" for pem in client_cas)}},
        {"apiVersion": "gateway.envoyproxy.io/v1alpha1", "kind": "ClientTrafficPolicy",
         "metadata": _meta(CLIENT_VALIDATION), "spec": {
             "targetRefs": [gateway_ref],
             "tls": {"clientValidation": {"caCertificateRefs": [{"group": "", "kind": "ConfigMap", "name": CLIENT_CAS}]}}}},
    ]
