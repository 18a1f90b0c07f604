"""The neutral request as a Converse body (pure, tested on exact bodies), and what a model ignores of it."""

from __future__ import annotations

from typing import Any

from completion_service.controls import thinking_budget
from completion_service.providers._anthropic_shape import (
    DEFAULT_MAX_TOKENS,
    MAX_TEMPERATURE,
    thinking_warnings,
)
from completion_service.providers._images import data_image, parts_of
from completion_service.providers.tool_names import NameRule
from suite_common.errors import ApiError
from suite_common.wire import (
    CompletionRequest,
    ImagePart,
    Message,
    ToolChoice,
)

__all__ = ["PROVIDER_NAME", "TOOL_NAMES", "build_request_body", "is_claude", "request_warnings"]

PROVIDER_NAME = "bedrock"
TOOL_NAMES = NameRule("a-zA-Z0-9_-", 64)
"""Converse's ``ToolSpecification.name``: ``[a-zA-Z0-9_-]+``, 1 to 64 characters."""


def build_request_body(
    request: CompletionRequest, *, provider: str = PROVIDER_NAME, upstream_model: str = ""
) -> dict[str, Any]:
    """The JSON body of ``POST /model/{modelId}/converse`` (or ``converse-stream``: the same body);
    ``upstream_model`` is the Bedrock model id, whose family bounds some settings.

    A Claude model asked to reason thinks as on Anthropic's own API (``additionalModelRequestFields.thinking``,
    its budget from the effort, on top of the answer's tokens, without a temperature), with the same exceptions:
    not when a tool is forced, nor in a tool-use turn that began without thinking."""
    system = [{"text": m.text} for m in request.messages if m.role == "system" and m.text]
    body: dict[str, Any] = {"messages": _turns(request.messages, provider)}
    if system:
        body["system"] = system
    inference: dict[str, Any] = {}
    budget = _thinking_budget(request, provider, upstream_model)
    if budget is not None:
        body["additionalModelRequestFields"] = {"thinking": {"type": "enabled", "budget_tokens": budget}}
        inference["maxTokens"] = budget + (request.max_tokens or DEFAULT_MAX_TOKENS)
    elif request.max_tokens is not None:
        inference["maxTokens"] = request.max_tokens
    if request.temperature is not None and budget is None:
        temperature = request.temperature
        if is_claude(upstream_model):
            # Claude's temperature runs from 0 to 1 on Bedrock too; the neutral contract allows up to 2.
            temperature = min(temperature, MAX_TEMPERATURE)
        inference["temperature"] = temperature
    if inference:
        body["inferenceConfig"] = inference
    tool_config = _tool_config(request, body["messages"])
    if tool_config is not None:
        body["toolConfig"] = tool_config
    return body


def _thinking_budget(request: CompletionRequest, provider: str, upstream_model: str) -> int | None:
    """The thinking budget of a Claude request that may think (see ``build_request_body``), else ``None``."""
    budget = thinking_budget(request, None)
    if budget is None or not is_claude(upstream_model):
        return None
    if request.tools and request.tool_choice not in ("auto", "none"):
        return None  # Claude refuses a forced tool with thinking
    last_user = max((i for i, m in enumerate(request.messages) if m.role == "user"), default=-1)
    first_reply = next((m for m in request.messages[last_user + 1 :] if m.role == "assistant"), None)
    if first_reply is not None and not any(block.provider == provider for block in first_reply.reasoning or []):
        return None  # Claude refuses to start thinking in the middle of a tool-use turn
    return budget


def request_warnings(request: CompletionRequest, body: dict[str, Any], upstream_model: str) -> list[str]:
    if request.reasoning is not None and request.reasoning.effort is not None and not is_claude(upstream_model):
        return [f"reasoning ignored: of Bedrock's models only Claude takes it, not {upstream_model!r}."]
    thinking = "additionalModelRequestFields" in body
    return thinking_warnings(request, thinking, thinking_budget(request, None), upstream_model)


def is_claude(model_id: str) -> bool:
    """``anthropic.claude-...``, a cross-region profile (``us.anthropic.claude-...``) or an ARN naming either.
    An application inference profile's ARN does not say which model it serves: it is sent as given."""
    return "anthropic.claude" in model_id


