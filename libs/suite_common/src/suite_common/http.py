"""Reading request bodies into wire models and writing models back, with 4xx for bad input."""

from __future__ import annotations

from collections.abc import Awaitable
from typing import TypeVar

import anyio
from pydantic import BaseModel, ValidationError
from starlette.requests import Request
from starlette.responses import Response

from suite_common.errors import ApiError

__all__ = ["ModelResponse", "cancel_on_disconnect", "describe_validation_error", "read_model"]

ModelT = TypeVar("ModelT", bound=BaseModel)
T = TypeVar("T")

MAX_BODY_BYTES = 8 * 1024 * 1024


def describe_validation_error(error: ValidationError) -> str:
    """``messages.0.role: Input should be 'system', 'user', ...`` — field paths, not values."""
    parts = []
    for item in error.errors(include_url=False, include_input=False)[:5]:
        location = ".".join(str(part) for part in item["loc"]) or "body"
        parts.append(f"{location}: {item['msg']}")
    return "; ".join(parts)


async def read_model(request: Request, model: type[ModelT], *, max_bytes: int = MAX_BODY_BYTES) -> ModelT:
    """Parse and validate a JSON body; every way it can be wrong is a 4xx naming the problem."""
    content_type = request.headers.get("content-type", "application/json")
    if "json" not in content_type:
        raise ApiError(415, "unsupported_media_type", "The body must be JSON (Content-Type: application/json).")
    declared = request.headers.get("content-length")
    if declared is not None and declared.isdigit() and int(declared) > max_bytes:
        raise ApiError(413, "payload_too_large", f"The body is larger than {max_bytes} bytes.")
    body = bytearray()
    async for chunk in request.stream():
        body += chunk
        if len(body) > max_bytes:
            raise ApiError(413, "payload_too_large", f"The body is larger than {max_bytes} bytes.")
    if not body:
        raise ApiError(400, "invalid_request", "The request body is empty; a JSON object is expected.")
    try:
        return model.model_validate_json(bytes(body))
    except ValidationError as error:
        if any(item["type"] == "json_invalid" for item in error.errors()):
            raise ApiError(400, "invalid_json", "The body is not valid JSON.") from None
        raise ApiError(400, "invalid_request", describe_validation_error(error)) from None


class ModelResponse(Response):
    """A JSON response straight from a wire model: camelCase, ``None`` fields left out."""

    media_type = "application/json"

    def __init__(self, model: BaseModel, status_code: int = 200) -> None:
        super().__init__(model.model_dump_json(by_alias=True, exclude_none=True), status_code=status_code)


async def cancel_on_disconnect(request: Request, work: Awaitable[T]) -> tuple[bool, T | None]:
    """``(True, result)`` of ``work``, or ``(False, None)`` once the client has gone (``work`` cancelled).

    For handlers that answer with one body: without this, a departed client's request would
    keep its upstream calls running to the end. ``work``'s own exception is raised as is,
    not wrapped in an exception group.
    """
    outcome: list[T] = []
    failure: Exception | None = None
    async with anyio.create_task_group() as tg:

        async def watch() -> None:
            while (await request.receive())["type"] != "http.disconnect":
                pass
            tg.cancel_scope.cancel()

        tg.start_soon(watch)
        try:
            outcome.append(await work)
        except Exception as error:
            failure = error
        tg.cancel_scope.cancel()
    if failure is not None:
        raise failure
    return (True, outcome[0]) if outcome else (False, None)
