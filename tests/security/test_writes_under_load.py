"""Finding: writes were shed instead of queued (at most 8 waited, 5 s each: 41 of 50 parallel submissions got 503).
Writes now wait in a FIFO queue on the event loop (automation/portal/writes.py), holding no worker thread, and
are shed only past its documented limits (MAX_QUEUED_WRITES waiting, WRITE_QUEUE_WAIT seconds each) with 429
TooManyRequests and Retry-After, as Kubernetes' API Priority and Fairness sheds. Reads never wait on them."""

from __future__ import annotations

import asyncio
import concurrent.futures
import threading
import time
from contextlib import contextmanager
from typing import Callable

import httpx
import pytest

from automation.portal import store as store_module
from automation.portal import writes
from automation.portal.service import ApiError
from automation.portal.writes import WriteQueue
from tests.manifests import deployment
from tests.portal_server import API, TEAM_A, ThreadServer
from tests.test_portal import seed_fleet

OBJ = API + "/namespaces/team-a/modeldeployments/{name}"


@pytest.fixture
def portal(tmp_path):
    with ThreadServer(tmp_path) as server:
        seed_fleet(server)
        yield server


def wait_until(condition: Callable[[], bool], what: str, seconds: float = 30.0) -> None:
    deadline = time.monotonic() + seconds
    while not condition():
        assert time.monotonic() < deadline, f"not within {seconds:g} s: {what}"
        time.sleep(0.005)


@contextmanager
def write_lock_held(server: ThreadServer, monkeypatch):
    """The store's write lock held by someone else (a long write): the write whose turn it is waits for it, long
    enough never to give up here, and every other write waits in the queue."""
    monkeypatch.setattr(store_module, "WRITE_WAIT", 60.0)
    server.settle()  # no background replan is about to want the lock
    held, release = threading.Event(), threading.Event()

    def hold() -> None:
        with server.store.write():
            held.set()
            release.wait(60)

    holder = threading.Thread(target=hold)
    holder.start()
    held.wait(10)
    try:
        yield release
    finally:
        release.set()
        holder.join(60)


def submit(server: ThreadServer, name: str) -> httpx.Response:
    with server.client(TEAM_A) as client:
        return client.put(OBJ.format(name=name), json=deployment(name, namespace="team-a"))


def test_fifty_parallel_submissions_all_succeed_and_none_is_a_503(portal):
    barrier = threading.Barrier(50)

    def one(i: int) -> httpx.Response:
        with portal.client(TEAM_A) as client:
            client.get("/healthz")  # connected before the race starts
            barrier.wait()
            return client.put(OBJ.format(name=f"m{i}"), json=deployment(f"m{i}", namespace="team-a"))

    with concurrent.futures.ThreadPoolExecutor(max_workers=50) as pool:
        answers = list(pool.map(one, range(50)))
    codes = [a.status_code for a in answers]
    assert 503 not in codes
    assert codes == [201] * 50, codes  # 50 is well within MAX_QUEUED_WRITES: none is shed
    versions = sorted(int(a.json()["metadata"]["resourceVersion"]) for a in answers)
    assert len(set(versions)) == 50  # one after the other
    portal.settle()
    with portal.client(TEAM_A) as client:
        assert len(client.get(API + "/namespaces/team-a/modeldeployments").json()["items"]) == 50


def test_writes_commit_in_the_order_they_arrived(portal, monkeypatch):
    queue = portal.app.state.portal.queue
    with write_lock_held(portal, monkeypatch) as release, concurrent.futures.ThreadPoolExecutor(12) as pool:
        answers = [pool.submit(submit, portal, "w0")]
        wait_until(lambda: queue.running, "the first write has its turn")
        for i in range(1, 12):  # each sent once the one before it is seen waiting: the arrival order is known
            answers.append(pool.submit(submit, portal, f"w{i}"))
            wait_until(lambda: queue.waiting == i, f"write {i} waits in the queue")
        release.set()
        results = [a.result(60) for a in answers]
    assert [r.status_code for r in results] == [201] * 12
    versions = [int(r.json()["metadata"]["resourceVersion"]) for r in results]
    assert versions == sorted(versions), f"writes committed out of their arrival order: {versions}"


