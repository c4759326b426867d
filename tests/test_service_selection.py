"""A ModelService selects endpoints of its own namespace by labels (workloads/service_routing.py `select`), from an
index made once per render: the index must give what comparing the service with every endpoint gives, and must
not make a service look at every endpoint of the fleet (2,000 services over 4,000 replicas took seconds)."""

from __future__ import annotations

from types import SimpleNamespace

from hypothesis import given, settings
from hypothesis import strategies as st

from workloads.service_routing import Endpoint, EndpointIndex, select

NAMESPACES = ["a", "b"]
LABELS = st.dictionaries(st.sampled_from(["app", "tier", "zone"]), st.sampled_from(["x", "y"]), max_size=3)


def service(namespace: str, entries: list[tuple[dict, int]]):
    return SimpleNamespace(namespace=namespace, name="svc", spec=SimpleNamespace(endpoints=[
        SimpleNamespace(selector=SimpleNamespace(matchLabels=labels), weight=weight) for labels, weight in entries]))


def every_endpoint(svc, endpoints: list[Endpoint]) -> list[tuple[int, list[Endpoint]]]:
    """The reference: each entry compared with every endpoint of the fleet, in name order."""
    seen: set[str] = set()
    groups = []
    for entry in svc.spec.endpoints:
        matched = [ep for ep in sorted(endpoints, key=lambda e: e.name) if ep.namespace == svc.namespace
                   and ep.name not in seen and all(ep.labels.get(k) == v for k, v in entry.selector.matchLabels.items())]
        seen.update(ep.name for ep in matched)
        groups.append((entry.weight, matched))
    return groups


@settings(max_examples=200, deadline=None)
@given(st.lists(st.tuples(st.sampled_from(NAMESPACES), LABELS), max_size=30),
       st.sampled_from(NAMESPACES), st.lists(st.tuples(LABELS, st.integers(1, 5)), min_size=1, max_size=3))
def test_the_index_selects_what_comparing_every_endpoint_selects(endpoints, namespace, entries):
    eps = [Endpoint(f"ep-{i:02d}", ns, f"http://h/{i}", None, labels) for i, (ns, labels) in enumerate(endpoints)]
    eps.reverse()  # given in another order than their names'
    svc = service(namespace, entries)
    assert select(svc, EndpointIndex(eps)) == every_endpoint(svc, eps)


def test_a_service_looks_only_at_its_namespaces_endpoints_with_its_rarest_label():
    eps = [Endpoint(f"r{i}", "team-a" if i % 2 else "team-b", "http://h/", None,
                    {"modelplane.ai/deployment": f"m{i // 4}", "tier": "gold"}) for i in range(4000)]
    index = EndpointIndex(eps)
    wanted = {"tier": "gold", "modelplane.ai/deployment": "m7"}
    assert [ep.name for ep in index.candidates("team-a", wanted)] == ["r29", "r31"]
    assert len(index.candidates("team-a", {})) == 2000  # no labels: the namespace's every endpoint
    assert index.candidates("team-c", wanted) == []


def test_an_endpoints_text_names_every_field_it_has():
    """An endpoint's repr is part of the input digest of each stack that routes to it, and is made once by hand:
    a field added to Endpoint and left out of it would leave those stacks' digests blind to it."""
    from dataclasses import fields

    for ep in (Endpoint("r-0", "ml", "http://10.0.0.1/ml/r-0/v1", "/ml/r-0/", {"app": "x"}, None, True, "c1"),
               Endpoint("hosted", "ml", "https://api.example.com/v1", None, {}, "not known yet")):
        expected = "Endpoint(" + ", ".join(f"{f.name}={getattr(ep, f.name)!r}" for f in fields(ep) if f.repr) + ")"
        assert repr(ep) == expected
        assert repr(ep) is repr(ep)  # made once
