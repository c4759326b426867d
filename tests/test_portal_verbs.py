"""The portal's write verbs as the Kubernetes API server has them: POST (create, AlreadyExists, generateName), PATCH
(merge, JSON with a failing test op, strategic refused, server-side apply with field managers, kubectl's client-side
apply annotation), DELETE with DeleteOptions (preconditions, propagationPolicy, dry run), each a Status when it fails;
and a PATCH racing a PUT never silently reverts it."""

from __future__ import annotations

import json
import threading

import httpx
import pytest
import yaml

from tests.manifests import deployment, member
from tests.portal_server import ADMIN, API, TEAM_A, TEAM_B, ThreadServer
from tests.test_portal import seed_fleet

COLLECTION = API + "/namespaces/team-a/modeldeployments"
OBJ = COLLECTION + "/{name}"
MERGE, JSON_PATCH = "application/merge-patch+json", "application/json-patch+json"
STRATEGIC, APPLY = "application/strategic-merge-patch+json", "application/apply-patch+yaml"
NEW_IMAGE = "vllm/vllm-openai:v0.11.1"
LAST_APPLIED = "kubectl.kubernetes.io/last-applied-configuration"


@pytest.fixture(scope="module")
def portal(tmp_path_factory):
    with ThreadServer(tmp_path_factory.mktemp("verbs")) as server:
        seed_fleet(server, gpus=8)
        yield server


@pytest.fixture
def team(portal):
    with portal.client(TEAM_A) as client:
        yield client


def image(body: dict) -> str:
    return body["spec"]["template"]["spec"]["engines"][0]["members"][0]["template"]["spec"]["containers"][0]["image"]


def patch(client: httpx.Client, name: str, body, media: str, **params) -> httpx.Response:
    return client.patch(OBJ.format(name=name), content=body if isinstance(body, bytes) else json.dumps(body).encode(),
                        headers={"Content-Type": media}, params=params)


def status_of(response: httpx.Response, code: int, reason: str) -> dict:
    assert response.status_code == code, response.text
    body = response.json()
    assert body["kind"] == "Status" and body["code"] == code and body["reason"] == reason, body
    return body


def fresh(team: httpx.Client, name: str, replicas: int = 1) -> dict:
    team.delete(OBJ.format(name=name))
    created = team.post(COLLECTION, json=deployment(name, namespace="team-a", replicas=replicas))
    assert created.status_code == 201, created.text
    return created.json()


# ---- POST -------------------------------------------------------------------------------------------------------

def test_post_creates_then_a_second_post_is_409_already_exists(team):
    team.delete(OBJ.format(name="posted"))
    created = team.post(COLLECTION, json=deployment("posted", namespace="team-a"))
    assert created.status_code == 201, created.text
    assert created.json()["metadata"]["uid"] and created.json()["status"]["replicas"]["desired"] == 1
    again = team.post(COLLECTION, json=deployment("posted", namespace="team-a", replicas=2))
    body = status_of(again, 409, "AlreadyExists")
    assert body["details"]["name"] == "posted" and "already exists" in body["message"]
    assert team.get(OBJ.format(name="posted")).json()["spec"]["replicas"] == 1  # nothing replaced


def test_post_with_generate_name_makes_a_name_and_without_either_is_422(team):
    body = deployment("x", namespace="team-a")
    del body["metadata"]["name"]
    body["metadata"]["generateName"] = "gen-"
    names = set()
    for _ in range(2):
        created = team.post(COLLECTION, json=body)
        assert created.status_code == 201, created.text
        names.add(created.json()["metadata"]["name"])
    assert len(names) == 2 and all(n.startswith("gen-") and len(n) == 9 for n in names)
    for name in names:
        assert team.get(OBJ.format(name=name)).status_code == 200
        assert team.delete(OBJ.format(name=name)).status_code == 200
    del body["metadata"]["generateName"]
    status_of(team.post(COLLECTION, json=body), 422, "Invalid")


@pytest.mark.parametrize("token,path,code", [
    (TEAM_B, COLLECTION, 403), (TEAM_A, API + "/inferenceclusters", 403),
    (TEAM_A, API + "/namespaces/team-a/modelreplicas", 405)])
def test_post_is_authorized_as_a_put_is(portal, token, path, code):
    with portal.client(token) as client:
        response = client.post(path, json=deployment("intruder", namespace="team-a"))
    assert response.status_code == code and response.json()["kind"] == "Status"


