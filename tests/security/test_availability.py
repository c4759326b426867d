"""Findings 5, 6 and 7: reads never wait on writes, every error is a Kubernetes Status, and startup errors are
user errors (one line, exit 2) with a private data folder."""

from __future__ import annotations

import os
import socket
import stat
import subprocess
import sys
import threading
import time

import pytest
from sqlalchemy import create_engine

from automation.portal import store as store_module
from tests.manifests import deployment
from tests.portal_server import ADMIN, API, TEAM_A, ThreadServer, free_port, running, write_tokens
from tests.test_portal import seed_fleet

OBJ = API + "/namespaces/team-a/modeldeployments/{name}"


@pytest.fixture
def portal(tmp_path):
    with ThreadServer(tmp_path) as server:
        yield server


def test_a_write_stuck_on_the_lock_neither_freezes_reads_nor_waits_30_seconds(portal, monkeypatch):
    seed_fleet(portal)
    monkeypatch.setattr(store_module, "WRITE_WAIT", 0.5)
    held, release = threading.Event(), threading.Event()

    def hold_the_write_lock():
        with portal.store.write():
            held.set()
            release.wait(10)

    holder = threading.Thread(target=hold_the_write_lock)
    holder.start()
    try:
        assert held.wait(10), "the holder never took the write lock"  # not a sleep: a slow runner takes it late
        with portal.client(TEAM_A) as team:
            results = {}

            def write():
                started = time.monotonic()
                results["write"] = team.put(OBJ.format(name="late"), json=deployment("late", namespace="team-a"))
                results["write_took"] = time.monotonic() - started

            writer = threading.Thread(target=write)
            writer.start()
            time.sleep(0.05)
            started = time.monotonic()
            for _ in range(20):
                assert team.get(API + "/namespaces/team-a/modeldeployments").status_code == 200
            reads_took = time.monotonic() - started
            writer.join(10)
        assert reads_took < 2, f"20 reads took {reads_took:.1f} s while a write waited"
        response = results["write"]
        assert response.status_code == 503 and response.headers["Retry-After"] == "1"
        assert response.json()["kind"] == "Status" and response.json()["reason"] == "ServiceUnavailable"
        assert results["write_took"] < 3
    finally:
        release.set()
        holder.join()


ERRORS = [
    # (method, path, headers, body, expected code, expected reason)
    ("GET", "/no/such/route", {}, None, 404, "NotFound"),
    ("POST", OBJ.format(name="x"), {}, b"{}", 405, "MethodNotAllowed"),
    ("PATCH", OBJ.format(name="x"), {}, b"{}", 415, "UnsupportedMediaType"),  # no patch media type
    ("PATCH", OBJ.format(name="x"), {"Content-Type": "application/merge-patch+json"}, b"{}", 404, "NotFound"),
    ("POST", "/plan", {}, b"", 405, "MethodNotAllowed"),
    ("PUT", API + "/namespaces/Team_A/modeldeployments/x", {}, b"{}", 422, "Invalid"),
    ("PUT", API + "/namespaces/team-a/modeldeployments/UPPER", {}, b"{}", 422, "Invalid"),
    ("POST", "/ui/delete", {"Content-Type": "application/x-www-form-urlencoded"}, b"kind=ModelDeployment", 422, "Invalid"),
    ("PUT", OBJ.format(name="x"), {}, b'{"apiVersion": "modelplane.ai/v1alpha1", "kind": "ModelDeployment", '
                                         b'"metadata": "x", "spec": {}}', 400, "BadRequest"),
    ("PUT", OBJ.format(name="x"), {}, b"[1, 2]", 400, "BadRequest"),
    ("PUT", OBJ.format(name="x"), {}, b"\xff\xfe", 400, "BadRequest"),
    ("GET", "/runs/99999999999999999999999999", {}, None, 404, "NotFound"),
    ("GET", "/runs/9223372036854775808", {}, None, 404, "NotFound"),
    ("GET", "/runs/-1", {}, None, 404, "NotFound"),
    ("GET", "/runs/abc", {}, None, 404, "NotFound"),
]


@pytest.mark.parametrize("method,path,headers,body,code,reason", ERRORS, ids=[f"{m} {p[:50]} {c}" for m, p, _, _, c, _ in ERRORS])
def test_every_error_is_a_kubernetes_status(portal, method, path, headers, body, code, reason):
    with portal.client(ADMIN) as admin:
        response = admin.request(method, path, headers=headers, content=body)
    assert response.status_code == code, response.text
    payload = response.json()
    assert payload["kind"] == "Status" and payload["apiVersion"] == "v1" and payload["code"] == code
    assert payload["reason"] == reason and "detail" not in payload
    if code == 405:
        assert response.headers["Allow"]


def test_an_unreachable_database_is_a_503_status_not_a_500(portal):
    portal.store.engine = create_engine(f"postgresql+psycopg://nobody@127.0.0.1:{free_port()}/none",
                                        connect_args={"connect_timeout": 2})
    with portal.client(ADMIN) as admin:
        for path in ("/plan", API + "/inferenceclusters", "/readyz"):
            response = admin.get(path)
            assert response.status_code == 503 and response.json()["kind"] == "Status", path
        assert admin.get("/healthz").status_code == 200


