"""`?watch=true` as the Kubernetes API server streams it: the current objects as ADDED, then ADDED, MODIFIED and
DELETED as writes commit (from any portal process on the database), resumed from a resourceVersion, 410 Expired
once the change log no longer reaches back, BOOKMARKs, timeoutSeconds, and each watcher's namespaces only."""

from __future__ import annotations

import json
import time
from contextlib import contextmanager
from typing import Iterator

import httpx
import pytest
import yaml

from automation.portal import watch
from tests.manifests import cluster, deployment
from tests.portal_server import ADMIN, API, TEAM_A, TEAM_B, TOKENS, ThreadServer
from tests.test_portal import seed_fleet

COLLECTION = API + "/namespaces/team-a/modeldeployments"
OBJ = COLLECTION + "/{name}"
MERGE = {"Content-Type": "application/merge-patch+json"}


@pytest.fixture
def portal(tmp_path):
    with ThreadServer(tmp_path) as server:
        seed_fleet(server, gpus=8)
        yield server


@contextmanager
def watching(client: httpx.Client, path: str, **params) -> Iterator[Iterator[dict]]:
    """The watch's events, one at a time (the stream ends at timeoutSeconds, which bounds every test)."""
    params = {"watch": "true", "timeoutSeconds": "30", **params}
    with client.stream("GET", path, params=params) as response:
        assert response.status_code == 200, response.read()
        assert response.headers["content-type"].startswith("application/json")
        yield (json.loads(line) for line in response.iter_lines() if line)


def version(client: httpx.Client, path: str = COLLECTION) -> str:
    return client.get(path).json()["metadata"]["resourceVersion"]


def writes(team: httpx.Client) -> None:
    """Create, patch, delete: ADDED, MODIFIED, DELETED."""
    assert team.post(COLLECTION, json=deployment("w", namespace="team-a")).status_code == 201
    assert team.patch(OBJ.format(name="w"), content=b'{"spec":{"replicas":2}}', headers=MERGE).status_code == 200
    assert team.delete(OBJ.format(name="w")).status_code == 200


def test_a_watch_sees_the_writes_after_its_resource_version(portal):
    with portal.client(TEAM_A) as team, portal.client(TEAM_A) as watcher:
        since = version(team)
        with watching(watcher, COLLECTION, resourceVersion=since) as events:
            writes(team)
            seen = [next(events) for _ in range(3)]
    assert [e["type"] for e in seen] == ["ADDED", "MODIFIED", "DELETED"]
    assert [e["object"]["spec"]["replicas"] for e in seen] == [1, 2, 2]
    assert all(e["object"]["metadata"]["name"] == "w" and e["object"]["kind"] == "ModelDeployment" for e in seen)
    versions = [int(e["object"]["metadata"]["resourceVersion"]) for e in seen]
    assert versions == sorted(versions) and versions[0] > int(since)
    assert "status" in seen[0]["object"]  # objects as a get shows them


def test_a_watch_resumes_after_a_resource_version_and_starts_with_the_current_objects_without_one(portal):
    with portal.client(TEAM_A) as team:
        writes(team)
        assert team.put(OBJ.format(name="kept"), json=deployment("kept", namespace="team-a")).status_code == 201
        history = team.get(COLLECTION).json()
        with watching(team, COLLECTION, timeoutSeconds="1") as events:  # no resourceVersion: the objects now
            initial = list(events)
        assert [(e["type"], e["object"]["metadata"]["name"]) for e in initial] == [("ADDED", "kept")]
        assert initial[0]["object"]["metadata"]["resourceVersion"] == history["items"][0]["metadata"]["resourceVersion"]
        # resumed from the patch's version: the delete and the create after it, nothing before
        patched = int(history["metadata"]["resourceVersion"]) - 2
        with watching(team, COLLECTION, resourceVersion=str(patched), timeoutSeconds="1") as events:
            resumed = [(e["type"], e["object"]["metadata"]["name"]) for e in events]
    assert resumed == [("DELETED", "w"), ("ADDED", "kept")]


