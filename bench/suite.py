"""Everything the benchmarks run against, started once on loopback in this process tree.

On the system-under-test core: the hello floor, completion-service, mcp-client-service and
agent-service, each a real ``python -m <service>`` process configured through its environment
as ``make run`` does. On the load core: this process (the load client and the direct SDK
clients), the fake LLM, the echo MCP server over streamable HTTP, and the stdio echo servers
(mcp-client-service's child is moved there once it is up).
"""

from __future__ import annotations

import json
import secrets
import sys
from collections.abc import AsyncIterator
from contextlib import AsyncExitStack, ExitStack, asynccontextmanager
from dataclasses import dataclass
from pathlib import Path

from mcp import Client, StdioServerParameters

from bench.processes import ROOT, Cores, Service, free_port, pin_descendants, start

__all__ = ["HTTP_TOOL", "SECRET_HEADER", "STDIO_TOOL", "Suite", "running_suite", "start_agent", "stdio_echo"]

STDIO_TOOL = "s_echo"
"""The echo tool of the stdio server (prefix ``s_``)."""
HTTP_TOOL = "h_echo"
"""The echo tool of the streamable HTTP server (prefix ``h_``)."""
SECRET_HEADER = "X-MCP-Service-Secret"


@dataclass
class Suite:
    cores: Cores
    hello: Service
    llm: Service
    echo_http: Service
    completion: Service
    mcp: Service
    agent: Service
    secret: str
    direct_stdio: Client
    """The SDK client straight to an echo server over stdio (tools ``s_*``), in this process."""
    direct_http: Client
    """The SDK client straight to the same echo server mcp-client-service uses over streamable HTTP."""
    logs: Path
    agent_env: dict[str, str]
    """The environment ``agent`` was started with but its port: to start more agent-services alike."""


def _agent_env(completion: Service, mcp: Service, secret: str, log_level: str) -> dict[str, str]:
    return {
        "AGENT_COMPLETION_URL": completion.url,
        "AGENT_MCP_CLIENT_URL": mcp.url,
        "AGENT_MCP_SERVICE_SECRET": secret,
        "AGENT_MCP_SECRET_HEADER": SECRET_HEADER,
        # Runs not stored: the agent benchmarks measure the loop itself, comparable across commits, and
        # never write into the SQLite file of `make run` (the default, .data/agent.db). What storing costs
        # is the persistence benchmark's (bench/persistence.py).
        "AGENT_DATABASE_URL": "",
        "AGENT_LOG_LEVEL": log_level,
        "AGENT_LOG_FORMAT": "json",
    }


def start_agent(stack: ExitStack, suite: Suite, name: str, env: dict[str, str]) -> Service:
    """Another agent-service on the system-under-test core, configured as the suite's but for ``env``; it
    stops when ``stack`` closes. Its log: ``<logs>/<name>.log``."""
    port = free_port()
    return start(
        stack,
        name,
        ["python", "-m", "agent_service"],
        port=port,
        cpus=suite.cores.system,
        logs=suite.logs,
        ready_path="/readyz",
        env={**suite.agent_env, **env, "AGENT_PORT": str(port)},
    )


def stdio_echo() -> StdioServerParameters:
    return StdioServerParameters(
        command=sys.executable, args=["-m", "bench.echo_server", "--tool-prefix", "s_"], cwd=str(ROOT)
    )


def _fresh(database: Path) -> Path:
    """``database``'s path, its SQLite files of an earlier run removed."""
    for path in (database, database.with_name(database.name + "-wal"), database.with_name(database.name + "-shm")):
        path.unlink(missing_ok=True)
    return database


