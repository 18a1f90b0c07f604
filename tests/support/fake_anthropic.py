"""A scripted Anthropic Messages API: the real wire format, answers from a script, Anthropic's request rules.

Serve ``ScriptedAnthropic(...).app`` with ``support.servers.serve_app`` and point a client at the
base URL (the server answers ``POST /v1/messages``). Each request is checked as Anthropic checks
it (``request_problem``: ``x-api-key``, ``anthropic-version``, alternating turns that start with
the user, every ``tool_use`` answered first thing in the next turn, tools defined when tool
blocks are used, thinking rules and signatures) and a broken one gets Anthropic's 400; a good
one takes the next reply of the script (a reply, or a function of the request body that returns
one) and is answered as Anthropic would: a ``message`` object, or with ``"stream": true`` the
event stream (``message_start``, ``content_block_start`` / ``_delta`` / ``_stop`` per block with
text split by word and tool input split into ``input_json_delta`` fragments, ``ping``,
``message_delta``, ``message_stop``).
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import itertools
import json
import re
from collections import deque
from collections.abc import AsyncIterator, Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import anyio
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse, Response, StreamingResponse
from starlette.routing import Route

from support.context_window import prompt_tokens

__all__ = [
    "ANTHROPIC_VERSION",
    "ErrorReply",
    "HangReply",
    "MessageReply",
    "RawReply",
    "Reply",
    "ScriptedAnthropic",
    "StreamErrorReply",
    "error",
    "error_body",
    "hang",
    "raw",
    "redacted_thinking",
    "request_problem",
    "signature_of",
    "stream_error",
    "text",
    "thinking",
    "tool_calls",
]

ANTHROPIC_VERSION = "2023-06-01"
INPUT_FRAGMENT_CHARS = 7
TOOL_NAME = re.compile(r"[a-zA-Z0-9_-]{1,128}")
TOOL_USE_ID = re.compile(r"[a-zA-Z0-9_-]+")


# --- replies -----------------------------------------------------------------------------------


@dataclass(frozen=True)
class MessageReply:
    content: tuple[dict[str, Any], ...]
    stop_reason: str
    delay: float = 0.0


@dataclass(frozen=True)
class ErrorReply:
    status: int
    body: dict[str, Any]
    headers: dict[str, str] = field(default_factory=dict)


@dataclass(frozen=True)
class StreamErrorReply:
    """A stream that starts, sends ``text`` and then an ``error`` event (Anthropic overloaded mid-stream)."""

    error_type: str
    message: str
    text: str = ""


@dataclass(frozen=True)
class RawReply:
    body: bytes
    status: int = 200
    content_type: str = "application/json"


@dataclass(frozen=True)
class HangReply:
    pass


Reply = MessageReply | ErrorReply | StreamErrorReply | RawReply | HangReply
ReplySource = Reply | Callable[[dict[str, Any]], Reply]


def signature_of(thinking_text: str) -> str:
    """The signature this server puts on a thinking block (and checks when the block comes back)."""
    return "EqQBCkYIBxgCKkA" + hashlib.sha256(thinking_text.encode()).hexdigest()[:40]


def thinking(content: str) -> dict[str, Any]:
    """A signed ``thinking`` block, for ``text(..., reasoning=[...])`` and ``tool_calls(..., reasoning=[...])``."""
    return {"type": "thinking", "thinking": content, "signature": signature_of(content)}


def redacted_thinking(data: str) -> dict[str, Any]:
    return {"type": "redacted_thinking", "data": data}


def text(
    content: str, *, reasoning: Sequence[dict[str, Any]] = (), stop_reason: str = "end_turn", delay: float = 0.0
) -> Reply:
    """The assistant answers ``content`` after the given thinking blocks."""
    return MessageReply((*reasoning, {"type": "text", "text": content}), stop_reason, delay)


def tool_calls(
    *calls: tuple[str, str, dict[str, Any]],
    preamble: str | None = None,
    reasoning: Sequence[dict[str, Any]] = (),
    delay: float = 0.0,
) -> Reply:
    """The assistant calls each ``(id, name, input)`` in one turn, after its thinking and ``preamble`` text."""
    blocks: list[dict[str, Any]] = list(reasoning)
    if preamble:
        blocks.append({"type": "text", "text": preamble})
    blocks.extend({"type": "tool_use", "id": call_id, "name": name, "input": args} for call_id, name, args in calls)
    return MessageReply(tuple(blocks), "tool_use", delay)


_ERROR_DEFAULTS: dict[int, tuple[str, str]] = {
    400: ("invalid_request_error", "Invalid request."),
    401: ("authentication_error", "invalid x-api-key"),
    403: ("permission_error", "Your API key does not have permission to use the specified resource."),
    404: ("not_found_error", "Not found"),
    413: ("request_too_large", "Request exceeds the maximum allowed number of bytes."),
    429: ("rate_limit_error", "Number of request tokens has exceeded your per-minute rate limit."),
    500: ("api_error", "Internal server error"),
    503: ("api_error", "Service unavailable"),
    529: ("overloaded_error", "Overloaded"),
}


def error_body(status: int, message: str | None = None, error_type: str | None = None) -> dict[str, Any]:
    default_type, default_message = _ERROR_DEFAULTS.get(status, ("api_error", f"HTTP {status}"))
    return {
        "type": "error",
        "error": {"type": error_type or default_type, "message": message or default_message},
        "request_id": "req_011CScripted",
    }


def error(
    status: int, *, message: str | None = None, error_type: str | None = None, headers: dict[str, str] | None = None
) -> Reply:
    """An HTTP error with Anthropic's ``{"type": "error", "error": {type, message}}`` body."""
    return ErrorReply(status, error_body(status, message, error_type), dict(headers or {}))


