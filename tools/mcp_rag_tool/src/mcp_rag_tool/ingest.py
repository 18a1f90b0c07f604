"""Building the index incrementally: find documents, skip the unchanged, re-chunk and re-embed the rest.

Each document is identified by its ``source`` (its path relative to the folder it was found
in, or the name it was added under) and fingerprinted by the sha256 of its bytes and of the
settings that shape its chunks (embedder, chunk sizes, parsers). A document whose fingerprint
is unchanged costs one hash; a changed one is chunked, embedded in batches shared with other
documents, stored, and only then replaces the old version (see ``SourceRecord`` for how);
a document that disappeared from a folder is removed. Each document remembers its origin, the
folder it was found in (the same whether the server's start-up ingest or the CLI found it, so
the two agree) or ``api`` for ``add_documents``. A CLI ingest prunes only documents of the
folders it was given; the server's start-up ingest (``prune_other_folders``) makes the files
in the index mirror its configured folders, so documents of a folder no longer configured (or
of a temporary folder someone served from the same store) do not linger. Documents added
through the API are never pruned.
"""

from __future__ import annotations

import hashlib
import time
from collections.abc import Awaitable, Callable, Iterator, Sequence
from dataclasses import dataclass, field, replace
from datetime import UTC, datetime
from pathlib import Path

import anyio.to_thread
import numpy as np
import numpy.typing as npt

from mcp_rag_tool import bm25
from mcp_rag_tool.bm25 import SparseVector
from mcp_rag_tool.chunking import Chunk, ChunkLimits, chunk_sections, embedding_text
from mcp_rag_tool.documents import SUPPORTED_SUFFIXES, DocumentKind, UnreadableDocument, kind_of, parse_document
from mcp_rag_tool.embeddings import Embedder
from mcp_rag_tool.points import SCHEMA_VERSION, SourceRecord, chunk_point_id
from mcp_rag_tool.store import VectorStore
from suite_common.logging import get_logger

__all__ = [
    "API_ORIGIN",
    "DocumentFile",
    "DocumentInput",
    "IngestProgress",
    "IngestReport",
    "Ingester",
    "ProgressListener",
    "find_documents",
    "folder_origin",
]

API_ORIGIN = "api"
_PARSER_VERSION = 2  # bump when parsing or chunking changes what a document's chunks are
_STORE_BATCH = 256  # embedded chunks written to Qdrant per request
_EMBED_GROUP = 4
"""Batches handed to the embedder per call: it sorts a call's texts by length before batching them,
so that a batch is padded to similar lengths, not to the longest chunk of four documents' worth."""
_LISTENER_SECONDS = 0.25  # a progress listener (a bar, MCP notifications) hears at most this often

_log = get_logger("mcp_rag_tool.ingest")


_FOLDER_PREFIX = "folder:"


def folder_origin(root: Path) -> str:
    """The origin of documents found under ``root``: its absolute path."""
    return f"{_FOLDER_PREFIX}{root.resolve()}"


@dataclass(frozen=True)
class DocumentFile:
    path: Path
    source: str
    """``path`` relative to the folder it was found in (a file given directly: its name)."""


@dataclass(frozen=True)
class DocumentInput:
    """A document to index: its bytes and how to read them."""

    source: str
    kind: DocumentKind
    data: bytes
    origin: str
    title: str | None = None
    tags: tuple[str, ...] = ()


@dataclass(frozen=True)
class IngestProgress:
    """How far an ingest has come: what a progress bar or an MCP progress notification shows."""

    documents_done: int
    documents_total: int
    chunks: int
    """Chunks embedded so far."""
    seconds: float

    @property
    def chunks_per_second(self) -> float:
        return self.chunks / self.seconds if self.seconds > 0 else 0.0

    @property
    def seconds_left(self) -> float | None:
        """Estimated from the documents' pace so far; ``None`` before there is a pace."""
        if self.documents_done == 0 or self.seconds <= 0:
            return None
        return self.seconds / self.documents_done * (self.documents_total - self.documents_done)


ProgressListener = Callable[[IngestProgress], Awaitable[None]]


@dataclass
class IngestReport:
    """What one ingest did; ``sources`` holds the outcome per source (``added``, ``updated`` ...)."""

    added: int = 0
    updated: int = 0
    unchanged: int = 0
    removed: int = 0
    failed: int = 0
    chunks: int = 0
    """Chunks embedded and stored by this ingest (unchanged documents' chunks not counted)."""
    seconds: float = 0.0
    missing_paths: tuple[str, ...] = ()
    outcomes: dict[str, str] = field(default_factory=dict)

    @property
    def documents(self) -> int:
        return self.added + self.updated + self.unchanged + self.failed

    def note(self, source: str, outcome: str) -> None:
        self.outcomes[source] = outcome
        if outcome in ("added", "updated", "unchanged", "removed", "failed"):
            setattr(self, outcome, getattr(self, outcome) + 1)


