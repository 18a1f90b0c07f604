"""Google Gemini's ``generateContent``, on the Gemini API (API key) and on Vertex AI (bearer token).

Both speak the same body; only the URL and the credentials differ. The first half is pure
translation between the neutral wire models and that body, tested on exact bodies:

- system messages go to ``systemInstruction``; turns are ``user`` / ``model`` ``contents``, and
  consecutive turns of one role are merged;
- tool results become ``functionResponse`` parts in the user turn right after the model turn, in
  the order of the calls (Gemini pairs them by position and name): the conversation comes
  ``tool_turns.repaired``, every call answered right after its message;
- a tool call keeps Gemini's ``thoughtSignature`` in ``ToolCall.signature`` and sends it back on the
  same part (Gemini 3 refuses a function-calling turn without it); a first call without one, from
  another provider, gets the validator-skipping value Google documents for that case;
- a signature on the answer's text, and thought summaries, are ``ReasoningBlock``s of this provider:
  a signed block goes back, an unsigned summary (display only) does not;
- tool ``inputSchema``s are rewritten into Gemini's schema subset (``gemini_schema``).

The second half, ``GeminiProvider``, says how a call is made; the shared ``HttpAdapter`` makes it.
"""

from __future__ import annotations

import json
import re
import uuid
from collections import deque
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any, Protocol

import httpx

from completion_service.controls import THINKING_BUDGETS
from completion_service.providers._adapter import HttpAdapter, Outbound
from completion_service.providers._errors import MAX_MESSAGE_CHARS, bad_response, provider_error
from completion_service.providers._transport import Upstream
from completion_service.providers.gemini_schema import to_gemini_parameters
from completion_service.providers.tool_names import NameRule
from suite_common.deadline import Deadline
from suite_common.echo import clip
from suite_common.errors import ApiError
from suite_common.wire import (
    CompletionDone,
    CompletionEvent,
    CompletionRequest,
    CompletionResponse,
    FinishReason,
    Message,
    ReasoningBlock,
    ReasoningBlockEvent,
    ReasoningDelta,
    TextDelta,
    ToolCall,
    ToolCallEvent,
    ToolChoice,
    Usage,
)

__all__ = [
    "DEFAULT_BASE_URL",
    "SKIP_SIGNATURE",
    "GeminiProvider",
    "StreamAssembler",
    "build_request_body",
    "parse_response",
    "thinking_config",
    "translate_error",
]

PROVIDER_NAME = "gemini"
TOOL_NAMES = NameRule("a-zA-Z0-9_.-", 64, first="a-zA-Z_")
"""``FunctionDeclaration.name`` as both the Gemini API and Vertex AI accept it: a letter or ``_`` first, then
letters, digits, ``_``, ``.`` and ``-``, 64 at most (the Gemini API also takes ``:``, Vertex AI does not say so)."""
VERTEX_PROVIDER_NAME = "vertex"
DEFAULT_BASE_URL = "https://generativelanguage.googleapis.com"

SKIP_SIGNATURE = "skip_thought_signature_validator"
"""What Google documents to send as ``thoughtSignature`` for a function call that has none (a
conversation that began with another model): Gemini 3 refuses the first call of a step without one."""

CONTINUE_TEXT = "(continued)"
"""The user turn put first when a conversation would otherwise start with the model (Gemini requires
a user turn first)."""

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

_GEMINI_3 = re.compile(r"(^|/)gemini-([3-9]|\d\d)")
"""Gemini 3 and later take a ``thinkingLevel``; 2.5 a ``thinkingBudget`` (one or the other: both is a 400)."""
_MODEL_ID = re.compile(r"[A-Za-z0-9][A-Za-z0-9._@-]*")
_RETRY_DELAY = re.compile(r"(\d+(?:\.\d+)?)s")


