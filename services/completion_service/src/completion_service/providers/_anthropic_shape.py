"""What Anthropic's Messages API and Bedrock's Converse share, so that neither provider imports the other.

Both answer in content blocks (text, tool use, reasoning) folded into one assistant message the same way,
with a stop reason read from a table; and both serve Claude, whose limits (temperature, the ``max_tokens``
it needs, what extended thinking forbids) are the same on either.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from completion_service.providers._errors import bad_response
from suite_common.logging import get_logger
from suite_common.wire import (
    CompletionRequest,
    CompletionResponse,
    FinishReason,
    Message,
    ReasoningBlock,
    ToolCall,
    Usage,
)

__all__ = [
    "DEFAULT_MAX_TOKENS",
    "MAX_TEMPERATURE",
    "ContentBlocks",
    "finish_reason",
    "thinking_warnings",
    "tool_call",
]

DEFAULT_MAX_TOKENS = 4096
"""Anthropic requires ``max_tokens``; every current Claude model can produce this many."""

MAX_TEMPERATURE = 1.0
"""Claude's temperature runs from 0 to 1 (on Anthropic's API and on Bedrock); the neutral contract allows up to 2."""

_log = get_logger("completion_service.anthropic")


def finish_reason(table: Mapping[str, FinishReason], raw: Any, *, has_tool_calls: bool) -> FinishReason:
    """``raw`` stop reason by ``table``; an answer with tool calls that says it stopped (or nothing known) is
    ``tool_calls``, anything else unknown ``stop``."""
    reason = table.get(raw) if isinstance(raw, str) else None
    if has_tool_calls and reason in (None, "stop"):
        return "tool_calls"
    return reason or "stop"


def tool_call(
    call_id: Any, name: Any, arguments: tuple[dict[str, Any], str | None], *, what: str, fallback_id: str
) -> ToolCall:
    """A tool use block as a ``ToolCall``: ``what`` names the block when it has no name, ``fallback_id`` stands
    in for a missing id; ``arguments`` is ``(arguments, invalid_arguments)`` as the format reads its input."""
    if not isinstance(name, str) or not name:
        raise bad_response(f"{what} has no name")
    return ToolCall(
        id=call_id if isinstance(call_id, str) and call_id else fallback_id,
        name=name,
        arguments=arguments[0],
        invalid_arguments=arguments[1],
    )


@dataclass
class ContentBlocks:
    """The content blocks of a whole answer, sorted: they make one assistant message."""

    texts: list[str] = field(default_factory=list)
    calls: list[ToolCall] = field(default_factory=list)
    reasoning: list[ReasoningBlock] = field(default_factory=list)

    def response(self, finish: FinishReason, usage: Usage, *, model: str, provider: str) -> CompletionResponse:
        content = "".join(self.texts)
        return CompletionResponse(
            message=Message(
                role="assistant",
                content=content or None,
                reasoning=self.reasoning or None,
                tool_calls=self.calls or None,
            ),
            finish_reason=finish,
            usage=usage,
            model=model,
            provider=provider,
        )


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
