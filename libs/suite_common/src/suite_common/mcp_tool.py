"""Running an MCP tool server: ``<tool> [--transport stdio|streamable-http] [--host H] [--port N]``.

Every MCP tool of the suite starts, logs and fails the same way through ``run_tool_server``:

- settings come from the tool's environment variables, with ``--host`` and ``--port`` on top;
  invalid settings end the process with one line naming each bad variable instead of a traceback
  (``suite_common.startup``, the start-up path of the services too);
- logs go to stderr in the suite's format, so over stdio stdout carries the protocol and nothing else
  (and over streamable HTTP too: a tool logs the same way whatever its transport);
- with ``<PREFIX>OTLP_ENDPOINT`` set, the SDK's span of each MCP request (``tools/call <name>``) is
  exported there, child of the caller's span when the request's ``_meta`` carries a ``traceparent``
  (mcp-client-service sends one), so a tool call is part of the caller's trace;
- over streamable HTTP (uvicorn) the MCP endpoint is ``/mcp``, next to ``GET /healthz`` and
  ``GET /readyz``, which the tool's server gets from ``add_health_routes``.

mcp is a dependency of the tools, not of suite_common: it is imported here for type checking only.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Literal, TypeVar, cast

from opentelemetry import trace
from opentelemetry.sdk.trace import TracerProvider

from suite_common import startup
from suite_common.health import ReadinessCheck, health_routes
from suite_common.serve import serve
from suite_common.settings import ServiceSettings
from suite_common.startup import env_prefix, start
from suite_common.tracing import create_tracer_provider

if TYPE_CHECKING:
    from mcp.server.mcpserver import MCPServer

__all__ = [
    "MCP_PATH",
    "CommandLine",
    "Transport",
    "add_health_routes",
    "load_settings",
    "parse_command_line",
    "run_tool_server",
]

MCP_PATH = "/mcp"

Transport = Literal["stdio", "streamable-http"]

SettingsT = TypeVar("SettingsT", bound=ServiceSettings)


@dataclass(frozen=True)
class CommandLine:
    """What the command line asked for; ``None`` leaves the setting to the environment (or its default)."""

    transport: Transport
    host: str | None
    port: int | None


def run_tool_server(
    build: Callable[[SettingsT], MCPServer[Any]],
    settings_type: type[SettingsT],
    argv: Sequence[str] | None = None,
    *,
    prog: str,
    description: str,
) -> None:
    """Parse ``argv``, load ``settings_type`` (exit with a readable message if invalid), serve ``build(settings)``.

    Returns when the server stops: over stdio when the client closes the pipe, over HTTP on SIGINT/SIGTERM.
    """
    command_line = parse_command_line(settings_type, argv, prog=prog, description=description)
    # Logging is configured before the server is built (``start``): MCPServer.__init__ calls
    # logging.basicConfig with its own (rich) handler, and basicConfig does nothing once the root logger
    # has a handler. Ours is then the only one, and it also formats whatever the build logs.
    settings, server = start(settings_type, build, prog=prog, overrides=_overrides(command_line), log_stream=sys.stderr)
    tracer_provider = install_tracing(prog, settings.otlp_endpoint)
    try:
        if command_line.transport == "stdio":
            server.run("stdio")
        else:
            # host: the SDK derives its DNS-rebinding protection (allowed Host headers) from it.
            app = server.streamable_http_app(streamable_http_path=MCP_PATH, host=settings.host)
            serve(app, settings, log_stream=sys.stderr)
    finally:
        if tracer_provider is not None:
            tracer_provider.shutdown()  # flushes the spans still in the batch


def install_tracing(service_name: str, endpoint: str | None) -> TracerProvider | None:
    """The process's tracer provider, exporting to ``endpoint``: the MCP SDK's server middleware traces each
    request with the global provider (a no-op until one is installed; its tracer is a proxy, so installing it
    after the server is built is in time). ``None`` without an endpoint."""
    provider = create_tracer_provider(service_name, endpoint)
    if provider is not None:
        trace.set_tracer_provider(provider)
    return provider


def parse_command_line(
    settings_type: type[ServiceSettings], argv: Sequence[str] | None, *, prog: str, description: str
) -> CommandLine:
    """Parsed before the settings are loaded, so that ``--help`` works whatever the environment holds."""
    prefix = env_prefix(settings_type)
    default_host = settings_type.model_fields["host"].default
    default_port = settings_type.model_fields["port"].default
    parser = argparse.ArgumentParser(prog=prog, description=description)
    parser.add_argument(
        "--transport",
        choices=["stdio", "streamable-http"],
        default="stdio",
        help=f"stdio (spawned by an MCP client; the default) or streamable-http (MCP at {MCP_PATH}, "
        "health at /healthz and /readyz).",
    )
    parser.add_argument(
        "--host", help=f"HTTP listen address (default: {prefix}HOST, else {default_host}); overrides {prefix}HOST."
    )
    parser.add_argument(
        "--port", type=int, help=f"HTTP port (default: {prefix}PORT, else {default_port}); overrides {prefix}PORT."
    )
    args = parser.parse_args(argv)
    return CommandLine(transport=cast(Transport, args.transport), host=args.host, port=args.port)


def load_settings(settings_type: type[SettingsT], command_line: CommandLine, *, prog: str) -> SettingsT:
    """The settings from the environment with the command line on top; ``SystemExit`` naming each bad variable."""
    return startup.load_settings(settings_type, prog=prog, overrides=_overrides(command_line))


def _overrides(command_line: CommandLine) -> dict[str, Any]:
    overrides: dict[str, Any] = {}
    if command_line.host is not None:
        overrides["host"] = command_line.host
    if command_line.port is not None:
        overrides["port"] = command_line.port
    return overrides


def add_health_routes(server: MCPServer[Any], readiness: ReadinessCheck | None = None) -> None:
    """Serve ``GET /healthz`` and ``GET /readyz`` (``suite_common.health``) in every HTTP app ``server`` makes.

    Registered on the server rather than by the runner, so that an app a test (or a host application)
    builds with ``server.streamable_http_app()`` is the one the command line serves.
    """
    for route in health_routes(readiness):
        server.custom_route(route.path, methods=["GET"])(route.endpoint)