# --- neutral -> generateContent -----------------------------------------------------------------


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
    if generation:
        body["generationConfig"] = generation
    return body


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

    for message in messages:
        if message.role == "system":
            if message.content:
                system.append({"text": message.content})
        elif message.role == "user":
            if message.content:
                add("user", [{"text": message.content}])
        elif message.role == "assistant":
            add("model", _model_parts(message, provider=provider, send_call_ids=send_call_ids))
            owed = deque(message.tool_calls or ())
        else:
            add("user", [_function_response(owed.popleft(), message, send_call_ids)])
    if not contents or contents[0]["role"] != "user":
        contents.insert(0, {"role": "user", "parts": [{"text": CONTINUE_TEXT}]})
    return system, contents


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
    if message.content:
        text: dict[str, Any] = {"text": message.content}
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
    response: dict[str, Any] = {"error" if result.is_error else "result": result.content or ""}
    if call.invalid_arguments is not None:
        response["note"] = (
            "The arguments of this call were not a JSON object, so the tool got none. "
            f"They were: {call.invalid_arguments}"
        )
    function_response: dict[str, Any] = {"name": call.name, "response": response}
    if send_call_ids:
        function_response["id"] = call.id
    return {"functionResponse": function_response}


# --- generateContent -> neutral -----------------------------------------------------------------


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
            raise _stream_error(chunk, self.provider)
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


# --- errors ------------------------------------------------------------------------------------


def _error_object(payload: Any) -> dict[str, Any]:
    """Google's ``{"error": {code, message, status, details}}``, also when wrapped in a list."""
    if isinstance(payload, list) and payload:
        payload = payload[0]
    error = payload.get("error") if isinstance(payload, dict) else None
    return error if isinstance(error, dict) else {}


def _details(error: Mapping[str, Any], kind: str) -> list[dict[str, Any]]:
    details = error.get("details")
    if not isinstance(details, list):
        return []
    return [d for d in details if isinstance(d, dict) and str(d.get("@type", "")).endswith(f"google.rpc.{kind}")]


def _retry_delay(error: Mapping[str, Any]) -> str | None:
    """``RetryInfo.retryDelay`` (``"27s"``) in whole seconds, or ``None``."""
    for info in _details(error, "RetryInfo"):
        delay = info.get("retryDelay")
        matched = _RETRY_DELAY.fullmatch(delay) if isinstance(delay, str) else None
        if matched:
            return matched.group(1)
    return None


def _key_rejected(error: Mapping[str, Any], message: str) -> bool:
    """The Gemini API answers a bad or expired key with a 400 INVALID_ARGUMENT, not a 401."""
    reasons = {info.get("reason") for info in _details(error, "ErrorInfo")}
    return bool(reasons & {"API_KEY_INVALID", "API_KEY_EXPIRED"}) or "API key not valid" in message


def _quota_spent(error: Mapping[str, Any], message: str) -> bool:
    """A daily quota, or a model without any quota on this plan (``limit: 0``): waiting minutes won't help."""
    for failure in _details(error, "QuotaFailure"):
        for violation in failure.get("violations") or []:
            if isinstance(violation, dict) and "PerDay" in str(violation.get("quotaId", "")):
                return True
    return "limit: 0," in message or message.rstrip().endswith("limit: 0")


def _too_long(status: int, message: str) -> bool:
    lowered = message.lower()
    return (
        status == 400
        and "token count" in lowered
        and any(word in lowered for word in ("exceed", "only supports up to", "maximum number of tokens"))
    )


def translate_error(
    status: int,
    content: bytes,
    headers: Mapping[str, str],
    *,
    upstream_model: str,
    provider_label: str = "Gemini",
    credentials_hint: str = "COMPLETION_GEMINI_API_KEY",
) -> ApiError:
    """The caller's view of a Gemini or Vertex AI HTTP error (``status`` >= 400)."""
    try:
        error = _error_object(json.loads(content))
    except ValueError:
        error = {}
    return _error(status, error, headers, upstream_model, provider_label, credentials_hint)


