"""A stateless OpenAI-compatible LLM for benchmarks, as a bare ASGI app (cheap, so never the bottleneck).

``POST /v1/chat/completions`` answers the Chat Completions wire format, JSON or, with
``"stream": true``, ``chat.completion.chunk`` events over SSE (text in one chunk per word, a tool
call's arguments split in two deltas, a usage chunk when ``stream_options.include_usage`` is set,
then ``data: [DONE]``). ``POST /v1/responses`` answers the same in OpenAI's Responses API: a
``response`` object, or its stream events (``event:`` and ``data:``, text one
``response.output_text.delta`` per word, arguments in two ``response.function_call_arguments.delta``,
``response.completed`` with the usage). The model name is the script:

- ``rounds-K``: while the conversation holds fewer than K tool results, call the first tool of the
  request with ``{"text": "round N"}``; then answer a short text. ``rounds-0`` always answers.
- ``...-delay-MS``: take MS milliseconds before answering (an LLM's latency).
- ``...-fresh``: the tool's ``text`` also carries the conversation's last user message, so that runs whose
  messages differ make calls that differ (a tool-result cache then misses, as it would for new questions).

``GET /hello`` answers ``{"hello": "world"}``. Run: ``python -m bench.fake_llm PORT``.
"""

from __future__ import annotations

import asyncio
import json
import re
import sys
from typing import Any

import uvicorn
from starlette.types import Receive, Scope, Send

__all__ = ["ANSWER", "app", "reply_for"]

ANSWER = "All rounds are done and every tool answered; here is the final answer of this benchmark run."
_MODEL = re.compile(r"rounds-(?P<rounds>\d+)(?:-delay-(?P<delay>\d+))?(?P<fresh>-fresh)?")
_JSON = [(b"content-type", b"application/json")]
_SSE = [(b"content-type", b"text/event-stream"), (b"cache-control", b"no-cache")]


def reply_for(body: dict[str, Any]) -> tuple[dict[str, Any], str, float]:
    """``(message, finish_reason, delay_seconds)`` that the script gives this request."""
    model = _MODEL.fullmatch(str(body.get("model", "")))
    rounds = int(model["rounds"]) if model else 0
    delay = int(model["delay"]) / 1000 if model and model["delay"] else 0.0
    done = sum(1 for message in body.get("messages", []) if message.get("role") == "tool")
    done += sum(1 for item in body.get("input", []) if item.get("type") == "function_call_output")
    tools = [tool.get("function", tool) for tool in body.get("tools") or []]  # Chat nests the function; Responses not
    if done < rounds and tools:
        text = f"round {done}"
        if model and model["fresh"]:
            text += f": {_last_user_text(body)}"
        call = {
            "id": f"call_{done}",
            "type": "function",
            "function": {"name": tools[0]["name"], "arguments": json.dumps({"text": text})},
        }
        return {"role": "assistant", "content": None, "tool_calls": [call]}, "tool_calls", delay
    return {"role": "assistant", "content": ANSWER}, "stop", delay


def _last_user_text(body: dict[str, Any]) -> str:
    """The text of the last user message (Chat Completions' ``messages`` or the Responses API's ``input``)."""
    for message in reversed([*body.get("messages", []), *body.get("input", [])]):
        if message.get("role") == "user":
            content = message.get("content")
            if isinstance(content, str):
                return content
            return " ".join(str(part.get("text", "")) for part in content or [] if isinstance(part, dict))
    return ""


def _usage() -> dict[str, int]:
    return {"prompt_tokens": 42, "completion_tokens": 17, "total_tokens": 59}


def _completion(model: str, message: dict[str, Any], finish: str) -> bytes:
    payload = {
        "id": "chatcmpl-bench",
        "object": "chat.completion",
        "created": 1_700_000_000,
        "model": model,
        "choices": [{"index": 0, "message": message, "finish_reason": finish, "logprobs": None}],
        "usage": _usage(),
    }
    return json.dumps(payload).encode()


def _chunks(model: str, message: dict[str, Any], finish: str, include_usage: bool) -> list[dict[str, Any]]:
    def chunk(delta: dict[str, Any], finish_reason: str | None = None) -> dict[str, Any]:
        return {
            "id": "chatcmpl-bench",
            "object": "chat.completion.chunk",
            "created": 1_700_000_000,
            "model": model,
            "choices": [{"index": 0, "delta": delta, "finish_reason": finish_reason}],
        }

    chunks = [chunk({"role": "assistant", "content": ""})]
    if message.get("tool_calls"):
        call = message["tool_calls"][0]
        arguments = call["function"]["arguments"]
        half = len(arguments) // 2
        chunks.append(
            chunk(
                {
                    "tool_calls": [
                        {
                            "index": 0,
                            "id": call["id"],
                            "type": "function",
                            "function": {"name": call["function"]["name"], "arguments": arguments[:half]},
                        }
                    ]
                }
            )
        )
        chunks.append(chunk({"tool_calls": [{"index": 0, "function": {"arguments": arguments[half:]}}]}))
    else:
        words = str(message["content"]).split(" ")
        chunks += [chunk({"content": word if i == 0 else " " + word}) for i, word in enumerate(words)]
    chunks.append(chunk({}, finish))
    if include_usage:
        chunks.append({**chunk({}), "choices": [], "usage": _usage()})
    return chunks


