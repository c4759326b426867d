"""TeamPolicy through the portal: stored like the other fleet kinds, its write replans the fleet, and a deployment
write that its one-deployment placement leaves over a GPU budget is refused 403 (rolled back, nothing stored),
serialized in the write transaction so that two racing writes cannot both take the last devices."""

from __future__ import annotations

import threading

import pytest

from tests.manifests import deployment, gateway
from tests.portal_server import ADMIN, API, TEAM_A, TEAM_B, TOKENS, ThreadServer
from tests.test_portal import seed_fleet, signed_in

MD = API + "/namespaces/{ns}/modeldeployments/{name}"
TP = API + "/teampolicies/{name}"


def policy(name: str, count: int | None = None, max_deployments: int | None = None, residency=None) -> dict:
    spec: dict = {}
    if count is not None:
        spec["gpus"] = [{"deviceClassName": "gpu.nvidia.com", "count": count}]
    if max_deployments is not None:
        spec["maxDeployments"] = max_deployments
    if residency is not None:
        spec["residency"] = residency
    return {"apiVersion": "modelplane.ai/v1alpha1", "kind": "TeamPolicy", "metadata": {"name": name}, "spec": spec}


@pytest.fixture
def portal(tmp_path):
    with ThreadServer(tmp_path, replan_interval=0.05) as server:
        seed_fleet(server, gpus=20)
        yield server


def test_a_team_policy_is_stored_listed_and_written_by_admins_only(portal):
    with portal.client(TEAM_A) as team:
        refused = team.put(TP.format(name="team-a"), json=policy("team-a", 2))
        assert refused.status_code == 403  # cluster-scoped: the platform team's
        resources = {r["name"]: r for r in team.get(API).json()["resources"]}
    assert resources["teampolicies"]["kind"] == "TeamPolicy" and not resources["teampolicies"]["namespaced"]
    assert resources["teampolicies"]["shortNames"] == ["tp"]
    with portal.client(ADMIN) as admin:
        assert admin.put(TP.format(name="team-a"), json=policy("team-a", 2)).status_code == 201
        listed = admin.get(API + "/teampolicies").json()
        assert [p["metadata"]["name"] for p in listed["items"]] == ["team-a"]
        assert listed["items"][0]["spec"]["gpus"][0]["count"] == 2
        bad = admin.put(TP.format(name="team-a"), json=policy("team-a", -1))
        assert bad.status_code == 422 and "spec.gpus" in bad.text


def test_a_write_over_budget_is_refused_naming_the_policy_and_field_and_nothing_is_stored(portal):
    with portal.client(ADMIN) as admin:
        assert admin.put(TP.format(name="team-a"), json=policy("team-a", 2)).status_code == 201
    with portal.client(TEAM_A) as team:
        assert team.put(MD.format(ns="team-a", name="one"), json=deployment("one", "team-a")).status_code == 201
        over = team.put(MD.format(ns="team-a", name="two"), json=deployment("two", "team-a", replicas=2))
        assert over.status_code == 403 and over.json()["kind"] == "Status"
        assert "over TeamPolicy team-a spec.gpus[0]: budget 2 gpu.nvidia.com, in use 2, this replica asks 1" \
            in over.json()["message"]
        assert team.get(MD.format(ns="team-a", name="two")).status_code == 404  # rolled back
        # within the budget still goes through: the refused write left nothing charged
        assert team.put(MD.format(ns="team-a", name="two"), json=deployment("two", "team-a")).status_code == 201
    with portal.client(TEAM_B) as other:  # another team is not bound by team-a's policy
        assert other.put(MD.format(ns="team-b", name="big"), json=deployment("big", "team-b", replicas=5)
                         ).status_code == 201


def test_max_deployments_comes_from_the_policy(portal):
    with portal.client(ADMIN) as admin:
        assert admin.put(TP.format(name="team-a"), json=policy("team-a", max_deployments=1)).status_code == 201
    with portal.client(TEAM_A) as team:
        assert team.put(MD.format(ns="team-a", name="one"), json=deployment("one", "team-a")).status_code == 201
        refused = team.put(MD.format(ns="team-a", name="two"), json=deployment("two", "team-a"))
        assert refused.status_code == 403
        assert "over TeamPolicy team-a spec.maxDeployments: 2 ModelDeployments, at most 1" in refused.json()["message"]
        assert team.get(MD.format(ns="team-a", name="two")).status_code == 404


