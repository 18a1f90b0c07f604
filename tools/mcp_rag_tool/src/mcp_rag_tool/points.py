"""What the store's Qdrant points hold: their ids, their payloads, and the values read back from them.

A chunk's point (``chunk_point_id``: its source, its version's content hash, its position) carries
``chunk_payload`` and two named vectors, ``DENSE`` and ``SPARSE``; a document's point (``source_point_id``)
carries its ``SourceRecord`` in the sources collection and its document vector in the documents
collection (``store`` says what each collection is for). ``SearchFilter`` filters on the payload fields
``source_prefixes`` and ``tags``; ``SearchHit`` is a chunk as a search finds it. ``SCHEMA_VERSION``
changes whenever any of this does. Pure: no client, no I/O.
"""

from __future__ import annotations

import uuid
from dataclasses import asdict, dataclass
from pathlib import PurePosixPath
from typing import Any

from qdrant_client import models

from mcp_rag_tool.bm25 import SparseVector
from mcp_rag_tool.chunking import Chunk
from mcp_rag_tool.dense_index import DenseChunk
from mcp_rag_tool.index_rows import prefix_candidates
from mcp_rag_tool.sparse_index import IndexedChunk

__all__ = [
    "DENSE",
    "SCHEMA_VERSION",
    "SPARSE",
    "SearchFilter",
    "SearchHit",
    "SourceRecord",
    "chunk_payload",
    "chunk_point_id",
    "dense_vector",
    "document_row",
    "hit_from_payload",
    "hit_from_point",
    "indexed_chunk",
    "record_from_payload",
    "record_payload",
    "source_point_id",
    "source_prefixes",
]

DENSE = "dense"
SPARSE = "bm25"
SCHEMA_VERSION = 2
"""Bumped when the layout of points changes; a collection of another version is rebuilt."""

_NAMESPACE = uuid.uuid5(uuid.NAMESPACE_URL, "https://github.com/loopsuite/mcp-rag-tool/chunk")


def chunk_point_id(source: str, content_hash: str, position: int) -> str:
    """A chunk of one version of a document always gets the same id: re-ingesting it overwrites it."""
    return str(uuid.uuid5(_NAMESPACE, f"{source}\0{content_hash}\0{position}"))


def source_point_id(source: str) -> str:
    """A document's point, in the sources collection and in the document vectors' one."""
    return str(uuid.uuid5(_NAMESPACE, f"source\0{source}"))


def source_prefixes(source: str) -> list[str]:
    """Every folder a source lies in ("a/", "a/b/") and the source itself: what a prefix filter matches."""
    parts = PurePosixPath(source).parts
    return [*("/".join(parts[: depth + 1]) + "/" for depth in range(len(parts) - 1)), source]


@dataclass(frozen=True)
class SearchFilter:
    """Chunks of sources under ``source_prefix`` (a folder or a file, whole path segments) carrying any of ``tags``."""

    source_prefix: str | None = None
    tags: tuple[str, ...] = ()

    def to_qdrant(self) -> models.Filter | None:
        must: list[models.Condition] = []
        if self.source_prefix is not None:
            candidates = list(prefix_candidates(self.source_prefix))
            must.append(models.FieldCondition(key="source_prefixes", match=models.MatchAny(any=candidates)))
        if self.tags:
            must.append(models.FieldCondition(key="tags", match=models.MatchAny(any=list(self.tags))))
        return models.Filter(must=must) if must else None


@dataclass(frozen=True)
class SourceRecord:
    """What the store remembers of one document.

    ``content_hash``/``chunks`` describe the version searches see; ``pending_hash``/``pending_chunks``
    a version being written. A version is announced (pending) before its chunks are stored and
    committed after, so that an ingest interrupted halfway leaves a record of which chunks to
    clean up, and every clean-up is a deletion by point id (never a scan of the collection).
    """

    source: str
    title: str
    tags: tuple[str, ...]
    kind: str
    origin: str
    """``folder:<absolute path>`` (found there at start-up or by the CLI) or ``api`` (add_documents)."""
    content_hash: str
    """sha256 of the document's bytes and of the settings that shape its chunks; empty until committed."""
    chunks: int
    updated_at: str
    pending_hash: str = ""
    pending_chunks: int = 0
    link_list: bool = False
    """The document is mostly links (an index, a table of contents): searches rank it below content."""

    @property
    def committed(self) -> bool:
        return bool(self.content_hash)

    def point_ids(self) -> set[str]:
        """Every chunk id this record accounts for: the committed version's and the pending one's."""
        ids = (
            {chunk_point_id(self.source, self.content_hash, n) for n in range(self.chunks)} if self.committed else set()
        )
        if self.pending_hash:
            ids |= {chunk_point_id(self.source, self.pending_hash, n) for n in range(self.pending_chunks)}
        return ids


