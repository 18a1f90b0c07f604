"""The MCP server: one tool, ``search_documents``, over the index of the configured documents."""

from __future__ import annotations

from collections.abc import AsyncIterator, Sequence
from contextlib import asynccontextmanager
from importlib.metadata import PackageNotFoundError, version
from typing import Annotated

from mcp.server.mcpserver import MCPServer
from mcp.server.mcpserver.exceptions import ToolError
from mcp_types import CallToolResult, TextContent, ToolAnnotations
from pydantic import BeforeValidator, Field
from starlette.requests import Request

from mcp_rag_tool.embeddings import Embedder
from mcp_rag_tool.index import DocumentIndex, IndexUnavailable
from mcp_rag_tool.search import (
    MAX_QUERIES,
    MAX_QUERY_CHARS,
    MAX_TOP_K,
    InvalidSearchRequest,
    SearchDocumentsOutput,
    SearchHit,
    format_hits,
    format_no_documents,
    structured_output,
    validate_request,
)
from mcp_rag_tool.settings import RagSettings
from suite_common.mcp_tool import add_health_routes

__all__ = ["SEARCH_DOCUMENTS_DESCRIPTION", "SERVER_NAME", "build_server"]

SERVER_NAME = "mcp-rag-tool"

SEARCH_DOCUMENTS_DESCRIPTION = f"""\
Search the indexed documents (project documentation, notes, manuals) for passages that answer a \
question. Matching is by meaning, not exact words, so ask in plain language.

Pass one or more short queries; to widen recall, add rephrasings or the sub-questions of a \
complex question as separate queries (at most {MAX_QUERIES}). Passages found by several queries \
are returned once, with their best score.

Returns up to top_k passages, most relevant first, each as \
"[n] <source file> — <section heading> (score 0.xx)" followed by the passage text. The score is \
the cosine similarity to the closest query: compare scores within one answer rather than against \
a fixed threshold, and judge relevance by reading the passage. Cite the source file when you use \
a passage. If nothing relevant comes back, rephrase the query or say that the documents do not \
cover the question; do not invent an answer."""

_QUERIES_DESCRIPTION = (
    f"1 to {MAX_QUERIES} search queries, each a question or key phrase of at most {MAX_QUERY_CHARS} characters."
)
_TOP_K_DESCRIPTION = f"How many passages to return overall, 1 to {MAX_TOP_K}."


def build_server(settings: RagSettings, embedder: Embedder | None = None) -> MCPServer[DocumentIndex]:
    """The MCP server for ``settings``; ``embedder`` defaults to the bundled all-MiniLM-L6-v2.

    The index is built in the background when the server starts (its lifespan), so the MCP
    handshake answers at once; searches wait for it. Over HTTP it also serves ``GET /healthz``
    and ``GET /readyz`` (503 until the index is built, or if building it failed).
    """
    index = DocumentIndex(settings, embedder=embedder)

    @asynccontextmanager
    async def lifespan(_: MCPServer[DocumentIndex]) -> AsyncIterator[DocumentIndex]:
        async with index.serving():
            yield index

    server: MCPServer[DocumentIndex] = MCPServer(
        SERVER_NAME,
        version=_package_version(),
        instructions=(
            "Use search_documents to look up facts in the indexed document collection before answering "
            "questions about it, and cite the source files of the passages you use."
        ),
        lifespan=lifespan,
    )

    @server.tool(
        name="search_documents",
        title="Search documents",
        description=SEARCH_DOCUMENTS_DESCRIPTION,
        annotations=ToolAnnotations(read_only_hint=True, idempotent_hint=True, open_world_hint=False),
    )
    async def search_documents(
        queries: Annotated[list[str], BeforeValidator(_one_query_as_list), Field(description=_QUERIES_DESCRIPTION)],
        top_k: Annotated[int, Field(description=_TOP_K_DESCRIPTION)] = 5,
    ) -> Annotated[CallToolResult, SearchDocumentsOutput]:
        try:
            cleaned = validate_request(queries, top_k)
            report = await index.wait_ready()
            if report.chunks == 0:
                return _result(format_no_documents(_configured_paths(settings, report.missing_paths)), [])
            hits = await index.search(cleaned, top_k)
        except (InvalidSearchRequest, IndexUnavailable) as exc:
            raise ToolError(str(exc)) from exc
        return _result(format_hits(hits), hits)

    async def readiness(_: Request) -> dict[str, str]:
        return {"index": index.status}

    add_health_routes(server, readiness)

    return server


def _one_query_as_list(value: object) -> object:
    # Models often send a single query as a bare string; take it as the list of one it means.
    return [value] if isinstance(value, str) else value


def _result(text: str, hits: Sequence[SearchHit]) -> CallToolResult:
    return CallToolResult(
        content=[TextContent(type="text", text=text)],
        structured_content=structured_output(hits).model_dump(mode="json"),
    )


def _configured_paths(settings: RagSettings, missing: tuple[str, ...]) -> list[str]:
    return [f"{path} (not found)" if str(path) in missing else str(path) for path in settings.docs_paths]


def _package_version() -> str:
    try:
        return version("loopsuite-mcp-rag-tool")
    except PackageNotFoundError:  # running from a source tree that was never installed
        return "0.0.0"
