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

A write moves the marker, so the next read composes the list again; under a stream of writes that was most of the
portal's CPU (fleet_gen's team list: 35 ms a composition, recomposed after every write). Most of a list is the same
as the last composition's, so each list also remembers its items (`Items`): an object whose stored text is the one
decoded last time is not decoded again, and an item whose status is equal to last time's is not encoded again; its
bytes are spliced into the list's. Only the status is composed for every item, as it depends on the whole fleet.
"""

from __future__ import annotations

import gzip
import json
import re
import threading
from collections import OrderedDict
from dataclasses import dataclass, replace
from typing import Any, Callable, NamedTuple
import orjson

MAX_LISTS = 256  # (kind, namespace) lists kept for the current revision
MAX_REMEMBERED = 64  # lists whose items are remembered across revisions (the most recently composed)
COMPRESS_FROM = 128 * 1024  # bytes: as the Kubernetes API server, a larger answer is sent gzipped when asked


class CachedList:
    """A list as composed at one marker: its items with their status, in (namespace, name) order, never mutated;
    the store's resourceVersion it was read at; the plain answer (`<Kind>List`) as JSON; and the same gzipped, made
    once when a client that accepts gzip first asks (kubectl does; a client that does not never pays for it)."""

    __slots__ = ("items", "version", "body", "_gzipped", "_lock")

    def __init__(self, items: tuple[dict, ...], version: str, body: bytes):
        self.items, self.version, self.body = items, version, body
        self._gzipped: bytes | None = None
        self._lock = threading.Lock()

    @property
    def compressible(self) -> bool:
        """Large enough to send gzipped to a client that accepts it."""
        return len(self.body) >= COMPRESS_FROM

    @property
    def gzipped(self) -> bytes | None:
        """None when the answer is small enough to send as it is. Made on first use: a caller on the event loop asks
        for it on a worker thread."""
        if not self.compressible:
            return None
        with self._lock:
            if self._gzipped is None:
                self._gzipped = gzip.compress(self.body, compresslevel=1, mtime=0)
            return self._gzipped


def encode(document: object) -> bytes:
    """JSON as the API answers it. orjson: the same document as json.dumps, several times faster; it writes
    non-ASCII text as UTF-8, as Starlette's JSONResponse does."""
    try:
        return orjson.dumps(document)
    except TypeError:  # orjson.JSONEncodeError: an integer beyond 64 bits, which json writes
        return json.dumps(document, ensure_ascii=False, separators=(",", ":")).encode()


_LONG_NUMBER = re.compile(r"\d{19}")  # an integer of 19 digits or more may pass 64 bits: orjson reads it as a float


def loads(text: str) -> Any:
    """JSON text as json.loads reads it: by orjson (about 3x faster: the stored snapshot is megabytes at fleet
    scale and read again after every replan), by json when the text has a run of 19 digits (orjson would read a
    larger integer as a float) or when orjson refuses it (NaN, a lone surrogate)."""
    if _LONG_NUMBER.search(text) is None:
        try:
            return orjson.loads(text)
        except orjson.JSONDecodeError:
            pass
    return json.loads(text)


def list_body(document: dict, encoded_items: list[bytes | None]) -> bytes:
    """`document` (a `<Kind>List` whose `items` come last) as JSON, its items' JSON spliced in when orjson wrote each
    of them (what encoding the whole document writes, without encoding the items again); else encoded whole."""
    if any(encoded is None for encoded in encoded_items):
        return encode(document)
    assert list(document)[-1] == "items"
    empty = encode({**document, "items": []})
    assert empty.endswith(b"[]}")
    return b"".join((empty[:-2], b",".join(encoded_items), b"]}"))  # type: ignore[arg-type]


@dataclass(frozen=True, eq=False)  # compared with `same`: the snapshot by identity
class Stamp:
    """What every item's status reads besides its own object and its deployment's part of the plan
    (automation/planning/conditions.py, `with_status`): the stored snapshot, kept by identity (parsed once per
    replan and never changed), the stacks' record and latest runs, and the gateways."""

    snapshot: dict
    applied: tuple[str, str]  # the record as stored (its fingerprints and details): compared as text
    runs: dict
    gateways: list

    def same(self, other: Stamp) -> bool:
        return (self.snapshot is other.snapshot and self.applied == other.applied and self.runs == other.runs
                and self.gateways == other.gateways)


@dataclass(frozen=True)
class Item:
    """One stored object of a list as last composed: its stored text, that text decoded (never mutated), the object
    with its status, that item's JSON (None when orjson cannot write it: the list is then encoded whole), and (a
    ModelDeployment's) its part of the plan the status was read from. Statuses and parts are compared as orjson
    writes them, so 1, 1.0 and true are three values, as in the answer; `source` is that part as given (the
    snapshot's index entry, never mutated): a part made of the same objects is not written again to be compared
    (writing every item's part was half of composing a list of 463 deployments after each write)."""

    text: str
    body: dict
    item: dict
    encoded: bytes | None
    status: bytes | None = None
    part: bytes | None = None
    source: Any = None