def test_post_with_dry_run_validates_and_stores_nothing(team):
    team.delete(OBJ.format(name="dry"))
    answer = team.post(COLLECTION, json=deployment("dry", namespace="team-a"), params={"dryRun": "All"})
    assert answer.status_code == 201 and answer.json()["metadata"]["name"] == "dry"
    assert team.get(OBJ.format(name="dry")).status_code == 404
    status_of(team.post(COLLECTION, json=deployment("dry", namespace="team-a", replicas=11), params={"dryRun": "All"}),
              422, "Invalid")


# ---- dryRun=All on every write --------------------------------------------------------------------------------

def _applied_config(replicas: int) -> bytes:
    return yaml.safe_dump(deployment("dryrun", namespace="team-a", replicas=replicas)).encode()


DRY_RUNS = [  # (what, method, path under the object, body, media type, the object exists before?, expected code)
    ("create", "POST", None, json.dumps(deployment("dryrun", namespace="team-a")).encode(), "application/json", False, 201),
    ("put-create", "PUT", "", json.dumps(deployment("dryrun", namespace="team-a")).encode(), "application/json", False, 201),
    ("put-update", "PUT", "", json.dumps(deployment("dryrun", namespace="team-a", replicas=2)).encode(),
     "application/json", True, 200),
    ("merge-patch", "PATCH", "", b'{"spec":{"replicas":3}}', MERGE, True, 200),
    ("json-patch", "PATCH", "", b'[{"op":"replace","path":"/spec/replicas","value":3}]', JSON_PATCH, True, 200),
    ("apply-patch", "PATCH", "", _applied_config(3), APPLY, True, 200),
    ("delete", "DELETE", "", b"", "application/json", True, 200),
    ("scale-put", "PUT", "/scale", b'{"kind":"Scale","apiVersion":"autoscaling/v1","spec":{"replicas":4}}',
     "application/json", True, 200),
    ("scale-merge-patch", "PATCH", "/scale", b'{"spec":{"replicas":4}}', MERGE, True, 200),
    ("scale-json-patch", "PATCH", "/scale", b'[{"op":"replace","path":"/spec/replicas","value":4}]', JSON_PATCH,
     True, 200),
]


@pytest.mark.parametrize("what,method,under,body,media,exists,code", DRY_RUNS, ids=[row[0] for row in DRY_RUNS])
def test_a_dry_run_of_every_write_stores_nothing(team, what, method, under, body, media, exists, code):
    """Finding (issue 65): `dryRun=All` was ignored on /scale (`kubectl scale --dry-run=server` scaled 1 to 4)."""
    if exists:
        fresh(team, "dryrun")
    else:
        team.delete(OBJ.format(name="dryrun"))
    before = team.get(OBJ.format(name="dryrun"))
    listed = version_of(team)
    path = COLLECTION if under is None else OBJ.format(name="dryrun") + under
    answer = team.request(method, path, content=body, headers={"Content-Type": media},
                          params={"dryRun": "All", "fieldManager": "dry", **({"force": "true"} if media == APPLY else {})})
    assert answer.status_code == code, answer.text
    after = team.get(OBJ.format(name="dryrun"))
    assert after.status_code == before.status_code == (200 if exists else 404)
    if exists:  # unchanged: its version, its spec, its metadata
        assert {k: v for k, v in after.json().items() if k != "status"} == {
            k: v for k, v in before.json().items() if k != "status"}
    assert version_of(team) == listed  # nothing at all was stored


def version_of(team: httpx.Client) -> str:
    return team.get(COLLECTION).json()["metadata"]["resourceVersion"]


# ---- PATCH: merge and JSON patches ---------------------------------------------------------------------------

PATCHES = [  # (media type, patch made from the object as created, expected replicas, expected image)
    (MERGE, lambda _: {"spec": {"replicas": 3}}, 3, None),
    (MERGE, lambda _: {"metadata": {"labels": {"tier": "gold"}}}, 1, None),
    (JSON_PATCH, lambda _: [{"op": "replace", "path": "/spec/replicas", "value": 2}], 2, None),
    (JSON_PATCH, lambda o: [{"op": "test", "path": "/metadata/resourceVersion", "value": o["metadata"]["resourceVersion"]},
                            {"op": "replace", "path": "/spec/template/spec/engines/0/members/0/template/spec/containers/0/image",
                             "value": NEW_IMAGE}], 1, NEW_IMAGE),
]


