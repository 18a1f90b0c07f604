"""One error shape for every service: ``{"error": {"code", "message"}}`` with the right status.

Handlers here turn every failure into that shape, so a caller never sees a stack trace,
an HTML page or a secret, whatever went wrong.
"""

from __future__ import annotations

from collections.abc import Mapping

from starlette.applications import Starlette
from starlette.exceptions import HTTPException
from starlette.requests import ClientDisconnect, Request
from starlette.responses import JSONResponse, Response

from suite_common.logging import get_logger

__all__ = ["ApiError", "error_response", "install_error_handlers"]

_log = get_logger("suite_common.errors")

_CODE_BY_STATUS = {
    400: "invalid_request",
    401: "unauthorized",
    403: "forbidden",
    404: "not_found",
    405: "method_not_allowed",
    413: "payload_too_large",
    415: "unsupported_media_type",
    429: "rate_limited",
    502: "bad_gateway",
    503: "unavailable",
    504: "upstream_timeout",
}


class ApiError(Exception):
    """An error the caller should see, with the HTTP status and a stable machine code."""

    def __init__(
        self,
        status: int,
        code: str,
        message: str,
        *,
        headers: Mapping[str, str] | None = None,
        retryable: bool = False,
    ) -> None:
        super().__init__(message)
        self.status = status
        self.code = code
        self.message = message
        self.headers = dict(headers or {})
        self.retryable = retryable

    def body(self) -> dict[str, dict[str, str]]:
        return {"error": {"code": self.code, "message": self.message}}


def error_response(status: int, code: str, message: str, headers: Mapping[str, str] | None = None) -> JSONResponse:
    return JSONResponse({"error": {"code": code, "message": message}}, status_code=status, headers=headers)


async def _api_error(_: Request, exc: Exception) -> Response:
    assert isinstance(exc, ApiError)
    return error_response(exc.status, exc.code, exc.message, exc.headers)


async def _http_error(_: Request, exc: Exception) -> Response:
    assert isinstance(exc, HTTPException)
    code = _CODE_BY_STATUS.get(exc.status_code, "http_error")
    return error_response(exc.status_code, code, str(exc.detail), exc.headers)


async def _client_gone(request: Request, _: Exception) -> Response:
    # The client left (or was cut off, see suite_common.slow_clients) while its body was being read:
    # nobody reads an answer, and it is not the service's failure.
    _log.info("client_disconnected", path=request.url.path)
    return Response(status_code=499)


async def _unexpected_error(request: Request, exc: Exception) -> Response:
    # The details go to the log, never to the caller.
    _log.error("unhandled_error", path=request.url.path, exc_info=exc)
    return error_response(500, "internal_error", "The service failed to handle the request.")


def install_error_handlers(app: Starlette) -> None:
    app.add_exception_handler(ApiError, _api_error)
    app.add_exception_handler(HTTPException, _http_error)
    app.add_exception_handler(ClientDisconnect, _client_gone)
    app.add_exception_handler(Exception, _unexpected_error)
