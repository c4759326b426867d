"""Liveness, readiness, the page's stylesheet and where the API is described: no token needed."""

from __future__ import annotations

from pathlib import Path

from fastapi import APIRouter
from fastapi.responses import Response

from automation.portal.auth import TokensFile
from automation.portal.deps import Objects
from automation.portal.service import ApiError
from automation.portal.state import REVISION

router = APIRouter(include_in_schema=False)


@router.get("/healthz", response_model=None)
async def healthz() -> dict:
    """The process answers (liveness): no database, no token, no worker thread (on the event loop: threads held by
    slow work, a cluster's authorization that does not answer, never make it look dead)."""
    return {"status": "ok"}


@router.get("/readyz", response_model=None)
def readyz(portal: Objects) -> dict:
    """The portal can serve (readiness): its tokens file loads (else every token is refused) and its database
    answers."""
    if isinstance(portal.tokens, TokensFile):
        portal.tokens.current()  # the file as it is now (looked at once a second at most)
        if portal.tokens.last_error:
            raise ApiError(503, "ServiceUnavailable", f"every token is refused: {portal.tokens.last_error}")
    try:
        with portal.store.read() as conn:
            REVISION.get(conn)  # one row: the plan is megabytes at fleet scale
    except Exception as exc:  # any database failure: not ready, said as a Kubernetes Status
        raise ApiError(503, "ServiceUnavailable", f"the database does not answer: {type(exc).__name__}") from None
    return {"status": "ok"}


@router.get("/portal.css")
def stylesheet() -> Response:
    return Response((Path(__file__).parent.parent / "templates" / "portal.css").read_text(), media_type="text/css")


@router.get("/docs")
@router.get("/redoc")
def no_interactive_docs() -> Response:
    """FastAPI's Swagger UI and ReDoc load their scripts from a CDN: not served (the portal's pages run no
    script, and its Content-Security-Policy allows none). The API is described by /openapi.json."""
    raise ApiError(404, "NotFound", "no interactive API docs here (they would load third-party scripts); "
                                    "the OpenAPI document is /openapi.json")
