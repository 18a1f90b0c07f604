"""A scripted Gemini server: the Gemini API and Vertex AI wire formats, answers from a script.

Serve ``ScriptedGemini(...).app`` with ``support.servers.serve_app`` and point the Gemini API base
URL, or the Vertex AI base URL, at it. It answers

- ``POST /v1beta/models/{model}:generateContent`` and ``:streamGenerateContent?alt=sse`` (Gemini API,
  key in ``x-goog-api-key``; a wrong key gets Google's 400 ``API_KEY_INVALID``, none a 403), and
- ``POST /v1/projects/{project}/locations/{location}/publishers/google/models/{model}:...`` (Vertex AI,
  ``Authorization: Bearer``; a wrong token gets a 401 ``UNAUTHENTICATED``).

Each accepted request takes the next reply of the script (a reply, or a function of the request
body returning one). Like the real API it refuses, with a 400 ``INVALID_ARGUMENT``, bodies Gemini
refuses: schema keywords outside its subset, turns that do not start with the user, a function call
turn not answered by as many function responses, in order, and (Gemini 3) a function call turn
whose first call lacks the ``thoughtSignature`` it was given. ``requests`` records every request.

Streams are ``data: <GenerateContentResponse>`` events separated by CRLF pairs: text a word at a
time, each function call whole in a chunk of its own, then a last chunk with the finish reason and
the usage.
"""

from __future__ import annotations

import base64
import binascii
import itertools
import json
import re
from collections import deque
from collections.abc import AsyncIterator, Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse, Response, StreamingResponse
from starlette.routing import Route

from support.context_window import prompt_tokens

__all__ = [
    "BlockedReply",
    "CallsReply",
    "ErrorReply",
    "JsonToStreamReply",
    "RawReply",
    "Recorded",
    "Reply",
    "ScriptedGemini",
    "TextReply",
    "blocked",
    "error",
    "function_calls",
    "json_even_when_streamed",
    "raw",
    "text",
]

SKIP_SIGNATURE = "skip_thought_signature_validator"
FUNCTION_NAME = re.compile(r"[a-zA-Z_][a-zA-Z0-9_.-]{0,63}")
"""``FunctionDeclaration.name`` as the API references describe it (Vertex AI's, the stricter)."""

_SCHEMA_FIELDS = frozenset(
    {
        "type",
        "format",
        "title",
        "description",
        "nullable",
        "enum",
        "maxItems",
        "minItems",
        "properties",
        "required",
        "minProperties",
        "maxProperties",
        "minLength",
        "maxLength",
        "pattern",
        "example",
        "anyOf",
        "propertyOrdering",
        "default",
        "items",
        "minimum",
        "maximum",
    }
)
"""The fields of ``Schema`` in Gemini's API reference."""


@dataclass(frozen=True)
class TextReply:
    content: str
    thought: str | None = None
    signature: str | None = None


@dataclass(frozen=True)
class CallsReply:
    calls: tuple[tuple[str, dict[str, Any]], ...]
    with_ids: bool = False
    text: str | None = None


@dataclass(frozen=True)
class ErrorReply:
    status: int
    body: dict[str, Any]
    headers: dict[str, str] = field(default_factory=dict)


@dataclass(frozen=True)
class BlockedReply:
    reason: str


@dataclass(frozen=True)
class RawReply:
    body: bytes
    status: int = 200
    content_type: str = "application/json"


@dataclass(frozen=True)
class JsonToStreamReply:
    reply: TextReply | CallsReply
    as_array: bool = False


Reply = TextReply | CallsReply | ErrorReply | BlockedReply | RawReply | JsonToStreamReply
ReplySource = Reply | Callable[[dict[str, Any]], Reply]


def text(content: str, *, thought: str | None = None, signature: str | None = None) -> Reply:
    """The model answers ``content``, after a thought summary when ``thought`` is given; ``signature``
    goes on the answer's (last) text part, as Gemini 2.5 and 3 put it."""
    return TextReply(content, thought, signature)


def json_even_when_streamed(reply: Reply, *, as_array: bool = False) -> Reply:
    """``reply`` as one ``application/json`` GenerateContentResponse even to ``streamGenerateContent?alt=sse``
    (as some Gemini-compatible servers answer), or with ``as_array`` as the JSON array of responses that
    ``streamGenerateContent`` gives without ``alt=sse``."""
    assert isinstance(reply, TextReply | CallsReply)
    return JsonToStreamReply(reply, as_array)


