"""Modelplane v0.5's ModelEndpoint status (shared/reference/modelplane-v0.5.md §2.3, [F-ME]): the `EndpointReady`
condition on a v0.5-shaped endpoint, over its credential's Secret alone; a v0.3.1 endpoint keeps `RoutingReady`.
Read as `status -o yaml`, the portal and kubectl read it (automation/planning/conditions.py `with_status`)."""

from __future__ import annotations

import pytest
import yaml

from automation.cli import main
from tests.manifests import cluster, endpoint, gpu_class


def v05_endpoint(name: str, secret: str | None = None, namespace: str = "ml-team") -> dict:
    spec: dict = {"origin": "https://api.example.com"}
    if secret is not None:
        spec["credential"] = {"method": "APIKey", "apiKey": {"secretRef": {"name": secret}}}
    return {"apiVersion": "modelplane.ai/v1alpha1", "kind": "ModelEndpoint",
            "metadata": {"name": name, "namespace": namespace}, "spec": spec}


def secret(name: str, keys: tuple[str, ...], namespace: str = "ml-team") -> dict:
    return {"apiVersion": "v1", "kind": "Secret", "metadata": {"name": name, "namespace": namespace},
            "stringData": {k: f"value-of-{k}" for k in keys}}


@pytest.mark.parametrize("given,expected", [
    # [F-ME] True/EndpointUsable: no credential, or the Secret exists and holds the key
    (v05_endpoint("open"), ("EndpointReady", "True", "EndpointUsable", None)),
    (v05_endpoint("keyed", "s1"), ("EndpointReady", "True", "EndpointUsable", None)),
    # False/CredentialMissing, with upstream's messages
    (v05_endpoint("keyless", "s2"), ("EndpointReady", "False", "CredentialMissing", "Secret s2 has no key apiKey")),
    (v05_endpoint("absent", "s3"), ("EndpointReady", "False", "CredentialMissing", "Secret s3 does not exist")),
    # the Secret of another namespace is not this endpoint's
    (v05_endpoint("elsewhere", "s4"), ("EndpointReady", "False", "CredentialMissing", "Secret s4 does not exist")),
    # v0.3.1 keeps its condition
    (endpoint("old"), ("RoutingReady", "False", "NotRouted", "no ModelService routes to it")),
])
def test_a_v05_endpoint_reads_endpoint_ready_from_its_credentials_secret(given, expected, tmp_path, capsys):
    fleet = tmp_path / "fleet.yaml"
    fleet.write_text(yaml.safe_dump_all([gpu_class(), cluster("c1"), given, secret("s1", ("apiKey",)),
                                         secret("s2", ("other",)), secret("s4", ("apiKey",), namespace="team-b")]))
    assert main(["status", "-f", str(fleet), "-o", "yaml", "--state", str(tmp_path / "state")]) == 0
    out = capsys.readouterr().out
    assert "value-of-" not in out  # names only, never a value
    [shown] = [o for o in yaml.safe_load(out)["items"] if o["kind"] == "ModelEndpoint"]
    [condition] = shown["status"]["conditions"]
    kind, status, reason, message = expected
    assert (condition["type"], condition["status"], condition["reason"]) == (kind, status, reason)
    if message is not None:
        assert condition["message"] == message


def test_a_credential_the_last_planning_did_not_see_is_waiting_for_its_secret():
    """[F-ME] False/WaitingForCredential ("Waiting for Secret <n> to resolve"): a portal write not planned yet."""
    from automation.planning.conditions import Observed, with_status

    body = v05_endpoint("new", "s9")
    [ready] = with_status(body, {"credentials": {}}, Observed(), [])["status"]["conditions"]
    assert (ready["type"], ready["status"], ready["reason"], ready["message"]) == (
        "EndpointReady", "False", "WaitingForCredential", "Waiting for Secret s9 to resolve")
    [ready] = with_status(body, {"credentials": {"ml-team/new": ""}}, Observed(), [])["status"]["conditions"]
    assert (ready["status"], ready["reason"]) == ("True", "EndpointUsable")


def test_the_portal_serves_endpoint_ready_for_a_v05_endpoint(tmp_path):
    from tests.portal_server import API, TEAM_A, one_cluster_server

    with one_cluster_server(tmp_path, gpus=1) as server:
        with server.client(TEAM_A) as team:
            path = f"{API}/namespaces/team-a/modelendpoints"
            assert team.put(f"{path}/ext", json=v05_endpoint("ext", namespace="team-a")).status_code == 201
            assert team.put(f"{path}/keyed", json=v05_endpoint("keyed", "nowhere", "team-a")).status_code == 201
            server.settle()
            found = {e["metadata"]["name"]: [(c["type"], c["status"], c["reason"]) for c in e["status"]["conditions"]]
                     for e in team.get(path).json()["items"]}
            assert found["ext"] == [("EndpointReady", "True", "EndpointUsable")]
            assert found["keyed"] == [("EndpointReady", "False", "CredentialMissing")]