def serve(tmp_path, *extra: str) -> subprocess.CompletedProcess:
    """`serve` run in `tmp_path`: with no --data-dir, its default folder (.modelplane/portal) lands there, not in
    the checkout."""
    return subprocess.run([sys.executable, "-m", "automation.cli", "serve", "--tokens", str(write_tokens(tmp_path)),
                           "--no-apply", *extra], capture_output=True, text=True, timeout=60, cwd=tmp_path)


@pytest.mark.parametrize("url,says", [
    ("not a url", "the database URL is not a URL"),
    ("nosuchdriver://x/y", "cannot use database nosuchdriver://x/y"),
    ("postgresql+psycopg://user:hunter2@127.0.0.1:{port}/db", "cannot open database postgresql+psycopg://user:***@"),
])
def test_a_bad_database_url_is_one_line_and_exit_2_without_the_password(tmp_path, url, says):
    result = serve(tmp_path, "--port", str(free_port()), "--database", url.format(port=free_port()))
    lines = result.stderr.strip().splitlines()
    assert result.returncode == 2 and len(lines) == 1 and lines[0].startswith("error: ") and says in lines[0]
    assert "hunter2" not in result.stderr + result.stdout and "Traceback" not in result.stderr


def test_a_busy_port_is_one_line_and_exit_2(tmp_path):
    with socket.socket() as busy:
        busy.bind(("127.0.0.1", 0))
        busy.listen(1)
        port = busy.getsockname()[1]
        result = serve(tmp_path, "--port", str(port), "--data-dir", str(tmp_path / "data"))
    assert result.returncode == 2
    assert result.stderr.strip().splitlines() == [f"error: cannot listen on 127.0.0.1:{port}: Address already in use"]


def test_the_data_folder_and_database_are_readable_by_the_owner_only(tmp_path):
    from automation.portal.store import Store

    old = os.umask(0o022)
    try:
        Store(f"sqlite:///{tmp_path / 'data' / 'portal.db'}")
    finally:
        os.umask(old)
    assert stat.S_IMODE(os.stat(tmp_path / "data").st_mode) == 0o700
    assert stat.S_IMODE(os.stat(tmp_path / "data" / "portal.db").st_mode) == 0o600


def test_the_replan_worker_process_gives_what_the_thread_gives_and_survives_its_death(portal):
    import signal

    from automation.portal.replan_worker import ReplanWorker
    from automation.portal.service import compute_replan, replan_inputs

    seed_fleet(portal)
    with portal.client(TEAM_A) as team:
        assert team.put(OBJ.format(name="web"), json=deployment("web", namespace="team-a", replicas=2)).status_code == 201
    with portal.store.read() as conn:
        inputs = replan_inputs(portal.store, conn, True)  # what the portal hands the worker
    worker = ReplanWorker()
    try:
        expected = compute_replan(*inputs)
        assert worker(*inputs) == expected and len(expected.runs) >= 2
        for pid in list(worker._pool._processes):  # the worker dies (OOM killer, a bug): the next replan still answers
            os.kill(pid, signal.SIGKILL)
        time.sleep(0.5)
        assert worker(*inputs) == expected
        assert worker(*inputs) == expected  # and a new worker took over
    finally:
        worker.close()


@pytest.mark.skipif(not os.path.isdir("/proc"), reason="needs /proc to see the worker process")
def test_a_killed_portal_leaves_no_replan_worker_behind():
    script = ("from automation.portal.replan_worker import ReplanWorker\nimport time\nw = ReplanWorker()\n"
              "w._pool.submit(int).result()\nprint(next(iter(w._pool._processes)), flush=True)\ntime.sleep(120)\n")
    portal = subprocess.Popen([sys.executable, "-c", script], stdout=subprocess.PIPE, text=True,
                              cwd=os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))
    worker = int(portal.stdout.readline())
    assert running(worker)
    portal.kill()  # no shutdown at all: SIGKILL, an OOM kill, a crash
    portal.wait(10)
    deadline = time.monotonic() + 10
    while running(worker) and time.monotonic() < deadline:
        time.sleep(0.1)
    assert not running(worker)


def test_a_replan_worker_whose_portal_died_before_it_started_exits_too(monkeypatch):
    """The portal's pid is handed to the worker: read in the worker, it could already be init's."""
    import automation.portal.replan_worker as replan_worker

    exits = []
    monkeypatch.setattr(replan_worker.os, "_exit", lambda code: exits.append(code))
    monkeypatch.setattr(replan_worker.os, "getppid", lambda: 1)  # reparented: the portal is gone
    niceness: list[int] = []
    monkeypatch.setattr(replan_worker.os, "nice", niceness.append)  # not this test process's priority
    threads_before = set(threading.enumerate())
    replan_worker._import_planner(parent=os.getpid())
    for thread in set(threading.enumerate()) - threads_before:
        thread.join(5)
    assert exits == [0]
    assert niceness == [replan_worker.BACKGROUND_NICENESS]  # the replan is background work: requests come first
