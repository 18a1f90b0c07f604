"""The MCP server: ``search_documents``, ``list_sources`` and ``add_documents`` over one document index.

Each tool's body is a function of its own (``search_documents_tool(index, settings, ...)`` and so on), callable
without an MCP session; ``build_server`` only registers them, with the parameters the SDK publishes, and reads
the tenant a call acts for from its ``_meta`` (``caller_tenant``) when ``RAG_TENANT_COLLECTIONS`` is on.
"""

from __future__ import annotations

import time
from collections.abc import AsyncIterator, Awaitable, Callable, Mapping, Sequence
from contextlib import AbstractAsyncContextManager, asynccontextmanager
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
    format_no_tenant_documents,
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
from suite_common.wire import CALLER_META_KEY

__all__ = [
    "SEARCH_DOCUMENTS_DESCRIPTION",
    "SERVER_NAME",
    "ProgressReporter",
    "add_documents_tool",
    "build_server",
    "caller_tenant",
    "list_sources_tool",
    "search_documents_tool",
]

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


_READ_ONLY = ToolAnnotations(read_only_hint=True, idempotent_hint=True, open_world_hint=False)
_ADDS = ToolAnnotations(read_only_hint=False, destructive_hint=False, idempotent_hint=True, open_world_hint=False)
_INSTRUCTIONS = (
    "Use search_documents to look up facts in the indexed document collection before answering "
    "questions about it, and cite the sources of the passages you use. list_sources shows what "
    "the collection holds; add_documents adds to it."
)

ProgressReporter = Callable[[float, float | None, str | None], Awaitable[None]]
"""How ``add_documents`` reports progress: ``(progress, total, message)``, as ``Context.report_progress``."""


def _one_query_as_list(value: object) -> object:
    # Models often send a single query as a bare string; take it as the list of one it means.
    return [value] if isinstance(value, str) else value


# The tools' parameters as the SDK publishes them (their JSON Schema is read from these annotations).
_Queries = Annotated[list[str], BeforeValidator(_one_query_as_list), WithJsonSchema(_QUERIES_SCHEMA)]
_TopK = Annotated[int, Field(description=_TOP_K_DESCRIPTION)]
_Filter = Annotated[Any, WithJsonSchema(FILTER_SCHEMA)]
_SourcePrefix = Annotated[
    str | None, Field(description='Only documents under this folder or equal to this file, e.g. "guides/".')
]
_Limit = Annotated[int, Field(description=f"How many to list, 1 to {MAX_SOURCES_LISTED}.")]
_Documents = Annotated[list[NewDocument], Field(description="The documents to index.")]


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
    server: MCPServer[DocumentIndex] = MCPServer(
        SERVER_NAME, version=_package_version(), instructions=_INSTRUCTIONS, lifespan=_serving(index)
    )

    # The parameters' annotations are the published schema.
    @server.tool(
        name="search_documents",
        title="Search documents",
        description=SEARCH_DOCUMENTS_DESCRIPTION,
        annotations=_READ_ONLY,
    )
    async def search_documents(
        ctx: Context[DocumentIndex, Any], queries: _Queries, top_k: _TopK = 5, filter: _Filter = None
    ) -> Annotated[CallToolResult, SearchDocumentsOutput]:
        tenant = caller_tenant(settings, ctx.request_context.meta)
        return await search_documents_tool(index, settings, queries, top_k, filter, tenant=tenant)

    @server.tool(
        name="list_sources",
        title="List indexed documents",
        description=LIST_SOURCES_DESCRIPTION,
        annotations=_READ_ONLY,
    )
    async def list_sources(
        ctx: Context[DocumentIndex, Any], source_prefix: _SourcePrefix = None, limit: _Limit = 100
    ) -> Annotated[CallToolResult, ListSourcesOutput]:
        tenant = caller_tenant(settings, ctx.request_context.meta)
        return await list_sources_tool(index, source_prefix, limit, tenant=tenant)

    if settings.add_documents_enabled:

        @server.tool(
            name="add_documents",
            title="Add documents to the index",
            description=ADD_DOCUMENTS_DESCRIPTION,
            annotations=_ADDS,
        )
        async def add_documents(
            documents: _Documents, ctx: Context[DocumentIndex, Any]
        ) -> Annotated[CallToolResult, AddDocumentsOutput]:
            tenant = caller_tenant(settings, ctx.request_context.meta)
            return await add_documents_tool(index, documents, ctx.report_progress, tenant=tenant)

    add_health_routes(server, _readiness_of(index))
    return server


