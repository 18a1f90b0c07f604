"""Amazon Bedrock's Converse and ConverseStream APIs, one wire format for every model Bedrock hosts.

The first half is pure translation between the neutral wire models and Converse JSON; the
stream's AWS event-stream frames are decoded by botocore's ``EventStreamBuffer`` and folded by
``ConverseStreamAssembler``. ``BedrockProvider`` says how a call is made (each attempt signed afresh
with botocore's SigV4 signer); the shared ``HttpAdapter`` makes it.
"""

from __future__ import annotations

import json
import threading
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import quote

import anyio
import httpx
from botocore.auth import SigV4Auth
from botocore.awsrequest import AWSRequest
from botocore.credentials import Credentials, ReadOnlyCredentials
from botocore.eventstream import EventStreamBuffer, ParserError

from completion_service.controls import thinking_budget
from completion_service.providers._adapter import HttpAdapter, Outbound
from completion_service.providers._anthropic_shape import (
    DEFAULT_MAX_TOKENS,
    MAX_TEMPERATURE,
    ContentBlocks,
    finish_reason,
    thinking_warnings,
    tool_call,
)
from completion_service.providers._errors import MAX_MESSAGE_CHARS, bad_response, provider_error
from completion_service.providers._images import data_image, parts_of
from completion_service.providers._transport import Upstream, parse_json
from completion_service.providers.tool_names import NameRule
from suite_common.errors import ApiError
from suite_common.openai_chat import parse_arguments
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
    ToolCallEvent,
    ToolChoice,
    Usage,
)

__all__ = [
    "BedrockProvider",
    "ConverseStreamAssembler",
    "build_request_body",
    "parse_response",
    "translate_error",
    "translate_stream_exception",
]

PROVIDER_NAME = "bedrock"
TOOL_NAMES = NameRule("a-zA-Z0-9_-", 64)
"""Converse's ``ToolSpecification.name``: ``[a-zA-Z0-9_-]+``, 1 to 64 characters."""
_EVENT_STREAM = "application/vnd.amazon.eventstream"

_STOP_REASONS: dict[str, FinishReason] = {
    "end_turn": "stop",
    "stop_sequence": "stop",
    "tool_use": "tool_calls",
    "max_tokens": "length",
    "model_context_window_exceeded": "length",
    "guardrail_intervened": "content_filter",
    "content_filtered": "content_filter",
}

# --- neutral -> Converse -------------------------------------------------------------------------


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
        if _is_claude(upstream_model):
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
    if budget is None or not _is_claude(upstream_model):
        return None
    if request.tools and request.tool_choice not in ("auto", "none"):
        return None  # Claude refuses a forced tool with thinking
    last_user = max((i for i, m in enumerate(request.messages) if m.role == "user"), default=-1)
    first_reply = next((m for m in request.messages[last_user + 1 :] if m.role == "assistant"), None)
    if first_reply is not None and not any(block.provider == provider for block in first_reply.reasoning or []):
        return None  # Claude refuses to start thinking in the middle of a tool-use turn
    return budget


def _warnings(request: CompletionRequest, body: dict[str, Any], upstream_model: str) -> list[str]:
    if request.reasoning is not None and request.reasoning.effort is not None and not _is_claude(upstream_model):
        return [f"reasoning ignored: of Bedrock's models only Claude takes it, not {upstream_model!r}."]
    thinking = "additionalModelRequestFields" in body
    return thinking_warnings(request, thinking, thinking_budget(request, None), upstream_model)


def _is_claude(model_id: str) -> bool:
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


# --- Converse -> neutral -------------------------------------------------------------------------


def _usage(raw: Any) -> Usage:
    if not isinstance(raw, dict):
        return Usage()
    given, taken = raw.get("inputTokens"), raw.get("outputTokens")
    cached = sum(v for k in ("cacheReadInputTokens", "cacheWriteInputTokens") if isinstance(v := raw.get(k), int))
    return Usage(
        input_tokens=(given if isinstance(given, int) else 0) + cached,
        output_tokens=taken if isinstance(taken, int) else 0,
    )


def _reasoning_block(raw: Any, provider: str) -> ReasoningBlock | None:
    if not isinstance(raw, dict):
        return None
    if "redactedContent" in raw:
        data = raw["redactedContent"]
        return ReasoningBlock(redacted_data=data if isinstance(data, str) else None, provider=provider)
    text = raw.get("reasoningText")
    if isinstance(text, dict):
        signature = text.get("signature")
        return ReasoningBlock(
            text=str(text.get("text") or ""),
            signature=signature if isinstance(signature, str) else None,
            provider=provider,
        )
    return None


