"""completion-service's HTTP API: ``POST /api/v1/completions`` (JSON or SSE), ``GET /api/v1/models`` and
``GET /api/v1/models/{model}``."""

from __future__ import annotations

import time
from collections.abc import AsyncIterator, Awaitable
from contextlib import asynccontextmanager
from dataclasses import dataclass, replace
from typing import TypeVar

import httpx
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.trace import Span, Tracer
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse, Response

from completion_service.controls import (
    fitted,
    hides_reasoning_text,
    with_warnings,
    without_reasoning_text,
    without_reasoning_text_events,
)
from completion_service.images import ImageFetcher, admit_images, has_images, with_image_bytes
from completion_service.pricing import priced
from completion_service.providers._transport import CallStats, call_stats
from completion_service.routing import ModelRoute, ModelRouter, build_router, facts_fields
from completion_service.settings import CompletionSettings
from completion_service.telemetry import LlmTelemetry, provider_call_span, set_provider_outcome
from suite_common.deadline import Deadline
from suite_common.errors import ApiError, install_error_handlers
from suite_common.health import health_routes
from suite_common.http import ModelResponse, check_model_name, read_model, run_for_client
from suite_common.http_client import pooled_client
from suite_common.lifecycle import Lifecycle, until_interrupted
from suite_common.logging import get_logger
from suite_common.observability import Observability
from suite_common.openapi import ApiRoute, Operation, add_openapi
from suite_common.sse import Emit, EventStreamResponse, encode_model_event
from suite_common.tracing import mark_request_failed
from suite_common.wire import (
    DEADLINE_HEADER,
    CompletionDone,
    CompletionEvent,
    CompletionRequest,
    CompletionResponse,
    ModelList,
    ModelPrices,
    ResolvedModel,
    StreamError,
    Usage,
)

__all__ = ["create_app"]


_log = get_logger("completion_service")

T = TypeVar("T")


@dataclass(frozen=True)
class _Services:
    settings: CompletionSettings
    router: ModelRouter
    telemetry: LlmTelemetry
    tracer: Tracer
    lifecycle: Lifecycle
    images: ImageFetcher


def _services(request: Request) -> _Services:
    services: _Services = request.state.services
    return services


def _deadline(request: Request, settings: CompletionSettings) -> Deadline:
    """When the upstream calls must be over: the setting, shortened by the caller's ``X-Deadline-Ms``."""
    deadline = Deadline.from_header(request.headers, cap=settings.request_timeout_seconds)
    if deadline.expired():
        raise ApiError(504, "upstream_timeout", f"The caller's deadline ({DEADLINE_HEADER}) has already passed.")
    return deadline


def _encode(event: CompletionEvent) -> bytes:
    return encode_model_event(event, event.type)


async def _close(events: AsyncIterator[CompletionEvent]) -> None:
    aclose = getattr(events, "aclose", None)
    if aclose is not None:
        await aclose()


async def _finished_events(
    events: AsyncIterator[CompletionEvent], prices: ModelPrices | None, warnings: list[str]
) -> AsyncIterator[CompletionEvent]:
    try:
        async for event in events:
            yield with_warnings(priced(event, prices), warnings) if isinstance(event, CompletionDone) else event
    finally:
        await _close(events)  # closing this stream closes the provider's at once, not when collected


async def _image_route(
    body: CompletionRequest, route: ModelRoute, images: ImageFetcher, deadline: Deadline
) -> ModelRoute:
    """The route of a request with images, before any call: 400 ``images_not_supported`` when its model takes none
    (its fallbacks that take none are left out of the chain), every image URL checked (``images.admit_images``)."""
    if not _takes_images(route):
        raise ApiError(
            400,
            "images_not_supported",
            f"The model {route.name!r} does not take images (its catalog entry or the provider's known models say "
            "so); send text only or pick a model that does.",
        )
    await admit_images(body, images, within=_left(deadline))
    fallbacks = tuple(fallback for fallback in route.fallbacks if _takes_images(fallback))
    return route if fallbacks == route.fallbacks else replace(route, fallbacks=fallbacks)


def _takes_images(route: ModelRoute) -> bool:
    return route.facts.images is not False and route.provider.image_input != "none"


async def _with_images(
    body: CompletionRequest, route: ModelRoute, services: _Services, fetched: dict[str, str], left: float
) -> CompletionRequest:
    """``body`` with its https images fetched when the route's provider takes only bytes (``images``)."""
    if route.provider.image_input != "bytes" or not has_images(body):
        return body
    return await with_image_bytes(body, services.images, fetched, within=left)


