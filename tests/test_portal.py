"""The portal over a real server on loopback: authorization, CRUD semantics, bad input,
concurrency against scarce capacity, and crash safety."""

import concurrent.futures
import html
import json
import os
import pathlib
import re
import signal
import time

import pytest
import yaml

from tests.manifests import cluster, deployment, gateway, gpu_class, service
from tests.portal_server import ADMIN, API, TEAM_A, TEAM_B, ThreadServer, free_port, put_retrying, start_process


@pytest.fixture
def portal(tmp_path):
    with ThreadServer(tmp_path) as server:
        yield server


def seed_fleet(server, gpus=10):
    with server.client(ADMIN) as admin:
        assert admin.put(f"{API}/inferenceclasses/l4", json=gpu_class("l4", 1, "23034Mi")).status_code == 201
        assert admin.put(f"{API}/inferenceclusters/c1", json=cluster("c1", pools=(("gpu", "l4", gpus),))).status_code == 201


NS_PATH = API + "/namespaces/{ns}/modeldeployments"
OBJ_PATH = API + "/namespaces/{ns}/modeldeployments/{name}"

# (method, path, token, namespace of the path, expected status)
MATRIX = [
    ("GET", NS_PATH, TEAM_A, "team-a", 200), ("GET", NS_PATH, TEAM_A, "team-b", 404), ("GET", NS_PATH, ADMIN, "team-b", 200),
    ("GET", OBJ_PATH, TEAM_A, "team-a", 200), ("GET", OBJ_PATH, TEAM_A, "team-b", 404), ("GET", OBJ_PATH, ADMIN, "team-b", 200),
    ("PUT", OBJ_PATH, TEAM_A, "team-a", 200), ("PUT", OBJ_PATH, TEAM_A, "team-b", 403), ("PUT", OBJ_PATH, ADMIN, "team-b", 200),
    ("DELETE", OBJ_PATH, TEAM_A, "team-b", 404), ("DELETE", OBJ_PATH, TEAM_B, "team-a", 404), ("DELETE", OBJ_PATH, TEAM_A, "team-a", 200),
    ("DELETE", OBJ_PATH, ADMIN, "team-b", 200),
    ("GET", API + "/inferenceclusters", TEAM_A, None, 200), ("GET", API + "/inferenceclusters/c1", TEAM_B, None, 200),
    ("PUT", API + "/inferenceclusters/c1", TEAM_A, None, 403), ("DELETE", API + "/inferenceclusters/c1", TEAM_A, None, 403),
    ("PUT", API + "/inferenceclusters/c1", ADMIN, None, 200),
    ("GET", "/plan", TEAM_A, None, 200), ("GET", "/runs", TEAM_B, None, 200),
    ("GET", NS_PATH, None, "team-a", 401), ("GET", "/plan", None, None, 401), ("GET", "/runs", "wrong-token", None, 401),
    ("PUT", OBJ_PATH, None, "team-a", 401), ("GET", API + "/namespaces/team-a/modelroutes", TEAM_A, "team-a", 404),
]


@pytest.mark.parametrize("method,path,token,ns,expected", MATRIX)
def test_authorization_matrix(portal, method, path, token, ns, expected):
    seed_fleet(portal)
    with portal.client(ADMIN) as admin:
        for namespace in ("team-a", "team-b"):  # distinct names: the workload namespace is shared (see docs)
            name = f"m-{namespace}"
            assert admin.put(OBJ_PATH.format(ns=namespace, name=name), json=deployment(name, namespace=namespace)).status_code == 201
    url = path.format(ns=ns, name=f"m-{ns}")
    body = None
    if method == "PUT":
        body = deployment(f"m-{ns}", namespace=ns, replicas=2) if "modeldeployments" in url else cluster("c1", pools=(("gpu", "l4", 12),))
    with portal.client(token) as client:
        response = client.request(method, url, json=body)
    assert response.status_code == expected, response.text
    if expected >= 400:
        assert response.json()["kind"] == "Status" and response.json()["code"] == expected