def function_calls(*calls: tuple[str, dict[str, Any]], with_ids: bool = False, text: str | None = None) -> Reply:
    """The model calls each ``(name, args)`` in one turn, after ``text`` if given. The first call carries
    a fresh ``thoughtSignature`` (as Gemini 3 does); ``with_ids`` gives each call an ``id`` too."""
    return CallsReply(tuple(calls), with_ids, text)


_STATUS_NAMES = {
    400: "INVALID_ARGUMENT",
    401: "UNAUTHENTICATED",
    403: "PERMISSION_DENIED",
    404: "NOT_FOUND",
    429: "RESOURCE_EXHAUSTED",
    500: "INTERNAL",
    503: "UNAVAILABLE",
    504: "DEADLINE_EXCEEDED",
}
_DEFAULT_MESSAGES = {
    401: "Request had invalid authentication credentials. Expected OAuth 2 access token, login cookie or other "
    "valid authentication credential.",
    403: "Method doesn't allow unregistered callers (callers without established identity).",
    429: "You exceeded your current quota, please check your plan and billing details.",
    500: "An internal error has occurred. Please retry or report in https://developers.generativeai.google/guide/"
    "troubleshooting",
    503: "The model is overloaded. Please try again later.",
}


def google_error_body(status: int, message: str | None = None, *details: dict[str, Any]) -> dict[str, Any]:
    error: dict[str, Any] = {
        "code": status,
        "message": message or _DEFAULT_MESSAGES.get(status, f"HTTP {status}"),
        "status": _STATUS_NAMES.get(status, "UNKNOWN"),
    }
    if details:
        error["details"] = list(details)
    return {"error": error}


def retry_info(delay: str) -> dict[str, Any]:
    return {"@type": "type.googleapis.com/google.rpc.RetryInfo", "retryDelay": delay}


def error(
    status: int,
    message: str | None = None,
    *details: dict[str, Any],
    headers: dict[str, str] | None = None,
) -> Reply:
    """An HTTP error with Google's body ``{"error": {code, message, status, details}}``."""
    return ErrorReply(status, google_error_body(status, message, *details), dict(headers or {}))


def blocked(reason: str = "SAFETY") -> Reply:
    """The prompt is refused: ``promptFeedback.blockReason`` and no candidate."""
    return BlockedReply(reason)


def raw(body: bytes, *, status: int = 200, content_type: str = "application/json") -> Reply:
    """Exactly these bytes, whatever was asked."""
    return RawReply(body, status, content_type)


def _inline_data_problem(blob: Any) -> str | None:
    """Gemini's checks of an ``inlineData`` blob: a MIME type, and base64 data."""
    if not isinstance(blob, dict) or not isinstance(blob.get("mimeType"), str):
        return "mime_type: field is required"
    try:
        base64.b64decode(blob.get("data", ""), validate=True)
    except (binascii.Error, ValueError):
        return "data: Invalid value (bytes): base64 decoding failed"
    return None


@dataclass(frozen=True)
class Recorded:
    api: str
    """``gemini`` or ``vertex``."""
    model: str
    method: str
    """``generateContent`` or ``streamGenerateContent``."""
    query: dict[str, str]
    headers: dict[str, str]
    body: dict[str, Any]
    project: str | None = None
    location: str | None = None


def _words(value: Any) -> int:
    return len(value.split()) if isinstance(value, str) else 0


def _pieces(content: str) -> list[str]:
    pieces: list[str] = re.findall(r"\s*\S+|\s+$", content)
    return pieces or [content]


def _asks_for_thoughts(body: dict[str, Any]) -> bool:
    """Gemini sends thought summaries only to a request with ``thinkingConfig.includeThoughts``."""
    thinking = (body.get("generationConfig") or {}).get("thinkingConfig") or {}
    return thinking.get("includeThoughts") is True


def _sse(payload: dict[str, Any]) -> bytes:
    return f"data: {json.dumps(payload)}\r\n\r\n".encode()


def _invalid(message: str) -> JSONResponse:
    return JSONResponse(google_error_body(400, message), status_code=400)