def _error(
    status: int,
    error: Mapping[str, Any],
    headers: Mapping[str, str],
    upstream_model: str,
    provider_label: str,
    credentials_hint: str,
) -> ApiError:
    raw_message = error.get("message")
    message = raw_message[:MAX_MESSAGE_CHARS] if isinstance(raw_message, str) else ""
    if status == 400 and _key_rejected(error, message):
        return ApiError(
            502, "auth_failed", f"{provider_label} refused the credentials (HTTP 400): check {credentials_hint}."
        )
    waits = {key.lower(): value for key, value in headers.items()}
    delay = _retry_delay(error)
    if delay is not None and "retry-after" not in waits and "retry-after-ms" not in waits:
        waits["retry-after"] = delay  # Google says how long to wait in the body, not in a header
    return provider_error(
        status,
        provider=provider_label,
        message=message or None,
        headers=waits,
        upstream_model=upstream_model,
        credentials_hint=credentials_hint,
        context_length_exceeded=_too_long(status, message),
        quota_exhausted=status == 429 and _quota_spent(error, message),
    )


def _stream_error(chunk: Mapping[str, Any], provider: str) -> ApiError:
    """An error object in the middle of a stream, as the error its HTTP code would have been."""
    error = _error_object(chunk)
    code = error.get("code")
    status = code if isinstance(code, int) and 400 <= code <= 599 else 500
    label = "Vertex AI" if provider == VERTEX_PROVIDER_NAME else "Gemini"
    return _error(status, error, {}, "", label, "the provider's credentials")


# --- I/O ---------------------------------------------------------------------------------------


class _Endpoint(Protocol):
    @property
    def label(self) -> str: ...

    @property
    def credentials_hint(self) -> str: ...

    @property
    def sends_call_ids(self) -> bool: ...

    @property
    def base_url(self) -> str: ...

    def url(self, model: str, *, stream: bool) -> str: ...

    def credentials(self) -> tuple[dict[str, str], str | None]:
        """``(headers, secret to scrub)`` for one call."""
        ...


def _method(stream: bool) -> str:
    return ":streamGenerateContent?alt=sse" if stream else ":generateContent"


def _invalid_model(model: str, label: str) -> ApiError:
    return ApiError(400, "invalid_request", f"{clip(model)!r} is not a {label} model id.")


@dataclass(frozen=True)
class _GeminiApi:
    base_url: str
    api_key: str | None
    label: str = "Gemini"
    credentials_hint: str = "COMPLETION_GEMINI_API_KEY"
    sends_call_ids: bool = True

    def url(self, model: str, *, stream: bool) -> str:
        collection, slash, name = model.partition("/")
        if not slash:
            collection, name = "models", model
        if collection not in ("models", "tunedModels") or not _MODEL_ID.fullmatch(name):
            raise _invalid_model(model, self.label)
        return f"{self.base_url}/v1beta/{collection}/{name}{_method(stream)}"

    def credentials(self) -> tuple[dict[str, str], str | None]:
        return ({"x-goog-api-key": self.api_key} if self.api_key else {}), self.api_key


@dataclass(frozen=True)
class _VertexAi:
    base_url: str
    project: str
    location: str
    token_source: Callable[[], str]
    label: str = "Vertex AI"
    credentials_hint: str = "COMPLETION_VERTEX_ACCESS_TOKEN (or its _FILE) and the IAM roles of the token's account"
    sends_call_ids: bool = False

    def url(self, model: str, *, stream: bool) -> str:
        if not _MODEL_ID.fullmatch(model):
            raise _invalid_model(model, self.label)
        return (
            f"{self.base_url}/v1/projects/{self.project}/locations/{self.location}"
            f"/publishers/google/models/{model}{_method(stream)}"
        )

    def credentials(self) -> tuple[dict[str, str], str | None]:
        try:
            token = self.token_source().strip()
        except Exception as error:  # a token file being rewritten, unreadable, gone
            raise ApiError(
                502, "auth_failed", f"The Vertex AI access token could not be read: {type(error).__name__}."
            ) from None
        if not token:
            raise ApiError(
                502, "auth_failed", "There is no Vertex AI access token: check COMPLETION_VERTEX_ACCESS_TOKEN(_FILE)."
            )
        return {"Authorization": f"Bearer {token}"}, token


_LOCATION = re.compile(r"[a-z0-9-]+")
_PROJECT = re.compile(r"[a-z0-9][a-z0-9.:-]*")


