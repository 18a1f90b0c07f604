"""OpenAI's Chat Completions wire format and the suite's runs, translated both ways. Pure: no I/O.

The request and response models are explicit so that the front's routes can declare them (OpenAPI).
The shapes the format has in both directions (messages, tool calls, usage, choices) and its argument
and usage helpers are ``suite_common.openai_chat``'s, shared with completion-service's ``openai`` provider;
what is the front's own is here: the request it accepts (its limits), the ``agent`` extension fields,
the model list, errors, and the stream's chunks. See docs/openai-front.md.
"""

from __future__ import annotations

import json
from typing import Any, Literal

from pydantic import Field, ValidationError

from suite_common.echo import clip
from suite_common.openai_chat import (
    ChatMessage,
    Choice,
    ChunkChoice,
    CompletionUsage,
    NamedToolChoiceItem,
    OpenAIModel,
    ResponseFunctionCall,
    ResponseMessage,
    ResponseToolCall,
    StreamOptions,
    ToolDefinition,
    arguments_text,
    completion_usage,
    to_tool_call,
)
from suite_common.wire import (
    ContentPart,
    ImagePart,
    ImageUrl,
    Message,
    ModelName,
    NamedToolChoice,
    ReasoningControl,
    ReasoningEffort,
    ResponseFormat,
    StreamMode,
    TextPart,
    ToolCall,
    ToolChoice,
    ToolSpec,
    Usage,
)

__all__ = [
    "AGENT_FINISH_FIELD",
    "FINAL_CHUNK_BYTES",
    "AgentInfo",
    "ChatCompletion",
    "ChatCompletionChunk",
    "ChatCompletionRequest",
    "ChunkWriter",
    "ModelCard",
    "ModelList",
    "OpenAIError",
    "StreamMode",
    "WireError",
    "chat_completion",
    "client_tool_specs",
    "error_body",
    "error_status",
    "final_reasoning",
    "final_text",
    "model_list",
    "openai_finish_reason",
    "to_messages",
    "to_reasoning",
    "to_tool_choice",
    "utf8_pieces",
]

FINAL_CHUNK_BYTES = 64
"""``final_only`` sends the final answer in pieces of at most this many bytes."""

AGENT_FINISH_FIELD = "agent"
"""The extension field (on a completion and on the last chunk) that says how the run ended in the suite's terms."""

ROUND_SEPARATOR = "\n\n"
"""Between the texts of two rounds of a run, in the answer's content (streamed or not)."""


class WireError(ValueError):
    """The request is well-formed JSON but cannot be translated; the message says why (a 400)."""


# --- the request -------------------------------------------------------------------------------


class ChatCompletionRequest(OpenAIModel):
    """``POST /v1/chat/completions``."""

    model: ModelName
    messages: list[ChatMessage] = Field(min_length=1)
    stream: bool = False
    stream_options: StreamOptions | None = None
    tools: list[ToolDefinition] | None = None
    """Client-side tools: the model may call them, the caller runs them."""
    tool_choice: Literal["none", "auto", "required"] | NamedToolChoiceItem | None = None
    max_tokens: int | None = Field(default=None, ge=1)
    max_completion_tokens: int | None = Field(default=None, ge=1)
    temperature: float | None = Field(default=None, ge=0, le=2)
    n: int | None = Field(default=None, ge=1, le=1)
    """One choice per request: a run has one answer."""
    reasoning_effort: Literal["none", "minimal", "low", "medium", "high", "xhigh", "max"] | None = None
    """As OpenAI's SDK sends it: the run's ``reasoning.effort`` (``to_reasoning``)."""
    verbosity: Literal["low", "medium", "high"] | None = None
    """The run's ``verbosity``."""
    response_format: ResponseFormat | None = None
    """The run's ``responseFormat`` (OpenAI's shape is the suite's): the answer's content is the validated JSON."""


