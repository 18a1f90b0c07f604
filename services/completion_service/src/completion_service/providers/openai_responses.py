"""OpenAI's Responses API (``POST /v1/responses``), the format OpenAI's reasoning models give summaries in.

Stateless: every call sends the whole conversation as input items with ``store: false``, and asks
for ``reasoning.encrypted_content``. A reasoning item comes back as a ``ReasoningBlock`` of this
provider (``signature``: the item's id, ``redacted_data``: its encrypted content, ``text``: its
summary) and goes out again, before the calls it led to, on the next round: the API refuses a
``function_call`` without the reasoning item that produced it, and cannot look it up unstored.

The first half is pure translation between the neutral wire models and the Responses JSON, tested
on exact bodies; ``ResponsesProvider`` says how a call is made, the shared ``HttpAdapter`` makes it.
"""

from __future__ import annotations

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
)
from suite_common.errors import ApiError
from suite_common.openai_chat import arguments_text, parse_arguments
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
    TextDelta,
    TextPart,
    ToolCall,
    ToolCallEvent,
    ToolChoice,
    ToolSpec,
    Usage,
)

__all__ = [
    "IGNORED_EVENTS",
    "PROVIDER_NAME",
    "ResponsesProvider",
    "ResponsesStream",
    "build_request_body",
    "parse_response",
]

PROVIDER_NAME = "openai-responses"
SUMMARY_SEPARATOR = "\n\n"
"""Between the parts of one reasoning summary, in the block's text and between their streamed deltas."""

IGNORED_EVENTS = frozenset(
    {
        "response.created",
        "response.in_progress",
        "response.content_part.added",
        "response.content_part.done",
        "response.output_text.done",
        "response.reasoning_summary_part.added",
        "response.reasoning_summary_part.done",
        "response.reasoning_summary_text.done",
        "response.function_call_arguments.done",
    }
)
"""Stream events whose content the decoder already has from the deltas and items (or never needs): the adapter
skips them by their ``event:`` name without parsing them (``response.created`` echoes the whole request)."""

_INCOMPLETE: dict[str, FinishReason] = {"max_output_tokens": "length", "content_filter": "content_filter"}


# --- neutral -> Responses ----------------------------------------------------------------------


def build_request_body(
    request: CompletionRequest, upstream_model: str, *, stream: bool, reasoning: bool = True
) -> dict[str, Any]:
    """The JSON body of ``POST /responses`` for ``request``; ``reasoning``: the model reasons (``reasons``), so it
    gets no ``temperature`` and its reasoning items come back encrypted (a model that cannot reason refuses
    ``include: ["reasoning.encrypted_content"]``)."""
    instructions, items = _input(request.messages)
    # Nothing kept at OpenAI (``store: false``): each call carries the conversation, reasoning included (encrypted).
    body: dict[str, Any] = {"model": upstream_model, "input": items, "stream": stream, "store": False}
    if reasoning:
        body["include"] = ["reasoning.encrypted_content"]
    if instructions:
        body["instructions"] = instructions
    if request.tools:
        body["tools"] = [_tool(tool) for tool in request.tools]
        body["tool_choice"] = _tool_choice(request.tool_choice)
    if request.max_tokens is not None:
        body["max_output_tokens"] = request.max_tokens
    if request.temperature is not None and not reasoning:
        body["temperature"] = request.temperature
    if request.reasoning is not None:
        control: dict[str, str] = {}
        if request.reasoning.effort is not None:
            control["effort"] = reasoning_effort(request.reasoning.effort, upstream_model)
        if request.reasoning.summary == "auto":
            control["summary"] = "auto"  # "none": no summary asked for, so none comes back
        if control:
            body["reasoning"] = control
    text: dict[str, Any] = {}
    if request.verbosity is not None:
        text["verbosity"] = request.verbosity
    answer_format = request.response_format
    if answer_format is not None and answer_format.type != "text":
        schema = answer_format.json_schema
        # ``text.format``: the Chat Completions shape flattened (name and schema beside type).
        if schema is None:
            text["format"] = {"type": "json_object"}
        else:
            text["format"] = {"type": "json_schema", **json_schema_format(schema)}
    if text:
        body["text"] = text
    return body