def test_create_get_replace_conflict_delete(portal):
    seed_fleet(portal)
    with portal.client(TEAM_A) as team:
        created = team.put(OBJ_PATH.format(ns="team-a", name="qwen"), json=deployment("qwen", namespace="team-a"))
        assert created.status_code == 201
        meta = created.json()["metadata"]
        assert meta["generation"] == 1 and meta["resourceVersion"] and meta["uid"]
        status = created.json()["status"]
        assert status["replicas"] == {"desired": 1, "placed": 1, "total": 1, "ready": 0}
        assert status["placement"][0]["cluster"] == "c1"
        replica = status["placement"][0]["name"]
        assert status["placement"][0]["endpoint"] == f"http://c1.gateway.pending.modelplane.invalid/team-a/{replica}/v1"
        # same spec again: a new resourceVersion, the same generation
        again = team.put(OBJ_PATH.format(ns="team-a", name="qwen"), json=deployment("qwen", namespace="team-a")).json()
        assert again["metadata"]["generation"] == 1 and again["metadata"]["resourceVersion"] != meta["resourceVersion"]
        # a spec change with the current resourceVersion: generation 2
        body = deployment("qwen", namespace="team-a", replicas=2)
        body["metadata"]["resourceVersion"] = again["metadata"]["resourceVersion"]
        replaced = team.put(OBJ_PATH.format(ns="team-a", name="qwen"), json=body)
        assert replaced.status_code == 200 and replaced.json()["metadata"]["generation"] == 2
        # the stale version is refused
        stale = team.put(OBJ_PATH.format(ns="team-a", name="qwen"), json=body)
        assert stale.status_code == 409 and stale.json()["reason"] == "Conflict"
        assert team.delete(OBJ_PATH.format(ns="team-a", name="qwen")).status_code == 200
        assert team.get(OBJ_PATH.format(ns="team-a", name="qwen")).status_code == 404


@pytest.mark.parametrize("content,fragment,code", [
    (b"x" * (1024 * 1024 + 1), "larger than", 413),
    (b"a: [1, 2", "YAML syntax error", 400),
    (b"\xff\xfe", "not UTF-8", 400),
    (b"", "expected one object", 400),
    (b"- a\n- b\n", "must be an object", 400),
    (json.dumps({**deployment("qwen", namespace="team-a"), "kind": "ModelService"}).encode(), "does not match the path", 400),
    (json.dumps(deployment("qwen", namespace="team-b")).encode(), "metadata.namespace 'team-b' does not match", 400),
    (json.dumps(deployment("other", namespace="team-a")).encode(), "metadata.name 'other' does not match", 400),
    (yaml.safe_dump(deployment("qwen", namespace="team-a", replicas=11)).encode(), "spec.replicas: must be less than or equal to 10", 422),
])
def test_bad_input_is_refused_clearly(portal, content, fragment, code):
    with portal.client(TEAM_A) as team:
        response = team.put(OBJ_PATH.format(ns="team-a", name="qwen"), content=content,
                            headers={"Content-Type": "application/yaml"})
        assert response.status_code == code, response.text
        body = response.json()
        text = body["message"] + json.dumps(body.get("details", {}))
        assert fragment in text
        assert team.get(OBJ_PATH.format(ns="team-a", name="qwen")).status_code == 404  # nothing half-applied


def test_invalid_objects_get_located_causes(portal):
    bad = yaml.safe_dump(deployment("qwen", namespace="team-a", replicas=11))
    with portal.client(TEAM_A) as team:
        response = team.put(OBJ_PATH.format(ns="team-a", name="qwen"), content=bad.encode())
    cause = response.json()["details"]["causes"][0]
    assert response.status_code == 422 and cause["field"] == "spec.replicas"
    assert cause["line"] == bad.splitlines().index("  replicas: 11") + 1
    assert cause["text"].startswith(f"request:{cause['line']}: ModelDeployment/qwen: spec.replicas:")


def test_a_body_the_portal_completes_keeps_its_lines(portal):
    """The portal drops `status` and fills metadata's namespace before it validates: the causes' lines are still
    the body's own."""
    body = deployment("qwen", namespace="team-a", replicas=11)
    del body["metadata"]["namespace"]
    body = {"apiVersion": body["apiVersion"], "kind": body["kind"], "metadata": body["metadata"],
            "status": {"observed": [1, 2]}, "spec": body["spec"]}
    bad = yaml.safe_dump(body, sort_keys=False)
    with portal.client(TEAM_A) as team:
        response = team.put(OBJ_PATH.format(ns="team-a", name="qwen"), content=bad.encode())
    cause = response.json()["details"]["causes"][0]
    assert response.status_code == 422 and cause["field"] == "spec.replicas"
    assert cause["line"] == bad.splitlines().index("  replicas: 11") + 1