def test_an_expired_resource_version_is_an_error_event_with_410_gone(portal):
    portal.store.watch_window = 2
    with portal.client(TEAM_A) as team:
        old = version(team)
        writes(team)
        writes(team)
        with watching(team, COLLECTION, resourceVersion=old) as events:
            seen = list(events)  # the stream ends after the error
        assert len(seen) == 1 and seen[0]["type"] == "ERROR"
        status = seen[0]["object"]
        assert status["kind"] == "Status" and status["code"] == 410 and status["reason"] == "Expired"
        # the latest version is still within the window: no error
        with watching(team, COLLECTION, resourceVersion=version(team), timeoutSeconds="1") as events:
            assert list(events) == []


def test_another_namespaces_writes_never_expire_a_teams_resume_point(portal):
    """Finding (issue 65): one team's 1,000 writes expired every other team's watch resume point (the change log's
    window was global). The window is per kind and namespace now (automation/portal/store.py)."""
    with portal.client(TEAM_A) as team:
        assert team.put(OBJ.format(name="a1"), json=deployment("a1", namespace="team-a")).status_code == 201
        since = version(team)
        with watching(team, COLLECTION, resourceVersion=since, timeoutSeconds="1") as events:
            assert list(events) == []
        store = portal.store
        for i in range(store.watch_window + 5):  # team-b's writes, straight to the store: only the log matters
            with store.write() as conn:
                body = deployment(f"b{i % 7}", namespace="team-b")
                store.put(conn, "ModelDeployment", "team-b", body, store.get(conn, "ModelDeployment", "team-b", body[
                    "metadata"]["name"]))
        assert team.patch(OBJ.format(name="a1"), content=b'{"spec":{"replicas":2}}', headers=MERGE).status_code == 200
        for path in (COLLECTION, API + "/modeldeployments"):  # its namespace, and every namespace it can see
            with watching(team, path, resourceVersion=since, timeoutSeconds="1") as events:
                seen = [(e["type"], e["object"]["metadata"].get("name")) for e in events]
            assert seen == [("MODIFIED", "a1")], path
    with portal.client(ADMIN) as admin:  # an admin's watch of every namespace spans team-b's window: expired
        with watching(admin, API + "/modeldeployments", resourceVersion=since) as events:
            assert [e["object"]["code"] for e in events] == [410]


def test_bookmarks_carry_the_current_resource_version(portal, monkeypatch):
    monkeypatch.setattr(watch, "BOOKMARK_EVERY", 0.1)
    with portal.client(TEAM_A) as team, portal.client(ADMIN) as admin:
        since = version(team)
        with watching(team, COLLECTION, resourceVersion=since, allowWatchBookmarks="true") as events:
            # a write of another namespace moves the version on: a bookmark says the watcher has seen up to it
            assert admin.put(API + "/namespaces/team-b/modeldeployments/b",
                             json=deployment("b", namespace="team-b")).status_code == 201
            moved = version(admin, API + "/namespaces/team-b/modeldeployments")
            event = next(e for e in events if e["type"] != "BOOKMARK" or e["object"]["metadata"]["resourceVersion"] == moved)
    assert event["type"] == "BOOKMARK" and event["object"]["kind"] == "ModelDeployment"
    with portal.client(TEAM_A) as team:  # without allowWatchBookmarks, none
        with watching(team, COLLECTION, resourceVersion=since, timeoutSeconds="1") as events:
            assert list(events) == []


def test_a_watch_shows_only_what_the_watcher_may_see(portal):
    with portal.client(TEAM_B) as other:
        response = other.get(COLLECTION, params={"watch": "true"})
        assert response.status_code == 404 and response.json()["kind"] == "Status"
    with portal.client(TEAM_B) as other, portal.client(ADMIN) as admin:
        since = version(admin)  # one resourceVersion for every kind, as one etcd has
        with watching(other, API + "/inferenceclusters", resourceVersion=since) as events:  # the fleet: everyone's
            assert admin.put(API + "/inferenceclusters/c2", json=cluster("c2")).status_code == 201
            event = next(events)
    assert (event["type"], event["object"]["metadata"]["name"]) == ("ADDED", "c2")


