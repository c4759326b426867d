"""The write queue: a request that writes waits for its turn on the event loop, first come first served, and is shed
only past the queue's limits, with 429 Too Many Requests and Retry-After (as Kubernetes' API Priority and Fairness
sheds), never 503.

A waiting write holds no worker thread, so the threads stay free for reads (reads never wait on writes). One
request's write runs at a time per process: writes are serialized fleet-wide by the store's lock anyway, and
handing the turn over here, in arrival order, is what makes the order writes commit in the order they came in.
"""

from __future__ import annotations

import asyncio
import math
from collections import deque
from contextlib import asynccontextmanager
from typing import AsyncIterator

from automation.portal.service import ApiError

WRITE_QUEUE_WAIT = 30.0  # seconds a write may wait for its turn (as long as a client's request timeout allows)
MAX_QUEUED_WRITES = 200  # writes waiting at once: each holds its body (up to 1 MiB) in memory while it waits


class WriteQueue:
    def __init__(self, wait: float = WRITE_QUEUE_WAIT, limit: int = MAX_QUEUED_WRITES):
        self.wait, self.limit = wait, limit
        self._waiting: deque[asyncio.Future[None]] = deque()  # every ticket here is not done yet
        self._running = False
        self._took = 0.05  # a write's recent duration in seconds (a moving average): what Retry-After says

    @property
    def waiting(self) -> int:
        return len(self._waiting)

    @property
    def running(self) -> bool:
        return self._running

    @asynccontextmanager
    async def turn(self) -> AsyncIterator[None]:
        """Wait for this write's turn (ApiError 429 past the limits); the next one's turn comes when this one ends."""
        loop = asyncio.get_running_loop()
        if self._running or self._waiting:
            if len(self._waiting) >= self.limit:
                raise self._refusal(f"{self.limit} writes are queued already")
            ticket: asyncio.Future[None] = loop.create_future()
            self._waiting.append(ticket)
            try:
                await asyncio.wait({ticket}, timeout=self.wait)  # on timeout, the ticket is left as it is
            except BaseException:  # cancelled: the turn, if it was handed over meanwhile, goes to the next
                self._leave(ticket)
                raise
            if not ticket.done():
                self._leave(ticket)
                raise self._refusal(f"it waited {self.wait:g} s for its turn")
        else:
            self._running = True
        started = loop.time()
        try:
            yield
        finally:
            self._took = 0.8 * self._took + 0.2 * (loop.time() - started)
            self._hand_over()

    def _leave(self, ticket: asyncio.Future[None]) -> None:
        if ticket.done():  # the turn was ours already
            self._hand_over()
        else:
            self._waiting.remove(ticket)
            ticket.cancel()

    def _hand_over(self) -> None:
        """The turn passes straight to the oldest waiting write (no newcomer can take it first)."""
        if self._waiting:
            self._waiting.popleft().set_result(None)
        else:
            self._running = False

    def _refusal(self, why: str) -> ApiError:
        seconds = max(1, min(60, math.ceil((len(self._waiting) + 1) * self._took)))
        return ApiError(429, "TooManyRequests", f"too many writes: {why}; retry after {seconds} s",
                        headers={"Retry-After": str(seconds)})
