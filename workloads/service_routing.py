"""Control-plane routing: one HTTPRoute per ModelService on the fleet Gateway.

A ModelService selects endpoints by labels, in its own namespace only (the reference
selects across namespaces). An endpoint is either a placed replica that is ready on a
cluster with a gateway address (`http://<cluster gateway>/<ns>/<replica>/v1`, rewritten to
`/<ns>/<replica>/`), or an external ModelEndpoint. Each endpoint is a selectorless Service
plus an EndpointSlice pointing at its host, composed once however many services select it
(the namespace's `endpoints-<ns>` stack owns them); each service's route sends
`/<ns>/<service>/` to its endpoints with their own prefix rewrite and a weight. External
`https` endpoints get TLS to the backend (BackendTLSPolicy, system CAs, SNI and Host set to
the endpoint's host).
"""

from __future__ import annotations

import ipaddress
import math
from dataclasses import dataclass, field
from functools import cached_property, lru_cache, reduce
from urllib.parse import urlsplit

from fleet.names import bounded

FLEET_GATEWAY = {"name": "modelplane", "namespace": "modelplane-system"}
MAX_WEIGHT = 1_000_000
PLACEHOLDER_ANNOTATION = "modelplane.ai/placeholder"
PENDING_FRONT_DOOR = "fleet-gateway.pending.modelplane.invalid"  # the fleet gateway's address before it has one
# On a replica's EndpointSlice: the cluster whose gateway it points at. The endpoints stack's program reads that
# cluster's `gatewayAddress` from its platform stack when it applies, so the slice never waits for a second `up`.
GATEWAY_OF_ANNOTATION = "modelplane.ai/gateway-of"


def service_address(front_door: str, namespace: str, name: str, tls: bool = False) -> str:
    """A ModelService's OpenAI-compatible base address (the reference's, no trailing slash): https when the
    front door serves only HTTPS (InferenceGateway envoy.tls)."""
    return f"{'https' if tls else 'http'}://{front_door}/{namespace}/{name}"


def backend_service_name(endpoint: str) -> str:
    """The control-plane Service of an endpoint (a Service name must start with a letter)."""
    return bounded(f"ep-{endpoint}", 63)


@dataclass(frozen=True)
class Endpoint:
    name: str
    namespace: str
    url: str
    rewrite_path: str | None
    labels: dict = field(default_factory=dict, hash=False, compare=False)
    placeholder: str | None = None  # why the address is not known yet (render and previews only)
    composed: bool = False  # a placed replica's endpoint (the reference composes a ModelEndpoint for it)
    cluster: str | None = None  # a placed replica's cluster, whose gateway the endpoint points at

    @cached_property
    def parsed(self):  # read several times for each object of the endpoint's (host, port, scheme)
        return urlsplit(self.url)

    def __repr__(self) -> str:
        # part of every service and endpoints stack's input digest that routes to it (workloads/render.py
        # `_digest`): made once, as the dataclass would (its labels are never changed once it is made), and kept
        # in the instance's dict by hand (Python 3.11's cached_property takes a lock to fill it)
        text = self.__dict__.get("_text")
        if text is None:
            text = self.__dict__["_text"] = (
                f"Endpoint(name={self.name!r}, namespace={self.namespace!r}, url={self.url!r}, "
                f"rewrite_path={self.rewrite_path!r}, labels={self.labels!r}, placeholder={self.placeholder!r}, "
                f"composed={self.composed!r}, cluster={self.cluster!r})")
        return text

    @property
    def host(self) -> str:
        return self.parsed.hostname or ""

    @property
    def port(self) -> int:
        parts = self.parsed
        return parts.port or (443 if parts.scheme == "https" else 80)

    @property
    def tls(self) -> bool:
        return self.parsed.scheme == "https"

    @property
    def service_name(self) -> str:
        return backend_service_name(self.name)


