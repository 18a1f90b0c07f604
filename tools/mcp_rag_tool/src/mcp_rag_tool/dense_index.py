"""An in-process matrix of the stored dense vectors, for Qdrant local mode.

Qdrant local mode answers a dense query in Python, point by point (about 200 ms at 100,000
chunks); one float32 matrix-vector product over the same vectors takes a few milliseconds.
This is that matrix, in the same process as the local-mode store: one row per chunk, each
normalised to unit length as Qdrant normalises vectors of a cosine collection when they are
stored (left as they are when their norm is below float32's epsilon), so a score is the dot
product with the unit query vector, Qdrant's cosine score to within float error. Like the
BM25 index (``sparse_index``), it is rebuilt from the store when the store opens and follows
every upsert and deletion made through it. It holds every vector in memory: 100,000 chunks of
384 dimensions take about 150 MB.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass

import numpy as np
import numpy.typing as npt

from mcp_rag_tool.index_rows import IndexRows

__all__ = ["DenseChunk", "DenseIndex"]

_EPSILON = np.float32(1.1920929e-7)
"""float32's machine epsilon: Qdrant normalises vectors longer than this and divides a zero query by it."""


@dataclass(frozen=True)
class DenseChunk:
    """What the index keeps of a chunk: its dense vector and what filters look at."""

    id: str
    vector: Sequence[float]
    source_prefixes: tuple[str, ...]
    tags: tuple[str, ...]


class DenseIndex(IndexRows):
    def __init__(self, dimension: int) -> None:
        super().__init__()
        self._dimension = dimension
        self._matrix = np.zeros((0, dimension), dtype=np.float32)

    def add(self, chunks: Iterable[DenseChunk]) -> None:
        """Index chunks; a chunk id indexed before is replaced."""
        batch = list(chunks)
        if not batch:
            return
        vectors = np.asarray([chunk.vector for chunk in batch], dtype=np.float32).reshape(len(batch), -1)
        if vectors.shape[1] != self._dimension:
            raise ValueError(f"vectors of {vectors.shape[1]} dimensions in an index of {self._dimension}")
        norms = np.linalg.norm(vectors, axis=1, keepdims=True)
        vectors = np.where(norms > _EPSILON, vectors / np.where(norms > _EPSILON, norms, 1), vectors)
        self.remove(chunk.id for chunk in batch)
        if len(self._ids) > 1024 and len(self._ids) > 2 * self._live:
            self._compact()
        first = self._append_rows([(chunk.id, chunk.source_prefixes, chunk.tags) for chunk in batch])
        if len(self._matrix) < first + len(batch):
            grown = np.zeros((max(2 * len(self._matrix), first + len(batch), 1024), self._dimension), np.float32)
            grown[:first] = self._matrix[:first]
            self._matrix = grown
        self._matrix[first : first + len(batch)] = vectors

    def _compact(self) -> None:
        """Drop the rows of deleted chunks (re-ingests leave them behind), keeping the others' order."""
        kept = np.flatnonzero(self._alive[: len(self._ids)])
        self._matrix = self._matrix[kept].copy()
        self._ids = [self._ids[slot] for slot in kept]
        self._prefixes = [self._prefixes[slot] for slot in kept]
        self._tags = [self._tags[slot] for slot in kept]
        self._slot_of = {chunk_id: slot for slot, chunk_id in enumerate(self._ids)}
        self._alive = np.ones(len(kept), dtype=bool)

    def search(
        self,
        query: Sequence[float],
        limit: int,
        *,
        source_prefixes: Sequence[str] = (),
        tags: Sequence[str] = (),
    ) -> list[tuple[str, float]]:
        """The ``limit`` chunks nearest to ``query`` by cosine (``(id, score)``, best first), among those
        under one of ``source_prefixes`` (if any) and carrying one of ``tags`` (if any)."""
        if not self._live or limit <= 0:
            return []
        unit = np.asarray(query, dtype=np.float32)
        norm = np.linalg.norm(unit)
        unit = unit / (norm if norm != 0 else _EPSILON)
        scores: npt.NDArray[np.float32] = self._matrix[: len(self._ids)] @ unit
        alive = np.flatnonzero(self._alive[: len(self._ids)])
        return self._best(alive, scores, limit, source_prefixes, tags)

    def vectors(self, ids: Iterable[str]) -> dict[str, list[float]]:
        """The stored (unit) vectors of those of ``ids`` that are indexed."""
        slots = {chunk_id: self._slot_of[chunk_id] for chunk_id in ids if chunk_id in self._slot_of}
        return {chunk_id: self._matrix[slot].tolist() for chunk_id, slot in slots.items()}
