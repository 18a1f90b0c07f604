"""The upstreams of an agent-service under test, all real but the LLM: a scripted OpenAI, completion-service in
front of it, and mcp-client-service (the gateway) in front of an echo MCP server over HTTP."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass
from typing import Any

from pydantic import SecretStr

from completion_service.app import create_app as create_completion_app
from completion_service.settings import CompletionSettings
from support.fake_openai import ScriptedOpenAI
from support.mcp_gateway import Gateway, echo_http_server, running_gateway
from support.servers import serve_app

__all__ = ["Upstreams", "running_upstreams"]


@dataclass
class Upstreams:
    llm: ScriptedOpenAI
    gateway: Gateway
    completion_url: str


@asynccontextmanager
async def running_upstreams(*, catalog: list[dict[str, Any]] | None = None) -> AsyncIterator[Upstreams]:
    """``catalog``: completion-service's model catalog (``COMPLETION_MODELS`` entries); an entry without a
    ``baseUrl`` of provider ``openai`` is answered by the scripted OpenAI."""
    llm = ScriptedOpenAI()
    async with (
        serve_app(llm.app) as llm_url,
        echo_http_server("tools") as tools_url,
        running_gateway({"tools": {"url": tools_url}}) as gateway,
    ):
        settings = CompletionSettings(
            openai_base_url=f"{llm_url}/v1",
            openai_api_key=SecretStr("test-key"),
            max_retries=0,
            models=json.dumps(catalog) if catalog else None,
        )
        async with serve_app(create_completion_app(settings)) as completion_url:
            await gateway.wait_until_ready("tools")
            yield Upstreams(llm, gateway, completion_url)
