"""Qdrant behind a small interface: chunks with a dense and a BM25 sparse vector, and a list of documents.

Three collections: ``<collection>`` holds one point per chunk (named vectors ``dense`` and
``bm25``, the latter with Qdrant's IDF modifier), ``<collection>_sources`` one vector-less point
per document (its content hash, title, tags, where it came from, how many chunks), and
``<collection>_documents`` one point per document with chunks: its document vector, the
normalised mean of its chunks' dense vectors, which ranks pages whose passages all lean toward a
query (``rank_documents``). A store written before the documents collection existed gets it
computed from its stored chunk vectors when it is first opened (``_fill_document_vectors``):
nothing is embedded again and nothing is dropped. Qdrant local
mode (in memory, or persisted in a folder) and a Qdrant server go through the same client
and the same code. That client is the synchronous ``QdrantClient``, called in worker threads:
local mode computes searches in Python, which would otherwise stall the event loop (and with
it every other request) for the length of a search. Local mode is not thread-safe, so its
calls take turns; calls to a server run concurrently.

Local mode would also answer queries by scanning every point in Python, so there the sparse
vectors are mirrored in an in-process inverted index (``sparse_index``) and the dense vectors in
in-process matrices (``dense_index``: one of chunks, one of document vectors), all built from the
store when its collections are opened and kept in step by every write made here; the store
remains the only persisted copy. A Qdrant server answers every kind of query itself.

What each point holds (ids, payloads, the records and hits read back) is ``points``.
"""

from __future__ import annotations

import contextlib
import functools
import threading
from collections.abc import Callable, Collection, Iterator, Sequence
from typing import Any, TypeVar

import anyio.to_thread
import numpy as np
import numpy.typing as npt
from qdrant_client import QdrantClient, models

from mcp_rag_tool.bm25 import SparseVector
from mcp_rag_tool.chunking import Chunk
from mcp_rag_tool.dense_index import DenseChunk, DenseIndex
from mcp_rag_tool.index_rows import prefix_candidates
from mcp_rag_tool.points import (
    DENSE,
    SCHEMA_VERSION,
    SPARSE,
    SearchFilter,
    SearchHit,
    SourceRecord,
    chunk_payload,
    chunk_point_id,
    dense_vector,
    document_row,
    hit_from_payload,
    hit_from_point,
    indexed_chunk,
    record_from_payload,
    record_payload,
    source_point_id,
    source_prefixes,
)
from mcp_rag_tool.settings import RagSettings
from mcp_rag_tool.sparse_index import IndexedChunk, SparseIndex

__all__ = ["StoreLocked", "VectorStore"]

_T = TypeVar("_T")
_SCROLL_PAGE = 256


class StoreLocked(Exception):
    """The local-mode folder is held by another process (Qdrant local mode allows one at a time)."""


