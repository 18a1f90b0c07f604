"""``mcp-rag-tool [--transport stdio|streamable-http] [--host H] [--port N]``, also ``python -m mcp_rag_tool``."""

from __future__ import annotations

from collections.abc import Sequence

from mcp_rag_tool.server import build_server
from mcp_rag_tool.settings import RagSettings
from suite_common.mcp_tool import run_tool_server

__all__ = ["main"]


def main(argv: Sequence[str] | None = None) -> None:
    run_tool_server(
        build_server,
        RagSettings,
        argv,
        prog="mcp-rag-tool",
        description="MCP server with one tool, search_documents, over the documents in RAG_DOCS_PATHS.",
    )


if __name__ == "__main__":
    main()