def test_fifty_parallel_submissions_against_scarce_capacity(portal):
    seed_fleet(portal, gpus=10)

    def submit(i):
        ns, token = ("team-a", TEAM_A) if i % 2 == 0 else ("team-b", TEAM_B)
        with portal.client(token) as client:  # 503s (backpressure, a Status with Retry-After) are retried
            return put_retrying(client, OBJ_PATH.format(ns=ns, name=f"m{i}"), deployment(f"m{i}", namespace=ns)).status_code

    with concurrent.futures.ThreadPoolExecutor(max_workers=25) as pool:
        codes = list(pool.map(submit, range(50)))
    assert codes == [201] * 50
    with portal.client(ADMIN) as admin:
        stored = sum(len(admin.get(NS_PATH.format(ns=ns)).json()["items"]) for ns in ("team-a", "team-b"))
        plan = admin.get("/plan").json()
    assert stored == 50  # no lost write
    assert len(plan["replicas"]) == 10  # exactly the free GPUs, never more
    assert sum(u["missing"] for u in plan["unscheduled"]) == 40
    used = sum(m["nodes"] * sum(m["devices"].values()) for r in plan["replicas"] for e in r["engines"] for m in e["members"])
    assert used == 10


def test_tenants_see_only_their_plan_and_page(portal):
    seed_fleet(portal)
    with portal.client(ADMIN) as admin:
        admin.put(OBJ_PATH.format(ns="team-a", name="a1"), json=deployment("a1", namespace="team-a"))
        admin.put(OBJ_PATH.format(ns="team-b", name="b1"), json=deployment("b1", namespace="team-b"))
        admin.put(API + "/namespaces/team-a/modelservices/a1", json=service("a1", namespace="team-a", deployment_name="a1"))
    with portal.client(TEAM_A) as team:
        assert {r["deployment"] for r in team.get("/plan").json()["replicas"]} == {"team-a/a1"}
        page = team.get("/").text
    assert "team-a/a1" in page and "team-b/b1" not in page and TEAM_A not in page
    # no placeholder shown as an address: it says the address is not known yet
    assert "pending.modelplane.invalid" not in page and "pending: known once the fleet gateway has an address" in page


def form_token(html: str) -> str:
    return re.search(r'name="csrf" value="([^"]+)"', html).group(1)


def test_page_sign_in_and_submit_with_a_session_cookie(portal):
    seed_fleet(portal)
    with portal.client(None) as browser:
        browser.headers["Origin"] = portal.url  # as a browser sends it with every form post
        signin = browser.get("/")
        assert "Sign in" in signin.text
        bad = browser.post("/ui/signin", data={"token": "nope", "csrf": form_token(signin.text)}, follow_redirects=True)
        assert "not valid" in bad.text
        signed = browser.post("/ui/signin", data={"token": TEAM_A, "csrf": form_token(bad.text)}, follow_redirects=False)
        cookie = signed.headers["set-cookie"].lower()
        assert signed.status_code == 303 and "httponly" in cookie and "samesite=strict" in cookie
        assert TEAM_A not in signed.headers["set-cookie"]  # the cookie holds a session id, never the token
        page = browser.get("/")
        csrf = form_token(page.text)
        applied = browser.post("/ui/apply", data={"manifest": yaml.safe_dump(deployment("web", namespace="team-a")),
                                                  "csrf": csrf}, follow_redirects=True)
        assert "Accepted ModelDeployment web" in applied.text and "team-a/web" in applied.text
        refused = browser.post("/ui/apply", data={"manifest": yaml.safe_dump(deployment("web", namespace="team-b")),
                                                  "csrf": csrf}, follow_redirects=True)
        assert "may not write in team-b" in refused.text
        unconfirmed = browser.post("/ui/delete", data={"kind": "ModelDeployment", "namespace": "team-a", "name": "web",
                                                       "csrf": csrf}, follow_redirects=True)
        assert "type the name 'web' to confirm deleting ModelDeployment team-a/web" in html.unescape(unconfirmed.text)
        assert "team-a/web" in browser.get("/").text  # a click alone deleted nothing
        gone = browser.post("/ui/delete", data={"kind": "ModelDeployment", "namespace": "team-a", "name": "web",
                                                "csrf": csrf, "confirm": "web"}, follow_redirects=True)
        assert "Deleted ModelDeployment team-a/web" in gone.text