# --- the answers -------------------------------------------------------------------------------


class AgentInfo(OpenAIModel):
    """How the run ended in the suite's own terms (``finish_reason``: stop, tool_calls, max_iterations, ...)."""

    run_id: str | None = None
    """None when the request went straight to one completion, without a run."""
    finish_reason: str
    iterations: int
    warnings: list[str] | None = None
    """Controls of the request its model ignored (``reasoning_effort``, ``verbosity``), each in a sentence."""


class ChatCompletion(OpenAIModel):
    """The answer with ``stream: false`` (or in the ``disabled`` stream mode)."""

    id: str
    object: Literal["chat.completion"] = "chat.completion"
    created: int
    model: str
    choices: list[Choice]
    usage: CompletionUsage
    agent: AgentInfo


class ChatCompletionChunk(OpenAIModel):
    """One ``data:`` frame of a streamed answer; ``ChunkWriter`` writes them."""

    id: str
    object: Literal["chat.completion.chunk"] = "chat.completion.chunk"
    created: int
    model: str
    choices: list[ChunkChoice]
    usage: CompletionUsage | None = None
    agent: AgentInfo | None = None
    """On the frame that carries the finish reason."""
    agent_event: dict[str, Any] | None = None
    """On the extra frames (``choices: []``) asked for with ``X-Agent-Events``: one event of the agent API."""


class ModelCard(OpenAIModel):
    id: str
    object: Literal["model"] = "model"
    created: int = 0
    owned_by: str


class ModelList(OpenAIModel):
    """``GET /v1/models``."""

    object: Literal["list"] = "list"
    data: list[ModelCard]


class OpenAIErrorDetail(OpenAIModel):
    message: str
    type: str
    param: str | None = None
    code: str | None = None


class OpenAIError(OpenAIModel):
    """Every error of the front: the SDK reads ``error.message`` and picks its exception class by status."""

    error: OpenAIErrorDetail


# --- request -> run ----------------------------------------------------------------------------


def _content(message: ChatMessage) -> str | list[ContentPart] | None:
    """Text as text; parts with an image as the suite's content parts (the image's URL is checked with the run's)."""
    content = message.content
    if content is None or isinstance(content, str):
        return content
    parts: list[ContentPart] = []
    for part in content:
        if part.type == "text" and part.text is not None:
            parts.append(TextPart(text=part.text))
        elif part.type == "image_url" and part.image_url is not None and part.image_url.url:
            parts.append(ImagePart(image_url=ImageUrl(url=part.image_url.url, detail=part.image_url.detail)))
        else:
            raise WireError(
                f"{message.role} message: content parts of type {clip(part.type)!r} are not supported "
                "(text and image_url only)."
            )
    if all(isinstance(part, TextPart) for part in parts):
        return "".join(part.text for part in parts if isinstance(part, TextPart))
    return parts


def to_messages(request: ChatCompletionRequest) -> list[Message]:
    """The conversation in the suite's terms; ``developer`` is a ``system`` message."""
    messages = []
    for index, message in enumerate(request.messages):
        role = "system" if message.role == "developer" else message.role
        try:
            messages.append(
                Message(
                    role=role,
                    content=_content(message),
                    tool_calls=[to_tool_call(item) for item in message.tool_calls] if message.tool_calls else None,
                    tool_call_id=message.tool_call_id,
                )
            )
        except ValidationError as error:
            problem = error.errors(include_url=False, include_input=False)[0]["msg"].removeprefix("Value error, ")
            raise WireError(f"messages.{index}: {problem}") from None
    return messages


def client_tool_specs(request: ChatCompletionRequest) -> list[ToolSpec]:
    specs = []
    for tool in request.tools or []:
        function = tool.function
        schema = function.parameters or {"type": "object", "properties": {}}
        specs.append(ToolSpec(name=function.name, description=function.description, input_schema=schema))
    names = [spec.name for spec in specs]
    if len(set(names)) != len(names):
        raise WireError("tools: two tools have the same name.")
    return specs


