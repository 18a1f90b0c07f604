"""The I/O every HTTP provider shares: bounded retries, one deadline per call, clean connections.

An adapter builds its request (signing it, for Bedrock) and translates its provider's error
bodies; ``Upstream`` sends it, retries what ``ApiError.retryable`` says may be retried, honours
``Retry-After``, never works past the caller's deadline and turns every httpx failure into an
``ApiError`` once. Nothing here knows a wire format.
"""

from __future__ import annotations

import json
import math
from collections.abc import AsyncGenerator, AsyncIterator, Awaitable, Callable, Iterator, Sequence
from contextlib import contextmanager
from contextvars import ContextVar
from dataclasses import dataclass
from typing import Any, TypeVar

import anyio
import httpx
from pydantic_core import from_json
from tenacity import RetryCallState

from completion_service.providers._errors import bad_response
from completion_service.providers.base import events_of
from suite_common.deadline import Deadline
from suite_common.errors import ApiError
from suite_common.http_client import send_streamed
from suite_common.logging import get_logger
from suite_common.retry import RetryableFailure, retry_after_seconds, retry_policy
from suite_common.sse_parser import EventStreamParser, ServerSentEvent
from suite_common.wire import CompletionEvent, CompletionResponse

__all__ = [
    "RETRY_AFTER_CAP_SECONDS",
    "CallStats",
    "ErrorTranslator",
    "Upstream",
    "call_stats",
    "media_type",
    "parse_json",
]

RETRY_AFTER_CAP_SECONDS = 4.0
"""A longer Retry-After (or one that ends past the caller's deadline) is not waited for: the caller
gets the 429 or 503 at once, with the Retry-After header, and decides itself when to come back."""

ErrorTranslator = Callable[[int, bytes, httpx.Headers], ApiError]
"""``(status, body, headers)`` of a failed response -> the caller's error; ``retryable`` decides a retry."""

_log = get_logger("completion_service.transport")

T = TypeVar("T")

_BACKOFF_SECONDS, _JITTER_SECONDS = 0.5, 0.5


@dataclass
class CallStats:
    """What happened below one provider call, for the caller's metrics: set ``call_stats`` around the call."""

    retries: int = 0


call_stats: ContextVar[CallStats | None] = ContextVar("call_stats", default=None)


def _timed_out(deadline: Deadline) -> ApiError:
    return ApiError(
        504, "upstream_timeout", f"The provider did not finish within {deadline.seconds:g} s.", retryable=True
    )


def _come_back_after(error: ApiError, wait: float | None) -> ApiError:
    """``error`` with a ``Retry-After`` when it is a 429 or 503 the provider gave none for: the wait the retry
    policy would have made next, in whole seconds rounded up, so that a caller who honours it does no worse."""
    if error.status in (429, 503) and wait is not None and retry_after_seconds(httpx.Headers(error.headers)) is None:
        error.headers["Retry-After"] = str(max(1, math.ceil(wait)))
    return error


def media_type(response: httpx.Response) -> str:
    """The response's Content-Type without its parameters, in lower case (``""`` when there is none)."""
    content_type: str = response.headers.get("content-type", "")
    return content_type.partition(";")[0].strip().lower()


def _expect(response: httpx.Response, expected: str) -> None:
    found = media_type(response)
    if found != expected:
        raise bad_response(f"expected the Content-Type {expected}, got {found!r}")


def parse_json(content: bytes | str) -> Any:
    """``content`` parsed by pydantic's JSON reader: a provider's stream chunk in a quarter of ``json.loads``' time
    (it is read for every event). The few texts that reader refuses and ``json`` takes (an unpaired surrogate
    escape, ``\\ud800``) go to ``json``, so that what parses is what always parsed."""
    try:
        return from_json(content)
    except ValueError:
        pass
    try:
        return json.loads(content)
    except ValueError:
        raise bad_response("the body is not JSON") from None


def _body_chunks(response: httpx.Response) -> AsyncIterator[bytes]:
    """The body as it arrives, decoded. Straight from the transport when there is nothing to decode (no
    ``Content-Encoding``, as providers send their streams): httpx's ``aiter_bytes`` would add two generator layers,
    two context managers and its chunkers to every read of every stream."""
    if "content-encoding" not in response.headers and isinstance(response.stream, httpx.AsyncByteStream):
        return aiter(response.stream)
    return response.aiter_bytes()


async def _release(response: httpx.Response) -> None:
    # Shielded: a cancelled caller must still hand the connection back to the pool (or close it).
    with anyio.CancelScope(shield=True):
        await response.aclose()


