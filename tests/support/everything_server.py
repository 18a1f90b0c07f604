"""The MCP reference server ``@modelcontextprotocol/server-everything`` (npm), a server nobody here wrote.

It has a long-running tool that reports progress (``trigger-long-running-operation``), a tool
that can only run as an MCP task (``simulate-research-query``, about 4 s in four stages), tools
that answer with ``resource_link`` blocks (``get-resource-links``), resources, resource
templates and prompts. Its version is pinned in ``node_servers/package-lock.json``; ``make
venv`` installs it, and so does the first test that needs it when it is missing (``npm ci``,
from the registry). Without node the tests that need it are skipped, saying so.
"""

from __future__ import annotations

import shutil
import socket
import subprocess
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import anyio
import pytest

from support.processes import polled
from support.servers import free_port

__all__ = ["EVERYTHING_DIR", "everything_http_server", "everything_stdio_server", "installed_node_program"]

EVERYTHING_DIR = Path(__file__).with_name("node_servers")
_ENTRY = EVERYTHING_DIR / "node_modules" / "@modelcontextprotocol" / "server-everything" / "dist" / "index.js"

_INSTALL_SECONDS = 300


def installed_node_program(entry: Path) -> Path:
    """``entry``, a script of a package of ``node_servers/package-lock.json``, installed (``npm ci``) if it is not;
    the test is skipped only on a machine without node and npm."""
    node, npm = shutil.which("node"), shutil.which("npm")
    if node is None or npm is None:
        pytest.skip(f"node and npm are not installed: {entry.name} of node_servers cannot run")
    if not entry.exists():
        subprocess.run(
            [npm, "ci", "--no-audit", "--no-fund", "--loglevel=error"],
            cwd=EVERYTHING_DIR,
            check=True,
            timeout=_INSTALL_SECONDS,
        )
    return entry


def _installed_entry() -> Path:
    return installed_node_program(_ENTRY)


def everything_stdio_server(**options: Any) -> dict[str, Any]:
    """A ``mcpServers`` entry running server-everything over stdio under node."""
    node = shutil.which("node")
    entry = _installed_entry()
    return {"command": node, "args": [str(entry), "stdio"], **options}


_START_SECONDS = 30.0


def _listening(port: int) -> bool:
    with socket.socket() as sock:
        return sock.connect_ex(("127.0.0.1", port)) == 0


@asynccontextmanager
async def everything_http_server(log: Path) -> AsyncIterator[str]:
    """server-everything over streamable HTTP (its own process, on a free loopback port); yields its MCP URL.
    Its output goes to ``log``."""
    node = shutil.which("node")
    entry = _installed_entry()
    assert node is not None
    port = free_port()
    with log.open("ab") as output:
        process = await anyio.open_process(
            [node, str(entry), "streamableHttp"], env={"PORT": str(port), "PATH": ""}, stdout=output, stderr=output
        )
        try:

            async def listening() -> bool:
                if process.returncode is not None:
                    pytest.fail(f"server-everything exited at start:\n{await anyio.Path(log).read_text()}")
                return _listening(port)

            await polled(listening, _START_SECONDS)
            yield f"http://127.0.0.1:{port}/mcp"
        finally:
            if process.returncode is None:
                process.kill()
            with anyio.CancelScope(shield=True):
                await process.wait()
