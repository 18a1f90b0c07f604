"""OpenAI's Chat Completions wire format, once for both directions of the suite. Pure: no I/O.

agent-service's OpenAI-compatible front reads requests in it and writes answers (``agent_service.api.openai_wire``);
completion-service's ``openai`` provider writes requests that these shapes read and reads answers
(``completion_service.providers.openai``; it writes plain dicts, not these models, on its hot path). Both take
the helpers of this module, and round-trip tests (tests/unit/suite_common) hold that a request one side writes is
a request the other reads, and an answer likewise.

The models keep OpenAI's snake_case field names and ignore fields the suite does not use (``top_p``,
``logprobs``, ``user``, ...), as OpenAI-compatible servers commonly do. What each direction adds stays on its
side: the front's request limits and its ``agent`` extension fields, the provider's tolerant reading of what
compatible servers really send (an answer is read as a dict, field by field, so that a server's quirk is a
precise error, not a validation failure).

Tool call arguments are JSON text on this wire and an object in the suite's: ``arguments_text`` writes them,
``parse_arguments`` reads them, the same way in both directions. Text that is not a JSON object (invalid JSON,
an array) becomes ``arguments={}`` with the text kept in ``invalid_arguments``, so that the model can be told
and the turn replayed verbatim; empty text is a call without arguments.
"""

from __future__ import annotations

import json
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field

from suite_common.wire import ToolCall, Usage

__all__ = [
    "ChatMessage",
    "Choice",
    "ChunkChoice",
    "ChunkDelta",
    "ChunkToolCall",
    "CompletionTokensDetails",
    "CompletionUsage",
    "ContentPart",
    "FunctionCall",
    "FunctionDefinition",
    "ImageUrlItem",
    "NamedFunction",
    "NamedToolChoiceItem",
    "OpenAIModel",
    "ResponseFunctionCall",
    "ResponseMessage",
    "ResponseToolCall",
    "StreamOptions",
    "ToolCallItem",
    "ToolDefinition",
    "arguments_text",
    "completion_usage",
    "parse_arguments",
    "to_tool_call",
    "usage_of",
]


class OpenAIModel(BaseModel):
    """A Chat Completions object: fields the suite does not know are ignored."""

    model_config = ConfigDict(extra="ignore")


# --- the request -------------------------------------------------------------------------------


class FunctionDefinition(OpenAIModel):
    name: str = Field(min_length=1)
    description: str = ""
    parameters: dict[str, Any] | None = None


class ToolDefinition(OpenAIModel):
    type: Literal["function"] = "function"
    function: FunctionDefinition


class FunctionCall(OpenAIModel):
    name: str
    arguments: str = ""


class ToolCallItem(OpenAIModel):
    """A tool call of an assistant message in the conversation."""

    id: str
    type: Literal["function"] = "function"
    function: FunctionCall


class ImageUrlItem(OpenAIModel):
    url: str
    detail: Literal["auto", "low", "high"] | None = None


class ContentPart(OpenAIModel):
    """A part of a message's content: ``text`` (with ``text``) or ``image_url`` (with ``image_url``)."""

    type: str
    text: str | None = None
    image_url: ImageUrlItem | None = None


class ChatMessage(OpenAIModel):
    role: Literal["system", "developer", "user", "assistant", "tool"]
    content: str | list[ContentPart] | None = None
    name: str | None = None
    tool_calls: list[ToolCallItem] | None = None
    tool_call_id: str | None = None


class NamedFunction(OpenAIModel):
    name: str = Field(min_length=1)


class NamedToolChoiceItem(OpenAIModel):
    type: Literal["function"] = "function"
    function: NamedFunction


class StreamOptions(OpenAIModel):
    include_usage: bool = False


# --- the answers -------------------------------------------------------------------------------


class CompletionTokensDetails(OpenAIModel):
    reasoning_tokens: int
    """Of ``completion_tokens``, those spent reasoning."""


class CompletionUsage(OpenAIModel):
    prompt_tokens: int
    completion_tokens: int
    total_tokens: int
    completion_tokens_details: CompletionTokensDetails | None = None
    """Where the provider reported its reasoning tokens."""