def distribute_weights(groups: list[tuple[int, list[Endpoint]]]) -> list[tuple[Endpoint, int]]:
    """Per-endpoint weights from per-group weights, as the reference computes them.

    Each group's weight is split evenly over its endpoints (remainder to the first ones),
    scaled so every endpoint gets at least 1, reduced by the GCD, capped at 1,000,000.
    """
    groups = [(w, eps) for w, eps in groups if eps]
    if not groups:
        return []
    scale = max(1, max(math.ceil(len(eps) / w) for w, eps in groups))
    out: list[tuple[Endpoint, int]] = []
    for weight, endpoints in groups:
        total = weight * scale
        base, extra = divmod(total, len(endpoints))
        out += [(ep, base + (1 if i < extra else 0)) for i, ep in enumerate(endpoints)]
    divisor = reduce(math.gcd, (w for _, w in out))
    out = [(ep, w // divisor) for ep, w in out]
    top = max(w for _, w in out)
    if top > MAX_WEIGHT:
        out = [(ep, max(1, round(w * MAX_WEIGHT / top))) for ep, w in out]
    return out


class EndpointIndex:
    """Every routable endpoint, by namespace in name order, and by label within a namespace: a service selects
    only among its own namespace's endpoints, and a selector's rarest label narrows them first (a fleet of
    thousands of services and replicas would otherwise compare every service with every endpoint)."""

    def __init__(self, endpoints: list[Endpoint]):
        self.by_namespace: dict[str, list[Endpoint]] = {}
        for ep in sorted(endpoints, key=lambda e: e.name):
            self.by_namespace.setdefault(ep.namespace, []).append(ep)
        self._labels: dict[str, dict[tuple[str, str], list[Endpoint]]] = {}  # per namespace, made when first asked

    def candidates(self, namespace: str, wanted: dict[str, str]) -> list[Endpoint]:
        """The namespace's endpoints that may match `wanted`, in name order: those with its rarest label (every one
        when it has none)."""
        endpoints = self.by_namespace.get(namespace, [])
        if not wanted:
            return endpoints
        labels = self._labels.get(namespace)
        if labels is None:
            labels = self._labels[namespace] = {}
            for ep in endpoints:
                for item in ep.labels.items():
                    labels.setdefault(item, []).append(ep)
        return min((labels.get(item, []) for item in wanted.items()), key=len)


def select(service, endpoints: EndpointIndex) -> list[tuple[int, list[Endpoint]]]:
    """(weight, endpoints) per spec.endpoints entry; an endpoint counts only for the first entry it matches."""
    seen: set[str] = set()
    groups = []
    for entry in service.spec.endpoints:
        wanted = entry.selector.matchLabels
        matched = []
        for ep in endpoints.candidates(service.namespace, wanted):
            if ep.name in seen:
                continue
            if all(ep.labels.get(k) == v for k, v in wanted.items()):
                matched.append(ep)
                seen.add(ep.name)
        groups.append((entry.weight, matched))
    return groups


@lru_cache(maxsize=1 << 12)  # a few gateway addresses, each read for every endpoint behind it
def address_type(host: str) -> str:
    try:
        return "IPv6" if ipaddress.ip_address(host).version == 6 else "IPv4"
    except ValueError:
        return "FQDN"


def gateway_endpoints(address: str | None) -> list[dict]:
    """A replica slice's endpoints: its cluster gateway's address, ready (some gateways skip endpoints whose
    readiness is unset); none while the gateway has no address, so the slice routes nowhere rather than to a
    placeholder. Platform stacks output it (`gatewayEndpoints`) for the operator's Programs to use as is."""
    return [{"addresses": [address], "conditions": {"ready": True}}] if address else []


def slice_address_type(address: str | None) -> str:
    """The slice's addressType for that address (an empty slice's is immaterial: IPv4)."""
    return address_type(address) if address else "IPv4"


REPLICA_PORT = 443  # under backend Envoy a replica's endpoint is its cluster gateway's fleet listener


def gateway_service_spec(address: str | None) -> dict:
    """A replica endpoint's Service under backend Envoy, which reaches it by the Service's DNS name
    (workloads/fleet_data_plane.py): a ClusterIP Service over the slice for an IP, an ExternalName for a
    hostname (kube-proxy skips FQDN slices). Platform stacks output it (`gatewayServiceSpec`) for the
    operator's Programs."""
    ports = [{"name": "backend", "port": REPLICA_PORT, "targetPort": REPLICA_PORT, "protocol": "TCP"}]
    if address and address_type(address) == "FQDN":
        return {"type": "ExternalName", "externalName": address, "ports": ports}
    return {"ports": ports}


def backend_objects(ep: Endpoint, envoy: bool = False) -> list[dict]:
    """The endpoint's Service and EndpointSlice, and for an https endpoint its BackendTLSPolicy. Under backend
    Envoy (`envoy`) the Backend objects carry the TLS settings, and a replica's Service follows its cluster
    gateway's address (`gateway_service_spec`)."""
    name = ep.service_name
    labels = {"modelplane.ai/endpoint": bounded(ep.name, 63)}
    annotations = {PLACEHOLDER_ANNOTATION: ep.placeholder} if ep.placeholder else None
    # a replica's address is its cluster's gateway's: only its slice says so (the Service is the same either way)
    meta = {"name": name, "namespace": ep.namespace, "labels": labels,
            **({"annotations": annotations} if annotations and not ep.cluster else {})}
    slice_meta = {**meta, "annotations": {**(annotations or {}), GATEWAY_OF_ANNOTATION: ep.cluster}} if ep.cluster else meta
    service_meta = slice_meta if envoy and ep.cluster else dict(meta)
    objects: list[dict] = [
        {"apiVersion": "v1", "kind": "Service", "metadata": service_meta,
         "spec": gateway_service_spec(None if ep.placeholder else ep.host) if envoy and ep.cluster else
         {"ports": [{"name": "backend", "port": ep.port, "targetPort": ep.port, "protocol": "TCP"}]}},
        {"apiVersion": "discovery.k8s.io/v1", "kind": "EndpointSlice",
         "metadata": {**slice_meta, "labels": {**labels, "kubernetes.io/service-name": name,
                                         "endpointslice.kubernetes.io/managed-by": "modelplane.ai"}},
         "addressType": slice_address_type(ep.host),
         "endpoints": gateway_endpoints(ep.host),
         "ports": [{"name": "backend", "port": ep.port, "protocol": "TCP"}]},
    ]
    if ep.tls and not envoy:
        objects.append({
            "apiVersion": "gateway.networking.k8s.io/v1", "kind": "BackendTLSPolicy", "metadata": dict(meta),
            "spec": {"targetRefs": [{"group": "", "kind": "Service", "name": name}],
                     "validation": {"hostname": ep.host, "wellKnownCACertificates": "System"}},
        })
    return objects


def route_objects(service, weighted: list[tuple[Endpoint, int]]) -> list[dict]:
    """The service's HTTPRoute over the endpoints it routes to, with their weights (`distribute_weights` of what
    it selects), whose objects `backend_objects` composes once."""
    backend_refs = []
    for ep, weight in weighted:
        rewrite: dict = {}
        if ep.rewrite_path:
            rewrite["path"] = {"type": "ReplacePrefixMatch", "replacePrefixMatch": ep.rewrite_path}
        if ep.tls:
            rewrite["hostname"] = ep.host  # the provider routes on its own Host
        ref: dict = {"name": ep.service_name, "port": ep.port, "weight": weight}
        if rewrite:
            ref["filters"] = [{"type": "URLRewrite", "urlRewrite": rewrite}]
        backend_refs.append(ref)
    rule: dict = {"matches": [{"path": {"type": "PathPrefix", "value": f"/{service.namespace}/{service.name}/"}}]}
    if backend_refs:
        rule["backendRefs"] = backend_refs
    route = {
        "apiVersion": "gateway.networking.k8s.io/v1", "kind": "HTTPRoute",
        "metadata": {"name": service.name, "namespace": service.namespace,
                     "labels": {"modelplane.ai/service": service.name}},
        "spec": {"parentRefs": [dict(FLEET_GATEWAY)], "rules": [rule]},
    }
    return [route]
