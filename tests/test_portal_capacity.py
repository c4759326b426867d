"""The portal on live capacity (`serve --capacity live`): the clusters' capacity as the refresher reads it is handed
to the writes, a ModelDeployment write is placed on it in its request, the background replan plans on it, and the
page shows each pool's live free devices with when they were read. The read itself is the local fleet's simulated
objects (tests/test_live_capacity.py); tests/realengine/test_real_live_capacity.py reads real API servers."""

from __future__ import annotations

from pathlib import Path

import yaml

from automation.portal.capacity_refresh import CapacityRefresher
from tests.portal_server import ADMIN, API, ThreadServer
from tests.test_live_capacity import READ_AT, both, claim
from tests.test_portal import signed_in

FLEET = Path(__file__).resolve().parents[1] / "local-fleet"
PLURALS = {"InferenceClass": "inferenceclasses", "InferenceCluster": "inferenceclusters",
           "ModelDeployment": "modeldeployments"}


def path_of(obj: dict) -> str:
    meta = obj["metadata"]
    plural = PLURALS[obj["kind"]]
    return f"{API}/namespaces/{meta['namespace']}/{plural}/{meta['name']}" if "namespace" in meta \
        else f"{API}/{plural}/{meta['name']}"


def documents() -> list[dict]:
    return [d for f in ("fleet.yaml", "models.yaml") for d in yaml.safe_load_all((FLEET / f).read_text())
            if d and d["kind"] in PLURALS]


def test_a_write_and_the_replan_place_on_live_capacity_and_the_page_shows_it(tmp_path):
    from fleet.validate import load_fleet

    objects = documents()
    platform = [o for o in objects if o["kind"] != "ModelDeployment"]
    qwen = next(o for o in objects if o["kind"] == "ModelDeployment" and o["metadata"]["name"] == "qwen3-8b")
    local = load_fleet((str(FLEET),)).fleet
    with ThreadServer(tmp_path, replan_interval=0.05) as server, server.client(ADMIN) as admin:
        for obj in platform:
            assert admin.put(path_of(obj), json=obj).status_code == 201
        writes = server.app.state.portal.writes
        taken = both(local, a_claims=[claim("t0", "l4-0", ["gpu-0"]), claim("t1", "l4-1", ["gpu-0"])])
        read: list[int] = []

        def reader(fleet):
            read.append(len(fleet.of("InferenceCluster")))  # the stored clusters, as the refresher loads them
            return taken
        refresher = CapacityRefresher(server.store, reader, writes.capacity)
        assert refresher.refresh() is True and read == [2]
        assert refresher.refresh() is False  # the same free devices: nothing to replan
        answer = admin.put(path_of(qwen), json=qwen)
        assert answer.status_code == 201, answer.text
        assert [p["cluster"] for p in answer.json()["status"]["placement"]] == ["local-b"]  # placed on it in the write
        server.settle()
        plan = admin.get("/plan").json()
        assert [r["cluster"] for r in plan["replicas"] if r["deployment"] == "ml-team/qwen3-8b"] == ["local-b"]
        with server.client(None) as browser:
            signed_in(server, browser)
            page = browser.get("/").text
        assert "free now (live)" in page and f"live, read {READ_AT}" in page
        row = next(line for line in page.split("<tr>") if "<td>local-a</td>" in line)
        assert '<td class="live-free">0</td><td>2</td>' in row  # both L4s held by others
        # the other team leaves: the next read replans, and a new write lands on the L4s again
        free_again = both(local)
        refresher._read = lambda fleet: free_again
        assert refresher.refresh() is True
        server.settle()
        second = dict(qwen, metadata={**qwen["metadata"], "name": "qwen3-8b-two"})
        answer = admin.put(path_of(second), json=second)
        assert [p["cluster"] for p in answer.json()["status"]["placement"]] == ["local-a"]


def test_the_worker_applies_what_the_replan_placed_on_live_capacity(tmp_path):
    """The portal's worker composes a queued stack from the stored reservations with the capacity the replan planned
    on: a replica live capacity left unscheduled is not placed on declared capacity behind the plan's back."""
    from automation.portal import worker as worker_module
    from automation.portal.state import CAPACITY
    from automation.portal.store import Store
    from automation.road.executor import Executor
    from fleet.validate import load_fleet
    from tests.test_orchestrator import FakeRunner, MemoryRecord

    local = load_fleet((str(FLEET),)).fleet
    # one device free in the whole fleet: local-a's L4s and seven of local-b's H100s held by others
    crowded = both(local, a_claims=[claim("t0", "l4-0", ["gpu-0"]), claim("t1", "l4-1", ["gpu-0"])],
                   b_claims=[claim(f"b{i}", "h100-0", [f"gpu-{i}"]) for i in range(7)])
    store = Store(f"sqlite:///{tmp_path / 'p.db'}")
    with store.write() as conn:
        for doc in documents():
            if doc["kind"] == "ModelDeployment":
                if doc["metadata"]["name"] != "qwen3-8b":
                    continue
                doc["spec"]["replicas"] = 2
            store.put(conn, doc["kind"], doc["metadata"].get("namespace") or "", doc, None)
        CAPACITY.set_text(conn, crowded.to_json())
        store.enqueue(conn, "model-ml-team.qwen3-8b", "up", "f1")
    seen = []

    class Seeing(FakeRunner):
        def run(self, operation, stack, on_event):
            seen.append(stack)
            return super().run(operation, stack, on_event)
    worker = worker_module.Worker(store, tmp_path, runner=lambda fleet, state: Executor.ready(Seeing(), MemoryRecord()))
    worker.execute(worker.claim())
    [spec] = [s for s in seen if s.name == "model-ml-team.qwen3-8b"]
    assert len(spec.payload.replicas) == 1, [r.cluster for r in spec.payload.replicas]  # declared would place 2


def test_serve_with_a_snapshot_plans_on_it_and_a_bad_one_stops_the_start(tmp_path):
    """`serve --capacity FILE` reads the snapshot as `plan --capacity FILE` does, before it serves."""
    import pytest

    from automation.portal.app import StartupError, _capacity
    from automation.portal.state import CAPACITY
    from fleet.validate import load_fleet

    local = load_fleet((str(FLEET),)).fleet
    snapshot = tmp_path / "capacity.json"
    snapshot.write_text(both(local, a_claims=[claim("t0", "l4-0", ["gpu-0"])]).to_json())
    with ThreadServer(tmp_path, replan_interval=0.05) as server, server.client(ADMIN) as admin:
        for obj in documents():
            if obj["kind"] != "ModelDeployment":
                assert admin.put(path_of(obj), json=obj).status_code == 201
        portal = server.app.state.portal
        refresher = _capacity(portal, server.store, str(snapshot), 3600, tmp_path)
        try:
            with server.store.read() as conn:
                assert CAPACITY.text(conn) == snapshot.read_text()
        finally:
            assert refresher is not None
            refresher.stop()
        (tmp_path / "bad.json").write_text("{")
        with pytest.raises(StartupError, match="bad.json: not JSON"):
            _capacity(portal, server.store, str(tmp_path / "bad.json"), 3600, tmp_path)
