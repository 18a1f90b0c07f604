"""Anthropic's answers as neutral ones: a whole ``message`` object (``parse_response``) or the events of the
Messages stream (``StreamAssembler``); thinking blocks come back whole, signature included, to be replayed.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from completion_service.providers._anthropic_shape import ContentBlocks, finish_reason, tool_call
from completion_service.providers._errors import bad_response
from completion_service.providers.anthropic.errors import stream_error
from completion_service.providers.anthropic.request import PROVIDER_NAME
from suite_common.wire import (
    CompletionDone,
    CompletionEvent,
    CompletionResponse,
    FinishReason,
    ReasoningBlock,
    ReasoningBlockEvent,
    ReasoningDelta,
    TextDelta,
    ToolCallEvent,
    Usage,
)

__all__ = ["StreamAssembler", "parse_response"]

_STOP_REASONS: dict[str, FinishReason] = {
    "end_turn": "stop",
    "stop_sequence": "stop",
    "pause_turn": "stop",  # a server tool paused a long turn; the text so far is the answer
    "tool_use": "tool_calls",
    "max_tokens": "length",
    "model_context_window_exceeded": "length",
    "refusal": "content_filter",
}


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
    found = ContentBlocks()
    for position, block in enumerate(blocks):
        kind = block.get("type") if isinstance(block, dict) else None
        if kind == "text":
            if not isinstance(block.get("text"), str):
                raise bad_response(f"content block {position} has no text")
            found.texts.append(block["text"])
        elif kind == "tool_use":
            arguments = _arguments(block.get("input"))
            what, fallback_id = f"tool_use block {position}", f"toolu_{position}"
            found.calls.append(
                tool_call(block.get("id"), block.get("name"), arguments, what=what, fallback_id=fallback_id)
            )
        elif kind in ("thinking", "redacted_thinking"):
            found.reasoning.append(_reasoning(block, provider))
        elif kind is None:
            raise bad_response(f"content block {position} has no type")
        # Other blocks (server tool use and its results) are Anthropic's own business.
    finish = finish_reason(_STOP_REASONS, body.get("stop_reason"), has_tool_calls=bool(found.calls))
    return found.response(finish, _usage(body.get("usage")), model=model, provider=provider)


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
                finish_reason=finish_reason(_STOP_REASONS, self.stop_reason, has_tool_calls=self._called),
                usage=Usage(input_tokens=self._input_tokens, output_tokens=self._output_tokens),
                model=self.model,
                provider=self.provider,
            )
        )
        return events
