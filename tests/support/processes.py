"""Services as real processes (``python -m <module>``), for tests that signal or kill them.

::

    async with spawned("agent_service", env, port, tmp_path / "agent.log") as process:
        ...  # /healthz answered; process.kill() is a real SIGKILL

``agent_env`` is the environment of an agent-service process over in-test upstreams.
"""

from __future__ import annotations

import os
import sys
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager
from pathlib import Path

import anyio
import anyio.abc
import httpx
import pytest

from support.mcp_gateway import GATEWAY_SECRET, Gateway, leaves_no_child_processes

__all__ = ["START_SECONDS", "agent_env", "polled", "spawned"]

START_SECONDS = 30.0
"""Bound of the wait for a spawned service to answer /healthz (imports take a few seconds on a busy machine)."""


@asynccontextmanager
async def spawned(module: str, env: dict[str, str], port: int, log: Path) -> AsyncIterator[anyio.abc.Process]:
    """``python -m module`` with ``env`` added to ours, once /healthz answers; killed if still running at the end,
    and reaped in any case (the block leaves no child process behind). Its output goes to ``log``, each line as it
    is written (unbuffered: a test may read the log while the process runs)."""
    with leaves_no_child_processes(), log.open("ab") as output:
        process = await anyio.open_process(
            [sys.executable, "-m", module],
            env={**os.environ, "PYTHONUNBUFFERED": "1", **env},
            stdout=output,
            stderr=output,
        )
        try:
            async with httpx.AsyncClient(timeout=2) as http:

                async def healthy() -> bool:
                    if process.returncode is not None:
                        pytest.fail(f"{module} exited at start:\n{await anyio.Path(log).read_text()}")
                    try:
                        return (await http.get(f"http://127.0.0.1:{port}/healthz")).status_code == 200
                    except httpx.TransportError:
                        return False

                await polled(healthy, START_SECONDS)
            yield process
        finally:
            if process.returncode is None:
                process.kill()
            with anyio.CancelScope(shield=True):
                await process.wait()


def agent_env(port: int, completion_url: str, gateway: Gateway | str, **settings: object) -> dict[str, str]:
    """The environment of an agent-service process on ``port`` over ``completion_url`` and ``gateway`` (one in this
    process, or the URL of one), asking for the tool list on every run; ``settings``: other ``AGENT_*`` settings by
    field name (``database_url=...``, ``catalog_cache_seconds`` to cache the list)."""
    env = {
        "AGENT_HOST": "127.0.0.1",
        "AGENT_PORT": str(port),
        "AGENT_COMPLETION_URL": completion_url,
        "AGENT_MCP_CLIENT_URL": gateway if isinstance(gateway, str) else gateway.url,
        "AGENT_MCP_SERVICE_SECRET": GATEWAY_SECRET,
        "AGENT_CATALOG_CACHE_SECONDS": "0",
    }
    env.update({f"AGENT_{name.upper()}": str(value) for name, value in settings.items()})
    return env


async def polled(check: Callable[[], Awaitable[bool]], seconds: float) -> None:
    """Ask another process (``check()``) until it says yes, for at most ``seconds``: polling, as a change in another
    process gives nothing to await here."""
    with anyio.fail_after(seconds):
        while True:
            if await check():
                return
            await anyio.sleep(0.05)