_EFFORTS: dict[str, ReasoningEffort] = {
    "none": "minimal",
    "minimal": "minimal",
    "low": "low",
    "medium": "medium",
    "high": "high",
    "xhigh": "high",
    "max": "high",
}
"""OpenAI's efforts as the suite's: those beyond its four as the nearest of them."""


def to_reasoning(request: ChatCompletionRequest, *, summary: bool) -> ReasoningControl | None:
    """The run's ``reasoning``: OpenAI's ``reasoning_effort``, the suite's nearest for ``none`` (``minimal``) and
    ``xhigh``/``max`` (``high``); ``summary``: the client asked to see the reasoning (``X-Agent-Reasoning``)."""
    asked = request.reasoning_effort
    effort = None if asked is None else _EFFORTS[asked]
    if effort is None and not summary:
        return None
    return ReasoningControl(effort=effort, summary="auto" if summary else None)


def to_tool_choice(request: ChatCompletionRequest) -> ToolChoice:
    choice = request.tool_choice
    if choice is None:
        return "auto"
    if isinstance(choice, NamedToolChoiceItem):
        return NamedToolChoice(name=choice.function.name)
    return choice


# --- run -> answer -----------------------------------------------------------------------------

_FINISH_REASONS = {
    "stop": "stop",
    "tool_calls": "tool_calls",
    "length": "length",
    "content_filter": "content_filter",
    "max_iterations": "length",
    "deadline": "length",
    "budget": "length",
}


def openai_finish_reason(reason: str) -> str:
    """A run's (or a completion's) finish reason as OpenAI clients know them: the run's limits are ``length``
    (an answer cut short). A reason this table does not know yet is ``stop``, never a failure: the suite's own
    reason travels in the ``agent`` field anyway."""
    return _FINISH_REASONS.get(reason, "stop")


def final_text(appended: list[Message], *, structured: bool = False) -> str | None:
    """The answer's content: the text of every assistant turn of the run, in order, a blank line between; or, for
    a ``structured`` answer (``response_format``), the last turn's only, which is the JSON."""
    if structured:
        last = next((m for m in reversed(appended) if m.role == "assistant"), None)
        return last.text if last is not None else None
    texts = [m.text for m in appended if m.role == "assistant" and m.text]
    return ROUND_SEPARATOR.join(texts) if texts else None


def final_reasoning(appended: list[Message]) -> str | None:
    """The reasoning of every assistant turn of the run that has some text of it, in order, a blank line between."""
    texts = ["".join(block.text for block in m.reasoning or ()) for m in appended if m.role == "assistant"]
    texts = [text for text in texts if text]
    return ROUND_SEPARATOR.join(texts) if texts else None


def chat_completion(
    *,
    completion_id: str,
    created: int,
    model: str,
    content: str | None,
    tool_calls: list[ToolCall] | None,
    agent: AgentInfo,
    usage: Usage,
    reasoning: str | None = None,
) -> ChatCompletion:
    calls = [
        ResponseToolCall(id=c.id, function=ResponseFunctionCall(name=c.name, arguments=arguments_text(c)))
        for c in tool_calls or []
    ]
    return ChatCompletion(
        id=completion_id,
        created=created,
        model=model,
        choices=[
            Choice(
                message=ResponseMessage(content=content, tool_calls=calls or None, reasoning_content=reasoning),
                finish_reason=openai_finish_reason(agent.finish_reason),
            )
        ],
        usage=completion_usage(usage),
        agent=agent,
    )


def model_list(models: list[dict[str, Any]]) -> ModelList:
    """completion-service's model list; its patterns (``openai/*``) are not models a client can pick."""
    cards = [
        ModelCard(id=str(entry["id"]), owned_by=str(entry.get("provider") or "loopsuite"))
        for entry in models
        if "id" in entry and "*" not in str(entry["id"])
    ]
    return ModelList(data=cards)


