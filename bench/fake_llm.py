"""A stateless OpenAI-compatible LLM for benchmarks: model ``rounds-K`` asks for the ``echo``
tool until the conversation holds K tool results, then answers. Non-streamed responses only.

Run: ``python bench/fake_llm.py PORT``.
"""

from __future__ import annotations

import json
import sys

import uvicorn
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import Route


async def chat_completions(request: Request) -> Response:
    body = json.loads(await request.body())
    rounds = int(str(body["model"]).removeprefix("rounds-"))
    done = sum(1 for message in body["messages"] if message["role"] == "tool")
    if done < rounds:
        message = {
            "role": "assistant",
            "content": None,
            "tool_calls": [
                {
                    "id": f"call_{done}",
                    "type": "function",
                    "function": {"name": "echo", "arguments": json.dumps({"text": f"round {done}"})},
                }
            ],
        }
        finish = "tool_calls"
    else:
        message, finish = {"role": "assistant", "content": "All rounds done."}, "stop"
    payload = {
        "id": "chatcmpl-bench",
        "object": "chat.completion",
        "created": 0,
        "model": body["model"],
        "choices": [{"index": 0, "message": message, "finish_reason": finish}],
        "usage": {"prompt_tokens": 10, "completion_tokens": 5, "total_tokens": 15},
    }
    return Response(json.dumps(payload), media_type="application/json")


app = Starlette(routes=[Route("/v1/chat/completions", chat_completions, methods=["POST"])])

if __name__ == "__main__":
    uvicorn.run(app, host="127.0.0.1", port=int(sys.argv[1]), log_level="warning")
