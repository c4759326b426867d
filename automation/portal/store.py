"""Portal storage: objects, placements, runs; SQLite by default, PostgreSQL by URL.

Every write is one transaction, and writes are serialized fleet-wide (SQLite: BEGIN IMMEDIATE;
PostgreSQL: a transaction-scoped advisory lock), so the plan computed inside a write sees every
accepted object: two submissions racing for the last free GPUs are planned one after the other
and never both get them. A write is acknowledged only after its commit: a crash loses nothing
that was accepted.
"""

from __future__ import annotations

import builtins

import json
import threading
import uuid
from contextlib import contextmanager
from datetime import datetime, timezone

from sqlalchemy import (Column, DateTime, Integer, MetaData, String, Table, Text, UniqueConstraint, create_engine,
                        event, select, text)
from sqlalchemy.engine import Connection, Engine

metadata = MetaData()
objects = Table(
    "objects", metadata,
    Column("id", Integer, primary_key=True, autoincrement=True),
    Column("kind", String(64), nullable=False),
    Column("namespace", String(63), nullable=False),  # "" for cluster-scoped kinds
    Column("name", String(253), nullable=False),
    Column("body", Text, nullable=False),
    Column("resource_version", Integer, nullable=False),
    Column("generation", Integer, nullable=False),
    Column("uid", String(36), nullable=False),
    Column("created_at", DateTime(timezone=True), nullable=False),
    UniqueConstraint("kind", "namespace", "name"),
)
state = Table("state", metadata, Column("key", String(64), primary_key=True), Column("value", Text, nullable=False))
runs = Table(
    "runs", metadata,
    Column("id", Integer, primary_key=True, autoincrement=True),
    Column("stack", String(300), nullable=False),
    Column("operation", String(16), nullable=False),
    Column("fingerprint", String(64), nullable=False),
    Column("status", String(16), nullable=False),  # queued | running | succeeded | failed
    Column("log", Text, nullable=False, default=""),
    Column("created_at", DateTime(timezone=True), nullable=False),
    Column("started_at", DateTime(timezone=True)),
    Column("finished_at", DateTime(timezone=True)),
    Column("worker", String(64)),
)


def now() -> datetime:
    return datetime.now(timezone.utc)


class Store:
    def __init__(self, url: str):
        sqlite = url.startswith("sqlite")
        self.engine: Engine = create_engine(url, future=True, pool_pre_ping=True,
                                            connect_args={"timeout": 30, "check_same_thread": False} if sqlite else {})
        self.sqlite = sqlite
        if sqlite:
            @event.listens_for(self.engine, "connect")
            def _connect(dbapi, _record):  # let us issue BEGIN ourselves; WAL lets readers run during a write
                dbapi.isolation_level = None
                dbapi.execute("PRAGMA journal_mode=WAL")
                dbapi.execute("PRAGMA synchronous=FULL")
                dbapi.execute("PRAGMA busy_timeout=30000")

            @event.listens_for(self.engine, "begin")
            def _begin(conn):
                conn.exec_driver_sql("BEGIN IMMEDIATE" if conn.info.get("write") else "BEGIN")
        metadata.create_all(self.engine)
        self._local = threading.Lock()

    @contextmanager
    def write(self):
        """One serialized write transaction (committed on success, rolled back on error)."""
        with self._local:
            with self.engine.connect() as conn:
                conn.info["write"] = True
                try:
                    with conn.begin():
                        if not self.sqlite:
                            conn.execute(text("SELECT pg_advisory_xact_lock(7347)"))
                        yield conn
                finally:
                    conn.info["write"] = False

    @contextmanager
    def read(self):
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

    def next_version(self, conn: Connection) -> int:
        current = int(self.get_state(conn, "resourceVersion") or "0") + 1
        self.set_state(conn, "resourceVersion", str(current))
        return current

    def put(self, conn: Connection, kind: str, namespace: str, body: dict, existing: dict | None) -> dict:
        version = self.next_version(conn)
        meta = body.setdefault("metadata", {})
        if existing is None:
            meta.update(uid=str(uuid.uuid4()), generation=1, creationTimestamp=now().isoformat(timespec="seconds"))
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
        return body

    @staticmethod
    def delete(conn: Connection, kind: str, namespace: str, name: str) -> None:
        conn.execute(objects.delete().where(objects.c.kind == kind, objects.c.namespace == namespace, objects.c.name == name))

    # ---- key/value state ----------------------------------------------------------------------------

    @staticmethod
    def get_state(conn: Connection, key: str) -> str | None:
        return conn.execute(select(state.c.value).where(state.c.key == key)).scalar()

    @staticmethod
    def set_state(conn: Connection, key: str, value: str) -> None:
        if conn.execute(select(state.c.key).where(state.c.key == key)).first():
            conn.execute(state.update().where(state.c.key == key).values(value=value))
        else:
            conn.execute(state.insert().values(key=key, value=value))

    # ---- runs ---------------------------------------------------------------------------------------

    @staticmethod
    def enqueue(conn: Connection, stack: str, operation: str, fingerprint: str) -> None:
        pending = conn.execute(select(runs.c.id).where(runs.c.stack == stack, runs.c.status == "queued")).first()
        if pending:  # a newer desired state replaces a queued one: the stack converges to the latest
            conn.execute(runs.update().where(runs.c.id == pending[0]).values(operation=operation, fingerprint=fingerprint))
        else:
            conn.execute(runs.insert().values(stack=stack, operation=operation, fingerprint=fingerprint,
                                              status="queued", log="", created_at=now()))

    @staticmethod
    def list_runs(conn: Connection, limit: int = 200) -> builtins.list[dict]:
        rows = conn.execute(select(runs).order_by(runs.c.id.desc()).limit(limit)).mappings()
        return [_run(r) for r in rows]

    @staticmethod
    def get_run(conn: Connection, run_id: int) -> dict | None:
        row = conn.execute(select(runs).where(runs.c.id == run_id)).mappings().first()
        return _run(row) if row else None


def _object(row) -> dict:
    return json.loads(row["body"])


def _run(row) -> dict:
    return {"id": row["id"], "stack": row["stack"], "operation": row["operation"], "status": row["status"],
            "fingerprint": row["fingerprint"], "log": row["log"],
            "createdAt": row["created_at"].isoformat() if row["created_at"] else None,
            "startedAt": row["started_at"].isoformat() if row["started_at"] else None,
            "finishedAt": row["finished_at"].isoformat() if row["finished_at"] else None}