def test_openapi_document_is_served(portal):
    with portal.client(None) as anyone:
        spec = anyone.get("/openapi.json").json()
    assert spec["info"]["title"] == "modelplane portal"
    assert API + "/namespaces/{namespace}/{plural}/{name}" in spec["paths"]


def _queued(client, stack: str, seconds: float = 30) -> str | None:
    """The stack's run's status once the background replan after a write has queued it."""
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        found = {r["stack"]: r["status"] for r in client.get("/runs").json()["items"]}
        if stack in found:
            return found[stack]
        time.sleep(0.1)
    return None


@pytest.mark.parametrize("crash", ["after the replan queued the run", "before the replan after the write"])
def test_a_crash_between_accept_and_apply_loses_nothing_and_the_run_resumes(tmp_path, crash):
    import httpx
    port = free_port()
    slow = start_process(tmp_path, port, ["--worker-interval", "600"])  # accepts, does not apply yet
    try:
        client = httpx.Client(base_url=f"http://127.0.0.1:{port}", headers={"Authorization": f"Bearer {ADMIN}"}, timeout=30)
        client.put(f"{API}/inferenceclasses/l4", json=gpu_class("l4", 1, "23034Mi"))
        client.put(f"{API}/inferenceclusters/c1", json=cluster("c1", pools=(("gpu", "l4", 2),)))
        assert client.put(OBJ_PATH.format(ns="team-a", name="qwen"), json=deployment("qwen", namespace="team-a")).status_code == 201
        if crash == "after the replan queued the run":
            assert _queued(client, "model-team-a.qwen") == "queued"
    finally:
        os.kill(slow.pid, signal.SIGKILL)  # no shutdown, no flush: a crash
        slow.wait(10)
    env_path = os.environ.get("PATH", "")
    os.environ["PATH"] = str(tmp_path)  # no Pulumi CLI for the restarted portal: the run waits queued, saying why
    try:
        fast = start_process(tmp_path, port, ["--worker-interval", "0.2"])
    finally:
        os.environ["PATH"] = env_path
    try:
        client = httpx.Client(base_url=f"http://127.0.0.1:{port}", headers={"Authorization": f"Bearer {ADMIN}"}, timeout=30)
        assert client.get(OBJ_PATH.format(ns="team-a", name="qwen")).status_code == 200  # the accepted write survived
        deadline = time.monotonic() + 60
        seen: set[str] = set()
        while time.monotonic() < deadline:
            run = next((r for r in client.get("/runs").json()["items"] if r["stack"] == "model-team-a.qwen"), None)
            problems = client.get("/plan").json()["problems"]
            seen |= {run["status"]} if run is not None else set()
            # the worker claims the run on each try (running) and puts it back: wait for it back in the queue
            if run is not None and run["status"] == "queued" and any("the Pulumi CLI is not installed" in p
                                                                    for p in problems):
                break
            time.sleep(0.3)
        # the resumed run is kept, queued, until the CLI is there (not failed over and over), and /plan says why
        # (a run the worker tried says it in its log too; one queued after it stopped trying waits silently)
        assert run is not None and run["status"] == "queued" and not seen - {"queued", "running"}
        assert any("runs wait queued: the Pulumi CLI is not installed" in p for p in problems)
    finally:
        fast.terminate()
        fast.wait(10)


