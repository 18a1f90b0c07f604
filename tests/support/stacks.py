"""The agent-service stack of the integration tests, assembled in one place: a scripted OpenAI, completion-service
in front of it, mcp-client-service (the gateway) in front of real MCP servers, and agent-service over both; each a
real app on a loopback port, in the test's event loop.

::

    async with running_stack(callers_file=callers, database_url=url) as stack:
        stack.llm.push(fake_openai.text("done"))
        response = await stack.http.post("/api/v1/agent/run", json=body)

``running_upstreams`` is the same stack less agent-service, for tests that start their own (``running_agent``
in-process, or processes); ``wait_for_run`` polls a stored run until a condition holds.
"""

from __future__ import annotations

import json
from collections.abc import AsyncIterator, Callable, Mapping
from contextlib import AsyncExitStack, asynccontextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import anyio
import httpx
from pydantic import SecretStr

from agent_service.app import create_app
from agent_service.settings import AgentSettings
from completion_service.app import create_app as create_completion_app
from completion_service.settings import CompletionSettings
from support.fake_openai import ScriptedOpenAI
from support.mcp_gateway import GATEWAY_SECRET, Gateway, echo_http_server, running_gateway
from support.servers import serve_app

__all__ = [
    "ECHO_TOOLS",
    "AgentStack",
    "Upstreams",
    "running_agent",
    "running_stack",
    "running_upstreams",
    "stack_of_callers",
    "status_in",
    "wait_for_run",
]

ECHO_TOOLS: Mapping[str, str] = {"tools": ""}
"""The default MCP servers: one echo server over HTTP named ``tools`` (echo, add, ...), with no tool prefix."""


@dataclass
class Upstreams:
    llm: ScriptedOpenAI
    """The LLM behind completion-service's ``openai`` provider."""
    gateway: Gateway
    completion_url: str


@dataclass
class AgentStack(Upstreams):
    agent_url: str
    http: httpx.AsyncClient
    """A client of agent-service (``base_url`` its URL, 30 s timeout)."""


@asynccontextmanager
async def running_upstreams(
    *,
    echo: Mapping[str, str] = ECHO_TOOLS,
    servers: Mapping[str, dict[str, Any]] | None = None,
    gateway_settings: Mapping[str, Any] | None = None,
    catalog: list[dict[str, Any]] | None = None,
    completion_settings: Mapping[str, Any] | None = None,
) -> AsyncIterator[Upstreams]:
    """A scripted OpenAI, completion-service in front of it and the gateway, every MCP server of it ready.

    ``echo``: echo MCP servers to run over HTTP, name to tool prefix; ``servers``: further ``mcpServers`` entries
    (stdio servers, servers the test runs), in their order after the echo servers, or options of an echo server's
    entry (``allowedTools``, ...) under its name; ``gateway_settings``: mcp-client-service settings overrides;
    ``catalog``: completion-service's model catalog (``COMPLETION_MODELS`` entries; one of provider ``openai``
    without a ``baseUrl`` is answered by the scripted OpenAI); ``completion_settings``: other completion-service
    settings (another scripted provider's URL, ...)."""
    llm = ScriptedOpenAI()
    async with AsyncExitStack() as running:
        llm_url = await running.enter_async_context(serve_app(llm.app))
        entries: dict[str, dict[str, Any]] = {}
        for name, prefix in echo.items():
            entries[name] = {"url": await running.enter_async_context(echo_http_server(name, tool_prefix=prefix))}
        for name, entry in (servers or {}).items():
            entries[name] = {**entries.get(name, {}), **entry}
        gateway = await running.enter_async_context(running_gateway(entries, **(gateway_settings or {})))
        overrides: dict[str, Any] = {"models": json.dumps(catalog)} if catalog else {}
        settings = CompletionSettings(
            openai_base_url=f"{llm_url}/v1",
            openai_api_key=SecretStr("test-key"),
            max_retries=0,
            **{**overrides, **(completion_settings or {})},
        )
        completion_url = await running.enter_async_context(serve_app(create_completion_app(settings)))
        await gateway.wait_until_ready(*entries)
        yield Upstreams(llm, gateway, completion_url)


@asynccontextmanager
async def running_agent(completion_url: str, gateway: Gateway, **overrides: Any) -> AsyncIterator[str]:
    """agent-service over ``completion_url`` and ``gateway``, asking for the tool list on every run; yields its URL.
    ``overrides``: other settings (``database_url``, ...)."""
    settings = AgentSettings(
        completion_url=completion_url,
        mcp_client_url=gateway.url,
        mcp_service_secret=SecretStr(GATEWAY_SECRET),
        catalog_cache_seconds=0,
        **overrides,
    )
    async with serve_app(create_app(settings)) as url:
        yield url


@asynccontextmanager
async def running_stack(
    *,
    echo: Mapping[str, str] = ECHO_TOOLS,
    servers: Mapping[str, dict[str, Any]] | None = None,
    gateway_settings: Mapping[str, Any] | None = None,
    catalog: list[dict[str, Any]] | None = None,
    completion_settings: Mapping[str, Any] | None = None,
    headers: Mapping[str, str] | None = None,
    **agent_settings: Any,
) -> AsyncIterator[AgentStack]:
    """``running_upstreams`` (same arguments) and agent-service over them, with ``agent_settings`` (settings
    overrides: ``database_url``, ``callers_file``, ...); ``headers``: sent by ``http`` on every request."""
    async with (
        running_upstreams(
            echo=echo,
            servers=servers,
            gateway_settings=gateway_settings,
            catalog=catalog,
            completion_settings=completion_settings,
        ) as upstreams,
        running_agent(upstreams.completion_url, upstreams.gateway, **agent_settings) as agent_url,
        httpx.AsyncClient(base_url=agent_url, timeout=30, headers=headers) as http,
    ):
        yield AgentStack(upstreams.llm, upstreams.gateway, upstreams.completion_url, agent_url, http)


@asynccontextmanager
async def stack_of_callers(folder: Path, callers_file: str, **settings: Any) -> AsyncIterator[AgentStack]:
    """``running_stack`` with the callers file ``callers_file`` (its text, written in ``folder``) and a SQLite run
    store there; ``settings``: ``running_stack``'s other arguments (``echo``, ...)."""
    callers = folder / "callers.toml"
    callers.write_text(callers_file)
    async with running_stack(database_url=f"sqlite:///{folder}/runs.db", callers_file=callers, **settings) as stack:
        yield stack


async def wait_for_run(
    http: httpx.AsyncClient, run_id: str, until: Callable[[dict[str, Any]], bool], *, within: float = 20
) -> dict[str, Any]:
    """Polls the stored run (``GET /api/v1/agent/runs/{run_id}`` of ``http``'s agent-service) until ``until(run)``
    holds, for at most ``within`` seconds; returns the run. Polling: a run changes in another task or process, which
    gives nothing to await."""
    with anyio.fail_after(within):
        while True:
            response = await http.get(f"/api/v1/agent/runs/{run_id}")
            assert response.status_code == 200, response.text
            run: dict[str, Any] = response.json()
            if until(run):
                return run
            await anyio.sleep(0.05)


def status_in(*statuses: str) -> Callable[[dict[str, Any]], bool]:
    """``wait_for_run``'s condition: the run's status is one of ``statuses``."""
    return lambda run: run["status"] in statuses
