"""`?watch=true` on a list path: newline-delimited JSON WatchEvents, as the Kubernetes API server streams them.

Events come from the store's change log (`Store.changes_since`), which every write adds to in its own transaction,
so a watcher sees the writes of every portal process sharing the database. One poller per process reads the current
resourceVersion every POLL seconds and wakes the watchers whose version it passed; a watcher then reads its own
changes. A watch holds no worker thread while it waits (an async generator on the event loop; the reads run on a
worker thread for their milliseconds only).

resourceVersion absent or "0": the current objects first, as ADDED, then what changes; N: the changes after N, or,
when the log no longer reaches back to N, one ERROR event with a 410 Expired Status (clients list again). The log
keeps each namespace's last changes of a kind (store.py), so a watch of the namespaces its caller sees is never
expired by another team's writes.
"""

from __future__ import annotations

import asyncio
import json
import logging
from typing import AsyncIterator, Awaitable, Callable
from urllib.parse import parse_qs

from fastapi import Request
from fastapi.responses import StreamingResponse
from starlette.concurrency import run_in_threadpool

from automation.portal.auth import Principal
from automation.portal.portal import Portal
from automation.portal.service import ApiError
from automation.portal.state import RESOURCE_VERSION

log = logging.getLogger("modelplane.portal")
POLL = 0.25  # seconds between reads of the current resourceVersion (one read per process, whatever the watchers)
BOOKMARK_EVERY = 60.0  # seconds between BOOKMARKs, as the API server sends them about once a minute
DEFAULT_TIMEOUT, MAX_TIMEOUT = 1800, 3600  # seconds a watch lasts (the API server: 30 to 60 minutes)
RECHECK = 5.0  # seconds at most between checks that the watcher's token (or session) still names the same caller
API_VERSION = "modelplane.ai/v1alpha1"


def requested(query: str) -> bool:
    """Whether a list request is a watch, as the API server decides it (apimachinery converts ListOptions.Watch with
    Convert_Slice_string_To_bool): the FIRST `watch` value, and any value but `false` (any case) or `0` is a watch,
    an empty one too (the Python client sends `watch=True`). Authorization (front_proxy.attributes) and serving both
    ask here, so `watch=false&watch=true` cannot be authorized as a list and served as a watch."""
    values = parse_qs(query, keep_blank_values=True).get("watch") or []
    return bool(values) and values[0] != "0" and values[0].lower() != "false"


def watching(request: Request) -> bool:
    return requested(request.scope.get("query_string", b"").decode("latin-1"))


class Tail:
    """The current resourceVersion of the store, polled while anyone watches."""

    def __init__(self, portal: Portal):
        self.portal = portal
        self.version = -1
        self._moved = asyncio.Event()
        self._waiting = 0
        self._task: asyncio.Task | None = None

    async def wait_past(self, version: int, timeout: float) -> None:
        """Return once the store is past `version`, or after `timeout` seconds."""
        self._waiting += 1
        try:
            if self._task is None or self._task.done():
                self._task = asyncio.create_task(self._poll())
            loop = asyncio.get_running_loop()
            deadline = loop.time() + timeout
            while self.version <= version and (left := deadline - loop.time()) > 0:
                moved = self._moved
                try:
                    await asyncio.wait_for(moved.wait(), left)
                except TimeoutError:
                    return
        finally:
            self._waiting -= 1

    async def _poll(self) -> None:
        while self._waiting > 0:
            try:
                version = await run_in_threadpool(self._read)
            except Exception:  # the database is down: watchers wait, and are told when it is back
                log.exception("watch: cannot read the current resourceVersion")
                version = self.version
            if version != self.version:
                self.version = version
                moved, self._moved = self._moved, asyncio.Event()
                moved.set()
            await asyncio.sleep(POLL)

    def _read(self) -> int:
        with self.portal.store.read() as conn:
            return RESOURCE_VERSION.get(conn)


def tail_of(portal: Portal) -> Tail:
    tail = getattr(portal, "_watch_tail", None)
    if tail is None:
        tail = Tail(portal)
        portal._watch_tail = tail  # type: ignore[attr-defined]  # one per app, made on its first watch
    return tail


def respond(portal: Portal, who: Principal, kind: str, namespace: str | None, request: Request,
            matches: Callable[[dict], bool] = lambda _: True) -> StreamingResponse:
    """The watch of `kind` in `namespace` (None: every namespace `who` may see, or a cluster-scoped kind)."""
    params = request.query_params
    version = params.get("resourceVersion") or "0"
    if not version.isdigit():
        raise ApiError(400, "BadRequest", f"resourceVersion {version[:40]!r} is not a resourceVersion of this portal")
    timeout = params.get("timeoutSeconds")
    if timeout is not None and not timeout.isdigit():
        raise ApiError(400, "BadRequest", "timeoutSeconds must be a whole number of seconds")
    seconds = min(int(timeout), MAX_TIMEOUT) if timeout else DEFAULT_TIMEOUT
    bookmarks = params.get("allowWatchBookmarks") == "true"
    shown = shape(request, kind)
    stream = events(portal, who, kind, namespace, int(version) or None, seconds, bookmarks, matches, shown,
                    still_allowed(portal, who, request))
    return StreamingResponse(stream, media_type="application/json")


