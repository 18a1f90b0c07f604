"""Gemini's answers as neutral ones: a whole ``GenerateContentResponse`` (``parse_response``) or the chunks of
``streamGenerateContent?alt=sse`` (``StreamAssembler``), both folded part by part by one ``_Fold``.

A signature on the answer's text, and thought summaries, are ``ReasoningBlock``s of this provider; a
function call Gemini could not produce (``MALFORMED_FUNCTION_CALL``, ...) is a retryable error.
"""

from __future__ import annotations

import json
import uuid
from collections.abc import Mapping
from typing import Any

from completion_service.providers._errors import MAX_MESSAGE_CHARS, bad_response
from completion_service.providers.gemini.endpoints import PROVIDER_NAME
from completion_service.providers.gemini.errors import stream_error
from suite_common.errors import ApiError
from suite_common.wire import (
    CompletionDone,
    CompletionEvent,
    CompletionResponse,
    FinishReason,
    Message,
    ReasoningBlock,
    ReasoningBlockEvent,
    ReasoningDelta,
    TextDelta,
    ToolCall,
    ToolCallEvent,
    Usage,
)

__all__ = ["StreamAssembler", "parse_response"]

_CONTENT_FILTER = frozenset(
    {
        "SAFETY",
        "RECITATION",
        "BLOCKLIST",
        "PROHIBITED_CONTENT",
        "SPII",
        "IMAGE_SAFETY",
        "IMAGE_PROHIBITED_CONTENT",
        "IMAGE_RECITATION",
    }
)
_BROKEN_CALL = frozenset({"MALFORMED_FUNCTION_CALL", "UNEXPECTED_TOOL_CALL", "TOO_MANY_TOOL_CALLS"})


class _Fold:
    """Folds the ``parts`` of one answer, whole or chunk by chunk, into text, reasoning and calls.

    ``add`` returns the stream events each part gives at once; ``close`` the reasoning blocks still open.
    """

    def __init__(self, provider: str) -> None:
        self.provider = provider
        self.text: list[str] = []
        self.blocks: list[ReasoningBlock] = []
        self.calls: list[ToolCall] = []
        self.response_id: str | None = None
        self._thinking: list[str] | None = None
        self._thinking_signature: str | None = None
        self._text_signature: str | None = None

    def note_response(self, chunk: Mapping[str, Any]) -> None:
        response_id = chunk.get("responseId")
        if self.response_id is None and isinstance(response_id, str) and response_id:
            self.response_id = response_id

    def add(self, part: Any) -> list[CompletionEvent]:
        if not isinstance(part, dict):
            raise bad_response("a content part is not an object")
        raw_signature = part.get("thoughtSignature")
        signature = raw_signature if isinstance(raw_signature, str) and raw_signature else None
        text = part.get("text")
        if text is not None and not isinstance(text, str):
            raise bad_response("a text part is not a string")
        if part.get("thought") is True:
            return self._thought(text or "", signature)
        events = self._close_thinking()
        if "functionCall" in part:
            call = self._call(part["functionCall"], signature)
            self.calls.append(call)
            events.append(
                ToolCallEvent(
                    id=call.id,
                    name=call.name,
                    arguments=call.arguments,
                    invalid_arguments=call.invalid_arguments,
                    signature=call.signature,
                )
            )
        elif text is not None:
            if text:
                self.text.append(text)
                events.append(TextDelta(delta=text))
            if signature:
                # Streams often put it on a last, empty text part: it belongs to the answer's text.
                self._text_signature = signature
        # Other parts (inline data, executable code) are not part of the neutral contract.
        return events

    def close(self) -> list[CompletionEvent]:
        events = self._close_thinking()
        if self._text_signature:
            block = ReasoningBlock(text="", signature=self._text_signature, provider=self.provider)
            self.blocks.append(block)
            events.append(ReasoningBlockEvent(block=block))
            self._text_signature = None
        return events

    def _thought(self, text: str, signature: str | None) -> list[CompletionEvent]:
        if self._thinking is None:
            self._thinking = []
        if signature:
            self._thinking_signature = signature
        if not text:
            return []
        self._thinking.append(text)
        return [ReasoningDelta(delta=text)]

    def _close_thinking(self) -> list[CompletionEvent]:
        if self._thinking is None:
            return []
        text, signature = "".join(self._thinking), self._thinking_signature
        self._thinking, self._thinking_signature = None, None
        if not text and not signature:
            return []
        block = ReasoningBlock(text=text, signature=signature, provider=self.provider)
        self.blocks.append(block)
        return [ReasoningBlockEvent(block=block)]

    def _call(self, raw: Any, signature: str | None) -> ToolCall:
        position = len(self.calls)
        if not isinstance(raw, dict) or not isinstance(raw.get("name"), str) or not raw["name"]:
            raise bad_response(f"function call {position} has no name")
        args = raw.get("args")
        arguments: dict[str, Any] = {}
        invalid = None
        if isinstance(args, dict):
            arguments = args
        elif args is not None:
            invalid = json.dumps(args)
        call_id = raw.get("id")
        if not isinstance(call_id, str) or not call_id:
            # Older models send no id: one that stays unique across the conversation, from the response's.
            self.response_id = self.response_id or uuid.uuid4().hex
            call_id = f"call_{self.response_id}_{position}"
        return ToolCall(
            id=call_id, name=raw["name"], arguments=arguments, invalid_arguments=invalid, signature=signature
        )


def _first_candidate(body: Mapping[str, Any]) -> dict[str, Any] | None:
    candidates = body.get("candidates")
    if candidates is None:
        return None
    if not isinstance(candidates, list):
        raise bad_response("candidates is not a list")
    if not candidates:
        return None
    if not isinstance(candidates[0], dict):
        raise bad_response("a candidate is not an object")
    return candidates[0]


