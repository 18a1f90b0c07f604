"""OpenAI Chat Completions, which every OpenAI-compatible server (vLLM, Ollama, LM Studio) speaks.

The first half is pure translation between the neutral wire models and the Chat Completions
JSON, tested on exact bodies. The second half, ``OpenAIProvider``, is the only I/O: it posts,
retries what may be retried, reads the event stream and turns every foreign failure into an
``ApiError`` once, here at the edge.
"""

from __future__ import annotations

import email.utils
import json
import math
import time
from collections.abc import AsyncIterator, Awaitable, Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any, TypeVar

import anyio
import httpx
from httpx_sse import EventSource, SSEError
from tenacity import (
    AsyncRetrying,
    RetryCallState,
    retry_if_exception_type,
    stop_after_attempt,
    stop_any,
    wait_exponential_jitter,
)
from tenacity.stop import stop_base

from suite_common.errors import ApiError
from suite_common.logging import get_logger
from suite_common.wire import (
    CompletionDone,
    CompletionEvent,
    CompletionRequest,
    CompletionResponse,
    FinishReason,
    Message,
    TextDelta,
    ToolCall,
    ToolCallEvent,
    ToolChoice,
    ToolSpec,
    Usage,
)

__all__ = [
    "RETRY_AFTER_CAP_SECONDS",
    "OpenAIProvider",
    "StreamAssembler",
    "build_request_body",
    "parse_arguments",
    "parse_response",
    "retry_after_seconds",
    "translate_error",
]

PROVIDER_NAME = "openai"

RETRY_AFTER_CAP_SECONDS = 4.0
"""A longer Retry-After (or one that ends past the caller's deadline) is not waited for: the caller
gets the 429 or 503 at once, with the Retry-After header, and decides itself when to come back."""

_MAX_MESSAGE_CHARS = 1000

_FINISH_REASONS: dict[str, FinishReason] = {
    "stop": "stop",
    "tool_calls": "tool_calls",
    "function_call": "tool_calls",  # the legacy name of the same thing
    "length": "length",
    "content_filter": "content_filter",
}

_log = get_logger("completion_service.openai")

T = TypeVar("T")


# --- neutral -> Chat Completions ---------------------------------------------------------------


def build_request_body(request: CompletionRequest, upstream_model: str, *, stream: bool) -> dict[str, Any]:
    """The JSON body of ``POST /chat/completions`` for ``request``."""
    body: dict[str, Any] = {
        "model": upstream_model,
        "messages": [_message(message) for message in request.messages],
        "stream": stream,
    }
    if stream:
        # Without it a stream carries no token counts at all.
        body["stream_options"] = {"include_usage": True}
    if request.tools:
        # OpenAI refuses tool_choice without tools, so both go or neither.
        body["tools"] = [_tool(tool) for tool in request.tools]
        body["tool_choice"] = _tool_choice(request.tool_choice)
    if request.max_tokens is not None:
        body["max_tokens"] = request.max_tokens
    if request.temperature is not None:
        body["temperature"] = request.temperature
    return body


def _message(message: Message) -> dict[str, Any]:
    if message.role == "tool":
        # Chat Completions has no error flag on tool results: the content has to say so.
        return {"role": "tool", "tool_call_id": message.tool_call_id, "content": message.content or ""}
    if message.role == "assistant" and message.tool_calls:
        return {
            "role": "assistant",
            "content": message.content,
            "tool_calls": [
                {"id": call.id, "type": "function", "function": {"name": call.name, "arguments": _arguments_text(call)}}
                for call in message.tool_calls
            ],
        }
    return {"role": message.role, "content": message.content or ""}


def _arguments_text(call: ToolCall) -> str:
    # Replaying what the model really wrote lets it see (and fix) its own malformed arguments.
    if call.invalid_arguments is not None:
        return call.invalid_arguments
    return json.dumps(call.arguments, ensure_ascii=False)


def _tool(tool: ToolSpec) -> dict[str, Any]:
    return {
        "type": "function",
        "function": {"name": tool.name, "description": tool.description, "parameters": tool.input_schema},
    }


def _tool_choice(choice: ToolChoice) -> str | dict[str, Any]:
    if isinstance(choice, str):
        return choice
    return {"type": "function", "function": {"name": choice.name}}


# --- Chat Completions -> neutral ---------------------------------------------------------------


def _bad_response(detail: str) -> ApiError:
    return ApiError(
        502, "bad_upstream_response", f"The provider sent something that is not a chat completion: {detail}."
    )


