"""``mcp-rag-tool [--transport stdio|streamable-http] [--host H] [--port N]``.

Over stdio, stdout carries the protocol and nothing else: logs go to stderr. Over streamable
HTTP the MCP endpoint is ``/mcp``, next to ``GET /healthz`` and ``GET /readyz``.
"""

from __future__ import annotations

import argparse
from collections.abc import Sequence
from typing import Literal, cast

from mcp_rag_tool.server import build_server
from mcp_rag_tool.settings import RagSettings
from suite_common.logging import configure_logging
from suite_common.serve import serve

__all__ = ["main", "parse_args"]

Transport = Literal["stdio", "streamable-http"]


def parse_args(argv: Sequence[str] | None, settings: RagSettings) -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        prog="mcp-rag-tool",
        description="MCP server with one tool, search_documents, over the documents in RAG_DOCS_PATHS.",
    )
    parser.add_argument("--transport", choices=["stdio", "streamable-http"], default="stdio")
    parser.add_argument("--host", default=settings.host, help=f"HTTP only; default {settings.host}")
    parser.add_argument("--port", type=int, default=settings.port, help=f"HTTP only; default {settings.port}")
    return parser.parse_args(argv)


def main(argv: Sequence[str] | None = None) -> None:
    settings = RagSettings()
    args = parse_args(argv, settings)
    settings = settings.model_copy(update={"host": args.host, "port": args.port})
    # Before the server exists: the SDK only installs its own log handler when none is present.
    configure_logging(settings.log_level, settings.log_format)
    server = build_server(settings)
    transport = cast(Transport, args.transport)
    if transport == "stdio":
        server.run("stdio")
    else:
        serve(server.streamable_http_app(streamable_http_path="/mcp", host=settings.host), settings)


if __name__ == "__main__":
    main()
