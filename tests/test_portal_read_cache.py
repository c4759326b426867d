"""Lists served from the read cache (automation/portal/read_cache.py) are never older than the reader's own writes
nor than another process's committed ones, say what a list composed afresh says, and are composed once however
many readers ask at once."""

import asyncio
import json

import pytest

from automation.portal.store import Store
from fleet.stack_id import StackId
from tests.manifests import deployment
from tests.portal_server import ADMIN, API, TEAM_A, one_cluster_server

LIST = f"{API}/namespaces/team-a/modeldeployments"


@pytest.fixture
def portal(tmp_path):
    with one_cluster_server(tmp_path, gpus=8) as server:
        yield server


def put(client, name: str, replicas: int = 1) -> dict:
    response = client.put(f"{LIST}/{name}", json=deployment(name, namespace="team-a", replicas=replicas))
    assert response.status_code in (200, 201), response.text
    return response.json()


def listed(client, **params) -> dict:
    response = client.get(LIST, params=params)
    assert response.status_code == 200, response.text
    return response.json()


def replicas(answer: dict) -> dict[str, int]:
    return {o["metadata"]["name"]: o["spec"]["replicas"] for o in answer["items"]}


def test_a_list_read_after_a_write_shows_the_write(portal):
    with portal.client(TEAM_A) as team:
        put(team, "a")
        assert replicas(listed(team)) == {"a": 1}
        assert replicas(listed(team)) == {"a": 1}  # kept: served from memory
        put(team, "a", replicas=2)
        put(team, "b")
        after = listed(team)
        assert replicas(after) == {"a": 2, "b": 1}
        assert after["items"][0]["status"]["replicas"]["placed"] == 2  # the status moved with the object
        team.delete(f"{LIST}/b")
        assert replicas(listed(team)) == {"a": 2}


def test_a_write_committed_by_another_process_is_seen_at_once(portal, tmp_path):
    """The replan worker and other portal processes write the same database: the marker moves for them too."""
    with portal.client(TEAM_A) as team:
        put(team, "a")
        before = listed(team)["items"][0]
        assert before["status"]["stack"]["lastRun"] is None
        other = Store(f"sqlite:///{tmp_path / 'portal.db'}")  # a second connection pool: as another process's
        with other.write() as conn:
            other.enqueue(conn, str(StackId.model("team-a", "a")), "up", "f1")
        after = listed(team)["items"][0]
        assert after["status"]["stack"]["lastRun"]["status"] == "queued"  # a run changed, no object did
        assert after["metadata"] == before["metadata"]


def test_the_kept_answer_says_what_a_list_composed_afresh_says(portal):
    with portal.client(TEAM_A) as team:
        for name in ("c", "a", "b"):
            put(team, name)
        kept = listed(team)
        # a selector is never served from the kept bytes: the items go through the list's slow road
        selected = listed(team, labelSelector="")
        paged = listed(team, limit="2")
        assert kept["items"] == listed(team)["items"]
        assert [o["metadata"]["name"] for o in kept["items"]] == ["a", "b", "c"]
        assert kept["metadata"] == {"resourceVersion": kept["metadata"]["resourceVersion"]}
        assert selected["items"] == kept["items"] and paged["items"] == kept["items"][:2]
        assert paged["metadata"]["remainingItemCount"] == 1
    with portal.client(ADMIN) as admin:  # every namespace: an admin's answer is the kept one, a team's is filtered
        everything = admin.get(f"{API}/modeldeployments").json()
        assert [o["metadata"]["name"] for o in everything["items"]] == ["a", "b", "c"]
        assert everything["items"] == kept["items"]


def test_a_rolled_back_write_leaves_the_kept_list_as_it_was(portal):
    with portal.client(TEAM_A) as team:
        put(team, "a")
        first = listed(team)
        refused = team.put(f"{LIST}/a", json=deployment("a", namespace="team-a", replicas=11))
        assert refused.status_code == 422
        assert listed(team) == first


def test_readers_who_ask_at_once_share_one_composition(portal):
    with portal.client(TEAM_A) as team:
        put(team, "a")
    served = portal.app.state.portal
    composed = []
    real = served.observation

    def counting(conn):
        composed.append(1)
        return real(conn)

    served.observation = counting

    async def many() -> list:
        return await asyncio.gather(*(served.listed("ModelDeployment", "team-a") for _ in range(12)))

    answers = asyncio.run(many())
    assert len(composed) == 1
    assert all(a is answers[0] for a in answers)
    assert [o["metadata"]["name"] for o in json.loads(answers[0].body)["items"]] == ["a"]
    asyncio.run(many())  # nothing changed: kept, not composed again
    assert len(composed) == 1


def test_a_large_list_is_sent_gzipped_to_a_client_that_accepts_it(portal, monkeypatch):
    """As the Kubernetes API server does for answers over 128 KiB: the kept list is gzipped once per revision and
    sent so to clients that accept gzip (kubectl, client-go); it reads back as the plain answer."""
    import gzip

    from automation.portal import read_cache

    with portal.client(TEAM_A) as team:
        put(team, "a")
        put(team, "b")
        small = team.get(LIST, headers={"Accept-Encoding": "gzip"})
        assert "content-encoding" not in small.headers  # under the size: as it is
        monkeypatch.setattr(read_cache, "COMPRESS_FROM", 1)
        put(team, "c")  # a new revision: composed again, now gzipped too
        with team.stream("GET", LIST, headers={"Accept-Encoding": "gzip"}) as answer:
            raw = b"".join(answer.iter_raw())
            assert answer.headers["content-encoding"] == "gzip"
            assert answer.headers["vary"] == "Accept-Encoding"
        plain = team.get(LIST, headers={"Accept-Encoding": "identity"})
        assert "content-encoding" not in plain.headers
        assert gzip.decompress(raw) == plain.content
        assert [o["metadata"]["name"] for o in plain.json()["items"]] == ["a", "b", "c"]
        refused = team.get(LIST, headers={"Accept-Encoding": "gzip;q=0, identity"})
        assert "content-encoding" not in refused.headers and refused.content == plain.content
        paged = team.get(LIST, params={"limit": "2"}, headers={"Accept-Encoding": "gzip"})
        assert "content-encoding" not in paged.headers  # composed from the items, not the kept bytes
        assert [o["metadata"]["name"] for o in paged.json()["items"]] == ["a", "b"]


@pytest.mark.parametrize("header, accepted", [
    ("gzip", True), ("gzip, deflate", True), ("deflate, GZIP;q=0.5", True), ("*", True), ("br;q=1, *;q=0.1", True),
    ("", False), ("identity", False), ("gzip;q=0", False), ("gzip;q=0.0", False), ("x-gzip", False),
    ("gzip;q=nonsense", False), ("deflate, br", False),
])
def test_accept_encoding_is_read_as_http_says(header, accepted):
    from automation.portal.listing import accepts_gzip

    assert accepts_gzip(header) is accepted
