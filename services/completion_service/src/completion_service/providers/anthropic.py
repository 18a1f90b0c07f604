"""Anthropic Messages API (``POST /v1/messages``), extended thinking included.

The first half is pure translation between the neutral wire models and the Messages JSON:
system prompts become the top-level ``system``; turns alternate user/assistant and start with
the user; the tool results of one assistant turn go back together, first, in the next user
turn; thinking blocks come back unchanged. The second half, ``AnthropicProvider``, says how a
call is made; the shared ``HttpAdapter`` makes it.
"""

from __future__ import annotations

import hashlib
import json
import re
from collections import deque
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal

import httpx

from completion_service.controls import thinking_budget
from completion_service.providers._adapter import HttpAdapter, Outbound
from completion_service.providers._errors import MAX_MESSAGE_CHARS, bad_response, provider_error
from completion_service.providers._transport import Upstream
from completion_service.providers.anthropic_schema import input_schema
from completion_service.providers.tool_names import NameRule
from suite_common.errors import ApiError
from suite_common.logging import get_logger
from suite_common.wire import (
    CompletionDone,
    CompletionEvent,
    CompletionRequest,
    CompletionResponse,
    FinishReason,
    Message,
    ReasoningBlock,
    ReasoningBlockEvent,
    ReasoningDelta,
    TextDelta,
    ToolCall,
    ToolCallEvent,
    ToolChoice,
    ToolSpec,
    Usage,
)

__all__ = [
    "ANTHROPIC_VERSION",
    "DEFAULT_MAX_TOKENS",
    "AnthropicProvider",
    "StreamAssembler",
    "build_request_body",
    "parse_response",
    "stream_error",
    "thinking_warnings",
    "translate_error",
]

PROVIDER_NAME = "anthropic"
TOOL_NAMES = NameRule("a-zA-Z0-9_-", 64)
"""The Messages API's tool ``name``: ``^[a-zA-Z0-9_-]{1,64}$``."""
ANTHROPIC_VERSION = "2023-06-01"

DEFAULT_MAX_TOKENS = 4096
"""Anthropic requires ``max_tokens``; every current Claude model can produce this many."""

MAX_TEMPERATURE = 1.0
"""Anthropic's temperature runs from 0 to 1; the neutral contract allows up to 2."""

EMPTY_TURN_TEXT = "(no content)"
"""Anthropic refuses empty turns; this stands in where the conversation needs one (a conversation
that does not start with the user, a user message without text)."""

_log = get_logger("completion_service.anthropic")

_STOP_REASONS: dict[str, FinishReason] = {
    "end_turn": "stop",
    "stop_sequence": "stop",
    "pause_turn": "stop",  # a server tool paused a long turn; the text so far is the answer
    "tool_use": "tool_calls",
    "max_tokens": "length",
    "model_context_window_exceeded": "length",
    "refusal": "content_filter",
}

_ERROR_STATUS = {
    "invalid_request_error": 400,
    "authentication_error": 401,
    "billing_error": 402,
    "permission_error": 403,
    "not_found_error": 404,
    "request_too_large": 413,
    "rate_limit_error": 429,
    "api_error": 500,
    "timeout_error": 504,
    "overloaded_error": 529,
}

_TOOL_USE_ID = re.compile(r"[a-zA-Z0-9_-]+")


# --- neutral -> Messages -----------------------------------------------------------------------


