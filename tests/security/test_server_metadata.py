"""Issue 65, low: a client's metadata.deletionTimestamp, finalizers and ownerReferences were stored. The first two
are the server's to set, ignored from a client as the API server ignores them. This portal has no finalizing
controller and no garbage collector, so a finalizer would make an object undeletable and an owner reference would
promise a cascade that never comes: both are refused with a 422 naming the field (automation/portal/service.py)."""

from __future__ import annotations

import json

import pytest

from tests.manifests import deployment
from tests.portal_server import API, TEAM_A, ThreadServer
from tests.test_portal import seed_fleet

OBJ = API + "/namespaces/team-a/modeldeployments/{name}"
OWNER = {"apiVersion": "v1", "kind": "ConfigMap", "name": "owner", "uid": "0b1c2d3e-0000-4000-8000-000000000000"}


@pytest.fixture(scope="module")
def team(tmp_path_factory):
    with ThreadServer(tmp_path_factory.mktemp("metadata")) as server:
        seed_fleet(server, gpus=8)
        with server.client(TEAM_A) as client:
            yield client


def with_metadata(name: str, **fields) -> dict:
    body = deployment(name, namespace="team-a")
    body["metadata"].update(fields)
    return body


@pytest.mark.parametrize("write", ["create", "update", "merge-patch"])
def test_the_servers_deletion_fields_are_ignored_from_a_client(team, write):
    name = f"ignored-{write}"
    team.delete(OBJ.format(name=name))
    sent = {"deletionTimestamp": "2020-01-01T00:00:00Z", "deletionGracePeriodSeconds": 30}
    if write == "create":
        answer = team.put(OBJ.format(name=name), json=with_metadata(name, **sent))
    else:
        assert team.put(OBJ.format(name=name), json=with_metadata(name)).status_code == 201
        answer = (team.put(OBJ.format(name=name), json=with_metadata(name, **sent)) if write == "update" else
                  team.patch(OBJ.format(name=name), content=json.dumps({"metadata": sent}).encode(),
                             headers={"Content-Type": "application/merge-patch+json"}))
    assert answer.status_code in (200, 201), answer.text
    stored = team.get(OBJ.format(name=name)).json()["metadata"]
    assert not sent.keys() & stored.keys() and not sent.keys() & answer.json()["metadata"].keys()
    assert team.delete(OBJ.format(name=name)).status_code == 200


@pytest.mark.parametrize("field,value", [("finalizers", ["example.com/keep"]), ("ownerReferences", [OWNER])])
@pytest.mark.parametrize("write", ["create", "merge-patch"])
def test_finalizers_and_owner_references_are_refused_naming_the_field(team, field, value, write):
    name = f"refused-{write}"
    team.delete(OBJ.format(name=name))
    if write == "create":
        answer = team.put(OBJ.format(name=name), json=with_metadata(name, **{field: value}))
    else:
        assert team.put(OBJ.format(name=name), json=with_metadata(name)).status_code == 201
        answer = team.patch(OBJ.format(name=name), content=json.dumps({"metadata": {field: value}}).encode(),
                            headers={"Content-Type": "application/merge-patch+json"})
    assert answer.status_code == 422 and answer.json()["reason"] == "Invalid", answer.text
    assert f"metadata.{field}" in answer.json()["message"]
    stored = team.get(OBJ.format(name=name))
    assert (stored.status_code == 404) if write == "create" else field not in stored.json()["metadata"]
    team.delete(OBJ.format(name=name))
    assert team.get(OBJ.format(name=name)).status_code == 404  # never undeletable