def parse_response(body: Any, model: str, *, provider: str = PROVIDER_NAME) -> CompletionResponse:
    """A whole Converse response as the neutral response reported under ``model``."""
    if not isinstance(body, dict):
        raise bad_response("the body is not a JSON object")
    message = (body.get("output") or {}).get("message") if isinstance(body.get("output"), dict) else None
    if not isinstance(message, dict) or not isinstance(message.get("content"), list):
        raise bad_response("output.message.content is missing")
    found = ContentBlocks()
    for position, block in enumerate(message["content"]):
        if not isinstance(block, dict):
            raise bad_response(f"content block {position} is not an object")
        if isinstance(block.get("text"), str):
            found.texts.append(block["text"])
        elif isinstance(block.get("toolUse"), dict):
            use = block["toolUse"]
            arguments, fallback_id = parse_arguments(use.get("input")), f"tooluse_{position}"
            found.calls.append(
                tool_call(
                    use.get("toolUseId"),
                    use.get("name"),
                    arguments,
                    what=f"tool use {position}",
                    fallback_id=fallback_id,
                )
            )
        elif (thought := _reasoning_block(block.get("reasoningContent"), provider)) is not None:
            found.reasoning.append(thought)
    finish = finish_reason(_STOP_REASONS, body.get("stopReason"), has_tool_calls=bool(found.calls))
    return found.response(finish, _usage(body.get("usage")), model=model, provider=provider)


@dataclass
class _Block:
    kind: str = "text"
    tool_id: str = ""
    tool_name: str = ""
    parts: list[str] = field(default_factory=list)
    signature: str | None = None
    redacted: str | None = None


class ConverseStreamAssembler:
    """Folds decoded ConverseStream events (``:event-type`` and JSON payload) into neutral events."""

    def __init__(self, *, model: str, provider: str = PROVIDER_NAME) -> None:
        self.model = model
        self.provider = provider
        self.stop_reason: str | None = None
        self._usage = Usage()
        self._blocks: dict[int, _Block] = {}
        self._calls: list[ToolCallEvent] = []

    def feed(self, event_type: str, payload: Any) -> list[CompletionEvent]:
        if not isinstance(payload, dict):
            raise bad_response(f"a {event_type} event is not a JSON object")
        index = payload.get("contentBlockIndex", 0)
        if event_type == "contentBlockStart":
            start = (payload.get("start") or {}).get("toolUse")
            if isinstance(start, dict):
                self._blocks[index] = _Block("tool", str(start.get("toolUseId") or ""), str(start.get("name") or ""))
            return []
        if event_type == "contentBlockDelta":
            return self._delta(index, payload.get("delta"))
        if event_type == "contentBlockStop":
            return self._stop(index)
        if event_type == "messageStop":
            self.stop_reason = payload.get("stopReason") if isinstance(payload.get("stopReason"), str) else "end_turn"
        elif event_type == "metadata":
            self._usage = _usage(payload.get("usage"))
        return []  # messageStart and events this version does not know

    def _delta(self, index: int, delta: Any) -> list[CompletionEvent]:
        if not isinstance(delta, dict):
            raise bad_response("a contentBlockDelta has no delta")
        block = self._blocks.setdefault(index, _Block())
        if isinstance(delta.get("text"), str):
            return [TextDelta(delta=delta["text"])] if delta["text"] else []
        if isinstance(delta.get("toolUse"), dict):
            fragment = delta["toolUse"].get("input")
            if isinstance(fragment, str):
                block.parts.append(fragment)
            return []
        thought = delta.get("reasoningContent")
        if isinstance(thought, dict):
            block.kind = "reasoning"
            if isinstance(thought.get("text"), str):
                block.parts.append(thought["text"])
                return [ReasoningDelta(delta=thought["text"])] if thought["text"] else []
            if isinstance(thought.get("signature"), str):
                block.signature = thought["signature"]
            if isinstance(thought.get("redactedContent"), str):
                block.redacted = thought["redactedContent"]
        return []

    def _stop(self, index: int) -> list[CompletionEvent]:
        block = self._blocks.pop(index, None)
        if block is None:
            return []
        if block.kind == "tool":
            if not block.tool_name:
                raise bad_response(f"streamed tool use {index} has no name")
            arguments, invalid = parse_arguments("".join(block.parts))
            self._calls.append(
                ToolCallEvent(
                    id=block.tool_id or f"tooluse_{index}",
                    name=block.tool_name,
                    arguments=arguments,
                    invalid_arguments=invalid,
                )
            )
        elif block.kind == "reasoning":
            thought = ReasoningBlock(
                text="".join(block.parts),
                signature=block.signature,
                redacted_data=block.redacted,
                provider=self.provider,
            )
            return [ReasoningBlockEvent(block=thought)]
        return []

    def finish(self) -> list[CompletionEvent]:
        """The tool calls (whole), then ``done``; once the stream has ended."""
        if self.stop_reason is None:
            raise bad_response("the stream ended before the model finished")
        return [
            *self._calls,
            CompletionDone(
                finish_reason=finish_reason(_STOP_REASONS, self.stop_reason, has_tool_calls=bool(self._calls)),
                usage=self._usage,
                model=self.model,
                provider=self.provider,
            ),
        ]


