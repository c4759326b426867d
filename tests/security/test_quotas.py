"""Finding 8: optional per-namespace quotas (maximum devices, maximum deployments), enforced inside the write.

The tokens file's `quotas:` are deprecated: each is read as its namespace's TeamPolicy {gpus: [{count: maxGPUs}],
maxDeployments} (the migration), so these tests hold the old file to the policy's rules and messages."""

from __future__ import annotations

import concurrent.futures

import pytest

from tests.manifests import cluster, deployment, gpu_class, member
from tests.portal_server import ADMIN, API, TEAM_A, TEAM_B, TOKENS, ThreadServer, put_retrying
from tests.test_portal import seed_fleet

OBJ = API + "/namespaces/{ns}/modeldeployments/{name}"
QUOTAS = {"tokens": TOKENS, "quotas": {"team-a": {"maxDeployments": 2}, "team-b": {"maxGPUs": 3}}}


@pytest.fixture
def portal(tmp_path):
    with ThreadServer(tmp_path, tokens=QUOTAS) as server:
        seed_fleet(server, gpus=20)
        yield server


def test_max_deployments_refuses_the_one_too_many_with_a_403_naming_the_quota(portal):
    with portal.client(TEAM_A) as team:
        for name in ("one", "two"):
            assert team.put(OBJ.format(ns="team-a", name=name), json=deployment(name, namespace="team-a")).status_code == 201
        response = team.put(OBJ.format(ns="team-a", name="three"), json=deployment("three", namespace="team-a"))
        assert response.status_code == 403 and response.json()["kind"] == "Status"
        assert "TeamPolicy team-a spec.maxDeployments" in response.json()["message"]
        assert "3 ModelDeployments, at most 2" in response.json()["message"]
        assert team.get(OBJ.format(ns="team-a", name="three")).status_code == 404  # rolled back, not half-applied
        assert team.put(OBJ.format(ns="team-a", name="two"), json=deployment("two", namespace="team-a", replicas=2)
                        ).status_code == 200  # changing one that exists is not one more


def test_max_gpus_counts_every_replica_s_devices_and_admins_are_bound_too(portal):
    with portal.client(TEAM_B) as team:
        assert team.put(OBJ.format(ns="team-b", name="a"), json=deployment("a", namespace="team-b", replicas=2)).status_code == 201
        response = team.put(OBJ.format(ns="team-b", name="b"), json=deployment("b", namespace="team-b", replicas=2))
        assert response.status_code == 403
        assert "over TeamPolicy team-b spec.gpus[0]: budget 3 devices of any class, in use 3, this replica asks 1" \
            in response.json()["message"]
        assert team.get(OBJ.format(ns="team-b", name="b")).status_code == 404  # rolled back, nothing stored
        assert team.put(OBJ.format(ns="team-b", name="b"), json=deployment("b", namespace="team-b")).status_code == 201
    with portal.client(ADMIN) as admin:  # the quota is the team's, whoever writes in its namespace
        response = admin.put(OBJ.format(ns="team-b", name="c"), json=deployment("c", namespace="team-b"))
        assert response.status_code == 403
        plan = admin.get("/plan").json()
    assert sum(1 for r in plan["replicas"] if r["deployment"].startswith("team-b/")) == 3


def test_a_multi_device_replica_counts_every_device(portal):
    with portal.client(ADMIN) as admin:  # nodes of 4 devices: the replica fits the fleet, not the budget
        assert admin.put(f"{API}/inferenceclasses/l4x4", json=gpu_class("l4x4", 4, "23034Mi")).status_code == 201
        assert admin.put(f"{API}/inferenceclusters/c2", json=cluster("c2", pools=(("gpu", "l4x4", 2),))
                         ).status_code == 201
    big = deployment("big", namespace="team-b", engines=[{"name": "vllm", "members": [member(gpus=4)]}])
    with portal.client(TEAM_B) as team:
        response = team.put(OBJ.format(ns="team-b", name="big"), json=big)
    assert response.status_code == 403 and "this replica asks 4" in response.json()["message"]


def test_racing_writers_never_exceed_the_quota(portal):
    def submit(i):
        with portal.client(TEAM_A) as team:
            return put_retrying(team, OBJ.format(ns="team-a", name=f"r{i}"), deployment(f"r{i}", namespace="team-a")).status_code

    with concurrent.futures.ThreadPoolExecutor(max_workers=10) as pool:
        codes = list(pool.map(submit, range(10)))
    assert sorted(codes) == [201, 201] + [403] * 8
    with portal.client(TEAM_A) as team:
        assert len(team.get(API + "/namespaces/team-a/modeldeployments").json()["items"]) == 2