def stream_error(error_type: str = "overloaded_error", message: str = "Overloaded", *, after_text: str = "") -> Reply:
    """A stream request gets a 200, ``after_text`` as text deltas, then an ``error`` event."""
    return StreamErrorReply(error_type, message, after_text)


def raw(body: bytes, *, status: int = 200, content_type: str = "application/json") -> Reply:
    """Exactly these bytes, whatever was asked: for bodies that are not what the API returns."""
    return RawReply(body, status, content_type)


def hang() -> Reply:
    """Never answers, until the client goes away."""
    return HangReply()


# --- Anthropic's request rules ---------------------------------------------------------------


def _blocks(content: Any) -> list[dict[str, Any]]:
    if isinstance(content, str):
        return [{"type": "text", "text": content}]
    return [block for block in content if isinstance(block, dict)] if isinstance(content, list) else []


def _tool_use_ids(message: Mapping[str, Any]) -> list[str]:
    return [b.get("id", "") for b in _blocks(message.get("content")) if b.get("type") == "tool_use"]


def _tools_problem(body: Mapping[str, Any]) -> str | None:
    tools = body.get("tools")
    if tools is None:
        return "tool_choice: tool_choice may only be specified while providing tools" if "tool_choice" in body else None
    if not isinstance(tools, list):
        return "tools: Input should be a valid list"
    names = []
    for index, tool in enumerate(tools):
        if not isinstance(tool, dict) or not isinstance(tool.get("name"), str) or not TOOL_NAME.fullmatch(tool["name"]):
            return f"tools.{index}.custom.name: String should match pattern '^[a-zA-Z0-9_-]{{1,128}}$'"
        schema = tool.get("input_schema")
        if not isinstance(schema, dict) or schema.get("type") != "object":
            return f"tools.{index}.custom.input_schema.type: Input should be 'object'"
        if "properties" in schema and not isinstance(schema["properties"], dict):
            return f"tools.{index}.custom.input_schema.properties: Input should be a valid dictionary"
        if "description" in tool and not isinstance(tool["description"], str):
            return f"tools.{index}.custom.description: Input should be a valid string"
        names.append(tool["name"])
    if len(set(names)) != len(names):
        return "tools: Tool names must be unique."
    choice = body.get("tool_choice")
    if choice is not None:
        if not isinstance(choice, dict) or choice.get("type") not in ("auto", "any", "tool", "none"):
            return "tool_choice: Input tag does not match any of the expected tags: 'auto', 'any', 'tool', 'none'"
        if choice["type"] == "tool" and choice.get("name") not in names:
            return f"tool_choice: Tool '{choice.get('name')}' not found in provided tools"
    return None