def _answers(body: CompletionRequest, route: ModelRoute, left: float) -> AsyncIterator[CompletionEvent]:
    """The route's stream, without the controls its model cannot take, its ``done`` priced at the route's prices
    (the model that answers is the one whose prices apply) and warned of the controls taken out."""
    request, warnings = fitted(_as(body, route), route.controls)
    events = route.provider.stream(request, route.upstream_model, left)
    if hides_reasoning_text(request):
        events = without_reasoning_text_events(events)
    return events if route.prices is None and not warnings else _finished_events(events, route.prices, warnings)


async def _no_events() -> AsyncIterator[CompletionEvent]:
    return
    yield  # an empty async generator: the stream before it is opened


async def _first_event(events: AsyncIterator[CompletionEvent]) -> CompletionEvent:
    try:
        return await anext(events)
    except StopAsyncIteration:
        raise ApiError(502, "bad_upstream_response", "The provider ended the stream without an answer.") from None


def _as(body: CompletionRequest, route: ModelRoute) -> CompletionRequest:
    """The request as the route's provider reports it: under the name of the model that answers."""
    return body if route.name == body.model else body.model_copy(update={"model": route.name})


def _falls_back(error: ApiError, route: ModelRoute, chain: list[ModelRoute], telemetry: LlmTelemetry) -> bool:
    """A retryable failure (after the provider's own retries) moves on to the next model of the chain."""
    if not error.retryable or route is chain[-1]:
        return False
    next_model = chain[chain.index(route) + 1].name
    _log.warning("model_fallback", model=route.name, code=error.code, next_model=next_model)
    telemetry.fallback(route.name, next_model)
    return True


async def _complete(
    body: CompletionRequest, route: ModelRoute, deadline: Deadline, services: _Services
) -> CompletionResponse:
    chain = route.chain()
    fetched: dict[str, str] = {}  # https images fetched for this request, by URL
    for candidate in chain:
        left = _left(deadline)  # outside the try: a spent deadline is not a failure of the next model
        stats, started = CallStats(), time.perf_counter()
        token = call_stats.set(stats)
        attributes = {"llm.provider": candidate.provider.name, "llm.model": candidate.name}
        try:
            sent = await _with_images(body, candidate, services, fetched, left)
            request, warnings = fitted(_as(sent, candidate), candidate.controls)
            with provider_call_span(services.tracer, attributes):
                answer = await candidate.provider.complete(request, candidate.upstream_model, left)
        except ApiError as error:
            _record(services, candidate, error.code, started, stats, None)
            if not _falls_back(error, candidate, chain, services.telemetry):
                raise
            continue
        finally:
            call_stats.reset(token)
        # The prices of the model that answered, and the controls it could not take.
        if hides_reasoning_text(request):
            answer = without_reasoning_text(answer)
        response = with_warnings(priced(answer, candidate.prices), warnings)
        _record(services, candidate, "ok", started, stats, response.usage)
        return response
    raise AssertionError("the last route returns or raises")  # pragma: no cover


def _record(
    services: _Services, route: ModelRoute, outcome: str, started: float, stats: CallStats, usage: Usage | None
) -> None:
    services.telemetry.call(
        provider=route.provider.name,
        model=route.name,
        outcome=outcome,
        seconds=time.perf_counter() - started,
        stats=stats,
        usage=usage,
    )


@dataclass
class _OpenStream:
    events: AsyncIterator[CompletionEvent]
    first: CompletionEvent
    route: ModelRoute
    started: float
    stats: CallStats
    span: Span
    """The attempt's ``provider_call`` span: it lasts as long as the stream."""


def _end_span(span: Span, outcome: str) -> None:
    set_provider_outcome(span, outcome)
    span.end()


