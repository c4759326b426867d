"""The portal's reads: objects with their status, read from the last replan's snapshot with the writes placed since
(overlay.py), and whole lists composed once per change of the store (read_cache.py). Its methods run on worker
threads, except `listed`, which answers a kept list on the event loop."""

from __future__ import annotations

import asyncio
import json
from functools import partial
from operator import itemgetter

from sqlalchemy.engine import Connection
from starlette.concurrency import run_in_threadpool

from automation.planning import conditions
from automation.planning.conditions import Observed
from automation.portal import listing
from automation.portal.overlay import PendingOverlay
from automation.portal.read_cache import CachedList, Item, ReadCache, Stamp, exact, list_body, loads, reuse
from automation.portal.state import (APPLIED, APPLIED_DETAILS, EXECUTOR_PROBLEM, PROBLEMS, RESOURCE_VERSION,
                                     SNAPSHOT, SNAPSHOT_VERSION)
from automation.portal.store import Store

PATCHED_CHANGES = 200  # writes since a list's last composition that are laid over its texts; beyond, it is read whole
Observation = tuple[dict, Observed, list[dict]]  # the snapshot (with pending writes), how stacks stand, the gateways


class Reads:
    def __init__(self, store: Store) -> None:
        self.store = store
        self.pending = PendingOverlay()
        self.lists = ReadCache()  # lists composed at the store's current marker (read_cache.py)
        self._composing: dict[tuple[str, str | None], tuple[int, asyncio.Future]] = {}  # on the event loop only
        # the snapshot's version and its parsed form (megabytes at fleet scale, read by every request); replaced
        # whole, so a thread reading it never sees half of an update
        self._parsed: tuple[int, dict] = (0, {})

    def parsed_snapshot(self, conn: Connection) -> dict:
        """The stored snapshot, parsed once per replan that stored it (its text is megabytes at fleet scale)."""
        version = SNAPSHOT_VERSION.get(conn)
        last_version, last = self._parsed
        if version != last_version or not version:
            last = loads(SNAPSHOT.text(conn))
            self._parsed = (version, last)
        return last

    def observation(self, conn: Connection) -> Observation:
        """The last replan's snapshot (with the writes placed since), how its stacks stand (the record the worker
        copied, latest runs), the gateways."""
        return self._observed(conn)[0]

    def _observed(self, conn: Connection) -> tuple[Observation, Stamp]:
        """`observation`, and what a status reads besides its object and its deployment's part of the plan: the
        stored snapshot it was laid over (compared by identity: parsed once per replan), the record and the runs,
        and the gateways."""
        store = self.store
        base = self.parsed_snapshot(conn)
        snap = self.pending.over(base, store, conn)
        texts = (APPLIED.text(conn), APPLIED_DETAILS.text(conn))
        applied, details = json.loads(texts[0]), json.loads(texts[1])
        latest: dict[str, dict] = {}
        for run in reversed(store.list_runs(conn, 1000)):
            latest[run["stack"]] = run
        observed = Observed({stack: {"fingerprint": fp, **details.get(stack, {})} for stack, fp in applied.items()},
                            latest)
        gateways = store.list(conn, "InferenceGateway")
        return (snap, observed, gateways), Stamp(base, texts, observed.runs, gateways)

    def with_status(self, body: dict, conn: Connection, known: Observation | None = None) -> dict:
        """The object with its status; `known` is observation() already read for this request."""
        return conditions.with_status(body, *(known or self.observation(conn)))

    def statuses(self, bodies: list[dict], conn: Connection) -> list[dict]:
        known = self.observation(conn)  # read once per request, not once per object
        return [self.with_status(b, conn, known) for b in bodies]

    async def listed(self, kind: str, namespace: str | None) -> CachedList:
        """Every `kind` in `namespace` (None: all) with its status, in (namespace, name) order, and the plain list's
        bytes: kept while nothing stored changes (read_cache.py), composed afresh after any write. A kept list is
        answered on the event loop where the store's marker costs microseconds (SQLite); the rest on a thread."""
        marker = self.store.marker()
        if marker is None:
            return await run_in_threadpool(self._listed_now, kind, namespace, None)
        found = self.lists.peek(marker, kind, namespace)
        if found is not None:
            return found
        # one composition per list and marker: the readers that find it under way wait for it (after a write, 20
        # readers would otherwise compose the same list 20 times over, on threads that contend for the GIL)
        key = (kind, namespace)
        flight = self._composing.get(key)
        if flight is None or flight[0] != marker:
            task = asyncio.ensure_future(run_in_threadpool(self._listed_now, kind, namespace, marker))
            flight = self._composing[key] = (marker, task)
            task.add_done_callback(partial(self._landed, key, flight))
        return await asyncio.shield(flight[1])

    def _landed(self, key: tuple[str, str | None], flight: tuple[int, asyncio.Future], _done: asyncio.Future) -> None:
        if self._composing.get(key) is flight:  # a newer marker's composition may have taken its place
            del self._composing[key]

    def _listed_now(self, kind: str, namespace: str | None, marker: int | None) -> CachedList:
        """`marker`: Store.marker() read before this read began (what it composes is never older), or None: the
        store's revision, read in this read's transaction."""
        with self.store.read() as conn:
            if marker is None:
                marker = self.store.revision(conn)
            found = self.lists.peek(marker, kind, namespace)
            if found is not None:
                return found
            known, stamp = self._observed(conn)  # read once per list, not once per object
            before, then, since = self.lists.items.of(kind, namespace)  # what the last composition read and made
            unchanged = then is not None and then.same(stamp)  # statuses then change only with their own part
            index = conditions.by_deployment(known[0]) if kind == "ModelDeployment" else {}
            stored: dict[tuple[str, str], Item] = {}

            def compose(body: dict) -> dict:
                return self.with_status(body, conn, known)

            for ns, name, text in [] if kind == "ModelReplica" else self._stored(conn, kind, namespace, before, since):
                stored[(ns, name)] = reuse(before.get((ns, name)), text, compose, unchanged, index.get(f"{ns}/{name}"))
            # (listing.key, item, its JSON): a stored object's key is its row's (namespace, name), not read again
            rows = [(key, entry.item, entry.encoded) for key, entry in stored.items()]
            if kind in ("ModelReplica", "ModelEndpoint"):  # the replicas and their endpoints, composed as the reference
                rows += [(listing.key(o), o, exact(o)) for o in conditions.composed(namespace, known[0], known[1])
                         if o["kind"] == kind]
            rows.sort(key=itemgetter(0))
            version = str(RESOURCE_VERSION.get(conn))
        self.lists.items.remember(kind, namespace, stored, stamp, int(version))
        items = [item for _, item, _ in rows]
        body = list_body(listing.list_document(kind, items, version), [encoded for _, _, encoded in rows])
        return self.lists.keep(marker, kind, namespace, items, version, body)

    def _stored(self, conn: Connection, kind: str, namespace: str | None, before: dict[tuple[str, str], Item],
                since: int | None) -> list[tuple[str, str, str]]:
        """(namespace, name, stored text) of each `kind` in `namespace` (None: all): the texts of the last composition
        (`before`, read at resourceVersion `since`) with the writes logged after it, when the change log still holds
        them all; else read whole. Reading a team's 463 stored texts again after each write was a third of composing
        its list. SQLite only: its read transaction is one snapshot, so this read's changes and its texts agree
        (PostgreSQL's read committed statements need not). The last composition may be newer than this read's
        snapshot (another thread composed and remembered it since this read began): then it is read whole too."""
        if since is None or not self.store.sqlite:
            return self.store.list_stored(conn, kind, namespace)
        oldest, current, rows = self.store.changes_since(conn, since, kind, namespace, limit=PATCHED_CHANGES)
        if since < oldest or since > current or len(rows) >= PATCHED_CHANGES:  # pruned, newer, or too many
            return self.store.list_stored(conn, kind, namespace)
        texts = {key: item.text for key, item in before.items()}
        for row in rows:
            if row["type"] == "DELETED":
                texts.pop((row["namespace"], row["name"]), None)
            else:
                texts[(row["namespace"], row["name"])] = row["body"]
        return [(ns, name, text) for (ns, name), text in texts.items()]

    def composed_in(self, namespace: str, kind: str, conn: Connection, known: Observation | None = None) -> list[dict]:
        snap, observed, _ = known or self.observation(conn)
        return [o for o in conditions.composed(namespace, snap, observed) if o["kind"] == kind]

    def held_back(self, conn: Connection) -> list[str]:
        """What the last background replan found that a cluster would reject: while there is any, no run is queued."""
        problems = PROBLEMS.get(conn)
        executor = EXECUTOR_PROBLEM.get(conn)  # automation/portal/worker.py: runs cannot run
        return problems + ([f"runs wait queued: {executor}"] if executor else [])

