"""A conversation as the services pass it on: messages with their tool calls and reasoning, the model name a
caller writes, and token usage (docs/agent-api.md, docs/providers.md)."""

from __future__ import annotations

from typing import Annotated, Any, Literal

from pydantic import AfterValidator, Field, model_validator

from suite_common.wire.base import WireModel

__all__ = [
    "MAX_MODEL_NAME_CHARS",
    "ContentPart",
    "ImagePart",
    "ImageUrl",
    "Message",
    "ModelName",
    "NamedToolChoice",
    "ReasoningBlock",
    "TextPart",
    "ToolCall",
    "ToolChoice",
    "Usage",
]

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


class TextPart(WireModel):
    """A message's text, as one of its content parts (OpenAI's shape)."""

    type: Literal["text"] = "text"
    text: str


class ImageUrl(WireModel):
    url: str = Field(min_length=1)
    """An ``https`` URL, a ``data:<media type>;base64,...`` URL, or a stored image of agent-service
    (``/api/v1/agent/images/<sha256>``, as stored runs keep images: by reference)."""
    detail: Literal["auto", "low", "high"] | None = None
    """OpenAI's ``detail``; other providers ignore it."""


class ImagePart(WireModel):
    """An image in a user message or a tool result (OpenAI's shape: ``{"type": "image_url", "image_url": {"url"}}``).
    The field keeps its snake_case name on the wire, as OpenAI spells it."""

    type: Literal["image_url"] = "image_url"
    image_url: ImageUrl = Field(alias="image_url")


ContentPart = Annotated[TextPart | ImagePart, Field(discriminator="type")]
"""One part of a message's content: text or an image."""


class Message(WireModel):
    role: Role
    content: str | list[ContentPart] | None = None
    """Text, or content parts (text and images: images only on ``user`` and ``tool`` messages)."""
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
        if self.role in ("system", "assistant") and self.images:
            raise ValueError(f"a {self.role} message carries no images (only user and tool messages do)")
        return self

    @property
    def text(self) -> str | None:
        """The message's text: ``content`` itself, or its text parts joined by blank lines (``None``: no text)."""
        content = self.content
        if content is None or isinstance(content, str):
            return content
        texts = [part.text for part in content if isinstance(part, TextPart)]
        return "\n\n".join(texts) if texts else None

    @property
    def images(self) -> list[ImagePart]:
        """The message's image parts, in order (none for text content)."""
        content = self.content
        if content is None or isinstance(content, str):
            return []
        return [part for part in content if isinstance(part, ImagePart)]


class NamedToolChoice(WireModel):
    name: str = Field(min_length=1)


ToolChoice = Literal["auto", "none", "required"] | NamedToolChoice


MAX_MODEL_NAME_CHARS = 256
"""The longest model name agent-service and completion-service accept (400 beyond). Real names are far
shorter (a Bedrock inference-profile ARN is about 100 characters); a name travels in URLs and messages."""


def _printable_model_name(name: str) -> str:
    if not name.isprintable():
        raise ValueError("a model name has no control characters (newlines, tabs, ...)")
    return name


ModelName = Annotated[str, Field(min_length=1, max_length=MAX_MODEL_NAME_CHARS), AfterValidator(_printable_model_name)]
"""A model name as a caller writes it: 1 to ``MAX_MODEL_NAME_CHARS`` printable characters."""


class Usage(WireModel):
    input_tokens: int = 0
    output_tokens: int = 0
    reasoning_tokens: int | None = None
    """Of ``output_tokens``, those the model spent reasoning, where the provider reports them (OpenAI's
    ``reasoning_tokens``, Gemini's ``thoughtsTokenCount``); ``None`` when it does not."""
    cost_usd: float | None = None
    """What the tokens cost in US dollars, at the prices of completion-service's model catalog; ``None`` when no
    call of it had a price (a sum of calls counts the priced ones)."""

    @property
    def total_tokens(self) -> int:
        return self.input_tokens + self.output_tokens

    def __add__(self, other: Usage) -> Usage:
        if self.cost_usd is None and other.cost_usd is None:
            cost = None
        else:
            cost = (self.cost_usd or 0.0) + (other.cost_usd or 0.0)
        if self.reasoning_tokens is None and other.reasoning_tokens is None:
            reasoning = None
        else:
            reasoning = (self.reasoning_tokens or 0) + (other.reasoning_tokens or 0)
        return Usage(
            input_tokens=self.input_tokens + other.input_tokens,
            output_tokens=self.output_tokens + other.output_tokens,
            reasoning_tokens=reasoning,
            cost_usd=cost,
        )