def test_worker_records_cluster_gateways_from_platform_outputs(tmp_path):
    """Bookkeeping only (nothing is deployed): given a successful platform result, its gatewayAddress is recorded."""
    from automation.portal.state import APPLIED, CLUSTER_GATEWAYS
    from automation.portal.store import Store
    from automation.portal.worker import Worker
    store = Store(f"sqlite:///{tmp_path / 'p.db'}")
    worker = Worker(store, tmp_path)
    with store.write() as conn:
        store.enqueue(conn, "platform-c1", "up", "f1")
    [run] = worker.claim()
    worker._finish(run, True, "up succeeded", "f1", {"gatewayAddress": "34.1.2.3"})
    with store.read() as conn:
        assert CLUSTER_GATEWAYS.get(conn) == {"c1": "34.1.2.3"}
        assert APPLIED.get(conn) == {"platform-c1": "f1"}
        assert store.list_runs(conn)[0]["status"] == "succeeded"


def test_two_teams_deploy_the_same_name_to_one_cluster(portal):
    seed_fleet(portal, gpus=4)
    with portal.client(TEAM_A) as a, portal.client(TEAM_B) as b:
        assert a.put(OBJ_PATH.format(ns="team-a", name="qwen"), json=deployment("qwen", namespace="team-a")).status_code == 201
        assert b.put(OBJ_PATH.format(ns="team-b", name="qwen"), json=deployment("qwen", namespace="team-b")).status_code == 201
    with portal.client(ADMIN) as admin:
        assert {r["deployment"] for r in admin.get("/plan").json()["replicas"]} == {"team-a/qwen", "team-b/qwen"}


def test_a_change_that_renders_invalid_objects_is_refused_whole(portal):
    seed_fleet(portal, gpus=4)
    with portal.client(ADMIN) as admin:
        shared = gateway()  # the reference's behaviour: every team's replicas in `default`
        shared["metadata"]["annotations"] = {"modelplane.ai/workload-namespaces": "Default"}
        assert admin.put(f"{API}/inferencegateways/default", json=shared).status_code == 201
        assert admin.put(OBJ_PATH.format(ns="team-a", name="qwen"), json=deployment("qwen", namespace="team-a")).status_code == 201
        refused = admin.put(OBJ_PATH.format(ns="team-b", name="qwen"), json=deployment("qwen", namespace="team-b"))
        assert refused.status_code == 422 and "already creates this object" in json.dumps(refused.json())
        assert admin.get(OBJ_PATH.format(ns="team-b", name="qwen")).status_code == 404  # rolled back, not half-stored
        assert {r["deployment"] for r in admin.get("/plan").json()["replicas"]} == {"team-a/qwen"}


def test_health_and_readiness_need_no_token(portal, tmp_path):
    import httpx

    assert httpx.get(portal.url + "/healthz").json() == {"status": "ok"}
    assert httpx.get(portal.url + "/readyz").json() == {"status": "ok"}
    portal.store.engine.dispose()
    (tmp_path / "portal.db").unlink()
    (tmp_path / "portal.db").mkdir()  # the database file is gone and cannot be recreated: not ready
    response = httpx.get(portal.url + "/readyz")
    assert response.status_code == 503 and response.json()["kind"] == "Status"
    assert httpx.get(portal.url + "/healthz").status_code == 200


def test_validation_warnings_come_back_as_warning_headers(portal):
    with portal.client(ADMIN) as admin:
        response = admin.put(f"{API}/inferenceclusters/c1", json=cluster("c1", pools=(("gpu", "l4x", 2),)))
        assert response.status_code == 201
        warning = response.headers["warning"]
        assert warning.startswith('299 - "spec.nodePools[0].className: InferenceClass ') and "'l4x'" in warning
        assert admin.put(f"{API}/inferenceclasses/l4x", json=gpu_class("l4x", 1, "23034Mi")).status_code == 201
        again = admin.put(f"{API}/inferenceclusters/c1", json=cluster("c1", pools=(("gpu", "l4x", 2),)))
        assert again.status_code == 200 and "warning" not in again.headers


def test_a_write_is_warned_about_its_own_object_not_a_same_named_one_in_another_namespace(portal):
    """A ModelService whose selector matches nothing is warned about; team-b's service of the same name, which does
    match, gets no warning of team-a's (warnings were picked by kind and name alone)."""
    with portal.client(ADMIN) as admin:
        lonely = admin.put(f"{API}/namespaces/team-a/modelservices/chat",
                           json=service("chat", namespace="team-a", deployment_name="nothing"))
        assert lonely.status_code == 201 and "matches no ModelEndpoint" in lonely.headers["warning"]
        assert admin.put(f"{API}/namespaces/team-b/modeldeployments/qwen",
                         json=deployment("qwen", namespace="team-b")).status_code == 201
        matched = admin.put(f"{API}/namespaces/team-b/modelservices/chat",
                            json=service("chat", namespace="team-b", deployment_name="qwen"))
        assert matched.status_code == 201 and "warning" not in matched.headers