def _input(messages: list[Message]) -> tuple[str, list[dict[str, Any]]]:
    """``(instructions, input items)``: the leading system messages become ``instructions``, the rest items."""
    leading = 0
    while leading < len(messages) and messages[leading].role == "system":
        leading += 1
    instructions = SUMMARY_SEPARATOR.join(message.text or "" for message in messages[:leading])
    items: list[dict[str, Any]] = []
    for entry in with_tool_images(messages[leading:]):
        if isinstance(entry, Message):
            items.extend(_items(entry))
        else:  # the round's tool images follow its outputs in a user message, as in Chat Completions
            parts = [
                [{"type": "input_text", "text": tool_images_note(result)}, *map(_input_image, result.images)]
                for result in entry
            ]
            items.append({"role": "user", "content": [part for group in parts for part in group]})
    return instructions, items


def _input_image(part: ImagePart) -> dict[str, Any]:
    # The Responses API's image: the URL (https or data:) as it came; detail defaults to auto as OpenAI's own does.
    return {"type": "input_image", "image_url": part.image_url.url, "detail": part.image_url.detail or "auto"}


def _content(message: Message) -> str | list[dict[str, Any]]:
    """Text, or ``input_text`` and ``input_image`` parts."""
    if not message.images:
        return message.text or ""
    return [
        {"type": "input_text", "text": part.text} if isinstance(part, TextPart) else _input_image(part)
        for part in parts_of(message)
    ]


def _items(message: Message) -> list[dict[str, Any]]:
    if message.role == "tool":
        # The Responses API has no error flag on outputs either: the output has to say so.
        output = message.text or ""
        if message.is_error and not output.lower().startswith("error"):
            output = f"Error: {output}"
        return [{"type": "function_call_output", "call_id": message.tool_call_id, "output": output}]
    if message.role != "assistant":
        return [{"role": message.role, "content": _content(message)}]
    items = [_reasoning_item(block) for block in message.reasoning or [] if _is_ours(block)]
    if message.text:
        items.append({"role": "assistant", "content": message.text})
    items.extend(
        {"type": "function_call", "call_id": call.id, "name": call.name, "arguments": arguments_text(call)}
        for call in message.tool_calls or []
    )
    return items


def _is_ours(block: ReasoningBlock) -> bool:
    # Another provider's reasoning (a fallback answered that round) means nothing here; one without its item id
    # cannot be sent back.
    return block.provider == PROVIDER_NAME and bool(block.signature)


def _reasoning_item(block: ReasoningBlock) -> dict[str, Any]:
    item: dict[str, Any] = {
        "type": "reasoning",
        "id": block.signature,
        "summary": [{"type": "summary_text", "text": block.text}] if block.text else [],
    }
    if block.redacted_data is not None:
        item["encrypted_content"] = block.redacted_data
    return item


def _tool(tool: ToolSpec) -> dict[str, Any]:
    # ``strict`` defaults to true in this API, which refuses most schemas MCP tools have: off, as in Chat.
    return {
        "type": "function",
        "name": tool.name,
        "description": tool.description,
        "parameters": tool.input_schema,
        "strict": False,
    }


def _tool_choice(choice: ToolChoice) -> str | dict[str, Any]:
    if isinstance(choice, str):
        return choice
    return {"type": "function", "name": choice.name}


# --- Responses -> neutral ----------------------------------------------------------------------


def _usage(raw: Any) -> Usage:
    if not isinstance(raw, dict):
        return Usage()
    given, produced = raw.get("input_tokens"), raw.get("output_tokens")
    details = raw.get("output_tokens_details")
    reasoning = details.get("reasoning_tokens") if isinstance(details, dict) else None
    return Usage(
        input_tokens=given if isinstance(given, int) else 0,
        output_tokens=produced if isinstance(produced, int) else 0,
        reasoning_tokens=reasoning if isinstance(reasoning, int) else None,
    )


def _finish_reason(response: dict[str, Any], *, has_tool_calls: bool) -> FinishReason:
    if response.get("status") == "incomplete":
        details = response.get("incomplete_details")
        reason = details.get("reason") if isinstance(details, dict) else None
        return _INCOMPLETE.get(reason, "length") if isinstance(reason, str) else "length"
    return "tool_calls" if has_tool_calls else "stop"


_REQUEST_FAILURES = frozenset(
    {
        "invalid_prompt",
        "invalid_request_error",
        "invalid_image",
        "invalid_image_format",
        "invalid_base64_image",
        "invalid_image_url",
        "image_too_large",
        "image_too_small",
        "image_parse_error",
        "image_content_policy_violation",
        "invalid_image_mode",
        "image_file_too_large",
        "unsupported_image_media_type",
        "empty_image_file",
        "failed_to_download_image",
        "image_file_not_found",
    }
)
"""The codes of a failed response (OpenAI's reference of ``response.error.code``) that say the request itself is
wrong: the same request fails again, on any try. The others (``server_error``, ``rate_limit_exceeded``,
``vector_store_timeout``, codes added since) may pass on another try or model."""


