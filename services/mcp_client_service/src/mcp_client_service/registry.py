"""All configured servers together: their supervisors, their states and the tool catalog."""

from __future__ import annotations

from collections.abc import Callable

import anyio

from mcp_client_service.catalog import ServerTools, ToolCatalog
from mcp_client_service.config import ServersFile
from mcp_client_service.connections import Backoff, ServerConnection
from suite_common.wire import WireModel

__all__ = ["ServerRegistry", "ServerStatus", "ServersResponse"]


class ServerStatus(WireModel):
    name: str
    transport: str
    state: str
    """``connecting``, ``ready`` or ``failed``; ``disabled`` for a server switched off in the config."""
    tool_count: int
    last_error: str | None = None
    """Why the last connection failed or ended (kept after a reconnect succeeds), redacted; left
    out while the server never failed."""


class ServersResponse(WireModel):
    servers: list[ServerStatus]


class ServerRegistry:
    """Owns one ``ServerConnection`` per enabled server, in config order, and the catalog they feed."""

    def __init__(
        self,
        servers: ServersFile,
        *,
        connect_timeout: float,
        list_timeout: float,
        probe_interval: float = 30.0,
        backoff: Backoff | None = None,
    ) -> None:
        self.catalog = ToolCatalog()
        self.connections: dict[str, ServerConnection] = {}
        self.disabled: dict[str, str] = {}
        self._order = list(servers.servers)
        for name, config in servers.servers.items():
            if not config.enabled:
                self.disabled[name] = config.transport
                continue
            self.connections[name] = ServerConnection(
                name,
                config,
                connect_timeout=connect_timeout,
                list_timeout=list_timeout,
                probe_interval=probe_interval,
                on_change=self._on_change,
                backoff=backoff,
            )
        self._changed: anyio.Event | None = None

    async def run(self) -> None:
        """Supervise every server until cancelled; cancelling closes every session and stdio child."""
        async with anyio.create_task_group() as tg:
            for connection in self.connections.values():
                tg.start_soon(connection.run, name=f"mcp-server:{connection.name}")

    def _on_change(self) -> None:
        self.catalog.rebuild(
            [
                ServerTools(
                    server=connection.name,
                    ready=connection.state == "ready",
                    tools=connection.tools,
                    known_tool_names=connection.known_tool_names,
                )
                for connection in self.connections.values()
            ]
        )
        if self._changed is not None:
            self._changed.set()
            self._changed = None

    async def wait_until(self, condition: Callable[[ServerRegistry], bool]) -> None:
        """Return once ``condition(self)`` holds, re-checking on every state change (bound it with a timeout)."""
        while not condition(self):
            if self._changed is None:
                self._changed = anyio.Event()
            await self._changed.wait()

    def all_ready(self) -> bool:
        return all(connection.state == "ready" for connection in self.connections.values())

    def readiness(self) -> dict[str, str]:
        """Per enabled server one word: ``ok``, ``connecting`` or ``failed``.

        ``/readyz`` is open to probes, so it never says why: an error can quote a command line or
        a URL. The reasons are on the protected ``GET /mcp/v1/servers``.
        """
        return {
            name: "ok" if connection.state == "ready" else connection.state
            for name, connection in self.connections.items()
        }

    def statuses(self) -> ServersResponse:
        """Every server of the config, in its order, disabled ones included."""
        servers = []
        for name in self._order:
            connection = self.connections.get(name)
            if connection is None:
                status = ServerStatus(name=name, transport=self.disabled[name], state="disabled", tool_count=0)
            else:
                status = ServerStatus(
                    name=name,
                    transport=connection.transport,
                    state=connection.state,
                    tool_count=len(connection.tools),
                    last_error=connection.last_error,
                )
            servers.append(status)
        return ServersResponse(servers=servers)