def _schema_problem(schema: Any, where: str) -> str | None:
    if not isinstance(schema, dict):
        return f"Invalid value at '{where}': not an object"
    for key in schema:
        if key not in _SCHEMA_FIELDS:
            return f"Invalid JSON payload received. Unknown name \"{key}\" at '{where}': Cannot find field."
    if isinstance(schema.get("type"), list):
        return f"Invalid JSON payload received. Proto field is not repeating, cannot start list at '{where}.type'."
    if str(schema.get("type", "")).lower() == "array" and "items" not in schema:
        return f"* GenerateContentRequest.{where}.items: missing field."
    if str(schema.get("type", "")).lower() == "object" and schema.get("properties") == {}:
        return f"* GenerateContentRequest.{where}.properties: should be non-empty for OBJECT type"
    for name, child in (schema.get("properties") or {}).items():
        if problem := _schema_problem(child, f"{where}.properties[{name}].value"):
            return problem
    if "items" in schema and (problem := _schema_problem(schema["items"], f"{where}.items")):
        return problem
    for index, branch in enumerate(schema.get("anyOf") or []):
        if problem := _schema_problem(branch, f"{where}.any_of[{index}]"):
            return problem
    return None


class ScriptedGemini:
    """Gemini API and Vertex AI ``generateContent`` answered from a script."""

    def __init__(
        self,
        replies: Sequence[ReplySource] = (),
        *,
        api_key: str = "test-gemini-key",
        vertex_token: str = "ya29.test-token",
        require_signatures: bool = True,
        context_window: int | None = None,
    ) -> None:
        """``context_window``: a prompt longer than this many tokens (``support.context_window``) is refused as
        Gemini refuses one: 400 ``INVALID_ARGUMENT`` "The input token count (N) exceeds the maximum number of tokens
        allowed (M)."."""
        self.api_key = api_key
        self.context_window = context_window
        self.vertex_token = vertex_token
        self.require_signatures = require_signatures
        self.requests: list[Recorded] = []
        self.issued_signatures: list[str] = []
        self._script: deque[ReplySource] = deque(replies)
        self._ids = itertools.count(1)
        self.app = Starlette(
            routes=[
                Route("/v1beta/models/{target}", self._gemini, methods=["POST"]),
                Route(
                    "/v1/projects/{project}/locations/{location}/publishers/google/models/{target}",
                    self._vertex,
                    methods=["POST"],
                ),
            ]
        )

    def push(self, *replies: ReplySource) -> None:
        self._script.extend(replies)

    # --- the two front doors ------------------------------------------------------------------

    async def _gemini(self, request: Request) -> Response:
        recorded, problem = await self._record(request, "gemini")
        if problem is not None:
            return problem
        assert recorded is not None
        key = request.headers.get("x-goog-api-key")
        if key is None:
            return JSONResponse(google_error_body(403), status_code=403)
        if key != self.api_key:
            return JSONResponse(
                google_error_body(
                    400,
                    "API key not valid. Please pass a valid API key.",
                    {
                        "@type": "type.googleapis.com/google.rpc.ErrorInfo",
                        "reason": "API_KEY_INVALID",
                        "domain": "googleapis.com",
                        "metadata": {"service": "generativelanguage.googleapis.com"},
                    },
                ),
                status_code=400,
            )
        return await self._answer(recorded)

    async def _vertex(self, request: Request) -> Response:
        recorded, problem = await self._record(request, "vertex")
        if problem is not None:
            return problem
        assert recorded is not None
        if request.headers.get("authorization") != f"Bearer {self.vertex_token}":
            return JSONResponse(google_error_body(401), status_code=401)
        return await self._answer(recorded)

    async def _record(self, request: Request, api: str) -> tuple[Recorded | None, Response | None]:
        model, _, method = request.path_params["target"].partition(":")
        if method not in ("generateContent", "streamGenerateContent"):
            return None, JSONResponse(google_error_body(404, f"Method {method!r} not found."), status_code=404)
        try:
            body = json.loads(await request.body())
        except ValueError:
            return None, _invalid("Invalid JSON payload received.")
        if not isinstance(body, dict):
            return None, _invalid("Invalid JSON payload received. Expected an object.")
        recorded = Recorded(
            api=api,
            model=model,
            method=method,
            query=dict(request.query_params),
            headers={name.lower(): value for name, value in request.headers.items()},
            body=body,
            project=request.path_params.get("project"),
            location=request.path_params.get("location"),
        )
        self.requests.append(recorded)
        return recorded, None

    # --- what Gemini checks before answering --------------------------------------------------

    def _problem(self, body: dict[str, Any]) -> str | None:
        for tool_index, tool in enumerate(body.get("tools") or []):
            for index, declaration in enumerate(tool.get("functionDeclarations") or []):
                if not FUNCTION_NAME.fullmatch(declaration.get("name", "")):
                    return (
                        f"* GenerateContentRequest.tools[{tool_index}].function_declarations[{index}].name: Invalid "
                        "function name. Must start with a letter or an underscore. Must be alphameric (a-z, A-Z, "
                        "0-9), underscores (_), dots (.) or dashes (-), with a maximum length of 64."
                    )
                if "parameters" in declaration:
                    where = f"tools[{tool_index}].function_declarations[{index}].parameters"
                    if problem := _schema_problem(declaration["parameters"], where):
                        return problem
        contents = body.get("contents")
        if not isinstance(contents, list) or not contents:
            return "* GenerateContentRequest.contents: contents is not specified"
        if contents[0].get("role") != "user":
            return "Please ensure that multiturn requests alternate between user and model, starting with user."
        for index, content in enumerate(contents):
            if content.get("role") not in ("user", "model") or not content.get("parts"):
                return f"* GenerateContentRequest.contents[{index}].parts: contents.parts must not be empty."
            for position, part in enumerate(content["parts"]):
                if "inlineData" in part and (problem := _inline_data_problem(part["inlineData"])):
                    return f"* GenerateContentRequest.contents[{index}].parts[{position}].inline_data: {problem}"
            calls = [part for part in content["parts"] if "functionCall" in part]
            if not calls:
                continue
            if self.require_signatures:
                signature = calls[0].get("thoughtSignature")
                if not signature:
                    return (
                        "Function call is missing a thought_signature in functionCall parts. This is required for "
                        f"tools to work correctly. Additional data, function call `default_api:"
                        f"{calls[0]['functionCall'].get('name')}` , position {index + 1}."
                    )
                if signature != SKIP_SIGNATURE and signature not in self.issued_signatures:
                    return "Thought signature is not valid."
            following = contents[index + 1]["parts"] if index + 1 < len(contents) else []
            responses = [part["functionResponse"] for part in following if "functionResponse" in part]
            names = [call["functionCall"].get("name") for call in calls]
            if [response.get("name") for response in responses] != names:
                return (
                    "Please ensure that the number of function response parts is equal to the number of function "
                    "call parts of the function call turn."
                )
        return None

    # --- answers ------------------------------------------------------------------------------

    async def _answer(self, recorded: Recorded) -> Response:
        if problem := self._problem(recorded.body):
            return _invalid(problem)
        body = recorded.body
        tokens = prompt_tokens(body.get("systemInstruction"), body.get("contents"), body.get("tools"))
        if self.context_window is not None and tokens > self.context_window:
            return _invalid(
                f"The input token count ({tokens}) exceeds the maximum number of tokens allowed "
                f"({self.context_window})."
            )
        if not self._script:
            return JSONResponse(google_error_body(500, "The scripted server ran out of replies."), status_code=500)
        source = self._script.popleft()
        reply = source(recorded.body) if callable(source) else source
        if isinstance(reply, RawReply):
            return Response(reply.body, status_code=reply.status, media_type=reply.content_type)
        if isinstance(reply, ErrorReply):
            return JSONResponse(reply.body, status_code=reply.status, headers=reply.headers)
        response_id = f"resp-{next(self._ids)}"
        if isinstance(reply, JsonToStreamReply):
            whole = self._whole(recorded, reply.reply, response_id)
            return JSONResponse([whole] if reply.as_array else whole)
        if recorded.method == "streamGenerateContent":
            if recorded.query.get("alt") != "sse":
                return _invalid("This scripted server streams only with alt=sse.")
            return StreamingResponse(self._chunks(recorded, reply, response_id), media_type="text/event-stream")
        return JSONResponse(self._whole(recorded, reply, response_id))

    def _prompt_tokens(self, body: dict[str, Any]) -> int:
        parts = [part for content in body.get("contents", []) for part in content.get("parts", [])]
        parts += (body.get("systemInstruction") or {}).get("parts", [])
        return sum(_words(part.get("text")) + 2 for part in parts)

    def _usage(self, body: dict[str, Any], output: int, thoughts: int = 0) -> dict[str, Any]:
        prompt = self._prompt_tokens(body)
        usage: dict[str, Any] = {
            "promptTokenCount": prompt,
            "candidatesTokenCount": output,
            "totalTokenCount": prompt + output + thoughts,
            "promptTokensDetails": [{"modality": "TEXT", "tokenCount": prompt}],
        }
        if thoughts:
            usage["thoughtsTokenCount"] = thoughts
        return usage

    def _envelope(self, recorded: Recorded, response_id: str, **fields: Any) -> dict[str, Any]:
        return {**fields, "modelVersion": recorded.model, "responseId": response_id}

    def _call_parts(self, reply: CallsReply, response_id: str) -> list[dict[str, Any]]:
        parts = []
        for position, (name, args) in enumerate(reply.calls):
            call: dict[str, Any] = {"name": name, "args": args}
            if reply.with_ids:
                call["id"] = f"fc-{response_id}-{position}"
            part: dict[str, Any] = {"functionCall": call}
            if position == 0:
                signature = f"sig-{response_id}"
                self.issued_signatures.append(signature)
                part["thoughtSignature"] = signature
            parts.append(part)
        return parts

    def _whole(self, recorded: Recorded, reply: Reply, response_id: str) -> dict[str, Any]:
        if isinstance(reply, BlockedReply):
            return self._envelope(
                recorded,
                response_id,
                promptFeedback={"blockReason": reply.reason},
                usageMetadata=self._usage(recorded.body, 0),
            )
        parts: list[dict[str, Any]] = []
        thoughts = 0
        if isinstance(reply, TextReply):
            if reply.thought:
                thoughts = _words(reply.thought)  # thinking is billed whether its summary is asked for or not
                if _asks_for_thoughts(recorded.body):
                    parts.append({"text": reply.thought, "thought": True})
            answer: dict[str, Any] = {"text": reply.content}
            if reply.signature:
                answer["thoughtSignature"] = reply.signature
            parts.append(answer)
            output = _words(reply.content)
        else:
            assert isinstance(reply, CallsReply)
            if reply.text:
                parts.append({"text": reply.text})
            parts.extend(self._call_parts(reply, response_id))
            output = sum(len(json.dumps(args)) // 4 + 1 for _, args in reply.calls)
        candidate = {"content": {"parts": parts, "role": "model"}, "finishReason": "STOP", "index": 0}
        return self._envelope(
            recorded, response_id, candidates=[candidate], usageMetadata=self._usage(recorded.body, output, thoughts)
        )

    async def _chunks(self, recorded: Recorded, reply: Reply, response_id: str) -> AsyncIterator[bytes]:
        body = recorded.body
        if isinstance(reply, BlockedReply):
            yield _sse(
                self._envelope(
                    recorded,
                    response_id,
                    promptFeedback={"blockReason": reply.reason},
                    usageMetadata=self._usage(body, 0),
                )
            )
            return

        # Thinking is over before the answer starts: every chunk's usage counts all of it, summary or not.
        thoughts = _words(reply.thought) if isinstance(reply, TextReply) and reply.thought else 0

        def chunk(parts: list[dict[str, Any]], output: int, finish: str | None = None) -> bytes:
            candidate: dict[str, Any] = {"content": {"parts": parts, "role": "model"}, "index": 0}
            if finish:
                candidate["finishReason"] = finish
            usage = self._usage(body, output, thoughts)
            return _sse(self._envelope(recorded, response_id, candidates=[candidate], usageMetadata=usage))

        produced = 0
        if isinstance(reply, TextReply):
            if reply.thought and _asks_for_thoughts(body):
                for piece in _pieces(reply.thought):
                    yield chunk([{"text": piece, "thought": True}], produced)
            for piece in _pieces(reply.content):
                produced += 1
                yield chunk([{"text": piece}], produced)
            last: dict[str, Any] = {"text": ""}
            if reply.signature:
                last["thoughtSignature"] = reply.signature
            yield chunk([last], produced, "STOP")
            return
        assert isinstance(reply, CallsReply)
        if reply.text:
            for piece in _pieces(reply.text):
                produced += 1
                yield chunk([{"text": piece}], produced)
        parts = self._call_parts(reply, response_id)
        for position, part in enumerate(parts):
            produced += len(json.dumps(part["functionCall"]["args"])) // 4 + 1
            yield chunk([part], produced, "STOP" if position == len(parts) - 1 else None)
