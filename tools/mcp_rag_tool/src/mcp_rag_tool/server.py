"""The MCP server: ``search_documents``, ``list_sources`` and ``add_documents`` over one document index."""

from __future__ import annotations

import time
from collections.abc import AsyncIterator, Awaitable, Callable, Sequence
from contextlib import asynccontextmanager
from importlib.metadata import PackageNotFoundError, version
from typing import Annotated, Any

from mcp.server.mcpserver import Context, MCPServer
from mcp.server.mcpserver.exceptions import ToolError
from mcp_types import CallToolResult, TextContent, ToolAnnotations
from pydantic import BaseModel, BeforeValidator, Field, WithJsonSchema
from starlette.requests import Request

from mcp_rag_tool.embeddings import Embedder
from mcp_rag_tool.index import DocumentIndex, IndexUnavailable
from mcp_rag_tool.ingest import IngestProgress, IngestReport
from mcp_rag_tool.rerank import PassageScorer
from mcp_rag_tool.search import (
    FILTER_SCHEMA,
    MAX_QUERIES,
    MAX_QUERY_CHARS,
    MAX_TOP_K,
    InvalidSearchRequest,
    SearchDocumentsOutput,
    format_hits,
    format_no_documents,
    format_no_match,
    parse_filter,
    structured_output,
    validate_request,
)
from mcp_rag_tool.settings import RagSettings
from mcp_rag_tool.sources import (
    MAX_DOCUMENT_CHARS,
    MAX_NEW_DOCUMENTS,
    MAX_SOURCES_LISTED,
    AddDocumentsOutput,
    InvalidDocuments,
    ListSourcesOutput,
    NewDocument,
    added_output,
    format_added,
    format_sources,
    list_output,
    select_sources,
    validate_new_documents,
)
from mcp_rag_tool.store import VectorStore
from mcp_rag_tool.tokens import TokenCounter
from suite_common.logging import get_logger
from suite_common.mcp_tool import add_health_routes

__all__ = ["SEARCH_DOCUMENTS_DESCRIPTION", "SERVER_NAME", "build_server"]

SERVER_NAME = "mcp-rag-tool"

_log = get_logger("mcp_rag_tool.server")

SEARCH_DOCUMENTS_DESCRIPTION = f"""\
Search the indexed documents (project documentation, notes, manuals) for passages that answer a \
question. Each query is matched both by meaning and by exact words, so plain-language questions \
and exact identifiers (error codes, option names, function names) both work.

Pass one or more short queries; to widen recall, add rephrasings or the sub-questions of a \
complex question as separate queries (at most {MAX_QUERIES}). Optionally narrow the search with \
filter: {{"source_prefix": "guides/"}} and/or {{"tags": ["billing"]}} (list_sources shows both).

Returns up to top_k passages, most relevant first, each as \
"[n] <source> — <section heading> (score 0.xx)" followed by the passage text. Scores run from 0 \
to 1: compare them within one answer rather than against a fixed threshold, and judge relevance \
by reading the passage. Cite the sources of the passages you use, e.g. [1]. If nothing relevant \
comes back, rephrase the query or say that the documents do not cover the question; do not \
invent an answer."""

LIST_SOURCES_DESCRIPTION = """\
List the indexed documents: source, title, tags and number of passages of each, sorted by source. \
Use it to see what the collection covers, or to find a source_prefix or tag for a \
search_documents filter."""

ADD_DOCUMENTS_DESCRIPTION = f"""\
Add documents to the index so that search_documents finds them: each has a source (a unique \
name; adding the same source again replaces it), its text (Markdown headings are understood), \
and optionally a title and tags. At most {MAX_NEW_DOCUMENTS} documents of {MAX_DOCUMENT_CHARS} \
characters per call."""

_QUERIES_DESCRIPTION = (
    f"1 to {MAX_QUERIES} search queries, each a question or key phrase of at most {MAX_QUERY_CHARS} characters; "
    "a single query may be given as a plain string."
)
# The published schema must accept what the handler accepts: gateways (ours included) validate
# arguments against it before the call, so an array-only schema refused a lone string that the
# handler would have taken. Array first: it is the form to prefer when a client picks a branch.
_QUERIES_SCHEMA: dict[str, Any] = {
    "anyOf": [
        {"type": "array", "items": {"type": "string"}},
        {"type": "string"},
    ],
    "description": _QUERIES_DESCRIPTION,
}
_TOP_K_DESCRIPTION = f"How many passages to return overall, 1 to {MAX_TOP_K}."