def parse_arguments(raw: Any) -> tuple[dict[str, Any], str | None]:
    """``(arguments, invalid_arguments)``: a JSON object, or ``{}`` and the raw text when it is not one."""
    if isinstance(raw, dict):  # some compatible servers send an object instead of its JSON text
        return raw, None
    if raw is None or (isinstance(raw, str) and not raw.strip()):
        return {}, None  # a tool without parameters
    text = raw if isinstance(raw, str) else json.dumps(raw)
    try:
        parsed = json.loads(text)
    except ValueError:
        return {}, text
    if not isinstance(parsed, dict):
        return {}, text
    return parsed, None


def _finish_reason(raw: Any, *, has_tool_calls: bool) -> FinishReason:
    reason = _FINISH_REASONS.get(raw) if isinstance(raw, str) else None
    if has_tool_calls and reason in (None, "stop"):
        # Some compatible servers say "stop" after a tool call; the calls are what counts.
        return "tool_calls"
    return reason or "stop"


def _usage(raw: Any) -> Usage:
    if not isinstance(raw, dict):
        return Usage()
    prompt, completion = raw.get("prompt_tokens"), raw.get("completion_tokens")
    return Usage(
        input_tokens=prompt if isinstance(prompt, int) else 0,
        output_tokens=completion if isinstance(completion, int) else 0,
    )


def _text(raw: Any, what: str) -> str | None:
    if raw is None or isinstance(raw, str):
        return raw
    raise _bad_response(f"{what} is not a string")


def parse_response(body: Any, model: str, *, provider: str = PROVIDER_NAME) -> CompletionResponse:
    """A whole ``chat.completion`` object as the neutral response reported under ``model``."""
    if not isinstance(body, dict):
        raise _bad_response("the body is not a JSON object")
    choices = body.get("choices")
    if not isinstance(choices, list) or not choices or not isinstance(choices[0], dict):
        raise _bad_response("no choices")
    choice = choices[0]
    message = choice.get("message")
    if not isinstance(message, dict):
        raise _bad_response("the choice has no message")
    content = _text(message.get("content"), "message.content") or _text(message.get("refusal"), "message.refusal")
    raw_calls = message.get("tool_calls") or []
    if not isinstance(raw_calls, list):
        raise _bad_response("message.tool_calls is not a list")
    calls = [_tool_call(raw, position) for position, raw in enumerate(raw_calls)]
    return CompletionResponse(
        message=Message(role="assistant", content=content or None, tool_calls=calls or None),
        finish_reason=_finish_reason(choice.get("finish_reason"), has_tool_calls=bool(calls)),
        usage=_usage(body.get("usage")),
        model=model,
        provider=provider,
    )


def _tool_call(raw: Any, position: int) -> ToolCall:
    function = raw.get("function") if isinstance(raw, dict) else None
    if not isinstance(function, dict) or not isinstance(function.get("name"), str) or not function["name"]:
        raise _bad_response(f"tool call {position} has no function name")
    arguments, invalid = parse_arguments(function.get("arguments"))
    call_id = raw.get("id") if isinstance(raw, dict) else None
    return ToolCall(
        id=call_id if isinstance(call_id, str) and call_id else f"call_{position}",
        name=function["name"],
        arguments=arguments,
        invalid_arguments=invalid,
    )


@dataclass
class _PartialCall:
    id: str = ""
    name: str = ""
    arguments: list[str] = field(default_factory=list)