def build_request_body(
    request: CompletionRequest,
    upstream_model: str,
    *,
    stream: bool,
    thinking_budget_tokens: int | None = None,
    provider: str = PROVIDER_NAME,
) -> dict[str, Any]:
    """The JSON body of ``POST /v1/messages`` for ``request``, whose conversation is ``tool_turns.repaired``.

    Reasoning blocks are replayed only when their ``provider`` is ``provider`` (this adapter's name).
    Thinking is asked for when ``thinking_budget_tokens`` is set, unless the request forces a tool
    (Anthropic refuses both at once) or continues a tool-use turn that began without thinking
    (Anthropic refuses to turn thinking on in the middle of a turn).
    """
    system, turns = _conversation(request.messages, provider)
    body: dict[str, Any] = {"model": upstream_model, "stream": stream}
    if system:
        body["system"] = system
    if request.tools:
        # Anthropic refuses tool_choice without tools, so both go or neither.
        body["tools"] = [_tool(tool) for tool in request.tools]
        body["tool_choice"] = _tool_choice(request.tool_choice)
    elif any(turn.has_tool_blocks() for turn in turns):
        # Anthropic refuses tool_use/tool_result blocks in a request that defines no tools: declare the
        # ones the conversation used, and forbid calling them, which is what "no tools" meant.
        body["tools"] = [_tool(ToolSpec(name=name)) for name in _used_tool_names(turns)]
        body["tool_choice"] = {"type": "none"}
    answer_tokens = request.max_tokens or DEFAULT_MAX_TOKENS
    forces_tool = bool(request.tools) and request.tool_choice not in ("auto", "none")
    if thinking_budget_tokens is not None and not forces_tool and _turn_allows_thinking(turns):
        # Thinking counts against max_tokens: the budget comes on top of the answer's tokens, so
        # maxTokens keeps bounding the answer. Anthropic forbids a temperature with thinking.
        body["thinking"] = {"type": "enabled", "budget_tokens": thinking_budget_tokens}
        body["max_tokens"] = thinking_budget_tokens + answer_tokens
    else:
        body["max_tokens"] = answer_tokens
        if request.temperature is not None:
            body["temperature"] = min(request.temperature, MAX_TEMPERATURE)
        if turns[-1].role == "assistant" and turns[-1].reasoning:
            # Without thinking, Anthropic refuses thinking blocks in a final assistant message (a prefill).
            turns[-1].reasoning.clear()
            if not turns[-1].content():
                turns.pop()
    body["messages"] = [turn.as_message() for turn in turns]
    return body


@dataclass
class _Turn:
    """One Anthropic message being built: tool results first, then reasoning, then the rest."""

    role: Literal["user", "assistant"]
    results: list[dict[str, Any]] = field(default_factory=list)
    reasoning: list[dict[str, Any]] = field(default_factory=list)
    blocks: list[dict[str, Any]] = field(default_factory=list)

    def content(self) -> list[dict[str, Any]]:
        return [*self.results, *self.reasoning, *self.blocks]

    def as_message(self) -> dict[str, Any]:
        return {"role": self.role, "content": self.content()}

    def tool_use_ids(self) -> list[str]:
        return [block["id"] for block in self.blocks if block["type"] == "tool_use"]

    def has_tool_blocks(self) -> bool:
        return bool(self.results) or bool(self.tool_use_ids())

    def has_user_input(self) -> bool:
        """A user turn without tool results starts a new assistant turn; one with them continues a tool-use loop."""
        return self.role == "user" and bool(self.blocks) and not self.results


def _conversation(messages: Sequence[Message], provider: str) -> tuple[str, list[_Turn]]:
    """``(system, turns)``: the system prompts joined, and turns that follow Anthropic's rules."""
    system: list[str] = []
    turns: list[_Turn] = []
    ids = _ToolUseIds()
    owed: deque[tuple[str, str | None]] = deque()  # (tool_use_id, invalid arguments) of the calls to answer
    for message in messages:
        if message.role == "system":
            if _has_text(message.content):
                system.append(message.content or "")
            continue
        if message.role == "assistant":
            reasoning = [_reasoning_block(block) for block in message.reasoning or [] if block.provider == provider]
            blocks: list[dict[str, Any]] = []
            if _has_text(message.content):
                blocks.append({"type": "text", "text": message.content})
            owed.clear()
            for call in message.tool_calls or []:
                tool_use_id = ids.new(call.id)
                owed.append((tool_use_id, call.invalid_arguments))
                # Anthropic needs an object: what the model wrote instead is told in the tool result.
                blocks.append({"type": "tool_use", "id": tool_use_id, "name": call.name, "input": call.arguments})
            replayable = [block for block in reasoning if block is not None]
            if not replayable and not blocks:
                continue  # Anthropic refuses empty turns; an empty assistant message said nothing
            if not turns or turns[-1].role != "assistant":
                turns.append(_Turn("assistant"))
            # Merged turns keep all reasoning first: a message with thinking must start with it.
            turns[-1].reasoning.extend(replayable)
            turns[-1].blocks.extend(blocks)
            continue
        if not turns or turns[-1].role != "user":
            turns.append(_Turn("user"))
        turn = turns[-1]
        if message.role == "user":
            if _has_text(message.content):
                turn.blocks.append({"type": "text", "text": message.content})
            continue
        # The repaired conversation answers each call right after its message, in call order.
        tool_use_id, invalid_arguments = owed.popleft()
        turn.results.append(_tool_result(tool_use_id, message, invalid_arguments))
    _finish_turns(turns)
    return "\n\n".join(system), turns