class ResponseFunctionCall(OpenAIModel):
    name: str
    arguments: str


class ResponseToolCall(OpenAIModel):
    id: str
    type: Literal["function"] = "function"
    function: ResponseFunctionCall


class ResponseMessage(OpenAIModel):
    role: Literal["assistant"] = "assistant"
    content: str | None = None
    refusal: str | None = None
    tool_calls: list[ResponseToolCall] | None = None
    reasoning_content: str | None = None
    """The model's reasoning (as vLLM and DeepSeek send it)."""


class Choice(OpenAIModel):
    index: int = 0
    message: ResponseMessage
    finish_reason: str
    logprobs: None = None


class ChunkToolCall(OpenAIModel):
    index: int
    id: str
    type: Literal["function"] = "function"
    function: ResponseFunctionCall


class ChunkDelta(OpenAIModel):
    role: Literal["assistant"] | None = None
    content: str | None = None
    reasoning_content: str | None = None
    tool_calls: list[ChunkToolCall] | None = None


class ChunkChoice(OpenAIModel):
    index: int = 0
    delta: ChunkDelta
    finish_reason: str | None = None
    logprobs: None = None


# --- the suite's values ------------------------------------------------------------------------


def arguments_text(call: ToolCall) -> str:
    """A tool call's arguments as the JSON text Chat Completions carries them."""
    # Replaying what the model really wrote lets it see (and fix) its own malformed arguments.
    if call.invalid_arguments is not None:
        return call.invalid_arguments
    return json.dumps(call.arguments, ensure_ascii=False)


def parse_arguments(raw: Any) -> tuple[dict[str, Any], str | None]:
    """``(arguments, invalid_arguments)``: a JSON object, or ``{}`` and the raw text when it is not one.

    Also takes an object instead of its JSON text (some compatible servers send one), and any other JSON
    value as its text; ``None`` or blank text is a tool without parameters."""
    if isinstance(raw, dict):
        return raw, None
    if raw is None or (isinstance(raw, str) and not raw.strip()):
        return {}, None
    text = raw if isinstance(raw, str) else json.dumps(raw)
    try:
        parsed = json.loads(text)
    except ValueError:
        return {}, text
    if not isinstance(parsed, dict):
        return {}, text
    return parsed, None


def to_tool_call(item: ToolCallItem) -> ToolCall:
    """A conversation's tool call in the suite's terms (arguments that are not a JSON object: see the module)."""
    arguments, invalid = parse_arguments(item.function.arguments)
    return ToolCall(id=item.id, name=item.function.name, arguments=arguments, invalid_arguments=invalid)


def completion_usage(usage: Usage) -> CompletionUsage:
    """The suite's token counts as an answer's ``usage``; ``completion_tokens`` includes the reasoning tokens."""
    reasoning = usage.reasoning_tokens
    return CompletionUsage(
        prompt_tokens=usage.input_tokens,
        completion_tokens=usage.output_tokens,
        total_tokens=usage.input_tokens + usage.output_tokens,
        completion_tokens_details=None if reasoning is None else CompletionTokensDetails(reasoning_tokens=reasoning),
    )


def usage_of(raw: Any) -> Usage:
    """An answer's ``usage`` (a ``CompletionUsage`` as JSON) in the suite's terms; what is missing or not a
    count is 0 (``reasoning_tokens``: ``None``), as compatible servers leave fields out."""
    if not isinstance(raw, dict):
        return Usage()
    prompt, completion = raw.get("prompt_tokens"), raw.get("completion_tokens")
    details = raw.get("completion_tokens_details")
    reasoning = details.get("reasoning_tokens") if isinstance(details, dict) else None
    return Usage(
        input_tokens=prompt if isinstance(prompt, int) else 0,
        # completion_tokens includes the reasoning tokens, billed as output like the answer's.
        output_tokens=completion if isinstance(completion, int) else 0,
        reasoning_tokens=reasoning if isinstance(reasoning, int) and not isinstance(reasoning, bool) else None,
    )
