"""A whole agent run through Anthropic: agent-service, completion-service and mcp-client-service on loopback.

The tools are a real MCP server over streamable HTTP behind the real gateway; only the LLM is scripted,
by a server that speaks (and checks) Anthropic's Messages API, extended thinking included.
"""

from __future__ import annotations

from typing import Any

import anyio
import httpx
import pytest
from pydantic import SecretStr

from completion_service.app import create_app as create_completion_app
from completion_service.settings import CompletionSettings
from support.fake_anthropic import ScriptedAnthropic, signature_of, text, thinking, tool_calls
from support.mcp_gateway import echo_http_server, running_gateway
from support.run_streams import RunEvents, events_of, streamed_run
from support.servers import serve_app
from support.stacks import running_agent

pytestmark = pytest.mark.anyio

THOUGHT = "I should echo the phrase and add the numbers, both at once."


async def _run(agent_url: str, body: dict[str, Any]) -> RunEvents:
    async with httpx.AsyncClient(timeout=30) as http:
        return await streamed_run(http, f"{agent_url}/api/v1/agent/run", body)


async def test_a_streamed_run_thinks_calls_two_tools_then_answers_through_anthropic() -> None:
    llm = ScriptedAnthropic(
        [
            tool_calls(
                ("toolu_01Echo", "echo", {"text": "the loop stops"}),
                ("toolu_01Add", "add", {"a": 2, "b": 3}),
                reasoning=[thinking(THOUGHT)],
            ),
            text("The tools said: the loop stops, and 2 + 3 = 5."),
        ]
    )
    async with (
        serve_app(llm.app) as llm_url,
        echo_http_server("echo") as echo_url,
        running_gateway({"echo": {"url": echo_url}}) as gateway,
        serve_app(
            create_completion_app(
                CompletionSettings(
                    anthropic_base_url=llm_url,
                    anthropic_api_key=SecretStr("test-key"),
                    anthropic_thinking_budget_tokens=2048,
                    max_retries=0,
                )
            )
        ) as completion_url,
    ):
        await gateway.wait_until_ready("echo")
        async with running_agent(completion_url, gateway) as agent_url:
            body = {
                "model": "anthropic/claude-sonnet-4-5",
                "stream": True,
                "messages": [{"role": "user", "content": "Echo 'the loop stops' and add 2 and 3."}],
                "tools": ["echo", "add"],
            }
            with anyio.fail_after(60):
                events = await _run(agent_url, body)

    assert "".join(r["delta"] for r in events_of(events, "reasoning")) == THOUGHT
    assert [(c["name"], c["arguments"]) for c in events_of(events, "tool_call")] == [
        ("echo", {"text": "the loop stops"}),
        ("add", {"a": 2, "b": 3}),
    ]
    results = {r["toolCallId"]: r for r in events_of(events, "tool_result")}
    assert not results["toolu_01Echo"]["isError"]
    assert "the loop stops" in results["toolu_01Echo"]["content"]
    assert "5" in results["toolu_01Add"]["content"]
    assert "".join(t["delta"] for t in events_of(events, "text")) == "The tools said: the loop stops, and 2 + 3 = 5."
    done = events[-1]
    assert done[0] == "done"
    assert (done[1]["finishReason"], done[1]["iterations"]) == ("stop", 2)
    assert done[1]["usage"]["inputTokens"] > 0

    first, second = llm.requests
    assert first["thinking"] == {"type": "enabled", "budget_tokens": 2048}
    assert {tool["name"] for tool in first["tools"]} == {"echo", "add"}
    assert all(tool["input_schema"]["type"] == "object" for tool in first["tools"])
    # The second turn: the signed thinking block first and unchanged (the scripted server checked the
    # signature), then both calls; both results together in one user message.
    assistant, results_turn = second["messages"][1:]
    assert assistant["content"][0] == {"type": "thinking", "thinking": THOUGHT, "signature": signature_of(THOUGHT)}
    assert [block["id"] for block in assistant["content"][1:]] == ["toolu_01Echo", "toolu_01Add"]
    assert results_turn["role"] == "user"
    assert [(b["type"], b["tool_use_id"]) for b in results_turn["content"]] == [
        ("tool_result", "toolu_01Echo"),
        ("tool_result", "toolu_01Add"),
    ]
    assert second["thinking"] == {"type": "enabled", "budget_tokens": 2048}