class _ToolUseIds:
    """Tool call ids as Anthropic accepts them: ``[a-zA-Z0-9_-]+`` and unique in the conversation.

    Ids from other providers may hold other characters, and a caller may reuse one.
    """

    def __init__(self) -> None:
        self._used: set[str] = set()

    def new(self, call_id: str) -> str:
        base = call_id if _TOOL_USE_ID.fullmatch(call_id) else _sanitized(call_id)
        candidate, suffix = base, 1
        while candidate in self._used:
            suffix += 1
            candidate = f"{base}_{suffix}"
        self._used.add(candidate)
        return candidate


def _sanitized(call_id: str) -> str:
    digest = hashlib.sha256(call_id.encode()).hexdigest()[:8]
    return re.sub(r"[^a-zA-Z0-9_-]", "_", call_id) + "_" + digest


def _has_text(content: str | None) -> bool:
    # Anthropic refuses text blocks that are empty or only whitespace.
    return bool(content and content.strip())


def _reasoning_block(block: ReasoningBlock) -> dict[str, Any] | None:
    if block.redacted_data:
        return {"type": "redacted_thinking", "data": block.redacted_data}
    if block.signature:
        return {"type": "thinking", "thinking": block.text, "signature": block.signature}
    return None  # Anthropic refuses a thinking block without its signature


def _tool_result(tool_use_id: str, message: Message, invalid_arguments: str | None) -> dict[str, Any]:
    content = message.content or ""
    if invalid_arguments is not None:
        note = (
            "Your arguments for this call were not a JSON object, so the call was sent with {} instead. "
            f"You wrote: {invalid_arguments}"
        )
        content = f"{note}\n\n{content}" if content else note
    result: dict[str, Any] = {"type": "tool_result", "tool_use_id": tool_use_id}
    if content:
        result["content"] = content
    if message.is_error:
        result["is_error"] = True
    return result


def _finish_turns(turns: list[_Turn]) -> None:
    """The first turn is the user's, no turn is empty, and a final assistant turn has no trailing space."""
    if not turns or turns[0].role == "assistant":
        turns.insert(0, _Turn("user"))
    for turn in turns:
        if turn.role == "user" and not turn.content():
            turn.blocks.append({"type": "text", "text": EMPTY_TURN_TEXT})
    last = turns[-1]
    if last.role == "assistant" and last.blocks and last.blocks[-1]["type"] == "text":
        # Anthropic refuses a final assistant message (a prefill) that ends with whitespace.
        last.blocks[-1] = {"type": "text", "text": last.blocks[-1]["text"].rstrip()}


def _turn_allows_thinking(turns: list[_Turn]) -> bool:
    """Thinking may be on unless the current assistant turn (a tool-use loop is one turn) began without it."""
    start = max((index for index, turn in enumerate(turns) if turn.has_user_input()), default=0)
    first_reply = next((turn for turn in turns[start:] if turn.role == "assistant"), None)
    return first_reply is None or bool(first_reply.reasoning)


def _used_tool_names(turns: list[_Turn]) -> list[str]:
    names = (block["name"] for turn in turns for block in turn.blocks if block["type"] == "tool_use")
    return list(dict.fromkeys(names))


def _tool(tool: ToolSpec) -> dict[str, Any]:
    spec: dict[str, Any] = {"name": tool.name}
    if tool.description:
        spec["description"] = tool.description
    spec["input_schema"] = input_schema(tool.input_schema)
    return spec