class GeminiProvider(HttpAdapter):
    """Calls ``generateContent`` through the service's shared ``httpx.AsyncClient``: on the Gemini API
    (``GeminiProvider(...)``) or on Vertex AI (``GeminiProvider.vertex(...)``)."""

    tool_names = TOOL_NAMES

    def __init__(
        self,
        http: httpx.AsyncClient,
        *,
        base_url: str = DEFAULT_BASE_URL,
        api_key: str | None,
        max_retries: int = 2,
        name: str = PROVIDER_NAME,
        include_thoughts: bool = False,
    ) -> None:
        self._setup(http, _GeminiApi(base_url.rstrip("/"), api_key or None), max_retries, name, include_thoughts)

    @classmethod
    def vertex(
        cls,
        http: httpx.AsyncClient,
        *,
        project: str,
        location: str,
        token_source: Callable[[], str],
        base_url: str | None = None,
        max_retries: int = 2,
        name: str = VERTEX_PROVIDER_NAME,
        include_thoughts: bool = False,
    ) -> GeminiProvider:
        """Gemini on Vertex AI; ``token_source`` gives the OAuth2 bearer token, asked again for every call
        so that whatever refreshes it (a file rewritten by a sidecar) is picked up."""
        if not _PROJECT.fullmatch(project):
            raise ValueError(f"{project!r} is not a Google Cloud project id (COMPLETION_VERTEX_PROJECT)")
        if not _LOCATION.fullmatch(location):
            raise ValueError(f"{location!r} is not a Vertex AI location (COMPLETION_VERTEX_LOCATION)")
        # The global endpoint has no region in its host name.
        host = "aiplatform.googleapis.com" if location == "global" else f"{location}-aiplatform.googleapis.com"
        endpoint = _VertexAi((base_url or f"https://{host}").rstrip("/"), project, location, token_source)
        provider = cls.__new__(cls)
        provider._setup(http, endpoint, max_retries, name, include_thoughts)
        return provider

    def _setup(
        self, http: httpx.AsyncClient, endpoint: _Endpoint, max_retries: int, name: str, include_thoughts: bool
    ) -> None:
        self.name = name
        self._http = http
        self._endpoint = endpoint
        self._max_retries = max_retries
        self._include_thoughts = include_thoughts

    def _parse(self, body: Any, model: str) -> CompletionResponse:
        return parse_response(body, model, provider=self.name)

    def _decoder(self, model: str) -> StreamAssembler:
        return StreamAssembler(model=model, provider=self.name)

    async def _whole_stream(
        self, upstream: Upstream, response: httpx.Response, deadline: Deadline, model: str
    ) -> list[CompletionEvent]:
        # Some servers answer ``alt=sse`` with JSON: one GenerateContentResponse, or the array of them that
        # streamGenerateContent gives without ``alt=sse``. Both are whole answers, folded as a stream is.
        assembler = self._decoder(model)
        with upstream.scrubbed():
            whole = await upstream.read_json(response, deadline)
            chunks = whole if isinstance(whole, list) else [whole]
            events = [event for chunk in chunks for event in assembler.feed(chunk)]
            return [*events, *assembler.finish()]

    async def _outbound(self, request: CompletionRequest, upstream_model: str, *, stream: bool) -> Outbound:
        endpoint = self._endpoint
        body = build_request_body(
            request,
            provider=self.name,
            send_call_ids=endpoint.sends_call_ids,
            include_thoughts=self._include_thoughts,
            upstream_model=upstream_model,
        )
        url = endpoint.url(upstream_model, stream=stream)
        headers, secret = endpoint.credentials()
        headers["Accept"] = "text/event-stream" if stream else "application/json"
        # One per call: a Vertex token changes, and every message that leaves must be scrubbed of it.
        upstream = Upstream(
            self._http, provider=self.name, base_url=endpoint.base_url, secrets=[secret], max_retries=self._max_retries
        )

        def build() -> httpx.Request:
            return self._http.build_request("POST", url, json=body, headers=headers)

        def translate(status: int, content: bytes, response_headers: httpx.Headers) -> ApiError:
            return translate_error(
                status,
                content,
                response_headers,
                upstream_model=upstream_model,
                provider_label=endpoint.label,
                credentials_hint=endpoint.credentials_hint,
            )

        return Outbound(upstream, build, translate)
