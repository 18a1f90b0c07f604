"""The aggregated tool catalog: every serving server's tools, in config (= priority) order.

Each server's tools pass its ``allowedTools`` / ``deniedTools`` and get its ``toolPrefix``; then
names that two servers share are settled by the ``tool_name_collision`` setting:

- ``first_wins``: the server that comes first in the config keeps the name, the other's tool is
  not listed (logged, with both servers). If the first server is away, the next one's tool is
  listed: a fallback by priority.
- ``prefix``: the first server in the config keeps the name, and every later server's tool is
  listed as ``<server>__<tool>``. Who comes first is decided over every server's last known
  tools, serving or not, so that a name never moves to another server while one is away.

A server that is away (reconnecting, restarting, its circuit open) keeps its last known tools in
the listing, marked ``unavailable`` with the reason and when it is tried again, unless another
server stands in for a name: a configured tool that cannot be called for a while is not the same
thing as a name nobody offers.

Apart from the listing, every server's offered tools are kept by (server, the server's own tool
name), shadowed ones included (``served``): a caller that names the server (``call-tool``'s
``server`` and ``serverTool``) gets that server's tool, whatever the name resolves to now.

The catalog is rebuilt when a server connects, drops or relists its tools, or its circuit opens
or closes, never per request, so that ``list-tools`` is answered from memory: from JSON rendered
once, and again at most once a second while a tool's ``retryAfterSeconds`` counts down.
"""

from __future__ import annotations

import re
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal

from mcp_types import Tool

from suite_common.logging import get_logger
from suite_common.wire import ListToolsResponse, ToolInfo, ToolUnavailable

__all__ = [
    "PREFIX_SEPARATOR",
    "Away",
    "CatalogEntry",
    "NameClash",
    "NameCollision",
    "ServedTools",
    "ServerTools",
    "ToolCatalog",
    "aggregate_tools",
    "prefixed_name",
]

_log = get_logger("mcp_client_service.registry.catalog")

NameCollision = Literal["first_wins", "prefix"]

PREFIX_SEPARATOR = "__"

_NOT_IN_TOOL_NAMES = re.compile(r"[^A-Za-z0-9_-]")

_RERENDER_SECONDS = 1.0
"""While some ``retryAfterSeconds`` counts down, the listing's JSON is rendered again at most this often."""


def _offers_all(_: str) -> bool:
    return True


@dataclass(frozen=True)
class Away:
    """Why a server's tools cannot be called now, and when it is tried again."""

    reason: str
    retry_at: float | None = None
    """On the catalog's clock (``time.monotonic``); ``None`` while it is being tried right now."""

    def unavailable(self, now: float) -> ToolUnavailable:
        after = None if self.retry_at is None else round(max(0.0, self.retry_at - now), 1)
        return ToolUnavailable(reason=self.reason, retry_after_seconds=after)


@dataclass(frozen=True)
class ServerTools:
    """What the catalog needs to know of one server."""

    server: str
    ready: bool
    """Whether it takes calls (an open session, its circuit not open): only then are its tools callable."""
    tools: Sequence[Tool]
    known_tools: Sequence[Tool] = ()
    """Its tools when it last listed them, listed as unavailable while it is away."""
    tool_prefix: str = ""
    offers: Callable[[str], bool] = field(default=_offers_all)
    """Its allow and deny lists: whether one of its tools (by the server's name) is offered."""
    away: Away | None = None
    """While it is not ready: why, and when it is tried again."""
    tenant: str | None = None
    """The tenant whose own server it is (``tenants``); ``None``: a server of the servers file, shared by all."""


def _tool_info_extras(tool: Tool) -> dict[str, Any]:
    extras: dict[str, Any] = {"title": tool.title, "output_schema": tool.output_schema}
    if tool.annotations is not None:
        extras["annotations"] = tool.annotations.model_dump(by_alias=True, exclude_none=True, mode="json")
    return extras