def _tool_choice(choice: ToolChoice) -> dict[str, Any]:
    if choice == "auto":
        return {"type": "auto"}
    if choice == "none":
        return {"type": "none"}
    if choice == "required":
        return {"type": "any"}
    return {"type": "tool", "name": choice.name}


# --- Messages -> neutral -----------------------------------------------------------------------


def _finish_reason(raw: Any, *, has_tool_calls: bool) -> FinishReason:
    reason = _STOP_REASONS.get(raw) if isinstance(raw, str) else None
    if has_tool_calls and reason in (None, "stop"):
        return "tool_calls"
    return reason or "stop"


def _count(raw: Mapping[str, Any], *keys: str) -> int:
    return sum(value for key in keys if isinstance(value := raw.get(key), int))


def _input_tokens(raw: Mapping[str, Any]) -> int:
    # Cached prompt tokens are still prompt tokens: they are reported apart, not included.
    return _count(raw, "input_tokens", "cache_creation_input_tokens", "cache_read_input_tokens")


def _usage(raw: Any) -> Usage:
    if not isinstance(raw, dict):
        return Usage()
    return Usage(input_tokens=_input_tokens(raw), output_tokens=_count(raw, "output_tokens"))


def _arguments(raw: Any) -> tuple[dict[str, Any], str | None]:
    """``(arguments, invalid_arguments)`` of a ``tool_use`` input, which Anthropic documents as an object."""
    if isinstance(raw, dict):
        return raw, None
    if raw is None:
        return {}, None
    return {}, json.dumps(raw)


def _reasoning(block: Mapping[str, Any], provider: str) -> ReasoningBlock:
    if block["type"] == "redacted_thinking":
        data = block.get("data")
        if not isinstance(data, str):
            raise bad_response("a redacted_thinking block has no data")
        return ReasoningBlock(redacted_data=data, provider=provider)
    thinking, signature = block.get("thinking"), block.get("signature")
    if not isinstance(thinking, str):
        raise bad_response("a thinking block has no text")
    return ReasoningBlock(
        text=thinking, signature=signature if isinstance(signature, str) and signature else None, provider=provider
    )


def parse_response(body: Any, model: str, *, provider: str = PROVIDER_NAME) -> CompletionResponse:
    """A whole ``message`` object as the neutral response reported under ``model``."""
    if not isinstance(body, dict) or body.get("type", "message") != "message":
        raise bad_response("the body is not a message object")
    blocks = body.get("content")
    if not isinstance(blocks, list):
        raise bad_response("the message has no content list")
    texts: list[str] = []
    calls: list[ToolCall] = []
    reasoning: list[ReasoningBlock] = []
    for position, block in enumerate(blocks):
        kind = block.get("type") if isinstance(block, dict) else None
        if kind == "text":
            if not isinstance(block.get("text"), str):
                raise bad_response(f"content block {position} has no text")
            texts.append(block["text"])
        elif kind == "tool_use":
            calls.append(_tool_call(block, position))
        elif kind in ("thinking", "redacted_thinking"):
            reasoning.append(_reasoning(block, provider))
        elif kind is None:
            raise bad_response(f"content block {position} has no type")
        # Other blocks (server tool use and its results) are Anthropic's own business.
    content = "".join(texts)
    return CompletionResponse(
        message=Message(
            role="assistant", content=content or None, reasoning=reasoning or None, tool_calls=calls or None
        ),
        finish_reason=_finish_reason(body.get("stop_reason"), has_tool_calls=bool(calls)),
        usage=_usage(body.get("usage")),
        model=model,
        provider=provider,
    )


def _tool_call(block: Mapping[str, Any], position: int) -> ToolCall:
    name, call_id = block.get("name"), block.get("id")
    if not isinstance(name, str) or not name:
        raise bad_response(f"tool_use block {position} has no name")
    arguments, invalid = _arguments(block.get("input"))
    return ToolCall(
        id=call_id if isinstance(call_id, str) and call_id else f"toolu_{position}",
        name=name,
        arguments=arguments,
        invalid_arguments=invalid,
    )


@dataclass
class _Block:
    """A content block of a streamed message, as far as it has arrived."""

    type: str
    id: str = ""
    name: str = ""
    initial_input: Any = None
    parts: list[str] = field(default_factory=list)
    signature: str | None = None
    data: str | None = None
    done: bool = False