@pytest.mark.parametrize("params", [{"resourceVersion": "abc"}, {"timeoutSeconds": "-1"}])
def test_bad_watch_parameters_are_a_400_status(portal, params):
    with portal.client(TEAM_A) as team:
        response = team.get(COLLECTION, params={"watch": "true", **params})
    assert response.status_code == 400 and response.json()["kind"] == "Status"


def test_a_watch_sees_a_write_made_by_another_portal_process_on_the_database(tmp_path):
    """No in-process notice: the writer is another portal (its own app, store and queue) on the same database."""
    with ThreadServer(tmp_path) as first, ThreadServer(tmp_path) as second:
        seed_fleet(first, gpus=8)
        with first.client(TEAM_A) as watcher, second.client(TEAM_A) as writer:
            since = version(watcher)
            with watching(watcher, COLLECTION, resourceVersion=since) as events:
                assert writer.put(OBJ.format(name="elsewhere"), json=deployment("elsewhere", namespace="team-a")
                                  ).status_code == 201
                event = next(events)
    assert (event["type"], event["object"]["metadata"]["name"]) == ("ADDED", "elsewhere")


def test_kubectl_get_watch_gets_each_event_as_a_table_row(portal):
    """kubectl get -w asks for Tables: each event's object is a Table of one row, the server's columns."""
    table = "application/json;as=Table;v=v1;g=meta.k8s.io,application/json"
    with portal.client(TEAM_A) as team, portal.client(TEAM_A) as watcher:
        watcher.headers["Accept"] = table
        with watching(watcher, COLLECTION, resourceVersion=version(team)) as events:
            assert team.post(COLLECTION, json=deployment("tabled", namespace="team-a")).status_code == 201
            event = next(events)
    shown = event["object"]
    assert event["type"] == "ADDED" and shown["kind"] == "Table" and len(shown["rows"]) == 1
    assert shown["rows"][0]["cells"][0] == "tabled" and shown["columnDefinitions"][0]["name"] == "Name"


def test_a_watch_on_one_postgresql_portal_sees_the_writes_made_through_another(tmp_path):
    """Two portal processes on one PostgreSQL database: the watcher's portal learns of the write only from the
    change log in the database."""
    from tests.portal_server import postgres_portals

    with postgres_portals(tmp_path) as client, client(0, TEAM_A) as watcher, client(1, TEAM_A) as writer:
        with watching(watcher, COLLECTION, resourceVersion=version(watcher)) as events:
            writes(writer)
            seen = [(e["type"], e["object"]["metadata"]["name"]) for e in (next(events) for _ in range(3))]
    assert seen == [("ADDED", "w"), ("MODIFIED", "w"), ("DELETED", "w")]


def test_serve_stops_promptly_with_a_watch_open(tmp_path):
    """A watch lasts up to an hour; a stop waits for open requests only SHUTDOWN_WAIT seconds (it waited for the
    watch before: make test's kubectl session timed out stopping its portal)."""
    import subprocess

    from tests.portal_server import free_port, start_process

    port = free_port()
    process = start_process(tmp_path, port, ["--no-apply"])
    try:
        with httpx.Client(base_url=f"http://127.0.0.1:{port}", headers={"Authorization": f"Bearer {TEAM_A}"},
                          timeout=60) as team:
            with team.stream("GET", COLLECTION, params={"watch": "true", "resourceVersion": version(team)}) as response:
                assert response.status_code == 200
                process.terminate()  # the watch is still open, and its client still there
                process.wait(30)  # SHUTDOWN_WAIT is 10 s
    except subprocess.TimeoutExpired:
        process.kill()
        raise
    assert process.returncode is not None


