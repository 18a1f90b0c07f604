"""A scripted OpenAI Responses API server: the published wire format, answers from a script.

Serve ``ScriptedResponses(...).app`` with ``support.servers.serve_app`` and point a client at
``<url>/v1``. Each ``POST /v1/responses`` takes the next reply of the script (a reply, or a
function of the request body that returns one) and answers it as OpenAI does: a ``response``
object, or with ``"stream": true`` server-sent events (``event:`` line and ``type`` field,
``sequence_number`` counting from 0): ``response.created``, ``response.in_progress``, then per
output item ``response.output_item.added``, its deltas (``response.reasoning_summary_text.delta``,
``response.output_text.delta`` one word each, ``response.function_call_arguments.delta`` a few
characters each) with their ``.done`` events, ``response.output_item.done``, and last
``response.completed`` carrying the whole response with its usage.

A reply's ``reasoning`` is the model's thinking: a reasoning item always comes first, with its
``encrypted_content`` when the request ``include``s ``reasoning.encrypted_content``, and with the
reasoning as its summary only when the request asked for one (``reasoning.summary``).

Like the real API with ``store: false``, it refuses (400, OpenAI's words) a conversation whose
``function_call`` comes back without the reasoning item that produced it, a reasoning item that
comes back without its encrypted content or with one it did not issue, and a
``function_call_output`` for a call the input does not have.
"""

from __future__ import annotations

import base64
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

from support.fake_openai import openai_error_body

__all__ = ["ErrorReply", "Reply", "ScriptedResponses", "TextReply", "ToolCallsReply", "error", "text", "tool_calls"]

CREATED = 1_700_000_000
ARGUMENT_FRAGMENT_CHARS = 7
REASONING_TOKENS_PER_WORD = 2


@dataclass(frozen=True)
class TextReply:
    content: str
    reasoning: tuple[str, ...] = ()
    incomplete: str | None = None


@dataclass(frozen=True)
class ToolCallsReply:
    calls: tuple[tuple[str, str, dict[str, Any]], ...]
    reasoning: tuple[str, ...] = ()


@dataclass(frozen=True)
class ErrorReply:
    status: int
    body: dict[str, Any] | None = None
    headers: dict[str, str] = field(default_factory=dict)


Reply = TextReply | ToolCallsReply | ErrorReply
ReplySource = Reply | Callable[[dict[str, Any]], Reply]


def text(content: str, *, reasoning: Sequence[str] = (), incomplete: str | None = None) -> Reply:
    """The assistant thinks ``reasoning`` (one summary part each) and answers ``content``; ``incomplete``
    (``max_output_tokens``, ``content_filter``) ends it with ``status: incomplete`` for that reason."""
    return TextReply(content, tuple(reasoning), incomplete)


def tool_calls(*calls: tuple[str, str, dict[str, Any]], reasoning: Sequence[str] = ()) -> Reply:
    """The assistant thinks ``reasoning`` and calls each ``(call_id, name, arguments)`` in one turn."""
    return ToolCallsReply(tuple(calls), tuple(reasoning))


def error(status: int, body: dict[str, Any] | None = None, headers: dict[str, str] | None = None) -> Reply:
    """An HTTP error; the body defaults to OpenAI's ``{"error": {message, type, param, code}}``."""
    return ErrorReply(status, body, dict(headers or {}))


def _words(value: str) -> int:
    return len(value.split())


def _pieces(content: str) -> list[str]:
    pieces: list[str] = re.findall(r"\s*\S+|\s+$", content)
    return pieces or [content]


def _invalid(message: str, param: str | None = "input") -> JSONResponse:
    body = {"error": {"message": message, "type": "invalid_request_error", "param": param, "code": None}}
    return JSONResponse(body, status_code=400)


