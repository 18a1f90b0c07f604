"""A scripted OpenAI Chat Completions server: the real wire format, answers from a script.

Serve ``ScriptedOpenAI(...).app`` with ``support.servers.serve_app`` and point a client at
``<url>/v1``. Each ``POST /v1/chat/completions`` takes the next reply of the script (a reply,
or a function of the request body that returns one) and answers it as OpenAI would: a
``chat.completion`` object, or with ``"stream": true`` a stream of ``chat.completion.chunk``
events whose text comes in several chunks and whose tool call arguments are split across
several deltas, then a usage chunk when ``stream_options.include_usage`` is set, then
``data: [DONE]``. ``text_then_hang`` streams its text and then nothing more until the client
goes away; ``wait_for_hangup`` counts those hang-ups with those of ``hang()``.
"""

from __future__ import annotations

import itertools
import json
import re
from collections import deque
from collections.abc import AsyncIterator, Awaitable, Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

import anyio
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse, Response, StreamingResponse
from starlette.routing import Route
from starlette.types import Receive, Scope, Send

from support.context_window import prompt_tokens

__all__ = [
    "ErrorReply",
    "HangAfterTextReply",
    "HangReply",
    "HeldReply",
    "JsonToStreamReply",
    "RawReply",
    "Reply",
    "ScriptedOpenAI",
    "TextReply",
    "ToolCallsReply",
    "error",
    "hang",
    "held",
    "json_even_when_streamed",
    "raw",
    "text",
    "text_then_hang",
    "tool_calls",
]

CREATED = 1_700_000_000
ARGUMENT_FRAGMENT_CHARS = 7


@dataclass(frozen=True)
class TextReply:
    content: str
    delay: float = 0.0
    held_until: anyio.Event | None = None


@dataclass(frozen=True)
class ToolCallsReply:
    calls: tuple[tuple[str, str, dict[str, Any]], ...]
    delay: float = 0.0


@dataclass(frozen=True)
class ErrorReply:
    status: int
    body: dict[str, Any] | None = None
    headers: dict[str, str] = field(default_factory=dict)


@dataclass(frozen=True)
class HangReply:
    pass


@dataclass(frozen=True)
class HangAfterTextReply:
    content: str


@dataclass(frozen=True)
class RawReply:
    body: bytes
    status: int = 200
    content_type: str = "application/json"


@dataclass(frozen=True)
class JsonToStreamReply:
    reply: TextReply | ToolCallsReply


@dataclass(frozen=True)
class HeldReply:
    reply: TextReply | ToolCallsReply
    until: anyio.Event


Reply = (
    TextReply | ToolCallsReply | ErrorReply | HangReply | HangAfterTextReply | RawReply | JsonToStreamReply | HeldReply
)
ReplySource = Reply | Callable[[dict[str, Any]], Reply]


def text(content: str, *, delay: float = 0.0, held_until: anyio.Event | None = None) -> Reply:
    """The assistant answers ``content`` (after ``delay`` seconds, and once ``held_until`` is set: a test's hook on
    when the model answers), finish reason ``stop``."""
    return TextReply(content, delay, held_until)


def tool_calls(*calls: tuple[str, str, dict[str, Any]], delay: float = 0.0) -> Reply:
    """The assistant calls each ``(id, name, arguments)`` in one turn, finish reason ``tool_calls``."""
    return ToolCallsReply(tuple(calls), delay)


def json_even_when_streamed(reply: Reply) -> Reply:
    """``reply`` as one ``chat.completion`` JSON body even to a ``"stream": true`` request, as some
    OpenAI-compatible servers answer when tools are offered."""
    assert isinstance(reply, TextReply | ToolCallsReply)
    return JsonToStreamReply(reply)


def error(status: int, body: dict[str, Any] | None = None, headers: dict[str, str] | None = None) -> Reply:
    """An HTTP error; the body defaults to OpenAI's ``{"error": {message, type, param, code}}``."""
    return ErrorReply(status, body, dict(headers or {}))


def hang() -> Reply:
    """Never answers, until the client goes away."""
    return HangReply()


def held(reply: Reply, until: anyio.Event) -> Reply:
    """``reply``, once ``until`` is set: the test acts between the request's arrival and its answer."""
    assert isinstance(reply, TextReply | ToolCallsReply)
    return HeldReply(reply, until)


