"""The aggregated tool catalog: every ready server's tools, in config (= priority) order.

It is rebuilt when a server connects, reconnects or drops, never per request, so that
``list-tools`` is answered from memory.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass

from mcp_types import Tool

from suite_common.logging import get_logger
from suite_common.wire import ListToolsResponse, ToolInfo

__all__ = ["NameClash", "ServerTools", "ToolCatalog", "aggregate_tools"]

_log = get_logger("mcp_client_service.catalog")


@dataclass(frozen=True)
class ServerTools:
    """What the catalog needs to know of one server."""

    server: str
    ready: bool
    tools: Sequence[Tool]
    known_tool_names: Iterable[str] = ()
    """Tools the server had when it was last ready (used while it is away)."""


@dataclass(frozen=True)
class NameClash:
    tool: str
    winner: str
    ignored: str


def _tool_info(tool: Tool, server: str) -> ToolInfo:
    return ToolInfo(name=tool.name, description=tool.description or "", input_schema=tool.input_schema, server=server)


def aggregate_tools(servers: Sequence[ServerTools]) -> tuple[dict[str, ToolInfo], list[NameClash]]:
    """Tools of the ready servers by name; on a clash the earlier server's tool wins."""
    tools: dict[str, ToolInfo] = {}
    clashes: list[NameClash] = []
    for entry in servers:
        if not entry.ready:
            continue
        for tool in entry.tools:
            existing = tools.get(tool.name)
            if existing is None:
                tools[tool.name] = _tool_info(tool, entry.server)
            elif existing.server != entry.server:
                clashes.append(NameClash(tool=tool.name, winner=existing.server, ignored=entry.server))
    return tools, clashes


class ToolCatalog:
    def __init__(self) -> None:
        self._tools: dict[str, ToolInfo] = {}
        self._away: dict[str, str] = {}
        self._listing = ListToolsResponse(tools=[])
        self._listing_json = self._listing.model_dump_json(by_alias=True, exclude_none=True).encode()
        self._reported_clashes: set[NameClash] = set()

    def rebuild(self, servers: Sequence[ServerTools]) -> None:
        tools, clashes = aggregate_tools(servers)
        for clash in clashes:
            if clash not in self._reported_clashes:
                _log.warning(
                    "mcp_tool_name_clash",
                    tool=clash.tool,
                    server=clash.winner,
                    ignored_server=clash.ignored,
                    detail=f'"{clash.winner}" comes first in the servers config, so its tool is used',
                )
        self._reported_clashes = set(clashes)
        away: dict[str, str] = {}
        for entry in servers:
            if not entry.ready:
                for name in entry.known_tool_names:
                    if name not in tools:
                        away.setdefault(name, entry.server)
        self._tools, self._away = tools, away
        self._listing = ListToolsResponse(tools=list(tools.values()))
        self._listing_json = self._listing.model_dump_json(by_alias=True, exclude_none=True).encode()

    def find(self, name: str) -> ToolInfo | None:
        return self._tools.get(name)

    def server_away_with(self, name: str) -> str | None:
        """The server that had this tool when it was last ready and is not ready now, if any."""
        return self._away.get(name)

    def listing(self) -> ListToolsResponse:
        return self._listing

    def listing_json(self) -> bytes:
        """``listing()`` already serialised: ``list-tools`` serves it as it is."""
        return self._listing_json

    def __len__(self) -> int:
        return len(self._tools)
