"""Finding: a `/scale` racing a full PUT silently reverted the PUT (the scale read the object, then wrote it back with
no precondition: 15 of 30 racing pairs on SQLite, 16 of 30 on PostgreSQL). Every read-modify-write is now made
inside the write transaction that holds the object (or is conditional on the resourceVersion it read): racing
writers succeed in order or get 409, and no acknowledged write is ever undone by an older read.

The check, per pair: the acknowledged (2xx) writes, ordered by the resourceVersion each was answered with, applied
to the object as it was, must give the object as it is at the end (a full PUT replaces the spec, a scale sets
spec.replicas). A write overwritten by a later acknowledged one is legitimate; anything else is a silent revert."""

from __future__ import annotations

import copy
import threading

import httpx
import pytest

from tests.manifests import deployment, member
from tests.portal_server import API, TEAM_A, ThreadServer, postgres_portals
from tests.test_portal import seed_fleet

PAIRS = 30
OBJ = API + "/namespaces/team-a/modeldeployments/{name}"
OLD_IMAGE, NEW_IMAGE = "vllm/vllm-openai:v0.11.0", "vllm/vllm-openai:v0.11.1"


def _spec(body: dict) -> tuple[int, str]:
    """What the two writers change: the replicas (scale) and the engine's image (the full PUT)."""
    return body["spec"]["replicas"], body["spec"]["template"]["spec"]["engines"][0]["members"][0]["template"]["spec"][
        "containers"][0]["image"]