def test_apply_pushes_manifests_to_a_portal(portal, tmp_path, monkeypatch, capsys):
    from automation.cli import main

    examples = str(pathlib.Path(__file__).resolve().parent.parent / "examples")
    monkeypatch.delenv("MODELPLANE_TOKEN", raising=False)
    assert main(["apply", "-f", examples, "--server", portal.url]) == 2
    assert "no token" in capsys.readouterr().err
    monkeypatch.setenv("MODELPLANE_TOKEN", ADMIN)
    assert main(["apply", "-f", examples, "--server", portal.url]) == 0
    out = capsys.readouterr().out.splitlines()
    assert out[0] == "InferenceClass/eks-h100-8x-p5 created" and "ModelService/ml-team/qwen3-8b created" in out
    assert len(out) == 15  # every object but the observed ModelReplica (the portal composes those)
    with portal.client(ADMIN) as admin:
        assert admin.get(f"{API}/namespaces/ml-team/modeldeployments/qwen3-8b").status_code == 200
    assert main(["apply", "-f", examples, "--server", portal.url]) == 0
    assert all(line.endswith(" unchanged") for line in capsys.readouterr().out.splitlines())  # as kubectl says it
    token = tmp_path / "token"
    token.write_text(TEAM_A + "\n")
    monkeypatch.delenv("MODELPLANE_TOKEN")
    assert main(["apply", "-f", examples, "--server", portal.url, "--token-file", str(token)]) == 1
    # unchanged objects are not written (as kubectl apply); the first that would be is refused
    assert "error: ModelCache/ml-team/qwen3-coder: 403 team-a may not write in namespace 'ml-team'" in \
        capsys.readouterr().err


def test_the_page_shows_fifty_deployments_at_a_time_with_links_between_pages(portal, monkeypatch):
    """At fleet scale the page lists one page of deployments (their statuses computed for that page only) and of
    pools, says how many there are, and links to the neighbouring pages, keeping the other table's page."""
    from automation.portal.service import replan

    with portal.store.write() as conn:  # 120 deployments and 60 pools, stored as accepted writes would be
        portal.store.put(conn, "InferenceClass", "", gpu_class("l4", 1, "23034Mi"), None)
        for i in range(30):
            portal.store.put(conn, "InferenceCluster", "", cluster(f"c{i:02d}", pools=(("gpu", "l4", 8), ("big", "l4", 2))), None)
        for i in range(120):
            portal.store.put(conn, "ModelDeployment", "team-a", deployment(f"d{i:03d}", namespace="team-a"), None)
        replan(portal.store, conn, False)
    with portal.client(TEAM_A) as team:
        first = team.get("/").text
        assert "team-a/d000" in first and "team-a/d049" in first and "team-a/d050" not in first
        assert "1&ndash;50 of 120" in first and 'href="/?pools=1&amp;page=2" rel="next"' in first
        assert "30 cluster(s), 60 pool(s)" in first and "120 deployment(s) you can see" in first
        third = team.get("/?page=3&pools=2").text
        assert "team-a/d100" in third and "team-a/d119" in third and "team-a/d099" not in third
        assert "101&ndash;120 of 120" in third and 'rel="next"' not in third.split('id="deployment-pages"')[1]
        assert "51&ndash;60 of 60" in third  # the pools' second page, kept while paging deployments
        assert "team-a/d119" in team.get("/?page=99").text  # beyond the last page: the last page
        assert "team-a/d000" in team.get("/?page=-4").text