async def _open_stream(
    body: CompletionRequest, route: ModelRoute, deadline: Deadline, services: _Services
) -> _OpenStream:
    """The first route whose stream starts, with its first event; nothing reached the caller before it."""
    chain = route.chain()
    fetched: dict[str, str] = {}  # https images fetched for this request, by URL
    for candidate in chain:
        left = _left(deadline)
        stats, started = CallStats(), time.perf_counter()
        token = call_stats.set(stats)
        attributes = {"llm.provider": candidate.provider.name, "llm.model": candidate.name}
        span = services.tracer.start_span("provider_call", attributes=attributes)
        events: AsyncIterator[CompletionEvent] = _no_events()
        try:
            events = _answers(await _with_images(body, candidate, services, fetched, left), candidate, left)
            return _OpenStream(events, await _first_event(events), candidate, started, stats, span)
        except ApiError as error:
            await _close(events)
            _end_span(span, error.code)
            _record(services, candidate, error.code, started, stats, None)
            if not _falls_back(error, candidate, chain, services.telemetry):
                raise
        except BaseException:
            await _close(events)
            _end_span(span, "cancelled")
            raise
        finally:
            call_stats.reset(token)
    raise AssertionError("the last route returns or raises")  # pragma: no cover


_SHUTTING_DOWN = "The service is shutting down; send the request again: another instance will take it."


async def _until_answered(request: Request, lifecycle: Lifecycle, work: Awaitable[T]) -> tuple[bool, T | None]:
    """``(False, None)`` once the client has gone, and a 503 ``shutting_down`` when the service interrupts ``work``
    while draining."""
    outcome = await run_for_client(request, work, lifecycle=lifecycle)
    if outcome.client_gone:
        return False, None
    if not outcome.finished:
        raise ApiError(503, "shutting_down", _SHUTTING_DOWN, headers={"Retry-After": "1"}, retryable=True)
    return True, outcome.result


def _left(deadline: Deadline) -> float:
    left = deadline.remaining()
    if left <= 0:
        raise ApiError(504, "upstream_timeout", "The request's time ran out before a model answered.", retryable=True)
    return left


async def completions(request: Request) -> Response | EventStreamResponse:
    services = _services(request)
    body = await read_model(request, CompletionRequest)
    route = services.router.route(body.model)
    deadline = _deadline(request, services.settings)
    if has_images(body):  # checked within the request's deadline
        route = await _image_route(body, route, services.images, deadline)
    lifecycle = services.lifecycle
    if not body.stream:
        answered, response = await _until_answered(request, lifecycle, _complete(body, route, deadline, services))
        if not answered or response is None:
            return Response(status_code=499)  # the client has gone; nobody reads this
        return ModelResponse(response)

    # Until the first event exists, a failure is still an ordinary HTTP error with its status.
    started, opened = await _until_answered(request, lifecycle, _open_stream(body, route, deadline, services))
    if not started or opened is None:
        return Response(status_code=499)
    events = opened.events

    async def produce(send: Emit) -> None:
        outcome, usage = "cancelled", None

        async def relay() -> None:
            nonlocal outcome, usage
            await send(_encode(opened.first))
            async for event in events:
                if isinstance(event, CompletionDone):
                    outcome, usage = "ok", event.usage
                await send(_encode(event))

        try:
            finished, _ = await until_interrupted(lifecycle, relay())
            if not finished:
                # Not a silent cut: the caller learns why the stream ends, and that trying again will work.
                outcome = "shutting_down"
                _log.warning("stream_interrupted_by_shutdown", model=body.model)
                await send(_encode(StreamError(code="shutting_down", message=_SHUTTING_DOWN, retryable=True)))
        except ApiError as error:
            outcome = error.code
            _log.warning("stream_failed", model=body.model, code=error.code, message=error.message)
            await send(_encode(StreamError(code=error.code, message=error.message, retryable=error.retryable)))
        except OSError:
            raise  # the client went away; EventStreamResponse handles it
        except Exception as error:
            outcome = "internal_error"
            _log.error("stream_crashed", model=body.model, exc_info=error)
            await send(_encode(StreamError(code="internal_error", message="The service failed mid-stream.")))
        finally:
            await _close(events)
            if isinstance(opened.first, CompletionDone):
                outcome, usage = "ok", opened.first.usage
            _record(services, opened.route, outcome, opened.started, opened.stats, usage)
            _end_span(opened.span, outcome)
            if outcome not in ("ok", "cancelled"):  # the 200 went out: only the span can say the stream failed
                mark_request_failed(outcome)

    return EventStreamResponse(produce)


_COMPLETIONS = Operation(
    "One LLM completion in the neutral shape, from whichever provider serves the model",
    body=CompletionRequest,
    answer=CompletionResponse,
    events=CompletionEvent,
    errors={
        400: (
            "No provider serves this model name (model_not_found), the request is not valid, the model takes no "
            "images (images_not_supported), an image URL is refused (image_url_not_allowed) or cannot be fetched "
            "(image_fetch_failed)."
        ),
        413: "An image is larger than COMPLETION_IMAGE_FETCH_MAX_BYTES (image_too_large).",
        502: "The provider failed or answered what cannot be read.",
        504: f"The provider did not answer within the time ({DEADLINE_HEADER} or the service's timeout).",
    },
    example={"model": "demo", "messages": [{"role": "user", "content": "Hello"}]},
)