@pytest.mark.parametrize("query,streams", [
    ("watch=True", True),  # the Python client's spelling: the API server serves a watch
    ("watch=", True),
    ("watch=FALSE", False),
    ("watch=0", False),
    ("watch=false&watch=true", False),  # the first value, as front_proxy.attributes authorizes it
    ("watch=true&watch=false", True),
])
def test_the_watch_parameter_is_read_as_the_api_server_reads_it(portal, query, streams):
    """Issue 65: only `true` and `1` were watches (`watch=True` got a List), and the LAST value was served while the
    front proxy authorized the FIRST (`watch=false&watch=true`: reviewed as a list, served as a watch)."""
    with portal.client(TEAM_A) as team:
        with team.stream("GET", f"{COLLECTION}?{query}&timeoutSeconds=1") as response:
            assert response.status_code == 200
            lines = [json.loads(line) for line in response.iter_lines() if line]
    if streams:
        assert all("type" in event for event in lines)
    else:
        assert [body["kind"] for body in lines] == ["ModelDeploymentList"]


def _revoke_team_a(server) -> None:
    server.tokens_path.write_text(yaml.safe_dump([t for t in TOKENS if t["name"] != "team-a"]))


def test_a_watch_of_a_revoked_token_ends_within_the_recheck_interval(tmp_path, monkeypatch):
    """Issue 65: a watch opened before its token was revoked streamed on until its timeout (up to an hour)."""
    monkeypatch.setattr(watch, "RECHECK", 0.1)
    with ThreadServer(tmp_path, check_every=0.05) as server, server.client(TEAM_A) as team:
        seed_fleet(server, gpus=8)
        with watching(team, COLLECTION, resourceVersion=version(team), timeoutSeconds="20") as events:
            _revoke_team_a(server)
            seen = list(events)  # the stream ends: at the next check, not at timeoutSeconds
        assert [(e["type"], e["object"]["code"]) for e in seen] == [("ERROR", 401)]
        assert team.get(COLLECTION).status_code == 401


def test_a_watch_of_a_revoked_token_ends_at_its_next_event(tmp_path, monkeypatch):
    """No event of a revoked watcher's is sent, however long until the periodic check."""
    monkeypatch.setattr(watch, "RECHECK", 3600.0)
    with ThreadServer(tmp_path, check_every=0.05) as server, server.client(TEAM_A) as team, \
            server.client(ADMIN) as admin:
        seed_fleet(server, gpus=8)
        with watching(team, COLLECTION, resourceVersion=version(team), timeoutSeconds="20") as events:
            _revoke_team_a(server)
            time.sleep(0.2)  # past the tokens file's check interval
            assert admin.post(COLLECTION, json=deployment("after", namespace="team-a")).status_code == 201
            first = next(events)
            rest = list(events)
        assert (first["type"], first["object"]["code"], rest) == ("ERROR", 401, [])


def test_a_watch_ends_when_its_tokens_namespaces_change(tmp_path, monkeypatch):
    monkeypatch.setattr(watch, "RECHECK", 0.1)
    with ThreadServer(tmp_path, check_every=0.05) as server, server.client(TEAM_A) as team:
        seed_fleet(server, gpus=8)
        with watching(team, COLLECTION, resourceVersion=version(team), timeoutSeconds="20") as events:
            server.tokens_path.write_text(yaml.safe_dump(
                [t if t["name"] != "team-a" else {**t, "namespaces": ["team-c"]} for t in TOKENS]))
            seen = list(events)
        assert [(e["type"], e["object"]["code"]) for e in seen] == [("ERROR", 401)]


def test_a_watch_of_a_valid_token_is_not_ended_by_the_checks(portal, monkeypatch):
    monkeypatch.setattr(watch, "RECHECK", 0.05)
    with portal.client(TEAM_A) as team, watching(team, COLLECTION, resourceVersion=version(team),
                                                   timeoutSeconds="1") as events:
        assert list(events) == []  # to its timeout, nothing but what changes (nothing)