def _failed(payload: Any) -> ApiError:
    """A response with ``status: failed`` (whole, or in ``response.failed``) or the stream's ``error`` event: a
    fault of the request (``_REQUEST_FAILURES``) is the caller's 400, anything else a retryable 503."""
    message, code = error_detail(payload)  # the response's ``error`` object, or the event itself
    if code in _REQUEST_FAILURES:
        return ApiError(400, "invalid_request", f"The provider refused the request: {message or code}")
    return ApiError(
        503,
        "upstream_unavailable",
        f"The provider failed in the middle of the answer: {message or 'no reason given'}",
        retryable=True,
    )


def _reasoning_block(item: dict[str, Any]) -> ReasoningBlock:
    summary = item.get("summary") or []
    if not isinstance(summary, list):
        raise bad_response("a reasoning item's summary is not a list")
    texts = [part["text"] for part in summary if isinstance(part, dict) and isinstance(part.get("text"), str)]
    item_id, encrypted = item.get("id"), item.get("encrypted_content")
    return ReasoningBlock(
        text=SUMMARY_SEPARATOR.join(texts),
        signature=item_id if isinstance(item_id, str) and item_id else None,
        redacted_data=encrypted if isinstance(encrypted, str) else None,
        provider=PROVIDER_NAME,
    )


def _message_text(item: dict[str, Any]) -> str:
    content = item.get("content") or []
    if not isinstance(content, list):
        raise bad_response("a message item's content is not a list")
    pieces = []
    for part in content:
        if isinstance(part, dict):
            text = part.get("text") if part.get("type") == "output_text" else part.get("refusal")
            if isinstance(text, str):
                pieces.append(text)
    return "".join(pieces)


def _function_call(item: dict[str, Any], position: int, arguments: Any) -> ToolCall:
    name, call_id = item.get("name"), item.get("call_id")
    if not isinstance(name, str) or not name:
        raise bad_response(f"function call {position} has no name")
    parsed, invalid = parse_arguments(arguments)
    return ToolCall(
        id=call_id if isinstance(call_id, str) and call_id else f"call_{position}",
        name=name,
        arguments=parsed,
        invalid_arguments=invalid,
    )


def parse_response(body: Any, model: str, *, provider: str = PROVIDER_NAME) -> CompletionResponse:
    """A whole ``response`` object as the neutral response reported under ``model``."""
    if not isinstance(body, dict) or not isinstance(body.get("output"), list):
        raise bad_response("the body is not a response with output")
    if body.get("status") == "failed":
        raise _failed(body)
    reasoning: list[ReasoningBlock] = []
    texts: list[str] = []
    calls: list[ToolCall] = []
    for position, item in enumerate(body["output"]):
        if not isinstance(item, dict):
            raise bad_response(f"output item {position} is not an object")
        kind = item.get("type")
        if kind == "reasoning":
            reasoning.append(_reasoning_block(item))
        elif kind == "message":
            texts.append(_message_text(item))
        elif kind == "function_call":
            calls.append(_function_call(item, len(calls), item.get("arguments")))
    content = "".join(texts)
    return CompletionResponse(
        message=Message(
            role="assistant", content=content or None, reasoning=reasoning or None, tool_calls=calls or None
        ),
        finish_reason=_finish_reason(body, has_tool_calls=bool(calls)),
        usage=_usage(body.get("usage")),
        model=model,
        provider=provider,
    )


@dataclass
class _PartialCall:
    item: dict[str, Any]
    arguments: list[str] = field(default_factory=list)