# --- errors --------------------------------------------------------------------------------------


def _error_type(headers: Mapping[str, str], payload: Any) -> str:
    """``ThrottlingException`` from ``x-amzn-ErrorType: ThrottlingException:http://...`` or the body's ``__type``."""
    raw = headers.get("x-amzn-errortype") or (payload.get("__type") if isinstance(payload, dict) else None) or ""
    return str(raw).split(":", 1)[0].rsplit("#", 1)[-1]


def _is_context_overflow(message: str | None) -> bool:
    text = (message or "").lower()
    return any(marker in text for marker in ("too long", "too many input tokens", "context window", "input length"))


def translate_error(status: int, content: bytes, headers: Mapping[str, str], *, upstream_model: str) -> ApiError:
    """The caller's view of a Bedrock HTTP error (``status`` >= 400)."""
    try:
        payload = json.loads(content)
    except ValueError:
        payload = None
    message = payload.get("message") or payload.get("Message") if isinstance(payload, dict) else None
    message = message[:MAX_MESSAGE_CHARS] if isinstance(message, str) else None
    kind = _error_type(headers, payload)
    if kind in ("UnrecognizedClientException", "AccessDeniedException", "ExpiredTokenException"):
        status = 403
    elif kind == "ModelNotReadyException":
        status = 503
    elif kind == "ModelTimeoutException":
        status = 408
    return provider_error(
        status,
        provider="Bedrock",
        message=f"{kind}: {message}" if kind and message else message or kind or None,
        headers=headers,
        upstream_model=upstream_model,
        credentials_hint="the AWS credentials (COMPLETION_AWS_ACCESS_KEY_ID or the role) and their Bedrock permissions",
        context_length_exceeded=kind == "ValidationException" and _is_context_overflow(message),
    )


_STREAM_EXCEPTION_STATUS = {
    "throttlingException": 429,
    "serviceUnavailableException": 503,
    "internalServerException": 500,
    "modelStreamErrorException": 500,
    "validationException": 400,
}


def translate_stream_exception(kind: str, payload: bytes) -> ApiError:
    """An ``exception`` frame in the middle of a ConverseStream response."""
    try:
        message = json.loads(payload).get("message")
    except (ValueError, AttributeError):
        message = None
    status = _STREAM_EXCEPTION_STATUS.get(kind, 500)
    return provider_error(
        status,
        provider="Bedrock",
        message=f"{kind}: {message}" if isinstance(message, str) else kind,
        headers={},
        upstream_model="",
        credentials_hint="the AWS credentials",
        context_length_exceeded=status == 400 and _is_context_overflow(message if isinstance(message, str) else None),
    )


# --- I/O -----------------------------------------------------------------------------------------

CredentialSource = Callable[[], ReadOnlyCredentials | None]


