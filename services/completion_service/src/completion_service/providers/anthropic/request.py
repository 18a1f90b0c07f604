"""The neutral request as the body of ``POST /v1/messages`` (pure, tested on exact bodies).

System prompts become the top-level ``system``; turns alternate user/assistant and start with the user;
the tool results of one assistant turn go back together, first, in the next user turn; thinking blocks
of this provider come back unchanged.
"""

from __future__ import annotations

import hashlib
import re
from collections import deque
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any, Literal

from completion_service.providers._anthropic_shape import DEFAULT_MAX_TOKENS, MAX_TEMPERATURE
from completion_service.providers._images import data_image, parts_of
from completion_service.providers.anthropic.schema import input_schema
from completion_service.providers.tool_names import NameRule
from suite_common.wire import CompletionRequest, ImagePart, Message, ReasoningBlock, ToolChoice, ToolSpec

__all__ = ["EMPTY_TURN_TEXT", "PROVIDER_NAME", "TOOL_NAMES", "build_request_body"]

PROVIDER_NAME = "anthropic"
TOOL_NAMES = NameRule("a-zA-Z0-9_-", 64)
"""The Messages API's tool ``name``: ``^[a-zA-Z0-9_-]{1,64}$``."""

EMPTY_TURN_TEXT = "(no content)"
"""Anthropic refuses empty turns; this stands in where the conversation needs one (a conversation
that does not start with the user, a user message without text)."""

_TOOL_USE_ID = re.compile(r"[a-zA-Z0-9_-]+")


def build_request_body(
    request: CompletionRequest,
    upstream_model: str,
    *,
    stream: bool,
    thinking_budget_tokens: int | None = None,
    provider: str = PROVIDER_NAME,
) -> dict[str, Any]:
    """The JSON body of ``POST /v1/messages`` for ``request``, whose conversation is ``tool_turns.repaired``.

    Reasoning blocks are replayed only when their ``provider`` is ``provider`` (this adapter's name).
    Thinking is asked for when ``thinking_budget_tokens`` is set, unless the request forces a tool
    (Anthropic refuses both at once) or continues a tool-use turn that began without thinking
    (Anthropic refuses to turn thinking on in the middle of a turn).
    """
    system, turns = _conversation(request.messages, provider)
    body: dict[str, Any] = {"model": upstream_model, "stream": stream}
    if system:
        body["system"] = system
    if request.tools:
        # Anthropic refuses tool_choice without tools, so both go or neither.
        body["tools"] = [_tool(tool) for tool in request.tools]
        body["tool_choice"] = _tool_choice(request.tool_choice)
    elif any(turn.has_tool_blocks() for turn in turns):
        # Anthropic refuses tool_use/tool_result blocks in a request that defines no tools: declare the
        # ones the conversation used, and forbid calling them, which is what "no tools" meant.
        body["tools"] = [_tool(ToolSpec(name=name)) for name in _used_tool_names(turns)]
        body["tool_choice"] = {"type": "none"}
    answer_tokens = request.max_tokens or DEFAULT_MAX_TOKENS
    forces_tool = bool(request.tools) and request.tool_choice not in ("auto", "none")
    if thinking_budget_tokens is not None and not forces_tool and _turn_allows_thinking(turns):
        # Thinking counts against max_tokens: the budget comes on top of the answer's tokens, so
        # maxTokens keeps bounding the answer. Anthropic forbids a temperature with thinking.
        body["thinking"] = {"type": "enabled", "budget_tokens": thinking_budget_tokens}
        body["max_tokens"] = thinking_budget_tokens + answer_tokens
    else:
        body["max_tokens"] = answer_tokens
        if request.temperature is not None:
            body["temperature"] = min(request.temperature, MAX_TEMPERATURE)
        if turns[-1].role == "assistant" and turns[-1].reasoning:
            # Without thinking, Anthropic refuses thinking blocks in a final assistant message (a prefill).
            turns[-1].reasoning.clear()
            if not turns[-1].content():
                turns.pop()
    body["messages"] = [turn.as_message() for turn in turns]
    return body


