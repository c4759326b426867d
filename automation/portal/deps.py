"""The routes' dependencies: the app's `Portal`, and the one authenticated principal every API route asks for.

A route declares `who: Who` and FastAPI resolves it before the route runs (on a worker thread: a session cookie is
a database read); an unauthenticated request never reaches the route's body.
"""

from __future__ import annotations

from typing import Annotated, Any, Callable, TypeVar

from fastapi import Depends, Request
from starlette.concurrency import run_in_threadpool

from automation.portal.auth import Principal
from automation.portal.guard import Caller
from automation.portal.portal import Portal
from automation.portal.service import ApiError


T = TypeVar("T")


def portal(request: Request) -> Portal:
    return request.app.state.portal


async def _portal(request: Request) -> Portal:
    """`portal` as a dependency, on the event loop: FastAPI runs a plain function dependency on a worker thread, and
    that hop for every request was 6% of a busy portal's CPU."""
    return portal(request)


async def caller(request: Request) -> Caller:
    """Who sent the request: unsafe methods were authenticated by the guard already, the others are here. A
    bearer token is looked up in memory, on the event loop; a session cookie is a database read, on a thread."""
    who = request.scope.get("state", {}).get("caller")
    if who is None:
        authenticate, headers = portal(request).sessions.authenticate, request.headers
        if headers.get("authorization", "").lower().startswith("bearer "):
            who = authenticate(headers, {})
        else:
            who = await run_in_threadpool(authenticate, headers, request.cookies)
    if who is None:
        raise ApiError(401, "Unauthorized", "a valid bearer token is required")
    return who


async def principal(who: Annotated[Caller, Depends(caller)]) -> Principal:
    return who.principal


Who = Annotated[Principal, Depends(principal)]
SignedIn = Annotated[Caller, Depends(caller)]
Objects = Annotated[Portal, Depends(_portal)]


def may_write(who: Principal, namespace: str | None, plural: str) -> None:
    """403 unless `who` may write there: a team in its namespaces, an admin anywhere (the fleet kinds are admins')."""
    if who.can_write(namespace):
        return
    if namespace is None:
        raise ApiError(403, "Forbidden", f"only admins change {plural}")
    raise ApiError(403, "Forbidden", f"{who.name} may not write in namespace {namespace[:80]!r}")


async def queued(portal: Portal, write: Callable[..., T], *args: Any) -> T:
    """Run a write on a worker thread once it is its turn in the write queue (429 past its limits): the wait holds
    no thread, so reads keep theirs."""
    async with portal.queue.turn():
        return await run_in_threadpool(write, *args)