def caller_tenant(settings: RagSettings, meta: Mapping[str, Any] | None) -> str | None:
    """The tenant whose collection a call uses: ``None`` (the shared one) unless ``RAG_TENANT_COLLECTIONS``;
    then the tenant the gateway names in ``_meta["io.loopsuite/caller"]``, and a call without one is refused
    (``ToolError``): searching or writing the shared collection instead would mix tenants' documents."""
    if not settings.tenant_collections:
        return None
    caller = (meta or {}).get(CALLER_META_KEY)
    tenant = caller.get("tenant") if isinstance(caller, Mapping) else None
    if not isinstance(tenant, str) or not tenant.strip():
        raise ToolError(
            "This document index keeps each tenant's documents apart, and this call does not say which tenant it "
            f'acts for (_meta["{CALLER_META_KEY}"].tenant, which the MCP gateway sends). Call it through the gateway.'
        )
    return tenant


def _serving(index: DocumentIndex) -> Callable[[MCPServer[DocumentIndex]], AbstractAsyncContextManager[DocumentIndex]]:
    """The server's lifespan: the index opened and brought up to date in the background while it serves."""

    @asynccontextmanager
    async def lifespan(_: MCPServer[DocumentIndex]) -> AsyncIterator[DocumentIndex]:
        async with index.serving():
            yield index

    return lifespan


def _readiness_of(index: DocumentIndex) -> Callable[[Request], Awaitable[dict[str, str]]]:
    """``GET /readyz``'s answer: the index's status (ready once built)."""

    async def readiness(_: Request) -> dict[str, str]:
        return {"index": index.status}

    return readiness


async def search_documents_tool(
    index: DocumentIndex,
    settings: RagSettings,
    queries: Sequence[str],
    top_k: int,
    filter: object,
    *,
    tenant: str | None = None,
) -> CallToolResult:
    """The ``search_documents`` tool: the best passages for ``queries`` (in ``tenant``'s collection, when given);
    ``ToolError`` for what to change."""
    started = time.perf_counter()
    try:
        cleaned = validate_request(queries, top_k)
        search_filter = parse_filter(filter)
        await index.wait_ready()
        if await index.is_empty(tenant=tenant):
            if tenant is not None:
                return _result(format_no_tenant_documents(), structured_output([]))
            paths = _configured_paths(settings, index.startup_report)
            return _result(format_no_documents(paths), structured_output([]))
        hits = await index.search(cleaned, top_k, search_filter, tenant=tenant)
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


async def list_sources_tool(
    index: DocumentIndex, source_prefix: str | None, limit: int, *, tenant: str | None = None
) -> CallToolResult:
    """The ``list_sources`` tool: the indexed documents under ``source_prefix``, at most ``limit`` (``tenant``'s)."""
    if not 1 <= limit <= MAX_SOURCES_LISTED:
        raise ToolError(f"limit must be between 1 and {MAX_SOURCES_LISTED} (got {limit}).")
    prefix = (source_prefix or "").strip().lstrip("/") or None
    try:
        records = await index.sources(tenant=tenant)
    except IndexUnavailable as exc:
        raise ToolError(str(exc)) from exc
    output = list_output(select_sources(records, prefix), limit)
    return _result(format_sources(output, prefix), output)


async def add_documents_tool(
    index: DocumentIndex,
    documents: Sequence[NewDocument],
    report_progress: ProgressReporter,
    *,
    tenant: str | None = None,
) -> CallToolResult:
    """The ``add_documents`` tool: index ``documents`` (into ``tenant``'s collection, when given), reporting each one
    done to ``report_progress``."""
    sent = [-1]

    async def report(progress: IngestProgress) -> None:
        # Sent only when the caller asked for progress (a progressToken); the SDK drops it otherwise.
        # MCP wants each notification's progress higher than the last: documents done only grow.
        if progress.documents_done <= sent[0]:
            return
        sent[0] = progress.documents_done
        await report_progress(
            progress.documents_done,
            progress.documents_total,
            f"{progress.documents_done}/{progress.documents_total} documents, {progress.chunks} chunks",
        )

    try:
        added = await index.add(lambda known: validate_new_documents(documents, known), report, tenant=tenant)
    except (InvalidDocuments, IndexUnavailable) as exc:
        raise ToolError(str(exc)) from exc
    output = added_output(added)
    return _result(format_added(output), output)


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
