"""OpenAI Chat Completions, which every OpenAI-compatible server (vLLM, Ollama, LM Studio) speaks.

The first half is pure translation between the neutral wire models and the Chat Completions
JSON, tested on exact bodies: the request is built from ``suite_common.openai_chat``'s shapes (which
agent-service's OpenAI front reads), the answer read field by field with its helpers. The second half,
``OpenAIProvider``, says how a call is made; the shared ``HttpAdapter`` makes it (retries, deadline, the
event stream read).
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any

import httpx

from completion_service.providers._adapter import HttpAdapter, Outbound
from completion_service.providers._errors import bad_response
from completion_service.providers._images import parts_of, tool_images_note, with_tool_images
from completion_service.providers._openai_wire import (
    TOOL_NAMES,
    OpenAIEndpoint,
    error_detail,
    json_schema_format,
    reasoning_effort,
    reasons,
    temperature_warnings,
    translate_error,
)
from suite_common.errors import ApiError
from suite_common.openai_chat import (
    arguments_text,
    parse_arguments,
    usage_of,
)
from suite_common.wire import (
    CompletionDone,
    CompletionEvent,
    CompletionRequest,
    CompletionResponse,
    FinishReason,
    ImagePart,
    Message,
    ReasoningBlock,
    ReasoningBlockEvent,
    ReasoningDelta,
    ResponseFormat,
    TextDelta,
    TextPart,
    ToolCall,
    ToolCallEvent,
    ToolChoice,
    ToolSpec,
    Usage,
)

__all__ = [
    "TOOL_NAMES",
    "OpenAIProvider",
    "StreamAssembler",
    "build_request_body",
    "parse_response",
    "translate_error",
]

PROVIDER_NAME = "openai"

_FINISH_REASONS: dict[str, FinishReason] = {
    "stop": "stop",
    "tool_calls": "tool_calls",
    "function_call": "tool_calls",  # the legacy name of the same thing
    "length": "length",
    "content_filter": "content_filter",
}


# --- neutral -> Chat Completions ---------------------------------------------------------------


def build_request_body(
    request: CompletionRequest,
    upstream_model: str,
    *,
    stream: bool,
    max_tokens_field: str = "max_tokens",
    reasoning: bool = False,
) -> dict[str, Any]:
    """The JSON body of ``POST /chat/completions`` for ``request``; ``max_tokens_field`` is
    ``max_completion_tokens`` for OpenAI itself, whose reasoning models refuse ``max_tokens``; ``reasoning``: the
    model reasons (``reasons``), so it gets no ``temperature`` (``temperature_warnings`` says so)."""
    body: dict[str, Any] = {
        "model": upstream_model,
        "messages": _messages(request.messages),
        "stream": stream,
    }
    if stream:
        # Without it a stream carries no token counts at all.
        body["stream_options"] = {"include_usage": True}
    if request.tools:
        # OpenAI refuses tool_choice without tools, so both go or neither.
        body["tools"] = [_tool(tool) for tool in request.tools]
        body["tool_choice"] = _tool_choice(request.tool_choice)
    if request.max_tokens is not None:
        body[max_tokens_field] = request.max_tokens
    if request.temperature is not None and not reasoning:
        body["temperature"] = request.temperature
    # Only for models that take them (``controls``); Chat Completions returns no summary of OpenAI's own reasoning.
    if request.reasoning is not None and request.reasoning.effort is not None:
        body["reasoning_effort"] = reasoning_effort(request.reasoning.effort, upstream_model)
    if request.verbosity is not None:
        body["verbosity"] = request.verbosity
    answer_format = request.response_format
    if answer_format is not None and answer_format.type != "text":
        body["response_format"] = _response_format(answer_format)
    return body


def _response_format(answer_format: ResponseFormat) -> dict[str, Any]:
    """Chat Completions' ``response_format``: ``json_schema`` (strict where asked) or ``json_object``."""
    schema = answer_format.json_schema
    if schema is None:
        return {"type": "json_object"}
    return {"type": "json_schema", "json_schema": json_schema_format(schema)}


