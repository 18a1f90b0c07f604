"""A thin layer over Qdrant: one collection of chunk vectors, searched by cosine similarity.

Qdrant local mode (in memory, or persisted in a folder) and a Qdrant server go through the
same ``AsyncQdrantClient``, so a laptop and a cluster run the same code.
"""

from __future__ import annotations

import uuid
from collections.abc import Collection, Sequence
from typing import Any

from qdrant_client import AsyncQdrantClient, models

from mcp_rag_tool.chunking import Chunk
from mcp_rag_tool.search import SearchHit
from mcp_rag_tool.settings import RagSettings

__all__ = ["VectorStore", "point_id"]

_POINT_NAMESPACE = uuid.uuid5(uuid.NAMESPACE_URL, "https://github.com/loopsuite/mcp-rag-tool/chunk")


def point_id(source: str, position: int) -> str:
    """The same chunk of the same document always gets the same id, so re-ingesting overwrites it."""
    return str(uuid.uuid5(_POINT_NAMESPACE, f"{source}#{position}"))


class VectorStore:
    def __init__(self, client: AsyncQdrantClient, collection: str) -> None:
        self._client = client
        self._collection = collection

    @classmethod
    def from_settings(cls, settings: RagSettings) -> VectorStore:
        client: AsyncQdrantClient
        if settings.qdrant_url is not None:
            client = AsyncQdrantClient(url=settings.qdrant_url, timeout=settings.qdrant_timeout_seconds)
        elif settings.qdrant_path is not None:
            client = AsyncQdrantClient(path=settings.qdrant_path)
        else:
            client = AsyncQdrantClient(location=":memory:")
        return cls(client, settings.collection)

    @property
    def collection(self) -> str:
        return self._collection

    async def close(self) -> None:
        await self._client.close()

    async def ensure_collection(self, dimension: int) -> bool:
        """Create the collection unless it exists with this dimension; True if it was (re)created.

        A collection left by another embedder (another dimension) cannot be searched with this
        one's vectors, so it is dropped and rebuilt.
        """
        if await self._client.collection_exists(self._collection):
            info = await self._client.get_collection(self._collection)
            vectors = info.config.params.vectors
            if isinstance(vectors, models.VectorParams) and vectors.size == dimension:
                return False
            await self._client.delete_collection(self._collection)
        await self._client.create_collection(
            self._collection,
            vectors_config=models.VectorParams(size=dimension, distance=models.Distance.COSINE),
        )
        return True

    async def upsert(self, chunks: Sequence[Chunk], vectors: Sequence[Sequence[float]]) -> list[str]:
        """Store chunks with their vectors; returns their point ids."""
        if len(chunks) != len(vectors):
            raise ValueError(f"{len(chunks)} chunks but {len(vectors)} vectors")
        ids = [point_id(chunk.source, chunk.position) for chunk in chunks]
        points = [
            models.PointStruct(id=pid, vector=list(vector), payload=_payload(chunk))
            for pid, chunk, vector in zip(ids, chunks, vectors, strict=True)
        ]
        if points:
            await self._client.upsert(self._collection, points=points, wait=True)
        return ids

    async def retain_only(self, ids: Collection[str]) -> None:
        """Delete every point not in ``ids``: chunks of documents that were removed or got shorter."""
        keep: list[models.ExtendedPointId] = list(ids)
        selector = models.FilterSelector(filter=models.Filter(must_not=[models.HasIdCondition(has_id=keep)]))
        await self._client.delete(self._collection, points_selector=selector, wait=True)

    async def count(self) -> int:
        result = await self._client.count(self._collection, exact=True)
        return result.count

    async def search(self, vector: Sequence[float], limit: int) -> list[SearchHit]:
        response = await self._client.query_points(self._collection, query=list(vector), limit=limit, with_payload=True)
        return [_hit(point) for point in response.points]


def _payload(chunk: Chunk) -> dict[str, Any]:
    return {
        "source": chunk.source,
        "title": chunk.title,
        "heading": chunk.heading,
        "position": chunk.position,
        "text": chunk.text,
    }


def _hit(point: models.ScoredPoint) -> SearchHit:
    payload = point.payload or {}
    return SearchHit(
        source=str(payload.get("source", "")),
        title=str(payload.get("title", "")),
        heading=str(payload.get("heading", "")),
        position=int(payload.get("position", 0)),
        text=str(payload.get("text", "")),
        score=float(point.score),
    )
