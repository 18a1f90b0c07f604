"""The aggregated tool catalog: every serving server's tools, in config (= priority) order.

Each server's tools pass its ``allowedTools`` / ``deniedTools`` and get its ``toolPrefix``; then
names that two servers share are settled by the ``tool_name_collision`` setting:

- ``first_wins``: the server that comes first in the config keeps the name, the other's tool is
  not listed (logged, with both servers). If the first server is away, the next one's tool is
  listed: a fallback by priority.
- ``prefix``: the first server in the config keeps the name, and every later server's tool is
  listed as ``<server>__<tool>``. Who comes first is decided over every server's last known
  tools, serving or not, so that a name never moves to another server while one is away.

The catalog is rebuilt when a server connects, drops or relists its tools, never per request,
so that ``list-tools`` is answered from memory.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from typing import Literal

from mcp_types import Tool

from suite_common.logging import get_logger
from suite_common.wire import ListToolsResponse, ToolInfo

__all__ = [
    "PREFIX_SEPARATOR",
    "CatalogEntry",
    "NameClash",
    "NameCollision",
    "ServerTools",
    "ToolCatalog",
    "aggregate_tools",
    "prefixed_name",
]

_log = get_logger("mcp_client_service.catalog")

NameCollision = Literal["first_wins", "prefix"]

PREFIX_SEPARATOR = "__"

_NOT_IN_TOOL_NAMES = re.compile(r"[^A-Za-z0-9_-]")


def _offers_all(_: str) -> bool:
    return True


@dataclass(frozen=True)
class ServerTools:
    """What the catalog needs to know of one server."""

    server: str
    ready: bool
    """Whether it has an open session (``ready`` or ``degraded``): only then are its tools listed."""
    tools: Sequence[Tool]
    known_tool_names: Iterable[str] = ()
    """Tools the server had when it last listed them (used while it is away)."""
    tool_prefix: str = ""
    offers: Callable[[str], bool] = field(default=_offers_all)
    """Its allow and deny lists: whether one of its tools (by the server's name) is offered."""


@dataclass(frozen=True)
class CatalogEntry:
    """One listed tool: its catalog name, its server, and the tool as that server describes it."""

    name: str
    server: str
    tool: Tool
    """As the server listed it; ``tool.name`` is the name to call it by on the server."""

    @property
    def server_tool_name(self) -> str:
        return self.tool.name

    def info(self) -> ToolInfo:
        return ToolInfo(
            name=self.name,
            description=self.tool.description or "",
            input_schema=self.tool.input_schema,
            server=self.server,
        )


@dataclass(frozen=True)
class NameClash:
    tool: str
    winner: str
    ignored: str
    renamed: str | None = None
    """Under ``prefix``: the name the later server's tool is listed as."""


def prefixed_name(server: str, name: str) -> str:
    """``<server>__<name>``, the server name reduced to the characters LLM APIs accept in tool names."""
    return f"{_NOT_IN_TOOL_NAMES.sub('_', server)}{PREFIX_SEPARATOR}{name}"


def _exposed_names(entry: ServerTools) -> list[tuple[str, Tool | None]]:
    """(catalog name before collisions, tool) of a server: its offered tools, or its known names when away."""
    if entry.ready:
        return [(entry.tool_prefix + tool.name, tool) for tool in entry.tools if entry.offers(tool.name)]
    return [(entry.tool_prefix + name, None) for name in entry.known_tool_names if entry.offers(name)]


def _owners(servers: Sequence[ServerTools]) -> dict[str, str]:
    """Each name's owner under ``prefix``: the first server in the config that has (or had) it."""
    owners: dict[str, str] = {}
    for entry in servers:
        for name, _ in _exposed_names(entry):
            owners.setdefault(name, entry.server)
    return owners


def aggregate_tools(
    servers: Sequence[ServerTools], *, collision: NameCollision = "first_wins"
) -> tuple[dict[str, CatalogEntry], list[NameClash]]:
    """The listed tools by catalog name, in config order, and the name clashes met on the way."""
    owners = _owners(servers) if collision == "prefix" else {}
    tools: dict[str, CatalogEntry] = {}
    clashes: list[NameClash] = []
    for entry in servers:
        if not entry.ready:
            continue
        for name, tool in _exposed_names(entry):
            assert tool is not None
            owner = owners.get(name, entry.server)
            if collision == "prefix" and owner != entry.server:
                renamed = prefixed_name(entry.server, name)
                clashes.append(NameClash(tool=name, winner=owner, ignored=entry.server, renamed=renamed))
                name = renamed
            existing = tools.get(name)
            if existing is None:
                tools[name] = CatalogEntry(name=name, server=entry.server, tool=tool)
            elif existing.server != entry.server:
                clashes.append(NameClash(tool=name, winner=existing.server, ignored=entry.server))
    return tools, clashes


class ToolCatalog:
    def __init__(self, *, collision: NameCollision = "first_wins") -> None:
        self.collision: NameCollision = collision
        self._tools: dict[str, CatalogEntry] = {}
        self._infos: dict[str, ToolInfo] = {}
        self._away: dict[str, str] = {}
        self._listing = ListToolsResponse(tools=[])
        self._listing_json = self._listing.model_dump_json(by_alias=True, exclude_none=True).encode()
        self._reported_clashes: set[NameClash] = set()

    def rebuild(self, servers: Sequence[ServerTools]) -> None:
        tools, clashes = aggregate_tools(servers, collision=self.collision)
        for clash in clashes:
            if clash not in self._reported_clashes:
                if clash.renamed is None:
                    detail = f'"{clash.winner}" comes first in the servers config, so its tool is used'
                else:
                    detail = (
                        f'"{clash.winner}" comes first in the servers config; '
                        f'the tool of "{clash.ignored}" is listed as "{clash.renamed}"'
                    )
                _log.warning(
                    "mcp_tool_name_clash",
                    tool=clash.tool,
                    server=clash.winner,
                    ignored_server=clash.ignored,
                    renamed_to=clash.renamed,
                    policy=self.collision,
                    detail=detail,
                )
        self._reported_clashes = set(clashes)
        away: dict[str, str] = {}
        owners = _owners(servers) if self.collision == "prefix" else {}
        for entry in servers:
            if entry.ready:
                continue
            for name, _ in _exposed_names(entry):
                if owners.get(name, entry.server) != entry.server:
                    name = prefixed_name(entry.server, name)
                if name not in tools:
                    away.setdefault(name, entry.server)
        self._tools, self._away = tools, away
        self._infos = {name: entry.info() for name, entry in tools.items()}
        self._listing = ListToolsResponse(tools=list(self._infos.values()))
        self._listing_json = self._listing.model_dump_json(by_alias=True, exclude_none=True).encode()

    def find(self, name: str) -> ToolInfo | None:
        return self._infos.get(name)

    def entry(self, name: str) -> CatalogEntry | None:
        """The listed tool ``name``: its server and the server's own ``Tool`` (its name there included)."""
        return self._tools.get(name)

    def entries(self) -> list[CatalogEntry]:
        return list(self._tools.values())

    def server_away_with(self, name: str) -> str | None:
        """The server that had this tool when it last listed it and has no session now, if any."""
        return self._away.get(name)

    def listing(self) -> ListToolsResponse:
        """The current listing; a new object after every rebuild (so its identity is a version)."""
        return self._listing

    def listing_json(self) -> bytes:
        """``listing()`` already serialised: ``list-tools`` serves it as it is."""
        return self._listing_json

    def __len__(self) -> int:
        return len(self._tools)
