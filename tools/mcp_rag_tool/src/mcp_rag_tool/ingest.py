"""Building the index: find the documents, chunk them, embed the chunks in batches, store them.

After an ingest the collection holds exactly the chunks of the documents found now: points
of documents that disappeared (or of chunks past a document's new end) are deleted.
"""

from __future__ import annotations

import time
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path

import anyio.to_thread

from mcp_rag_tool.chunking import SUPPORTED_SUFFIXES, Chunk, chunk_document, embedding_text
from mcp_rag_tool.embeddings import Embedder
from mcp_rag_tool.settings import RagSettings
from mcp_rag_tool.store import VectorStore
from suite_common.logging import get_logger

__all__ = ["DocumentFile", "IngestReport", "find_documents", "ingest", "load_chunks"]

_log = get_logger("mcp_rag_tool.ingest")


@dataclass(frozen=True)
class DocumentFile:
    path: Path
    source: str
    """``path`` relative to the configured folder it was found in (a configured file: its name)."""


@dataclass(frozen=True)
class IngestReport:
    documents: int
    chunks: int
    seconds: float
    missing_paths: tuple[str, ...]
    """Configured paths that do not exist."""


def find_documents(paths: Sequence[Path]) -> tuple[list[DocumentFile], list[Path]]:
    """The supported files under ``paths`` (recursively, hidden entries skipped) and the paths not found.

    Two files with the same relative path under two configured folders would be indistinguishable
    in results, so the first one wins and the other is logged and skipped.
    """
    found: dict[str, DocumentFile] = {}
    missing: list[Path] = []
    for root in paths:
        if not root.exists():
            missing.append(root)
            continue
        for file, source in _walk(root):
            if source in found:
                _log.warning("duplicate_document_skipped", source=source, path=str(file), kept=str(found[source].path))
                continue
            found[source] = DocumentFile(path=file, source=source)
    return list(found.values()), missing


def load_chunks(files: Sequence[DocumentFile], *, max_words: int, overlap_words: int) -> list[Chunk]:
    """Read and chunk every file; an unreadable file is logged and skipped, not fatal."""
    chunks: list[Chunk] = []
    for file in files:
        try:
            text = file.path.read_text(encoding="utf-8", errors="replace")
        except OSError as exc:
            _log.warning("document_unreadable", source=file.source, error=str(exc))
            continue
        chunks.extend(chunk_document(text, file.source, max_words=max_words, overlap_words=overlap_words))
    return chunks


async def ingest(settings: RagSettings, embedder: Embedder, store: VectorStore) -> IngestReport:
    started = time.perf_counter()
    files, missing = await anyio.to_thread.run_sync(find_documents, settings.docs_paths)
    for path in missing:
        _log.warning("docs_path_not_found", path=str(path))
    chunks = await anyio.to_thread.run_sync(
        lambda: load_chunks(files, max_words=settings.chunk_max_words, overlap_words=settings.chunk_overlap_words)
    )
    if await store.ensure_collection(embedder.dimension):
        _log.info("collection_created", collection=store.collection, dimension=embedder.dimension)

    kept: set[str] = set()
    for batch in _batches(chunks, settings.embed_batch_size):
        vectors = await embedder.embed([embedding_text(chunk) for chunk in batch])
        kept.update(await store.upsert(batch, vectors))
    await store.retain_only(kept)

    report = IngestReport(
        documents=len(files),
        chunks=len(chunks),
        seconds=round(time.perf_counter() - started, 3),
        missing_paths=tuple(str(path) for path in missing),
    )
    _log.info(
        "ingest_done",
        documents=report.documents,
        chunks=report.chunks,
        seconds=report.seconds,
        collection=store.collection,
    )
    return report


def _walk(root: Path) -> Iterator[tuple[Path, str]]:
    if root.is_file():
        if root.suffix.lower() in SUPPORTED_SUFFIXES:
            yield root, root.name
        return
    for file in sorted(root.rglob("*")):
        relative = file.relative_to(root)
        if any(part.startswith(".") for part in relative.parts):
            continue
        if file.suffix.lower() in SUPPORTED_SUFFIXES and file.is_file():
            yield file, relative.as_posix()


def _batches(chunks: Sequence[Chunk], size: int) -> Iterator[Sequence[Chunk]]:
    for start in range(0, len(chunks), size):
        yield chunks[start : start + size]
