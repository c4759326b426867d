"""Issue 65, HIGH: a 1.4 KB JSON patch of 20 `copy` operations doubled the object with each one, inside the single
writer process, before any size check (2.7 GB and 36 s of the writer's time; every team's writes waited). A JSON patch
now has at most the API server's 10,000 operations, and what its add, replace and copy operations put in is counted
before each one runs, at most one object's worth (automation/portal/patches.py); through /scale too.
benchmarks/portal_patch_attack.py measures another team's writes under such an attack."""

from __future__ import annotations

import json

import pytest

from automation.portal import patches
from automation.portal.service import ApiError
from tests.manifests import deployment
from tests.portal_server import API, TEAM_A, ThreadServer
from tests.test_portal import seed_fleet

OBJ = API + "/namespaces/team-a/modeldeployments/{name}"
JSON_PATCH = {"Content-Type": "application/json-patch+json"}


def doubling(path: str, count: int) -> list[dict]:
    """`count` copies of `path` into itself: each one doubles it."""
    return [{"op": "copy", "from": path, "path": f"{path}/c{i}"} for i in range(count)]


def test_a_patch_that_doubles_the_object_is_refused_at_the_operation_that_passes_the_budget():
    target = {"d": {"pad": "x" * 1000}}
    with pytest.raises(ApiError) as refused:  # 12 doublings of 1 KB: 4 MB, past 1.5 MiB at the 11th
        patches.json_patch(target, json.dumps(doubling("/d", 12)).encode())
    assert (refused.value.code, refused.value.reason) == (413, "RequestEntityTooLarge")
    assert "operation 10 (copy)" in refused.value.message
    assert len(json.dumps(target)) < patches.MAX_PATCH_GROWTH  # the document never grew past it


@pytest.mark.parametrize("operation", [
    lambda big: {"op": "add", "path": "/e", "value": big},
    lambda big: {"op": "replace", "path": "/d", "value": big},
])
def test_values_put_in_count_towards_the_budget(operation):
    half = {"x": "y" * (patches.MAX_PATCH_GROWTH // 2)}
    with pytest.raises(ApiError) as refused:
        patches.json_patch({"d": 1}, json.dumps([operation(half), operation(half), operation(half)]).encode())
    assert refused.value.code == 413 and "operation 1" in refused.value.message
    assert patches.json_patch({"d": 1}, json.dumps([operation(1)]).encode()) in ({"d": 1, "e": 1}, {"d": 1})


@pytest.fixture(scope="module")
def team(tmp_path_factory):
    with ThreadServer(tmp_path_factory.mktemp("budget")) as server:
        seed_fleet(server, gpus=8)
        with server.client(TEAM_A) as client:
            assert client.put(OBJ.format(name="web"), json=deployment("web", namespace="team-a")).status_code == 201
            yield client


def test_more_than_10000_operations_is_the_api_servers_413(team):
    before = team.get(OBJ.format(name="web")).json()
    many = [{"op": "test", "path": "/spec/replicas", "value": 1}] * 10_001
    answer = team.patch(OBJ.format(name="web"), content=json.dumps(many).encode(), headers=JSON_PATCH)
    assert answer.status_code == 413, answer.text
    assert answer.json()["message"] == "The allowed maximum operations in a JSON patch is 10000, got 10001"
    assert team.get(OBJ.format(name="web")).json()["metadata"]["resourceVersion"] == before["metadata"]["resourceVersion"]


@pytest.mark.parametrize("path", ["/namespaces/team-a/modeldeployments/web", "/namespaces/team-a/modeldeployments/web/scale"])
def test_a_doubling_patch_is_refused_on_the_object_and_on_its_scale(team, path):
    before = team.get(OBJ.format(name="web")).json()["metadata"]["resourceVersion"]
    answer = team.patch(API + path, content=json.dumps(doubling("/metadata", 15)).encode(), headers=JSON_PATCH)
    assert answer.status_code == 413 and answer.json()["reason"] == "RequestEntityTooLarge", answer.text
    assert team.get(OBJ.format(name="web")).json()["metadata"]["resourceVersion"] == before