def _parts(candidate: Mapping[str, Any]) -> list[Any]:
    content = candidate.get("content")
    if content is None:
        return []  # a candidate stopped before it said anything (a safety stop, an empty answer)
    if not isinstance(content, dict):
        raise bad_response("candidate.content is not an object")
    parts = content.get("parts") or []
    if not isinstance(parts, list):
        raise bad_response("content.parts is not a list")
    return parts


def _blocked(body: Mapping[str, Any]) -> bool:
    """The prompt itself was refused (``promptFeedback.blockReason``): no candidate comes."""
    feedback = body.get("promptFeedback")
    return isinstance(feedback, dict) and bool(feedback.get("blockReason"))


def _finish_reason(raw: str | None, *, has_tool_calls: bool, detail: Any) -> FinishReason:
    if raw in _BROKEN_CALL:
        # The model's call could not be read; asking again usually works, so it may be retried.
        said = detail[:MAX_MESSAGE_CHARS] if isinstance(detail, str) and detail else "no detail given"
        raise ApiError(
            502,
            "bad_upstream_response",
            f"The model produced a function call the provider could not use ({raw}): {said}",
            retryable=True,
        )
    if raw == "MAX_TOKENS":
        return "length"
    if raw in _CONTENT_FILTER:
        return "content_filter"
    return "tool_calls" if has_tool_calls else "stop"


def _count(raw: Mapping[str, Any], key: str) -> int:
    value = raw.get(key)
    return value if isinstance(value, int) and not isinstance(value, bool) else 0


def _usage(raw: Any) -> Usage:
    if not isinstance(raw, dict):
        return Usage()
    thoughts = raw.get("thoughtsTokenCount")
    return Usage(
        input_tokens=_count(raw, "promptTokenCount") + _count(raw, "toolUsePromptTokenCount"),
        # Thinking is billed as output; Gemini counts it apart from the answer (candidatesTokenCount leaves it out).
        output_tokens=_count(raw, "candidatesTokenCount") + _count(raw, "thoughtsTokenCount"),
        reasoning_tokens=thoughts if isinstance(thoughts, int) and not isinstance(thoughts, bool) else None,
    )


def parse_response(body: Any, model: str, *, provider: str = PROVIDER_NAME) -> CompletionResponse:
    """A whole ``GenerateContentResponse`` as the neutral response reported under ``model``."""
    if not isinstance(body, dict):
        raise bad_response("the body is not a JSON object")
    usage = _usage(body.get("usageMetadata"))
    candidate = _first_candidate(body)
    if candidate is None:
        if _blocked(body):
            return CompletionResponse(
                message=Message(role="assistant"),
                finish_reason="content_filter",
                usage=usage,
                model=model,
                provider=provider,
            )
        raise bad_response("no candidates")
    fold = _Fold(provider)
    fold.note_response(body)
    for part in _parts(candidate):
        fold.add(part)
    fold.close()
    raw_finish = candidate.get("finishReason")
    return CompletionResponse(
        message=Message(
            role="assistant",
            content="".join(fold.text) or None,
            reasoning=fold.blocks or None,
            tool_calls=fold.calls or None,
        ),
        finish_reason=_finish_reason(
            raw_finish if isinstance(raw_finish, str) else None,
            has_tool_calls=bool(fold.calls),
            detail=candidate.get("finishMessage"),
        ),
        usage=usage,
        model=model,
        provider=provider,
    )


class StreamAssembler:
    """Folds the ``GenerateContentResponse`` chunks of ``streamGenerateContent?alt=sse`` into neutral events.

    Text and thought summaries come out as they arrive; a function call, which Gemini sends whole
    in whichever chunk, at once; reasoning blocks when they end; ``done`` from ``finish``.
    """

    def __init__(self, *, model: str, provider: str = PROVIDER_NAME) -> None:
        self.model = model
        self.provider = provider
        self.finish_reason: str | None = None
        self.ended = False  # Gemini's stream has no last event of its own: it ends with the body
        self._finish_detail: Any = None
        self._blocked = False
        self._usage = Usage()
        self._fold = _Fold(provider)

    def feed(self, chunk: Any) -> list[CompletionEvent]:
        if not isinstance(chunk, dict):
            raise bad_response("a stream chunk is not a JSON object")
        if "error" in chunk:
            raise stream_error(chunk, self.provider)
        if isinstance(chunk.get("usageMetadata"), dict):
            self._usage = _usage(chunk["usageMetadata"])  # cumulative: the last one counts
        self._fold.note_response(chunk)
        candidate = _first_candidate(chunk)
        if candidate is None:
            self._blocked = self._blocked or _blocked(chunk)
            return []
        events: list[CompletionEvent] = []
        for part in _parts(candidate):
            events.extend(self._fold.add(part))
        finish = candidate.get("finishReason")
        if isinstance(finish, str) and finish:
            self.finish_reason = finish
            self._finish_detail = candidate.get("finishMessage")
            if finish in _BROKEN_CALL:
                _finish_reason(finish, has_tool_calls=False, detail=self._finish_detail)
        return events

    def finish(self) -> list[CompletionEvent]:
        """The reasoning blocks still open, then ``done``; call it once the stream has ended."""
        if self.finish_reason is None and not self._blocked:
            raise bad_response("the stream ended before the model finished")
        events = self._fold.close()
        if self.finish_reason is None:
            reason: FinishReason = "content_filter"  # the prompt was blocked before any candidate
        else:
            reason = _finish_reason(
                self.finish_reason, has_tool_calls=bool(self._fold.calls), detail=self._finish_detail
            )
        events.append(CompletionDone(finish_reason=reason, usage=self._usage, model=self.model, provider=self.provider))
        return events
