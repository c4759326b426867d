"""What the portal's API and its page share: who a request is (`sessions`), the objects with their status
(`reads`), and the one way an object is written or deleted (`writes`: validated, stored, quota-checked, placed or
replanned, in one transaction).

One `Portal` per app (`create_app` builds it; `deps.portal` hands it to each route). The database work of its parts
runs on worker threads, never on the event loop.
"""

from __future__ import annotations

from automation.portal.auth import Tokens, TokensFile
from automation.portal.reads import Reads
from automation.portal.service import PLURALS, ApiError, Compute
from automation.portal.sessions import Sessions
from automation.portal.store import Store
from automation.portal.writes import WriteQueue
from automation.portal.writing import Writer, Writes


def kind_of(plural: str, namespaced: bool) -> str:
    entry = PLURALS.get(plural)
    if entry is None or entry[1] != namespaced:
        raise ApiError(404, "NotFound", f"the server could not find the requested resource ({plural[:100]})")
    return entry[0]


class Portal:
    def __init__(self, store: Store, tokens: Tokens | TokensFile, apply: bool, replan_worker: Compute | None = None,
                 writer: Writer | None = None) -> None:
        self.store, self.tokens, self.apply, self.writer = store, tokens, apply, writer
        self.sessions = Sessions(store, tokens)
        self.reads = Reads(store)
        self.writes = Writes(store, tokens, apply, self.reads, replan_worker, writer)
        self.replanner = self.writes.replanner  # None in a serving process whose writes run in a writer
        self.queue = WriteQueue()  # requests' writes take turns here, in arrival order (writes.py)