def _start_processes(stack: ExitStack, cores: Cores, data: Path, secret: str, log_level: str) -> dict[str, Service]:
    def logging_env(prefix: str) -> dict[str, str]:
        return {f"{prefix}LOG_LEVEL": log_level, f"{prefix}LOG_FORMAT": "json"}

    logs = data / "logs"
    ports = {name: free_port() for name in ("hello", "llm", "echo_http", "completion", "mcp", "agent")}
    services: dict[str, Service] = {}
    services["hello"] = start(
        stack,
        "hello",
        ["python", "-m", "bench.hello_app", str(ports["hello"])],
        port=ports["hello"],
        cpus=cores.system,
        logs=logs,
    )
    services["llm"] = start(
        stack,
        "fake-llm",
        ["python", "-m", "bench.fake_llm", str(ports["llm"])],
        port=ports["llm"],
        cpus=cores.load,
        logs=logs,
        ready_path="/hello",
    )
    echo_args = ["python", "-m", "bench.echo_server", "--transport", "streamable-http", "--tool-prefix", "h_"]
    services["echo_http"] = start(
        stack,
        "echo-http",
        [*echo_args, "--port", str(ports["echo_http"])],
        port=ports["echo_http"],
        cpus=cores.load,
        logs=logs,
        ready_path="/mcp",
    )
    config = data / "mcp_servers.json"
    stdio = stdio_echo()
    config.write_text(
        json.dumps(
            {
                "mcpServers": {
                    "echo-stdio": {"command": stdio.command, "args": stdio.args, "cwd": str(ROOT)},
                    "echo-http": {"url": f"{services['echo_http'].url}/mcp"},
                }
            }
        )
    )
    services["completion"] = start(
        stack,
        "completion-service",
        ["python", "-m", "completion_service"],
        port=ports["completion"],
        cpus=cores.system,
        logs=logs,
        ready_path="/readyz",
        env={
            "COMPLETION_PORT": str(ports["completion"]),
            "COMPLETION_OPENAI_BASE_URL": f"{services['llm'].url}/v1",
            "COMPLETION_OPENAI_API_KEY": "bench-key",
            **logging_env("COMPLETION_"),
        },
    )
    services["mcp"] = start(
        stack,
        "mcp-client-service",
        ["python", "-m", "mcp_client_service"],
        port=ports["mcp"],
        cpus=cores.system,
        logs=logs,
        ready_path="/readyz",
        env={
            "MCP_CLIENT_PORT": str(ports["mcp"]),
            "MCP_CLIENT_SERVICE_SECRET": secret,
            "MCP_CLIENT_SECRET_HEADER": SECRET_HEADER,
            "MCP_CLIENT_SERVERS_FILE": str(config),
            "MCP_CLIENT_SSRF_ALLOW_LOOPBACK": "true",  # the echo servers over HTTP (shared, tenants') are on loopback
            # Tenant servers (bench/tenants.py) in a store of this run's own, never `make run`'s .data/mcp_client.db.
            "MCP_CLIENT_DATABASE_URL": f"sqlite:///{_fresh(data / 'mcp_client.db')}",
            **logging_env("MCP_CLIENT_"),
        },
    )
    pin_descendants(services["mcp"].pid, cores.load)
    services["agent"] = start(
        stack,
        "agent-service",
        ["python", "-m", "agent_service"],
        port=ports["agent"],
        cpus=cores.system,
        logs=logs,
        ready_path="/readyz",
        env={
            "AGENT_PORT": str(ports["agent"]),
            **_agent_env(services["completion"], services["mcp"], secret, log_level),
            # No per-tenant cap (default 16): the loads of 32 and 256 concurrent runs measure the loop, not the 429s
            # of the runs past the cap (the run limits are bench/limits.py's).
            "AGENT_MAX_CONCURRENT_RUNS_PER_TENANT": "0",
        },
    )
    return services


@asynccontextmanager
async def running_suite(cores: Cores, data: Path, *, log_level: str = "info") -> AsyncIterator[Suite]:
    """Start everything, yield it, stop everything (also on failure or Ctrl-C).

    The services log at ``log_level`` (their default, ``info``: what production pays), as JSON, to
    ``data/logs/<service>.log``."""
    secret = secrets.token_urlsafe(24)
    with ExitStack() as stack:
        services = _start_processes(stack, cores, data, secret, log_level)
        async with AsyncExitStack() as clients:
            # cache=None: every list_tools is a real round trip, as mcp-client-service's own client makes.
            direct_stdio = await clients.enter_async_context(Client(stdio_echo(), cache=None))
            direct_http = await clients.enter_async_context(Client(f"{services['echo_http'].url}/mcp", cache=None))
            yield Suite(
                cores=cores,
                secret=secret,
                direct_stdio=direct_stdio,
                direct_http=direct_http,
                logs=data / "logs",
                agent_env=_agent_env(services["completion"], services["mcp"], secret, log_level),
                **services,
            )
