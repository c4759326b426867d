"""Issue 65 (high): the front door could be walked around. Every replica was routed on its cluster's Gateway by
path and by fleet Host on a plain HTTP listener, so anyone who reached a cluster gateway called a model without
the front door's keys, limits or token count.

Every front-door shape the project composes is planned here as `up` plans it (the record holding the front
door's client CA, as the gateway stack outputs it), and, route by route, every HTTPRoute on a cluster Gateway
must attach only to listeners whose clients are checked against a front door's CA (a ClientTrafficPolicy with
`caCertificateRefs`, on an HTTPS listener). A Traefik front door, or none, authenticates nobody: its shapes keep
the plain path route, and the test says there is no authentication to walk around (workloads/front_door_mtls.py
says why Traefik cannot take part in the hop).
"""

from __future__ import annotations

import pytest

from automation.planning.payloads import PlatformPayload
from automation.planning.stacks import desired_state
from automation.record.applied import Applied, AppliedStack
from tests.manifests import cluster, deployment, endpoint, gateway, run, service
from tests.test_fleet_data_plane import READY, envoy_gateway, with_access
from tests.test_workloads import L4
from workloads import front_door_mtls
from workloads.gateways import Gateways
from workloads.schemas import check

CA = "-----BEGIN CERTIFICATE-----\nZmFrZSBmcm9udCBkb29yIENB\n-----END CERTIFICATE-----\n"
CLUSTER_GATEWAY = front_door_mtls.CLUSTER_GATEWAY


def external(name: str, url: str) -> dict:
    ext = endpoint(name)
    ext["metadata"]["labels"] = {"provider": name}
    ext["spec"] = {"url": url, "rewritePath": "/"}
    return ext


def fleet(front_door: dict | None) -> list[dict]:
    """Two clusters with known gateways, a two-replica deployment on them and a service over it and an external
    endpoint, behind `front_door` (None: no fleet gateway at all)."""
    svc = service("qwen")
    svc["spec"]["endpoints"].append({"selector": {"matchLabels": {"provider": "together"}}})
    return [L4, cluster("a", status={"gateway": {"address": "34.1.2.3"}, **READY}),
            cluster("b", status={"gateway": {"address": "k8s-b.elb.example.com"}, **READY}),
            deployment("qwen", replicas=2), deployment("kimi"), svc, service("kimi", deployment_name="kimi"),
            external("together", "https://api.together.xyz/v1"), *([front_door] if front_door else [])]


def tls_front_door() -> dict:
    gw = with_access()
    gw["spec"]["envoy"]["tls"] = {"certificateSecretName": "front-door-cert"}
    return gw


# shape -> (its InferenceGateway, whether its front door authenticates callers, whether it gets the mTLS hop)
SHAPES = {
    "envoy-api-keys-and-limits": (with_access, True, True),
    "envoy-jwt": (lambda: with_access(jwt={"issuer": "https://idp.example.com",
                                          "jwksUri": "https://idp.example.com/jwks"}), True, True),
    "envoy-https-front-door": (tls_front_door, True, True),
    "envoy-no-access": (envoy_gateway, False, True),
    "traefik": (gateway, False, False),
    "no-fleet-gateway": (lambda: None, False, False),
}


def planned(front_door: dict | None, client_cas: tuple[str, ...] = (CA,)):
    loaded = run(*fleet(front_door))
    assert loaded.errors == [], [str(p) for p in loaded.errors]
    state = desired_state(loaded.fleet, gateways=Gateways({}, None, client_cas))
    assert state.rendered.problems == [], [str(p) for p in state.rendered.problems]
    return state


def cluster_gateways(state) -> dict[str, tuple[list[dict], list[dict]]]:
    """Cluster -> (its Gateway's listeners, the objects made for them), as its platform stack makes them
    (components/serving_stack.py, from its payload's client CAs)."""
    out = {}
    for spec in state.specs.values():
        if isinstance(spec.payload, PlatformPayload):
            cas = spec.payload.client_cas
            out[spec.payload.cluster.name] = (front_door_mtls.gateway_listeners(cas),
                                              front_door_mtls.cluster_listener_objects(cas))
    return out


def cluster_routes(state) -> list[tuple[str, dict]]:
    """Every HTTPRoute the plan puts on a cluster's own Gateway: (cluster, route)."""
    out = []
    for stack, target, obj in state.rendered.objects():
        if target != "control-plane" and obj["kind"] == "HTTPRoute" and any(
                ref.get("name") == CLUSTER_GATEWAY["name"] for ref in obj["spec"]["parentRefs"]):
            out.append((target, obj))
    return out


