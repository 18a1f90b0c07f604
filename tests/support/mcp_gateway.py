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
import os
import sys
import tempfile
from collections.abc import AsyncIterator, Iterator
from contextlib import asynccontextmanager, contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import anyio
import httpx
import httpx2
from mcp import Client
from mcp.client.client import ConnectMode
from mcp.client.streamable_http import streamable_http_client
from opentelemetry.sdk.trace import TracerProvider
from pydantic import SecretStr

from mcp_client_service.app import create_app
from mcp_client_service.registry.server_registry import ServerRegistry
from mcp_client_service.settings import MCPClientSettings
from mcp_client_service.tenants.servers import TenantServers
from support.echo_mcp_server import build_echo_server
from support.servers import serve_app

__all__ = [
    "ECHO_SCRIPT",
    "FAST_RETRIES",
    "GATEWAY_SECRET",
    "RAW_SCRIPT",
    "WAIT_SECONDS",
    "Gateway",
    "child_pids",
    "echo_http_server",
    "echo_stdio_server",
    "face_client",
    "leaves_no_child_processes",
    "raw_stdio_server",
    "running_gateway",
]

ECHO_SCRIPT = Path(__file__).with_name("echo_mcp_server.py")
RAW_SCRIPT = Path(__file__).with_name("raw_mcp_server.py")

GATEWAY_SECRET = "test-gateway-secret"

WAIT_SECONDS = 20.0
"""Bound of every wait for a server state: a stdio child takes a second or two to start."""

FAST_RETRIES: dict[str, Any] = {"restart_backoff_initial_seconds": 0.05, "restart_backoff_max_seconds": 0.2}
"""Settings overrides for tests of reconnection: retries within a fraction of a second."""


def echo_stdio_server(name: str, *, tool_prefix: str = "", env: dict[str, str] | None = None) -> dict[str, Any]:
    """A ``mcpServers`` entry that spawns the echo server over stdio with this interpreter."""
    args = [str(ECHO_SCRIPT), "--transport", "stdio", "--name", name]
    if tool_prefix:
        args += ["--tool-prefix", tool_prefix]
    return {"command": sys.executable, "args": args, "env": env or {}}


def raw_stdio_server(mode: str, *extra_args: str, **options: Any) -> dict[str, Any]:
    """A ``mcpServers`` entry for ``raw_mcp_server.py --mode MODE`` (a hand-written, misbehaving server)."""
    return {"command": sys.executable, "args": [str(RAW_SCRIPT), "--mode", mode, *extra_args], **options}


def child_pids() -> set[int]:
    """The processes whose parent is this one (Linux ``/proc``), zombies included."""
    me = os.getpid()
    children = set()
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            stat = (entry / "stat").read_text()
        except OSError:
            continue  # it ended while we looked
        # "pid (comm) state ppid ...": comm may hold spaces and parentheses, so split after the last ")".
        fields = stat.rpartition(")")[2].split()
        if len(fields) > 1 and int(fields[1]) == me:
            children.add(int(entry.name))
    return children


@contextmanager
def leaves_no_child_processes() -> Iterator[None]:
    """Assert that the block leaves no child process behind (stdio servers spawned and not reaped)."""
    before = child_pids()
    yield
    left = child_pids() - before
    assert not left, f"child processes left behind: {sorted(left)}"


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
    config_path: Path
    """The servers file the gateway reads (rewrite it, then POST /mcp/v1/servers/reload)."""
    tenants: TenantServers
    """Every tenant's own servers (wait on their changes with ``tenants.wait_until``)."""

    async def wait_until_ready(self, *names: str) -> None:
        """Wait (bounded by ``WAIT_SECONDS``) until each named server is serving (ready or degraded)."""
        with anyio.fail_after(WAIT_SECONDS):
            await self.registry.wait_until(
                lambda registry: all(
                    name in registry.connections and registry.connections[name].serving for name in names
                )
            )

    async def wait_until_failed(self, *names: str) -> None:
        with anyio.fail_after(WAIT_SECONDS):
            await self.registry.wait_until(
                lambda registry: all(registry.connections[name].state == "failed" for name in names)
            )

    def write_servers(self, servers: dict[str, Any]) -> None:
        """Replace the servers file (JSON, ``mcpServers``) for the next reload."""
        self.config_path.write_text(json.dumps({"mcpServers": servers}))


@asynccontextmanager
async def running_gateway(
    servers: dict[str, Any] | str,
    *,
    settings: MCPClientSettings | None = None,
    config_name: str = "mcp_servers.json",
    environ: dict[str, str] | None = None,
    files: dict[str, str] | None = None,
    tracer_provider: TracerProvider | None = None,
    **overrides: Any,
) -> AsyncIterator[Gateway]:
    """mcp-client-service over ``servers`` (an ``mcpServers`` object, or a file's text), on a loopback port.

    The config is written to a file named ``config_name`` and read the way the service reads it.
    ``settings`` (for instance read from the environment) win over ``overrides`` of the defaults;
    loopback MCP servers are allowed unless an override says otherwise. ``environ`` replaces the
    gateway's environment (``os.environ``) for its stdio children and ``${env:...}`` references;
    ``files`` (name: text) are written beside the config file, for ``${file:...}`` references.
    """
    with tempfile.TemporaryDirectory() as folder:
        for name, text in (files or {}).items():
            (Path(folder) / name).write_text(text)
        config = Path(folder) / config_name
        config.write_text(servers if isinstance(servers, str) else json.dumps({"mcpServers": servers}))
        if settings is None:
            settings = MCPClientSettings(
                service_secret=SecretStr(GATEWAY_SECRET), **{"ssrf_allow_loopback": True, **overrides}
            )
        settings = settings.model_copy(update={"servers_file": config})
        app = create_app(settings, environ=environ, tracer_provider=tracer_provider)
        registry: ServerRegistry = app.state.registry
        tenants: TenantServers = app.state.tenants
        async with serve_app(app) as url:
            headers = {settings.secret_header: settings.service_secret.get_secret_value()}
            async with httpx.AsyncClient(base_url=url, headers=headers, timeout=30) as http:
                yield Gateway(url=url, http=http, registry=registry, config_path=config, tenants=tenants)


@asynccontextmanager
async def face_client(gateway: Gateway, *, mode: ConnectMode = "auto") -> AsyncIterator[Client]:
    """The official SDK client on the gateway's own MCP endpoint ``/mcp``, with the shared secret as a bearer token.

    ``mode="legacy"``: the 2025-era handshake (``initialize``) instead of the 2026 protocol.
    """
    async with (
        httpx2.AsyncClient(headers={"Authorization": f"Bearer {GATEWAY_SECRET}"}) as http,
        Client(streamable_http_client(gateway.url + "/mcp", http_client=http), mode=mode) as client,
    ):
        yield client
