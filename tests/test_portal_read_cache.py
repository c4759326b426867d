"""Lists served from the read cache (automation/portal/read_cache.py) are never older than the reader's own writes
nor than another process's committed ones, say what a list composed afresh says, and are composed once however
many readers ask at once."""

import asyncio
import json

import pytest

from automation.portal.read_cache import Item
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
    portal.settle()  # the write's background replan commits a new revision: not between the reads counted below
    served = portal.app.state.portal
    composed = []
    real = served.reads._observed

    def counting(conn):
        composed.append(1)
        return real(conn)

    served.reads._observed = counting

    async def many() -> list:
        return await asyncio.gather(*(served.reads.listed("ModelDeployment", "team-a") for _ in range(12)))

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


def composed_once(portal, team) -> None:
    """Deployments a, b and c stored, planned, and their list composed once (its items remembered)."""
    for name in ("a", "b", "c"):
        put(team, name)
    portal.settle()
    listed(team)


def test_a_list_composed_again_after_writes_is_the_list_composed_from_nothing(portal, tmp_path):
    """After a write, a list reuses what its last composition decoded and encoded: an object whose stored text and
    status are the same keeps its item (and its bytes), one whose status alone moved is not decoded again, one that
    was written is decoded and encoded afresh; the answer is byte for byte the answer composed from nothing."""
    from automation.portal.read_cache import ReadCache

    served = portal.app.state.portal
    with portal.client(TEAM_A) as team:
        composed_once(portal, team)
        before = dict(served.reads.lists.items.of("ModelDeployment", "team-a")[0])
        put(team, "b", replicas=2)
        portal.settle()
        other = Store(f"sqlite:///{tmp_path / 'portal.db'}")
        with other.write() as conn:  # c's status moves (a run is queued for its stack); its stored text does not
            other.enqueue(conn, str(StackId.model("team-a", "c")), "up", "f1")
        kept = team.get(LIST).content
        after = served.reads.lists.items.of("ModelDeployment", "team-a")[0]
        # kept: neither composed nor encoded again (the entry itself may be new: it notes the part's new objects)
        assert after[("team-a", "a")].item is before[("team-a", "a")].item
        assert after[("team-a", "a")].encoded is before[("team-a", "a")].encoded
        assert after[("team-a", "b")].text != before[("team-a", "b")].text
        assert after[("team-a", "b")].item["spec"]["replicas"] == 2
        assert after[("team-a", "c")] is not before[("team-a", "c")]
        assert after[("team-a", "c")].body is before[("team-a", "c")].body  # not decoded again
        assert after[("team-a", "c")].item["status"]["stack"]["lastRun"]["status"] == "queued"
        served.reads.lists = ReadCache()  # nothing kept, nothing remembered
        assert served.reads._listed_now("ModelDeployment", "team-a", None).body == kept
        assert json.loads(kept)["items"] == json.loads(served.reads._listed_now("ModelDeployment", "team-a", None).body)["items"]


def test_the_items_spliced_into_a_list_are_what_encoding_the_whole_list_writes():
    from automation.portal.listing import list_document
    from automation.portal.read_cache import encode, exact, list_body

    items = [{"metadata": {"name": "ä-1", "namespace": "t"}, "spec": {"f": 1e-7, "s": "x\ny\"z"}},
             {"metadata": {"name": "b"}, "spec": {"list": [1, None, True, {}]}, "status": {"u": "\u2028"}}]
    document = list_document("ModelDeployment", items, "42")
    assert list_body(document, [exact(i) for i in items]) == encode(document)  # byte for byte
    assert list_body(list_document("ModelDeployment", [], "7"), []) == encode(list_document("ModelDeployment", [], "7"))
    # an item orjson cannot write (an integer beyond 64 bits): the whole list is encoded by json, as it was
    wide = [*items, {"metadata": {"name": "c"}, "spec": {"n": 2**70}}]
    document = list_document("ModelDeployment", wide, "43")
    assert exact(wide[2]) is None
    assert list_body(document, [exact(i) for i in wide]) == encode(document)
    assert json.loads(encode(document))["items"][2]["spec"]["n"] == 2**70