def same_objects(a: Any, b: Any) -> bool:
    """`a` is `b`, or both are tuples of the same objects (an index entry made again of the same lists)."""
    return a is b or (type(a) is tuple and type(b) is tuple and len(a) == len(b)
                      and all(x is y for x, y in zip(a, b)))


def exact(value: object) -> bytes | None:
    """`value` as orjson writes it, or None when it cannot (an integer beyond 64 bits): then never equal."""
    try:
        return orjson.dumps(value)
    except TypeError:
        return None


class Remembered(NamedTuple):
    items: dict[tuple[str, str], Item]
    stamp: Stamp | None  # None: composed at an older stamp (its statuses are composed again)
    version: int | None  # the store's resourceVersion its texts were read at (None: not known)


class Items:
    """The items each list had when last composed, by (kind, namespace) and then by (namespace, name). Each
    composition replaces its list's entry whole (compositions of one list may overlap on two threads).

    Only the latest stamp is kept (it holds the parsed snapshot, megabytes at fleet scale): a list composed at an
    older one is given no stamp, so its statuses are composed again, and no old snapshot stays alive for it."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        # (kind, namespace) -> (items, the stamp's generation, the resourceVersion they were read at)
        self._lists: OrderedDict[tuple[str, str | None], tuple[dict[tuple[str, str], Item], int, int | None]] = \
            OrderedDict()
        self._stamp: Stamp | None = None
        self._generation = 0  # moves on with each new stamp

    def of(self, kind: str, namespace: str | None) -> Remembered:
        """The list's items, the stamp they were composed at if it is the latest, and the resourceVersion they were
        read at: read together, as one composition left them."""
        with self._lock:
            found = self._lists.get((kind, namespace))
            if found is None:
                return Remembered({}, None, None)
            items, generation, version = found
            return Remembered(items, self._stamp if generation == self._generation else None, version)

    def remember(self, kind: str, namespace: str | None, items: dict[tuple[str, str], Item], stamp: Stamp,
                 version: int | None = None) -> None:
        with self._lock:
            if self._stamp is None or not (stamp is self._stamp or stamp.same(self._stamp)):
                self._stamp, self._generation = stamp, self._generation + 1
            self._lists[(kind, namespace)] = (items, self._generation, version)
            self._lists.move_to_end((kind, namespace))
            while len(self._lists) > MAX_REMEMBERED:
                self._lists.popitem(last=False)


def reuse(before: Item | None, text: str, compose: Callable[[dict], dict], unchanged: bool = False,
          part: Any = None) -> Item:
    """The item of the object stored as `text`: `before` when its text and status are the same, else composed
    (`compose(body)`: the object with its status) and encoded, decoding the text only if it changed.

    `unchanged`: nothing a status reads besides its object and its deployment's part of the plan (`part`) has
    changed since `before` was composed (`Stamp.same`): an object whose text and part are the same then keeps its
    item without its status being composed again."""
    body = before.body if before is not None and before.text == text else json.loads(text)
    same_source = before is not None and same_objects(before.source, part)
    exact_part = before.part if before is not None and same_source else exact(part)
    if before is not None and before.body is body:
        kept = before if same_source else replace(before, source=part)  # the next comparison is by identity
        if unchanged and exact_part is not None and before.part == exact_part:
            return kept
        item = compose(body)
        status = exact(item["status"])
        if status is not None and before.status == status:
            return kept if before.part == exact_part else \
                Item(text, body, before.item, before.encoded, status, exact_part, part)
        return Item(text, body, item, exact(item), status, exact_part, part)
    item = compose(body)
    return Item(text, body, item, exact(item), exact(item["status"]), exact_part, part)


class ReadCache:
    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._marker = -1
        self._lists: dict[tuple[str, str | None], CachedList] = {}
        self.items = Items()

    def peek(self, marker: int, kind: str, namespace: str | None) -> CachedList | None:
        """The list of `kind` in `namespace` (None: every namespace) kept at `marker` (Store.marker), if any."""
        with self._lock:
            return self._lists.get((kind, namespace)) if marker == self._marker else None

    def keep(self, marker: int, kind: str, namespace: str | None, items: list[dict], version: str,
             body: bytes) -> CachedList:
        """Keep a list composed in a read that began after `marker` was read; `body` is its plain answer's JSON."""
        made = CachedList(tuple(items), version, body)
        with self._lock:
            if marker < self._marker:
                return made  # an older marker than one already kept: served, not kept
            if marker > self._marker:
                self._marker, self._lists = marker, {}
            if len(self._lists) < MAX_LISTS:
                self._lists[(kind, namespace)] = made
        return made
