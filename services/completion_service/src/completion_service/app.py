"""completion-service's HTTP API: ``POST /api/v1/completions`` (JSON or SSE), ``GET /api/v1/models`` and
``GET /api/v1/models/{model}``."""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass

import httpx
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import Route

from completion_service.providers.demo import DemoProvider
from completion_service.providers.openai import OpenAIProvider
from completion_service.routing import ModelRouter
from completion_service.settings import CompletionSettings
from suite_common.deadline import time_budget
from suite_common.errors import ApiError, install_error_handlers
from suite_common.health import health_routes
from suite_common.http import ModelResponse, cancel_on_disconnect, read_model
from suite_common.logging import get_logger
from suite_common.sse import Emit, EventStreamResponse, encode_event
from suite_common.wire import DEADLINE_HEADER, CompletionEvent, CompletionRequest, StreamError, dump

__all__ = ["create_app"]


_log = get_logger("completion_service")


@dataclass(frozen=True)
class _Services:
    settings: CompletionSettings
    router: ModelRouter


def _services(request: Request) -> _Services:
    services: _Services = request.state.services
    return services


def _budget(request: Request, settings: CompletionSettings) -> float:
    """Seconds the upstream call may take: the setting, shortened by the caller's ``X-Deadline-Ms``."""
    budget = time_budget(request.headers, settings.request_timeout_seconds)
    if budget <= 0:
        raise ApiError(504, "upstream_timeout", f"The caller's deadline ({DEADLINE_HEADER}) has already passed.")
    return budget


def _encode(event: CompletionEvent) -> bytes:
    return encode_event(dump(event), event=event.type)


async def _close(events: AsyncIterator[CompletionEvent]) -> None:
    aclose = getattr(events, "aclose", None)
    if aclose is not None:
        await aclose()


async def _first_event(events: AsyncIterator[CompletionEvent]) -> CompletionEvent:
    try:
        return await anext(events)
    except StopAsyncIteration:
        raise ApiError(502, "bad_upstream_response", "The provider ended the stream without an answer.") from None


async def completions(request: Request) -> Response | EventStreamResponse:
    services = _services(request)
    body = await read_model(request, CompletionRequest)
    route = services.router.route(body.model)
    timeout = _budget(request, services.settings)
    if not body.stream:
        answered, response = await cancel_on_disconnect(
            request, route.provider.complete(body, route.upstream_model, timeout)
        )
        if not answered or response is None:
            return Response(status_code=499)  # the client has gone; nobody reads this
        return ModelResponse(response)

    events = route.provider.stream(body, route.upstream_model, timeout)
    # Until the first event exists, a failure is still an ordinary HTTP error with its status.
    try:
        started, first = await cancel_on_disconnect(request, _first_event(events))
    except BaseException:
        await _close(events)
        raise
    if not started or first is None:
        await _close(events)
        return Response(status_code=499)

    async def produce(send: Emit) -> None:
        try:
            await send(_encode(first))
            async for event in events:
                await send(_encode(event))
        except ApiError as error:
            _log.warning("stream_failed", model=body.model, code=error.code, message=error.message)
            await send(_encode(StreamError(code=error.code, message=error.message, retryable=error.retryable)))
        except OSError:
            raise  # the client went away; EventStreamResponse handles it
        except Exception as error:
            _log.error("stream_crashed", model=body.model, exc_info=error)
            await send(_encode(StreamError(code="internal_error", message="The service failed mid-stream.")))
        finally:
            await _close(events)

    return EventStreamResponse(produce)


async def models(request: Request) -> JSONResponse:
    return JSONResponse({"models": _services(request).router.available()})


async def model(request: Request) -> JSONResponse:
    """Where ``POST /api/v1/completions`` would send this model name, so a caller can check it before a run."""
    name: str = request.path_params["model"]
    route = _services(request).router.route(name, not_found_status=404)
    return JSONResponse({"id": name, "provider": route.provider.name, "upstreamModel": route.upstream_model})


async def _readiness(request: Request) -> dict[str, str]:
    if _services(request).router.has_models:
        return {"models": "ok"}
    return {"models": "none available: enable COMPLETION_DEMO_ENABLED or configure COMPLETION_OPENAI_API_KEY"}


def _router(settings: CompletionSettings, http: httpx.AsyncClient) -> ModelRouter:
    openai = None
    if settings.openai_configured:
        key = settings.openai_api_key.get_secret_value() if settings.openai_api_key else None
        openai = OpenAIProvider(http, settings.openai_base_url, key, max_retries=settings.max_retries)
    return ModelRouter(demo=DemoProvider() if settings.demo_enabled else None, openai=openai)


def create_app(settings: CompletionSettings, *, http_client: httpx.AsyncClient | None = None) -> Starlette:
    """The service; ``http_client`` replaces the pooled client it would create (and is not closed by it)."""

    @asynccontextmanager
    async def lifespan(_: Starlette) -> AsyncIterator[dict[str, _Services]]:
        # One pooled client for every upstream call; each call narrows the timeout to its budget.
        http = http_client or httpx.AsyncClient(
            timeout=httpx.Timeout(settings.request_timeout_seconds, connect=settings.connect_timeout_seconds),
            limits=httpx.Limits(max_connections=200, max_keepalive_connections=50),
        )
        router = _router(settings, http)
        _log.info("completion_service_ready", models=[entry["id"] for entry in router.available()])
        try:
            yield {"services": _Services(settings=settings, router=router)}
        finally:
            if http_client is None:
                await http.aclose()

    app = Starlette(
        routes=[
            Route("/api/v1/completions", completions, methods=["POST"]),
            Route("/api/v1/models", models, methods=["GET"]),
            Route("/api/v1/models/{model:path}", model, methods=["GET"]),
            *health_routes(_readiness),
        ],
        lifespan=lifespan,
    )
    install_error_handlers(app)
    return app