def _turns(messages: list[Message], provider: str) -> list[dict[str, Any]]:
    """Converse turns: user and assistant alternating, starting with user; tool results are user content."""
    turns: list[dict[str, Any]] = []
    for message in messages:
        if message.role == "system":
            continue
        role = "assistant" if message.role == "assistant" else "user"
        blocks = _blocks(message, provider)
        if not blocks:
            continue
        if turns and turns[-1]["role"] == role:
            previous = turns[-1]["content"]
            # Tool results answer the turn before: they go ahead of any text of the same user turn.
            results = [b for b in blocks if "toolResult" in b]
            others = [b for b in blocks if "toolResult" not in b]
            position = sum(1 for b in previous if "toolResult" in b)
            previous[position:position] = results
            previous.extend(others)
        else:
            turns.append({"role": role, "content": blocks})
    if not turns or turns[0]["role"] != "user":
        # Converse refuses a conversation that does not open with the user.
        turns.insert(0, {"role": "user", "content": [{"text": "(conversation continues)"}]})
    return turns


def _blocks(message: Message, provider: str) -> list[dict[str, Any]]:
    if message.role == "tool":
        text = message.text or ""
        # A tool result's content blocks: its text, then the images it returned.
        content = [{"text": text or "(no output)"}, *map(_image, message.images)]
        return [
            {
                "toolResult": {
                    "toolUseId": message.tool_call_id,
                    "content": content,
                    "status": "error" if message.is_error else "success",
                }
            }
        ]
    if message.role == "user" and message.images:
        return [
            _image(part) if isinstance(part, ImagePart) else {"text": part.text}
            for part in parts_of(message)
            if isinstance(part, ImagePart) or part.text
        ]
    blocks: list[dict[str, Any]] = []
    if message.role == "assistant":
        for block in message.reasoning or []:
            if block.provider != provider:
                continue  # another provider's reasoning means nothing here
            if block.redacted_data is not None:
                blocks.append({"reasoningContent": {"redactedContent": block.redacted_data}})
            elif block.signature is not None:
                blocks.append(
                    {"reasoningContent": {"reasoningText": {"text": block.text, "signature": block.signature}}}
                )
    if message.text:
        blocks.append({"text": message.text})
    for call in message.tool_calls or []:
        # Converse takes only an object as input: malformed arguments go back as {} (the tool result,
        # which says what was wrong, tells the model).
        blocks.append({"toolUse": {"toolUseId": call.id, "name": call.name, "input": call.arguments}})
    return blocks


def _image(part: ImagePart) -> dict[str, Any]:
    """Converse's image block: the bytes (base64 in the JSON body) and the format (an https image was fetched)."""
    image = data_image(part.image_url.url)
    if image is None:
        raise ApiError(400, "images_not_supported", "Bedrock takes images as bytes; this one came as a URL.")
    return {"image": {"format": image.format, "source": {"bytes": image.base64_data}}}


def _tool_config(request: CompletionRequest, turns: list[dict[str, Any]]) -> dict[str, Any] | None:
    used = [b["toolUse"]["name"] for turn in turns for b in turn["content"] if "toolUse" in b]
    history_has_tools = bool(used) or any("toolResult" in b for turn in turns for b in turn["content"])
    if not history_has_tools and (not request.tools or request.tool_choice == "none"):
        # Converse has no "none": leaving the tools out is the same.
        return None
    specs = [
        {"name": t.name, "description": t.description or t.name, "inputSchema": {"json": t.input_schema}}
        for t in request.tools
    ]
    # Bedrock refuses toolUse and toolResult blocks unless every tool they name is declared: the
    # history's tools that this request does not offer are declared with an open schema.
    offered = {t.name for t in request.tools}
    for name in dict.fromkeys(used):
        if name not in offered:
            open_schema = {"type": "object", "properties": {}}
            specs.append({"name": name, "description": f"{name} (used earlier)", "inputSchema": {"json": open_schema}})
    if not specs:
        return None
    config: dict[str, Any] = {"tools": [{"toolSpec": spec} for spec in specs]}
    choice = _tool_choice(request.tool_choice) if request.tools else None
    if choice is not None:
        config["toolChoice"] = choice
    return config


def _tool_choice(choice: ToolChoice) -> dict[str, Any] | None:
    if choice == "required":
        return {"any": {}}
    if choice in ("auto", "none"):
        return None  # Converse's default is auto
    assert not isinstance(choice, str)
    return {"tool": {"name": choice.name}}
