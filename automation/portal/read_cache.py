"""Lists served from memory while nothing stored has changed.

A team's list is its objects with their status: decoding each stored body, composing its status from the last
replan and the stacks' runs, then encoding the answer took 15-20 ms of CPU at 2,000 deployments, on every read,
though nothing had changed between two reads. The store's marker (`Store.marker`) moves on whenever any write
commits, here or in another process, so what one read composed after marker M is what any read at M would see, or
newer: it is kept, with the bytes of the plain answer (no selector, no paging, not a Table), and served as is until
the marker moves. A client that wrote and then reads sees its write: the write committed before its read looked.

What is kept belongs to one marker at a time (a new one drops the rest), at most `MAX_LISTS` lists, and is never
changed once kept: readers on several threads share the items, so nothing downstream may mutate them. Each portal
process keeps its own.
"""

from __future__ import annotations

import gzip
import json
import threading
from dataclasses import dataclass
import orjson

MAX_LISTS = 256  # (kind, namespace) lists kept for the current revision
COMPRESS_FROM = 128 * 1024  # bytes: as the Kubernetes API server, a larger answer is sent gzipped when asked


@dataclass(frozen=True)
class CachedList:
    items: tuple[dict, ...]  # every object of the list with its status, in (namespace, name) order; never mutated
    version: str  # the store's resourceVersion the list was read at
    body: bytes  # the plain answer, `<Kind>List`, as JSON
    gzipped: bytes | None = None  # the same, gzipped once when it is large (clients that accept gzip get it)


def encode(document: dict) -> bytes:
    """JSON as the API answers it. orjson: the same document as json.dumps, several times faster; it writes
    non-ASCII text as UTF-8, as Starlette's JSONResponse does."""
    try:
        return orjson.dumps(document)
    except TypeError:  # orjson.JSONEncodeError: an integer beyond 64 bits, which json writes
        return json.dumps(document, ensure_ascii=False, separators=(",", ":")).encode()


class ReadCache:
    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._marker = -1
        self._lists: dict[tuple[str, str | None], CachedList] = {}

    def peek(self, marker: int, kind: str, namespace: str | None) -> CachedList | None:
        """The list of `kind` in `namespace` (None: every namespace) kept at `marker` (Store.marker), if any."""
        with self._lock:
            return self._lists.get((kind, namespace)) if marker == self._marker else None

    def keep(self, marker: int, kind: str, namespace: str | None, items: list[dict], version: str,
             document: dict) -> CachedList:
        """Keep a list composed in a read that began after `marker` was read; `document` is its plain answer."""
        body = encode(document)
        made = CachedList(tuple(items), version, body,
                          gzip.compress(body, compresslevel=1, mtime=0) if len(body) >= COMPRESS_FROM else None)
        with self._lock:
            if marker < self._marker:
                return made  # an older marker than one already kept: served, not kept
            if marker > self._marker:
                self._marker, self._lists = marker, {}
            if len(self._lists) < MAX_LISTS:
                self._lists[(kind, namespace)] = made
        return made
