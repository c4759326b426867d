"""The portal's tables: objects, their change log (for watches), reservations, runs, sign-in sessions and the
key/value state (its keys: state.py)."""

from __future__ import annotations

from sqlalchemy import Column, DateTime, Index, Integer, MetaData, String, Table, Text, UniqueConstraint

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
# the key/value state: each key, its type and its value before it is first written are in state.py
state = Table("state", metadata, Column("key", String(64), primary_key=True), Column("value", Text, nullable=False))
# Per deployment: its reservations (the capacity ledger: recorded replicas, JSON) and its part of the plan (JSON, as
# `plan -o json` gives it). A write places its deployment and writes its row alone, `pending` until the background
# replan has planned the whole fleet after it.
reservations = Table(
    "reservations", metadata,
    Column("deployment", String(320), primary_key=True),  # namespace/name
    Column("pending", Integer, nullable=False, default=0),
    Column("version", Integer, nullable=False, default=0),  # the resourceVersion of the write that placed it
    Column("replicas", Text, nullable=False),
    Column("plan", Text, nullable=False),
    # every read asks what is pending: answered from the index, not by walking each row's long JSON
    Index("reservations_pending", "pending", "version", "deployment"),
)
runs = Table(
    "runs", metadata,
    Column("id", Integer, primary_key=True, autoincrement=True),
    Column("stack", String(300), nullable=False),
    Column("operation", String(16), nullable=False),
    Column("fingerprint", String(64), nullable=False),
    Column("status", String(16), nullable=False),  # a RunStatus: queued | running | succeeded | failed
    Column("log", Text, nullable=False, default=""),
    Column("created_at", DateTime(timezone=True), nullable=False),
    Column("started_at", DateTime(timezone=True)),
    Column("finished_at", DateTime(timezone=True)),
    Column("worker", String(64)),
)

# Every change of an object, written in the transaction that makes it, for watches (any portal process polls it):
# resourceVersions are one per write, so the kept ones are contiguous.
changes = Table(
    "changes", metadata,
    Column("resource_version", Integer, primary_key=True, autoincrement=False),
    Column("kind", String(64), nullable=False),
    Column("namespace", String(63), nullable=False),
    Column("name", String(253), nullable=False),
    Column("type", String(16), nullable=False),  # ADDED | MODIFIED | DELETED
    Column("body", Text, nullable=False),  # the object as stored by it (the last one stored, for DELETED)
)
CHANGES_SCOPE = Index("changes_scope", changes.c.kind, changes.c.namespace, changes.c.resource_version)
# per kind and namespace, the newest change pruned from the log: a watch of that scope resumes from there or later
watch_floors = Table(
    "watch_floors", metadata,
    Column("kind", String(64), primary_key=True),
    Column("namespace", String(63), primary_key=True),
    Column("version", Integer, nullable=False),
)

sessions = Table(
    "sessions", metadata,
    Column("id_sha256", String(64), primary_key=True),  # the cookie holds the id; the database only its hash
    Column("token_sha256", String(64), nullable=False),  # whose token: revoking the token ends the session
    Column("csrf", String(64), nullable=False),
    Column("created_at", DateTime(timezone=True), nullable=False),
    Column("expires_at", DateTime(timezone=True), nullable=False),
)