def still_allowed(portal: Portal, who: Principal, request: Request) -> Callable[[], Awaitable[bool]]:
    """Whether the request's credentials still name `who` (a revoked token, an ended session or a token whose
    namespaces changed: no). A front-proxied caller was authorized by the cluster for this request and is not
    asked again: the API server in front holds that watch, as it holds its own."""
    caller = request.scope.get("state", {}).get("caller")
    headers, cookies = request.headers, request.cookies

    async def check() -> bool:
        if caller is not None and caller.how == "front-proxy":
            return True
        if headers.get("authorization", "").lower().startswith("bearer "):
            now = portal.sessions.authenticate(headers, {})  # in memory, on the loop (deps.caller does the same)
        else:
            now = await run_in_threadpool(portal.sessions.authenticate, headers, cookies)  # a session: a database read
        return now is not None and now.principal == who

    return check


def shape(request: Request, kind: str) -> Callable[[dict], dict]:
    """Each event's object as it is, or as a Table of one row when the client asks for Tables (`kubectl get -w`
    does, and prints the server's columns), as the API server answers a watch."""
    from automation.portal import tables

    as_table = tables.table_version(request.headers.get("accept", ""))
    if not as_table:
        return lambda body: body
    include = tables.include_object(request.query_params.get("includeObject"))
    return lambda body: tables.table(kind, [body], as_table, include,
                                     {"resourceVersion": body["metadata"].get("resourceVersion", "")})


def line(kind_of_event: str, obj: dict) -> bytes:
    return json.dumps({"type": kind_of_event, "object": obj}, separators=(",", ":")).encode() + b"\n"


async def events(portal: Portal, who: Principal, kind: str, namespace: str | None, start: int | None,
                 seconds: float, bookmarks: bool, matches: Callable[[dict], bool],
                 shown: Callable[[dict], dict] = lambda body: body,
                 allowed: Callable[[], Awaitable[bool]] | None = None) -> AsyncIterator[bytes]:
    """The watch's lines. `allowed`: asked before each batch of events and at least every RECHECK seconds; once it
    says no, the watch ends with an ERROR event (401), as a revoked token's next request would be answered."""
    loop = asyncio.get_running_loop()
    deadline = loop.time() + seconds
    store, tail = portal.store, tail_of(portal)

    def visible_namespace(namespace: str) -> bool:  # cluster-scoped objects are everyone's to read
        return namespace == "" or who.can_see(namespace)

    def visible(row: dict) -> bool:
        return visible_namespace(row["namespace"])

    def initial() -> tuple[int, list[dict]]:
        with store.read() as conn:
            current = RESOURCE_VERSION.get(conn)
            return current, portal.reads.statuses(store.list(conn, kind, namespace), conn)

    def changed(after: int) -> tuple[int, int, list[tuple[str, dict]]]:
        with store.read() as conn:
            oldest, current, rows = store.changes_since(conn, after, kind, namespace,
                                                        among=None if who.admin else visible_namespace)
            rows = [r for r in rows if visible(r)]
            bodies = portal.reads.statuses([json.loads(r["body"]) for r in rows], conn) if rows else []
        return oldest, current, [(r["type"], b) for r, b in zip(rows, bodies)]

    if start is None:
        since, items = await run_in_threadpool(initial)
        for body in items:
            if visible({"namespace": body["metadata"].get("namespace") or ""}) and matches(body):
                yield line("ADDED", shown(body))
    else:
        since = start
    next_bookmark = loop.time() + BOOKMARK_EVERY
    next_check = loop.time() + RECHECK
    first = True
    while (left := deadline - loop.time()) > 0:
        if not first:
            wake = min(next_bookmark, next_check) if bookmarks else next_check
            await tail.wait_past(since, min(left, max(0.0, wake - loop.time())))
        if allowed is not None and (loop.time() >= next_check or (not first and tail.version > since)):
            next_check = loop.time() + RECHECK
            if not await allowed():
                yield line("ERROR", {"kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Failure",
                                     "message": "the watch's credentials are no longer valid (revoked, or changed)",
                                     "reason": "Unauthorized", "code": 401})
                return
        if first or tail.version > since:
            oldest, current, found = await run_in_threadpool(changed, since)
            if since < oldest:
                yield line("ERROR", {"kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Failure",
                                     "message": f"too old resource version: {since} ({oldest})", "reason": "Expired",
                                     "code": 410})
                return
            for kind_of_event, body in found:
                if matches(body):
                    yield line(kind_of_event, shown(body))
            since = max(since, current)
        first = False
        if bookmarks and loop.time() >= next_bookmark:
            yield line("BOOKMARK", {"kind": kind, "apiVersion": API_VERSION, "metadata": {"resourceVersion": str(since)}})
            next_bookmark = loop.time() + BOOKMARK_EVERY