def test_two_racing_writes_each_within_the_budget_alone_together_over_exactly_one_refused(portal):
    with portal.client(ADMIN) as admin:
        assert admin.put(TP.format(name="team-a"), json=policy("team-a", 3)).status_code == 201
    start = threading.Barrier(2)
    codes: dict[str, int] = {}

    def write(name: str) -> None:
        with portal.client(TEAM_A) as team:
            start.wait()  # both requests in flight at once: the write transaction serializes them
            codes[name] = team.put(MD.format(ns="team-a", name=name), json=deployment(name, "team-a", replicas=2)
                                   ).status_code

    threads = [threading.Thread(target=write, args=(name,)) for name in ("left", "right")]
    for t in threads:
        t.start()
    for t in threads:
        t.join(60)
    assert sorted(codes.values()) == [201, 403], codes
    portal.settle()
    with portal.client(ADMIN) as admin:
        stored = admin.get(API + "/namespaces/team-a/modeldeployments").json()["items"]
        plan = admin.get("/plan").json()
    assert [o["metadata"]["name"] for o in stored] == [n for n, code in codes.items() if code == 201]
    assert sum(1 for r in plan["replicas"] if r["deployment"].startswith("team-a/")) == 2  # within 3


def test_a_policy_write_replans_the_fleet_and_the_page_shows_the_budgets(portal):
    with portal.client(TEAM_A) as team:
        assert team.put(MD.format(ns="team-a", name="chat"), json=deployment("chat", "team-a", replicas=3)
                        ).status_code == 201
    portal.settle()
    with portal.client(ADMIN) as admin:
        assert admin.put(TP.format(name="team-a"), json=policy("team-a", 2)).status_code == 201
        plan = admin.get("/plan").json()  # replanned inside the policy's write
    assert sum(1 for r in plan["replicas"] if r["deployment"] == "team-a/chat") == 2
    [short] = [u for u in plan["unscheduled"] if u["deployment"] == "team-a/chat"]
    assert short["missing"] == 1 and any("over TeamPolicy team-a spec.gpus[0]" in r for r in short["reasons"])
    assert plan["policies"]["budgets"] == [{"namespace": "team-a", "policy": "team-a", "field": "spec.gpus[0]",
                                            "what": "gpu.nvidia.com", "budget": 2, "used": 2}]
    with portal.client(None) as browser:
        signed_in(portal, browser)
        page = browser.get("/").text
    row = next(line for line in page.split("<tr>") if "<td>spec.gpus[0]</td>" in line)
    assert "<td>team-a</td><td>team-a</td>" in row and "<td>2</td>" in row


QUOTAS = {"tokens": TOKENS, "quotas": {"team-a": {"maxGPUs": 1, "maxDeployments": 1}}}


def test_the_old_quotas_are_read_as_a_policy_until_a_stored_policy_governs_the_namespace(tmp_path, caplog):
    with ThreadServer(tmp_path, tokens=QUOTAS, replan_interval=0.05) as portal:
        seed_fleet(portal, gpus=20)
        assert any("tokens.yaml: `quotas:` is deprecated" in r.getMessage() for r in caplog.records)
        with portal.client(TEAM_A) as team:
            over = team.put(MD.format(ns="team-a", name="two"), json=deployment("two", "team-a", replicas=2))
            assert over.status_code == 403 and "over TeamPolicy team-a spec.gpus[0]: budget 1" in over.json()["message"]
            assert team.put(MD.format(ns="team-a", name="one"), json=deployment("one", "team-a")).status_code == 201
            assert team.put(MD.format(ns="team-a", name="two"), json=deployment("two", "team-a")).status_code == 403
        with portal.client(ADMIN) as admin:  # the stored policy takes over from the file's quota
            assert admin.put(TP.format(name="team-a"), json=policy("team-a", 4, max_deployments=3)).status_code == 201
        with portal.client(TEAM_A) as team:
            assert team.put(MD.format(ns="team-a", name="two"), json=deployment("two", "team-a", replicas=2)
                            ).status_code == 201


def test_with_one_shared_workload_namespace_the_whole_fleet_replan_refuses_the_write_over_budget(portal):
    """Teams sharing one workload namespace (the reference's `Default`): a deployment write is planned with the
    whole fleet inside the write, and refused the same way."""
    shared = gateway()
    shared["metadata"]["annotations"] = {"modelplane.ai/workload-namespaces": "Default"}
    with portal.client(ADMIN) as admin:
        assert admin.put(f"{API}/inferencegateways/default", json=shared).status_code == 201
        assert admin.put(TP.format(name="team-a"), json=policy("team-a", 1)).status_code == 201
    with portal.client(TEAM_A) as team:
        assert team.put(MD.format(ns="team-a", name="one"), json=deployment("one", "team-a")).status_code == 201
        over = team.put(MD.format(ns="team-a", name="two"), json=deployment("two", "team-a"))
        assert over.status_code == 403
        assert "team-a/two: 1 replica(s) cannot be placed: over TeamPolicy team-a spec.gpus[0]" in over.json()["message"]
        assert team.get(MD.format(ns="team-a", name="two")).status_code == 404
