"""What became of a stack's run: the orchestrator's outcomes and progress events, and the portal's runs table."""

from __future__ import annotations

from enum import StrEnum


class RunStatus(StrEnum):
    """Members are their names' strings (a member equals, hashes, formats and serializes as its value, in JSON and
    in a database row), so a status read back as text is the same status.

    An orchestrated stack ends succeeded, failed, cancelled or skipped; a portal run is queued, then running, then
    succeeded or failed."""

    queued = "queued"
    running = "running"
    succeeded = "succeeded"
    failed = "failed"
    cancelled = "cancelled"
    skipped = "skipped"
