"""What every request passes before a handler sees it: security headers, same-origin writes, authentication
before the body is read, and a cap on every body.

A plain ASGI middleware, because FastAPI reads a form's body while it resolves a handler's parameters, that
is before any check in the handler could run: here an unauthenticated request never gets its body read, and
an authenticated one has it read up to the cap, then replayed to the app. Larger bodies are answered 413
from their Content-Length, or as soon as the stream passes the cap.
"""

from __future__ import annotations

import json
import math
import time
from collections import deque
from dataclasses import dataclass
from typing import Awaitable, Callable
from urllib.parse import urlsplit

from starlette.concurrency import run_in_threadpool
from starlette.datastructures import Headers
from starlette.requests import cookie_parser
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from automation.portal.auth import Principal

MAX_BODY = 1024 * 1024  # every body the API and the page accept (the manifests are far smaller)
MAX_SIGNIN_BODY = 8 * 1024  # the one form read without a token
UNSAFE = {"POST", "PUT", "PATCH", "DELETE"}
SIGNIN_PATH = "/ui/signin"
SECURITY_HEADERS = [
    (b"content-security-policy", b"default-src 'none'; style-src 'self'; img-src 'self'; form-action 'self'; "
                                 b"frame-ancestors 'none'; base-uri 'none'"),
    (b"x-content-type-options", b"nosniff"),
    (b"referrer-policy", b"same-origin"),
    (b"x-frame-options", b"DENY"),
    (b"cache-control", b"no-store"),
]

# (headers, cookies) -> who is calling: a Caller, or None
Authenticate = Callable[[Headers, dict[str, str]], "Caller | None"]


@dataclass(frozen=True)
class Caller:
    principal: Principal
    how: str  # "bearer" (a script: no ambient credential) or "session" (a browser's cookie)
    csrf: str | None = None  # the session's form token


class SignInLimiter:
    """At most `attempts` sign-ins per client address in any `window` seconds (a token cannot be guessed)."""

    def __init__(self, attempts: int = 10, window: float = 60.0, clock: Callable[[], float] = time.monotonic):
        self.attempts, self.window, self.clock = attempts, window, clock
        self._seen: dict[str, deque[float]] = {}

    def retry_after(self, client: str) -> int:
        """0 when this attempt may go ahead (and is counted), else the seconds to wait."""
        now = self.clock()
        seen = self._seen.setdefault(client, deque())
        while seen and now - seen[0] >= self.window:
            seen.popleft()
        if len(seen) >= self.attempts:
            return max(1, math.ceil(self.window - (now - seen[0])))
        seen.append(now)
        if len(self._seen) > 10000:  # forget quiet clients: the table stays small under a scan
            for key in [k for k, v in self._seen.items() if not v]:
                del self._seen[key]
        return 0


def status_body(code: int, reason: str, message: str) -> bytes:
    return json.dumps({"kind": "Status", "apiVersion": "v1", "status": "Failure", "message": message,
                       "reason": reason, "code": code}, separators=(",", ":")).encode()


def own_origin(scope: Scope, headers: Headers) -> str:
    scheme = scope.get("scheme", "http")
    return f"{scheme}://{headers.get('host', '')}".lower()


def same_origin(scope: Scope, headers: Headers) -> bool | None:
    """True or False from Origin (else Referer); None when the request carries neither."""
    origin = headers.get("origin")
    if origin is None and headers.get("referer"):
        parts = urlsplit(headers["referer"])
        origin = f"{parts.scheme}://{parts.netloc}"
    if origin is None:
        return None
    return origin.lower() == own_origin(scope, headers)


class Guard:
    def __init__(self, app: ASGIApp, authenticate: Authenticate, limiter: SignInLimiter | None = None,
                 max_body: int = MAX_BODY) -> None:
        self.app, self.authenticate, self.max_body = app, authenticate, max_body
        self.limiter = limiter or SignInLimiter()

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            return await self.app(scope, receive, send)

        async def send_with_headers(message: Message) -> None:
            if message["type"] == "http.response.start":
                present = {name.lower() for name, _ in message.get("headers", [])}
                message = {**message, "headers": [*message.get("headers", []),
                                                  *[(k, v) for k, v in SECURITY_HEADERS if k not in present]]}
            await send(message)

        if scope["method"] not in UNSAFE:
            return await self.app(scope, receive, send_with_headers)
        headers = Headers(scope=scope)
        refused = await self._check(scope, headers)
        if refused is not None:
            return await _respond(send_with_headers, *refused)
        limit = MAX_SIGNIN_BODY if scope["path"] == SIGNIN_PATH else self.max_body
        declared = headers.get("content-length")
        if declared is not None and (not declared.isdigit() or int(declared) > limit):
            return await _respond(send_with_headers, 413, "RequestEntityTooLarge",
                                  f"the body is larger than {limit} bytes")
        body = bytearray()
        while True:
            message = await receive()
            if message["type"] == "http.disconnect":
                return
            body += message.get("body", b"")
            if len(body) > limit:  # stop reading: the rest of the stream is never buffered
                return await _respond(send_with_headers, 413, "RequestEntityTooLarge",
                                      f"the body is larger than {limit} bytes")
            if not message.get("more_body"):
                break
        replayed = False

        async def replay() -> Message:
            nonlocal replayed
            if not replayed:
                replayed = True
                return {"type": "http.request", "body": bytes(body), "more_body": False}
            return await receive()

        await self.app(scope, replay, send_with_headers)

    async def _check(self, scope: Scope, headers: Headers) -> tuple[int, str, str, dict[str, str]] | None:
        """Why an unsafe request is refused before its body is read, or None."""
        if same_origin(scope, headers) is False:
            return 403, "Forbidden", "cross-origin request refused (Origin or Referer is not this portal)", {}
        if scope["path"] == SIGNIN_PATH:
            client = (scope.get("client") or ("unknown", 0))[0]
            wait = self.limiter.retry_after(client)
            if wait:
                return 429, "TooManyRequests", "too many sign-in attempts; try again later", {"retry-after": str(wait)}
            return None
        cookies = cookie_parser(headers.get("cookie", ""))
        # the front proxy (front_proxy.py), in front of this guard, may have said who it is already
        who = scope.get("state", {}).get("caller") or await run_in_threadpool(self.authenticate, headers, cookies)
        if who is None:
            return 401, "Unauthorized", "a valid bearer token is required", {}
        if who.how == "session" and same_origin(scope, headers) is None:  # a browser says where a form came from
            return 403, "Forbidden", "a signed-in write must say its origin (Origin or Referer)", {}
        scope.setdefault("state", {})["caller"] = who
        return None


async def _respond(send: Callable[[dict], Awaitable[None]], code: int, reason: str, message: str,
                   extra: dict[str, str] | None = None) -> None:
    body = status_body(code, reason, message)
    headers = [(b"content-type", b"application/json"), (b"content-length", str(len(body)).encode()),
               (b"connection", b"close"), *[(k.encode(), v.encode()) for k, v in (extra or {}).items()]]
    await send({"type": "http.response.start", "status": code, "headers": headers})
    await send({"type": "http.response.body", "body": body})
