"""The neutral request as the body of ``generateContent`` (pure, tested on exact bodies).

- system messages go to ``systemInstruction``; turns are ``user`` / ``model`` ``contents``, and
  consecutive turns of one role are merged;
- tool results become ``functionResponse`` parts in the user turn right after the model turn, in
  the order of the calls (Gemini pairs them by position and name): the conversation comes
  ``tool_turns.repaired``, every call answered right after its message;
- a tool call keeps Gemini's ``thoughtSignature`` in ``ToolCall.signature`` and sends it back on the
  same part (Gemini 3 refuses a function-calling turn without it); a first call without one, from
  another provider, gets the validator-skipping value Google documents for that case;
- a signed reasoning block of this provider goes back, an unsigned summary (display only) does not;
- tool ``inputSchema``s are rewritten into Gemini's schema subset (``gemini.schema``).
"""

from __future__ import annotations

import re
from collections import deque
from typing import Any

from completion_service.controls import THINKING_BUDGETS
from completion_service.providers._images import data_image, parts_of, with_tool_images
from completion_service.providers.gemini.endpoints import PROVIDER_NAME
from completion_service.providers.gemini.schema import to_gemini_parameters
from suite_common.errors import ApiError
from suite_common.wire import CompletionRequest, ImagePart, Message, ToolCall, ToolChoice

__all__ = ["CONTINUE_TEXT", "SKIP_SIGNATURE", "build_request_body", "thinking_config"]

SKIP_SIGNATURE = "skip_thought_signature_validator"
"""What Google documents to send as ``thoughtSignature`` for a function call that has none (a
conversation that began with another model): Gemini 3 refuses the first call of a step without one."""

CONTINUE_TEXT = "(continued)"
"""The user turn put first when a conversation would otherwise start with the model (Gemini requires
a user turn first)."""

_GEMINI_3 = re.compile(r"(^|/)gemini-([3-9]|\d\d)")
"""Gemini 3 and later take a ``thinkingLevel``; 2.5 a ``thinkingBudget`` (one or the other: both is a 400)."""


def build_request_body(
    request: CompletionRequest,
    *,
    provider: str = PROVIDER_NAME,
    send_call_ids: bool = True,
    include_thoughts: bool = False,
    upstream_model: str = "",
) -> dict[str, Any]:
    """The JSON body of ``generateContent`` / ``streamGenerateContent`` for ``request``.

    ``provider`` says whose reasoning blocks are sent back; ``send_call_ids`` puts the tool call ids
    on ``functionCall`` / ``functionResponse`` (the Gemini API knows the field, Vertex AI v1 does not);
    ``include_thoughts`` asks for thought summaries when the request's ``reasoning`` does not say;
    ``upstream_model`` says whether the effort is a ``thinkingLevel`` (Gemini 3) or a ``thinkingBudget``.
    """
    system, contents = _contents(request.messages, provider=provider, send_call_ids=send_call_ids)
    body: dict[str, Any] = {"contents": contents}
    if system:
        body["systemInstruction"] = {"parts": system}
    if request.tools:
        declarations = []
        for tool in request.tools:
            declaration: dict[str, Any] = {"name": tool.name}
            if tool.description:
                declaration["description"] = tool.description
            parameters = to_gemini_parameters(tool.input_schema)
            if parameters is not None:
                declaration["parameters"] = parameters
            declarations.append(declaration)
        body["tools"] = [{"functionDeclarations": declarations}]
        body["toolConfig"] = {"functionCallingConfig": _calling_config(request.tool_choice)}
    generation: dict[str, Any] = {}
    thinking = thinking_config(request, upstream_model, include_thoughts=include_thoughts)
    if request.max_tokens is not None:
        # Thinking counts against maxOutputTokens: a budget comes on top, so maxTokens keeps bounding the answer.
        generation["maxOutputTokens"] = request.max_tokens + thinking.get("thinkingBudget", 0)
    if request.temperature is not None:
        generation["temperature"] = request.temperature
    if thinking:
        generation["thinkingConfig"] = thinking
    generation.update(_answer_format(request, upstream_model))
    if generation:
        body["generationConfig"] = generation
    return body


def _answer_format(request: CompletionRequest, upstream_model: str) -> dict[str, Any]:
    """JSON mode (``responseMimeType``) and the answer's schema (``responseJsonSchema``, JSON Schema as it is).
    Gemini before 3 refuses JSON mode beside function declarations: there it is left out when tools are offered
    (the caller validates the answer either way)."""
    answer_format = request.response_format
    if answer_format is None or answer_format.type == "text":
        return {}
    if request.tools and not _GEMINI_3.search(upstream_model.lower()):
        return {}
    config: dict[str, Any] = {"responseMimeType": "application/json"}
    if answer_format.json_schema is not None:
        config["responseJsonSchema"] = answer_format.json_schema.schema_
    return config