class StreamAssembler:
    """Folds ``chat.completion.chunk`` objects into neutral events.

    ``feed`` returns the text deltas of a chunk at once; tool calls, whose arguments arrive in
    fragments keyed by ``index``, come out whole from ``finish``, followed by ``done``.
    """

    def __init__(self, *, model: str, provider: str = PROVIDER_NAME) -> None:
        self.model = model
        self.provider = provider
        self.finish_reason: str | None = None
        self._usage = Usage()
        self._calls: dict[int, _PartialCall] = {}
        self._last_index: int | None = None

    def feed(self, chunk: Any) -> list[CompletionEvent]:
        if not isinstance(chunk, dict):
            raise _bad_response("a stream chunk is not a JSON object")
        if "error" in chunk:
            message, _ = _error_detail(chunk)
            raise ApiError(
                503,
                "upstream_unavailable",
                f"The provider failed in the middle of the stream: {message or 'no reason given'}",
                retryable=True,
            )
        if isinstance(chunk.get("usage"), dict):
            self._usage = _usage(chunk["usage"])
        choices = chunk.get("choices") or []
        if not isinstance(choices, list):
            raise _bad_response("chunk choices is not a list")
        events: list[CompletionEvent] = []
        for choice in choices[:1]:  # n=1: one choice per request
            if not isinstance(choice, dict):
                raise _bad_response("a chunk choice is not an object")
            delta = choice.get("delta") or {}
            if not isinstance(delta, dict):
                raise _bad_response("a chunk delta is not an object")
            for key in ("content", "refusal"):
                text = _text(delta.get(key), f"delta.{key}")
                if text:
                    events.append(TextDelta(delta=text))
            tool_calls = delta.get("tool_calls") or []
            if not isinstance(tool_calls, list):
                raise _bad_response("delta.tool_calls is not a list")
            for fragment in tool_calls:
                self._add_fragment(fragment)
            if isinstance(choice.get("finish_reason"), str):
                self.finish_reason = choice["finish_reason"]
        return events

    def _add_fragment(self, fragment: Any) -> None:
        if not isinstance(fragment, dict):
            raise _bad_response("a tool call delta is not an object")
        index = fragment.get("index")
        if not isinstance(index, int):
            # Some compatible servers leave out the index: a new id starts a new call.
            new_id = fragment.get("id")
            known = any(call.id == new_id for call in self._calls.values())
            index = len(self._calls) if self._last_index is None or (new_id and not known) else self._last_index
        self._last_index = index
        call = self._calls.setdefault(index, _PartialCall())
        if isinstance(fragment.get("id"), str) and fragment["id"] and not call.id:
            call.id = fragment["id"]
        function = fragment.get("function") or {}
        if not isinstance(function, dict):
            raise _bad_response("a tool call delta has a malformed function")
        if isinstance(function.get("name"), str) and function["name"] and not call.name:
            call.name = function["name"]
        arguments = function.get("arguments")
        if isinstance(arguments, str):
            call.arguments.append(arguments)
        elif isinstance(arguments, dict):
            call.arguments.append(json.dumps(arguments))

    def finish(self) -> list[CompletionEvent]:
        """The assembled tool calls, then ``done``; call it once the stream has ended."""
        events: list[CompletionEvent] = []
        for index in sorted(self._calls):
            call = self._calls[index]
            if not call.name:
                raise _bad_response(f"streamed tool call {index} has no function name")
            arguments, invalid = parse_arguments("".join(call.arguments))
            events.append(
                ToolCallEvent(
                    id=call.id or f"call_{index}", name=call.name, arguments=arguments, invalid_arguments=invalid
                )
            )
        events.append(
            CompletionDone(
                finish_reason=_finish_reason(self.finish_reason, has_tool_calls=bool(self._calls)),
                usage=self._usage,
                model=self.model,
                provider=self.provider,
            )
        )
        return events


# --- errors ------------------------------------------------------------------------------------


def _error_detail(payload: Any) -> tuple[str | None, str | None]:
    """``(message, code)`` of an error body: OpenAI's ``{"error": {...}}`` and the usual variants."""
    if not isinstance(payload, dict):
        return None, None
    error = payload.get("error", payload)
    if isinstance(error, str):
        return error[:_MAX_MESSAGE_CHARS], None
    if not isinstance(error, dict):
        return None, None
    message = error.get("message") or error.get("detail")
    code = error.get("code")
    return (
        message[:_MAX_MESSAGE_CHARS] if isinstance(message, str) else None,
        code if isinstance(code, str) else None,
    )


def translate_error(status: int, content: bytes, headers: Mapping[str, str], *, upstream_model: str) -> ApiError:
    """The caller's view of a provider's HTTP error (``status`` >= 400)."""
    try:
        message, code = _error_detail(json.loads(content))
    except ValueError:
        message, code = None, None
    if status in (401, 403):
        # The provider's message may quote part of the key: it is never passed on.
        return ApiError(
            502,
            "auth_failed",
            f"The provider refused the credentials (HTTP {status}): check COMPLETION_OPENAI_API_KEY.",
        )
    if status == 404:
        return ApiError(
            400,
            "model_not_found",
            message
            or f"The provider has no model {upstream_model!r} (HTTP 404); is COMPLETION_OPENAI_BASE_URL right "
            "(it usually ends in /v1)?",
        )
    if status == 429:
        return ApiError(
            429,
            "rate_limited",
            f"The provider is rate limiting requests: {message or 'try again later'}",
            headers=_retry_after_header(headers),
            retryable=True,
        )
    if status >= 500:
        return ApiError(
            503,
            "upstream_unavailable",
            f"The provider failed (HTTP {status}): {message or 'no reason given'}",
            headers=_retry_after_header(headers),
            retryable=True,
        )
    if code == "context_length_exceeded":
        return ApiError(400, "context_length_exceeded", message or "The conversation is too long for the model.")
    return ApiError(
        400, "invalid_request", f"The provider rejected the request (HTTP {status}): {message or 'no reason given'}"
    )