def attached_listeners(route: dict, listeners: list[dict]) -> list[dict]:
    """The listeners a route attaches to: the one its parentRef names, every one when it names none, and none
    when it names a listener the Gateway does not have."""
    out = []
    for ref in route["spec"]["parentRefs"]:
        section = ref.get("sectionName")
        out += [listener for listener in listeners if section in (None, listener["name"])]
    return out


def validates_clients(listener: dict, objects: list[dict]) -> bool:
    """An HTTPS listener with a ClientTrafficPolicy that requires a certificate from a CA in a ConfigMap that
    holds one."""
    if listener["protocol"] != "HTTPS":
        return False
    config_maps = {o["metadata"]["name"]: o for o in objects if o["kind"] == "ConfigMap"}
    for policy in (o for o in objects if o["kind"] == "ClientTrafficPolicy"):
        targets = [t for t in policy["spec"]["targetRefs"] if t["kind"] == "Gateway"
                   and t["name"] == CLUSTER_GATEWAY["name"] and t.get("sectionName") in (None, listener["name"])]
        validation = policy["spec"].get("tls", {}).get("clientValidation", {})
        refs = validation.get("caCertificateRefs") or []
        if targets and refs and not validation.get("optional") and all(
                "BEGIN CERTIFICATE" in config_maps.get(r["name"], {}).get("data", {}).get("ca.crt", "")
                for r in refs if r["kind"] == "ConfigMap"):
            return True
    return False


@pytest.mark.parametrize("shape", sorted(SHAPES))
def test_no_cluster_gateway_serves_a_model_without_the_front_doors_authentication(shape):
    make, authenticates, mtls = SHAPES[shape]
    state = planned(make())
    gateways = cluster_gateways(state)
    routes = cluster_routes(state)
    assert {c for c, _ in routes} == {"a", "b"}  # every replica is routed on its cluster
    for target, route in routes:
        listeners, objects = gateways[target]
        attached = attached_listeners(route, listeners)
        name = f"{target}: HTTPRoute/{route['metadata']['name']}"
        if mtls:
            assert attached, f"{name} attaches to no listener of a cluster whose front door's CA is known"
            open_doors = [listener["name"] for listener in attached if not validates_clients(listener, objects)]
            assert open_doors == [], f"{name} is served without a front door's client certificate on {open_doors}"
        else:
            # a Traefik front door, or none, authenticates nobody: the path route is the way in, not a way around
            assert not authenticates and [listener["protocol"] for listener in attached] == ["HTTP"], name
    if mtls:  # the front door's side: every Backend of a replica presents the client certificate, granted
        backends = [o for _, t, o in state.rendered.objects() if t == "control-plane" and o["kind"] == "Backend"]
        replicas = [b for b in backends if "fleet.modelplane.internal" in b["spec"]["endpoints"][0].get("hostname", "")]
        assert replicas and all(b["spec"]["tls"]["clientCertificateRef"] == front_door_mtls.client_certificate_ref()
                                for b in replicas)
        grants = [o for _, t, o in state.rendered.objects() if o["kind"] == "ReferenceGrant"]
        assert [g["spec"]["from"][0]["namespace"] for g in grants] == ["ml-team"]
    for objects in [o for _, objects in gateways.values() for o in objects]:
        assert check(objects) == []
    assert all(check(o) == [] for _, _, o in state.rendered.objects())


def test_before_the_front_doors_ca_is_recorded_the_fleet_listener_does_not_exist_and_routes_attach_nowhere():
    """The first `up` plans the platform stacks before the gateway stack made its CA: fail closed."""
    state = planned(with_access(), client_cas=())
    for target, route in cluster_routes(state):
        listeners, objects = cluster_gateways(state)[target]
        assert [listener["name"] for listener in listeners] == ["http"] and objects == []
        assert attached_listeners(route, listeners) == [], route["metadata"]["name"]


def test_the_record_carries_the_front_doors_ca_and_ignores_what_is_not_a_certificate():
    def record(ca) -> Gateways:
        gateway_stack = AppliedStack("f", (), {"address": "203.0.113.7", "clientCACertificate": ca})
        return Applied({"gateway": gateway_stack}).gateways()

    assert record(CA).client_cas == (CA,) and record(CA).front_door == "203.0.113.7"
    assert record("not a certificate").client_cas == () and record(None).client_cas == ()
    # platform stacks' fingerprints follow the CA: a new one re-runs them (and opens their listeners)
    before = {n: s.fingerprint for n, s in planned(with_access(), ()).specs.items() if n.startswith("platform-")}
    after = {n: s.fingerprint for n, s in planned(with_access()).specs.items() if n.startswith("platform-")}
    assert before.keys() == after.keys() and all(before[n] != after[n] for n in before)
