"""The OpenAI front under a tenant's runtime, with the gateway not running (nothing listens at agent-service's
``AGENT_MCP_CLIENT_URL``): plain chat keeps working for a tenant whose admin turned the agent off (the gateway is
never asked) and for a tenant with no tool to offer (the failed listing is logged, the request answered as one plain
completion); the tenant's stream mode applies to its requests.

The LLM (scripted) and completion-service are real processes of the stack (``support.stacks.running_upstreams``).
"""

from __future__ import annotations

import uuid
from collections.abc import AsyncIterator
from dataclasses import dataclass
from pathlib import Path

import httpx
import pytest
from pydantic import SecretStr
from structlog.testing import capture_logs

from agent_service.app import create_app
from agent_service.settings import AgentSettings
from support import fake_openai
from support.caller_keys import as_caller, key_entry
from support.mcp_gateway import GATEWAY_SECRET
from support.servers import free_port, serve_app
from support.stacks import Upstreams, running_upstreams

pytestmark = pytest.mark.anyio

QUIET_ADMIN = "quiet-admin-" + uuid.uuid4().hex
BARE = "bare-" + uuid.uuid4().hex

CALLERS_FILE = f"""
[tenants.quiet]
[tenants.bare]
tools = []

{key_entry("quiet-admin", "quiet", QUIET_ADMIN)}role = "admin"

{key_entry("bare-app", "bare", BARE)}
"""

CHAT = {"model": "gpt-4o", "messages": [{"role": "user", "content": "Hello?"}]}


@dataclass
class Front:
    upstreams: Upstreams
    http: httpx.AsyncClient


@pytest.fixture
async def front(tmp_path: Path) -> AsyncIterator[Front]:
    callers = tmp_path / "callers.toml"
    callers.write_text(CALLERS_FILE)
    async with running_upstreams() as upstreams:
        settings = AgentSettings(
            completion_url=upstreams.completion_url,
            mcp_client_url=f"http://127.0.0.1:{free_port()}",  # the gateway is not running
            mcp_service_secret=SecretStr(GATEWAY_SECRET),
            callers_file=callers,
            database_url=f"sqlite:///{tmp_path / 'runs.db'}",
        )
        async with (
            serve_app(create_app(settings)) as agent_url,
            httpx.AsyncClient(base_url=agent_url, timeout=30) as http,
        ):
            yield Front(upstreams, http)


async def test_a_tenant_with_the_agent_off_gets_plain_completions_without_the_gateway(front: Front) -> None:
    off = await front.http.patch("/api/v1/admin/runtime", json={"agentEnabled": False}, headers=as_caller(QUIET_ADMIN))
    assert off.status_code == 200, off.text
    front.upstreams.llm.push(fake_openai.text("Plain hello."))
    answer = await front.http.post("/v1/chat/completions", json=CHAT, headers=as_caller(QUIET_ADMIN))
    assert answer.status_code == 200, answer.text
    assert answer.json()["choices"][0]["message"]["content"] == "Plain hello."
    assert "x-agent-run-id" not in answer.headers  # one completion, not a run
    assert "tools" not in front.upstreams.llm.requests[0]
    # Its tool list says the same (and asks nobody: the gateway is not running).
    listed = await front.http.get("/api/v1/agent/tools", headers=as_caller(QUIET_ADMIN))
    assert (listed.status_code, listed.json()) == (200, {"tools": []})


async def test_a_tenant_without_tools_gets_plain_completions_while_the_gateway_is_down(front: Front) -> None:
    front.upstreams.llm.push(fake_openai.text("Still here."))
    with capture_logs() as logs:
        answer = await front.http.post("/v1/chat/completions", json=CHAT, headers=as_caller(BARE))
    assert answer.status_code == 200, answer.text
    assert answer.json()["choices"][0]["message"]["content"] == "Still here."
    assert "x-agent-run-id" not in answer.headers
    unlisted = [log for log in logs if log["event"] == "tools_unlisted_plain_completion"]
    assert [log["code"] for log in unlisted] == ["upstream_unavailable"]


async def test_the_tenants_stream_mode_is_its_requests_default(front: Front) -> None:
    await front.http.patch("/api/v1/admin/runtime", json={"agentEnabled": False}, headers=as_caller(QUIET_ADMIN))
    mode = await front.http.patch(
        "/api/v1/admin/runtime", json={"streamMode": "disabled"}, headers=as_caller(QUIET_ADMIN)
    )
    assert mode.json()["streamMode"] == "disabled"
    front.upstreams.llm.push(fake_openai.text("One object."))
    answer = await front.http.post(
        "/v1/chat/completions", json={**CHAT, "stream": True}, headers=as_caller(QUIET_ADMIN)
    )
    assert answer.status_code == 200, answer.text
    assert answer.headers["content-type"].startswith("application/json")  # not an event stream
    assert answer.json()["choices"][0]["message"]["content"] == "One object."