@dataclass(frozen=True)
class SearchHit:
    """A chunk as a search finds it, with its score: a retriever's own in the store's rankings, 0 to 1 in the
    final results (``retrieval``), which show the model its source, title, heading, position, text and tags."""

    id: str
    source: str
    title: str
    heading: str
    position: int
    text: str
    tags: tuple[str, ...]
    score: float
    link_list: bool = False


def chunk_payload(chunk: Chunk, record: SourceRecord) -> dict[str, Any]:
    """A chunk's payload: what a search shows of it, what filters look at, and its version's hash."""
    return {
        "source": chunk.source,
        "source_prefixes": source_prefixes(chunk.source),
        "title": chunk.title,
        "heading": chunk.heading,
        "position": chunk.position,
        "text": chunk.text,
        "tags": list(record.tags),
        "content_hash": record.content_hash,
        "link_list": record.link_list,
    }


def record_payload(record: SourceRecord) -> dict[str, Any]:
    """A document's record as the payload of its point in the sources collection."""
    payload = asdict(record)
    payload["tags"] = list(record.tags)
    return payload


def record_from_payload(payload: dict[str, Any]) -> SourceRecord:
    """The record a sources-collection payload holds (fields it lacks take their defaults)."""
    return SourceRecord(
        source=str(payload.get("source", "")),
        title=str(payload.get("title", "")),
        tags=tuple(str(tag) for tag in payload.get("tags") or ()),
        kind=str(payload.get("kind", "")),
        origin=str(payload.get("origin", "")),
        content_hash=str(payload.get("content_hash", "")),
        chunks=int(payload.get("chunks", 0)),
        updated_at=str(payload.get("updated_at", "")),
        pending_hash=str(payload.get("pending_hash", "")),
        pending_chunks=int(payload.get("pending_chunks", 0)),
        link_list=bool(payload.get("link_list", False)),
    )


def indexed_chunk(point: models.Record) -> IndexedChunk:
    """A chunk's row of the in-process BM25 index, from its point (sparse vector and filter fields)."""
    vectors = point.vector if isinstance(point.vector, dict) else {}
    sparse = vectors.get(SPARSE)
    indices, values = (
        (list(sparse.indices), list(sparse.values)) if isinstance(sparse, models.SparseVector) else ([], [])
    )
    payload = point.payload or {}
    return IndexedChunk(
        str(point.id),
        SparseVector(indices=indices, values=values),
        tuple(str(prefix) for prefix in payload.get("source_prefixes") or ()),
        tuple(str(tag) for tag in payload.get("tags") or ()),
    )


def document_row(point: models.Record) -> DenseChunk:
    """A row of the document-vector index: named by its source, filtered as its chunks are."""
    payload = point.payload or {}
    return DenseChunk(
        str(payload.get("source", "")),
        dense_vector(point),
        tuple(str(prefix) for prefix in payload.get("source_prefixes") or ()),
        tuple(str(tag) for tag in payload.get("tags") or ()),
    )


def dense_vector(point: models.Record) -> list[float]:
    """A point's dense vector (empty if it was not read)."""
    vectors = point.vector if isinstance(point.vector, dict) else {}
    vector = vectors.get(DENSE)
    return [float(value) for value in vector if isinstance(value, int | float)] if isinstance(vector, list) else []


def hit_from_point(point: models.ScoredPoint) -> SearchHit:
    """A chunk Qdrant found, with Qdrant's score."""
    return hit_from_payload(str(point.id), point.payload or {}, float(point.score))


def hit_from_payload(chunk_id: str, payload: dict[str, Any], score: float) -> SearchHit:
    """A chunk from its id, its payload and the score a search gave it."""
    return SearchHit(
        id=chunk_id,
        source=str(payload.get("source", "")),
        title=str(payload.get("title", "")),
        heading=str(payload.get("heading", "")),
        position=int(payload.get("position", 0)),
        text=str(payload.get("text", "")),
        tags=tuple(str(tag) for tag in payload.get("tags") or ()),
        score=score,
        link_list=bool(payload.get("link_list", False)),
    )
