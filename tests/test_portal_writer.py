"""`modelplane serve` runs the writes in a process of their own (automation/portal/writer.py): what a client sees of a
write is what the in-process road answers (objects, statuses, errors as Kubernetes Statuses), reads see a write as
soon as it commits, a writer that dies is replaced, and a killed portal leaves no writer behind."""

from __future__ import annotations

import os
import pickle
import signal
import time
from pathlib import Path

import httpx
import pytest

from automation.portal.writing import already_exists
from automation.portal.service import ApiError
from tests.manifests import cluster, deployment, gpu_class
from tests.portal_server import ADMIN, API, TEAM_A, free_port, running, start_process

OBJ = API + "/namespaces/team-a/modeldeployments/{name}"

pytestmark = pytest.mark.skipif(not os.path.isdir("/proc"), reason="needs /proc to see the writer process")


def proc_file(path: str) -> bytes:
    """A /proc file's bytes, or nothing when its process or thread ended (and was reaped) meanwhile:
    the file is then missing (ENOENT) or its read fails with ESRCH."""
    try:
        return Path(path).read_bytes()
    except (FileNotFoundError, ProcessLookupError):
        return b""


def children(pid: int) -> list[int]:
    found = []
    for task in Path(f"/proc/{pid}/task").iterdir():
        found += [int(child) for child in proc_file(f"{task}/children").split()]
    return found


def spawned(pid: int) -> list[int]:
    """The processes `pid` started through multiprocessing's spawn (not its resource tracker)."""
    return [c for c in children(pid) if b"spawn_main" in proc_file(f"/proc/{c}/cmdline")]


@pytest.fixture
def served(tmp_path):
    port = free_port()
    process = start_process(tmp_path, port, ["--no-apply"])
    url = f"http://127.0.0.1:{port}"
    try:
        with httpx.Client(base_url=url, headers={"Authorization": f"Bearer {ADMIN}"}, timeout=60) as admin:
            assert admin.put(f"{API}/inferenceclasses/l4", json=gpu_class("l4", 1, "23034Mi")).status_code == 201
            assert admin.put(f"{API}/inferenceclusters/c1", json=cluster("c1", pools=(("gpu", "l4", 4),))).status_code == 201
        with httpx.Client(base_url=url, headers={"Authorization": f"Bearer {TEAM_A}"}, timeout=60) as team:
            yield process, team
    finally:
        process.terminate()
        process.wait(20)


def test_the_serving_process_holds_no_ledger_and_its_writer_answers_as_the_api_server_does(served):
    process, team = served
    [writer] = spawned(process.pid)  # one writer; its replan worker is its own child
    assert spawned(writer), "the writer's replan worker"
    created = team.put(OBJ.format(name="web"), json=deployment("web", namespace="team-a", replicas=2))
    assert created.status_code == 201, created.text
    version = created.json()["metadata"]["resourceVersion"]
    # read back at once by the serving process: the write committed in the writer is what it reads
    listed = team.get(API + "/namespaces/team-a/modeldeployments").json()["items"]
    assert [o["metadata"]["name"] for o in listed] == ["web"] and listed[0]["metadata"]["resourceVersion"] == version
    # errors raised in the writer are the same Statuses
    stale = deployment("web", namespace="team-a", replicas=1)
    stale["metadata"]["resourceVersion"] = "1"
    conflict = team.put(OBJ.format(name="web"), json=stale)
    assert conflict.status_code == 409 and conflict.json()["reason"] == "Conflict" and "stale" in conflict.json()["message"]
    taken = team.post(API + "/namespaces/team-a/modeldeployments", json=deployment("web", namespace="team-a"))
    assert taken.status_code == 409 and taken.json()["details"]["kind"] == "modeldeployments"
    too_many = team.put(OBJ.format(name="big"), json=deployment("big", namespace="team-a", replicas=9))
    assert too_many.status_code in (200, 201) and too_many.json()["status"]  # placed what fits, said the rest
    dry = team.put(OBJ.format(name="dry") + "?dryRun=All", json=deployment("dry", namespace="team-a"))
    assert dry.status_code == 201 and team.get(OBJ.format(name="dry")).status_code == 404
    assert team.delete(OBJ.format(name="web")).status_code == 200
    assert team.get(OBJ.format(name="web")).status_code == 404


def test_a_writer_that_dies_while_idle_is_replaced_and_the_next_write_succeeds(served):
    """Finding: the first write after an idle writer died was a 503 (the pool was replaced only once a write found it
    broken). A write the dead writer never began is certain not to have run, and goes to the new writer."""
    process, team = served
    [writer] = spawned(process.pid)
    os.kill(writer, signal.SIGKILL)
    deadline = time.monotonic() + 10
    while running(writer) and time.monotonic() < deadline:
        time.sleep(0.1)
    os.kill(process.pid, signal.SIGHUP)  # a tokens reload while the writer is gone: the portal stays up
    time.sleep(0.5)
    assert process.poll() is None
    first = team.put(OBJ.format(name="web"), json=deployment("web", namespace="team-a"))
    assert first.status_code == 201, first.text
    assert team.get(OBJ.format(name="web")).json()["metadata"]["uid"] == first.json()["metadata"]["uid"]
    assert [p for p in spawned(process.pid) if p != writer], "a new writer"
    [replaced] = spawned(process.pid)  # killed again, at once: the write is sent before the death is noticed
    os.kill(replaced, signal.SIGKILL)
    again = team.put(OBJ.format(name="web"), json=deployment("web", namespace="team-a", replicas=2))
    assert again.status_code == 200, again.text


def test_a_killed_portal_leaves_no_writer_and_no_replan_worker_behind(tmp_path):
    process = start_process(tmp_path, free_port(), ["--no-apply"])
    [writer] = spawned(process.pid)
    [replan] = spawned(writer)
    process.kill()  # no shutdown at all: SIGKILL, an OOM kill, a crash
    process.wait(10)
    deadline = time.monotonic() + 15
    while (running(writer) or running(replan)) and time.monotonic() < deadline:
        time.sleep(0.1)
    assert not running(writer) and not running(replan)


def test_an_error_raised_in_the_writer_arrives_whole():
    for error in (ApiError(422, "Invalid", "bad", [{"field": "spec", "message": "no"}], {"Retry-After": "1"}),
                  already_exists("ModelDeployment", "web")):
        back = pickle.loads(pickle.dumps(error))
        assert type(back) is type(error) and back.status() == error.status() and back.headers == error.headers
        assert str(back) == str(error)


def test_a_writer_that_cannot_start_is_one_line_and_exit_2(tmp_path, monkeypatch, capsys):
    from concurrent.futures.process import BrokenProcessPool

    import automation.portal.app as app
    from automation.cli import main
    from tests.portal_server import write_tokens

    def broken(*args, **kwargs):
        raise BrokenProcessPool("A child process terminated abruptly")

    monkeypatch.setattr(app, "WriteWorker", broken)
    code = main(["serve", "--port", str(free_port()), "--tokens", str(write_tokens(tmp_path)), "--no-apply",
                 "--data-dir", str(tmp_path / "data"), "--state", str(tmp_path / "state")])
    said = capsys.readouterr()
    assert code == 2 and "Traceback" not in said.err
    assert said.err.strip().splitlines()[-1] == "error: the portal's writer process did not start (see the lines above)"
