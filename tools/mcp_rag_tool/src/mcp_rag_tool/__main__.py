"""``mcp-rag-tool [--transport stdio|streamable-http] [--host H] [--port N]``, also ``python -m mcp_rag_tool``;
``mcp-rag-tool ingest PATH...`` ingests files into the configured index (see ``mcp_rag_tool.cli``)."""

from __future__ import annotations

import sys
from collections.abc import Sequence

from mcp_rag_tool import cli
from mcp_rag_tool.server import build_server
from mcp_rag_tool.settings import RagSettings
from suite_common.mcp_tool import run_tool_server

__all__ = ["main"]


def main(argv: Sequence[str] | None = None) -> None:
    arguments = list(sys.argv[1:] if argv is None else argv)
    if arguments[:1] == ["ingest"]:
        cli.main(arguments[1:])
        return
    run_tool_server(
        build_server,
        RagSettings,
        arguments,
        prog="mcp-rag-tool",
        description=(
            "MCP server with search_documents, list_sources and add_documents over the documents in "
            "RAG_DOCS_PATHS. `mcp-rag-tool ingest PATH...` ingests files into the same index instead."
        ),
    )


if __name__ == "__main__":
    main()