def build_server(
    settings: RagSettings,
    embedder: Embedder | None = None,
    *,
    scorer: PassageScorer | None = None,
    counter: TokenCounter | None = None,
    open_store: Callable[[RagSettings], Awaitable[VectorStore]] = VectorStore.open,
) -> MCPServer[DocumentIndex]:
    """The MCP server for ``settings``; ``embedder`` defaults to the configured one (the bundled MiniLM).

    The index is opened and brought up to date in the background when the server starts (its
    lifespan), so the MCP handshake answers at once; calls wait for it. Over HTTP it also serves
    ``GET /healthz`` and ``GET /readyz`` (503 until the index is ready, or if building it failed).
    """
    index = DocumentIndex(settings, embedder=embedder, scorer=scorer, counter=counter, open_store=open_store)

    @asynccontextmanager
    async def lifespan(_: MCPServer[DocumentIndex]) -> AsyncIterator[DocumentIndex]:
        async with index.serving():
            yield index

    server: MCPServer[DocumentIndex] = MCPServer(
        SERVER_NAME,
        version=_package_version(),
        instructions=(
            "Use search_documents to look up facts in the indexed document collection before answering "
            "questions about it, and cite the sources of the passages you use. list_sources shows what "
            "the collection holds; add_documents adds to it."
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
        queries: Annotated[list[str], BeforeValidator(_one_query_as_list), WithJsonSchema(_QUERIES_SCHEMA)],
        top_k: Annotated[int, Field(description=_TOP_K_DESCRIPTION)] = 5,
        filter: Annotated[Any, WithJsonSchema(FILTER_SCHEMA)] = None,
    ) -> Annotated[CallToolResult, SearchDocumentsOutput]:
        started = time.perf_counter()
        try:
            cleaned = validate_request(queries, top_k)
            search_filter = parse_filter(filter)
            await index.wait_ready()
            if index.chunk_count == 0:
                paths = _configured_paths(settings, index.startup_report)
                return _result(format_no_documents(paths), structured_output([]))
            hits = await index.search(cleaned, top_k, search_filter)
        except (InvalidSearchRequest, IndexUnavailable) as exc:
            raise ToolError(str(exc)) from exc
        _log.info(
            "search_done",
            queries=len(cleaned),
            top_k=top_k,
            filtered=bool(search_filter.source_prefix or search_filter.tags),
            hits=len(hits),
            milliseconds=round((time.perf_counter() - started) * 1000, 1),
        )
        if not hits and (search_filter.source_prefix or search_filter.tags):
            return _result(format_no_match(search_filter), structured_output([]))
        return _result(format_hits(hits), structured_output(hits))

    @server.tool(
        name="list_sources",
        title="List indexed documents",
        description=LIST_SOURCES_DESCRIPTION,
        annotations=ToolAnnotations(read_only_hint=True, idempotent_hint=True, open_world_hint=False),
    )
    async def list_sources(
        source_prefix: Annotated[
            str | None, Field(description='Only documents under this folder or equal to this file, e.g. "guides/".')
        ] = None,
        limit: Annotated[int, Field(description=f"How many to list, 1 to {MAX_SOURCES_LISTED}.")] = 100,
    ) -> Annotated[CallToolResult, ListSourcesOutput]:
        if not 1 <= limit <= MAX_SOURCES_LISTED:
            raise ToolError(f"limit must be between 1 and {MAX_SOURCES_LISTED} (got {limit}).")
        prefix = (source_prefix or "").strip().lstrip("/") or None
        try:
            records = await index.sources()
        except IndexUnavailable as exc:
            raise ToolError(str(exc)) from exc
        output = list_output(select_sources(records, prefix), limit)
        return _result(format_sources(output, prefix), output)

    if settings.add_documents_enabled:

        @server.tool(
            name="add_documents",
            title="Add documents to the index",
            description=ADD_DOCUMENTS_DESCRIPTION,
            annotations=ToolAnnotations(
                read_only_hint=False, destructive_hint=False, idempotent_hint=True, open_world_hint=False
            ),
        )
        async def add_documents(
            documents: Annotated[list[NewDocument], Field(description="The documents to index.")],
            ctx: Context[DocumentIndex, Any],
        ) -> Annotated[CallToolResult, AddDocumentsOutput]:
            sent = [-1]

            async def report_progress(progress: IngestProgress) -> None:
                # Sent only when the caller asked for progress (a progressToken); the SDK drops it otherwise.
                # MCP wants each notification's progress higher than the last: documents done only grow.
                if progress.documents_done <= sent[0]:
                    return
                sent[0] = progress.documents_done
                await ctx.report_progress(
                    progress.documents_done,
                    progress.documents_total,
                    f"{progress.documents_done}/{progress.documents_total} documents, {progress.chunks} chunks",
                )

            try:
                report = await index.add(lambda known: validate_new_documents(documents, known), report_progress)
            except (InvalidDocuments, IndexUnavailable) as exc:
                raise ToolError(str(exc)) from exc
            output = added_output(report)
            return _result(format_added(output), output)

    async def readiness(_: Request) -> dict[str, str]:
        return {"index": index.status}

    add_health_routes(server, readiness)

    return server


def _one_query_as_list(value: object) -> object:
    # Models often send a single query as a bare string; take it as the list of one it means.
    return [value] if isinstance(value, str) else value


def _result(text: str, structured: BaseModel) -> CallToolResult:
    return CallToolResult(
        content=[TextContent(type="text", text=text)], structured_content=structured.model_dump(mode="json")
    )


def _configured_paths(settings: RagSettings, report: IngestReport | None) -> Sequence[str]:
    missing = set(report.missing_paths) if report is not None else set()
    return [f"{path} (not found)" if str(path) in missing else str(path) for path in settings.docs_paths]


def _package_version() -> str:
    try:
        return version("loopsuite-mcp-rag-tool")
    except PackageNotFoundError:  # running from a source tree that was never installed
        return "0.0.0"