@dataclass(frozen=True)
class CatalogEntry:
    """One listed tool: its catalog name, its server, and the tool as that server describes it."""

    name: str
    server: str
    tool: Tool
    """As the server listed it; ``tool.name`` is the name to call it by on the server."""
    away: Away | None = None
    """Set on a tool that is listed but cannot be called now."""
    tenant: str | None = None
    """The tenant whose own server serves it; ``None``: a shared server's."""

    @property
    def server_tool_name(self) -> str:
        return self.tool.name

    def info(self, now: float = 0.0) -> ToolInfo:
        return ToolInfo(
            name=self.name,
            description=self.tool.description or "",
            input_schema=self.tool.input_schema,
            server=self.server,
            server_tool=self.tool.name if self.tool.name != self.name else None,
            unavailable=self.away.unavailable(now) if self.away is not None else None,
            tenant=self.tenant,
            **_tool_info_extras(self.tool),
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


def _exposed_names(entry: ServerTools) -> list[tuple[str, Tool]]:
    """(catalog name before collisions, tool) of a server: its offered tools, or its known ones when away."""
    tools = entry.tools if entry.ready else entry.known_tools
    return [(entry.tool_prefix + tool.name, tool) for tool in tools if entry.offers(tool.name)]


def _owners(servers: Sequence[ServerTools]) -> dict[str, str]:
    """Each name's owner under ``prefix``: the first server in the config that has (or had) it."""
    owners: dict[str, str] = {}
    for entry in servers:
        for name, _ in _exposed_names(entry):
            owners.setdefault(name, entry.server)
    return owners


def _listed_name(entry: ServerTools, name: str, owners: dict[str, str]) -> str:
    """The name a server's tool is listed under (before ``first_wins`` drops a shadowed one)."""
    return name if owners.get(name, entry.server) == entry.server else prefixed_name(entry.server, name)


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
            listed = _listed_name(entry, name, owners)
            if listed != name:
                clashes.append(NameClash(tool=name, winner=owners[name], ignored=entry.server, renamed=listed))
                name = listed
            existing = tools.get(name)
            if existing is None:
                tools[name] = CatalogEntry(name=name, server=entry.server, tool=tool, tenant=entry.tenant)
            elif existing.server != entry.server:
                clashes.append(NameClash(tool=name, winner=existing.server, ignored=entry.server))
    return tools, clashes


def _away_entries(
    servers: Sequence[ServerTools], callable_tools: dict[str, CatalogEntry], collision: NameCollision
) -> dict[str, CatalogEntry]:
    """The last known tools of servers that are away, by catalog name, unless a name is taken by a callable tool."""
    owners = _owners(servers) if collision == "prefix" else {}
    away: dict[str, CatalogEntry] = {}
    for entry in servers:
        if entry.ready:
            continue
        reason = entry.away or Away(reason=f'its MCP server "{entry.server}" is not ready')
        for name, tool in _exposed_names(entry):
            name = _listed_name(entry, name, owners)
            if name not in callable_tools and name not in away:
                away[name] = CatalogEntry(name=name, server=entry.server, tool=tool, away=reason, tenant=entry.tenant)
    return away


@dataclass(frozen=True)
class ServedTools:
    """Every server's offered tools by (server, the server's own tool name), shadowed ones included.

    ``first_wins`` lists one tool per name, so a name shared by two servers leaves the later server's
    tool out of the listing: it is kept here, with the name it would be listed under. A tool of a
    server that is away is here too, with its ``away``.
    """

    by_own_name: dict[tuple[str, str], CatalogEntry] = field(default_factory=dict)
    by_listed_name: dict[tuple[str, str], CatalogEntry] = field(default_factory=dict)
    """The same tools by each name the gateway may list them under: the server's ``toolPrefix`` and the
    tool's own name, and that with ``<server>__`` before it (``prefix`` collisions)."""

    @classmethod
    def of(cls, servers: Sequence[ServerTools], collision: NameCollision) -> ServedTools:
        owners = _owners(servers) if collision == "prefix" else {}
        served = cls()
        for entry in servers:
            away = None if entry.ready else entry.away or Away(reason=f'its MCP server "{entry.server}" is not ready')
            for name, tool in _exposed_names(entry):
                listed = _listed_name(entry, name, owners)
                served_tool = CatalogEntry(name=listed, server=entry.server, tool=tool, away=away, tenant=entry.tenant)
                served.by_own_name[entry.server, tool.name] = served_tool
                served.by_listed_name[entry.server, name] = served_tool
                # A server's own "<server>__x" (were there one) keeps its name over another tool's prefixed one.
                served.by_listed_name.setdefault((entry.server, prefixed_name(entry.server, name)), served_tool)
        return served


class ToolCatalog:
    def __init__(self, *, collision: NameCollision = "first_wins", clock: Callable[[], float] = time.monotonic) -> None:
        self.collision: NameCollision = collision
        self._clock = clock
        self._tools: dict[str, CatalogEntry] = {}
        self._infos: dict[str, ToolInfo] = {}
        self._away: dict[str, CatalogEntry] = {}
        self._served = ServedTools()
        self._listed: list[CatalogEntry] = []
        self._counting_down = False
        self._listing = ListToolsResponse(tools=[])
        self._listing_json = self._listing.model_dump_json(by_alias=True, exclude_none=True).encode()
        self._rendered_at = -float("inf")
        self._reported_clashes: set[NameClash] = set()
        self._info_cache: dict[tuple[str, str, int], tuple[Tool, ToolInfo]] = {}
        self._used_infos: dict[tuple[str, str, int], tuple[Tool, ToolInfo]] = {}
        self._servers: frozenset[str] = frozenset()

    def rebuild(self, servers: Sequence[ServerTools]) -> None:
        self._servers = frozenset(entry.server for entry in servers)
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
        away = _away_entries(servers, tools, self.collision)
        position = {entry.server: index for index, entry in enumerate(servers)}
        # Config order, each server's tools in its own order (a stable sort keeps it).
        listed = sorted([*tools.values(), *away.values()], key=lambda entry: position[entry.server])
        self._tools, self._away, self._listed = tools, away, listed
        self._served = ServedTools.of(servers, self.collision)
        self._used_infos = {}
        self._infos = {name: self._info(entry) for name, entry in tools.items()}
        self._info_cache = self._used_infos  # only what this listing uses is kept
        self._counting_down = any(entry.away.retry_at is not None for entry in away.values() if entry.away)
        self._render()

    def _info(self, entry: CatalogEntry) -> ToolInfo:
        """``entry.info()``, reused while the server's ``Tool`` is the same object (until it lists again):
        a rebuild then costs little however many tools are listed."""
        key = (entry.name, entry.server, id(entry.tool))
        cached = self._info_cache.get(key)
        if cached is None or cached[0] is not entry.tool:
            cached = self._info_cache[key] = (entry.tool, entry.info())
        self._used_infos[key] = cached
        return cached[1]

    def _render(self) -> None:
        now = self._clock()
        infos = self._infos  # a callable tool's description does not change with time: made once per rebuild
        self._listing = ListToolsResponse(
            tools=[infos[entry.name] if entry.away is None else entry.info(now) for entry in self._listed]
        )
        self._listing_json = self._listing.model_dump_json(by_alias=True, exclude_none=True).encode()
        self._rendered_at = now

    def has_server(self, server: str) -> bool:
        """Whether ``server`` is one of the servers this catalog was built from (serving or not)."""
        return server in self._servers

    def find(self, name: str) -> ToolInfo | None:
        """The callable tool ``name`` (not one that is listed as unavailable)."""
        return self._infos.get(name)

    def entry(self, name: str) -> CatalogEntry | None:
        """The callable tool ``name``: its server and the server's own ``Tool`` (its name there included)."""
        return self._tools.get(name)

    def entries(self) -> list[CatalogEntry]:
        """Every callable tool."""
        return list(self._tools.values())

    def unavailable(self, name: str) -> CatalogEntry | None:
        """The tool ``name`` if it is listed but cannot be called now (its server is away)."""
        return self._away.get(name)

    def served(self, server: str, *, server_tool: str | None = None, name: str | None = None) -> CatalogEntry | None:
        """The tool of ``server`` that it names ``server_tool``, or else that is listed (or would be) as ``name``.

        Shadowed or not, serving or away (then with its ``away``): a caller holding a call to one server's tool
        gets that tool or nothing, never another server's. Its ``name`` is the one it is (or would be) listed under.
        """
        if server_tool is not None:
            return self._served.by_own_name.get((server, server_tool))
        return None if name is None else self._served.by_listed_name.get((server, name))

    def listing(self) -> ListToolsResponse:
        """The current listing; a new object after every rebuild (so its identity is a version)."""
        return self._listing

    def listing_json(self) -> bytes:
        """The listing already serialised: ``list-tools`` serves it as it is."""
        if self._counting_down and self._clock() - self._rendered_at >= _RERENDER_SECONDS:
            listing = self._listing
            self._render()
            self._listing = listing  # the same version: only the countdowns moved
        return self._listing_json

    def __len__(self) -> int:
        return len(self._tools)