class StreamAssembler:
    """Folds the Messages stream's events into neutral events.

    Text and thinking come out as they arrive; a thinking block whole (``reasoning_block``) and a
    tool call with its assembled input once their ``content_block_stop`` arrives; ``finish`` adds
    ``done``.
    """

    def __init__(self, *, model: str, provider: str = PROVIDER_NAME) -> None:
        self.model = model
        self.provider = provider
        self.stop_reason: str | None = None
        self.ended = False
        self._input_tokens = 0
        self._output_tokens = 0
        self._blocks: dict[int, _Block] = {}
        self._called = False

    def feed(self, event: Any) -> list[CompletionEvent]:
        if not isinstance(event, dict):
            raise bad_response("a stream event is not a JSON object")
        kind = event.get("type")
        if kind == "error":
            raise stream_error(event)
        if kind == "message_start":
            message = event.get("message")
            if not isinstance(message, dict):
                raise bad_response("message_start has no message")
            self._add_usage(message.get("usage"))
            return []
        if kind == "content_block_start":
            return self._start(event)
        if kind == "content_block_delta":
            return self._delta(event)
        if kind == "content_block_stop":
            return self._stop(self._block(event))
        if kind == "message_delta":
            delta = event.get("delta")
            if isinstance(delta, dict) and isinstance(delta.get("stop_reason"), str):
                self.stop_reason = delta["stop_reason"]
            self._add_usage(event.get("usage"))
            return []
        if kind == "message_stop":
            self.ended = True
        return []  # ping, and event types added after this adapter was written

    def _add_usage(self, usage: Any) -> None:
        # message_start counts the prompt; message_delta's counts are cumulative and may repeat it.
        if not isinstance(usage, dict):
            return
        if any(key in usage for key in ("input_tokens", "cache_creation_input_tokens", "cache_read_input_tokens")):
            self._input_tokens = _input_tokens(usage)
        if isinstance(usage.get("output_tokens"), int):
            self._output_tokens = usage["output_tokens"]

    def _index(self, event: Mapping[str, Any]) -> int:
        index = event.get("index")
        if not isinstance(index, int):
            raise bad_response(f"a {event.get('type')} event has no index")
        return index

    def _block(self, event: Mapping[str, Any]) -> _Block:
        index = self._index(event)
        if index not in self._blocks:
            raise bad_response(f"a {event.get('type')} event for content block {index}, which never started")
        return self._blocks[index]

    def _start(self, event: Mapping[str, Any]) -> list[CompletionEvent]:
        index = self._index(event)
        raw = event.get("content_block")
        if not isinstance(raw, dict) or not isinstance(raw.get("type"), str):
            raise bad_response("content_block_start has no content block")
        block = _Block(type=raw["type"])
        self._blocks[index] = block
        if block.type == "text" and isinstance(raw.get("text"), str) and raw["text"]:
            return [TextDelta(delta=raw["text"])]
        if block.type == "tool_use":
            if not isinstance(raw.get("name"), str) or not raw["name"]:
                raise bad_response(f"streamed tool_use block {index} has no name")
            block.id = raw["id"] if isinstance(raw.get("id"), str) and raw["id"] else f"toolu_{index}"
            block.name = raw["name"]
            block.initial_input = raw.get("input")
        elif block.type == "thinking":
            if isinstance(raw.get("signature"), str) and raw["signature"]:
                block.signature = raw["signature"]
            if isinstance(raw.get("thinking"), str) and raw["thinking"]:
                block.parts.append(raw["thinking"])
                return [ReasoningDelta(delta=raw["thinking"])]
        elif block.type == "redacted_thinking":
            block.data = raw.get("data") if isinstance(raw.get("data"), str) else None
        return []

    def _delta(self, event: Mapping[str, Any]) -> list[CompletionEvent]:
        block = self._block(event)
        delta = event.get("delta")
        if not isinstance(delta, dict):
            raise bad_response("content_block_delta has no delta")
        kind = delta.get("type")
        if kind == "text_delta":
            text = delta.get("text")
            if not isinstance(text, str):
                raise bad_response("a text_delta has no text")
            return [TextDelta(delta=text)] if text else []
        if kind == "input_json_delta":
            partial = delta.get("partial_json")
            if not isinstance(partial, str):
                raise bad_response("an input_json_delta has no partial_json")
            block.parts.append(partial)
        elif kind == "thinking_delta":
            thinking = delta.get("thinking")
            if not isinstance(thinking, str):
                raise bad_response("a thinking_delta has no thinking")
            block.parts.append(thinking)
            return [ReasoningDelta(delta=thinking)] if thinking else []
        elif kind == "signature_delta" and isinstance(delta.get("signature"), str):
            block.signature = (block.signature or "") + delta["signature"]
        return []  # citations_delta and newer kinds carry nothing the neutral contract has

    def _stop(self, block: _Block) -> list[CompletionEvent]:
        if block.done:
            return []
        block.done = True
        if block.type == "tool_use":
            self._called = True
            return [self._tool_call(block)]
        if block.type == "thinking":
            reasoning = ReasoningBlock(text="".join(block.parts), signature=block.signature, provider=self.provider)
            return [ReasoningBlockEvent(block=reasoning)]
        if block.type == "redacted_thinking":
            if block.data is None:
                raise bad_response("a redacted_thinking block has no data")
            return [ReasoningBlockEvent(block=ReasoningBlock(redacted_data=block.data, provider=self.provider))]
        return []

    @staticmethod
    def _tool_call(block: _Block) -> ToolCallEvent:
        text = "".join(block.parts)
        if text.strip():
            try:
                parsed = json.loads(text)
            except ValueError:
                parsed = None
            if isinstance(parsed, dict):
                return ToolCallEvent(id=block.id, name=block.name, arguments=parsed)
            return ToolCallEvent(id=block.id, name=block.name, invalid_arguments=text)
        # No deltas (or an empty one): the input is whatever the start said, an empty object as a rule.
        arguments, invalid = _arguments(block.initial_input)
        return ToolCallEvent(id=block.id, name=block.name, arguments=arguments, invalid_arguments=invalid)

    def finish(self) -> list[CompletionEvent]:
        """Tool calls whose block never closed, then ``done``; call it once the stream has ended."""
        if not self.ended and self.stop_reason is None:
            raise bad_response("the stream ended before the model finished")
        events: list[CompletionEvent] = []
        for index in sorted(self._blocks):
            events.extend(self._stop(self._blocks[index]))
        events.append(
            CompletionDone(
                finish_reason=_finish_reason(self.stop_reason, has_tool_calls=self._called),
                usage=Usage(input_tokens=self._input_tokens, output_tokens=self._output_tokens),
                model=self.model,
                provider=self.provider,
            )
        )
        return events


