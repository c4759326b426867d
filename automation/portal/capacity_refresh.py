"""The portal's live capacity (`serve --capacity live`): every cluster read again every `every` seconds, in the
serving process's background, and handed to the writes (`Writes.capacity`), which replan the fleet when what it
places on changed. A read that fails keeps the clusters' declared capacity and says why, as `plan` does."""

from __future__ import annotations

import logging
import threading
from typing import Callable

from automation.portal.service import load_fleet
from automation.portal.store import Store
from fleet.capacity import LiveCapacity
from fleet.validate import Fleet

log = logging.getLogger("modelplane.portal")

EVERY = 60.0  # seconds between reads (`serve --capacity-every`)


class CapacityRefresher:
    def __init__(self, store: Store, read: Callable[[Fleet], LiveCapacity], hand: Callable[[str], bool],
                 every: float = EVERY):
        self._store, self._read, self._hand, self._every = store, read, hand, every
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._loop, daemon=True, name="portal-capacity")

    def start(self) -> None:
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(timeout=5)

    def refresh(self) -> bool:
        """Read every stored cluster once and hand the capacity over; whether it changed what plans place on."""
        with self._store.read() as conn:
            platform = [b for kind in ("InferenceCluster", "InferenceClass") for b in self._store.list(conn, kind)]
        fleet = load_fleet(platform)
        return self._hand(self._read(fleet).to_json())

    def _loop(self) -> None:
        while not self._stop.is_set():
            try:
                self.refresh()
            except Exception:  # a bug of ours or a database outage: logged, and read again at the next turn
                log.exception("reading the clusters' live capacity failed; trying again in %.0f s", self._every)
            self._stop.wait(self._every)