def find_documents(paths: Sequence[Path]) -> tuple[list[tuple[Path, list[DocumentFile]]], list[Path]]:
    """The supported files under each of ``paths`` (recursively, hidden entries skipped), and the paths not found.

    Two files with the same relative path under two configured folders would be indistinguishable
    in results, so the first one wins and the other is logged and skipped.
    """
    seen: dict[str, Path] = {}
    found: list[tuple[Path, list[DocumentFile]]] = []
    missing: list[Path] = []
    for root in paths:
        if not root.exists():
            missing.append(root)
            continue
        files: list[DocumentFile] = []
        for file, source in _walk(root):
            if source in seen:
                _log.warning("duplicate_document_skipped", source=source, path=str(file), kept=str(seen[source]))
                continue
            seen[source] = file
            files.append(DocumentFile(path=file, source=source))
        found.append((root, files))
    return found, missing


class Ingester:
    """Writes documents into a ``VectorStore``; one ingest at a time (the caller serialises)."""

    def __init__(
        self,
        store: VectorStore,
        embedder: Embedder,
        limits: ChunkLimits,
        *,
        batch_size: int = 32,
        progress_seconds: float = 2.0,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self._store = store
        self._embedder = embedder
        self._limits = limits
        self._batch_size = batch_size
        self._progress_seconds = progress_seconds
        self._clock = clock
        settings_id = f"{SCHEMA_VERSION}|{_PARSER_VERSION}|{embedder.name}|{limits.max_tokens}|{limits.overlap_tokens}"
        self._settings_digest = hashlib.sha256(settings_id.encode()).hexdigest()[:16]

    async def ingest_folders(
        self,
        roots: Sequence[Path],
        *,
        origin: Callable[[Path], str] = folder_origin,
        prune_other_folders: bool = False,
        on_progress: ProgressListener | None = None,
    ) -> IngestReport:
        """Bring the documents under ``roots`` up to date, and remove those of their origins no longer there.

        A root that does not exist counts as empty (its documents are removed) and is reported.
        With ``prune_other_folders``, documents found in any other folder are removed too.
        """
        started = self._clock()
        found, missing = await anyio.to_thread.run_sync(find_documents, list(roots))
        for path in missing:
            _log.warning("docs_path_not_found", path=str(path))
        origins = {origin(root) for root in roots}
        inputs = [(file, origin(root)) for root, files in found for file in files]
        report = IngestReport(missing_paths=tuple(str(path) for path in missing))
        known = await self._store.sources()
        present = {file.source for file, _ in inputs}
        await self._write([_file_item(file, file_origin) for file, file_origin in inputs], known, report, on_progress)
        gone = [
            record
            for record in known.values()
            if record.source not in present
            and (record.origin in origins or (prune_other_folders and record.origin.startswith(_FOLDER_PREFIX)))
        ]
        await self._remove(gone, report)
        report.seconds = round(self._clock() - started, 3)
        self._log_done(report)
        return report

    async def add(
        self, documents: Sequence[DocumentInput], on_progress: ProgressListener | None = None
    ) -> IngestReport:
        """Index documents given whole (``add_documents``); the same source again replaces its previous version."""
        started = self._clock()
        report = IngestReport()
        known = await self._store.sources()
        await self._write(
            [(document.source, _constant(document)) for document in documents], known, report, on_progress
        )
        report.seconds = round(self._clock() - started, 3)
        self._log_done(report)
        return report

    # --- internals -----------------------------------------------------------------------------

    async def _write(
        self,
        items: Sequence[tuple[str, Callable[[], DocumentInput]]],
        known: dict[str, SourceRecord],
        report: IngestReport,
        on_progress: ProgressListener | None = None,
    ) -> None:
        """Index each ``(source, load)`` whose fingerprint changed; ``load`` runs in a worker thread."""
        pipeline = _Pipeline()
        progress = _Progress(len(items), self._clock, self._progress_seconds, on_progress)
        for number, (source, load) in enumerate(items, start=1):
            try:
                document, content_hash = await anyio.to_thread.run_sync(self._load, load)
            except OSError as exc:  # keep what the index has of it
                _log.warning("document_unreadable", source=source, error=str(exc))
                report.note(source, "failed")
                continue
            previous = known.get(source)
            if previous is not None and previous.content_hash == content_hash and not previous.pending_hash:
                report.note(source, "unchanged")
                await progress.tick(number, report.chunks)
                continue
            try:
                record, chunks = await anyio.to_thread.run_sync(self._chunk, document, content_hash)
            except UnreadableDocument as exc:
                _log.warning("document_unreadable", source=source, error=str(exc))
                report.note(source, "failed")
                continue
            report.note(source, "updated" if previous is not None and previous.committed else "added")
            pipeline.add(record, chunks, previous)
            group = self._batch_size * _EMBED_GROUP
            while pipeline.to_embed >= group:
                report.chunks += await self._embed(pipeline, group)
                await progress.tick(number - 1, report.chunks)
            if pipeline.to_store >= _STORE_BATCH:
                await self._store_flush(pipeline)
            await progress.tick(number, report.chunks)
        while pipeline.to_embed:
            report.chunks += await self._embed(pipeline, self._batch_size * _EMBED_GROUP)
        await self._store_flush(pipeline)
        await progress.tick(len(items), report.chunks, final=True)

    async def _embed(self, pipeline: _Pipeline, size: int) -> int:
        """Embed up to ``size`` waiting chunks (dense and BM25 vectors); they wait to be stored."""
        chunks, records = pipeline.take(size)
        texts = [embedding_text(chunk) for chunk in chunks]
        dense = await self._embedder.embed(texts)
        sparse = await anyio.to_thread.run_sync(lambda: [bm25.document_vector(text) for text in texts])
        pipeline.embedded(chunks, records, dense, sparse)
        return len(chunks)

    async def _store_flush(self, pipeline: _Pipeline) -> None:
        """Announce new versions, store their embedded chunks, then commit the documents now complete."""
        await self._store.write_records(pipeline.take_announcements())
        chunks, records, dense, sparse = pipeline.take_embedded()
        await self._store.upsert_chunks(chunks, records, dense, sparse)
        complete, stale, document_vectors = pipeline.take_complete()
        await self._store.delete_chunks(stale)
        await self._store.write_document_vectors(document_vectors)
        await self._store.write_records(complete)

    async def _remove(self, records: list[SourceRecord], report: IngestReport) -> None:
        if not records:
            return
        await self._store.remove_documents(records)
        for record in records:
            report.note(record.source, "removed")
        _log.info("documents_removed", count=len(records), sources=[record.source for record in records[:20]])

    def _load(self, load: Callable[[], DocumentInput]) -> tuple[DocumentInput, str]:
        document = load()
        digest = hashlib.sha256(self._settings_digest.encode())
        fields = (document.origin, document.kind, document.title or "", ",".join(document.tags))
        digest.update("\0".join(("", *fields, "")).encode())
        digest.update(document.data)
        return document, digest.hexdigest()

    def _chunk(self, document: DocumentInput, content_hash: str) -> tuple[SourceRecord, list[Chunk]]:
        parsed = parse_document(document.source, document.data, document.kind, title=document.title, tags=document.tags)
        chunks = chunk_sections(parsed.sections, document.source, parsed.title, self._limits)
        record = SourceRecord(
            source=document.source,
            title=parsed.title,
            tags=parsed.tags,
            kind=parsed.kind,
            origin=document.origin,
            content_hash=content_hash,
            chunks=len(chunks),
            updated_at=datetime.now(UTC).isoformat(timespec="seconds"),
            link_list=parsed.link_list,
        )
        return record, chunks

    def _log_done(self, report: IngestReport) -> None:
        _log.info(
            "ingest_done",
            added=report.added,
            updated=report.updated,
            unchanged=report.unchanged,
            removed=report.removed,
            failed=report.failed,
            chunks=report.chunks,
            seconds=report.seconds,
            collection=self._store.collection,
        )


class _Pipeline:
    """Documents on their way into the store: chunks to embed, embedded chunks to store, versions to commit.

    Embedding goes in batches of ``RAG_EMBED_BATCH_SIZE`` chunks and storing in larger ones
    (``_STORE_BATCH``): each write to Qdrant local mode costs far more than its size suggests.
    """

    def __init__(self) -> None:
        self._chunks: list[Chunk] = []
        self._records: list[SourceRecord] = []
        self._embedded: tuple[list[Chunk], list[SourceRecord], list[list[float]], list[SparseVector]] = (
            [],
            [],
            [],
            [],
        )
        self._announcements: list[SourceRecord] = []
        self._waiting: dict[str, int] = {}
        self._complete: list[SourceRecord] = []
        self._stale: dict[str, set[str]] = {}
        self._vector_sums: dict[str, npt.NDArray[np.float64]] = {}
        """Per document being written, the sum of its embedded chunks' unit vectors: its document vector."""

    @property
    def to_embed(self) -> int:
        return len(self._chunks)

    @property
    def to_store(self) -> int:
        return len(self._embedded[0])

    def add(self, record: SourceRecord, chunks: Sequence[Chunk], previous: SourceRecord | None) -> None:
        """Queue a new version of a document; ``previous`` is what the store has of it."""
        fresh = {chunk_point_id(record.source, record.content_hash, chunk.position) for chunk in chunks}
        self._stale[record.source] = (previous.point_ids() if previous is not None else set()) - fresh
        base = previous if previous is not None else replace(record, content_hash="", chunks=0)
        self._announcements.append(replace(base, pending_hash=record.content_hash, pending_chunks=len(chunks)))
        if chunks:
            self._chunks.extend(chunks)
            self._records.extend([record] * len(chunks))
            self._waiting[record.source] = len(chunks)
        else:
            self._complete.append(record)

    def take(self, size: int) -> tuple[list[Chunk], list[SourceRecord]]:
        chunks, self._chunks = self._chunks[:size], self._chunks[size:]
        records, self._records = self._records[:size], self._records[size:]
        return chunks, records

    def embedded(
        self,
        chunks: Sequence[Chunk],
        records: Sequence[SourceRecord],
        dense: Sequence[list[float]],
        sparse: Sequence[SparseVector],
    ) -> None:
        stored_chunks, stored_records, stored_dense, stored_sparse = self._embedded
        for record, vector in zip(records, dense, strict=True):
            unit = np.asarray(vector, dtype=np.float64)
            norm = np.linalg.norm(unit)
            unit = unit / norm if norm > 0 else unit
            if record.source in self._vector_sums:
                self._vector_sums[record.source] += unit
            else:
                self._vector_sums[record.source] = unit
        stored_chunks.extend(chunks)
        stored_records.extend(records)
        stored_dense.extend(dense)
        stored_sparse.extend(sparse)

    def take_announcements(self) -> list[SourceRecord]:
        announcements, self._announcements = self._announcements, []
        return announcements

    def take_embedded(self) -> tuple[list[Chunk], list[SourceRecord], list[list[float]], list[SparseVector]]:
        embedded, self._embedded = self._embedded, ([], [], [], [])
        for record in embedded[1]:
            self._waiting[record.source] -= 1
            if self._waiting[record.source] == 0:
                del self._waiting[record.source]
                self._complete.append(record)
        return embedded

    def take_complete(
        self,
    ) -> tuple[list[SourceRecord], set[str], list[tuple[SourceRecord, list[float] | None]]]:
        """The documents all of whose chunks are stored, the chunk ids of their other versions, and
        their document vectors (the normalised mean of their chunks' unit vectors; ``None`` without chunks)."""
        complete, self._complete = self._complete, []
        stale = {point for record in complete for point in self._stale.pop(record.source, set())}
        vectors: list[tuple[SourceRecord, list[float] | None]] = []
        for record in complete:
            total = self._vector_sums.pop(record.source, None)
            norm = float(np.linalg.norm(total)) if total is not None else 0.0
            vectors.append((record, (total / norm).tolist() if total is not None and norm > 0 else None))
        return complete, stale, vectors


class _Progress:
    """Logs ``ingest_progress`` at most every ``interval`` seconds, so long ingests show they advance,
    and tells a listener (a progress bar, MCP progress notifications) more often."""

    def __init__(
        self, total: int, clock: Callable[[], float], interval: float, listener: ProgressListener | None = None
    ) -> None:
        self._total = total
        self._clock = clock
        self._interval = interval
        self._listener = listener
        self._started = clock()
        self._last = self._started
        self._last_heard = self._started - _LISTENER_SECONDS

    async def tick(self, done: int, chunks: int, *, final: bool = False) -> None:
        now = self._clock()
        if self._listener is not None and (final or now - self._last_heard >= _LISTENER_SECONDS):
            self._last_heard = now
            await self._listener(IngestProgress(done, self._total, chunks, now - self._started))
        if now - self._last < self._interval and not (final and now - self._started >= self._interval):
            return
        self._last = now
        elapsed = max(now - self._started, 1e-9)
        _log.info(
            "ingest_progress",
            documents=f"{done}/{self._total}",
            chunks=chunks,
            chunks_per_second=round(chunks / elapsed, 1),
            seconds=round(elapsed, 1),
        )


def _file_item(file: DocumentFile, origin: str) -> tuple[str, Callable[[], DocumentInput]]:
    kind = kind_of(file.source) or "text"  # _walk yields supported suffixes only

    def load() -> DocumentInput:
        return DocumentInput(source=file.source, kind=kind, data=file.path.read_bytes(), origin=origin)

    return file.source, load


def _constant(document: DocumentInput) -> Callable[[], DocumentInput]:
    return lambda: document


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
