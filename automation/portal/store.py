"""Portal storage: objects, placements, runs; SQLite by default, PostgreSQL by URL.

Every write is one transaction, and writes are serialized fleet-wide (SQLite: BEGIN IMMEDIATE;
PostgreSQL: a transaction-scoped advisory lock), so a write is placed against every accepted
reservation: two submissions racing for the last free GPUs are placed one after the other and
never both get them. A write is acknowledged only after its commit: a crash loses nothing
that was accepted.
"""

from __future__ import annotations

import builtins
import hashlib
import json
import os
import secrets
import sqlite3
import threading
import uuid
from contextlib import contextmanager
from datetime import datetime, timedelta, timezone
from typing import Any, Callable, Collection, Iterator, Mapping

from sqlalchemy import bindparam, create_engine, event, func, select, text
from sqlalchemy.engine import Connection, Engine, RowMapping, make_url
from sqlalchemy.exc import ArgumentError, DBAPIError, NoSuchModuleError, OperationalError

from automation.execution.run_status import RunStatus
from automation.portal.schema import (CHANGES_SCOPE, changes, metadata, objects, reservations, runs, sessions,
                                      watch_floors)
from automation.portal.state import CHANGES_FROM, LEDGER, PLACEMENTS, RESOURCE_VERSION, REVISION
from fleet.errors import ModelplaneError

# changes kept for watches, per kind and namespace, so that one team's writes never expire another team's resume point
# (Kubernetes keeps etcd's last 5 minutes of every change): a watch from an older one is a 410
WATCH_WINDOW = 1000
WATCH_LOG_LIMIT = 50_000  # and at most this many in all (the oldest go first), whatever the namespaces written
WRITE_WAIT = 5.0  # seconds a write waits for the fleet-wide write lock before it is answered 503
MAX_WAITING_WRITES = 8  # writes queued at once; more are answered 503 at once (threads stay free for reads)
SESSION_HOURS = 12
SQLITE_CONNECTIONS = 48  # kept open: more than the request threads (anyio's 40) and the portal's own workers


class StoreError(ModelplaneError):
    """The database cannot be opened (a user error at startup: a bad URL, an unreachable server)."""


class StoreBusy(ModelplaneError):
    """The write lock was not free in time: the request is answered 503 with Retry-After."""


def now() -> datetime:
    return datetime.now(timezone.utc)