IMAGE_MEDIA_TYPES = ("image/jpeg", "image/png", "image/gif", "image/webp")


def _image_problem(where: str, source: Any) -> str | None:
    """The Messages API's checks of an image block's ``source``: base64 data of a known type, or a URL."""
    if not isinstance(source, dict):
        return f"{where}.source: Field required"
    if source.get("type") == "url":
        return None if isinstance(source.get("url"), str) else f"{where}.source.url: Field required"
    if source.get("type") != "base64":
        return f"{where}.source.type: Input tag '{source.get('type')}' does not match 'base64', 'url'"
    if source.get("media_type") not in IMAGE_MEDIA_TYPES:
        return f"{where}.source.media_type: Input should be 'image/jpeg', 'image/png', 'image/gif' or 'image/webp'"
    try:
        base64.b64decode(source.get("data", ""), validate=True)
    except (binascii.Error, ValueError):
        return f"{where}.source.data: Invalid base64 data"
    return None


def _block_problem(role: str, where: str, block: Mapping[str, Any], signatures: Mapping[str, str] | None) -> str | None:
    kind = block.get("type")
    if kind == "text":
        if not isinstance(block.get("text"), str) or not block["text"].strip():
            return "messages: text content blocks must contain non-whitespace text"
    elif kind == "tool_use":
        if role != "assistant":
            return f"{where}: tool_use blocks may only appear in assistant messages"
        if not isinstance(block.get("id"), str) or not TOOL_USE_ID.fullmatch(block["id"]):
            return f"{where}.id: String should match pattern '^[a-zA-Z0-9_-]+$'"
        if not isinstance(block.get("name"), str) or not block["name"]:
            return f"{where}.name: Field required"
        if not isinstance(block.get("input"), dict):
            return f"{where}.tool_use.input: Input should be a valid dictionary"
    elif kind == "image":
        if role != "user":
            return f"{where}: image blocks may only appear in user messages"
        return _image_problem(where, block.get("source"))
    elif kind == "tool_result":
        if role != "user":
            return f"{where}: tool_result blocks may only appear in user messages"
        content = block.get("content")
        if content is not None and not isinstance(content, (str, list)):
            return f"{where}.content: Input should be a valid string or list"
        for position, inner in enumerate(content if isinstance(content, list) else []):
            inner_where = f"{where}.content.{position}"
            if inner.get("type") == "image":
                problem = _image_problem(inner_where, inner.get("source"))
            elif inner.get("type") != "text" or not isinstance(inner.get("text"), str):
                problem = f"{inner_where}.type: Input tag '{inner.get('type')}' does not match 'text', 'image'"
            else:
                problem = None
            if problem:
                return problem
        if "is_error" in block and not isinstance(block["is_error"], bool):
            return f"{where}.is_error: Input should be a valid boolean"
    elif kind == "thinking":
        if role != "assistant":
            return f"{where}: thinking blocks may only appear in assistant messages"
        signature, content = block.get("signature"), block.get("thinking")
        if not isinstance(signature, str) or not isinstance(content, str):
            return f"{where}.signature: Field required"
        if signatures is not None and signatures.get(signature) != content:
            return f"{where}: Invalid `signature` in `thinking` block"
    elif kind == "redacted_thinking":
        data = block.get("data")
        if role != "assistant" or not isinstance(data, str) or (signatures is not None and data not in signatures):
            return f"{where}: Invalid `data` in `redacted_thinking` block"
    else:
        return f"{where}.type: Input tag '{kind}' found using 'type' does not match any of the expected tags"
    return None