def test_the_portal_turns_nagles_algorithm_off_on_its_connections():
    """A listening socket created without naming TCP made asyncio leave Nagle's algorithm on: every response then
    waited ~40 ms for the client's delayed ACK between its headers and its body (measured: /healthz 44 ms, 2 ms
    after). The server side of a connection accepted on the portal's socket must have TCP_NODELAY."""
    import asyncio
    import socket

    from automation.portal.app import listening_socket

    port = free_port()
    sock = listening_socket("127.0.0.1", port)

    async def nodelay_of_accepted() -> int:
        accepted: asyncio.Future = asyncio.get_running_loop().create_future()

        class Accept(asyncio.Protocol):
            def connection_made(self, transport):
                accepted.set_result(transport.get_extra_info("socket").getsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY))

        server = await asyncio.get_running_loop().create_server(Accept, sock=sock)
        _, writer = await asyncio.open_connection("127.0.0.1", port)
        value = await asyncio.wait_for(accepted, 5)
        writer.close()
        server.close()
        return value

    assert asyncio.run(nodelay_of_accepted()) != 0


def test_a_problem_only_the_background_replan_finds_holds_back_runs_and_is_shown_to_admins(tmp_path):
    """A write's own model stack is checked in its request; what only the whole fleet shows is found by the
    background replan, after the write was accepted: nothing is applied, and admins are told why."""
    from dataclasses import replace

    from automation.portal.service import compute_replan
    found: list[str] = []

    def replan_worker(*inputs):
        result = compute_replan(*inputs)
        if found:
            result = replace(result, problems=result.problems + found, runs=[])  # as compute_replan holds runs back
        return result

    with ThreadServer(tmp_path, apply=True, replan_worker=replan_worker) as server:
        seed_fleet(server)
        with server.client(ADMIN) as admin, server.client(TEAM_A) as team:
            found.append("InferenceCluster/c1: the fleet's route table is full")
            assert admin.put(OBJ_PATH.format(ns="team-a", name="a1"), json=deployment("a1", namespace="team-a")).status_code == 201
            server.settle()
            assert [r["stack"] for r in admin.get("/runs").json()["items"]] == ["platform-c1"]  # queued when seeded
            assert admin.get("/plan").json()["problems"] == found
            assert "the fleet&#39;s route table is full" in admin.get("/").text
            assert "route table" not in team.get("/").text and "problems" not in team.get("/plan").json()
            found.clear()
            assert admin.put(OBJ_PATH.format(ns="team-a", name="a1"),
                             json=deployment("a1", namespace="team-a", replicas=2)).status_code == 200
            server.settle()
            assert _queued(admin, "model-team-a.a1") == "queued"
            assert admin.get("/plan").json()["problems"] == [] and 'id="held"' not in admin.get("/").text


def test_a_deployment_write_checks_its_teams_stack_on_its_clusters_too(portal, monkeypatch):
    """A write changes its model stack and its team's stack (namespace, policy, quota) on each of its clusters:
    both are checked in the request, not left for the background replan to find after the write was accepted."""
    import workloads.schemas
    real = workloads.schemas.check
    monkeypatch.setattr(workloads.schemas, "check", lambda obj: real(obj) + (
        ["spec.hard: this cluster's API server refuses the quota"] if obj["kind"] == "ResourceQuota" else []))
    seed_fleet(portal)
    with portal.client(ADMIN) as admin:
        refused = admin.put(OBJ_PATH.format(ns="team-a", name="a1"), json=deployment("a1", namespace="team-a"))
        assert refused.status_code == 422, refused.text
        assert "team-team-a.c1" in refused.text and "refuses the quota" in refused.text
        assert admin.get(OBJ_PATH.format(ns="team-a", name="a1")).status_code == 404


def test_the_page_counts_pool_capacity_as_the_scheduler_does(portal):
    """A cluster that publishes `status.gpuPools` offers what it published, not its declared node pools; a pool whose
    class is missing offers nothing (fleet/inventory.py, which the scheduler places with)."""
    from automation.portal.service import replan

    l4 = gpu_class("l4", 1, "23034Mi")
    published = cluster("c1", pools=(("gpu", "l4", 8),), status={
        "gateway": {"address": "10.0.0.1"}, "conditions": [{"type": "Ready", "status": "True"}],
        "gpuPools": [{"name": "observed", "nodes": 3, "devices": [{**l4["spec"]["devices"][0], "count": 4}]}]})
    with portal.store.write() as conn:
        portal.store.put(conn, "InferenceClass", "", l4, None)
        portal.store.put(conn, "InferenceCluster", "", published, None)
        portal.store.put(conn, "InferenceCluster", "", cluster("c2", pools=(("gpu", "l4", 2), ("gone", "none", 5))), None)
        replan(portal.store, conn, False)
    with portal.client(ADMIN) as admin:
        text = admin.get("/").text
    rows = re.findall(r"<tr><td>(c\d)</td><td class=\"\w+\">([\w ]+)</td><td>(\w+)</td><td>(\d+)</td>", text)
    assert rows == [("c1", "not provisioned yet", "observed", "3"), ("c2", "not provisioned yet", "gpu", "2"),
                    ("c2", "not provisioned yet", "gone", "0")], rows
    assert "2 cluster(s) not provisioned yet" in text  # their devices do not exist until their platform stack applies
    assert "2 cluster(s), 3 pool(s), 0 of 14 devices claimed" in text  # 3 nodes x 4 + 2 x 1 + nothing


