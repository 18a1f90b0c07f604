"""The wire models of the contracts between the services (shared/DESIGN.md). JSON is camelCase.

Models accept camelCase and snake_case on input and always write camelCase, leaving ``None``
fields out (``dump``). Unknown fields are ignored so that a newer peer can add fields without
breaking an older one.
"""

from __future__ import annotations

from typing import Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, Field, model_validator
from pydantic.alias_generators import to_camel

__all__ = [
    "DEADLINE_HEADER",
    "AgentRunRequest",
    "AgentRunResult",
    "CallToolRequest",
    "CallToolResponse",
    "CompletionDone",
    "CompletionEvent",
    "CompletionRequest",
    "CompletionResponse",
    "ErrorDetail",
    "ErrorResponse",
    "FinishReason",
    "ListToolsResponse",
    "Message",
    "ModelInfo",
    "ModelList",
    "ModelTarget",
    "NamedToolChoice",
    "ReasoningBlock",
    "ReasoningBlockEvent",
    "ReasoningDelta",
    "ResolvedModel",
    "RunDone",
    "RunError",
    "RunEvent",
    "RunFinishReason",
    "RunReasoning",
    "RunStarted",
    "RunText",
    "RunToolCall",
    "RunToolResult",
    "StreamError",
    "TextDelta",
    "ToolCall",
    "ToolCallEvent",
    "ToolChoice",
    "ToolInfo",
    "ToolSpec",
    "Usage",
    "WireModel",
    "dump",
]

DEADLINE_HEADER = "X-Deadline-Ms"
"""Milliseconds the caller still has for this request. A callee never works past it."""


class WireModel(BaseModel):
    model_config = ConfigDict(alias_generator=to_camel, populate_by_name=True, extra="ignore")


def dump(model: BaseModel) -> str:
    """The JSON a peer expects: camelCase, ``None`` fields left out."""
    return model.model_dump_json(by_alias=True, exclude_none=True)


# --- errors ----------------------------------------------------------------------------------


class ErrorDetail(WireModel):
    code: str
    """A stable machine code (``invalid_request``, ``tool_not_found``, ...)."""
    message: str
    """What went wrong and what to do, for people."""


class ErrorResponse(WireModel):
    """Every service's error body, with the right HTTP status; some errors add fields beside ``error``."""

    error: ErrorDetail


# --- conversation ----------------------------------------------------------------------------

Role = Literal["system", "user", "assistant", "tool"]


class ToolCall(WireModel):
    id: str = Field(min_length=1)
    name: str = Field(min_length=1)
    arguments: dict[str, Any] = Field(default_factory=dict)
    invalid_arguments: str | None = None
    """Set only when the model produced arguments that are not a JSON object: the raw text,
    kept so the model can be told what was wrong and the turn can be replayed verbatim."""
    signature: str | None = None
    """An opaque token the provider attached to this call (Gemini's ``thoughtSignature``), replayed
    verbatim on the next turn because the provider refuses the conversation without it."""


class ReasoningBlock(WireModel):
    """One block of the model's reasoning, kept on the assistant message so that it can be sent back.

    Anthropic requires its thinking blocks, signature included, to come back unchanged during tool
    use; ``provider`` says whose block it is, so that it is never sent to another provider.
    """

    text: str = ""
    signature: str | None = None
    redacted_data: str | None = None
    """Reasoning the provider encrypted (Anthropic ``redacted_thinking``): opaque, replayed as is."""
    provider: str | None = None


class Message(WireModel):
    role: Role
    content: str | None = None
    reasoning: list[ReasoningBlock] | None = None
    """On an assistant message: the reasoning that came before its text and tool calls."""
    tool_calls: list[ToolCall] | None = None
    tool_call_id: str | None = None
    is_error: bool | None = None
    """On a ``tool`` message: the tool failed (providers that can say so are told)."""

    @model_validator(mode="after")
    def _check_role_fields(self) -> Message:
        if self.role == "tool" and not self.tool_call_id:
            raise ValueError("a tool message needs toolCallId")
        if self.tool_calls and self.role != "assistant":
            raise ValueError("only an assistant message carries toolCalls")
        return self


class NamedToolChoice(WireModel):
    name: str = Field(min_length=1)


ToolChoice = Literal["auto", "none", "required"] | NamedToolChoice


class Usage(WireModel):
    input_tokens: int = 0
    output_tokens: int = 0

    def __add__(self, other: Usage) -> Usage:
        return Usage(
            input_tokens=self.input_tokens + other.input_tokens,
            output_tokens=self.output_tokens + other.output_tokens,
        )


# --- completion-service ----------------------------------------------------------------------

FinishReason = Literal["stop", "tool_calls", "length", "content_filter"]


class ToolSpec(WireModel):
    name: str = Field(min_length=1)
    description: str = ""
    input_schema: dict[str, Any] = Field(default_factory=lambda: {"type": "object", "properties": {}})


class CompletionRequest(WireModel):
    model: str = Field(min_length=1)
    messages: list[Message] = Field(min_length=1)
    tools: list[ToolSpec] = Field(default_factory=list)
    tool_choice: ToolChoice = "auto"
    stream: bool = False
    max_tokens: int | None = Field(default=None, ge=1)
    temperature: float | None = Field(default=None, ge=0, le=2)