def test_an_item_is_decoded_and_encoded_again_only_when_its_text_or_status_moved():
    from automation.portal.read_cache import reuse

    def composing(status: dict):
        calls = []

        def compose(body: dict) -> dict:
            calls.append(body)
            return {**body, "status": status}
        return compose, calls

    text = json.dumps({"metadata": {"name": "a"}, "spec": {"replicas": 1}})
    compose, calls = composing({"ready": 0})
    first = reuse(None, text, compose)
    assert first.item == {"metadata": {"name": "a"}, "spec": {"replicas": 1}, "status": {"ready": 0}}
    assert json.loads(first.encoded) == first.item
    same = reuse(first, text, compose)
    assert same is first and calls[-1] is first.body  # the status is always composed, from the body kept
    compose, calls = composing({"ready": 1})
    moved = reuse(first, text, compose)
    assert moved is not first and moved.body is first.body and json.loads(moved.encoded)["status"] == {"ready": 1}
    written = reuse(moved, text.replace("1}", "2}"), compose)
    assert written.body is not moved.body and written.item["spec"]["replicas"] == 2
    # nothing else a status reads changed: an object whose part of the plan is the same is not composed at all
    same = (["r0"], None)
    placed = reuse(written, written.text, compose, part=same)
    count = len(calls)
    assert reuse(placed, placed.text, compose, unchanged=True, part=same) is placed and len(calls) == count
    # an equal part made of new objects (the next snapshot's): kept, and its objects noted for the next comparison
    again = reuse(placed, placed.text, compose, unchanged=True, part=(["r0"], None))
    assert again.item is placed.item and again.encoded is placed.encoded and len(calls) == count
    assert reuse(again, again.text, compose, unchanged=True, part=again.source) is again
    replaced = reuse(placed, placed.text, compose, unchanged=True, part=(["r1"], None))
    assert len(calls) == count + 1 and replaced.part == b'[["r1"],null]' and replaced.encoded == placed.encoded
    assert reuse(placed, placed.text.replace("2}", "3}"), compose, unchanged=True, part=(["r0"], None)).item["spec"] \
        == {"replicas": 3}
    # 1, 1.0 and true are three statuses, as they are three answers
    compose, _ = composing({"ready": 1.0})
    floated = reuse(placed, placed.text, compose, part=(["r0"], None))
    assert floated is not placed and b'"ready":1.0' in floated.encoded


def test_a_part_made_of_the_same_objects_is_not_written_to_be_compared(monkeypatch):
    """A list of 463 deployments wrote every part after each write only to find it unchanged: a part made of the
    objects the last composition saw (the snapshot's index entry, never mutated) is equal without being written."""
    from automation.portal import read_cache

    def compose(body: dict) -> dict:
        return {**body, "status": {}}

    replicas = [{"name": "r0"}]
    first = read_cache.reuse(None, '{"metadata": {"name": "a"}}', compose, part=(replicas, None))
    written: list = []
    real = read_cache.exact
    monkeypatch.setattr(read_cache, "exact", lambda value: written.append(value) or real(value))
    assert read_cache.reuse(first, first.text, compose, unchanged=True, part=(replicas, None)) is first
    assert written == []  # a new tuple of the same objects: compared by identity
    read_cache.reuse(first, first.text, compose, unchanged=True, part=([{"name": "r0"}], None))
    assert written == [([{"name": "r0"}], None)]  # equal objects made anew: written once to be compared


def test_the_items_of_few_lists_are_remembered(monkeypatch):
    from automation.portal import read_cache

    monkeypatch.setattr(read_cache, "MAX_REMEMBERED", 2)
    items = read_cache.Items()
    stamp = read_cache.Stamp({}, {}, {}, [])
    for namespace in ("a", "b", "c"):
        items.remember("ModelDeployment", namespace, {(namespace, "x"): None}, stamp)  # type: ignore[dict-item]
    assert items.of("ModelDeployment", "a") == ({}, None, None)
    assert set(items.of("ModelDeployment", "c")[0]) == {("c", "x")}