def signed_in(portal, browser) -> str:
    """Sign `browser` in as team-a through the page; the session's CSRF token."""
    browser.headers["Origin"] = portal.url
    signin = browser.get("/")
    browser.post("/ui/signin", data={"token": TEAM_A, "csrf": form_token(signin.text)}, follow_redirects=False)
    return form_token(browser.get("/").text)


def test_the_page_takes_several_objects_keeps_a_refused_paste_and_scales(portal):
    seed_fleet(portal)
    with portal.client(None) as browser:
        csrf = signed_in(portal, browser)
        two = yaml.safe_dump_all([deployment("one", namespace="team-a"), deployment("two", namespace="team-a")])
        applied = browser.post("/ui/apply", data={"manifest": two, "csrf": csrf}, follow_redirects=True)
        assert "Accepted ModelDeployment one, ModelDeployment two" in applied.text
        # a paste with one bad object writes none of them, and comes back in the form to fix
        bad = yaml.safe_dump_all([deployment("three", namespace="team-a"),
                                  {**deployment("four", namespace="team-a"), "spec": {"replicas": "x"}}])
        refused = browser.post("/ui/apply", data={"manifest": bad, "csrf": csrf}, follow_redirects=False)
        assert refused.status_code == 422 and "ModelDeployment/four: spec" in html.unescape(refused.text)
        assert html.escape(bad, quote=False).split("\n")[0] in refused.text  # the pasted text, kept
        assert "team-a/three" not in browser.get("/").text  # nothing of it was written
        scaled = browser.post("/ui/scale", data={"namespace": "team-a", "name": "one", "replicas": "2", "csrf": csrf},
                              follow_redirects=True)
        assert "Scaled ModelDeployment team-a/one to 2 replica(s)" in scaled.text
    with portal.client(ADMIN) as admin:
        assert admin.get(f"{API}/namespaces/team-a/modeldeployments/one").json()["spec"]["replicas"] == 2


def test_without_the_pulumi_cli_runs_wait_queued_and_problems_say_why(tmp_path):
    """No retry storm (the round-three finding: 86 failed runs in 3 minutes): the runs stay queued, their log and
    /plan's problems say why once, and the worker tries again only after BLOCKED_RETRY."""
    from automation.execution.runner import CLIMissing
    from automation.portal import worker as worker_module
    from automation.portal.reads import Reads
    from automation.portal.store import Store

    def no_cli(fleet, state_dir):
        raise CLIMissing("the Pulumi CLI is not installed: install it")

    store = Store(f"sqlite:///{tmp_path / 'p.db'}")
    worker = worker_module.Worker(store, tmp_path, runner=no_cli)
    with store.write() as conn:
        store.enqueue(conn, "platform-c1", "up", "f1")
        store.enqueue(conn, "gateway", "up", "f2")
    for _ in range(3):  # as if retried: each attempt leaves them queued, and says it once
        worker.blocked_until = 0.0
        worker.execute(worker.claim())
    with store.read() as conn:
        runs = store.list_runs(conn)
        held = Reads(store).held_back(conn)
    assert {r["status"] for r in runs} == {"queued"}
    assert all(r["log"].count("waiting: the Pulumi CLI is not installed") == 1 for r in runs)
    assert held == ["runs wait queued: the Pulumi CLI is not installed: install it"]
    assert worker.blocked_until > 0  # the loop does not claim again before BLOCKED_RETRY