def _messages_problem(messages: list[Any], signatures: Mapping[str, str] | None) -> str | None:
    if not messages:
        return "messages: at least one message is required"
    seen_ids: set[str] = set()
    for index, message in enumerate(messages):
        if not isinstance(message, dict) or message.get("role") not in ("user", "assistant"):
            return f"messages.{index}.role: Input should be 'user' or 'assistant'"
        role, expected = message["role"], "user" if index % 2 == 0 else "assistant"
        if index == 0 and role != "user":
            return 'messages: first message must use the "user" role'
        if role != expected:
            return 'messages: roles must alternate between "user" and "assistant", but found multiple consecutive'
        content = message.get("content")
        blocks = _blocks(content)
        final_assistant = role == "assistant" and index == len(messages) - 1
        if not blocks and not final_assistant:
            return (
                f"messages.{index}: all messages must have non-empty content except for the optional final "
                "assistant message"
            )
        for position, block in enumerate(blocks):
            problem = _block_problem(role, f"messages.{index}.content.{position}", block, signatures)
            if problem:
                return problem
        kinds = [block.get("type") for block in blocks]
        if any(kind in ("thinking", "redacted_thinking") for kind in kinds) and kinds[0] not in (
            "thinking",
            "redacted_thinking",
        ):
            return (
                f"messages.{index}.content.0: If an assistant message contains any thinking blocks, the first "
                f"block must be thinking or redacted_thinking. Found {kinds[0]}."
            )
        if final_assistant and blocks and kinds[-1] == "text" and blocks[-1]["text"] != blocks[-1]["text"].rstrip():
            return "messages: final assistant content cannot end with trailing whitespace"
        ids = _tool_use_ids(message)
        for tool_use_id in ids:
            if tool_use_id in seen_ids:
                return f"messages.{index}: `tool_use` ids must be unique: {tool_use_id}"
            seen_ids.add(tool_use_id)
        if role == "user":
            asked = _tool_use_ids(messages[index - 1]) if index else []
            for position, block in enumerate(blocks):
                if block.get("type") == "tool_result" and block.get("tool_use_id") not in asked:
                    return (
                        f"messages.{index}.content.{position}: unexpected `tool_use_id` found in `tool_result` blocks: "
                        f"{block.get('tool_use_id')}. Each `tool_result` block must have a corresponding `tool_use` "
                        "block in the previous message."
                    )
        if ids:
            if index + 1 == len(messages):
                return (
                    f"messages.{index}: `tool_use` ids were found without `tool_result` blocks immediately after: "
                    f"{', '.join(ids)}. Each `tool_use` block must have a corresponding `tool_result` block in the "
                    "next message."
                )
            following = _blocks(messages[index + 1].get("content"))[: len(ids)]
            if sorted(b.get("tool_use_id", "") for b in following if b.get("type") == "tool_result") != sorted(ids):
                return (
                    f"messages.{index + 1}: Did not find {len(ids)} `tool_result` block(s) at the beginning of this "
                    "message. Messages following `tool_use` blocks must begin with a matching number of "
                    "`tool_result` blocks."
                )
    return None