# Plain dicts, not the ``openai_chat`` models: building and dumping the models costs four times as much on every
# LLM call (21 against 5 µs for a four-message request, measured) and grows with the conversation. The round-trip
# tests (tests/unit/suite_common/test_openai_chat.py) hold these dicts to what those models read.


def _messages(messages: list[Message]) -> list[dict[str, Any]]:
    """The conversation; a tool result's images (Chat Completions takes none in a tool message) follow in one user
    message after the round's tool messages, which must come right after the assistant's calls."""
    return [
        _message(entry)
        if isinstance(entry, Message)
        else {"role": "user", "content": [part for result in entry for part in _tool_image_parts(result)]}
        for entry in with_tool_images(messages)
    ]


def _tool_image_parts(result: Message) -> list[dict[str, Any]]:
    return [{"type": "text", "text": tool_images_note(result)}, *map(_image_part, result.images)]


def _image_part(part: ImagePart) -> dict[str, Any]:
    image_url: dict[str, Any] = {"url": part.image_url.url}
    if part.image_url.detail is not None:
        image_url["detail"] = part.image_url.detail
    return {"type": "image_url", "image_url": image_url}


def _content(message: Message) -> str | list[dict[str, Any]]:
    """Text, or text and image parts (``image_url``: ``https`` and ``data:`` URLs as they came)."""
    if not message.images:
        return message.text or ""
    return [
        {"type": "text", "text": part.text} if isinstance(part, TextPart) else _image_part(part)
        for part in parts_of(message)
    ]


def _message(message: Message) -> dict[str, Any]:
    if message.role == "tool":
        # Chat Completions has no error flag on tool results: the content has to say so.
        content = message.text or ""
        if message.is_error and not content.lower().startswith("error"):
            content = f"Error: {content}"
        return {"role": "tool", "tool_call_id": message.tool_call_id, "content": content}
    if message.role == "assistant" and message.tool_calls:
        return {
            "role": "assistant",
            "content": message.text,
            "tool_calls": [
                {"id": call.id, "type": "function", "function": {"name": call.name, "arguments": arguments_text(call)}}
                for call in message.tool_calls
            ],
        }
    return {"role": message.role, "content": _content(message)}


def _tool(tool: ToolSpec) -> dict[str, Any]:
    return {
        "type": "function",
        "function": {"name": tool.name, "description": tool.description, "parameters": tool.input_schema},
    }


def _tool_choice(choice: ToolChoice) -> str | dict[str, Any]:
    if isinstance(choice, str):
        return choice
    return {"type": "function", "function": {"name": choice.name}}


# --- Chat Completions -> neutral ---------------------------------------------------------------


def _finish_reason(raw: Any, *, has_tool_calls: bool) -> FinishReason:
    reason = _FINISH_REASONS.get(raw) if isinstance(raw, str) else None
    if has_tool_calls and reason in (None, "stop"):
        # Some compatible servers say "stop" after a tool call; the calls are what counts.
        return "tool_calls"
    return reason or "stop"


def _text(raw: Any, what: str) -> str | None:
    if raw is None or isinstance(raw, str):
        return raw
    raise bad_response(f"{what} is not a string")


def parse_response(body: Any, model: str, *, provider: str = PROVIDER_NAME) -> CompletionResponse:
    """A whole ``chat.completion`` object as the neutral response reported under ``model``."""
    if not isinstance(body, dict):
        raise bad_response("the body is not a JSON object")
    choices = body.get("choices")
    if not isinstance(choices, list) or not choices or not isinstance(choices[0], dict):
        raise bad_response("no choices")
    choice = choices[0]
    message = choice.get("message")
    if not isinstance(message, dict):
        raise bad_response("the choice has no message")
    content = _text(message.get("content"), "message.content") or _text(message.get("refusal"), "message.refusal")
    raw_calls = message.get("tool_calls") or []
    if not isinstance(raw_calls, list):
        raise bad_response("message.tool_calls is not a list")
    calls = [_tool_call(raw, position) for position, raw in enumerate(raw_calls)]
    thought = _reasoning_text(message, "message")
    reasoning = [ReasoningBlock(text=thought, provider=provider)] if thought else None
    return CompletionResponse(
        message=Message(role="assistant", content=content or None, reasoning=reasoning, tool_calls=calls or None),
        finish_reason=_finish_reason(choice.get("finish_reason"), has_tool_calls=bool(calls)),
        usage=usage_of(body.get("usage")),
        model=model,
        provider=provider,
    )