@pytest.mark.parametrize("media,make,replicas,new_image", PATCHES)
def test_a_patch_changes_the_stored_object(team, media, make, replicas, new_image):
    created = fresh(team, "patched")
    answer = patch(team, "patched", make(created), media)
    assert answer.status_code == 200, answer.text
    stored = team.get(OBJ.format(name="patched")).json()
    assert stored["spec"]["replicas"] == replicas and image(stored) == (new_image or image(created))
    assert int(stored["metadata"]["resourceVersion"]) > int(created["metadata"]["resourceVersion"])
    if media == MERGE and "metadata" in make(created):
        assert stored["metadata"]["labels"] == {"tier": "gold"}


BAD_PATCHES = [  # (media type, patch, code, reason)
    (JSON_PATCH, [{"op": "test", "path": "/spec/replicas", "value": 7}, {"op": "replace", "path": "/spec/replicas",
                                                                        "value": 2}], 422, "Invalid"),
    (JSON_PATCH, [{"op": "remove", "path": "/spec/nothing"}], 422, "Invalid"),
    (JSON_PATCH, {"op": "replace"}, 400, "BadRequest"),
    (JSON_PATCH, [{"op": "frobnicate", "path": "/spec"}], 400, "BadRequest"),
    (MERGE, b"{not json", 400, "BadRequest"),
    (MERGE, {"spec": {"replicas": 11}}, 422, "Invalid"),
    (MERGE, {"metadata": {"resourceVersion": "1"}, "spec": {"replicas": 2}}, 409, "Conflict"),
    (MERGE, {"kind": "ModelService"}, 400, "BadRequest"),
    (STRATEGIC, {"spec": {"replicas": 2}}, 415, "UnsupportedMediaType"),
    ("text/plain", b"replicas: 2", 415, "UnsupportedMediaType"),
]


@pytest.mark.parametrize("media,body,code,reason", BAD_PATCHES, ids=[f"{m}-{c}-{i}" for i, (m, _, c, _) in
                                                                     enumerate(BAD_PATCHES)])
def test_a_bad_patch_is_a_status_and_stores_nothing(team, media, body, code, reason):
    created = fresh(team, "unpatched")
    status_of(patch(team, "unpatched", body, media), code, reason)
    stored = team.get(OBJ.format(name="unpatched")).json()
    assert stored["metadata"]["resourceVersion"] == created["metadata"]["resourceVersion"]


def test_patch_of_a_missing_object_is_404_and_a_patch_with_the_current_version_applies(team):
    team.delete(OBJ.format(name="absent"))
    status_of(patch(team, "absent", {"spec": {"replicas": 2}}, MERGE), 404, "NotFound")
    created = fresh(team, "versioned")
    current = created["metadata"]["resourceVersion"]
    assert patch(team, "versioned", {"metadata": {"resourceVersion": current}, "spec": {"replicas": 2}},
                 MERGE).status_code == 200


def test_kubectl_client_side_apply_annotation_round_trips(team):
    """kubectl apply (client-side) creates with the annotation, then sends a merge patch carrying the new one."""
    team.delete(OBJ.format(name="csa"))
    first = deployment("csa", namespace="team-a")
    first["metadata"]["annotations"] = {LAST_APPLIED: json.dumps(first, separators=(",", ":")) + "\n"}
    created = team.post(COLLECTION, json=first, params={"fieldManager": "kubectl-client-side-apply"},
                        headers={"User-Agent": "kubectl/v1.32.0 (linux/amd64) kubernetes/abcdef"})
    assert created.status_code == 201, created.text
    second = deployment("csa", namespace="team-a", replicas=2)
    annotation = json.dumps(second, separators=(",", ":")) + "\n"
    answer = patch(team, "csa", {"metadata": {"annotations": {LAST_APPLIED: annotation}}, "spec": {"replicas": 2}},
                   MERGE, fieldManager="kubectl-client-side-apply")
    assert answer.status_code == 200, answer.text
    stored = team.get(OBJ.format(name="csa")).json()
    assert stored["metadata"]["annotations"][LAST_APPLIED] == annotation and stored["spec"]["replicas"] == 2
    managers = {(e["manager"], e["operation"]) for e in stored["metadata"]["managedFields"]}
    assert managers == {("kubectl-client-side-apply", "Update")}


# ---- PATCH: server-side apply ----------------------------------------------------------------------------------

