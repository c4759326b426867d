"""Every error the portal answers is a Kubernetes `Status`, as the API server's are (kubectl reads them)."""

from __future__ import annotations

import logging

from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse, Response
from sqlalchemy.exc import DBAPIError
from starlette.exceptions import HTTPException as StarletteHTTPException

from automation.portal.guard import status_body
from automation.portal.service import ApiError
from automation.portal.store import StoreBusy

log = logging.getLogger("modelplane.portal")
REASONS = {404: "NotFound", 405: "MethodNotAllowed", 413: "RequestEntityTooLarge", 400: "BadRequest"}
MESSAGES = {404: "the server could not find the requested resource", 405: "the method is not allowed on this resource"}


def status_response(code: int, reason: str, message: str, headers: dict | None = None) -> Response:
    return Response(status_body(code, reason, message), status_code=code, media_type="application/json",
                    headers=headers)


async def api_error(_: Request, exc: Exception) -> Response:
    assert isinstance(exc, ApiError)
    return JSONResponse(exc.status(), status_code=exc.code, headers=exc.headers)


async def http_error(_: Request, exc: Exception) -> Response:
    assert isinstance(exc, StarletteHTTPException)
    message = MESSAGES.get(exc.status_code, str(exc.detail))
    return status_response(exc.status_code, REASONS.get(exc.status_code, "Failure"), message, dict(exc.headers or {}))


async def invalid_request(_: Request, exc: Exception) -> Response:
    assert isinstance(exc, RequestValidationError)
    causes = [{"field": ".".join(str(p) for p in e["loc"]), "message": e["msg"]} for e in exc.errors()[:20]]
    return JSONResponse(ApiError(422, "Invalid", "the request is malformed", causes).status(), status_code=422)


async def busy(_: Request, exc: Exception) -> Response:
    return status_response(503, "ServiceUnavailable", f"the portal is busy writing ({exc}); retry", {"Retry-After": "1"})


async def database_down(_: Request, exc: Exception) -> Response:
    log.error("database error: %s", type(getattr(exc, "orig", exc)).__name__)
    return status_response(503, "ServiceUnavailable", "the database does not answer; retry", {"Retry-After": "5"})


async def internal(_: Request, exc: Exception) -> Response:
    log.exception("internal error")
    return status_response(500, "InternalError", f"internal error ({type(exc).__name__}); it is logged")


def install(app: FastAPI) -> None:
    for error, handler in ((ApiError, api_error), (StarletteHTTPException, http_error),
                           (RequestValidationError, invalid_request), (StoreBusy, busy), (DBAPIError, database_down),
                           (Exception, internal)):
        app.add_exception_handler(error, handler)