class Store:
    def __init__(self, url: str) -> None:
        sqlite = url.startswith("sqlite")
        try:
            shown = make_url(url).render_as_string(hide_password=True)
        except ArgumentError:
            raise StoreError("the database URL is not a URL (expected sqlite:///PATH or "
                             "postgresql+psycopg://USER@HOST/DB)") from None
        if sqlite:
            _private_sqlite_file(make_url(url).database)
        try:
            # SQLite: a connection per request thread kept open (opening one, with its PRAGMAs, cost more than the
            # read it served once more than the default 15 were in use), no ping (a file does not drop us), and
            # the most recently used connection first: each keeps its own page cache (up to 2 MiB), and handing
            # them out in turn grew the portal's memory for thousands of writes as every cache filled
            self.engine: Engine = create_engine(
                url, future=True, pool_pre_ping=not sqlite,
                **({"connect_args": {"timeout": WRITE_WAIT, "check_same_thread": False},
                    "pool_size": SQLITE_CONNECTIONS, "max_overflow": 16, "pool_use_lifo": True} if sqlite else {}))
        except (ArgumentError, NoSuchModuleError) as exc:
            raise StoreError(f"cannot use database {shown}: {' '.join(str(exc).split())[:200]}") from None
        self.sqlite = sqlite
        if sqlite:
            @event.listens_for(self.engine, "connect")
            def _connect(dbapi: sqlite3.Connection, _record: object) -> None:  # let us issue BEGIN ourselves; WAL lets readers run during a write
                dbapi.isolation_level = None
                dbapi.execute("PRAGMA journal_mode=WAL")
                dbapi.execute("PRAGMA synchronous=FULL")
                dbapi.execute(f"PRAGMA busy_timeout={int(WRITE_WAIT * 1000)}")

            @event.listens_for(self.engine, "begin")
            def _begin(conn: Connection) -> None:
                conn.exec_driver_sql("BEGIN IMMEDIATE" if conn.info.get("write") else "BEGIN")
        try:
            metadata.create_all(self.engine)
            CHANGES_SCOPE.create(self.engine, checkfirst=True)  # a database made before the index was
        except DBAPIError as exc:
            raise StoreError(f"cannot open database {shown}: {' '.join(str(exc.orig).split())[:200]}") from None
        self._local = threading.Lock()
        self._watcher_lock = threading.Lock()
        self._watcher: sqlite3.Connection | None = None
        database = make_url(url).database if sqlite else None
        if database and database != ":memory:":
            self._watcher = sqlite3.connect(database, isolation_level=None, check_same_thread=False)
        self._waiting = threading.BoundedSemaphore(MAX_WAITING_WRITES)
        self._split_placements()
        self.watch_window, self.watch_log_limit = WATCH_WINDOW, WATCH_LOG_LIMIT
        with self.engine.connect() as conn, conn.begin():  # watches reach back to here, no further
            if not CHANGES_FROM.written(conn):
                CHANGES_FROM.set(conn, RESOURCE_VERSION.get(conn))

    @contextmanager
    def write(self, on_rollback: Callable[[], None] | None = None) -> Iterator[Connection]:
        """One serialized write transaction (committed on success, rolled back on error). Raises StoreBusy when
        the lock is not free within WRITE_WAIT seconds, or when too many writes already wait for it.
        `on_rollback`: called, still holding the lock, when a transaction that started does not commit (what a
        process keeps in memory about the stored data is taken back before another write can see it)."""
        if not self._waiting.acquire(blocking=False):
            raise StoreBusy(f"{MAX_WAITING_WRITES} writes are already waiting")
        try:
            if not self._local.acquire(timeout=WRITE_WAIT):
                raise StoreBusy(f"the write lock was not free within {WRITE_WAIT:g} s")
        finally:
            self._waiting.release()
        started = False
        try:
            with self._busy_as_store_busy(), self.engine.connect() as conn:
                conn.info["write"] = True
                try:
                    with conn.begin():
                        if not self.sqlite:  # the lock other portal processes hold, waited for as long as ours
                            conn.execute(text(f"SET LOCAL lock_timeout = '{int(WRITE_WAIT * 1000)}ms'"))
                            conn.execute(text("SELECT pg_advisory_xact_lock(7347)"))
                        started = True
                        self._bump_revision(conn)
                        yield conn
                finally:
                    conn.info["write"] = False
        except BaseException:
            if started and on_rollback is not None:
                on_rollback()
            raise
        finally:
            self._local.release()

    @staticmethod
    def _bump_revision(conn: Connection) -> None:
        """Every write transaction, whatever it changes (objects, runs, what is applied, the snapshot), moves the
        store's revision on: a reader that saw revision R knows nothing it reads has changed while it still is R
        (the read cache, read_cache.py). Written in the transaction, so it commits or rolls back with it."""
        REVISION.set(conn, REVISION.get(conn) + 1)

    @staticmethod
    def revision(conn: Connection) -> int:
        """The revision of everything stored, as of this read's transaction."""
        return REVISION.get(conn)

    def marker(self) -> int | None:
        """SQLite: a number that moves on whenever any write commits (this process's or another's), for a reader
        to tell that nothing has changed since it last looked: `data_version` on a connection of our own that never
        writes, a few microseconds and no transaction (fit for the event loop). Elsewhere None: read `revision`
        inside the read's own transaction."""
        if self._watcher is None:
            return None
        with self._watcher_lock:
            marker: int = self._watcher.execute("PRAGMA data_version").fetchone()[0]
            return marker

    @staticmethod
    @contextmanager
    def _busy_as_store_busy() -> Iterator[None]:
        try:
            yield
        except OperationalError as exc:
            if any(word in str(exc.orig) for word in ("locked", "busy", "lock timeout")):  # another process writes
                raise StoreBusy("the database is locked by another writer") from None
            raise

    @contextmanager
    def read(self) -> Iterator[Connection]:
        with self.engine.connect() as conn:
            with conn.begin():
                yield conn

    # ---- objects ----------------------------------------------------------------------------------

    @staticmethod
    def get(conn: Connection, kind: str, namespace: str, name: str) -> dict | None:
        row = conn.execute(select(objects).where(objects.c.kind == kind, objects.c.namespace == namespace,
                                                 objects.c.name == name)).mappings().first()
        return _object(row) if row else None

    @staticmethod
    def list(conn: Connection, kind: str | None = None, namespace: str | None = None) -> list[dict]:
        query = select(objects).order_by(objects.c.kind, objects.c.namespace, objects.c.name)
        if kind:
            query = query.where(objects.c.kind == kind)
        if namespace is not None:
            query = query.where(objects.c.namespace == namespace)
        return [_object(r) for r in conn.execute(query).mappings()]

    @staticmethod
    def list_stored(conn: Connection, kind: str, namespace: str | None = None) -> builtins.list[tuple[str, str, str]]:
        """(namespace, name, stored JSON text) of each `kind` in `namespace` (None: all), in (namespace, name) order:
        for a reader that decodes only what changed (the read cache)."""
        query = select(objects.c.namespace, objects.c.name, objects.c.body).where(objects.c.kind == kind) \
            .order_by(objects.c.namespace, objects.c.name)
        if namespace is not None:
            query = query.where(objects.c.namespace == namespace)
        return [(row[0], row[1], row[2]) for row in conn.execute(query)]

    @staticmethod
    def list_texts(conn: Connection) -> builtins.list[str]:
        """Every object as its stored JSON text (for a process that decodes them itself)."""
        query = select(objects.c.body).order_by(objects.c.kind, objects.c.namespace, objects.c.name)
        return [row[0] for row in conn.execute(query)]

    def next_version(self, conn: Connection) -> int:
        current = RESOURCE_VERSION.get(conn) + 1
        RESOURCE_VERSION.set(conn, current)
        return current

    def put(self, conn: Connection, kind: str, namespace: str, body: dict, existing: dict | None) -> dict:
        version = self.next_version(conn)
        meta = body.setdefault("metadata", {})
        if existing is None:
            meta.update(uid=str(uuid.uuid4()), generation=1, creationTimestamp=rfc3339())
            meta["resourceVersion"] = str(version)
            conn.execute(objects.insert().values(
                kind=kind, namespace=namespace, name=meta["name"], body=json.dumps(body), resource_version=version,
                generation=1, uid=meta["uid"], created_at=now()))
        else:
            old = existing["metadata"]
            changed = {k: v for k, v in body.items() if k not in ("metadata", "status")} != {
                k: v for k, v in existing.items() if k not in ("metadata", "status")}
            generation = int(old["generation"]) + (1 if changed else 0)
            meta.update(uid=old["uid"], generation=generation, creationTimestamp=old["creationTimestamp"])
            meta["resourceVersion"] = str(version)
            conn.execute(objects.update().where(objects.c.kind == kind, objects.c.namespace == namespace,
                                                objects.c.name == meta["name"]).values(
                body=json.dumps(body), resource_version=version, generation=generation))
        self._changed(conn, version, "ADDED" if existing is None else "MODIFIED", kind, namespace, body)
        return body

    def delete(self, conn: Connection, kind: str, namespace: str, name: str) -> dict | None:
        """The object as deleted (None if there was none)."""
        version = self.next_version(conn)  # a deletion is a change of the fleet, as in Kubernetes
        last = self.get(conn, kind, namespace, name)
        conn.execute(objects.delete().where(objects.c.kind == kind, objects.c.namespace == namespace, objects.c.name == name))
        if last is not None:
            last["metadata"]["resourceVersion"] = str(version)  # as the API server's DELETED event says it
            self._changed(conn, version, "DELETED", kind, namespace, last)
        return last

    # ---- the change log, for watches -------------------------------------------------------------------

    def _changed(self, conn: Connection, version: int, kind_of_change: str, kind: str, namespace: str,
                 body: dict) -> None:
        conn.execute(changes.insert().values(resource_version=version, kind=kind, namespace=namespace,
                                             name=body["metadata"]["name"], type=kind_of_change, body=json.dumps(body)))
        scope = (changes.c.kind == kind, changes.c.namespace == namespace)
        cut = conn.execute(select(changes.c.resource_version).where(*scope).order_by(
            changes.c.resource_version.desc()).offset(self.watch_window).limit(1)).scalar()
        if cut is not None:  # the scope's window, pruned as it moves
            conn.execute(changes.delete().where(*scope, changes.c.resource_version <= cut))
            self._raise_floor(conn, kind, namespace, cut)
        if version % 100 == 0:  # now and then: the whole log's bound
            cut = conn.execute(select(changes.c.resource_version).order_by(changes.c.resource_version.desc())
                               .offset(self.watch_log_limit).limit(1)).scalar()
            if cut is not None:
                for pruned_kind, pruned_namespace, newest in conn.execute(
                        select(changes.c.kind, changes.c.namespace, func.max(changes.c.resource_version))
                        .where(changes.c.resource_version <= cut).group_by(changes.c.kind, changes.c.namespace)):
                    self._raise_floor(conn, pruned_kind, pruned_namespace, newest)
                conn.execute(changes.delete().where(changes.c.resource_version <= cut))

    @staticmethod
    def _raise_floor(conn: Connection, kind: str, namespace: str, version: int) -> None:
        where = (watch_floors.c.kind == kind, watch_floors.c.namespace == namespace)
        if not conn.execute(watch_floors.update().where(*where).values(version=version)).rowcount:
            conn.execute(watch_floors.insert().values(kind=kind, namespace=namespace, version=version))

    def changes_since(self, conn: Connection, version: int, kind: str, namespace: str | None, limit: int = 500,
                      among: Callable[[str], bool] | None = None) -> tuple[int, int, builtins.list[dict]]:
        """(the oldest version a watch may start from, the current version, the changes after `version` up to it
        of `kind`, in `namespace` unless None: each {resourceVersion, type, namespace, name, body text}; an ADDED or
        MODIFIED change's text is the text stored by that write). The oldest version is the scope's: with `namespace`
        None, the newest of the namespaces' own (`among`: only those namespaces')."""
        current = RESOURCE_VERSION.get(conn)  # read first: every change up to it is committed
        floors = select(watch_floors.c.namespace, watch_floors.c.version).where(watch_floors.c.kind == kind)
        if namespace is not None:
            floors = floors.where(watch_floors.c.namespace == namespace)
        since = max([CHANGES_FROM.get(conn)]  # watches reach back to the store's start
                    + [floor for ns, floor in conn.execute(floors) if among is None or among(ns)])
        query = select(changes.c.resource_version, changes.c.type, changes.c.namespace, changes.c.body,
                       changes.c.name).where(
            changes.c.resource_version > version, changes.c.resource_version <= current, changes.c.kind == kind)
        if namespace is not None:
            query = query.where(changes.c.namespace == namespace)
        rows = [{"resourceVersion": r[0], "type": r[1], "namespace": r[2], "body": r[3], "name": r[4]}
                for r in conn.execute(query.order_by(changes.c.resource_version).limit(limit))]
        if len(rows) == limit:  # the rest on the next poll: up to the last one given, no further
            current = rows[-1]["resourceVersion"]
        return since, current, rows

    # ---- reservations: the capacity ledger, one row per deployment ------------------------------------

    @staticmethod
    def ledger_version(conn: Connection) -> int:
        """Moves with every change of the reservations (a process keeping them in memory compares it)."""
        return LEDGER.get(conn)

    @staticmethod
    def bump_ledger(conn: Connection) -> int:
        version = LEDGER.get(conn) + 1
        LEDGER.set(conn, version)
        return version

    @staticmethod
    def reservation_rows(conn: Connection) -> dict[str, tuple[str, str]]:
        """deployment -> (reservations JSON, plan part JSON)."""
        return {row[0]: (row[1], row[2]) for row in conn.execute(
            select(reservations.c.deployment, reservations.c.replicas, reservations.c.plan))}

    @staticmethod
    def reservations_text(conn: Connection) -> str:
        """Every reservation, as one JSON list (the rows' lists joined as text)."""
        parts = [row[0][1:-1] for row in conn.execute(select(reservations.c.replicas).order_by(reservations.c.deployment))
                 if row[0] != "[]"]
        return "[" + ",".join(parts) + "]"

    @staticmethod
    def set_reservation(conn: Connection, deployment: str, replicas: str, plan: str, pending: bool,
                        version: int = 0) -> None:
        values = {"replicas": replicas, "plan": plan, "pending": int(pending), "version": version}
        if conn.execute(reservations.update().where(reservations.c.deployment == deployment).values(**values)).rowcount == 0:
            conn.execute(reservations.insert().values(deployment=deployment, **values))

    @staticmethod
    def store_planned(conn: Connection, rows: Mapping[str, tuple[str, str]], existing: Collection[str]) -> None:
        """A replan's rows, none pending: (replicas, plan part) by deployment; `existing`: the deployments that have
        a row. One statement each for the updates and the inserts, executed for every row (a replan that changed
        hundreds of rows compiled a statement per row, a tenth of a busy portal's CPU)."""
        updates = [{"key": d, "replicas": r, "plan": p} for d, (r, p) in rows.items() if d in existing]
        inserts = [{"deployment": d, "replicas": r, "plan": p, "pending": 0, "version": 0}
                   for d, (r, p) in rows.items() if d not in existing]
        if updates:
            conn.execute(reservations.update().where(reservations.c.deployment == bindparam("key"))
                         .values(replicas=bindparam("replicas"), plan=bindparam("plan"), pending=0, version=0), updates)
        if inserts:
            conn.execute(reservations.insert(), inserts)

    @staticmethod
    def delete_reservation(conn: Connection, deployment: str) -> None:
        conn.execute(reservations.delete().where(reservations.c.deployment == deployment))

    @staticmethod
    def pending_marker(conn: Connection) -> tuple[int, int]:
        """(how many rows are pending, the newest write's version among them): every placed write raises the
        second, and only a stored replan (with a new snapshot) takes rows out of pending."""
        count, newest = conn.execute(select(func.count(), func.max(reservations.c.version))
                                     .where(reservations.c.pending == 1)).one()
        return int(count), int(newest or 0)

    @staticmethod
    def pending_versions(conn: Connection) -> builtins.list[tuple[str, int]]:
        """(deployment, resourceVersion of the write that placed it) of pending rows: what changes when they do."""
        return [(row[0], row[1]) for row in conn.execute(
            select(reservations.c.deployment, reservations.c.version).where(reservations.c.pending == 1)
            .order_by(reservations.c.deployment))]

    @staticmethod
    def pending_parts(conn: Connection, deployments: builtins.list[str] | None) -> dict[tuple[str, int], str]:
        """(deployment, version) -> plan part JSON of pending rows, of those deployments (None: all of them)."""
        if deployments == []:
            return {}
        query = select(reservations.c.deployment, reservations.c.version, reservations.c.plan).where(
            reservations.c.pending == 1)
        if deployments is not None:
            query = query.where(reservations.c.deployment.in_(deployments))
        return {(row[0], row[1]): row[2] for row in conn.execute(query)}

    @staticmethod
    def pending_since(conn: Connection, version: int) -> set[str]:
        """Deployments placed by writes after `version` and not yet planned after."""
        return {row[0] for row in conn.execute(select(reservations.c.deployment).where(
            reservations.c.pending == 1, reservations.c.version > version))}

    @staticmethod
    def settle_pending(conn: Connection, upto: int | None = None) -> None:
        """Rows placed by writes up to `upto` (None: every write) are planned after."""
        query = reservations.update().where(reservations.c.pending == 1)
        if upto is not None:
            query = query.where(reservations.c.version <= upto)
        conn.execute(query.values(pending=0))

    def _split_placements(self) -> None:
        """A database from before per-deployment rows kept every reservation in one JSON document: split it."""
        with self.engine.connect() as conn, conn.begin():
            if not PLACEMENTS.written(conn):
                return
            by_deployment: dict[str, builtins.list[dict]] = {}
            for replica in PLACEMENTS.get(conn):
                by_deployment.setdefault(f"{replica['namespace']}/{replica['deployment']}", []).append(replica)
            for deployment, replicas in by_deployment.items():
                self.set_reservation(conn, deployment, json.dumps(replicas), "{}", False)
            PLACEMENTS.delete(conn)

    # ---- sign-in sessions (server-side: the cookie holds a random id, never the token) ----------------

    @staticmethod
    def create_session(conn: Connection, token_sha256: str) -> tuple[str, str]:
        """(session id for the cookie, CSRF token for the forms)."""
        session_id, csrf = secrets.token_urlsafe(32), secrets.token_urlsafe(32)
        created = now()
        conn.execute(sessions.delete().where(sessions.c.expires_at < created))  # expired ones go on each sign-in
        conn.execute(sessions.insert().values(id_sha256=_sha256(session_id), token_sha256=token_sha256, csrf=csrf,
                                              created_at=created, expires_at=created + timedelta(hours=SESSION_HOURS)))
        return session_id, csrf

    @staticmethod
    def get_session(conn: Connection, session_id: str) -> dict | None:
        row = conn.execute(select(sessions).where(sessions.c.id_sha256 == _sha256(session_id))).mappings().first()
        if row is None or _aware(row["expires_at"]) < now():
            return None
        return {"token_sha256": row["token_sha256"], "csrf": row["csrf"]}

    @staticmethod
    def delete_session(conn: Connection, session_id: str) -> None:
        conn.execute(sessions.delete().where(sessions.c.id_sha256 == _sha256(session_id)))

    # ---- runs ---------------------------------------------------------------------------------------

    @staticmethod
    def enqueue(conn: Connection, stack: str, operation: str, fingerprint: str) -> None:
        pending = conn.execute(select(runs.c.id).where(runs.c.stack == stack, runs.c.status == RunStatus.queued)).first()
        if pending:  # a newer desired state replaces a queued one: the stack converges to the latest
            conn.execute(runs.update().where(runs.c.id == pending[0]).values(operation=operation, fingerprint=fingerprint))
        else:
            conn.execute(runs.insert().values(stack=stack, operation=operation, fingerprint=fingerprint,
                                              status=RunStatus.queued, log="", created_at=now()))

    @staticmethod
    def list_runs(conn: Connection, limit: int = 200) -> builtins.list[dict]:
        rows = conn.execute(select(runs).order_by(runs.c.id.desc()).limit(limit)).mappings()
        return [_run(r) for r in rows]

    @staticmethod
    def get_run(conn: Connection, run_id: int) -> dict | None:
        row = conn.execute(select(runs).where(runs.c.id == run_id)).mappings().first()
        return _run(row) if row else None