def _thinking_problem(body: Mapping[str, Any], messages: list[dict[str, Any]]) -> str | None:
    config = body.get("thinking")
    if config is None or (isinstance(config, dict) and config.get("type") == "disabled"):
        last = messages[-1]
        if last["role"] == "assistant" and any(
            b.get("type") in ("thinking", "redacted_thinking") for b in _blocks(last.get("content"))
        ):
            return (
                f"messages.{len(messages) - 1}.content.0: When thinking is disabled, an `assistant` message in the "
                "final position cannot contain `thinking`. To use thinking blocks, enable `thinking` in your request."
            )
        return None
    if not isinstance(config, dict) or config.get("type") != "enabled":
        return "thinking.type: Input should be 'enabled' or 'disabled'"
    budget = config.get("budget_tokens")
    if not isinstance(budget, int) or budget < 1024:
        return "thinking.enabled.budget_tokens: Input should be greater than or equal to 1024"
    if budget >= body["max_tokens"]:
        return "`max_tokens` must be greater than `thinking.budget_tokens`."
    if body.get("temperature") not in (None, 1):
        return "`temperature` may only be set to 1 when thinking is enabled."
    if isinstance(body.get("tool_choice"), dict) and body["tool_choice"].get("type") in ("any", "tool"):
        return "Thinking may not be enabled when `tool_choice` forces tool use."
    # The current assistant turn (a tool-use loop is one turn) must start with thinking.
    start = 0
    for index, message in enumerate(messages):
        kinds = [b.get("type") for b in _blocks(message.get("content"))]
        if message["role"] == "user" and "tool_result" not in kinds:
            start = index
    first_reply = next((i for i in range(start, len(messages)) if messages[i]["role"] == "assistant"), None)
    if first_reply is not None:
        kinds = [b.get("type") for b in _blocks(messages[first_reply].get("content"))]
        if not kinds or kinds[0] not in ("thinking", "redacted_thinking"):
            return (
                f"messages.{first_reply}.content.0.type: Expected `thinking` or `redacted_thinking`, but found "
                f"`{kinds[0] if kinds else 'nothing'}`. When `thinking` is enabled, a final `assistant` message must "
                "start with a thinking block (preceeding the lastmost set of `tool_use` and `tool_result` blocks). "
                "We recommend you include thinking blocks from previous turns. To avoid this requirement, disable "
                "`thinking`."
            )
    return None


def request_problem(body: Any, signatures: Mapping[str, str] | None = None) -> str | None:
    """What Anthropic would say about this ``POST /v1/messages`` body with a 400, or ``None`` when it accepts it.

    ``signatures`` maps the thinking signatures (and redacted data) the server gave out to their text;
    ``None`` accepts any signature.
    """
    if not isinstance(body, dict):
        return "The request body is not valid JSON."
    if not isinstance(body.get("model"), str) or not body["model"]:
        return "model: Field required"
    if not isinstance(body.get("max_tokens"), int) or body["max_tokens"] < 1:
        return "max_tokens: Field required"
    system = body.get("system")
    if system is not None and not isinstance(system, (str, list)):
        return "system: Input should be a valid string or list"
    if "stream" in body and not isinstance(body["stream"], bool):
        return "stream: Input should be a valid boolean"
    temperature = body.get("temperature")
    if temperature is not None and (not isinstance(temperature, (int, float)) or not 0 <= temperature <= 1):
        return "temperature: Input should be less than or equal to 1"
    messages = body.get("messages")
    if not isinstance(messages, list):
        return "messages: Field required"
    problem = _tools_problem(body) or _messages_problem(messages, signatures)
    if problem:
        return problem
    uses_tools = any(
        b.get("type") in ("tool_use", "tool_result") for message in messages for b in _blocks(message.get("content"))
    )
    if uses_tools and not body.get("tools"):
        return "Requests which include `tool_use` or `tool_result` blocks must define tools."
    return _thinking_problem(body, messages)


# --- the server --------------------------------------------------------------------------------


def _words(value: Any) -> int:
    return len(value.split()) if isinstance(value, str) else 0


def _input_tokens(body: Mapping[str, Any]) -> int:
    messages = body.get("messages") or []
    counted = sum(_words(b.get("text")) + _words(b.get("content")) for m in messages for b in _blocks(m["content"]))
    return counted + 4 * len(messages) + _words(body.get("system"))


def _output_tokens(content: Sequence[Mapping[str, Any]]) -> int:
    return sum(
        _words(block.get("text")) + _words(block.get("thinking")) + len(json.dumps(block.get("input", ""))) // 4
        for block in content
    )


def _sse(payload: Mapping[str, Any]) -> bytes:
    return f"event: {payload['type']}\ndata: {json.dumps(payload)}\n\n".encode()


def _pieces(content: str) -> list[str]:
    """``content`` as a model streams it: a word (with the space before it) per delta."""
    pieces: list[str] = re.findall(r"\s*\S+|\s+$", content)
    return pieces or [content]