class Upstream:
    """One provider endpoint, reached through the service's shared ``httpx.AsyncClient``.

    ``secrets`` (API keys) are scrubbed from every message that leaves; ``base_url`` appears in
    messages without any credentials it may carry.
    """

    def __init__(
        self,
        http: httpx.AsyncClient,
        *,
        provider: str,
        base_url: str,
        secrets: Sequence[str | None] = (),
        max_retries: int = 2,
    ) -> None:
        self.http = http
        self.provider = provider
        self.max_retries = max_retries
        self._secrets = {secret for secret in secrets if secret}
        self._call_secrets: set[str] = set()
        url = httpx.URL(base_url)
        self.endpoint = f"{url.scheme}://{url.host}" + (f":{url.port}" if url.port else "")

    # --- sending ------------------------------------------------------------------------------

    async def open(
        self, build: Callable[[], httpx.Request], translate: ErrorTranslator, deadline: Deadline
    ) -> httpx.Response:
        """A successful response with its body unread, after at most ``max_retries`` retries.

        ``build`` makes a fresh request for each attempt (a signature may depend on the time).
        Close the response with ``release`` (``read_json`` and the iterators do it).
        """
        try:
            try:
                # Most calls succeed at once: the retrying machinery is built only for those that do not.
                return await self.before(deadline, self._send(build, translate, deadline))
            except RetryableFailure as failure:
                return await self._retry(build, translate, deadline, failure)
        except httpx.TransportError as error:
            raise self._failure(error, deadline) from None

    async def _retry(
        self,
        build: Callable[[], httpx.Request],
        translate: ErrorTranslator,
        deadline: Deadline,
        first: RetryableFailure[ApiError],
    ) -> httpx.Response:
        """The attempts after the first one failed with ``first``: tenacity decides as if it had made that one."""
        retrying = retry_policy(
            max_retries=self.max_retries,
            max_retry_after=RETRY_AFTER_CAP_SECONDS,
            deadline=deadline.at,
            backoff=_BACKOFF_SECONDS,
            jitter=_JITTER_SECONDS,
            before_sleep=self._log_retry,
        )
        state: RetryCallState | None = None
        try:
            async for attempt in retrying:
                state = attempt.retry_state
                with attempt:
                    if state.attempt_number == 1:
                        raise first  # already made, in ``open``: tenacity waits, stops or retries after it
                    return await self.before(deadline, self._send(build, translate, deadline))
        except RetryableFailure as failure:
            # tenacity computes the next wait before it decides to stop: that wait is the one given up on.
            raise _come_back_after(failure.error, state.upcoming_sleep if state is not None else None) from None
        raise AssertionError("tenacity returns or raises")  # pragma: no cover

    async def _send(
        self, build: Callable[[], httpx.Request], translate: ErrorTranslator, deadline: Deadline
    ) -> httpx.Response:
        remaining = max(deadline.remaining(), 0.001)
        connect = min(self.http.timeout.connect or remaining, remaining)
        request = build()
        request.extensions["timeout"] = {"connect": connect, "read": remaining, "write": remaining, "pool": remaining}
        try:
            response = await send_streamed(self.http, request)
        except httpx.ConnectTimeout:
            raise RetryableFailure(self._unreachable("no connection within the connect timeout", 504)) from None
        except httpx.ConnectError as error:
            raise RetryableFailure(self._unreachable(str(error) or type(error).__name__, 503)) from None
        except (httpx.RemoteProtocolError, httpx.ReadError, httpx.WriteError) as error:
            # Before any response: most often a pooled keep-alive connection the server had closed.
            # Nothing reached the caller, so sending again is safe.
            raise RetryableFailure(self._connection_failed(error)) from None
        if response.is_success:
            return response
        try:
            content = await response.aread()
        finally:
            await _release(response)
        failure = translate(response.status_code, content, response.headers)
        failure.message = self.scrub(failure.message)
        _log.warning(
            "provider_error",
            provider=self.provider,
            status=response.status_code,
            code=failure.code,
            endpoint=self.endpoint,
        )
        if not failure.retryable:
            raise failure
        retry_after = retry_after_seconds(response.headers)
        if retry_after is None:
            # A wait the adapter found in the body (Gemini's RetryInfo.retryDelay) counts the same.
            retry_after = retry_after_seconds(httpx.Headers(failure.headers))
        # A wait past RETRY_AFTER_CAP_SECONDS is not made (the policy gives up at once): retrying sooner
        # would ignore the provider; waiting would hold the caller for that long.
        raise RetryableFailure(failure, retry_after)

    # --- reading ------------------------------------------------------------------------------

    async def read_json(self, response: httpx.Response, deadline: Deadline) -> Any:
        """The whole JSON body, then the connection back to the pool."""
        try:
            content = await self.before(deadline, response.aread())
        except httpx.TransportError as error:
            raise self._failure(error, deadline) from None
        finally:
            await _release(response)
        return parse_json(content)

    async def whole_answer(
        self, response: httpx.Response, deadline: Deadline, parse: Callable[[Any], CompletionResponse]
    ) -> list[CompletionEvent]:
        """A stream answered with one JSON body (``media_type`` says so): the events of the whole answer
        ``parse`` reads from it, as a stream of it would have given them."""
        body = await self.read_json(response, deadline)
        with self.scrubbed():
            return events_of(parse(body))

    async def iter_sse(self, response: httpx.Response, deadline: Deadline) -> AsyncGenerator[ServerSentEvent, None]:
        """The response's server-sent events.

        The deadline and the translation of failures apply to each read from the network, however
        many events it carries (a fast model's tokens often share one), never to a ``yield``.
        """
        chunks = _body_chunks(response)
        try:
            _expect(response, "text/event-stream")
            parser = EventStreamParser()
            while (chunk := await self._next_chunk(chunks, deadline)) is not None:
                for event in parser.feed(chunk):
                    yield event
        finally:
            if isinstance(chunks, AsyncGenerator):  # httpx's is one: close it now, not when it is collected
                with anyio.CancelScope(shield=True):
                    await chunks.aclose()
            await _release(response)

    async def iter_bytes(
        self, response: httpx.Response, deadline: Deadline, *, content_type: str
    ) -> AsyncGenerator[bytes, None]:
        """The raw body as it arrives (binary framings such as AWS event streams), within the deadline; a body
        of another Content-Type than ``content_type`` is a ``bad_upstream_response`` that says which it was."""
        chunks = response.aiter_raw()
        try:
            _expect(response, content_type)
            while (chunk := await self._next_chunk(chunks, deadline)) is not None:
                yield chunk
        finally:
            await _release(response)

    async def _next_chunk(self, chunks: AsyncIterator[bytes], deadline: Deadline) -> bytes | None:
        """The body's next chunk (``None`` at its end) unless the deadline passes first, failures translated.

        Its cancel scope is entered and left around this one read: an async generator must never
        ``yield`` inside one (the consumer would run under the generator's scope).
        """
        try:
            with anyio.CancelScope(deadline=deadline.at):
                return await anext(chunks, None)
        except httpx.TransportError as error:
            raise self._failure(error, deadline) from None
        raise _timed_out(deadline)

    @staticmethod
    async def release(response: httpx.Response) -> None:
        await _release(response)

    @staticmethod
    async def before(deadline: Deadline, awaitable: Awaitable[T]) -> T:
        """Await ``awaitable`` unless the deadline passes first. The scope never spans a ``yield``."""
        with anyio.CancelScope(deadline=deadline.at):
            return await awaitable
        raise _timed_out(deadline)

    # --- errors -------------------------------------------------------------------------------

    def _failure(self, error: httpx.TransportError, deadline: Deadline) -> ApiError:
        """An httpx failure as the caller's error (``ApiError`` needs none: it passes through)."""
        if isinstance(error, httpx.TimeoutException):
            return _timed_out(deadline)
        return self._connection_failed(error)

    @contextmanager
    def scrubbed(self) -> Iterator[None]:
        """Errors raised inside (an adapter's own, from a stream's error event) leave without the secrets, and
        a 429 or 503 with the ``Retry-After`` the retry policy would have waited after a first attempt."""
        try:
            yield
        except ApiError as error:
            error.message = self.scrub(error.message)
            _come_back_after(error, _BACKOFF_SECONDS + _JITTER_SECONDS)
            raise

    def hide(self, *secrets: str | None) -> None:
        """Also scrub these (credentials known only at call time); they replace the previous call's."""
        self._call_secrets = {secret for secret in secrets if secret}

    def scrub(self, text: str) -> str:
        for secret in (*self._secrets, *self._call_secrets):
            text = text.replace(secret, "***")
        return text

    # The provider's address (an internal proxy, a vLLM host) goes to the log only: callers get its name.

    def _unreachable(self, reason: str, status: int) -> ApiError:
        code = "upstream_timeout" if status == 504 else "upstream_unavailable"
        _log.warning("provider_unreachable", provider=self.provider, endpoint=self.endpoint, reason=self.scrub(reason))
        why = "no connection within the connect timeout" if status == 504 else "the connection was refused or failed"
        return ApiError(status, code, f"Could not connect to the provider {self.provider}: {why}.", retryable=True)

    def _connection_failed(self, error: httpx.TransportError) -> ApiError:
        reason = type(error).__name__
        _log.warning("provider_connection_failed", provider=self.provider, endpoint=self.endpoint, reason=reason)
        message = f"The connection to the provider {self.provider} failed: {reason}"
        return ApiError(503, "upstream_unavailable", message, retryable=True)

    def _log_retry(self, state: RetryCallState) -> None:
        stats = call_stats.get()
        if stats is not None:
            stats.retries += 1
        failure = state.outcome.exception() if state.outcome else None
        _log.warning(
            "provider_retry",
            provider=self.provider,
            attempt=state.attempt_number,
            wait_seconds=round(state.upcoming_sleep, 3),
            reason=failure.error.code if isinstance(failure, RetryableFailure) else repr(failure),
        )