class CompletionResponse(WireModel):
    message: Message
    finish_reason: FinishReason
    usage: Usage = Field(default_factory=Usage)
    model: str
    provider: str


class TextDelta(WireModel):
    type: Literal["text"] = "text"
    delta: str


class ReasoningDelta(WireModel):
    """A piece of the model's reasoning as it streams in, for display."""

    type: Literal["reasoning"] = "reasoning"
    delta: str


class ReasoningBlockEvent(WireModel):
    """A whole reasoning block once it is complete (after its ``reasoning`` deltas), for the next turn."""

    type: Literal["reasoning_block"] = "reasoning_block"
    block: ReasoningBlock


class ToolCallEvent(WireModel):
    type: Literal["tool_call"] = "tool_call"
    id: str
    name: str
    arguments: dict[str, Any] = Field(default_factory=dict)
    invalid_arguments: str | None = None
    signature: str | None = None


class CompletionDone(WireModel):
    type: Literal["done"] = "done"
    finish_reason: FinishReason
    usage: Usage = Field(default_factory=Usage)
    model: str
    provider: str


class StreamError(WireModel):
    type: Literal["error"] = "error"
    code: str
    message: str
    retryable: bool = False


CompletionEvent = Annotated[
    TextDelta | ReasoningDelta | ReasoningBlockEvent | ToolCallEvent | CompletionDone | StreamError,
    Field(discriminator="type"),
]
"""One SSE event of a streamed completion; the SSE ``event:`` field carries ``type`` too."""


class ModelInfo(WireModel):
    """One entry of ``GET /api/v1/models``: a model name, or a pattern (``openai/*``), and who answers it."""

    id: str
    provider: str
    upstream_model: str | None = None
    fallbacks: list[str] | None = None
    description: str | None = None


class ModelList(WireModel):
    models: list[ModelInfo]


class ModelTarget(WireModel):
    id: str
    provider: str
    upstream_model: str


class ResolvedModel(ModelTarget):
    """``GET /api/v1/models/{model}``: where a completion for this model name would go, fallbacks in order."""

    fallbacks: list[ModelTarget] | None = None


# --- mcp-client-service ----------------------------------------------------------------------


class ToolInfo(WireModel):
    name: str
    description: str = ""
    input_schema: dict[str, Any]
    server: str


class ListToolsResponse(WireModel):
    tools: list[ToolInfo]


class CallToolRequest(WireModel):
    name: str = Field(min_length=1)
    arguments: dict[str, Any] = Field(default_factory=dict)


class CallToolResponse(WireModel):
    content: list[dict[str, Any]]
    """MCP content blocks as the server sent them (``{"type": "text", "text": ...}`` and so on)."""
    structured_content: dict[str, Any] | None = None
    is_error: bool = False
    server: str
    duration_ms: float


# --- agent-service ---------------------------------------------------------------------------

RunFinishReason = Literal["stop", "max_iterations", "deadline", "cancelled"]


class AgentRunRequest(WireModel):
    model: str = Field(min_length=1)
    messages: list[Message] = Field(min_length=1)
    stream: bool = False
    tools: list[str] | None = None
    """Names of the tools the model may call; omitted means every available tool."""
    tool_choice: ToolChoice = "auto"
    max_iterations: int | None = Field(default=None, ge=1)
    """Lower than the service's cap (15) to stop sooner; higher is refused."""
    deadline_seconds: float | None = Field(default=None, gt=0)
    """Shorter than the service's deadline to stop sooner; longer is refused."""
    max_tokens: int | None = Field(default=None, ge=1)
    temperature: float | None = Field(default=None, ge=0, le=2)


class _RunEventBase(WireModel):
    run_id: str


class RunStarted(_RunEventBase):
    type: Literal["run_started"] = "run_started"
    model: str
    tools: list[str]
    max_iterations: int


class RunToolCall(_RunEventBase):
    type: Literal["tool_call"] = "tool_call"
    iteration: int
    id: str
    name: str
    arguments: dict[str, Any]


class RunToolResult(_RunEventBase):
    type: Literal["tool_result"] = "tool_result"
    iteration: int
    tool_call_id: str
    name: str
    content: str
    is_error: bool
    duration_ms: float


class RunText(_RunEventBase):
    type: Literal["text"] = "text"
    iteration: int
    delta: str


class RunReasoning(_RunEventBase):
    type: Literal["reasoning"] = "reasoning"
    iteration: int
    delta: str


class RunDone(_RunEventBase):
    type: Literal["done"] = "done"
    finish_reason: RunFinishReason
    iterations: int
    usage: Usage


class RunError(_RunEventBase):
    type: Literal["error"] = "error"
    code: str
    message: str


RunEvent = Annotated[
    RunStarted | RunToolCall | RunToolResult | RunText | RunReasoning | RunDone | RunError,
    Field(discriminator="type"),
]


class AgentRunResult(WireModel):
    """The answer to a run with ``stream: false``."""

    run_id: str
    message: Message
    messages: list[Message]
    """Every message the run appended to the conversation, in order."""
    finish_reason: RunFinishReason
    iterations: int
    usage: Usage
