"""A stateless OpenAI-compatible LLM for benchmarks, as a bare ASGI app (cheap, so never the bottleneck).

``POST /v1/chat/completions`` answers the Chat Completions wire format, JSON or, with
``"stream": true``, ``chat.completion.chunk`` events over SSE (text in one chunk per word, a tool
call's arguments split in two deltas, a usage chunk when ``stream_options.include_usage`` is set,
then ``data: [DONE]``). The model name is the script:

- ``rounds-K``: while the conversation holds fewer than K tool results, call the first tool of the
  request with ``{"text": "round N"}``; then answer a short text. ``rounds-0`` always answers.
- ``...-delay-MS``: take MS milliseconds before answering (an LLM's latency).

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
_MODEL = re.compile(r"rounds-(?P<rounds>\d+)(?:-delay-(?P<delay>\d+))?")
_JSON = [(b"content-type", b"application/json")]
_SSE = [(b"content-type", b"text/event-stream"), (b"cache-control", b"no-cache")]


def reply_for(body: dict[str, Any]) -> tuple[dict[str, Any], str, float]:
    """``(message, finish_reason, delay_seconds)`` that the script gives this request."""
    model = _MODEL.fullmatch(str(body.get("model", "")))
    rounds = int(model["rounds"]) if model else 0
    delay = int(model["delay"]) / 1000 if model and model["delay"] else 0.0
    done = sum(1 for message in body.get("messages", []) if message.get("role") == "tool")
    tools = body.get("tools") or []
    if done < rounds and tools:
        call = {
            "id": f"call_{done}",
            "type": "function",
            "function": {"name": tools[0]["function"]["name"], "arguments": json.dumps({"text": f"round {done}"})},
        }
        return {"role": "assistant", "content": None, "tool_calls": [call]}, "tool_calls", delay
    return {"role": "assistant", "content": ANSWER}, "stop", delay


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
    if scope["path"] != "/v1/chat/completions" or scope["method"] != "POST":
        await send({"type": "http.response.start", "status": 404, "headers": _JSON})
        await send({"type": "http.response.body", "body": b'{"error":{"message":"not found"}}'})
        return
    body = json.loads(await _read_body(receive))
    message, finish, delay = reply_for(body)
    if delay:
        await asyncio.sleep(delay)
    model = str(body.get("model"))
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


if __name__ == "__main__":
    uvicorn.run(app, host="127.0.0.1", port=int(sys.argv[1]), log_level="warning", access_log=False, lifespan="off")