@dataclass
class _Turn:
    """One Anthropic message being built: tool results first, then reasoning, then the rest."""

    role: Literal["user", "assistant"]
    results: list[dict[str, Any]] = field(default_factory=list)
    reasoning: list[dict[str, Any]] = field(default_factory=list)
    blocks: list[dict[str, Any]] = field(default_factory=list)

    def content(self) -> list[dict[str, Any]]:
        return [*self.results, *self.reasoning, *self.blocks]

    def as_message(self) -> dict[str, Any]:
        return {"role": self.role, "content": self.content()}

    def tool_use_ids(self) -> list[str]:
        return [block["id"] for block in self.blocks if block["type"] == "tool_use"]

    def has_tool_blocks(self) -> bool:
        return bool(self.results) or bool(self.tool_use_ids())

    def has_user_input(self) -> bool:
        """A user turn without tool results starts a new assistant turn; one with them continues a tool-use loop."""
        return self.role == "user" and bool(self.blocks) and not self.results


def _conversation(messages: Sequence[Message], provider: str) -> tuple[str, list[_Turn]]:
    """``(system, turns)``: the system prompts joined, and turns that follow Anthropic's rules."""
    system: list[str] = []
    turns: list[_Turn] = []
    ids = _ToolUseIds()
    owed: deque[tuple[str, str | None]] = deque()  # (tool_use_id, invalid arguments) of the calls to answer
    for message in messages:
        if message.role == "system":
            if _has_text(message.text):
                system.append(message.text or "")
            continue
        if message.role == "assistant":
            reasoning = [_reasoning_block(block) for block in message.reasoning or [] if block.provider == provider]
            blocks: list[dict[str, Any]] = []
            if _has_text(message.text):
                blocks.append({"type": "text", "text": message.text})
            owed.clear()
            for call in message.tool_calls or []:
                tool_use_id = ids.new(call.id)
                owed.append((tool_use_id, call.invalid_arguments))
                # Anthropic needs an object: what the model wrote instead is told in the tool result.
                blocks.append({"type": "tool_use", "id": tool_use_id, "name": call.name, "input": call.arguments})
            replayable = [block for block in reasoning if block is not None]
            if not replayable and not blocks:
                continue  # Anthropic refuses empty turns; an empty assistant message said nothing
            if not turns or turns[-1].role != "assistant":
                turns.append(_Turn("assistant"))
            # Merged turns keep all reasoning first: a message with thinking must start with it.
            turns[-1].reasoning.extend(replayable)
            turns[-1].blocks.extend(blocks)
            continue
        if not turns or turns[-1].role != "user":
            turns.append(_Turn("user"))
        turn = turns[-1]
        if message.role == "user":
            turn.blocks.extend(_user_blocks(message))
            continue
        # The repaired conversation answers each call right after its message, in call order.
        tool_use_id, invalid_arguments = owed.popleft()
        turn.results.append(_tool_result(tool_use_id, message, invalid_arguments))
    _finish_turns(turns)
    return "\n\n".join(system), turns


class _ToolUseIds:
    """Tool call ids as Anthropic accepts them: ``[a-zA-Z0-9_-]+`` and unique in the conversation.

    Ids from other providers may hold other characters, and a caller may reuse one.
    """

    def __init__(self) -> None:
        self._used: set[str] = set()

    def new(self, call_id: str) -> str:
        base = call_id if _TOOL_USE_ID.fullmatch(call_id) else _sanitized(call_id)
        candidate, suffix = base, 1
        while candidate in self._used:
            suffix += 1
            candidate = f"{base}_{suffix}"
        self._used.add(candidate)
        return candidate


def _sanitized(call_id: str) -> str:
    digest = hashlib.sha256(call_id.encode()).hexdigest()[:8]
    return re.sub(r"[^a-zA-Z0-9_-]", "_", call_id) + "_" + digest