def _reasoning_text(holder: dict[str, Any], what: str) -> str | None:
    """The reasoning a compatible server adds: ``reasoning_content`` (vLLM, DeepSeek, SGLang) or ``reasoning``
    (OpenRouter, Ollama). OpenAI itself returns none in Chat Completions. It is for the caller to see: these
    servers do not want it back, so it is never replayed."""
    for key in ("reasoning_content", "reasoning"):
        text = _text(holder.get(key), f"{what}.{key}")
        if text:
            return text
    return None


def _tool_call(raw: Any, position: int) -> ToolCall:
    function = raw.get("function") if isinstance(raw, dict) else None
    if not isinstance(function, dict) or not isinstance(function.get("name"), str) or not function["name"]:
        raise bad_response(f"tool call {position} has no function name")
    arguments, invalid = parse_arguments(function.get("arguments"))
    call_id = raw.get("id") if isinstance(raw, dict) else None
    return ToolCall(
        id=call_id if isinstance(call_id, str) and call_id else f"call_{position}",
        name=function["name"],
        arguments=arguments,
        invalid_arguments=invalid,
    )


@dataclass
class _PartialCall:
    id: str = ""
    name: str = ""
    arguments: list[str] = field(default_factory=list)


class StreamAssembler:
    """Folds ``chat.completion.chunk`` objects into neutral events.

    ``feed`` returns the text deltas of a chunk at once; tool calls, whose arguments arrive in
    fragments keyed by ``index``, come out whole from ``finish``, followed by ``done``.
    """

    def __init__(self, *, model: str, provider: str = PROVIDER_NAME) -> None:
        self.model = model
        self.provider = provider
        self.finish_reason: str | None = None
        self.ended = False
        """``[DONE]`` arrived."""
        self._usage = Usage()
        self._calls: dict[int, _PartialCall] = {}
        self._last_index: int | None = None
        self._reasoning: list[str] = []

    def feed(self, chunk: Any) -> list[CompletionEvent]:
        if not isinstance(chunk, dict):
            raise bad_response("a stream chunk is not a JSON object")
        if "error" in chunk:
            message, _ = error_detail(chunk)
            raise ApiError(
                503,
                "upstream_unavailable",
                f"The provider failed in the middle of the stream: {message or 'no reason given'}",
                retryable=True,
            )
        if isinstance(chunk.get("usage"), dict):
            self._usage = usage_of(chunk["usage"])
        choices = chunk.get("choices") or []
        if not isinstance(choices, list):
            raise bad_response("chunk choices is not a list")
        events: list[CompletionEvent] = []
        for choice in choices[:1]:  # n=1: one choice per request
            if not isinstance(choice, dict):
                raise bad_response("a chunk choice is not an object")
            delta = choice.get("delta") or {}
            if not isinstance(delta, dict):
                raise bad_response("a chunk delta is not an object")
            # Most chunks carry only ``content``: the other fields are looked at only when present.
            if "reasoning_content" in delta or "reasoning" in delta:
                thought = _reasoning_text(delta, "delta")
                if thought:
                    self._reasoning.append(thought)
                    events.append(ReasoningDelta(delta=thought))
            text = _text(delta.get("content"), "delta.content")
            if text:
                events.append(TextDelta(delta=text))
            if "refusal" in delta:
                refusal = _text(delta["refusal"], "delta.refusal")
                if refusal:
                    events.append(TextDelta(delta=refusal))
            tool_calls = delta.get("tool_calls") or []
            if not isinstance(tool_calls, list):
                raise bad_response("delta.tool_calls is not a list")
            for fragment in tool_calls:
                self._add_fragment(fragment)
            if isinstance(choice.get("finish_reason"), str):
                self.finish_reason = choice["finish_reason"]
        return events

    def _add_fragment(self, fragment: Any) -> None:
        if not isinstance(fragment, dict):
            raise bad_response("a tool call delta is not an object")
        index = fragment.get("index")
        if not isinstance(index, int):
            # Some compatible servers leave out the index: a new id starts a new call.
            new_id = fragment.get("id")
            known = any(call.id == new_id for call in self._calls.values())
            index = len(self._calls) if self._last_index is None or (new_id and not known) else self._last_index
        self._last_index = index
        call = self._calls.setdefault(index, _PartialCall())
        if isinstance(fragment.get("id"), str) and fragment["id"] and not call.id:
            call.id = fragment["id"]
        function = fragment.get("function") or {}
        if not isinstance(function, dict):
            raise bad_response("a tool call delta has a malformed function")
        if isinstance(function.get("name"), str) and function["name"] and not call.name:
            call.name = function["name"]
        arguments = function.get("arguments")
        if isinstance(arguments, str):
            call.arguments.append(arguments)
        elif isinstance(arguments, dict):
            call.arguments.append(json.dumps(arguments))

    def finish(self) -> list[CompletionEvent]:
        """The reasoning block, the assembled tool calls, then ``done``; call it once the stream has ended."""
        if not self.ended and self.finish_reason is None:
            raise bad_response("the stream ended before the model finished")
        events: list[CompletionEvent] = []
        if self._reasoning:
            block = ReasoningBlock(text="".join(self._reasoning), provider=self.provider)
            events.append(ReasoningBlockEvent(block=block))
        for index in sorted(self._calls):
            call = self._calls[index]
            if not call.name:
                raise bad_response(f"streamed tool call {index} has no function name")
            arguments, invalid = parse_arguments("".join(call.arguments))
            events.append(
                ToolCallEvent(
                    id=call.id or f"call_{index}", name=call.name, arguments=arguments, invalid_arguments=invalid
                )
            )
        events.append(
            CompletionDone(
                finish_reason=_finish_reason(self.finish_reason, has_tool_calls=bool(self._calls)),
                usage=self._usage,
                model=self.model,
                provider=self.provider,
            )
        )
        return events