def _retry_after_header(headers: Mapping[str, str]) -> dict[str, str] | None:
    """The provider's wait as the caller's ``Retry-After``: whole seconds, rounded up, whatever form it came in."""
    seconds = retry_after_seconds(headers)
    return None if seconds is None else {"Retry-After": str(math.ceil(seconds))}


def retry_after_seconds(headers: Mapping[str, str]) -> float | None:
    """How long the provider asked us to wait: ``retry-after-ms``, or ``Retry-After`` in seconds or as a date."""
    milliseconds = headers.get("retry-after-ms")
    if milliseconds is not None:
        try:
            return max(0.0, float(milliseconds) / 1000)
        except ValueError:
            pass
    value = headers.get("retry-after")
    if value is None:
        return None
    try:
        return max(0.0, float(value))
    except ValueError:
        pass
    try:
        when = email.utils.parsedate_to_datetime(value)
    except (TypeError, ValueError):
        return None
    return max(0.0, when.timestamp() - time.time())


# --- I/O ---------------------------------------------------------------------------------------


class _RetryableFailure(Exception):
    """A failure after which the same request may be sent again (never after streaming began)."""

    def __init__(self, error: ApiError, retry_after: float | None = None) -> None:
        super().__init__(error.message)
        self.error = error
        self.retry_after = retry_after


_backoff = wait_exponential_jitter(multiplier=0.5, max=4.0, jitter=0.5)


def _wait(state: RetryCallState) -> float:
    failure = state.outcome.exception() if state.outcome else None
    if isinstance(failure, _RetryableFailure) and failure.retry_after is not None:
        # Exactly what the provider asked for: ``_send`` never lets a longer wait than the cap through,
        # and ``_StopBefore`` stops when it would end past the deadline.
        return failure.retry_after
    return float(_backoff(state))


class _StopBefore(stop_base):
    """Stop when the next wait would end past the deadline: sleeping only to time out would hide
    the real reason (a 429, a 503) behind a timeout."""

    def __init__(self, deadline: float) -> None:
        self.deadline = deadline

    def __call__(self, retry_state: RetryCallState) -> bool:
        return anyio.current_time() + retry_state.upcoming_sleep >= self.deadline


def _timed_out(budget: float) -> ApiError:
    return ApiError(504, "upstream_timeout", f"The provider did not finish within {budget:g} s.", retryable=True)


async def _before(deadline: float, budget: float, awaitable: Awaitable[T]) -> T:
    """Await ``awaitable`` unless ``deadline`` passes first. The scope never spans a ``yield``."""
    with anyio.move_on_after(deadline - anyio.current_time()):
        return await awaitable
    raise _timed_out(budget)


async def _release(response: httpx.Response) -> None:
    # Shielded: a cancelled caller must still hand the connection back to the pool (or close it).
    with anyio.CancelScope(shield=True):
        await response.aclose()


def _parse_json(content: bytes | str) -> Any:
    try:
        return json.loads(content)
    except ValueError:
        raise _bad_response("the body is not JSON") from None