def thinking_config(request: CompletionRequest, upstream_model: str, *, include_thoughts: bool) -> dict[str, Any]:
    """``generationConfig.thinkingConfig`` for ``request`` (empty: none). The effort is a ``thinkingLevel`` for
    Gemini 3 (``low`` or ``high``, the two every Gemini 3 model takes), else a ``thinkingBudget``
    (``controls.THINKING_BUDGETS``); ``summary`` says ``includeThoughts``, unset: ``include_thoughts``."""
    reasoning = request.reasoning
    config: dict[str, Any] = {}
    if reasoning is not None and reasoning.effort is not None:
        if _GEMINI_3.search(upstream_model.lower()):
            config["thinkingLevel"] = "low" if reasoning.effort in ("minimal", "low") else "high"
        else:
            config["thinkingBudget"] = THINKING_BUDGETS[reasoning.effort]
    summary = reasoning.summary if reasoning is not None else None
    if summary is not None:
        config["includeThoughts"] = summary == "auto"
    elif include_thoughts:
        config["includeThoughts"] = True
    return config


def _calling_config(choice: ToolChoice) -> dict[str, Any]:
    if choice == "auto":
        return {"mode": "AUTO"}
    if choice == "none":
        return {"mode": "NONE"}
    if choice == "required":
        return {"mode": "ANY"}
    return {"mode": "ANY", "allowedFunctionNames": [choice.name]}


def _contents(
    messages: list[Message], *, provider: str, send_call_ids: bool
) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    """``(systemInstruction parts, contents)``."""
    system: list[dict[str, Any]] = []
    contents: list[dict[str, Any]] = []
    owed: deque[ToolCall] = deque()  # the calls of the last model turn, answered in order

    def add(role: str, parts: list[dict[str, Any]]) -> None:
        if not parts:
            return
        if contents and contents[-1]["role"] == role:
            contents[-1]["parts"].extend(parts)
        else:
            contents.append({"role": role, "parts": parts})

    names: dict[str, str] = {}  # tool call ids to names, for the images' note
    for message in with_tool_images(messages):
        if not isinstance(message, Message):
            # Gemini pairs function responses with calls by position: a round's images follow them all.
            for result in message:
                note = {"text": f"Images returned by the tool {names.get(result.tool_call_id or '', 'call')}:"}
                add("user", [note, *map(_inline_data, result.images)])
        elif message.role == "system":
            if message.text:
                system.append({"text": message.text})
        elif message.role == "user":
            add("user", _user_parts(message))
        elif message.role == "assistant":
            add("model", _model_parts(message, provider=provider, send_call_ids=send_call_ids))
            owed = deque(message.tool_calls or ())
        else:
            call = owed.popleft()
            names[call.id] = call.name
            add("user", [_function_response(call, message, send_call_ids)])
    if not contents or contents[0]["role"] != "user":
        contents.insert(0, {"role": "user", "parts": [{"text": CONTINUE_TEXT}]})
    return system, contents


def _inline_data(part: ImagePart) -> dict[str, Any]:
    """An image as Gemini takes it: its bytes inline (an ``https`` image was fetched into a ``data:`` URL)."""
    image = data_image(part.image_url.url)
    if image is None:
        raise ApiError(400, "images_not_supported", "Gemini takes images as bytes; this one came as a URL.")
    return {"inlineData": {"mimeType": image.media_type, "data": image.base64_data}}


def _user_parts(message: Message) -> list[dict[str, Any]]:
    if not message.images:
        return [{"text": message.text}] if message.text else []
    return [
        _inline_data(part) if isinstance(part, ImagePart) else {"text": part.text}
        for part in parts_of(message)
        if isinstance(part, ImagePart) or part.text
    ]


def _model_parts(message: Message, *, provider: str, send_call_ids: bool) -> list[dict[str, Any]]:
    parts: list[dict[str, Any]] = []
    text_signature = None
    for block in message.reasoning or []:
        if block.provider != provider or not block.signature:
            continue  # another provider's, or a summary kept for display only
        if block.text:
            parts.append({"text": block.text, "thought": True, "thoughtSignature": block.signature})
        else:
            text_signature = block.signature
    if message.text:
        text: dict[str, Any] = {"text": message.text}
        if text_signature:
            text["thoughtSignature"] = text_signature
        parts.append(text)
    for position, call in enumerate(message.tool_calls or []):
        function_call: dict[str, Any] = {"name": call.name, "args": call.arguments}
        if send_call_ids:
            function_call["id"] = call.id
        part: dict[str, Any] = {"functionCall": function_call}
        signature = call.signature or (SKIP_SIGNATURE if position == 0 else None)
        if signature:
            part["thoughtSignature"] = signature
        parts.append(part)
    return parts


def _function_response(call: ToolCall, result: Message, send_call_ids: bool) -> dict[str, Any]:
    # Gemini wants an object: the text goes under "error" when the tool failed, else under "result".
    response: dict[str, Any] = {"error" if result.is_error else "result": result.text or ""}
    if call.invalid_arguments is not None:
        response["note"] = (
            "The arguments of this call were not a JSON object, so the tool got none. "
            f"They were: {call.invalid_arguments}"
        )
    function_response: dict[str, Any] = {"name": call.name, "response": response}
    if send_call_ids:
        function_response["id"] = call.id
    return {"functionResponse": function_response}