# --- I/O ---------------------------------------------------------------------------------------


class OpenAIProvider(HttpAdapter):
    """Calls ``{base_url}/chat/completions`` through the service's shared ``httpx.AsyncClient``."""

    tool_names = TOOL_NAMES
    sse_end = "[DONE]"

    def __init__(
        self,
        http: httpx.AsyncClient,
        base_url: str,
        api_key: str | None,
        *,
        max_retries: int = 2,
        name: str = PROVIDER_NAME,
        auth_header: str = "Authorization",
        max_tokens_field: str = "max_tokens",
    ) -> None:
        self.name = name
        self._max_tokens_field = max_tokens_field
        self._endpoint = OpenAIEndpoint.at(
            http,
            base_url,
            "/chat/completions",
            api_key,
            provider=name,
            auth_header=auth_header,
            max_retries=max_retries,
        )

    def _parse(self, body: Any, model: str) -> CompletionResponse:
        return parse_response(body, model, provider=self.name)

    def _decoder(self, model: str) -> StreamAssembler:
        # Some compatible servers (vLLM and others, when tools are offered) answer a stream with one
        # chat.completion: ``HttpAdapter`` passes it on as the events of one.
        return StreamAssembler(model=model, provider=self.name)

    async def _outbound(self, request: CompletionRequest, upstream_model: str, *, stream: bool) -> Outbound:
        reasoning = reasons(request, upstream_model)
        body = build_request_body(
            request, upstream_model, stream=stream, max_tokens_field=self._max_tokens_field, reasoning=reasoning
        )
        warnings = temperature_warnings(request, reasoning)
        return self._endpoint.post(body, stream=stream, upstream_model=upstream_model, warnings=warnings)
