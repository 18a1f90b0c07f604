"""A whole Converse response, or ConverseStream's decoded events, folded into the neutral answer or events."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from completion_service.providers._anthropic_shape import (
    ContentBlocks,
    finish_reason,
    tool_call,
)
from completion_service.providers._errors import bad_response
from completion_service.providers.bedrock.request import PROVIDER_NAME
from suite_common.openai_chat import parse_arguments
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

__all__ = ["ConverseStreamAssembler", "parse_response"]

_STOP_REASONS: dict[str, FinishReason] = {
    "end_turn": "stop",
    "stop_sequence": "stop",
    "tool_use": "tool_calls",
    "max_tokens": "length",
    "model_context_window_exceeded": "length",
    "guardrail_intervened": "content_filter",
    "content_filtered": "content_filter",
}


def _usage(raw: Any) -> Usage:
    if not isinstance(raw, dict):
        return Usage()
    given, taken = raw.get("inputTokens"), raw.get("outputTokens")
    cached = sum(v for k in ("cacheReadInputTokens", "cacheWriteInputTokens") if isinstance(v := raw.get(k), int))
    return Usage(
        input_tokens=(given if isinstance(given, int) else 0) + cached,
        output_tokens=taken if isinstance(taken, int) else 0,
    )


def _reasoning_block(raw: Any, provider: str) -> ReasoningBlock | None:
    if not isinstance(raw, dict):
        return None
    if "redactedContent" in raw:
        data = raw["redactedContent"]
        return ReasoningBlock(redacted_data=data if isinstance(data, str) else None, provider=provider)
    text = raw.get("reasoningText")
    if isinstance(text, dict):
        signature = text.get("signature")
        return ReasoningBlock(
            text=str(text.get("text") or ""),
            signature=signature if isinstance(signature, str) else None,
            provider=provider,
        )
    return None


def parse_response(body: Any, model: str, *, provider: str = PROVIDER_NAME) -> CompletionResponse:
    """A whole Converse response as the neutral response reported under ``model``."""
    if not isinstance(body, dict):
        raise bad_response("the body is not a JSON object")
    message = (body.get("output") or {}).get("message") if isinstance(body.get("output"), dict) else None
    if not isinstance(message, dict) or not isinstance(message.get("content"), list):
        raise bad_response("output.message.content is missing")
    found = ContentBlocks()
    for position, block in enumerate(message["content"]):
        if not isinstance(block, dict):
            raise bad_response(f"content block {position} is not an object")
        if isinstance(block.get("text"), str):
            found.texts.append(block["text"])
        elif isinstance(block.get("toolUse"), dict):
            use = block["toolUse"]
            arguments, fallback_id = parse_arguments(use.get("input")), f"tooluse_{position}"
            found.calls.append(
                tool_call(
                    use.get("toolUseId"),
                    use.get("name"),
                    arguments,
                    what=f"tool use {position}",
                    fallback_id=fallback_id,
                )
            )
        elif (thought := _reasoning_block(block.get("reasoningContent"), provider)) is not None:
            found.reasoning.append(thought)
    finish = finish_reason(_STOP_REASONS, body.get("stopReason"), has_tool_calls=bool(found.calls))
    return found.response(finish, _usage(body.get("usage")), model=model, provider=provider)


@dataclass
class _Block:
    kind: str = "text"
    tool_id: str = ""
    tool_name: str = ""
    parts: list[str] = field(default_factory=list)
    signature: str | None = None
    redacted: str | None = None


class ConverseStreamAssembler:
    """Folds decoded ConverseStream events (``:event-type`` and JSON payload) into neutral events."""

    def __init__(self, *, model: str, provider: str = PROVIDER_NAME) -> None:
        self.model = model
        self.provider = provider
        self.stop_reason: str | None = None
        self._usage = Usage()
        self._blocks: dict[int, _Block] = {}
        self._calls: list[ToolCallEvent] = []

    def feed(self, event_type: str, payload: Any) -> list[CompletionEvent]:
        if not isinstance(payload, dict):
            raise bad_response(f"a {event_type} event is not a JSON object")
        index = payload.get("contentBlockIndex", 0)
        if event_type == "contentBlockStart":
            start = (payload.get("start") or {}).get("toolUse")
            if isinstance(start, dict):
                self._blocks[index] = _Block("tool", str(start.get("toolUseId") or ""), str(start.get("name") or ""))
            return []
        if event_type == "contentBlockDelta":
            return self._delta(index, payload.get("delta"))
        if event_type == "contentBlockStop":
            return self._stop(index)
        if event_type == "messageStop":
            self.stop_reason = payload.get("stopReason") if isinstance(payload.get("stopReason"), str) else "end_turn"
        elif event_type == "metadata":
            self._usage = _usage(payload.get("usage"))
        return []  # messageStart and events this version does not know

    def _delta(self, index: int, delta: Any) -> list[CompletionEvent]:
        if not isinstance(delta, dict):
            raise bad_response("a contentBlockDelta has no delta")
        block = self._blocks.setdefault(index, _Block())
        if isinstance(delta.get("text"), str):
            return [TextDelta(delta=delta["text"])] if delta["text"] else []
        if isinstance(delta.get("toolUse"), dict):
            fragment = delta["toolUse"].get("input")
            if isinstance(fragment, str):
                block.parts.append(fragment)
            return []
        thought = delta.get("reasoningContent")
        if isinstance(thought, dict):
            block.kind = "reasoning"
            if isinstance(thought.get("text"), str):
                block.parts.append(thought["text"])
                return [ReasoningDelta(delta=thought["text"])] if thought["text"] else []
            if isinstance(thought.get("signature"), str):
                block.signature = thought["signature"]
            if isinstance(thought.get("redactedContent"), str):
                block.redacted = thought["redactedContent"]
        return []

    def _stop(self, index: int) -> list[CompletionEvent]:
        block = self._blocks.pop(index, None)
        if block is None:
            return []
        if block.kind == "tool":
            if not block.tool_name:
                raise bad_response(f"streamed tool use {index} has no name")
            arguments, invalid = parse_arguments("".join(block.parts))
            self._calls.append(
                ToolCallEvent(
                    id=block.tool_id or f"tooluse_{index}",
                    name=block.tool_name,
                    arguments=arguments,
                    invalid_arguments=invalid,
                )
            )
        elif block.kind == "reasoning":
            thought = ReasoningBlock(
                text="".join(block.parts),
                signature=block.signature,
                redacted_data=block.redacted,
                provider=self.provider,
            )
            return [ReasoningBlockEvent(block=thought)]
        return []

    def finish(self) -> list[CompletionEvent]:
        """The tool calls (whole), then ``done``; once the stream has ended."""
        if self.stop_reason is None:
            raise bad_response("the stream ended before the model finished")
        return [
            *self._calls,
            CompletionDone(
                finish_reason=finish_reason(_STOP_REASONS, self.stop_reason, has_tool_calls=bool(self._calls)),
                usage=self._usage,
                model=self.model,
                provider=self.provider,
            ),
        ]