def test_a_list_is_gzipped_once_and_only_when_asked(monkeypatch):
    import gzip

    from automation.portal import read_cache

    body = b'{"items":[' + b",".join([b'{"a":1}'] * 100) + b"]}"
    small = read_cache.CachedList((), "1", body)
    assert small.gzipped is None
    monkeypatch.setattr(read_cache, "COMPRESS_FROM", 10)
    large = read_cache.CachedList((), "1", body)
    assert large._gzipped is None  # nothing compressed until a client that accepts gzip asks
    assert gzip.decompress(large.gzipped) == body and large.gzipped is large.gzipped


def test_after_a_write_only_the_written_objects_status_is_composed_again(portal):
    """Between two replans a write changes its object and its deployment's part of the plan, nothing else a status
    reads (`Stamp`): the list composed after it composes that one status again and keeps every other item."""
    from automation.portal.read_cache import ReadCache
    from automation.portal.replanner import GATHER

    served = portal.app.state.portal
    with portal.client(TEAM_A) as team:
        composed_once(portal, team)
        composed: list[str] = []
        real = served.reads.with_status

        def counting(body, conn, known=None):
            composed.append(body["metadata"]["name"])
            return real(body, conn, known)

        served.reads.with_status = counting
        portal.replanner._gather = 5.0  # the write stays pending (placed, not yet replanned) while the list is read
        try:
            put(team, "b", replicas=2)
            composed.clear()
            kept = team.get(LIST).content
            assert composed == ["b"]
            assert json.loads(kept)["items"][1]["status"]["replicas"]["placed"] == 2
            served.reads.with_status = real
            served.reads.lists = ReadCache()
            assert served.reads._listed_now("ModelDeployment", "team-a", None).body == kept
        finally:
            served.reads.with_status = real
            portal.replanner._gather = GATHER
            portal.settle()


def test_only_the_latest_stamp_is_kept():
    """A list composed at an older stamp (an older snapshot: megabytes) is given no stamp, so nothing keeps that
    snapshot alive and its statuses are composed again."""
    from automation.portal.read_cache import Items, Stamp

    items = Items()
    old, new = Stamp({"v": 1}, {}, {}, []), Stamp({"v": 2}, {}, {}, [])
    items.remember("ModelDeployment", "a", {}, old)
    assert items.of("ModelDeployment", "a")[1] is old
    items.remember("ModelDeployment", "b", {}, new)
    assert items.of("ModelDeployment", "a")[1] is None and items.of("ModelDeployment", "b")[1] is new
    items.remember("ModelDeployment", "a", {}, Stamp(new.snapshot, {}, {}, []))  # the same as the latest
    assert items.of("ModelDeployment", "a")[1] is new and items.of("ModelDeployment", "b")[1] is new


def test_a_large_list_is_gzipped_only_for_a_client_that_asks(portal, monkeypatch):
    """The gzipped answer is made (once per revision) when the first client that accepts gzip asks for the plain
    list; a client that does not, or that asks for a page, never has it made."""
    import gzip

    from automation.portal import read_cache

    made = []
    real = gzip.compress

    def counting(data, *args, **kwargs):
        made.append(len(data))
        return real(data, *args, **kwargs)

    monkeypatch.setattr(read_cache, "COMPRESS_FROM", 1)
    monkeypatch.setattr(read_cache.gzip, "compress", counting)
    with portal.client(TEAM_A) as team:
        put(team, "a")
        portal.settle()  # one revision for every read below (the write's replan would make the next)
        plain = team.get(LIST, headers={"Accept-Encoding": "identity"})
        team.get(LIST, params={"limit": "1"}, headers={"Accept-Encoding": "gzip"})
        assert made == [] and plain.headers["vary"] == "Accept-Encoding"
        for _ in range(2):
            with team.stream("GET", LIST, headers={"Accept-Encoding": "gzip"}) as answer:
                assert gzip.decompress(b"".join(answer.iter_raw())) == plain.content
        assert made == [len(plain.content)]  # once for the revision


