"""``mcp-rag-tool ingest PATH...`` (also ``mcp-rag-ingest PATH...``): bring the index up to date with files.

Uses the store the ``RAG_*`` settings name (``RAG_QDRANT_PATH`` or ``RAG_QDRANT_URL``), so that a
server started afterwards, or running against the same Qdrant server, searches what was ingested.
Progress goes to stderr: a progress bar on a terminal (documents and chunks done, rate, time left),
else a line every few seconds; the summary goes to stdout. Exit status: 0 when every document
was indexed, 1 when some could not be read (they are named in the log), 2 for a usage error.
"""

from __future__ import annotations

import argparse
import sys
import time
from collections.abc import Sequence
from pathlib import Path
from typing import TextIO

import anyio
import anyio.to_thread

from mcp_rag_tool.chunking import ChunkLimits
from mcp_rag_tool.embeddings import Embedder
from mcp_rag_tool.index import load_embedder
from mcp_rag_tool.ingest import Ingester, IngestProgress, IngestReport, ProgressListener
from mcp_rag_tool.settings import IN_MEMORY, RagSettings
from mcp_rag_tool.store import StoreLocked, VectorStore
from mcp_rag_tool.tokens import TokenCounter, WordPieceCounter
from suite_common.logging import configure_logging
from suite_common.mcp_tool import CommandLine, load_settings

__all__ = ["ProgressBar", "format_progress", "format_report", "main", "run_ingest"]

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
    # The bar says what the periodic ingest_progress log lines would: keep those out of its way.
    level = settings.log_level if "log_level" in settings.model_fields_set else "warning"
    log_format = settings.log_format if "log_format" in settings.model_fields_set else "console"
    configure_logging(level, log_format, stream=sys.stderr)  # stdout carries the report
    bar = ProgressBar(sys.stderr)
    try:
        report = anyio.run(lambda: run_ingest(settings, list(args.paths), on_progress=bar.update))
    except StoreLocked as exc:
        raise SystemExit(f"{PROG}: {exc}. Stop that process first, or use a Qdrant server (RAG_QDRANT_URL).") from None
    finally:
        bar.close()
    print(format_report(report))
    raise SystemExit(1 if report.failed else 0)


async def run_ingest(
    settings: RagSettings,
    paths: Sequence[Path],
    *,
    embedder: Embedder | None = None,
    counter: TokenCounter | None = None,
    on_progress: ProgressListener | None = None,
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
            return await ingester.ingest_folders(paths, on_progress=on_progress)
        finally:
            if own_embedder:
                await embedder.aclose()
    finally:
        with anyio.CancelScope(shield=True):
            await store.close()


def format_progress(progress: IngestProgress) -> str:
    """``documents 120/317 · 3,120 chunks · 14.2 chunks/s · 6m12s left``, with a bar in front."""
    total = max(progress.documents_total, 1)
    filled = round(20 * progress.documents_done / total)
    left = progress.seconds_left
    eta = "" if left is None else f" · {_duration(left)} left"
    return (
        f"[{'#' * filled}{'.' * (20 - filled)}] documents {progress.documents_done}/{progress.documents_total}"
        f" · {progress.chunks:,} chunks · {progress.chunks_per_second:.1f} chunks/s{eta}"
    )


class ProgressBar:
    """Redraws one line on a terminal; elsewhere (a pipe, a CI log) writes a line every ``interval`` seconds."""

    def __init__(self, stream: TextIO, *, interval: float = 5.0) -> None:
        self._stream = stream
        self._tty = stream.isatty()
        self._interval = interval
        self._last_line = -interval
        self._drawn = False

    async def update(self, progress: IngestProgress) -> None:
        line = format_progress(progress)
        if self._tty:
            self._stream.write(f"\r\x1b[2K{line}")
            self._drawn = True
        elif (
            time.monotonic() - self._last_line >= self._interval or progress.documents_done == progress.documents_total
        ):
            self._last_line = time.monotonic()
            self._stream.write(line + "\n")
        self._stream.flush()

    def close(self) -> None:
        if self._drawn:
            self._stream.write("\n")
            self._stream.flush()
            self._drawn = False


def _duration(seconds: float) -> str:
    minutes, secs = divmod(round(seconds), 60)
    return f"{minutes}m{secs:02d}s" if minutes else f"{secs}s"


def format_report(report: IngestReport) -> str:
    rate = report.chunks / report.seconds if report.seconds > 0 else 0.0
    return (
        f"ingested {report.documents} documents: {report.added} added, {report.updated} updated, "
        f"{report.unchanged} unchanged, {report.removed} removed, {report.failed} failed; "
        f"{report.chunks} chunks embedded in {report.seconds:.1f} s ({rate:.1f} chunks/s)"
    )


if __name__ == "__main__":
    main()
