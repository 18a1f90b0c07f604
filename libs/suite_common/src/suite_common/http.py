"""Reading request bodies into wire models and writing models back, with 4xx for bad input."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Mapping
from dataclasses import dataclass
from typing import Generic, TypeVar

import anyio
from pydantic import BaseModel, TypeAdapter, ValidationError
from starlette.requests import Request
from starlette.responses import Response

from suite_common.echo import MAX_ECHO_CHARS, clip
from suite_common.errors import ApiError
from suite_common.lifecycle import Lifecycle
from suite_common.wire import ModelName

__all__ = [
    "ModelResponse",
    "WorkOutcome",
    "cancel_on_disconnect",
    "check_model_name",
    "describe_validation_error",
    "read_model",
    "run_for_client",
]

ModelT = TypeVar("ModelT", bound=BaseModel)
T = TypeVar("T")

MAX_BODY_BYTES = 8 * 1024 * 1024


def describe_validation_error(error: ValidationError) -> str:
    """``messages.0.role: Input should be 'system', 'user', ...`` — field paths, not values.

    A path may hold the caller's keys, and a few messages quote the input (a union's unknown tag): both clipped.
    """
    parts = []
    for item in error.errors(include_url=False, include_input=False)[:5]:
        location = ".".join(clip(part) for part in item["loc"]) or "body"
        parts.append(f"{location}: {clip(item['msg'], 3 * MAX_ECHO_CHARS)}")  # room for the expected values
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


_model_name = TypeAdapter[str](ModelName)


def check_model_name(name: str) -> None:
    """A model name that came another way than a request body (a URL, another front): the same 400."""
    try:
        _model_name.validate_python(name)
    except ValidationError as error:
        raise ApiError(400, "invalid_request", f"model: {error.errors()[0]['msg']}") from None


class ModelResponse(Response):
    """A JSON response straight from a wire model: camelCase, ``None`` fields left out."""

    media_type = "application/json"

    def __init__(self, model: BaseModel, status_code: int = 200, headers: Mapping[str, str] | None = None) -> None:
        super().__init__(model.model_dump_json(by_alias=True, exclude_none=True), status_code, headers)


@dataclass(frozen=True, slots=True)
class WorkOutcome(Generic[T]):
    """How work done for a client ended: ``finished`` with its ``result``, or stopped because the client went
    away (``client_gone``) or, otherwise, because the service's lifecycle interrupted it (shutting down)."""

    finished: bool
    result: T | None = None
    client_gone: bool = False


async def run_for_client(request: Request, work: Awaitable[T], *, lifecycle: Lifecycle | None = None) -> WorkOutcome[T]:
    """Await ``work`` in the calling task; cancel it when the client disconnects or ``lifecycle`` interrupts.

    For handlers that answer with one body: without this, a departed client's request would keep
    its upstream calls running to the end. ``work``'s own exception is raised as is, not wrapped
    in an exception group.

    One cancel scope and one watcher per request, on the hot path of every call: the interrupt
    cancels the scope directly (``Lifecycle.cancels``), and the disconnect watcher is a bare
    asyncio task (the services run on uvicorn, so on asyncio) rather than an anyio task group,
    which costs about four times as much CPU.
    """
    client_gone = False
    finished = False
    result: T | None = None
    with anyio.CancelScope() as scope:

        async def watch() -> None:
            nonlocal client_gone
            try:
                while (await request.receive())["type"] != "http.disconnect":
                    pass
            except Exception:  # cannot tell any more whether the client is there: let the work finish
                return
            client_gone = True
            scope.cancel()

        watcher = asyncio.get_running_loop().create_task(watch())
        try:
            if lifecycle is None:
                result = await work
            else:
                with lifecycle.cancels(scope):
                    result = await work
            finished = True
        finally:
            watcher.cancel()
    return WorkOutcome(finished, result, client_gone=client_gone and not finished)


async def cancel_on_disconnect(request: Request, work: Awaitable[T]) -> tuple[bool, T | None]:
    """``(True, result)`` of ``work``, or ``(False, None)`` once the client has gone (``work`` cancelled).

    ``run_for_client`` without a lifecycle; ``work``'s own exception is raised as is.
    """
    outcome = await run_for_client(request, work)
    return outcome.finished, outcome.result
