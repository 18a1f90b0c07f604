"""``mcp-web-search [--transport stdio|streamable-http] [--host H] [--port N]``, also ``python -m mcp_web_search``."""

from __future__ import annotations

from collections.abc import Sequence

from mcp_web_search.server import build_server
from mcp_web_search.settings import WebSearchSettings
from suite_common.mcp_tool import run_tool_server

__all__ = ["main"]


def main(argv: Sequence[str] | None = None) -> None:
    run_tool_server(
        build_server,
        WebSearchSettings,
        argv,
        prog="mcp-web-search",
        description="MCP server with a web_search tool. Configure it with WEB_SEARCH_* environment variables.",
    )


if __name__ == "__main__":
    main()