def race_pair(scaler: httpx.Client, putter: httpx.Client, name: str) -> tuple[list[str], list[int]]:
    """One /scale and one full PUT of the same deployment at once. Returns the silent reverts found (empty: none)
    and the status codes the two writers got."""
    created = scaler.put(OBJ.format(name=name), json=deployment(name, namespace="team-a", replicas=1))
    assert created.status_code == 201, created.text
    start = _spec(created.json())
    replaced = deployment(name, namespace="team-a", replicas=1,
                          engines=[{"name": "vllm", "members": [member(image=NEW_IMAGE)]}])
    barrier = threading.Barrier(2)
    answers: dict[str, httpx.Response] = {}

    def scale() -> None:
        barrier.wait()
        answers["scale"] = scaler.put(OBJ.format(name=name) + "/scale", json={
            "apiVersion": "autoscaling/v1", "kind": "Scale", "metadata": {"name": name, "namespace": "team-a"},
            "spec": {"replicas": 2}})

    def put() -> None:
        barrier.wait()
        answers["put"] = putter.put(OBJ.format(name=name), json=replaced)

    threads = [threading.Thread(target=scale), threading.Thread(target=put)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(60)
    for answer in answers.values():  # never a 5xx, never a non-Status error
        assert answer.status_code in (200, 201, 409, 429), answer.text
        if answer.status_code >= 400:
            assert answer.json()["kind"] == "Status"
    acknowledged = sorted((int(r.json()["metadata"]["resourceVersion"]), writer) for writer, r in answers.items()
                          if r.status_code < 300)
    replicas, image = start
    for _, writer in acknowledged:  # the writes in the order the portal says it made them
        replicas, image = (2, image) if writer == "scale" else _spec(replaced)
    final = _spec(scaler.get(OBJ.format(name=name)).json())
    reverts = [] if final == (replicas, image) else [
        f"{name}: acknowledged {[w for _, w in acknowledged]} in that order should give {(replicas, image)}, "
        f"found {final}"]
    return reverts, [answers["scale"].status_code, answers["put"].status_code]


def race(scaler: httpx.Client, putter: httpx.Client) -> tuple[list[str], list[int]]:
    reverts: list[str] = []
    codes: list[int] = []
    for i in range(PAIRS):
        found, got = race_pair(scaler, putter, f"race{i}")
        reverts += found
        codes += got
    return reverts, codes


def test_a_scale_racing_a_full_put_never_silently_reverts_it_on_sqlite(tmp_path):
    with ThreadServer(tmp_path) as portal:
        seed_fleet(portal, gpus=4)
        with portal.client(TEAM_A) as scaler, portal.client(TEAM_A) as putter:
            reverts, codes = race(scaler, putter)
    assert reverts == [], f"{len(reverts)} of {PAIRS} racing pairs silently reverted an acknowledged write: {reverts[:3]}"
    assert codes.count(409) < len(codes) // 2  # the writers mostly succeed in order, not by refusing each other


def test_a_scale_racing_a_full_put_never_silently_reverts_it_across_two_postgresql_portals(tmp_path):
    with postgres_portals(tmp_path) as client, client(0, TEAM_A) as scaler, client(1, TEAM_A) as putter:
        reverts, codes = race(scaler, putter)
    assert reverts == [], f"{len(reverts)} of {PAIRS} racing pairs silently reverted an acknowledged write: {reverts[:3]}"
    assert codes.count(409) < len(codes) // 2


BAD_SCALES = [
    ({"spec": [1, 2]}, "spec must be an object"),
    ({"spec": "3"}, "spec must be an object"),
    ({"spec": {"replicas": 2}, "metadata": ["x"]}, "metadata must be an object"),
    ({"spec": {"replicas": 2}, "metadata": "x"}, "metadata must be an object"),
    ([1, 2], "the body must be a Scale object"),
    ({"spec": {"replicas": "2"}}, "spec.replicas must be an integer"),
    ({"spec": {"replicas": -1}}, "spec.replicas"),
]


@pytest.mark.parametrize("body,says", BAD_SCALES, ids=[s for _, s in BAD_SCALES])
def test_a_malformed_scale_body_is_a_4xx_status_never_a_500(tmp_path, body, says):
    with ThreadServer(tmp_path) as portal:
        seed_fleet(portal, gpus=4)
        with portal.client(TEAM_A) as team:
            assert team.put(OBJ.format(name="web"), json=deployment("web", namespace="team-a")).status_code == 201
            before = team.get(OBJ.format(name="web")).json()
            response = team.put(OBJ.format(name="web") + "/scale", json=body)
            after = team.get(OBJ.format(name="web")).json()
    assert response.status_code in (400, 422), response.text
    payload = response.json()
    assert payload["kind"] == "Status" and payload["code"] == response.status_code and says in payload["message"] + str(
        payload.get("details", ""))
    assert "Traceback" not in response.text
    assert after["metadata"]["resourceVersion"] == before["metadata"]["resourceVersion"]  # nothing was stored


def test_a_scale_with_a_stale_resource_version_is_a_409_and_stores_nothing(tmp_path):
    with ThreadServer(tmp_path) as portal:
        seed_fleet(portal, gpus=4)
        with portal.client(TEAM_A) as team:
            first = team.put(OBJ.format(name="web"), json=deployment("web", namespace="team-a")).json()
            stale = first["metadata"]["resourceVersion"]
            changed = copy.deepcopy(deployment("web", namespace="team-a", replicas=3))
            assert team.put(OBJ.format(name="web"), json=changed).status_code == 200
            response = team.put(OBJ.format(name="web") + "/scale", json={
                "kind": "Scale", "metadata": {"name": "web", "resourceVersion": stale}, "spec": {"replicas": 1}})
            assert response.status_code == 409 and response.json()["reason"] == "Conflict"
            assert team.get(OBJ.format(name="web")).json()["spec"]["replicas"] == 3
            fresh = team.get(OBJ.format(name="web") + "/scale").json()["metadata"]["resourceVersion"]
            ok = team.put(OBJ.format(name="web") + "/scale", json={
                "kind": "Scale", "metadata": {"name": "web", "resourceVersion": fresh}, "spec": {"replicas": 1}})
            assert ok.status_code == 200 and ok.json()["spec"]["replicas"] == 1