class OpenAIProvider:
    """Calls ``{base_url}/chat/completions`` through the service's shared ``httpx.AsyncClient``."""

    name = PROVIDER_NAME

    def __init__(self, http: httpx.AsyncClient, base_url: str, api_key: str | None, *, max_retries: int = 2) -> None:
        self._http = http
        self._url = base_url.rstrip("/") + "/chat/completions"
        self._api_key = api_key or None
        self._max_retries = max_retries
        url = httpx.URL(base_url)
        # Shown in error messages: the endpoint without any credentials in the URL.
        self._endpoint = f"{url.scheme}://{url.host}" + (f":{url.port}" if url.port else "")

    async def complete(
        self, request: CompletionRequest, upstream_model: str, timeout_seconds: float
    ) -> CompletionResponse:
        body = build_request_body(request, upstream_model, stream=False)
        budget = timeout_seconds
        deadline = anyio.current_time() + budget
        with self._translated_errors(budget):
            response = await _before(deadline, budget, self._open(body, deadline))
            try:
                content = await _before(deadline, budget, response.aread())
            finally:
                await _release(response)
        return parse_response(_parse_json(content), request.model, provider=self.name)

    async def stream(
        self, request: CompletionRequest, upstream_model: str, timeout_seconds: float
    ) -> AsyncIterator[CompletionEvent]:
        body = build_request_body(request, upstream_model, stream=True)
        budget = timeout_seconds
        deadline = anyio.current_time() + budget
        with self._translated_errors(budget):
            response = await _before(deadline, budget, self._open(body, deadline))
            try:
                assembler = StreamAssembler(model=request.model, provider=self.name)
                events = EventSource(response).aiter_sse()
                ended = False
                try:
                    while (sse := await _before(deadline, budget, anext(events, None))) is not None:
                        data = sse.data.strip()
                        if data == "[DONE]":
                            ended = True
                            break
                        if data:
                            for event in assembler.feed(_parse_json(data)):
                                yield event
                finally:
                    with anyio.CancelScope(shield=True):
                        await events.aclose()
                if not ended and assembler.finish_reason is None:
                    raise _bad_response("the stream ended before the model finished")
                for event in assembler.finish():
                    yield event
            finally:
                await _release(response)

    async def _open(self, body: dict[str, Any], deadline: float) -> httpx.Response:
        """A successful response with its body unread, after at most ``max_retries`` retries."""
        retrying = AsyncRetrying(
            retry=retry_if_exception_type(_RetryableFailure),
            stop=stop_any(stop_after_attempt(self._max_retries + 1), _StopBefore(deadline)),
            wait=_wait,
            sleep=anyio.sleep,
            before_sleep=self._log_retry,
            reraise=True,
        )
        try:
            async for attempt in retrying:
                with attempt:
                    return await self._send(body, deadline)
        except _RetryableFailure as failure:
            raise failure.error from None
        raise AssertionError("tenacity returns or raises")  # pragma: no cover

    async def _send(self, body: dict[str, Any], deadline: float) -> httpx.Response:
        remaining = max(deadline - anyio.current_time(), 0.001)
        connect = min(self._http.timeout.connect or remaining, remaining)
        request = self._http.build_request(
            "POST",
            self._url,
            json=body,
            headers=self._headers(stream=bool(body.get("stream"))),
            timeout=httpx.Timeout(remaining, connect=connect),
        )
        try:
            response = await self._http.send(request, stream=True)
        except httpx.ConnectTimeout:
            raise _RetryableFailure(self._unreachable("no connection within the connect timeout", 504)) from None
        except httpx.ConnectError as error:
            raise _RetryableFailure(self._unreachable(str(error) or type(error).__name__, 503)) from None
        if response.is_success:
            return response
        try:
            content = await response.aread()
        finally:
            await _release(response)
        failure = translate_error(response.status_code, content, response.headers, upstream_model=str(body["model"]))
        failure.message = self._scrub(failure.message)
        _log.warning("provider_error", status=response.status_code, code=failure.code, endpoint=self._endpoint)
        if response.status_code == 429 or response.status_code >= 500:
            retry_after = retry_after_seconds(response.headers)
            if retry_after is not None and retry_after > RETRY_AFTER_CAP_SECONDS:
                # Retrying sooner would ignore the provider; waiting would hold the caller for that long.
                raise failure
            raise _RetryableFailure(failure, retry_after)
        raise failure

    def _headers(self, *, stream: bool) -> dict[str, str]:
        headers = {"Accept": "text/event-stream" if stream else "application/json"}
        if self._api_key:
            headers["Authorization"] = f"Bearer {self._api_key}"
        return headers

    def _unreachable(self, reason: str, status: int) -> ApiError:
        code = "upstream_timeout" if status == 504 else "upstream_unavailable"
        message = f"Could not connect to the provider at {self._endpoint}: {reason}"
        return ApiError(status, code, message, retryable=True)

    def _scrub(self, text: str) -> str:
        return text.replace(self._api_key, "***") if self._api_key else text

    @staticmethod
    def _log_retry(state: RetryCallState) -> None:
        failure = state.outcome.exception() if state.outcome else None
        _log.warning(
            "provider_retry",
            attempt=state.attempt_number,
            wait_seconds=round(state.upcoming_sleep, 3),
            reason=failure.error.code if isinstance(failure, _RetryableFailure) else repr(failure),
        )

    @contextmanager
    def _translated_errors(self, budget: float) -> Iterator[None]:
        """httpx and SSE failures as the caller's errors; ``ApiError`` passes through."""
        try:
            yield
        except SSEError as error:  # before TransportError: httpx-sse derives it from that
            raise _bad_response(self._scrub(str(error))) from None
        except httpx.TimeoutException:
            raise _timed_out(budget) from None
        except httpx.TransportError as error:
            raise ApiError(
                503,
                "upstream_unavailable",
                f"The connection to the provider at {self._endpoint} failed: {type(error).__name__}",
                retryable=True,
            ) from None
