"""1,000 tenants with one server each: the gateway's memory and open sessions stay bounded.

``python -m bench.tenant_servers [--tenants 1000] [--idle-seconds 5]`` starts the echo MCP server over streamable
HTTP and the gateway (SQLite store; sessions bounded by ``--max-sessions``, 256 by default, and 8 per tenant),
then measures the gateway's
resident memory (``VmRSS``) and its open tenant sessions (``mcp_tenant_sessions_open`` on ``/metrics``):

1. started, no tenant server;
2. every tenant registered one server (each registration connects and lists its tools in the background);
3. every tenant listed its catalog (``list-tools`` with ``X-Tenant-Id``: one catalog per tenant is built);
4. the sessions idle past ``MCP_CLIENT_TENANT_IDLE_SECONDS`` (every one closed);
5. every tenant called its server's tool once (each call opens a session; the bound closes the least recently used).

The figures are in docs/performance.md ("Tenant servers").
"""

from __future__ import annotations

import argparse
import os
import tempfile
from collections.abc import Awaitable, Callable
from contextlib import ExitStack
from pathlib import Path

import anyio
import httpx

from bench.processes import free_port, rss_bytes, start

__all__ = ["main"]

_SECRET = "bench-tenant-secret"
_CONCURRENCY = 32
_WAIT_SECONDS = 120.0


def _sessions_open(metrics: str) -> int:
    for line in metrics.splitlines():
        if line.startswith("mcp_tenant_sessions_open "):
            return int(float(line.split()[1]))
    raise RuntimeError("the gateway reports no mcp_tenant_sessions_open")


async def _each(count: int, action: Callable[[int], Awaitable[None]]) -> None:
    """``action(0..count-1)``, ``_CONCURRENCY`` at a time."""
    limiter = anyio.CapacityLimiter(_CONCURRENCY)

    async def one(index: int) -> None:
        async with limiter:
            await action(index)

    async with anyio.create_task_group() as tg:
        for index in range(count):
            tg.start_soon(one, index)


async def _measure(tenants: int, idle_seconds: float, max_sessions: int, logs: Path) -> list[tuple[str, float, int]]:
    rows: list[tuple[str, float, int]] = []
    with ExitStack() as stack:
        cpus = frozenset(os.sched_getaffinity(0))
        echo_port, gateway_port = free_port(), free_port()
        start(
            stack,
            "echo-http",
            ["python", "-m", "bench.echo_server", "--transport", "streamable-http", "--port", str(echo_port)],
            port=echo_port,
            cpus=cpus,
            logs=logs,
            ready_path="/mcp",
        )
        servers_file = logs / "mcp_servers.json"
        servers_file.write_text('{"mcpServers": {}}')
        gateway = start(
            stack,
            "mcp-client-service",
            ["python", "-m", "mcp_client_service"],
            port=gateway_port,
            cpus=cpus,
            logs=logs,
            env={
                "MCP_CLIENT_PORT": str(gateway_port),
                "MCP_CLIENT_SERVICE_SECRET": _SECRET,
                "MCP_CLIENT_SERVERS_FILE": str(servers_file),
                "MCP_CLIENT_DATABASE_URL": f"sqlite:///{logs}/mcp_client.db",
                "MCP_CLIENT_SSRF_ALLOW_LOOPBACK": "true",
                "MCP_CLIENT_TENANT_IDLE_SECONDS": str(idle_seconds),
                "MCP_CLIENT_TENANT_MAX_SESSIONS": str(max_sessions),
                "MCP_CLIENT_LOG_LEVEL": "warning",
            },
        )
        url = f"http://127.0.0.1:{echo_port}/mcp"
        async with httpx.AsyncClient(
            base_url=gateway.url, headers={"X-MCP-Service-Secret": _SECRET}, timeout=60
        ) as http:

            async def note(phase: str) -> None:
                sessions = _sessions_open((await http.get("/metrics")).text)
                rows.append((phase, rss_bytes(gateway.pid) / 2**20, sessions))
                print(f"{phase:<58} RSS {rows[-1][1]:7.1f} MiB   open tenant sessions {sessions}", flush=True)

            await note("started, no tenant server")

            async def register(index: int) -> None:
                answer = await http.post(f"/mcp/v1/tenants/t{index}/servers", json={"name": "notes", "url": url})
                answer.raise_for_status()

            await _each(tenants, register)
            await note(f"{tenants} tenants registered one server each")

            async def list_tools(index: int) -> None:
                answer = await http.get("/mcp/v1/tools/list-tools", headers={"X-Tenant-Id": f"t{index}"})
                answer.raise_for_status()

            await _each(tenants, list_tools)
            await note("every tenant listed its catalog")

            with anyio.move_on_after(_WAIT_SECONDS):
                while True:
                    if _sessions_open((await http.get("/metrics")).text) == 0:
                        break
                    await anyio.sleep(0.5)  # another process: nothing to await but its metrics
            await note(f"idle past MCP_CLIENT_TENANT_IDLE_SECONDS={idle_seconds:g}")

            async def call(index: int) -> None:
                answer = await http.post(
                    "/mcp/v1/tools/call-tool",
                    headers={"X-Tenant-Id": f"t{index}"},
                    json={"name": "echo", "arguments": {"text": "hi"}},
                )
                answer.raise_for_status()

            await _each(tenants, call)
            await note("every tenant called its server's tool once")
    return rows


def main() -> None:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--tenants", type=int, default=1000)
    parser.add_argument("--idle-seconds", type=float, default=5.0)
    parser.add_argument("--max-sessions", type=int, default=256, help="MCP_CLIENT_TENANT_MAX_SESSIONS")
    parser.add_argument(
        "--logs", type=Path, help="keep the services' logs (and store) here; default: a temporary folder"
    )
    args = parser.parse_args()
    if args.logs is not None:
        args.logs.mkdir(parents=True, exist_ok=True)
        anyio.run(_measure, args.tenants, args.idle_seconds, args.max_sessions, args.logs.resolve())
        return
    with tempfile.TemporaryDirectory(prefix="bench-tenants-") as folder:
        anyio.run(_measure, args.tenants, args.idle_seconds, args.max_sessions, Path(folder))


if __name__ == "__main__":
    main()
