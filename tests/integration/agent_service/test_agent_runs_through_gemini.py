"""A whole agent run on a Gemini model: agent-service -> completion-service -> a scripted Gemini API,
with the tools of a real MCP server (over streamable HTTP) behind a real mcp-client-service."""

from __future__ import annotations

from typing import Any

import anyio
import httpx
import pytest
from pydantic import SecretStr

from completion_service.app import create_app as create_completion_app
from completion_service.settings import CompletionSettings
from support.fake_gemini import ScriptedGemini, function_calls, text
from support.mcp_gateway import echo_http_server, running_gateway
from support.run_streams import RunEvents, streamed_run
from support.servers import serve_app
from support.stacks import running_agent

pytestmark = pytest.mark.anyio


async def _stream_run(agent_url: str, body: dict[str, Any]) -> RunEvents:
    async with httpx.AsyncClient(timeout=30) as http:
        return await streamed_run(http, f"{agent_url}/api/v1/agent/run", body)


async def test_a_streamed_run_on_gemini_calls_two_tools_then_answers_with_the_signature_sent_back() -> None:
    gemini = ScriptedGemini(
        [
            function_calls(("add", {"a": 2, "b": 3}), ("echo", {"text": "loop"}), text="Let me work that out."),
            text("2 + 3 is 5, and the echo said loop.", thought="**Combining** both results."),
        ]
    )
    async with (
        serve_app(gemini.app) as gemini_url,
        echo_http_server("tools") as tools_url,
        running_gateway({"tools": {"url": tools_url}}) as gateway,
    ):
        await gateway.wait_until_ready("tools")
        completion_settings = CompletionSettings(
            gemini_api_key=SecretStr(gemini.api_key),
            gemini_base_url=gemini_url,
            gemini_include_thoughts=True,
            max_retries=0,
            demo_enabled=False,
        )
        async with (
            serve_app(create_completion_app(completion_settings)) as completion_url,
            running_agent(completion_url, gateway) as agent_url,
        ):
            body = {
                "model": "gemini/gemini-2.5-flash",
                "stream": True,
                "messages": [{"role": "user", "content": "What is 2 + 3, and echo 'loop'?"}],
                "tools": ["add", "echo"],
            }
            with anyio.fail_after(60):
                events = await _stream_run(agent_url, body)

    kinds = [name for name, _ in events]
    assert kinds[0] == "run_started"
    assert kinds[-1] == "done"
    calls = [data for name, data in events if name == "tool_call"]
    assert [(call["name"], call["arguments"]) for call in calls] == [
        ("add", {"a": 2, "b": 3}),
        ("echo", {"text": "loop"}),
    ]
    results = {data["toolCallId"]: data for name, data in events if name == "tool_result"}
    assert [results[call["id"]]["content"] for call in calls] == ["5", "loop"]
    assert not any(result["isError"] for result in results.values())
    reasoning = "".join(data["delta"] for name, data in events if name == "reasoning")
    assert reasoning == "**Combining** both results."
    answer = "".join(data["delta"] for name, data in events if name == "text")
    assert answer == "Let me work that out.2 + 3 is 5, and the echo said loop."
    done = events[-1][1]
    assert (done["finishReason"], done["iterations"]) == ("stop", 2)
    assert done["usage"]["inputTokens"] > 0

    first, second = gemini.requests
    assert (first.method, second.method) == ("streamGenerateContent", "streamGenerateContent")
    declared = {d["name"] for d in first.body["tools"][0]["functionDeclarations"]}
    assert declared == {"add", "echo"}
    # The second turn replays the model's calls, with the signature Gemini gave the first one, and
    # answers them in one user turn, in the order of the calls.
    model_turn, answers = second.body["contents"][1], second.body["contents"][2]
    assert model_turn["role"] == "model"
    assert model_turn["parts"][0] == {"text": "Let me work that out."}
    assert model_turn["parts"][1]["thoughtSignature"] == "sig-resp-1"
    assert [part["functionCall"]["name"] for part in model_turn["parts"][1:]] == ["add", "echo"]
    assert [part["functionResponse"]["name"] for part in answers["parts"]] == ["add", "echo"]
    assert [part["functionResponse"]["response"] for part in answers["parts"]] == [
        {"result": "5"},
        {"result": "loop"},
    ]