async def models(request: Request) -> JSONResponse:
    return JSONResponse({"models": _services(request).router.available()})


async def model(request: Request) -> JSONResponse:
    """Where ``POST /api/v1/completions`` would send this model name, so a caller can check it before a run."""
    name: str = request.path_params["model"]
    check_model_name(name)  # the same 400 as a completion request naming it
    route = _services(request).router.route(name, not_found_status=404)
    answer = _target(route)
    if route.fallbacks:
        answer["fallbacks"] = [_target(fallback) for fallback in route.fallbacks]
    return JSONResponse(answer)


def _target(route: ModelRoute) -> dict[str, object]:
    """A route as a ``ModelTarget``: who answers it, under which id, at which prices."""
    target: dict[str, object] = {
        "id": route.name,
        "provider": route.provider.name,
        "upstreamModel": route.upstream_model,
    }
    if route.prices is not None:
        target["prices"] = route.prices.model_dump(by_alias=True)
    return target | facts_fields(route.facts)


_MODELS = Operation("The model names and patterns this service routes", answer=ModelList)
_MODEL = Operation(
    "Where a completion for this model name would go",
    answer=ResolvedModel,
    errors={404: "No provider serves this model name."},
)


async def _readiness(request: Request) -> dict[str, str]:
    if _services(request).router.has_models:
        return {"models": "ok"}
    return {"models": "none available: enable COMPLETION_DEMO_ENABLED or configure a provider"}


def create_app(
    settings: CompletionSettings,
    *,
    http_client: httpx.AsyncClient | None = None,
    tracer_provider: TracerProvider | None = None,
    image_fetcher: ImageFetcher | None = None,
) -> Starlette:
    """The service; ``http_client`` replaces the pooled client it would create (and is not closed by it),
    ``tracer_provider`` the one its settings describe, ``image_fetcher`` the image client of the settings (not closed
    by it either: tests give one that trusts their CA)."""
    observability = Observability.create("completion-service", settings, tracer_provider=tracer_provider)
    telemetry = LlmTelemetry(observability.registry)

    # One pooled client for every upstream call; each call narrows the timeout to its budget.
    # On aiohttp's pool: httpx's own costs milliseconds of CPU per call under concurrency. It opens
    # nothing until the first call.
    http = http_client or pooled_client(
        timeout=httpx.Timeout(settings.request_timeout_seconds, connect=settings.connect_timeout_seconds),
        limits=httpx.Limits(max_connections=200, max_keepalive_connections=50),
    )
    # Here rather than in the lifespan: a catalog that cannot work (CatalogError, a ValueError) stops
    # create_app itself, which the start-up path reports in one line (suite_common.startup), not as a
    # lifespan traceback. A service that cannot route what it was told to is misconfigured.
    router = build_router(settings, http)
    images = image_fetcher or ImageFetcher.from_settings(settings)

    @asynccontextmanager
    async def lifespan(_: Starlette) -> AsyncIterator[dict[str, _Services]]:
        _log.info("completion_service_ready", models=[entry["id"] for entry in router.available()])
        telemetry.label_models(str(entry["id"]) for entry in router.available())
        try:
            yield {
                "services": _Services(
                    settings=settings,
                    router=router,
                    telemetry=telemetry,
                    tracer=observability.tracer,
                    lifecycle=observability.lifecycle,
                    images=images,
                )
            }
        finally:
            await observability.aclose()
            if http_client is None:
                await http.aclose()
            if image_fetcher is None:
                await images.aclose()

    app = Starlette(
        routes=[
            ApiRoute("/api/v1/completions", completions, method="POST", operation=_COMPLETIONS),
            ApiRoute("/api/v1/models", models, method="GET", operation=_MODELS),
            ApiRoute("/api/v1/models/{model:path}", model, method="GET", operation=_MODEL),
            *health_routes(_readiness, observability.lifecycle),
            *observability.routes(),
        ],
        lifespan=lifespan,
    )
    install_error_handlers(app)
    observability.install(app)
    add_openapi(app, title="completion-service")
    return app