class _CredentialChain:
    """botocore's chain (environment, shared profile, container or instance role, web identity), resolved once
    and then refreshed by botocore itself before they expire; not resolved again at every call."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._credentials: Any = None

    def __call__(self) -> ReadOnlyCredentials | None:
        with self._lock:
            if self._credentials is None:  # none found yet: look again (a role may come later)
                import botocore.session

                self._credentials = botocore.session.get_session().get_credentials()
            credentials = self._credentials
        return credentials.get_frozen_credentials() if credentials is not None else None


class BedrockProvider(HttpAdapter):
    """Calls ``{endpoint}/model/{modelId}/converse[-stream]``, each attempt SigV4-signed by botocore."""

    tool_names = TOOL_NAMES
    stream_media_type = _EVENT_STREAM
    image_input = "bytes"  # Converse takes image bytes only: https images are fetched first
    answers_through_tool = True  # Converse has no JSON mode: a response_format is a forced final tool

    def __init__(
        self,
        http: httpx.AsyncClient,
        *,
        region: str,
        endpoint_url: str | None = None,
        access_key_id: str | None = None,
        secret_access_key: str | None = None,
        session_token: str | None = None,
        credentials: CredentialSource | None = None,
        max_retries: int = 2,
        name: str = PROVIDER_NAME,
    ) -> None:
        self.name = name
        self._region = region
        self._base = (endpoint_url or f"https://bedrock-runtime.{region}.amazonaws.com").rstrip("/")
        if access_key_id and secret_access_key:
            fixed = Credentials(access_key_id, secret_access_key, session_token).get_frozen_credentials()
            self._credentials: CredentialSource = lambda: fixed
        else:
            self._credentials = credentials or _CredentialChain()
        self._upstream = Upstream(
            http,
            provider=name,
            base_url=self._base,
            secrets=[secret_access_key, session_token],
            max_retries=max_retries,
        )

    def _parse(self, body: Any, model: str) -> CompletionResponse:
        return parse_response(body, model, provider=self.name)

    def _decoder(self, model: str) -> _FrameDecoder:
        return _FrameDecoder(ConverseStreamAssembler(model=model, provider=self.name))

    async def _outbound(self, request: CompletionRequest, upstream_model: str, *, stream: bool) -> Outbound:
        # Credentials may come from a role: botocore fetches and refreshes them with blocking I/O.
        credentials = await anyio.to_thread.run_sync(self._credentials)
        if credentials is None:
            raise ApiError(
                502,
                "auth_failed",
                "No AWS credentials for Bedrock: set COMPLETION_AWS_ACCESS_KEY_ID and COMPLETION_AWS_SECRET_ACCESS_KEY "
                "or give the service a role.",
            )
        self._upstream.hide(credentials.secret_key, credentials.token)
        fields = build_request_body(request, provider=self.name, upstream_model=upstream_model)
        warnings = _warnings(request, fields, upstream_model)
        body = json.dumps(fields, ensure_ascii=False).encode()
        # The model id goes into the path percent-encoded, ':' included, exactly as AWS's SDKs send it.
        url = f"{self._base}/model/{quote(upstream_model, safe='')}/{'converse-stream' if stream else 'converse'}"
        accept = _EVENT_STREAM if stream else "application/json"

        def build() -> httpx.Request:
            signed = AWSRequest(
                method="POST", url=url, data=body, headers={"Content-Type": "application/json", "Accept": accept}
            )
            SigV4Auth(credentials, "bedrock", self._region).add_auth(signed)
            return self._upstream.http.build_request("POST", url, content=body, headers=dict(signed.headers.items()))

        def translate(status: int, content: bytes, headers: httpx.Headers) -> ApiError:
            return translate_error(status, content, headers, upstream_model=upstream_model)

        return Outbound(self._upstream, build, translate, warnings)


class _FrameDecoder:
    """ConverseStream's body, chunk by chunk: AWS event-stream frames (botocore decodes them and checks their
    CRCs) folded by ``ConverseStreamAssembler``."""

    def __init__(self, assembler: ConverseStreamAssembler) -> None:
        self.assembler = assembler
        self.ended = False
        """An exception frame came: its error is raised by ``finish``, after the events of the frames before it."""
        self._frames = EventStreamBuffer()
        self._failure: ApiError | None = None

    def feed(self, piece: Any) -> list[CompletionEvent]:
        """The neutral events of the frames ``piece`` completes, in order, up to an exception frame."""
        self._frames.add_data(piece)
        try:
            messages = list(self._frames)
        except ParserError as error:
            raise bad_response(f"a broken event-stream frame ({type(error).__name__})") from None
        events: list[CompletionEvent] = []
        for message in messages:
            headers = message.headers
            if headers.get(":message-type") in ("exception", "error"):
                kind = str(headers.get(":exception-type") or headers.get(":error-code") or "exception")
                self._failure = translate_stream_exception(kind, message.payload)
                self.ended = True
                break
            events.extend(
                self.assembler.feed(str(headers.get(":event-type", "")), parse_json(message.payload or b"{}"))
            )
        return events

    def finish(self) -> list[CompletionEvent]:
        if self._failure is not None:
            raise self._failure
        return self.assembler.finish()