class ScriptedResponses:
    """``POST /v1/responses`` answered from a script; ``requests`` holds the bodies received."""

    def __init__(self, replies: Sequence[ReplySource] = (), *, api_key: str | None = "test-key") -> None:
        self.api_key = api_key
        self.requests: list[dict[str, Any]] = []
        self._script: deque[ReplySource] = deque(replies)
        self._ids = itertools.count(1)
        self._issued: dict[str, str] = {}
        """reasoning item id -> the encrypted content issued with it."""
        self._produced_by: dict[str, str] = {}
        """function call_id -> the id of the reasoning item that came before it."""
        self.app = Starlette(routes=[Route("/v1/responses", self._responses, methods=["POST"])])

    def push(self, *replies: ReplySource) -> None:
        self._script.extend(replies)

    async def _responses(self, request: Request) -> Response:
        try:
            body = json.loads(await request.body())
        except ValueError:
            return JSONResponse(openai_error_body(400, "We could not parse the JSON body of your request."), 400)
        if not isinstance(body, dict):
            return JSONResponse(openai_error_body(400, "The body must be a JSON object."), 400)
        self.requests.append(body)
        if self.api_key is not None and request.headers.get("authorization") != f"Bearer {self.api_key}":
            given = request.headers.get("authorization", "").removeprefix("Bearer ")
            message = f"Incorrect API key provided: {given}. You can find your API key at https://platform.openai.com."
            return JSONResponse(openai_error_body(401, message), 401)
        if (refusal := self._refusal(body)) is not None:
            return refusal
        if not self._script:
            return JSONResponse(openai_error_body(500, "The scripted server ran out of replies."), 500)
        source = self._script.popleft()
        reply = source(body) if callable(source) else source
        if isinstance(reply, ErrorReply):
            payload = reply.body if reply.body is not None else openai_error_body(reply.status)
            return JSONResponse(payload, status_code=reply.status, headers=reply.headers)
        response_id = f"resp_scripted{next(self._ids)}"
        output = self._output(body, reply)
        if body.get("stream"):
            return StreamingResponse(self._events(response_id, body, reply, output), media_type="text/event-stream")
        return JSONResponse(self._response(response_id, body, reply, output, status=self._status(reply)))

    # --- what the real API refuses ----------------------------------------------------------------

    def _refusal(self, body: dict[str, Any]) -> Response | None:
        items = body.get("input")
        if isinstance(items, str):
            return None
        if not isinstance(items, list):
            return _invalid("Invalid type for 'input': expected a string or an array of input items.")
        seen_reasoning: set[str] = set()
        calls: set[str] = set()
        for position, item in enumerate(items):
            kind = item.get("type", "message")
            if kind == "reasoning":
                item_id = item.get("id", "")
                if body.get("store") is False and item.get("encrypted_content") is None:
                    return _invalid(
                        f"Item with id '{item_id}' not found. Items are not persisted when `store` is set to false. "
                        "Try again with `store` set to true, or remove this item from your input."
                    )
                if self._issued.get(item_id) != item.get("encrypted_content"):
                    return _invalid("The encrypted content could not be verified.", f"input[{position}]")
                seen_reasoning.add(item_id)
            elif kind == "function_call":
                needed = self._produced_by.get(item.get("call_id", ""))
                if needed is not None and needed not in seen_reasoning:
                    return _invalid(
                        f"Item 'fc_{item.get('call_id')}' of type 'function_call' was provided without its "
                        f"required 'reasoning' item: '{needed}'."
                    )
                calls.add(item.get("call_id", ""))
            elif kind == "function_call_output" and item.get("call_id") not in calls:
                return _invalid(f"No tool call found for function call output with call_id {item.get('call_id')}.")
        return None

    # --- answers ----------------------------------------------------------------------------------

    def _output(self, body: dict[str, Any], reply: TextReply | ToolCallsReply) -> list[dict[str, Any]]:
        """The output items, done; a reasoning item first when the reply thinks."""
        serial = next(self._ids)
        output: list[dict[str, Any]] = []
        if reply.reasoning:
            item_id = f"rs_scripted{serial}"
            sealed = base64.b64encode(f"{item_id}:{'|'.join(reply.reasoning)}".encode()).decode()
            self._issued[item_id] = sealed
            wants_summary = (body.get("reasoning") or {}).get("summary") is not None
            item: dict[str, Any] = {
                "id": item_id,
                "type": "reasoning",
                "summary": [{"type": "summary_text", "text": part} for part in reply.reasoning]
                if wants_summary
                else [],
            }
            if "reasoning.encrypted_content" in (body.get("include") or []):
                item["encrypted_content"] = sealed
            output.append(item)
        if isinstance(reply, TextReply):
            part = {"type": "output_text", "annotations": [], "logprobs": [], "text": reply.content}
            output.append(
                {
                    "id": f"msg_scripted{serial}",
                    "type": "message",
                    "status": "incomplete" if reply.incomplete else "completed",
                    "role": "assistant",
                    "content": [part],
                }
            )
        else:
            for call_id, name, arguments in reply.calls:
                if reply.reasoning:
                    self._produced_by[call_id] = output[0]["id"]
                output.append(
                    {
                        "id": f"fc_{call_id}",
                        "type": "function_call",
                        "status": "completed",
                        "arguments": json.dumps(arguments),
                        "call_id": call_id,
                        "name": name,
                    }
                )
        return output

    @staticmethod
    def _status(reply: TextReply | ToolCallsReply) -> str:
        return "incomplete" if isinstance(reply, TextReply) and reply.incomplete else "completed"

    @staticmethod
    def _usage(body: dict[str, Any], reply: TextReply | ToolCallsReply) -> dict[str, Any]:
        given = sum(_words(item.get("content") or "") + 4 for item in body.get("input") or [] if isinstance(item, dict))
        given += _words(body.get("instructions") or "")
        reasoning = sum(_words(part) for part in reply.reasoning) * REASONING_TOKENS_PER_WORD
        if isinstance(reply, TextReply):
            visible = _words(reply.content)
        else:
            visible = sum(len(json.dumps(arguments)) // 4 + 1 for _, _, arguments in reply.calls)
        return {
            "input_tokens": given,
            "input_tokens_details": {"cached_tokens": 0},
            "output_tokens": visible + reasoning,
            "output_tokens_details": {"reasoning_tokens": reasoning},
            "total_tokens": given + visible + reasoning,
        }

    def _response(
        self,
        response_id: str,
        body: dict[str, Any],
        reply: TextReply | ToolCallsReply,
        output: list[dict[str, Any]],
        *,
        status: str,
    ) -> dict[str, Any]:
        finished = status in ("completed", "incomplete")
        reason = reply.incomplete if isinstance(reply, TextReply) else None
        return {
            "id": response_id,
            "object": "response",
            "created_at": CREATED,
            "status": status,
            "background": False,
            "error": None,
            "incomplete_details": {"reason": reason} if status == "incomplete" else None,
            "instructions": body.get("instructions"),
            "max_output_tokens": body.get("max_output_tokens"),
            "model": body.get("model"),
            "output": output if finished else [],
            "parallel_tool_calls": True,
            "previous_response_id": None,
            "reasoning": {"effort": (body.get("reasoning") or {}).get("effort"), "summary": None},
            "store": body.get("store", True),
            "temperature": body.get("temperature", 1.0),
            "text": {"format": {"type": "text"}, "verbosity": (body.get("text") or {}).get("verbosity", "medium")},
            "tool_choice": body.get("tool_choice", "auto"),
            "tools": body.get("tools", []),
            "top_p": 1.0,
            "truncation": "disabled",
            "usage": self._usage(body, reply) if finished else None,
            "user": None,
            "metadata": {},
        }

    async def _events(
        self, response_id: str, body: dict[str, Any], reply: TextReply | ToolCallsReply, output: list[dict[str, Any]]
    ) -> AsyncIterator[bytes]:
        sequence = itertools.count(0)

        def event(kind: str, **fields: Any) -> bytes:
            payload = {"type": kind, "sequence_number": next(sequence), **fields}
            return f"event: {kind}\ndata: {json.dumps(payload)}\n\n".encode()

        yield event("response.created", response=self._response(response_id, body, reply, output, status="in_progress"))
        yield event(
            "response.in_progress", response=self._response(response_id, body, reply, output, status="in_progress")
        )
        for index, item in enumerate(output):
            at = {"output_index": index, "item_id": item["id"]}
            if item["type"] == "reasoning":
                # The added item's encrypted content may be incomplete, the API says: only the done one counts.
                yield event(
                    "response.output_item.added",
                    output_index=index,
                    item={**item, "summary": [], "encrypted_content": None},
                )
                for summary_index, part in enumerate(item["summary"]):
                    empty = {"type": "summary_text", "text": ""}
                    yield event("response.reasoning_summary_part.added", **at, summary_index=summary_index, part=empty)
                    for piece in _pieces(part["text"]):
                        yield event(
                            "response.reasoning_summary_text.delta", **at, summary_index=summary_index, delta=piece
                        )
                    yield event(
                        "response.reasoning_summary_text.done", **at, summary_index=summary_index, text=part["text"]
                    )
                    yield event("response.reasoning_summary_part.done", **at, summary_index=summary_index, part=part)
            elif item["type"] == "message":
                yield event(
                    "response.output_item.added",
                    output_index=index,
                    item={**item, "status": "in_progress", "content": []},
                )
                part = item["content"][0]
                yield event("response.content_part.added", **at, content_index=0, part={**part, "text": ""})
                for piece in _pieces(part["text"]):
                    yield event("response.output_text.delta", **at, content_index=0, delta=piece, logprobs=[])
                yield event("response.output_text.done", **at, content_index=0, text=part["text"], logprobs=[])
                yield event("response.content_part.done", **at, content_index=0, part=part)
            else:
                yield event(
                    "response.output_item.added",
                    output_index=index,
                    item={**item, "status": "in_progress", "arguments": ""},
                )
                arguments = item["arguments"]
                for start in range(0, len(arguments), ARGUMENT_FRAGMENT_CHARS):
                    fragment = arguments[start : start + ARGUMENT_FRAGMENT_CHARS]
                    yield event("response.function_call_arguments.delta", **at, delta=fragment)
                yield event("response.function_call_arguments.done", **at, arguments=arguments)
            yield event("response.output_item.done", output_index=index, item=item)
        status = self._status(reply)
        kind = "response.completed" if status == "completed" else "response.incomplete"
        yield event(kind, response=self._response(response_id, body, reply, output, status=status))