def _has_text(content: str | None) -> bool:
    # Anthropic refuses text blocks that are empty or only whitespace.
    return bool(content and content.strip())


def _reasoning_block(block: ReasoningBlock) -> dict[str, Any] | None:
    if block.redacted_data:
        return {"type": "redacted_thinking", "data": block.redacted_data}
    if block.signature:
        return {"type": "thinking", "thinking": block.text, "signature": block.signature}
    return None  # Anthropic refuses a thinking block without its signature


def _image_block(part: ImagePart) -> dict[str, Any]:
    """An image block: a ``data:`` URL's bytes as a ``base64`` source, an ``https`` URL as a ``url`` source
    (Anthropic fetches it)."""
    image = data_image(part.image_url.url)
    if image is None:
        return {"type": "image", "source": {"type": "url", "url": part.image_url.url}}
    return {"type": "image", "source": {"type": "base64", "media_type": image.media_type, "data": image.base64_data}}


def _user_blocks(message: Message) -> list[dict[str, Any]]:
    """A user message's text and image blocks, in the message's order."""
    if not message.images:
        return [{"type": "text", "text": message.text}] if _has_text(message.text) else []
    return [
        _image_block(part) if isinstance(part, ImagePart) else {"type": "text", "text": part.text}
        for part in parts_of(message)
        if isinstance(part, ImagePart) or _has_text(part.text)
    ]


def _tool_result(tool_use_id: str, message: Message, invalid_arguments: str | None) -> dict[str, Any]:
    content = message.text or ""
    if invalid_arguments is not None:
        note = (
            "Your arguments for this call were not a JSON object, so the call was sent with {} instead. "
            f"You wrote: {invalid_arguments}"
        )
        content = f"{note}\n\n{content}" if content else note
    result: dict[str, Any] = {"type": "tool_result", "tool_use_id": tool_use_id}
    if message.images:
        # A tool_result's content may be blocks: the text, then the images the tool returned.
        text = [{"type": "text", "text": content}] if _has_text(content) else []
        result["content"] = [*text, *(_image_block(part) for part in message.images)]
    elif content:
        result["content"] = content
    if message.is_error:
        result["is_error"] = True
    return result


def _finish_turns(turns: list[_Turn]) -> None:
    """The first turn is the user's, no turn is empty, and a final assistant turn has no trailing space."""
    if not turns or turns[0].role == "assistant":
        turns.insert(0, _Turn("user"))
    for turn in turns:
        if turn.role == "user" and not turn.content():
            turn.blocks.append({"type": "text", "text": EMPTY_TURN_TEXT})
    last = turns[-1]
    if last.role == "assistant" and last.blocks and last.blocks[-1]["type"] == "text":
        # Anthropic refuses a final assistant message (a prefill) that ends with whitespace.
        last.blocks[-1] = {"type": "text", "text": last.blocks[-1]["text"].rstrip()}


def _turn_allows_thinking(turns: list[_Turn]) -> bool:
    """Thinking may be on unless the current assistant turn (a tool-use loop is one turn) began without it."""
    start = max((index for index, turn in enumerate(turns) if turn.has_user_input()), default=0)
    first_reply = next((turn for turn in turns[start:] if turn.role == "assistant"), None)
    return first_reply is None or bool(first_reply.reasoning)


def _used_tool_names(turns: list[_Turn]) -> list[str]:
    names = (block["name"] for turn in turns for block in turn.blocks if block["type"] == "tool_use")
    return list(dict.fromkeys(names))


def _tool(tool: ToolSpec) -> dict[str, Any]:
    spec: dict[str, Any] = {"name": tool.name}
    if tool.description:
        spec["description"] = tool.description
    spec["input_schema"] = input_schema(tool.input_schema)
    return spec


def _tool_choice(choice: ToolChoice) -> dict[str, Any]:
    if choice == "auto":
        return {"type": "auto"}
    if choice == "none":
        return {"type": "none"}
    if choice == "required":
        return {"type": "any"}
    return {"type": "tool", "name": choice.name}