def text_then_hang(content: str) -> Reply:
    """A stream request gets the text deltas of ``content`` and then nothing more, not even a finish
    reason, until the client goes away (a model stuck mid-answer); any other request hangs like ``hang()``."""
    return HangAfterTextReply(content)


def raw(body: bytes, *, status: int = 200, content_type: str = "application/json") -> Reply:
    """Exactly these bytes, whatever was asked: for bodies that are not what the API returns."""
    return RawReply(body, status, content_type)


_ERROR_DEFAULTS: dict[int, tuple[str, str | None, str]] = {
    400: ("invalid_request_error", None, "Invalid request."),
    401: ("invalid_request_error", "invalid_api_key", "Incorrect API key provided."),
    403: ("invalid_request_error", "unsupported_country_region_territory", "Country not supported."),
    404: ("invalid_request_error", "model_not_found", "The model does not exist or you do not have access to it."),
    429: ("requests", "rate_limit_exceeded", "Rate limit reached for requests. Please try again later."),
    500: ("server_error", None, "The server had an error while processing your request."),
    503: ("server_error", None, "The engine is currently overloaded, please try again later."),
}


def openai_error_body(status: int, message: str | None = None, code: str | None = None) -> dict[str, Any]:
    kind, default_code, default_message = _ERROR_DEFAULTS.get(status, ("api_error", None, f"HTTP {status}"))
    return {"error": {"message": message or default_message, "type": kind, "param": None, "code": code or default_code}}


_TOOL_NAME = re.compile(r"[a-zA-Z0-9_-]+")


def _invalid_tool_name(body: dict[str, Any]) -> dict[str, Any] | None:
    """OpenAI's 400 for a function name outside ``^[a-zA-Z0-9_-]+$`` or longer than 64 characters."""
    for position, tool in enumerate(body.get("tools") or []):
        name, param = tool["function"]["name"], f"tools[{position}].function.name"
        if len(name) > 64:
            message = (
                f"Invalid '{param}': string too long. Expected a string with maximum length 64, "
                f"but got a string with length {len(name)} instead."
            )
        elif not _TOOL_NAME.fullmatch(name):
            message = (
                f"Invalid '{param}': string does not match pattern. "
                "Expected a string that matches the pattern '^[a-zA-Z0-9_-]+$'."
            )
        else:
            continue
        return {"error": {"message": message, "type": "invalid_request_error", "param": param, "code": "invalid_value"}}
    return None


def _unanswered_tool_calls(body: dict[str, Any]) -> dict[str, Any] | None:
    """OpenAI's 400 for an assistant message whose tool calls the next messages do not all answer, and for a
    tool message that answers no call of the assistant message before it (its words, typo included)."""
    messages = body.get("messages") or []
    owed: list[str] = []
    for position, message in enumerate(messages):
        if message.get("role") == "tool":
            if message.get("tool_call_id") not in owed:
                return _invalid_messages(
                    position,
                    "Invalid parameter: messages with role 'tool' must be a response to a preceeding "
                    "message with 'tool_calls'.",
                )
            owed.remove(message["tool_call_id"])
            continue
        if owed:
            return _invalid_messages(
                position,
                "An assistant message with 'tool_calls' must be followed by tool messages responding to each "
                f"'tool_call_id'. The following tool_call_ids did not have response messages: {', '.join(owed)}",
            )
        owed = [call["id"] for call in message.get("tool_calls") or []] if message.get("role") == "assistant" else []
    if owed:
        return _invalid_messages(
            len(messages) - 1,
            "An assistant message with 'tool_calls' must be followed by tool messages responding to each "
            f"'tool_call_id'. The following tool_call_ids did not have response messages: {', '.join(owed)}",
        )
    return None


