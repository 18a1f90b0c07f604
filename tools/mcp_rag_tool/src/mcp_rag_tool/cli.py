"""``mcp-rag-tool ingest PATH...`` (also ``mcp-rag-ingest PATH...``): bring the index up to date with files.

Uses the store the ``RAG_*`` settings name (``RAG_QDRANT_PATH`` or ``RAG_QDRANT_URL``), so that a
server started afterwards, or running against the same Qdrant server, searches what was ingested.
Progress goes to stderr as log lines; the summary to stdout. Exit status: 0 when every document
was indexed, 1 when some could not be read (they are named in the log), 2 for a usage error.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence
from pathlib import Path

import anyio
import anyio.to_thread

from mcp_rag_tool.chunking import ChunkLimits
from mcp_rag_tool.embeddings import Embedder
from mcp_rag_tool.index import load_embedder
from mcp_rag_tool.ingest import Ingester, IngestReport
from mcp_rag_tool.settings import IN_MEMORY, RagSettings
from mcp_rag_tool.store import StoreLocked, VectorStore
from mcp_rag_tool.tokens import TokenCounter, WordPieceCounter
from suite_common.logging import configure_logging
from suite_common.mcp_tool import CommandLine, load_settings

__all__ = ["format_report", "main", "run_ingest"]

PROG = "mcp-rag-tool ingest"


def main(argv: Sequence[str] | None = None) -> None:
    parser = argparse.ArgumentParser(
        prog=PROG,
        description=(
            "Ingest files and folders (.md, .markdown, .txt, .html, .htm, .pdf) into the index the RAG_* settings "
            "name. Unchanged documents are skipped, changed ones replaced, and documents that disappeared from "
            "a folder ingested before are removed. Sources are paths relative to each PATH."
        ),
    )
    parser.add_argument("paths", nargs="+", type=Path, metavar="PATH", help="a file or a folder (walked recursively)")
    args = parser.parse_args(argv)
    missing = [str(path) for path in args.paths if not path.exists()]
    if missing:
        parser.error(f"not found: {', '.join(missing)}")
    settings = load_settings(RagSettings, CommandLine(transport="stdio", host=None, port=None), prog=PROG)
    if settings.in_memory:
        raise SystemExit(
            f"{PROG}: RAG_QDRANT_PATH is {IN_MEMORY}, so the ingest would be lost when this command ends; "
            "set RAG_QDRANT_PATH to a folder or RAG_QDRANT_URL to a Qdrant server."
        )
    log_format = settings.log_format if "log_format" in settings.model_fields_set else "console"
    configure_logging(settings.log_level, log_format, stream=sys.stderr)  # stdout carries the report
    try:
        report = anyio.run(run_ingest, settings, list(args.paths))
    except StoreLocked as exc:
        raise SystemExit(f"{PROG}: {exc}. Stop that process first, or use a Qdrant server (RAG_QDRANT_URL).") from None
    print(format_report(report))
    raise SystemExit(1 if report.failed else 0)


async def run_ingest(
    settings: RagSettings,
    paths: Sequence[Path],
    *,
    embedder: Embedder | None = None,
    counter: TokenCounter | None = None,
) -> IngestReport:
    """Ingest ``paths`` into the configured store; each path's documents are pruned on their own."""
    store = await VectorStore.open(settings)
    own_embedder = embedder is None
    try:
        embedder = embedder or await load_embedder(settings)
        try:
            if counter is None:
                counter = await anyio.to_thread.run_sync(WordPieceCounter.bundled)
            await store.ensure_collections(embedder.dimension, embedder.name)
            limits = ChunkLimits(settings.chunk_max_tokens, settings.chunk_overlap_tokens, counter=counter)
            ingester = Ingester(store, embedder, limits, batch_size=settings.embed_batch_size)
            return await ingester.ingest_folders(paths)
        finally:
            if own_embedder:
                await embedder.aclose()
    finally:
        with anyio.CancelScope(shield=True):
            await store.close()


def format_report(report: IngestReport) -> str:
    rate = report.chunks / report.seconds if report.seconds > 0 else 0.0
    return (
        f"ingested {report.documents} documents: {report.added} added, {report.updated} updated, "
        f"{report.unchanged} unchanged, {report.removed} removed, {report.failed} failed; "
        f"{report.chunks} chunks embedded in {report.seconds:.1f} s ({rate:.1f} chunks/s)"
    )


if __name__ == "__main__":
    main()
