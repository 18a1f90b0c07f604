"""A whole agent run with Bedrock as the LLM: agent-service, completion-service (SigV4, event stream) and
mcp-client-service over a real stdio MCP server, all on loopback; only Bedrock itself is scripted."""

from __future__ import annotations

import json

import anyio
import httpx
import pytest
from pydantic import SecretStr

from agent_service.app import create_app as create_agent_app
from agent_service.settings import AgentSettings
from completion_service.app import create_app as create_completion_app
from completion_service.settings import CompletionSettings
from support.fake_bedrock import ACCESS_KEY_ID, REGION, SECRET_ACCESS_KEY, BedrockReply, ScriptedBedrock
from support.mcp_gateway import GATEWAY_SECRET, echo_stdio_server, running_gateway
from support.servers import serve_app

pytestmark = pytest.mark.anyio

MODEL = "bedrock/anthropic.claude-3-5-haiku-20241022-v1:0"


async def test_a_streamed_agent_run_calls_a_tool_through_bedrock_then_answers() -> None:
    bedrock = ScriptedBedrock(
        [
            BedrockReply(tool_uses=(("tooluse_1", "echo", {"text": "ping through bedrock"}),)),
            BedrockReply(text="The tool said: ping through bedrock."),
        ]
    )
    completion_settings = CompletionSettings(
        bedrock_region=REGION,
        aws_access_key_id=SecretStr(ACCESS_KEY_ID),
        aws_secret_access_key=SecretStr(SECRET_ACCESS_KEY),
        demo_enabled=False,
    )
    async with (
        serve_app(bedrock.app) as bedrock_url,
        serve_app(
            create_completion_app(completion_settings.model_copy(update={"bedrock_endpoint_url": bedrock_url}))
        ) as completion_url,
        running_gateway({"local": echo_stdio_server("local")}) as gateway,
    ):
        await gateway.wait_until_ready("local")
        agent_settings = AgentSettings(
            completion_url=completion_url,
            mcp_client_url=gateway.url,
            mcp_service_secret=SecretStr(GATEWAY_SECRET),
        )
        async with serve_app(create_agent_app(agent_settings)) as agent_url, httpx.AsyncClient(timeout=30) as http:
            body = {
                "model": MODEL,
                "stream": True,
                "tools": ["echo"],
                "messages": [{"role": "user", "content": "Echo 'ping through bedrock'."}],
            }
            with anyio.fail_after(30):
                async with http.stream("POST", f"{agent_url}/api/v1/agent/run", json=body) as response:
                    assert response.status_code == 200
                    events = [
                        json.loads(line[6:]) async for line in response.aiter_lines() if line.startswith("data: ")
                    ]
    kinds = [event["type"] for event in events]
    assert kinds[0] == "run_started"
    assert kinds[-1] == "done"
    [result] = [event for event in events if event["type"] == "tool_result"]
    assert (result["name"], result["isError"], result["content"]) == ("echo", False, "ping through bedrock")
    assert "".join(e["delta"] for e in events if e["type"] == "text") == "The tool said: ping through bedrock."
    assert events[-1]["finishReason"] == "stop"
    # The second Converse request carried the tool result back, in Bedrock's own shape.
    answer_turn = bedrock.requests[1]["body"]["messages"][-1]
    assert answer_turn["content"][0]["toolResult"]["toolUseId"] == "tooluse_1"
    assert answer_turn["content"][0]["toolResult"]["content"] == [{"text": "ping through bedrock"}]