def _json_values():
    from hypothesis import strategies as st

    scalars = st.none() | st.booleans() | st.integers(min_value=-(2**80), max_value=2**80) | \
        st.floats(allow_nan=True, allow_infinity=True) | st.text()
    return st.recursive(scalars, lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(), inner, max_size=4),
                        max_leaves=20)


def test_the_snapshot_is_read_as_json_reads_it():
    """The snapshot is read by orjson where it reads as json does: never a large integer as a float, never NaN or
    a lone surrogate refused."""
    from hypothesis import given, settings

    from automation.portal.read_cache import loads

    @settings(max_examples=300, deadline=None)
    @given(_json_values())
    def check(value):
        text = json.dumps(value)
        read, expected = loads(text), json.loads(text)
        assert json.dumps(read) == json.dumps(expected)  # the same values, of the same types (1 is not 1.0)
        assert repr(read) == repr(expected)  # NaN == NaN is false: compared as written

    check()


def test_a_list_after_writes_lays_the_logged_writes_over_its_last_texts(portal, monkeypatch):
    """After writes (a changed, d created, b deleted) a list takes its stored texts from its last composition and
    the change log, not from reading every stored object again, and says what a list composed from nothing says."""
    from automation.portal.read_cache import ReadCache

    served = portal.app.state.portal
    with portal.client(TEAM_A) as team:
        composed_once(portal, team)
        put(team, "a", replicas=2)
        put(team, "d")
        assert team.delete(f"{LIST}/b").status_code == 200
        read_whole = []
        real = served.store.list_stored
        monkeypatch.setattr(served.store, "list_stored", lambda *args: read_whole.append(args) or real(*args))
        patched = team.get(LIST).content
        assert read_whole == []  # the texts came from the last composition and the log
        assert replicas(json.loads(patched)) == {"a": 2, "c": 1, "d": 1}
        served.reads.lists = ReadCache()  # nothing kept, nothing remembered: read whole
        assert served.reads._listed_now("ModelDeployment", "team-a", None).body == patched
        assert len(read_whole) == 1


def test_a_list_whose_writes_left_the_change_log_is_read_whole(portal, monkeypatch):
    """The change log keeps a window of writes (for watches): a list last composed before its start is read whole."""
    served = portal.app.state.portal
    with portal.client(TEAM_A) as team:
        composed_once(portal, team)
        monkeypatch.setattr(served.store, "watch_window", 2)
        put(team, "b", replicas=2)  # then three writes of c: the log keeps the last two, b's write is gone from it
        for replicas_now in (3, 1, 2):
            put(team, "c", replicas=replicas_now)
        read_whole = []
        real = served.store.list_stored
        monkeypatch.setattr(served.store, "list_stored", lambda *args: read_whole.append(args) or real(*args))
        assert replicas(listed(team)) == {"a": 1, "b": 2, "c": 2}
        assert len(read_whole) == 1


def test_a_read_older_than_the_last_composition_reads_its_own_texts(portal):
    """Two threads compose one list: one whose read began before a write may find in memory the composition of one
    that began after it. Its texts are then newer than its snapshot: it reads its own, whole."""
    from automation.portal.state import RESOURCE_VERSION
    from automation.portal.store import Store

    served = portal.app.state.portal
    with portal.client(TEAM_A) as team:
        composed_once(portal, team)
        store: Store = served.store
        with store.read() as old:
            old_texts = store.list_stored(old, "ModelDeployment", "team-a")  # this read's snapshot begins here
            put(team, "a", replicas=2)
            put(team, "d")
            with store.read() as new:
                newer = {(ns, name): Item(text, {}, {}, None) for ns, name, text in
                         store.list_stored(new, "ModelDeployment", "team-a")}
                version = RESOURCE_VERSION.get(new)
            assert served.reads._stored(old, "ModelDeployment", "team-a", newer, version) == old_texts