class ResponsesStream:
    """Folds the Responses API's stream events into neutral events.

    Text and reasoning summary deltas come out at once; a reasoning item as a block once it is done
    (only the done item's ``encrypted_content`` is whole); function calls, whose arguments arrive in
    ``response.function_call_arguments.delta`` fragments, come out whole from ``finish``, then ``done``.
    The stream ends at ``response.completed`` (or ``response.incomplete``).
    """

    def __init__(self, *, model: str, provider: str = PROVIDER_NAME) -> None:
        self.model = model
        self.provider = provider
        self.ended = False
        self._response: dict[str, Any] = {}
        self._calls: dict[int, _PartialCall] = {}
        self._summary_part: tuple[Any, int] | None = None
        """``(item_id, summary_index)`` of the summary part the last reasoning delta belonged to."""

    def feed(self, event: Any) -> list[CompletionEvent]:
        if not isinstance(event, dict):
            raise bad_response("a stream event is not a JSON object")
        kind = event.get("type")
        # The frequent events first: one comparison for each token.
        if kind == "response.output_text.delta" or kind == "response.refusal.delta":
            delta = event.get("delta")
            return [TextDelta(delta=delta)] if isinstance(delta, str) and delta else []
        if kind == "response.function_call_arguments.delta":
            call = self._calls.get(event.get("output_index", -1))
            if call is None:
                raise bad_response("function call arguments arrived for no function call")
            if isinstance(event.get("delta"), str):
                call.arguments.append(event["delta"])
            return []
        if kind == "response.reasoning_summary_text.delta":
            return self._summary_delta(event)
        if kind == "response.output_item.added" or kind == "response.output_item.done":
            return self._item(event, done=kind == "response.output_item.done")
        if kind == "response.completed" or kind == "response.incomplete":
            response = event.get("response")
            if not isinstance(response, dict):
                raise bad_response(f"{kind} carries no response")
            self._response = response
            self.ended = True
            return []
        if kind == "response.failed":
            raise _failed(event.get("response"))
        if kind == "error":
            raise _failed(event)
        return []  # created, in_progress, content parts, the .done of deltas: nothing new

    def _summary_delta(self, event: dict[str, Any]) -> list[CompletionEvent]:
        delta = event.get("delta")
        if not isinstance(delta, str) or not delta:
            return []
        part = (event.get("item_id"), event.get("summary_index", 0))
        starts_another = self._summary_part is not None and self._summary_part != part
        self._summary_part = part
        # The block's text joins the parts with SUMMARY_SEPARATOR: the deltas say the same.
        return [ReasoningDelta(delta=SUMMARY_SEPARATOR + delta if starts_another else delta)]

    def _item(self, event: dict[str, Any], *, done: bool) -> list[CompletionEvent]:
        item, index = event.get("item"), event.get("output_index")
        if not isinstance(item, dict) or not isinstance(index, int):
            raise bad_response("an output item event without its item or output_index")
        kind = item.get("type")
        if kind == "function_call":
            call = self._calls.setdefault(index, _PartialCall(item))
            call.item = item  # the done item has the name and call id for sure
            return []
        if kind == "reasoning" and done:
            return [ReasoningBlockEvent(block=_reasoning_block(item))]
        return []

    def finish(self) -> list[CompletionEvent]:
        """The assembled function calls, then ``done``; call it once the stream has ended."""
        if not self.ended:
            raise bad_response("the stream ended before the model finished")
        events: list[CompletionEvent] = []
        for position, index in enumerate(sorted(self._calls)):
            call = self._calls[index]
            # The arguments as streamed; a server that sent none in deltas has them on the done item.
            streamed = "".join(call.arguments) if call.arguments else call.item.get("arguments")
            parsed = _function_call(call.item, position, streamed)
            events.append(ToolCallEvent(**dict(parsed)))
        events.append(
            CompletionDone(
                finish_reason=_finish_reason(self._response, has_tool_calls=bool(self._calls)),
                usage=_usage(self._response.get("usage")),
                model=self.model,
                provider=self.provider,
            )
        )
        return events


# --- I/O ---------------------------------------------------------------------------------------


class ResponsesProvider(HttpAdapter):
    """Calls ``{base_url}/responses`` with the OpenAI settings' key and base URL."""

    tool_names = TOOL_NAMES
    ignored_sse_events = IGNORED_EVENTS

    def __init__(
        self,
        http: httpx.AsyncClient,
        base_url: str,
        api_key: str | None,
        *,
        max_retries: int = 2,
        name: str = PROVIDER_NAME,
        auth_header: str = "Authorization",
    ) -> None:
        self.name = name
        self._endpoint = OpenAIEndpoint.at(
            http, base_url, "/responses", api_key, provider=name, auth_header=auth_header, max_retries=max_retries
        )

    def _parse(self, body: Any, model: str) -> CompletionResponse:
        return parse_response(body, model, provider=self.name)

    def _decoder(self, model: str) -> ResponsesStream:
        return ResponsesStream(model=model, provider=self.name)

    async def _outbound(self, request: CompletionRequest, upstream_model: str, *, stream: bool) -> Outbound:
        reasoning = reasons(request, upstream_model)
        body = build_request_body(request, upstream_model, stream=stream, reasoning=reasoning)
        warnings = temperature_warnings(request, reasoning)
        return self._endpoint.post(body, stream=stream, upstream_model=upstream_model, warnings=warnings)
