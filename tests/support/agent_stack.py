"""agent-service on a loopback port, in front of a completion-service and a test gateway.

::

    async with running_gateway(servers) as gateway, running_agent(completion_url, gateway) as agent_url:
        response = await http.post(f"{agent_url}/api/v1/agent/run", json=body)
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

from pydantic import SecretStr

from agent_service.app import create_app
from agent_service.settings import AgentSettings
from support.mcp_gateway import GATEWAY_SECRET, Gateway
from support.servers import serve_app

__all__ = ["running_agent"]


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
