"""A list's query parameters and its answer, as the Kubernetes API server treats them: `labelSelector`,
`fieldSelector`, `limit` and `continue`, and the Table form kubectl asks for.

Paging is by key: items come in (namespace, name) order, as the API server's come from etcd, and `continue` is an
opaque token holding the last key given and the list's resourceVersion at its first page, so a paged list never
repeats an object nor skips one that was there throughout. Every page reports that first resourceVersion (the
API server's pages all report their snapshot's): a client that watches from it is sent whatever changed since.
"""

from __future__ import annotations

import base64
import json
from dataclasses import dataclass

from fastapi import Request
from fastapi.responses import JSONResponse, Response

from automation.portal import tables
from automation.portal.read_cache import CachedList
from automation.portal.resources import GROUP, VERSION
from automation.portal.selectors import Match, matcher
from automation.portal.service import ApiError

API_VERSION = f"{GROUP}/{VERSION}"


@dataclass(frozen=True)
class ListQuery:
    matches: Match
    selected: bool  # a selector was given (then no remainingItemCount, as the API server)
    limit: int  # 0: all
    after: tuple[str, str] | None  # the last (namespace, name) of the previous page
    version: str | None  # the resourceVersion of the first page
    scope: str  # the list the token belongs to (a token is good for its own list only)


def bad_token() -> ApiError:
    return ApiError(400, "BadRequest", "continue key is not valid: it was not given by this list")


def encode(scope: str, after: tuple[str, str], version: str) -> str:
    text = json.dumps({"s": scope, "k": list(after), "rv": version}, separators=(",", ":"))
    return base64.urlsafe_b64encode(text.encode()).decode().rstrip("=")


def decode(token: str, scope: str) -> tuple[tuple[str, str], str]:
    try:
        data = json.loads(base64.urlsafe_b64decode(token + "=" * (-len(token) % 4)))
        key, version = data["k"], data["rv"]
        ok = data["s"] == scope and isinstance(version, str) and len(key) == 2 and all(isinstance(k, str) for k in key)
    except (ValueError, TypeError, KeyError, AttributeError):
        raise bad_token() from None
    if not ok:
        raise bad_token()
    return (key[0], key[1]), version


def list_query(request: Request) -> ListQuery:
    """The query of a list request, checked before anything is read (a bad one is a 400 `Status`)."""
    params = request.query_params
    scope = request.url.path
    labels, fields = params.get("labelSelector"), params.get("fieldSelector")
    raw = params.get("limit") or "0"
    if not raw.isdigit():
        raise ApiError(400, "BadRequest", f"limit: {raw[:40]!r} is not a non-negative integer")
    token = params.get("continue")
    after, version = decode(token, scope) if token else (None, None)
    return ListQuery(matcher(labels, fields), bool(labels or fields), int(raw), after, version, scope)


def key(obj: dict) -> tuple[str, str]:
    meta = obj.get("metadata") or {}
    return meta.get("namespace") or "", meta.get("name") or ""


def plain(query: ListQuery) -> bool:
    """A list asked for as it is stored: every item, one page, JSON (what the read cache keeps as bytes)."""
    return not query.selected and not query.limit and query.after is None and query.version is None


def list_document(kind: str, items: list[dict] | tuple[dict, ...], version: str) -> dict:
    """The plain `<Kind>List` of items already in (namespace, name) order."""
    return {"apiVersion": API_VERSION, "kind": f"{kind}List", "metadata": {"resourceVersion": version},
            "items": list(items)}


def kept_answer(request: Request, query: ListQuery) -> bool:
    """Whether the read cache's bytes answer the request: the plain list, not a selection, a page or a Table."""
    return plain(query) and not tables.table_version(request.headers.get("accept", ""))


def wants_gzip(request: Request, query: ListQuery, kept: CachedList) -> bool:
    """Whether the answer is the kept list sent gzipped: large, asked for plain, by a client that accepts gzip."""
    return kept.compressible and kept_answer(request, query) and \
        accepts_gzip(request.headers.get("accept-encoding", ""))


def answer_list(request: Request, query: ListQuery, kind: str, items: list[dict] | tuple[dict, ...],
                version: str, kept: CachedList | None = None, gzipped: bytes | None = None) -> Response:
    """One page of the selected items, as a `<Kind>List` or a Table. `kept`: the read cache's list, whose bytes
    are the answer when the query asks for the plain list; `gzipped`, the same gzipped (`wants_gzip`: the caller
    makes it, off the event loop), to a client that accepts gzip (kubectl and client-go do)."""
    if kept is not None and kept_answer(request, query):
        if gzipped is not None:
            return Response(gzipped, media_type="application/json",
                            headers={"Content-Encoding": "gzip", "Vary": "Accept-Encoding"})
        return Response(kept.body, media_type="application/json",
                        headers={"Vary": "Accept-Encoding"} if kept.compressible else None)
    as_table = tables.table_version(request.headers.get("accept", ""))
    version = query.version or version
    chosen = sorted((o for o in items if query.matches(o)), key=key)
    if query.after is not None:
        chosen = [o for o in chosen if key(o) > query.after]
    metadata: dict = {"resourceVersion": version}
    if query.limit and len(chosen) > query.limit:
        rest = len(chosen) - query.limit
        chosen = chosen[:query.limit]
        metadata["continue"] = encode(query.scope, key(chosen[-1]), version)
        if not query.selected:
            metadata["remainingItemCount"] = rest
    if as_table:
        include = tables.include_object(request.query_params.get("includeObject"))
        return JSONResponse(tables.table(kind, chosen, as_table, include, metadata))
    return JSONResponse({"apiVersion": API_VERSION, "kind": f"{kind}List", "metadata": metadata, "items": chosen})


def accepts_gzip(header: str) -> bool:
    """Whether an Accept-Encoding header accepts gzip (`gzip`, `*`, or either with a q-value above 0)."""
    for part in header.split(","):
        coding, _, params = part.strip().partition(";")
        if coding.strip().lower() in ("gzip", "*"):
            q = params.strip().lower()
            try:
                return not q.startswith("q=") or float(q[2:]) > 0
            except ValueError:
                return False
    return False


def answer_object(request: Request, obj: dict) -> JSONResponse:
    """One object, or the Table of one row when kubectl asks for it (`kubectl get md NAME`)."""
    as_table = tables.table_version(request.headers.get("accept", ""))
    if as_table:
        include = tables.include_object(request.query_params.get("includeObject"))
        return JSONResponse(tables.table(obj["kind"], [obj], as_table, include))
    return JSONResponse(obj)