def _invalid_image_parts(body: dict[str, Any]) -> dict[str, Any] | None:
    """OpenAI's 400 for content parts it does not take: an ``image_url`` part outside a user message, a part of
    another type, an image URL that is neither https nor a data: URL."""
    for position, message in enumerate(body.get("messages") or []):
        content = message.get("content")
        if not isinstance(content, list):
            continue
        for index, part in enumerate(content):
            kind, param = part.get("type"), f"messages[{position}].content[{index}]"
            if kind == "text" and isinstance(part.get("text"), str):
                continue
            if kind != "image_url":
                text = f"Invalid value: '{kind}'. Supported values are: 'text' and 'image_url'."
            elif message.get("role") != "user":
                text = (
                    f"Invalid 'messages[{position}]'. Image URLs are only allowed for messages with role 'user', "
                    f"but this message with role '{message.get('role')}' contains an image URL."
                )
            elif not str((part.get("image_url") or {}).get("url", "")).startswith(("https://", "data:image/")):
                text = "Invalid image URL: expected a https URL or a base64-encoded data URL."
            else:
                continue
            return {"error": {"message": text, "type": "invalid_request_error", "param": param, "code": None}}
    return None


def _too_long(body: dict[str, Any], window: int | None) -> dict[str, Any] | None:
    """OpenAI's 400 for a prompt longer than the model's context window (its words)."""
    tokens = prompt_tokens(body.get("messages"), body.get("tools"))
    if window is None or tokens <= window:
        return None
    message = (
        f"This model's maximum context length is {window} tokens. However, your messages resulted in {tokens} tokens. "
        "Please reduce the length of the messages."
    )
    refusal = openai_error_body(400, message, "context_length_exceeded")
    refusal["error"]["param"] = "messages"
    return refusal


def _invalid_messages(position: int, message: str) -> dict[str, Any]:
    param = f"messages.[{position}].role"
    return {"error": {"message": message, "type": "invalid_request_error", "param": param, "code": None}}


def _words(value: Any) -> int:
    return len(value.split()) if isinstance(value, str) else 0


def _prompt_tokens(body: dict[str, Any]) -> int:
    messages = body.get("messages") or []
    return sum(_words(m.get("content")) + 4 for m in messages if isinstance(m, dict))


REASONING_TOKENS: dict[str, int] = {"minimal": 0, "low": 64, "medium": 256, "high": 1024}
"""What a request's ``reasoning_effort`` costs in reasoning tokens here (none without it)."""


def _usage(body: dict[str, Any], answer_tokens: int) -> dict[str, Any]:
    """OpenAI's usage: ``completion_tokens`` includes the reasoning tokens, told apart in its details (given
    here only to a request with ``reasoning_effort``, as a compatible server without reasoning does)."""
    prompt = _prompt_tokens(body)
    effort = body.get("reasoning_effort")
    reasoning = REASONING_TOKENS.get(effort, 0) if isinstance(effort, str) else 0
    completion = answer_tokens + reasoning
    usage: dict[str, Any] = {
        "prompt_tokens": prompt,
        "completion_tokens": completion,
        "total_tokens": prompt + completion,
    }
    if isinstance(effort, str):
        usage["prompt_tokens_details"] = {"cached_tokens": 0, "audio_tokens": 0}
        usage["completion_tokens_details"] = {
            "reasoning_tokens": reasoning,
            "audio_tokens": 0,
            "accepted_prediction_tokens": 0,
            "rejected_prediction_tokens": 0,
        }
    return usage


def _arguments_text(arguments: dict[str, Any]) -> str:
    return json.dumps(arguments)


def _sse(payload: dict[str, Any] | str) -> bytes:
    data = payload if isinstance(payload, str) else json.dumps(payload)
    return f"data: {data}\n\n".encode()


def _pieces(content: str) -> list[str]:
    """``content`` as a model streams it: a word (with the space before it) per delta."""
    pieces: list[str] = re.findall(r"\s*\S+|\s+$", content)
    return pieces or [content]


class _StreamThenHang(Response):
    """An event stream that sends ``chunks`` and then waits, without ending, for the client to go away.

    Plain ASGI rather than a ``StreamingResponse``: whether that one watches for a disconnect while
    its body iterator waits depends on the server's ASGI spec version.
    """

    def __init__(self, chunks: list[bytes], wait_for_disconnect: Callable[[Receive], Awaitable[None]]) -> None:
        self.status_code = 200
        self.background = None
        # No content-length: the body is chunked and never ends.
        self.raw_headers = [(b"content-type", b"text/event-stream; charset=utf-8")]
        self._chunks = chunks
        self._wait_for_disconnect = wait_for_disconnect

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        await send({"type": "http.response.start", "status": self.status_code, "headers": self.raw_headers})
        for chunk in self._chunks:
            await send({"type": "http.response.body", "body": chunk, "more_body": True})
        await self._wait_for_disconnect(receive)