def applied(client: httpx.Client, body: dict, manager: str | None, force: bool = False) -> httpx.Response:
    params = {"force": "true"} if force else {}
    if manager:
        params["fieldManager"] = manager
    return client.patch(OBJ.format(name=body["metadata"]["name"]), content=yaml.safe_dump(body).encode(),
                        headers={"Content-Type": APPLY}, params=params)


def owners(body: dict) -> dict[str, set[str]]:
    """manager -> the dotted fields it owns (as FieldsV1 spells them, f: dropped)."""
    def paths(node: dict, prefix: str) -> set[str]:
        out: set[str] = set()
        for key, child in node.items():
            path = f"{prefix}.{key[2:]}"
            out |= paths(child, path) if child else {path}
        return out
    return {e["manager"]: paths(e["fieldsV1"], "") for e in body["metadata"].get("managedFields", [])}


def test_server_side_apply_creates_updates_conflicts_and_forces(team):
    team.delete(OBJ.format(name="ssa"))
    config = deployment("ssa", namespace="team-a", replicas=1)
    config["metadata"]["labels"] = {"team": "a"}
    status_of(applied(team, config, None), 422, "Invalid")  # fieldManager is required for apply

    created = applied(team, config, "alice")  # create-on-apply
    assert created.status_code == 201, created.text
    assert ".spec.replicas" in owners(created.json())["alice"] and ".metadata.labels.team" in owners(created.json())["alice"]
    assert created.json()["metadata"]["managedFields"][0]["operation"] == "Apply"

    config["spec"]["replicas"] = 2  # the same manager changes its own field, and drops its label
    del config["metadata"]["labels"]
    updated = applied(team, config, "alice")
    assert updated.status_code == 200, updated.text
    assert updated.json()["spec"]["replicas"] == 2 and "labels" not in updated.json()["metadata"]

    other = deployment("ssa", namespace="team-a", replicas=3)  # another manager, another value: a conflict
    conflict = status_of(applied(team, other, "bob"), 409, "Conflict")
    fields = {c["field"] for c in conflict["details"]["causes"]}
    assert ".spec.replicas" in fields and all(c["type"] == "FieldManagerConflict" for c in conflict["details"]["causes"])
    assert "alice" in conflict["message"]
    assert team.get(OBJ.format(name="ssa")).json()["spec"]["replicas"] == 2  # nothing stored

    stale = deployment("ssa", namespace="team-a", replicas=2)  # a resourceVersion in the config is a precondition
    stale["metadata"]["resourceVersion"] = created.json()["metadata"]["resourceVersion"]
    status_of(applied(team, stale, "alice"), 409, "Conflict")

    same = deployment("ssa", namespace="team-a", replicas=2)  # the same values: owned together, no conflict
    assert applied(team, same, "carol").status_code == 200
    forced = applied(team, other, "bob", force=True)
    assert forced.status_code == 200, forced.text
    after = owners(forced.json())
    assert forced.json()["spec"]["replicas"] == 3 and ".spec.replicas" in after["bob"]
    assert ".spec.replicas" not in after.get("alice", set()) | after.get("carol", set())


def test_an_update_takes_the_fields_it_changes_from_the_appliers(team):
    team.delete(OBJ.format(name="mixed"))
    assert applied(team, deployment("mixed", namespace="team-a", replicas=1), "alice").status_code == 201
    assert patch(team, "mixed", {"spec": {"replicas": 2}}, MERGE, fieldManager="scaler").status_code == 200
    stored = team.get(OBJ.format(name="mixed")).json()
    assert ".spec.replicas" in owners(stored)["scaler"] and ".spec.replicas" not in owners(stored)["alice"]
    # alice applying again her old value now conflicts with the Update manager
    status_of(applied(team, deployment("mixed", namespace="team-a", replicas=1), "alice"), 409, "Conflict")


# ---- DELETE ------------------------------------------------------------------------------------------------------

DELETES = [  # (options made from the stored object, expected code, deleted?)
    (lambda o: {"kind": "DeleteOptions", "apiVersion": "v1", "preconditions": {"uid": "not-its-uid"}}, 409, False),
    (lambda o: {"preconditions": {"resourceVersion": "1"}}, 409, False),
    (lambda o: {"preconditions": {"uid": o["metadata"]["uid"], "resourceVersion": o["metadata"]["resourceVersion"]}},
     200, True),
    (lambda o: {"propagationPolicy": "Foreground"}, 200, True),
    (lambda o: {"propagationPolicy": "Orphan"}, 200, True),
    (lambda o: {"propagationPolicy": "Background"}, 200, True),
    (lambda o: {"propagationPolicy": "Sometimes"}, 422, False),
    (lambda o: {"dryRun": ["All"]}, 200, False),
    (lambda o: [1], 400, False),
    # a malformed value is a 400, as DeleteOptions that do not decode are (an empty list deleted without preconditions)
    (lambda o: {"preconditions": []}, 400, False),
    (lambda o: {"preconditions": ""}, 400, False),
    (lambda o: {"preconditions": {"resourceVersion": 1}}, 400, False),
    (lambda o: {"dryRun": {}}, 400, False),
    (lambda o: {"preconditions": None}, 200, True),
]


