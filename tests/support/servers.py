"""Real servers for tests: an ASGI app under uvicorn on a free loopback port, in this event loop."""

from __future__ import annotations

import socket
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

import anyio
import uvicorn
from starlette.types import ASGIApp

__all__ = ["free_port", "serve_app"]


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
        return port


class _Server(uvicorn.Server):
    """uvicorn with an event for "listening", so tests wait on the condition itself."""

    def __init__(self, config: uvicorn.Config) -> None:
        super().__init__(config)
        self.listening = anyio.Event()

    async def startup(self, sockets: list[socket.socket] | None = None) -> None:
        await super().startup(sockets=sockets)
        self.listening.set()

    def install_signal_handlers(self) -> None:  # the test runner keeps its own
        pass


@asynccontextmanager
async def serve_app(
    app: ASGIApp, *, startup_timeout: float = 30, config: uvicorn.Config | None = None, host: str = "127.0.0.1"
) -> AsyncIterator[str]:
    """Serve ``app`` (lifespan included) on ``host`` (a loopback address: another one of 127.0.0.0/8 is a server
    the outbound policy can tell apart from 127.0.0.1) and yield its base URL; ``config`` replaces the test default
    (its host and port are ignored: the app is served on a free port)."""
    sock = socket.socket()
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    sock.bind((host, 0))
    port = sock.getsockname()[1]
    if config is None:
        config = uvicorn.Config(app, log_config=None, access_log=False, lifespan="on", timeout_graceful_shutdown=2)
    server = _Server(config)

    async def run() -> None:
        try:
            await server.serve(sockets=[sock])
        finally:
            server.listening.set()  # never leave the waiter hanging if startup failed

    async with anyio.create_task_group() as tg:
        tg.start_soon(run)
        with anyio.fail_after(startup_timeout):
            await server.listening.wait()
        if not server.started:
            raise RuntimeError("the app failed to start (see the log above)")
        try:
            yield f"http://{host}:{port}"
        finally:
            server.should_exit = True
    sock.close()