def _sha256(value: str) -> str:
    return hashlib.sha256(value.encode()).hexdigest()


def rfc3339(moment: datetime | None = None) -> str:
    """A time as Kubernetes writes it (RFC 3339 in UTC, with `Z`): `2026-12-03T14:00:00Z`."""
    return _aware(moment or now()).astimezone(timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")


def _aware(moment: datetime) -> datetime:
    """SQLite gives naive datetimes back: they were written in UTC."""
    return moment if moment.tzinfo else moment.replace(tzinfo=timezone.utc)


def _private_sqlite_file(database: str | None) -> None:
    """The portal's SQLite file (objects, sessions) is readable by its owner only, as is its folder."""
    if not database or database == ":memory:":
        return
    folder = os.path.dirname(os.path.abspath(database))
    os.makedirs(folder, mode=0o700, exist_ok=True)
    try:
        os.close(os.open(database, os.O_CREAT | os.O_WRONLY, 0o600))
        os.chmod(database, 0o600)
    except OSError as exc:
        raise StoreError(f"cannot create the database file {database}: {exc.strerror}") from None


def _object(row: RowMapping) -> dict:
    body: dict = json.loads(row["body"])
    return body


def _run(row: RowMapping) -> dict[str, Any]:
    return {"id": row["id"], "stack": row["stack"], "operation": row["operation"], "status": row["status"],
            "fingerprint": row["fingerprint"], "log": row["log"],
            "createdAt": rfc3339(row["created_at"]) if row["created_at"] else None,
            "startedAt": rfc3339(row["started_at"]) if row["started_at"] else None,
            "finishedAt": rfc3339(row["finished_at"]) if row["finished_at"] else None}