class ScriptedAnthropic:
    """``POST /v1/messages`` answered from a script.

    ``requests`` holds the bodies received and ``headers`` their headers (lower-case names), the
    rejected ones included.
    """

    def __init__(
        self,
        replies: Sequence[ReplySource] = (),
        *,
        api_key: str | None = "test-key",
        context_window: int | None = None,
    ) -> None:
        """``context_window``: a prompt longer than this many tokens (``support.context_window``) is refused as
        Anthropic refuses one: 400 ``invalid_request_error`` "prompt is too long: N tokens > M maximum"."""
        self.api_key = api_key
        self.context_window = context_window
        self.requests: list[dict[str, Any]] = []
        self.headers: list[dict[str, str]] = []
        self.signatures: dict[str, str] = {}
        """Signatures (and redacted data) given out, to their thinking text: a replayed block must match."""
        self._script: deque[ReplySource] = deque(replies)
        self._ids = itertools.count(1)
        self._arrival: anyio.Event | None = None
        self.app = Starlette(routes=[Route("/v1/messages", self._messages, methods=["POST"])])

    def push(self, *replies: ReplySource) -> None:
        self._script.extend(replies)

    async def wait_for_request(self, count: int = 1) -> None:
        """Returns once ``requests`` holds at least ``count`` bodies (bound it with a timeout)."""
        while len(self.requests) < count:
            self._arrival = self._arrival or anyio.Event()
            await self._arrival.wait()

    async def _messages(self, request: Request) -> Response:
        try:
            body = json.loads(await request.body())
        except ValueError:
            return JSONResponse(error_body(400, "The request body is not valid JSON."), 400)
        if not isinstance(body, dict):
            return JSONResponse(error_body(400, "The request body must be a JSON object."), 400)
        self.requests.append(body)
        self.headers.append({name.lower(): value for name, value in request.headers.items()})
        if self._arrival is not None:
            self._arrival.set()
            self._arrival = None
        given = request.headers.get("x-api-key")
        if self.api_key is not None and given != self.api_key:
            # Anthropic says "invalid x-api-key"; this server quotes the key, so that a test can prove
            # the key never reaches the service's caller.
            return JSONResponse(error_body(401, f"invalid x-api-key: {given}"), 401)
        if request.headers.get("anthropic-version") != ANTHROPIC_VERSION:
            return JSONResponse(error_body(400, "anthropic-version: header is required"), 400)
        if not request.headers.get("content-type", "").startswith("application/json"):
            return JSONResponse(error_body(400, "content-type: must be application/json"), 400)
        problem = request_problem(body, self.signatures)
        if problem is not None:
            return JSONResponse(error_body(400, problem), 400)
        tokens = prompt_tokens(body.get("system"), body.get("messages"), body.get("tools"))
        if self.context_window is not None and tokens > self.context_window:
            message = f"prompt is too long: {tokens} tokens > {self.context_window} maximum"
            return JSONResponse(error_body(400, message, "invalid_request_error"), 400)
        if not self._script:
            return JSONResponse(error_body(500, "The scripted server ran out of replies."), 500)
        source = self._script.popleft()
        reply = source(body) if callable(source) else source
        return await self._answer(request, body, reply)

    async def _answer(self, request: Request, body: dict[str, Any], reply: Reply) -> Response:
        if isinstance(reply, HangReply):
            while (await request.receive())["type"] != "http.disconnect":
                pass
            return Response(status_code=499)
        if isinstance(reply, RawReply):
            return Response(reply.body, status_code=reply.status, media_type=reply.content_type)
        if isinstance(reply, ErrorReply):
            return JSONResponse(reply.body, status_code=reply.status, headers=reply.headers)
        message_id = f"msg_01Scripted{next(self._ids):04d}"
        if isinstance(reply, StreamErrorReply):
            if not body.get("stream"):
                return JSONResponse(error_body(529, reply.message, reply.error_type), 529)
            return StreamingResponse(self._failing_events(message_id, body, reply), media_type="text/event-stream")
        for block in reply.content:
            if block["type"] == "thinking":
                self.signatures[block["signature"]] = block["thinking"]
            elif block["type"] == "redacted_thinking":
                self.signatures[block["data"]] = ""
        if reply.delay:
            await anyio.sleep(reply.delay)  # simulated slowness of the model
        if body.get("stream"):
            return StreamingResponse(self._events(message_id, body, reply), media_type="text/event-stream")
        return JSONResponse(
            {
                "id": message_id,
                "type": "message",
                "role": "assistant",
                "model": body["model"],
                "content": list(reply.content),
                "stop_reason": reply.stop_reason,
                "stop_sequence": None,
                "usage": self._usage(body, _output_tokens(reply.content)),
            }
        )

    @staticmethod
    def _usage(body: Mapping[str, Any], output_tokens: int) -> dict[str, Any]:
        return {
            "input_tokens": _input_tokens(body),
            "cache_creation_input_tokens": 0,
            "cache_read_input_tokens": 0,
            "output_tokens": output_tokens,
        }

    def _message_start(self, message_id: str, body: Mapping[str, Any]) -> bytes:
        return _sse(
            {
                "type": "message_start",
                "message": {
                    "id": message_id,
                    "type": "message",
                    "role": "assistant",
                    "model": body["model"],
                    "content": [],
                    "stop_reason": None,
                    "stop_sequence": None,
                    "usage": self._usage(body, 1),
                },
            }
        )

    async def _events(self, message_id: str, body: Mapping[str, Any], reply: MessageReply) -> AsyncIterator[bytes]:
        yield self._message_start(message_id, body)
        for index, block in enumerate(reply.content):
            for event in self._block_events(index, block):
                yield _sse(event)
            if index == 0:
                yield _sse({"type": "ping"})
        yield _sse(
            {
                "type": "message_delta",
                "delta": {"stop_reason": reply.stop_reason, "stop_sequence": None},
                "usage": {"output_tokens": _output_tokens(reply.content)},
            }
        )
        yield _sse({"type": "message_stop"})

    @staticmethod
    def _block_events(index: int, block: Mapping[str, Any]) -> list[dict[str, Any]]:
        def delta(payload: dict[str, Any]) -> dict[str, Any]:
            return {"type": "content_block_delta", "index": index, "delta": payload}

        kind = block["type"]
        if kind == "text":
            start: dict[str, Any] = {"type": "text", "text": ""}
            deltas = [delta({"type": "text_delta", "text": piece}) for piece in _pieces(block["text"])]
        elif kind == "thinking":
            start = {"type": "thinking", "thinking": ""}
            deltas = [delta({"type": "thinking_delta", "thinking": piece}) for piece in _pieces(block["thinking"])]
            deltas.append(delta({"type": "signature_delta", "signature": block["signature"]}))
        elif kind == "redacted_thinking":
            start, deltas = dict(block), []
        else:  # tool_use: the input arrives as JSON text in fragments, the first one empty
            start = {"type": "tool_use", "id": block["id"], "name": block["name"], "input": {}}
            encoded = json.dumps(block["input"]) if block["input"] else ""
            fragments = [""] + [
                encoded[i : i + INPUT_FRAGMENT_CHARS] for i in range(0, len(encoded), INPUT_FRAGMENT_CHARS)
            ]
            deltas = [delta({"type": "input_json_delta", "partial_json": fragment}) for fragment in fragments]
        return [
            {"type": "content_block_start", "index": index, "content_block": start},
            *deltas,
            {"type": "content_block_stop", "index": index},
        ]

    async def _failing_events(
        self, message_id: str, body: Mapping[str, Any], reply: StreamErrorReply
    ) -> AsyncIterator[bytes]:
        yield self._message_start(message_id, body)
        if reply.text:
            for event in self._block_events(0, {"type": "text", "text": reply.text})[:-1]:
                yield _sse(event)
        yield _sse({"type": "error", "error": {"type": reply.error_type, "message": reply.message}})
