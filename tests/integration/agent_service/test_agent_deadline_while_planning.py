"""A run whose own deadline runs out before it starts (found by the OpenAPI fuzzer: it answered 504).

Planning checks the model with completion-service and lists the tools, within the run's deadline.
When that deadline (``deadlineSeconds``, the caller's choice) is spent there, the peer did nothing
wrong: the run ends as any run that reaches its deadline, ``finishReason: "deadline"``.
"""

from __future__ import annotations

import json

import anyio
import httpx
import pytest
from pydantic import SecretStr

from agent_service.app import create_app as create_agent_app
from agent_service.settings import AgentSettings
from completion_service.app import create_app as create_completion_app
from completion_service.settings import DEFAULT_OPENAI_BASE_URL, CompletionSettings
from support.servers import serve_app

pytestmark = pytest.mark.anyio

_BODY = {"model": "demo", "messages": [{"role": "user", "content": "hi"}], "deadlineSeconds": 0.0001}


async def _run(stream: bool) -> httpx.Response:
    completion = create_completion_app(
        CompletionSettings(openai_api_key=None, openai_base_url=DEFAULT_OPENAI_BASE_URL, demo_enabled=True)
    )
    with anyio.fail_after(20):
        async with serve_app(completion) as completion_url:
            settings = AgentSettings(
                completion_url=completion_url,
                mcp_client_url="http://127.0.0.1:9",  # never reached: the deadline is spent first
                mcp_service_secret=SecretStr("secret"),
            )
            async with serve_app(create_agent_app(settings)) as agent_url, httpx.AsyncClient(timeout=10) as http:
                return await http.post(f"{agent_url}/api/v1/agent/run", json={**_BODY, "stream": stream})


async def test_a_deadline_spent_while_planning_ends_the_run_with_finish_reason_deadline() -> None:
    response = await _run(stream=False)

    assert response.status_code == 200, response.text
    assert response.json()["finishReason"] == "deadline"
    assert response.json()["iterations"] == 0


async def test_a_streamed_run_whose_deadline_is_spent_while_planning_ends_with_a_done_event() -> None:
    response = await _run(stream=True)

    assert response.status_code == 200, response.text
    events = [json.loads(line[6:]) for line in response.text.splitlines() if line.startswith("data: ")]
    assert [event["type"] for event in events] == ["run_started", "done"]
    assert events[-1]["finishReason"] == "deadline"