def thinking_warnings(request: CompletionRequest, thinking: bool, budget: int | None, upstream_model: str) -> list[str]:
    """What a Claude request with extended thinking (Anthropic's or Bedrock's) could not take: the reasoning
    asked for when thinking could not be on, the temperature when it was (Anthropic forbids one with thinking)."""
    if budget is not None and not thinking:
        reason = "the request forces a tool, or continues a tool-use turn that began without thinking"
        _log.info("anthropic_thinking_skipped", model=upstream_model, reason=reason)
        if request.reasoning is not None:
            return [f"reasoning ignored for this call: Claude cannot think when {reason}."]
    if thinking and request.temperature is not None and request.temperature != 1:
        return ["temperature ignored: Claude takes no temperature with extended thinking."]
    return []


# --- errors ------------------------------------------------------------------------------------


def _error_detail(payload: Any) -> tuple[str | None, str | None, str | None]:
    """``(message, type, details.error_code)`` of ``{"type": "error", "error": {...}}``."""
    error = payload.get("error") if isinstance(payload, dict) else None
    if not isinstance(error, dict):
        return None, None, None
    message, kind, details = error.get("message"), error.get("type"), error.get("details")
    code = details.get("error_code") if isinstance(details, dict) else None
    return (
        message[:MAX_MESSAGE_CHARS] if isinstance(message, str) else None,
        kind if isinstance(kind, str) else None,
        code if isinstance(code, str) else None,
    )


