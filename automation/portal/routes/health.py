"""Liveness, readiness and the page's stylesheet: no token needed."""

from __future__ import annotations

from pathlib import Path

from fastapi import APIRouter
from fastapi.responses import Response

from automation.portal.deps import Objects
from automation.portal.service import ApiError

router = APIRouter(include_in_schema=False)


@router.get("/healthz")
def healthz():
    """The process answers (liveness): no database, no token."""
    return {"status": "ok"}


@router.get("/readyz")
def readyz(portal: Objects):
    """The portal can serve (readiness): its database answers."""
    try:
        with portal.store.read() as conn:
            portal.store.get_state(conn, "plan")
    except Exception as exc:  # any database failure: not ready, said as a Kubernetes Status
        raise ApiError(503, "ServiceUnavailable", f"the database does not answer: {type(exc).__name__}") from None
    return {"status": "ok"}


@router.get("/portal.css")
def stylesheet():
    return Response((Path(__file__).parent.parent / "templates" / "portal.css").read_text(), media_type="text/css")