class VectorStore:
    def __init__(self, client: QdrantClient, collection: str, *, server: bool = False) -> None:
        self._client = client
        self._server = server
        self._chunks = collection
        self._sources = f"{collection}_sources"
        self._documents = f"{collection}_documents"
        self._turn = threading.Lock()
        self._sparse_index: SparseIndex | None = None
        """Local mode: the BM25 inverted index, once the collections are open."""
        self._dense_index: DenseIndex | None = None
        """Local mode: the matrix of dense vectors, once the collections are open."""
        self._document_index: DenseIndex | None = None
        """Local mode: the matrix of document vectors (rows named by source), once the collections are open."""

    @classmethod
    async def open(cls, settings: RagSettings) -> VectorStore:
        """Open the store (in a thread: local mode reads every point from disk at once).

        ``StoreLocked`` if another process holds the local-mode folder.
        """
        return await anyio.to_thread.run_sync(cls.open_sync, settings)

    @classmethod
    def open_sync(cls, settings: RagSettings) -> VectorStore:
        client: QdrantClient
        if settings.qdrant_url is not None:
            api_key = settings.qdrant_api_key.get_secret_value() if settings.qdrant_api_key else None
            client = QdrantClient(url=settings.qdrant_url, api_key=api_key, timeout=settings.qdrant_timeout_seconds)
        elif settings.in_memory:
            client = QdrantClient(location=":memory:", force_disable_check_same_thread=True)
        else:
            try:
                client = QdrantClient(path=settings.qdrant_path, force_disable_check_same_thread=True)
            except RuntimeError as exc:
                if "already accessed" in str(exc):
                    raise StoreLocked(
                        f"the Qdrant folder {settings.qdrant_path} is in use by another process "
                        "(a running mcp-rag-tool?); local mode allows one process at a time"
                    ) from exc
                raise
        return cls(client, settings.collection, server=settings.qdrant_url is not None)

    @property
    def collection(self) -> str:
        return self._chunks

    def sibling(self, collection: str) -> VectorStore:
        """Another set of collections over the same client (a tenant's): local mode's calls keep taking turns
        with this store's, since one client is not thread-safe. Close only the store that opened the client."""
        other = VectorStore(self._client, collection, server=self._server)
        other._turn = self._turn
        return other

    async def exists(self) -> bool:
        """Whether this store's chunks collection exists (a tenant's is created by its first add)."""
        return await self._call(self._client.collection_exists, self._chunks)

    async def close(self) -> None:
        await self._call(self._client.close)

    async def _call(self, function: Callable[..., _T], *args: Any, **kwargs: Any) -> _T:
        return await anyio.to_thread.run_sync(functools.partial(self._locked, function, *args, **kwargs))

    def _locked(self, function: Callable[..., _T], *args: Any, **kwargs: Any) -> _T:
        with self._turn if not self._server else contextlib.nullcontext():
            return function(*args, **kwargs)

    # --- collections ---------------------------------------------------------------------------

    async def ensure_collections(self, dimension: int, embedder: str) -> bool:
        """Create the collections unless they exist for this embedder and layout; True if (re)created.

        Vectors of another embedder (or another layout) cannot be searched with this one's, so
        such collections are dropped and every document is ingested again.
        """
        wanted = {"embedder": embedder, "dimension": dimension, "schema": SCHEMA_VERSION}
        collections = (self._chunks, self._sources, self._documents)
        if all([await self._call(self._client.collection_exists, name) for name in collections[:2]]):
            info = await self._call(self._client.get_collection, self._chunks)
            metadata = info.config.metadata or {}
            if all(metadata.get(key) == value for key, value in wanted.items()):
                await self._ensure_document_vectors(dimension)
                if not self._server:
                    indexes = await self._call(self._load_indexes, dimension)
                    self._sparse_index, self._dense_index, self._document_index = indexes
                return False
        for name in collections:
            if await self._call(self._client.collection_exists, name):
                await self._call(self._client.delete_collection, name)
        await self._call(
            self._client.create_collection,
            self._chunks,
            vectors_config={DENSE: models.VectorParams(size=dimension, distance=models.Distance.COSINE)},
            sparse_vectors_config={SPARSE: models.SparseVectorParams(modifier=models.Modifier.IDF)},
            metadata=wanted,
        )
        await self._call(self._client.create_collection, self._sources, vectors_config={})
        await self._call(self._create_documents_collection, dimension, complete=True)
        if self._server:  # local mode has no payload indexes (and says so in a warning)
            for field in ("source", "source_prefixes", "tags"):
                await self._call(
                    self._client.create_payload_index, self._chunks, field, models.PayloadSchemaType.KEYWORD
                )
        else:
            self._sparse_index, self._dense_index = SparseIndex(), DenseIndex(dimension)
            self._document_index = DenseIndex(dimension)
        return True

    def _create_documents_collection(self, dimension: int, *, complete: bool) -> None:
        """The document-vector collection; ``complete`` False until a fill from the chunks has finished."""
        self._client.create_collection(
            self._documents,
            vectors_config={DENSE: models.VectorParams(size=dimension, distance=models.Distance.COSINE)},
            metadata={"complete": complete},
        )
        if self._server:
            for field in ("source_prefixes", "tags"):
                self._client.create_payload_index(self._documents, field, models.PayloadSchemaType.KEYWORD)

    async def _ensure_document_vectors(self, dimension: int) -> None:
        """Give a store written before document vectors existed (or whose fill was interrupted) its
        document vectors, computed from the stored chunk vectors."""
        if await self._call(self._client.collection_exists, self._documents):
            info = await self._call(self._client.get_collection, self._documents)
            if (info.config.metadata or {}).get("complete") is True:
                return
            await self._call(self._client.delete_collection, self._documents)
        committed = {source: record for source, record in (await self.sources()).items() if record.committed}
        await self._call(self._create_documents_collection, dimension, complete=False)
        await self._call(self._fill_document_vectors, committed)
        await self._call(self._client.update_collection, self._documents, metadata={"complete": True})

    def _fill_document_vectors(self, committed: dict[str, SourceRecord]) -> None:
        """Each committed document's vector: the normalised mean of its committed version's stored chunk
        vectors (unit length already: Qdrant normalises the vectors of a cosine collection)."""
        sums: dict[str, npt.NDArray[np.float64]] = {}
        for points in self._pages(self._chunks, ["source", "content_hash"], [DENSE]):
            for point in points:
                payload = point.payload or {}
                owner = committed.get(str(payload.get("source", "")))
                if owner is None or payload.get("content_hash") != owner.content_hash:
                    continue  # a pending version's chunk, or one left behind
                vector = np.asarray(dense_vector(point), dtype=np.float64)
                if owner.source in sums:
                    sums[owner.source] += vector
                else:
                    sums[owner.source] = vector
        vectors: list[tuple[SourceRecord, Sequence[float] | None]] = []
        for source, total in sums.items():
            norm = float(np.linalg.norm(total))
            if norm > 0:
                vectors.append((committed[source], (total / norm).tolist()))
        for start in range(0, len(vectors), _SCROLL_PAGE):
            self._write_document_vectors(vectors[start : start + _SCROLL_PAGE])

    def _load_indexes(self, dimension: int) -> tuple[SparseIndex, DenseIndex, DenseIndex]:
        """Local mode: the in-process indexes, from one scroll over every chunk and one over the documents."""
        documents = DenseIndex(dimension)
        for points in self._pages(self._documents, ["source", "source_prefixes", "tags"], [DENSE]):
            documents.add(document_row(point) for point in points)
        sparse, dense = SparseIndex(), DenseIndex(dimension)
        for points in self._pages(self._chunks, ["source_prefixes", "tags"], [SPARSE, DENSE]):
            chunks = [indexed_chunk(point) for point in points]
            sparse.add(chunks)
            dense.add(
                DenseChunk(chunk.id, dense_vector(point), chunk.source_prefixes, chunk.tags)
                for chunk, point in zip(chunks, points, strict=True)
            )
        return sparse, dense, documents

    def _pages(self, collection: str, payload: list[str], vectors: list[str]) -> Iterator[list[models.Record]]:
        """Every point of ``collection``, a page at a time (in the caller's turn: see ``_call``)."""
        offset: Any = None
        while True:
            points, offset = self._client.scroll(
                collection, limit=1024, offset=offset, with_payload=payload, with_vectors=vectors
            )
            yield points
            if offset is None:
                return

    # --- documents -----------------------------------------------------------------------------

    async def sources(self) -> dict[str, SourceRecord]:
        records: dict[str, SourceRecord] = {}
        offset: Any = None
        while True:
            points, offset = await self._call(
                self._client.scroll,
                self._sources,
                limit=_SCROLL_PAGE,
                offset=offset,
                with_payload=True,
                with_vectors=False,
            )
            for point in points:
                record = record_from_payload(point.payload or {})
                records[record.source] = record
            if offset is None:
                return records

    async def upsert_chunks(
        self,
        chunks: Sequence[Chunk],
        records: Sequence[SourceRecord],
        dense: Sequence[Sequence[float]],
        sparse: Sequence[SparseVector],
    ) -> None:
        """Store chunks, each with the record of its document (for its hash and tags) and its vectors."""
        if not len(chunks) == len(records) == len(dense) == len(sparse):
            raise ValueError("chunks, records and vectors must line up")
        points = [
            models.PointStruct(
                id=chunk_point_id(chunk.source, record.content_hash, chunk.position),
                vector={
                    DENSE: list(vector),
                    SPARSE: models.SparseVector(indices=sparse_vector.indices, values=sparse_vector.values),
                },
                payload=chunk_payload(chunk, record),
            )
            for chunk, record, vector, sparse_vector in zip(chunks, records, dense, sparse, strict=True)
        ]
        if points:
            indexed = [
                IndexedChunk(str(point.id), sparse_vector, tuple(source_prefixes(chunk.source)), record.tags)
                for point, chunk, record, sparse_vector in zip(points, chunks, records, sparse, strict=True)
            ]
            await self._call(self._upsert_points, points, indexed, dense)

    def _upsert_points(
        self, points: list[models.PointStruct], indexed: list[IndexedChunk], dense: Sequence[Sequence[float]]
    ) -> None:
        """Store points and, in local mode, index them, in the same turn: a search sees both or neither."""
        self._client.upsert(self._chunks, points=points, wait=True)
        if self._sparse_index is not None:
            self._sparse_index.add(indexed)
        if self._dense_index is not None:
            self._dense_index.add(
                DenseChunk(chunk.id, vector, chunk.source_prefixes, chunk.tags)
                for chunk, vector in zip(indexed, dense, strict=True)
            )

    async def write_records(self, records: Sequence[SourceRecord]) -> None:
        if records:
            points = [
                models.PointStruct(id=source_point_id(record.source), vector={}, payload=record_payload(record))
                for record in records
            ]
            await self._call(self._client.upsert, self._sources, points=points, wait=True)

    async def write_document_vectors(self, vectors: Sequence[tuple[SourceRecord, Sequence[float] | None]]) -> None:
        """Store each document's vector (the normalised mean of its chunks'); ``None`` (no chunks) removes it."""
        if vectors:
            await self._call(self._write_document_vectors, list(vectors))

    def _write_document_vectors(self, vectors: list[tuple[SourceRecord, Sequence[float] | None]]) -> None:
        rows = [
            DenseChunk(record.source, vector, tuple(source_prefixes(record.source)), record.tags)
            for record, vector in vectors
            if vector is not None
        ]
        gone = [record.source for record, vector in vectors if vector is None]
        if rows:
            points = [
                models.PointStruct(
                    id=source_point_id(row.id),
                    vector={DENSE: list(row.vector)},
                    payload={"source": row.id, "source_prefixes": list(row.source_prefixes), "tags": list(row.tags)},
                )
                for row in rows
            ]
            self._client.upsert(self._documents, points=points, wait=True)
        if gone:
            self._delete_document_vectors(gone)
        if self._document_index is not None:
            self._document_index.add(rows)

    def _delete_document_vectors(self, sources: list[str]) -> None:
        ids: list[models.ExtendedPointId] = [source_point_id(source) for source in sources]
        self._client.delete(self._documents, points_selector=models.PointIdsList(points=ids), wait=True)
        if self._document_index is not None:
            self._document_index.remove(sources)

    async def delete_chunks(self, ids: Collection[str]) -> None:
        if ids:
            await self._call(self._delete_points, list(ids))

    def _delete_points(self, ids: list[str]) -> None:
        """Delete points and, in local mode, unindex them, in the same turn."""
        self._client.delete(self._chunks, points_selector=models.PointIdsList(points=list(ids)), wait=True)
        if self._sparse_index is not None:
            self._sparse_index.remove(ids)
        if self._dense_index is not None:
            self._dense_index.remove(ids)

    async def remove_documents(self, records: Sequence[SourceRecord]) -> None:
        """Delete documents: their chunks (every version the records account for) and vectors, then the records."""
        if not records:
            return
        await self.delete_chunks({point for record in records for point in record.point_ids()})
        await self._call(self._delete_document_vectors, [record.source for record in records])
        ids: list[models.ExtendedPointId] = [source_point_id(record.source) for record in records]
        await self._call(self._client.delete, self._sources, points_selector=models.PointIdsList(points=ids), wait=True)

    async def count(self) -> int:
        result = await self._call(self._client.count, self._chunks, exact=True)
        return result.count

    # --- search --------------------------------------------------------------------------------

    async def search(
        self,
        dense: Sequence[Sequence[float]],
        sparse: Sequence[SparseVector],
        limit: int,
        search_filter: SearchFilter,
    ) -> tuple[list[list[SearchHit]], list[list[SearchHit]]]:
        """For each dense and each sparse query vector, its ``limit`` best chunks; one round trip."""
        if self._sparse_index is not None and self._dense_index is not None:
            indexes = (self._dense_index, self._sparse_index)
            return await self._call(self._local_search, indexes, dense, sparse, limit, search_filter)
        query_filter = search_filter.to_qdrant()
        requests = [
            models.QueryRequest(query=list(vector), using=DENSE, limit=limit, filter=query_filter, with_payload=True)
            for vector in dense
        ]
        requests += [
            models.QueryRequest(
                query=models.SparseVector(indices=vector.indices, values=vector.values),
                using=SPARSE,
                limit=limit,
                filter=query_filter,
                with_payload=True,
            )
            for vector in sparse
        ]
        if not requests:
            return [], []
        responses = await self._call(self._client.query_batch_points, self._chunks, requests=requests)
        rankings = [[hit_from_point(point) for point in response.points] for response in responses]
        return rankings[: len(dense)], rankings[len(dense) :]

    def _local_search(
        self,
        indexes: tuple[DenseIndex, SparseIndex],
        dense: Sequence[Sequence[float]],
        sparse: Sequence[SparseVector],
        limit: int,
        search_filter: SearchFilter,
    ) -> tuple[list[list[SearchHit]], list[list[SearchHit]]]:
        """Local mode: both rankings from the in-process indexes, then the payloads of the chunks found."""
        dense_index, sparse_index = indexes
        prefixes, tags = prefix_candidates(search_filter.source_prefix), search_filter.tags
        found = [dense_index.search(query, limit, source_prefixes=prefixes, tags=tags) for query in dense]
        found += [sparse_index.search(query, limit, source_prefixes=prefixes, tags=tags) for query in sparse]
        wanted = list(dict.fromkeys(chunk_id for ranking in found for chunk_id, _ in ranking))
        records = self._client.retrieve(self._chunks, ids=wanted, with_payload=True, with_vectors=False)
        payloads = {str(record.id): record.payload or {} for record in records}
        rankings = [
            [
                hit_from_payload(chunk_id, payloads[chunk_id], score)
                for chunk_id, score in ranking
                if chunk_id in payloads
            ]
            for ranking in found
        ]
        return rankings[: len(dense)], rankings[len(dense) :]

    async def rank_documents(
        self, dense: Sequence[Sequence[float]], limit: int, search_filter: SearchFilter
    ) -> list[list[str]]:
        """For each dense query vector, the sources of the ``limit`` documents whose vectors are nearest."""
        if not dense:
            return []
        if self._document_index is not None:
            return await self._call(self._local_rank_documents, self._document_index, dense, limit, search_filter)
        query_filter = search_filter.to_qdrant()
        requests = [
            models.QueryRequest(
                query=list(vector), using=DENSE, limit=limit, filter=query_filter, with_payload=["source"]
            )
            for vector in dense
        ]
        responses = await self._call(self._client.query_batch_points, self._documents, requests=requests)
        return [[str((point.payload or {}).get("source", "")) for point in response.points] for response in responses]

    def _local_rank_documents(
        self, index: DenseIndex, dense: Sequence[Sequence[float]], limit: int, search_filter: SearchFilter
    ) -> list[list[str]]:
        prefixes, tags = prefix_candidates(search_filter.source_prefix), search_filter.tags
        return [
            [source for source, _ in index.search(query, limit, source_prefixes=prefixes, tags=tags)] for query in dense
        ]

    async def dense_vectors(self, ids: Sequence[str]) -> dict[str, list[float]]:
        if not ids:
            return {}
        if self._dense_index is not None:
            return await self._call(self._dense_index.vectors, ids)
        points = await self._call(
            self._client.retrieve, self._chunks, ids=list(ids), with_vectors=[DENSE], with_payload=False
        )
        vectors: dict[str, list[float]] = {}
        for point in points:
            vector = point.vector.get(DENSE) if isinstance(point.vector, dict) else None
            if isinstance(vector, list):
                vectors[str(point.id)] = [float(value) for value in vector if isinstance(value, int | float)]
        return vectors

    async def document_passages(self, records: Sequence[SourceRecord]) -> dict[str, list[str]]:
        """The passages of each record's committed version, in document order (for the page model)."""
        ids: list[models.ExtendedPointId] = [
            chunk_point_id(record.source, record.content_hash, position)
            for record in records
            if record.committed
            for position in range(record.chunks)
        ]
        if not ids:
            return {}
        points = await self._call(
            self._client.retrieve, self._chunks, ids=ids, with_payload=["source", "position", "text"]
        )
        passages: dict[str, list[tuple[int, str]]] = {}
        for point in points:
            payload = point.payload or {}
            passages.setdefault(str(payload.get("source", "")), []).append(
                (int(payload.get("position", 0)), str(payload.get("text", "")))
            )
        return {source: [text for _, text in sorted(items)] for source, items in passages.items()}