@pytest.mark.parametrize("options,code,deleted", DELETES)
def test_delete_options(team, options, code, deleted):
    created = fresh(team, "doomed")
    response = team.request("DELETE", OBJ.format(name="doomed"), content=json.dumps(options(created)).encode(),
                            headers={"Content-Type": "application/json"})
    assert response.status_code == code, response.text
    # the object as deleted on success, as the API server answers for a custom resource; a Status otherwise
    answer = response.json()
    if code == 200:
        assert (answer["kind"], answer["metadata"]["uid"]) == ("ModelDeployment", created["metadata"]["uid"])
    else:
        assert answer["kind"] == "Status" and answer["code"] == code
    assert (team.get(OBJ.format(name="doomed")).status_code == 404) is deleted


# ---- racing writers ----------------------------------------------------------------------------------------------

def test_a_patch_racing_a_put_never_silently_reverts_it(tmp_path):
    """As tests/security/test_lost_updates.py for /scale: the acknowledged writes, in the order of their answers'
    resourceVersions, must give the object as it ends (a patch sets replicas, the PUT replaces the image)."""
    reverts = []
    with ThreadServer(tmp_path) as server:
        seed_fleet(server, gpus=4)
        with server.client(TEAM_A) as patcher, server.client(TEAM_A) as putter:
            for i in range(15):
                name = f"race{i}"
                assert patcher.put(OBJ.format(name=name), json=deployment(name, namespace="team-a")).status_code == 201
                replaced = deployment(name, namespace="team-a",
                                      engines=[{"name": "vllm", "members": [member(image=NEW_IMAGE)]}])
                barrier, answers = threading.Barrier(2), {}

                def run(writer: str) -> None:
                    barrier.wait()
                    answers[writer] = (patch(patcher, name, {"spec": {"replicas": 2}}, MERGE) if writer == "patch"
                                       else putter.put(OBJ.format(name=name), json=replaced))

                threads = [threading.Thread(target=run, args=(w,)) for w in ("patch", "put")]
                for thread in threads:
                    thread.start()
                for thread in threads:
                    thread.join(60)
                assert all(r.status_code in (200, 409, 429) for r in answers.values()), answers
                replicas, img = 1, "vllm/vllm-openai:v0.11.0"
                for _, writer in sorted((int(r.json()["metadata"]["resourceVersion"]), w)
                                        for w, r in answers.items() if r.status_code == 200):
                    replicas, img = (2, img) if writer == "patch" else (1, NEW_IMAGE)
                final = patcher.get(OBJ.format(name=name)).json()
                if (final["spec"]["replicas"], image(final)) != (replicas, img):
                    reverts.append(name)
    assert reverts == []


def test_kubectl_scale_sends_a_merge_patch_of_the_scale(team):
    fresh(team, "scaled")
    response = team.patch(OBJ.format(name="scaled") + "/scale", content=b'{"spec":{"replicas":3}}',
                          headers={"Content-Type": MERGE})
    assert response.status_code == 200 and response.json()["kind"] == "Scale", response.text
    assert team.get(OBJ.format(name="scaled")).json()["spec"]["replicas"] == 3
    status_of(team.patch(OBJ.format(name="scaled") + "/scale", content=b'{"metadata":{"resourceVersion":"1"},'
                         b'"spec":{"replicas":2}}', headers={"Content-Type": MERGE}), 409, "Conflict")


def test_admin_patches_a_cluster_scoped_object(portal):
    with portal.client(ADMIN) as admin:
        answer = admin.patch(API + "/inferenceclusters/c1", content=b'{"metadata":{"labels":{"zone":"a"}}}',
                             headers={"Content-Type": MERGE})
        assert answer.status_code == 200, answer.text
        assert admin.get(API + "/inferenceclusters/c1").json()["metadata"]["labels"]["zone"] == "a"
