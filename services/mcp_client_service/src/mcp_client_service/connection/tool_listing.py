"""The tools of one server: listed to the last page, checked, published, and kept while it is away."""

from __future__ import annotations

import math
from collections.abc import Sequence

import anyio
from mcp import Client
from mcp_types import Tool

from mcp_client_service.config.schemas import DroppedTool, ToolListingFilter
from suite_common.logging import get_logger

__all__ = ["ToolListing", "list_all_tools"]

_log = get_logger("mcp_client_service.connection.tool_listing")

_MAX_TOOL_PAGES = 1_000
"""A server that pages forever is cut off here (and by the list timeout, whichever comes first)."""


async def list_all_tools(client: Client) -> list[Tool]:
    """Every page of ``tools/list``, following cursors to the end (the listing filter ends it at its cap)."""
    tools: list[Tool] = []
    cursor: str | None = None
    seen: set[str] = set()
    for _ in range(_MAX_TOOL_PAGES):
        page = await client.list_tools(cursor=cursor, cache_mode="bypass")
        tools.extend(page.tools)
        cursor = page.next_cursor
        if cursor is None:
            return tools
        if cursor in seen:
            raise RuntimeError("the server repeated a tools/list cursor")
        seen.add(cursor)
    raise RuntimeError(f"the server's tool list did not end within {_MAX_TOOL_PAGES} pages")


class ToolListing:
    """What one server's listings gave: its tools now, the last ones known, the ones dropped and why."""

    def __init__(self, server: str) -> None:
        self._server = server
        self.tools: tuple[Tool, ...] = ()
        """The server's valid tools while it has a session, as the server names them; empty otherwise."""
        self.known_tools: tuple[Tool, ...] = ()
        """The tools of the last successful listing, kept while the server is away: they stay
        listed as unavailable, and a call to one of them says "not ready", not "no such tool"."""
        self.invalid_tools: tuple[DroppedTool, ...] = ()
        """Tools of the last listing dropped by the schema check, and why."""
        self.task_only: frozenset[str] = frozenset()
        """The tools (as the server names them) that can only run as tasks: the gateway calls them
        as tasks (``connection.tasks``), and lists them without their ``execution`` (to its callers
        they are tools like any other)."""
        self.listed_at = -math.inf
        """When (``anyio.current_time``) the tools were last listed."""
        self._verdicts: dict[tuple[str | None, str], str | None] = {}
        """The schema check's verdict on each distinct tool, kept across sessions."""
        self._reported_no_tools = False

    def new_filter(self, max_tools: int) -> ToolListingFilter:
        """The schema check for one session's listings, remembering verdicts across sessions."""
        return ToolListingFilter(max_tools=max_tools, verdicts=self._verdicts)

    def withdraw(self) -> None:
        """The session has ended: no tools now (the known ones stay)."""
        self.tools = ()

    def publish(self, tools: Sequence[Tool], listing: ToolListingFilter) -> None:
        """Take a listing the filter has passed: log what it dropped or left out, and what changed."""
        self.listed_at = anyio.current_time()
        dropped: Sequence[DroppedTool] = listing.take_dropped()
        left_out = listing.take_left_out()
        if left_out:
            _log.warning(
                "mcp_server_too_many_tools",
                server=self._server,
                listed=len(tools),
                left_out=left_out,
                detail=(
                    f"a server's tools beyond the first {listing.max_tools} are left out "
                    "(MCP_CLIENT_MAX_TOOLS_PER_SERVER)"
                ),
            )
        before = {(tool.name, tool.reason) for tool in self.invalid_tools}
        for tool in dropped:
            if (tool.name, tool.reason) not in before:
                _log.warning(f"mcp_tool_{tool.kind}", server=self._server, tool=tool.name, reason=tool.reason)
        if not tools and not self._reported_no_tools:
            _log.warning(
                "mcp_server_no_valid_tools",
                server=self._server,
                dropped=len(dropped),
                detail="the server is connected but offers no tool the gateway can list",
            )
        self._reported_no_tools = not tools
        self.task_only = frozenset(tool.name for tool in tools if _task_only(tool))
        tools = [tool.model_copy(update={"execution": None}) if _task_only(tool) else tool for tool in tools]
        changed = tuple(tools) != self.tools
        if changed and self.known_tools:
            _log.info("mcp_server_tools_changed", server=self._server, tool_count=len(tools))
        self.tools = tuple(tools)
        self.invalid_tools = tuple(dropped)
        if tools:
            self.known_tools = self.tools


def _task_only(tool: Tool) -> bool:
    return tool.execution is not None and tool.execution.task_support == "required"
