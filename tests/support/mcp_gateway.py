"""A real mcp-client-service in the test's event loop, over real echo MCP servers.

::

    async with echo_http_server("remote", tool_prefix="remote_") as remote_url:
        servers = {"local": echo_stdio_server("local"), "remote": {"url": remote_url}}
        async with running_gateway(servers) as gateway:
            await gateway.wait_until_ready("local", "remote")
            response = await gateway.http.get("/mcp/v1/tools/list-tools")
"""

from __future__ import annotations

import json
import sys
import tempfile
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import anyio
import httpx
from pydantic import SecretStr

from mcp_client_service.app import create_app
from mcp_client_service.connections import Backoff
from mcp_client_service.registry import ServerRegistry
from mcp_client_service.settings import MCPClientSettings
from support.echo_mcp_server import build_echo_server
from support.servers import serve_app

__all__ = [
    "ECHO_SCRIPT",
    "GATEWAY_SECRET",
    "WAIT_SECONDS",
    "Gateway",
    "echo_http_server",
    "echo_stdio_server",
    "running_gateway",
]

ECHO_SCRIPT = Path(__file__).with_name("echo_mcp_server.py")

GATEWAY_SECRET = "test-gateway-secret"

WAIT_SECONDS = 20.0
"""Bound of every wait for a server state: a stdio child takes a second or two to start."""


def echo_stdio_server(name: str, *, tool_prefix: str = "", env: dict[str, str] | None = None) -> dict[str, Any]:
    """A ``mcpServers`` entry that spawns the echo server over stdio with this interpreter."""
    args = [str(ECHO_SCRIPT), "--transport", "stdio", "--name", name]
    if tool_prefix:
        args += ["--tool-prefix", tool_prefix]
    return {"command": sys.executable, "args": args, "env": env or {}}


@asynccontextmanager
async def echo_http_server(name: str, *, tool_prefix: str = "") -> AsyncIterator[str]:
    """The echo server over streamable HTTP on a loopback port; yields its MCP endpoint URL."""
    app = build_echo_server(name, tool_prefix=tool_prefix).streamable_http_app()
    async with serve_app(app) as base_url:
        yield base_url + "/mcp"


@dataclass
class Gateway:
    url: str
    http: httpx.AsyncClient
    """Sends the shared secret on every request."""
    registry: ServerRegistry

    async def wait_until_ready(self, *names: str) -> None:
        """Wait (bounded by ``WAIT_SECONDS``) until each named server is ready."""
        with anyio.fail_after(WAIT_SECONDS):
            await self.registry.wait_until(
                lambda registry: all(registry.connections[name].state == "ready" for name in names)
            )

    async def wait_until_failed(self, *names: str) -> None:
        with anyio.fail_after(WAIT_SECONDS):
            await self.registry.wait_until(
                lambda registry: all(registry.connections[name].state == "failed" for name in names)
            )


@asynccontextmanager
async def running_gateway(
    servers: dict[str, Any],
    *,
    settings: MCPClientSettings | None = None,
    backoff: Backoff | None = None,
    **overrides: Any,
) -> AsyncIterator[Gateway]:
    """mcp-client-service over ``servers`` (an ``mcpServers`` object), served on a loopback port.

    The config is written to a file and read the way the service reads it. ``settings`` (for
    instance read from the environment) win over ``overrides`` of the defaults.
    """
    with tempfile.TemporaryDirectory() as folder:
        config = Path(folder) / "mcp_servers.json"
        config.write_text(json.dumps({"mcpServers": servers}))
        if settings is None:
            settings = MCPClientSettings(service_secret=SecretStr(GATEWAY_SECRET), **overrides)
        settings = settings.model_copy(update={"servers_config": config})
        app = create_app(settings, backoff=backoff)
        registry: ServerRegistry = app.state.registry
        async with serve_app(app) as url:
            headers = {settings.secret_header: settings.service_secret.get_secret_value()}
            async with httpx.AsyncClient(base_url=url, headers=headers, timeout=30) as http:
                yield Gateway(url=url, http=http, registry=registry)