class ScriptedOpenAI:
    """``POST /v1/chat/completions`` answered from a script; ``requests`` holds the bodies received."""

    def __init__(
        self,
        replies: Sequence[ReplySource] = (),
        *,
        api_key: str | None = "test-key",
        context_window: int | None = None,
    ) -> None:
        """``context_window``: a prompt longer than this many tokens (``support.context_window``) is refused as OpenAI
        refuses one, 400 ``context_length_exceeded``, before any reply of the script is taken."""
        self.api_key = api_key
        self.context_window = context_window
        self.requests: list[dict[str, Any]] = []
        self._script: deque[ReplySource] = deque(replies)
        self._ids = itertools.count(1)
        self._hangups = 0
        self._hangup: anyio.Event | None = None
        self._arrival: anyio.Event | None = None
        self.app = Starlette(routes=[Route("/v1/chat/completions", self._chat_completions, methods=["POST"])])

    def push(self, *replies: ReplySource) -> None:
        self._script.extend(replies)

    async def wait_for_hangup(self, count: int = 1) -> None:
        """Returns once ``count`` clients have gone away while waiting on a ``hang()`` reply."""
        while self._hangups < count:
            self._hangup = self._hangup or anyio.Event()
            await self._hangup.wait()

    async def wait_for_request(self, count: int = 1) -> None:
        """Returns once ``requests`` holds at least ``count`` bodies (bound it with a timeout)."""
        while len(self.requests) < count:
            self._arrival = self._arrival or anyio.Event()
            await self._arrival.wait()

    async def _chat_completions(self, request: Request) -> Response:
        try:
            body = json.loads(await request.body())
        except ValueError:
            return JSONResponse(openai_error_body(400, "We could not parse the JSON body of your request."), 400)
        if not isinstance(body, dict):
            return JSONResponse(openai_error_body(400, "The body must be a JSON object."), 400)
        self.requests.append(body)
        if self._arrival is not None:
            self._arrival.set()
            self._arrival = None
        if self.api_key is not None and request.headers.get("authorization") != f"Bearer {self.api_key}":
            given = request.headers.get("authorization", "").removeprefix("Bearer ")
            # Real OpenAI quotes part of the key; this one quotes all of it, so that a test can
            # prove the key never reaches the service's caller.
            message = f"Incorrect API key provided: {given}. You can find your API key at https://platform.openai.com."
            return JSONResponse(openai_error_body(401, message), 401)
        refusal = _invalid_tool_name(body) or _unanswered_tool_calls(body) or _invalid_image_parts(body)
        if refusal is not None:
            return JSONResponse(refusal, 400)
        if (refusal := _too_long(body, self.context_window)) is not None:
            return JSONResponse(refusal, 400)
        if not self._script:
            return JSONResponse(openai_error_body(500, "The scripted server ran out of replies."), 500)
        source = self._script.popleft()
        reply = source(body) if callable(source) else source
        return await self._answer(request, body, reply)

    async def _wait_for_disconnect(self, receive: Receive) -> None:
        while (await receive())["type"] != "http.disconnect":
            pass
        self._hangups += 1
        if self._hangup is not None:
            self._hangup.set()
            self._hangup = None

    async def _answer(self, request: Request, body: dict[str, Any], reply: Reply) -> Response:
        if isinstance(reply, HeldReply):
            await reply.until.wait()
            reply = reply.reply
        if isinstance(reply, HangReply) or (isinstance(reply, HangAfterTextReply) and not body.get("stream")):
            await self._wait_for_disconnect(request.receive)
            return Response(status_code=499)
        if isinstance(reply, HangAfterTextReply):
            completion_id = f"chatcmpl-scripted{next(self._ids)}"
            opening = [self._chunk(completion_id, body, {"role": "assistant", "content": "", "refusal": None})]
            deltas = [self._chunk(completion_id, body, {"content": piece}) for piece in _pieces(reply.content)]
            return _StreamThenHang([*opening, *deltas], self._wait_for_disconnect)
        if isinstance(reply, RawReply):
            return Response(reply.body, status_code=reply.status, media_type=reply.content_type)
        if isinstance(reply, ErrorReply):
            payload = reply.body if reply.body is not None else openai_error_body(reply.status)
            return JSONResponse(payload, status_code=reply.status, headers=reply.headers)
        completion_id = f"chatcmpl-scripted{next(self._ids)}"
        if isinstance(reply, JsonToStreamReply):
            return JSONResponse(self._completion(completion_id, body, reply.reply))
        if reply.delay:
            await anyio.sleep(reply.delay)  # simulated slowness of the model
        if isinstance(reply, TextReply) and reply.held_until is not None:
            await reply.held_until.wait()
        if body.get("stream"):
            return StreamingResponse(self._chunks(completion_id, body, reply), media_type="text/event-stream")
        return JSONResponse(self._completion(completion_id, body, reply))

    def _completion(
        self, completion_id: str, body: dict[str, Any], reply: TextReply | ToolCallsReply
    ) -> dict[str, Any]:
        message: dict[str, Any] = {"role": "assistant", "content": None, "refusal": None, "annotations": []}
        if isinstance(reply, TextReply):
            message["content"] = reply.content
            finish, produced = "stop", _words(reply.content)
        else:
            message["tool_calls"] = [
                {"id": call_id, "type": "function", "function": {"name": name, "arguments": _arguments_text(args)}}
                for call_id, name, args in reply.calls
            ]
            finish, produced = "tool_calls", sum(len(_arguments_text(args)) // 4 + 1 for _, _, args in reply.calls)
        return {
            "id": completion_id,
            "object": "chat.completion",
            "created": CREATED,
            "model": body.get("model"),
            "choices": [{"index": 0, "message": message, "logprobs": None, "finish_reason": finish}],
            "usage": _usage(body, produced),
            "service_tier": "default",
            "system_fingerprint": "fp_scripted",
        }

    @staticmethod
    def _chunk(completion_id: str, body: dict[str, Any], delta: dict[str, Any], finish: str | None = None) -> bytes:
        """One ``chat.completion.chunk`` event carrying ``delta``."""
        payload: dict[str, Any] = {
            "id": completion_id,
            "object": "chat.completion.chunk",
            "created": CREATED,
            "model": body.get("model"),
            "service_tier": "default",
            "system_fingerprint": "fp_scripted",
            "choices": [{"index": 0, "delta": delta, "logprobs": None, "finish_reason": finish}],
        }
        if (body.get("stream_options") or {}).get("include_usage"):
            payload["usage"] = None
        return _sse(payload)

    async def _chunks(
        self, completion_id: str, body: dict[str, Any], reply: TextReply | ToolCallsReply
    ) -> AsyncIterator[bytes]:
        with_usage = bool((body.get("stream_options") or {}).get("include_usage"))

        def chunk(delta: dict[str, Any], finish: str | None = None) -> bytes:
            return self._chunk(completion_id, body, delta, finish)

        if isinstance(reply, TextReply):
            yield chunk({"role": "assistant", "content": "", "refusal": None})
            for piece in _pieces(reply.content):
                yield chunk({"content": piece})
            finish, produced = "stop", _words(reply.content)
        else:
            for index, (call_id, name, args) in enumerate(reply.calls):
                opening = {
                    "index": index,
                    "id": call_id,
                    "type": "function",
                    "function": {"name": name, "arguments": ""},
                }
                if index == 0:
                    yield chunk({"role": "assistant", "content": None, "tool_calls": [opening], "refusal": None})
                else:
                    yield chunk({"tool_calls": [opening]})
                arguments = _arguments_text(args)
                for start in range(0, len(arguments), ARGUMENT_FRAGMENT_CHARS):
                    fragment = arguments[start : start + ARGUMENT_FRAGMENT_CHARS]
                    yield chunk({"tool_calls": [{"index": index, "function": {"arguments": fragment}}]})
            finish = "tool_calls"
            produced = sum(len(_arguments_text(args)) // 4 + 1 for _, _, args in reply.calls)
        yield chunk({}, finish)
        if with_usage:
            yield _sse(
                {
                    "id": completion_id,
                    "object": "chat.completion.chunk",
                    "created": CREATED,
                    "model": body.get("model"),
                    "service_tier": "default",
                    "system_fingerprint": "fp_scripted",
                    "choices": [],
                    "usage": _usage(body, produced),
                }
            )
        yield _sse("[DONE]")