_RESPONSES_USAGE = {
    "input_tokens": 42,
    "input_tokens_details": {"cached_tokens": 0},
    "output_tokens": 17,
    "output_tokens_details": {"reasoning_tokens": 0},
    "total_tokens": 59,
}


def _response_output(message: dict[str, Any]) -> dict[str, Any]:
    """The output item of ``message`` (what ``reply_for`` gave) in the Responses API."""
    if message.get("tool_calls"):
        call = message["tool_calls"][0]
        return {
            "id": "fc_bench",
            "type": "function_call",
            "status": "completed",
            "call_id": call["id"],
            "name": call["function"]["name"],
            "arguments": call["function"]["arguments"],
        }
    content = [{"type": "output_text", "annotations": [], "text": message["content"]}]
    return {"id": "msg_bench", "type": "message", "status": "completed", "role": "assistant", "content": content}


def _response(model: str, output: list[dict[str, Any]], status: str) -> dict[str, Any]:
    return {
        "id": "resp_bench",
        "object": "response",
        "created_at": 1_700_000_000,
        "status": status,
        "error": None,
        "incomplete_details": None,
        "model": model,
        "output": output,
        "usage": _RESPONSES_USAGE if status == "completed" else None,
    }


def _response_events(model: str, item: dict[str, Any]) -> list[dict[str, Any]]:
    at = {"output_index": 0, "item_id": item["id"]}
    events: list[dict[str, Any]] = [
        {"type": "response.created", "response": _response(model, [], "in_progress")},
        {"type": "response.in_progress", "response": _response(model, [], "in_progress")},
    ]
    if item["type"] == "function_call":
        events.append({"type": "response.output_item.added", "output_index": 0, "item": {**item, "arguments": ""}})
        half = len(item["arguments"]) // 2
        for piece in (item["arguments"][:half], item["arguments"][half:]):
            events.append({"type": "response.function_call_arguments.delta", **at, "delta": piece})
        events.append({"type": "response.function_call_arguments.done", **at, "arguments": item["arguments"]})
    else:
        text = item["content"][0]["text"]
        events.append({"type": "response.output_item.added", "output_index": 0, "item": {**item, "content": []}})
        part = {"type": "output_text", "annotations": [], "text": ""}
        events.append({"type": "response.content_part.added", **at, "content_index": 0, "part": part})
        words = text.split(" ")
        for i, word in enumerate(words):
            delta = word if i == 0 else " " + word
            events.append({"type": "response.output_text.delta", **at, "content_index": 0, "delta": delta})
        events.append({"type": "response.output_text.done", **at, "content_index": 0, "text": text})
        events.append({"type": "response.content_part.done", **at, "content_index": 0, "part": item["content"][0]})
    events.append({"type": "response.output_item.done", "output_index": 0, "item": item})
    events.append({"type": "response.completed", "response": _response(model, [item], "completed")})
    return [{**event, "sequence_number": number} for number, event in enumerate(events)]


async def _read_body(receive: Receive) -> bytes:
    body = b""
    while True:
        message = await receive()
        body += bytes(message.get("body", b""))
        if not message.get("more_body"):
            return body


async def app(scope: Scope, receive: Receive, send: Send) -> None:
    if scope["type"] != "http":
        return
    if scope["path"] == "/hello":
        await send({"type": "http.response.start", "status": 200, "headers": _JSON})
        await send({"type": "http.response.body", "body": b'{"hello":"world"}'})
        return
    if scope["path"] not in ("/v1/chat/completions", "/v1/responses") or scope["method"] != "POST":
        await send({"type": "http.response.start", "status": 404, "headers": _JSON})
        await send({"type": "http.response.body", "body": b'{"error":{"message":"not found"}}'})
        return
    body = json.loads(await _read_body(receive))
    message, finish, delay = reply_for(body)
    if delay:
        await asyncio.sleep(delay)
    model = str(body.get("model"))
    if scope["path"] == "/v1/responses":
        await _answer_responses(send, model, message, stream=bool(body.get("stream")))
        return
    if not body.get("stream"):
        await send({"type": "http.response.start", "status": 200, "headers": _JSON})
        await send({"type": "http.response.body", "body": _completion(model, message, finish)})
        return
    include_usage = bool((body.get("stream_options") or {}).get("include_usage"))
    await send({"type": "http.response.start", "status": 200, "headers": _SSE})
    for chunk in _chunks(model, message, finish, include_usage):
        await send(
            {"type": "http.response.body", "body": b"data: " + json.dumps(chunk).encode() + b"\n\n", "more_body": True}
        )
    await send({"type": "http.response.body", "body": b"data: [DONE]\n\n"})


async def _answer_responses(send: Send, model: str, message: dict[str, Any], *, stream: bool) -> None:
    item = _response_output(message)
    if not stream:
        await send({"type": "http.response.start", "status": 200, "headers": _JSON})
        await send({"type": "http.response.body", "body": json.dumps(_response(model, [item], "completed")).encode()})
        return
    await send({"type": "http.response.start", "status": 200, "headers": _SSE})
    for event in _response_events(model, item):
        frame = f"event: {event['type']}\ndata: {json.dumps(event)}\n\n".encode()
        await send({"type": "http.response.body", "body": frame, "more_body": True})
    await send({"type": "http.response.body", "body": b""})


if __name__ == "__main__":
    uvicorn.run(app, host="127.0.0.1", port=int(sys.argv[1]), log_level="warning", access_log=False, lifespan="off")
