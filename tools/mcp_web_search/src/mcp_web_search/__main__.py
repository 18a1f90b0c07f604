"""``mcp-web-search [--transport stdio|streamable-http] [--host H] [--port N]``, also ``python -m mcp_web_search``."""

from __future__ import annotations

import argparse
from collections.abc import Sequence

from pydantic import ValidationError

from mcp_web_search.server import build_server
from mcp_web_search.settings import WebSearchSettings
from suite_common.logging import configure_logging
from suite_common.serve import serve

__all__ = ["main"]


def _parse_args(argv: Sequence[str] | None, settings: WebSearchSettings) -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        prog="mcp-web-search",
        description="MCP server with a web_search tool. Configure it with WEB_SEARCH_* environment variables.",
    )
    parser.add_argument(
        "--transport",
        choices=["stdio", "streamable-http"],
        default="stdio",
        help="stdio (spawned by an MCP client; the default) or streamable-http (MCP at /mcp, health at /healthz).",
    )
    parser.add_argument("--host", default=settings.host, help=f"HTTP listen address (default {settings.host}).")
    parser.add_argument("--port", type=int, default=settings.port, help=f"HTTP port (default {settings.port}).")
    return parser.parse_args(argv)


def main(argv: Sequence[str] | None = None) -> None:
    try:
        settings = WebSearchSettings()
    except ValidationError as exc:
        # One readable line per bad variable rather than a traceback.
        raise SystemExit(f"mcp-web-search: invalid WEB_SEARCH_* settings:\n{exc}") from None
    args = _parse_args(argv, settings)
    settings = settings.model_copy(update={"host": args.host, "port": args.port})
    server = build_server(settings)
    # After build_server: the SDK installs its own log handler, ours replaces it. Logs go to
    # stderr, so over stdio stdout carries nothing but the protocol.
    configure_logging(settings.log_level, settings.log_format)
    if args.transport == "stdio":
        server.run("stdio")
    else:
        serve(server.streamable_http_app(streamable_http_path="/mcp", host=settings.host), settings)


if __name__ == "__main__":
    main()