def utf8_pieces(text: str, max_bytes: int = FINAL_CHUNK_BYTES) -> list[str]:
    """``text`` in pieces of at most ``max_bytes`` bytes of UTF-8 each, never cutting a character in two."""
    if max_bytes < 4:
        raise ValueError("a piece must hold any UTF-8 character (4 bytes)")
    data = text.encode()
    pieces = []
    start = 0
    while start < len(data):
        end = min(start + max_bytes, len(data))
        while end < len(data) and data[end] & 0xC0 == 0x80:  # a continuation byte: back off to its lead byte
            end -= 1
        pieces.append(data[start:end].decode())
        start = end
    return pieces


class ChunkWriter:
    """The ``data:`` payloads of one streamed answer. The parts every chunk shares are encoded once, so a text
    delta costs one ``json.dumps`` of its text (the chunks match ``ChatCompletionChunk``)."""

    def __init__(self, completion_id: str, created: int, model: str, *, include_usage: bool) -> None:
        self.include_usage = include_usage
        head = {"id": completion_id, "object": "chat.completion.chunk", "created": created, "model": model}
        self._head = json.dumps(head, ensure_ascii=False, separators=(",", ":"))[:-1]
        self._usage_null = ',"usage":null' if include_usage else ""

    def _choice(self, delta: str, finish_reason: str | None = None, extra: str = "") -> str:
        finish = "null" if finish_reason is None else json.dumps(finish_reason)
        return (
            f'{self._head},"choices":[{{"index":0,"delta":{delta},"logprobs":null,"finish_reason":{finish}}}]'
            f"{self._usage_null}{extra}}}"
        )

    def role(self) -> str:
        return self._choice('{"role":"assistant","content":""}')

    def text(self, delta: str) -> str:
        return self._choice('{"content":' + json.dumps(delta, ensure_ascii=False) + "}")

    def reasoning(self, delta: str) -> str:
        return self._choice('{"reasoning_content":' + json.dumps(delta, ensure_ascii=False) + "}")

    def tool_calls(self, calls: list[ToolCall]) -> str:
        items = [
            {
                "index": index,
                "id": call.id,
                "type": "function",
                "function": {"name": call.name, "arguments": arguments_text(call)},
            }
            for index, call in enumerate(calls)
        ]
        return self._choice(json.dumps({"tool_calls": items}, ensure_ascii=False))

    def finish(self, agent: AgentInfo) -> str:
        extra = f',"{AGENT_FINISH_FIELD}":{agent.model_dump_json(exclude_none=True)}'
        return self._choice("{}", openai_finish_reason(agent.finish_reason), extra)

    def usage(self, usage: Usage) -> str:
        return f'{self._head},"choices":[],"usage":{completion_usage(usage).model_dump_json(exclude_none=True)}}}'

    def agent_event(self, event_json: str) -> str:
        """An extra frame: no choice (so OpenAI clients skip it, as they skip the usage chunk), the event as the
        agent API streams it."""
        return f'{self._head},"choices":[]{self._usage_null},"agent_event":{event_json}}}'


# --- errors ------------------------------------------------------------------------------------

_ERROR_TYPES = {401: "authentication_error", 403: "permission_error", 429: "rate_limit_error"}


def error_status(status: int, code: str) -> int:
    """OpenAI answers an unknown model with 404 (the SDK's ``NotFoundError``); the suite's other statuses stand."""
    return 404 if code == "model_not_found" else status


def error_body(status: int, code: str, message: str) -> dict[str, Any]:
    """OpenAI's error shape: ``type`` from the status, the suite's own ``code`` kept."""
    kind = _ERROR_TYPES.get(status) or ("server_error" if status >= 500 else "invalid_request_error")
    return {"error": {"message": message, "type": kind, "param": None, "code": code}}