def test_past_the_queue_limit_a_write_is_a_429_with_retry_after_and_the_queued_ones_still_land(portal, monkeypatch):
    queue = portal.app.state.portal.queue
    monkeypatch.setattr(queue, "limit", 3)
    with write_lock_held(portal, monkeypatch) as release, concurrent.futures.ThreadPoolExecutor(4) as pool:
        queued = [pool.submit(submit, portal, "q0")]
        wait_until(lambda: queue.running, "the first write has its turn")
        queued += [pool.submit(submit, portal, f"q{i}") for i in (1, 2, 3)]
        wait_until(lambda: queue.waiting == 3, "three writes wait")
        shed = submit(portal, "over")
        release.set()
        landed = [q.result(60) for q in queued]
    assert shed.status_code == 429, shed.text
    assert int(shed.headers["Retry-After"]) >= 1
    status = shed.json()
    assert status["kind"] == "Status" and status["reason"] == "TooManyRequests" and status["code"] == 429
    assert [r.status_code for r in landed] == [201] * 4
    with portal.client(TEAM_A) as client:
        assert client.get(OBJ.format(name="over")).status_code == 404  # the shed write stored nothing


def test_a_write_that_waits_past_the_queue_wait_is_a_429_never_a_503(portal, monkeypatch):
    queue = portal.app.state.portal.queue
    monkeypatch.setattr(queue, "wait", 0.2)
    with write_lock_held(portal, monkeypatch) as release, concurrent.futures.ThreadPoolExecutor(1) as pool:
        first = pool.submit(submit, portal, "first")
        wait_until(lambda: queue.running, "the first write has its turn")
        late = submit(portal, "late")  # waits 0.2 s for a turn that does not come
        assert queue.waiting == 0  # it left the queue
        release.set()
        assert first.result(60).status_code == 201
    assert late.status_code == 429 and late.json()["reason"] == "TooManyRequests", late.text
    assert "Retry-After" in late.headers
    assert submit(portal, "late").status_code == 201  # the queue goes on


def test_reads_answer_while_more_writes_wait_than_there_are_worker_threads(portal, monkeypatch):
    """A queued write holds no thread: with 45 writes waiting (Starlette's thread pool has 40), reads still run."""
    queue = portal.app.state.portal.queue
    with write_lock_held(portal, monkeypatch) as release, concurrent.futures.ThreadPoolExecutor(46) as pool:
        waiting = [pool.submit(submit, portal, f"r{i}") for i in range(46)]
        wait_until(lambda: queue.waiting == 45, "45 writes wait")
        with portal.client(TEAM_A) as reader:
            for _ in range(20):
                assert reader.get(API + "/namespaces/team-a/modeldeployments", timeout=20).status_code == 200
        release.set()
        assert [w.result(60).status_code for w in waiting] == [201] * 46


def test_the_queue_hands_turns_over_first_come_first_served_and_past_leavers():
    """The queue alone: turns in arrival order; a write cancelled while it waits (its client went away) and one that
    waits too long leave without holding anyone up, and a full queue refuses at once."""
    async def scenario() -> tuple[list[str], list[str]]:
        queue = WriteQueue(wait=30.0, limit=6)
        order: list[str] = []
        refused: list[str] = []
        gate = asyncio.Event()

        async def write(name: str, hold: asyncio.Event | None = None) -> None:
            try:
                async with queue.turn():
                    order.append(name)
                    if hold is not None:
                        await hold.wait()
            except ApiError as exc:
                assert exc.code == 429 and exc.headers and int(exc.headers["Retry-After"]) >= 1
                refused.append(name)

        first = asyncio.create_task(write("a", gate))
        await asyncio.sleep(0)
        tasks = []
        for name in "bcdefg":
            tasks.append(asyncio.create_task(write(name)))
            await asyncio.sleep(0)  # each is queued before the next arrives
        assert queue.waiting == 6
        await write("over")  # the queue is full: refused at once
        tasks[1].cancel()  # "c" goes away while it waits
        await asyncio.sleep(0)
        gate.set()
        await asyncio.gather(first, *tasks, return_exceptions=True)
        assert not queue.running and queue.waiting == 0
        return order, refused

    order, refused = asyncio.run(scenario())
    assert order == ["a", "b", "d", "e", "f", "g"] and refused == ["over"]


def test_the_queue_s_limits_are_the_documented_ones():
    from pathlib import Path

    doc = (Path(__file__).resolve().parents[2] / "docs" / "portal.md").read_text()
    queue = WriteQueue()
    assert (queue.wait, queue.limit) == (writes.WRITE_QUEUE_WAIT, writes.MAX_QUEUED_WRITES)
    assert f"at most {writes.MAX_QUEUED_WRITES} writes wait at once" in doc
    assert f"each waits at most {writes.WRITE_QUEUE_WAIT:g} s for its turn" in doc
