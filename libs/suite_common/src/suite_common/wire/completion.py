"""completion-service's contract: a completion request, its answer whole or as stream events, and the model catalog
(docs/providers.md and the OpenAPI completion-service serves)."""

from __future__ import annotations

from typing import Annotated, Any, Literal

from pydantic import Field, model_validator

from suite_common.wire.base import WireModel
from suite_common.wire.conversation import Message, ModelName, ReasoningBlock, ToolChoice, Usage

__all__ = [
    "CompletionDone",
    "CompletionEvent",
    "CompletionRequest",
    "CompletionResponse",
    "FinishReason",
    "JsonSchemaFormat",
    "ModelInfo",
    "ModelList",
    "ModelPrices",
    "ModelTarget",
    "ReasoningBlockEvent",
    "ReasoningControl",
    "ReasoningDelta",
    "ReasoningEffort",
    "ResolvedModel",
    "ResponseFormat",
    "StreamError",
    "TextDelta",
    "ToolCallEvent",
    "ToolSpec",
    "Verbosity",
]

FinishReason = Literal["stop", "tool_calls", "length", "content_filter"]
ReasoningEffort = Literal["minimal", "low", "medium", "high"]
Verbosity = Literal["low", "medium", "high"]


class ToolSpec(WireModel):
    name: str = Field(min_length=1)
    description: str = ""
    input_schema: dict[str, Any] = Field(default_factory=lambda: {"type": "object", "properties": {}})


class ReasoningControl(WireModel):
    """How much a model that can reason should think before it answers, and whether a summary of its thinking
    comes back (as ``reasoning`` events and blocks). Each adapter maps it to its provider's own controls
    (docs/providers.md); a model that cannot reason ignores it, with a warning in the answer."""

    effort: ReasoningEffort | None = None
    """``None``: the provider's default."""
    summary: Literal["auto", "none"] | None = None
    """``auto``: the provider's summary of its reasoning where it gives one; ``none``: no reasoning text back."""


class JsonSchemaFormat(WireModel):
    """The schema a structured answer follows (OpenAI's ``json_schema`` object)."""

    name: str = Field(min_length=1, max_length=64, pattern=r"^[A-Za-z0-9_-]+$")
    schema_: dict[str, Any] = Field(alias="schema")
    """A JSON Schema (draft 2020-12) the final answer is validated against."""
    strict: bool | None = None
    """OpenAI's strict mode, passed on where the provider takes it; the answer is validated either way."""
    description: str | None = None


class ResponseFormat(WireModel):
    """What the final answer must be: JSON following a schema (``json_schema``), any JSON object (``json_object``),
    or plain text (``text``, the default). OpenAI's shape: ``json_schema`` keeps its snake_case name on the wire."""

    type: Literal["json_schema", "json_object", "text"]
    json_schema: JsonSchemaFormat | None = Field(default=None, alias="json_schema")

    @model_validator(mode="after")
    def _schema_given(self) -> ResponseFormat:
        if self.type == "json_schema" and self.json_schema is None:
            raise ValueError('a response format of type "json_schema" needs json_schema: {name, schema}')
        return self


class CompletionRequest(WireModel):
    model: ModelName
    messages: list[Message] = Field(min_length=1)
    tools: list[ToolSpec] = Field(default_factory=list)
    tool_choice: ToolChoice = "auto"
    stream: bool = False
    max_tokens: int | None = Field(default=None, ge=1)
    temperature: float | None = Field(default=None, ge=0, le=2)
    reasoning: ReasoningControl | None = None
    verbosity: Verbosity | None = None
    """How long the answer should be, where the model takes it (OpenAI's ``verbosity``); else ignored, with a
    warning in the answer."""
    response_format: ResponseFormat | None = None
    """The answer as JSON (a schema's, or any object), each provider asked its own way (docs/providers.md). The
    provider's answer is passed on as it came: validating it is the caller's (agent-service's) work."""


class CompletionResponse(WireModel):
    message: Message
    finish_reason: FinishReason
    usage: Usage = Field(default_factory=Usage)
    model: str
    provider: str
    warnings: list[str] | None = None
    """Controls of the request the model could not take and so ignored (``reasoning``, ``verbosity``), each said
    in a sentence; never a failed call for them."""


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
    warnings: list[str] | None = None
    """As ``CompletionResponse.warnings``."""


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


class ModelPrices(WireModel):
    """What a model's tokens cost, in US dollars per million, as completion-service's catalog gives them."""

    input_per_million_usd: float = Field(ge=0, allow_inf_nan=False)
    output_per_million_usd: float = Field(ge=0, allow_inf_nan=False)


class ModelInfo(WireModel):
    """One entry of ``GET /api/v1/models``: a model name, or a pattern (``openai/*``), and who answers it."""

    id: str
    provider: str
    upstream_model: str | None = None
    fallbacks: list[str] | None = None
    description: str | None = None
    prices: ModelPrices | None = None
    """The catalog entry's prices; ``None`` for names without them (``demo``, ``<provider>/*``)."""
    context_tokens: int | None = None
    """The model's context window in tokens (input and output together): the catalog entry's, else the provider's
    known default for the model; ``None``: unknown."""
    images: bool | None = None
    """Whether the model takes images in messages; ``None``: unknown (images are sent, the provider decides)."""


class ModelList(WireModel):
    models: list[ModelInfo]


class ModelTarget(WireModel):
    id: str
    provider: str
    upstream_model: str
    prices: ModelPrices | None = None
    """The prices of the completions this target answers (its ``usage.costUsd``); ``None``: unpriced."""
    context_tokens: int | None = None
    """As ``ModelInfo.context_tokens``."""
    images: bool | None = None
    """As ``ModelInfo.images``."""


class ResolvedModel(ModelTarget):
    """``GET /api/v1/models/{model}``: where a completion for this model name would go, fallbacks in order."""

    fallbacks: list[ModelTarget] | None = None