def _context_overflow(message: str | None) -> bool:
    text = (message or "").lower()
    return "prompt is too long" in text or "exceed context limit" in text


def _error(status: int, payload: Any, headers: Mapping[str, str], *, upstream_model: str, provider: str) -> ApiError:
    message, kind, code = _error_detail(payload)
    if status == 404 and message is None:
        message = "is COMPLETION_ANTHROPIC_BASE_URL right (the service calls <url>/v1/messages)?"
    return provider_error(
        status,
        provider=provider,
        message=message,
        headers=headers,
        upstream_model=upstream_model,
        credentials_hint="COMPLETION_ANTHROPIC_API_KEY",
        context_length_exceeded=status in (400, 413) and _context_overflow(message),
        # A spent monthly budget is a 429 too, but waiting minutes does not bring it back.
        quota_exhausted=code == "enforced_spend_limit_reached" or kind == "billing_error",
    )


def translate_error(
    status: int, content: bytes, headers: Mapping[str, str], *, upstream_model: str, provider: str = "Anthropic"
) -> ApiError:
    """The caller's view of an HTTP error of the Messages API (``status`` >= 400)."""
    try:
        payload = json.loads(content)
    except ValueError:
        payload = None
    return _error(status, payload, headers, upstream_model=upstream_model, provider=provider)


def stream_error(event: Mapping[str, Any], *, upstream_model: str = "") -> ApiError:
    """An ``error`` event inside a stream (the HTTP status was already 200) as the error its type stands for:
    ``overloaded_error`` is a retryable 503 ``overloaded``, as a 529 would have been."""
    _, kind, _ = _error_detail(event)
    error = _error(_ERROR_STATUS.get(kind or "", 500), event, {}, upstream_model=upstream_model, provider="Anthropic")
    error.message = f"{error.message} (an error event in the middle of the stream)"
    return error


# --- I/O ---------------------------------------------------------------------------------------


class AnthropicProvider(HttpAdapter):
    """Calls ``{base_url}/v1/messages`` through the service's shared ``httpx.AsyncClient``."""

    tool_names = TOOL_NAMES

    def __init__(
        self,
        http: httpx.AsyncClient,
        *,
        base_url: str,
        api_key: str | None,
        max_retries: int = 2,
        name: str = PROVIDER_NAME,
        thinking_budget_tokens: int | None = None,
    ) -> None:
        self.name = name
        self.thinking_budget_tokens = thinking_budget_tokens
        self._url = base_url.rstrip("/") + "/v1/messages"
        self._api_key = api_key or None
        self._upstream = Upstream(http, provider=name, base_url=base_url, secrets=[api_key], max_retries=max_retries)

    def request_body(
        self, request: CompletionRequest, upstream_model: str, *, stream: bool
    ) -> tuple[dict[str, Any], list[str]]:
        """The body, and the controls of the request it could not carry (the answer's ``warnings``)."""
        budget = thinking_budget(request, self.thinking_budget_tokens)
        body = build_request_body(
            request, upstream_model, stream=stream, thinking_budget_tokens=budget, provider=self.name
        )
        return body, thinking_warnings(request, body.get("thinking") is not None, budget, upstream_model)

    def _parse(self, body: Any, model: str) -> CompletionResponse:
        # Also a compatible server's answer to a stream as one message object: that is the whole answer.
        return parse_response(body, model, provider=self.name)

    def _decoder(self, model: str) -> StreamAssembler:
        return StreamAssembler(model=model, provider=self.name)

    async def _outbound(self, request: CompletionRequest, upstream_model: str, *, stream: bool) -> Outbound:
        body, warnings = self.request_body(request, upstream_model, stream=stream)
        headers = {
            "anthropic-version": ANTHROPIC_VERSION,
            "accept": "text/event-stream" if stream else "application/json",
        }
        if self._api_key:
            headers["x-api-key"] = self._api_key

        def build() -> httpx.Request:
            return self._upstream.http.build_request("POST", self._url, json=body, headers=headers)

        def translate(status: int, content: bytes, response_headers: httpx.Headers) -> ApiError:
            return translate_error(status, content, response_headers, upstream_model=upstream_model)

        return Outbound(self._upstream, build, translate, warnings)
