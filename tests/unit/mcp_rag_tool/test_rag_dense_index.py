"""Local mode answers dense queries from an in-process matrix; it must agree with Qdrant's own dense search."""

from __future__ import annotations

from pathlib import Path

import anyio
import numpy as np
import pytest
from unit.mcp_rag_tool.rag_fakes import memory_settings

from mcp_rag_tool import bm25
from mcp_rag_tool.chunking import Chunk
from mcp_rag_tool.points import DENSE, SearchFilter, SourceRecord
from mcp_rag_tool.store import VectorStore

pytestmark = pytest.mark.anyio

DIMENSION = 16
FILTERS = [
    SearchFilter(),
    SearchFilter(source_prefix="ops/"),
    SearchFilter(source_prefix="dev/api"),  # a folder named without its slash
    SearchFilter(source_prefix="ops/doc-3.md"),  # one file
    SearchFilter(tags=("blue",)),
    SearchFilter(source_prefix="dev/", tags=("red", "green")),
    SearchFilter(tags=("absent",)),
]


def _chunks(count: int, start: int = 0) -> tuple[list[Chunk], list[SourceRecord]]:
    folders = ("ops", "dev/api", "dev/guide")
    colours = ("red", "green", "blue")
    chunks = [Chunk(f"chunk {n}", f"{folders[n % 3]}/doc-{n % 7}.md", "t", "", n) for n in range(start, start + count)]
    records = [
        SourceRecord(chunk.source, "t", (colours[n % 3], f"n{n % 5}"), "markdown", "api", "h", 1, "")
        for n, chunk in zip(range(start, start + count), chunks, strict=True)
    ]
    return chunks, records


async def _upsert(store: VectorStore, rng: np.random.Generator, count: int, start: int = 0) -> None:
    chunks, records = _chunks(count, start)
    vectors = rng.normal(size=(count, DIMENSION)).astype(np.float32) * rng.uniform(0.1, 5, size=(count, 1))
    sparse = [bm25.document_vector(chunk.text) for chunk in chunks]
    await store.upsert_chunks(chunks, records, vectors.tolist(), sparse)


async def _assert_matches_qdrant(store: VectorStore, rng: np.random.Generator) -> None:
    queries = (rng.normal(size=(4, DIMENSION)) * 3).tolist()
    for search_filter in FILTERS:
        with anyio.fail_after(10):
            ours, _ = await store.search(queries, [], 12, search_filter)
        for query, ranking in zip(queries, ours, strict=True):
            theirs = store._client.query_points(  # Qdrant local mode's own dense search
                store.collection, query=query, using=DENSE, limit=12, query_filter=search_filter.to_qdrant()
            ).points
            assert [chunk.id for chunk in ranking] == [str(point.id) for point in theirs], search_filter
            assert [chunk.score for chunk in ranking] == pytest.approx([point.score for point in theirs], abs=1e-5)
            assert all(chunk.source for chunk in ranking)  # payloads came along


async def test_the_in_process_dense_ranking_is_qdrants_own_with_and_without_filters() -> None:
    rng = np.random.default_rng(7)
    store = await VectorStore.open(memory_settings())
    try:
        await store.ensure_collections(DIMENSION, "fake")
        await _upsert(store, rng, 300)
        await _assert_matches_qdrant(store, rng)

        await _upsert(store, rng, 50, start=280)  # 20 chunks get new vectors, 30 are new
        ours, _ = await store.search([rng.normal(size=DIMENSION).tolist()], [], 5, SearchFilter())
        await store.delete_chunks({chunk.id for chunk in ours[0]} | {"no-such-chunk"})
        await _assert_matches_qdrant(store, rng)
        everything, _ = await store.search([[1.0] * DIMENSION], [], 400, SearchFilter())
        assert len(everything[0]) == 330 - 5
        assert not {chunk.id for chunk in ours[0]} & {chunk.id for chunk in everything[0]}
        assert len(store._dense_index or ()) == 330 - 5  # answered in-process, not by Qdrant
    finally:
        await store.close()


async def test_the_dense_index_drops_deleted_rows_and_still_agrees() -> None:
    """Re-ingests leave deleted rows behind; once they outnumber the live ones the matrix is compacted."""
    rng = np.random.default_rng(11)
    store = await VectorStore.open(memory_settings())
    try:
        await store.ensure_collections(DIMENSION, "fake")
        await _upsert(store, rng, 1200)
        ids = [point.id for point in store._client.scroll(store.collection, limit=2000, with_payload=False)[0]]
        await store.delete_chunks({str(point_id) for point_id in ids[:1000]})
        await _upsert(store, rng, 40, start=2000)
        await _assert_matches_qdrant(store, rng)
        assert len(store._dense_index or ()) == 240
        await store.delete_chunks({str(point_id) for point_id in ids[1000:1020]})  # rows that moved
        await _assert_matches_qdrant(store, rng)
        assert len(store._dense_index or ()) == 220
    finally:
        await store.close()


async def test_the_dense_index_is_rebuilt_from_a_persisted_folder_and_gives_qdrants_vectors(tmp_path: Path) -> None:
    rng = np.random.default_rng(13)
    settings = memory_settings(qdrant_path=str(tmp_path / "qdrant"))
    store = await VectorStore.open(settings)
    try:
        await store.ensure_collections(DIMENSION, "fake")
        await _upsert(store, rng, 200)
        ours, _ = await store.search([rng.normal(size=DIMENSION).tolist()], [], 30, SearchFilter())
        await store.delete_chunks({chunk.id for chunk in ours[0]})
    finally:
        await store.close()

    again = await VectorStore.open(settings)
    try:
        await again.ensure_collections(DIMENSION, "fake")
        await _assert_matches_qdrant(again, rng)
        assert len(again._dense_index or ()) == 200 - 30
        some = [str(point.id) for point in again._client.scroll(again.collection, limit=20, with_payload=False)[0]]
        vectors = await again.dense_vectors([*some, ours[0][0].id])  # MMR reads them
        stored = again._client.retrieve(again.collection, ids=some, with_vectors=[DENSE])
    finally:
        await again.close()

    assert set(vectors) == set(some)  # not the deleted one
    for point in stored:
        assert isinstance(point.vector, dict)
        assert vectors[str(point.id)] == pytest.approx(point.vector[DENSE], abs=1e-6)
        assert np.linalg.norm(vectors[str(point.id)]) == pytest.approx(1.0, abs=1e-5)
