"""BM25 as sparse vectors: terms (identifiers kept whole and split), weights, and Qdrant's IDF on top."""

from __future__ import annotations

from pathlib import Path

import anyio
import pytest
from qdrant_client import models
from unit.mcp_rag_tool.rag_fakes import memory_settings

from mcp_rag_tool import bm25
from mcp_rag_tool.chunking import Chunk
from mcp_rag_tool.points import SPARSE, SearchFilter, SourceRecord
from mcp_rag_tool.store import VectorStore

pytestmark = pytest.mark.anyio


def test_words_are_lower_cased_stemmed_and_stop_words_dropped() -> None:
    assert list(bm25.terms("The retries were Failing because of timeouts")) == ["retri", "fail", "timeout"]


def test_identifiers_stay_whole_and_give_their_parts() -> None:
    assert list(bm25.terms("ERR_CONN_RESET")) == ["err_conn_reset", "err", "conn", "reset"]
    assert list(bm25.terms("searchDocuments")) == ["searchdocuments", "search", "document"]
    assert list(bm25.terms("PAY-4012")) == ["pay-4012", "pay", "4012"]
    assert list(bm25.terms("error 0x80070005")) == ["error", "0x80070005", "0", "80070005"]
    assert list(bm25.terms("v2.3.1 is out")) == ["v2.3.1", "2", "3", "1"]


def test_non_ascii_words_are_not_cut_apart() -> None:
    assert list(bm25.terms("naïve café")) == [bm25._stem("naïve"), bm25._stem("café")]


def test_term_frequency_saturates_and_long_chunks_weigh_each_term_less() -> None:
    once = bm25.document_vector("timeout")
    thrice = bm25.document_vector("timeout timeout timeout")
    long = bm25.document_vector("timeout " + " ".join(f"word{i}" for i in range(300)))
    index = bm25.query_vector("timeout").indices[0]

    def weight(vector: bm25.SparseVector) -> float:
        return vector.values[vector.indices.index(index)]

    assert weight(once) < weight(thrice) < 3 * weight(once)
    assert weight(long) < weight(once)
    assert weight(thrice) < bm25.K1 + 1  # the ceiling of BM25's saturation


def test_a_query_vector_has_one_entry_per_distinct_term_sorted() -> None:
    vector = bm25.query_vector("retry retries RETRY budget")

    assert vector.values == [1.0, 1.0]
    assert vector.indices == sorted(vector.indices)
    assert bm25.query_vector("the of and").indices == []


async def test_qdrant_weighs_a_rare_term_above_a_common_one() -> None:
    """Qdrant's IDF modifier applies the corpus-wide half of BM25 to our term weights."""
    texts = {
        "common-1.md": "deploy pipeline stage",
        "common-2.md": "deploy pipeline gate",
        "common-3.md": "deploy pipeline canary",
        "rare.md": "rollback deploy",
    }
    store = await VectorStore.open(memory_settings())
    try:
        await store.ensure_collections(2, "fake")
        chunks = [Chunk(text, source, source, "", 0) for source, text in texts.items()]
        records = [SourceRecord(c.source, c.title, (), "markdown", "api", "h", 1, "") for c in chunks]
        sparse = [bm25.document_vector(text) for text in texts.values()]
        await store.upsert_chunks(chunks, records, [[1.0, 0.0]] * len(chunks), sparse)
        with anyio.fail_after(10):
            _, [ranking] = await store.search([], [bm25.query_vector("rollback pipeline")], 10, SearchFilter())
    finally:
        await store.close()

    # "rollback" is in one chunk, "pipeline" in three: the rare match wins though each matches one term.
    assert ranking[0].source == "rare.md"
    assert {chunk.source for chunk in ranking} == set(texts)


async def test_the_in_process_index_of_local_mode_scores_as_qdrant_itself_does() -> None:
    """Local mode answers BM25 from an in-process inverted index; it must agree with Qdrant's own sparse
    search (IDF modifier, deletions, filters), which a Qdrant server runs."""
    words = [
        "deploy",
        "pipeline",
        "stage",
        "gate",
        "canary",
        "rollback",
        "retry",
        "timeout",
        "cache",
        "shard",
        "replica",
        "index",
    ]
    texts = {f"{folder}/doc-{n}.md": " ".join(words[(n * 7 + k * 3) % len(words)] for k in range(2 + n % 5))
             for n in range(30) for folder in ("ops", "dev")}  # fmt: skip
    store = await VectorStore.open(memory_settings())
    try:
        await store.ensure_collections(2, "fake")
        chunks = [Chunk(text, source, source, "", 0) for source, text in texts.items()]
        records = [SourceRecord(c.source, c.title, (c.source[:3],), "markdown", "api", "h", 1, "") for c in chunks]
        sparse = [bm25.document_vector(text) for text in texts.values()]
        await store.upsert_chunks(chunks, records, [[1.0, 0.0]] * len(chunks), sparse)
        gone = await store.search([], [bm25.query_vector("rollback")], 3, SearchFilter())
        await store.delete_chunks({chunk.id for chunk in gone[1][0]})
        queries = [bm25.query_vector(text) for text in ("rollback pipeline", "cache shard timeout", "canary")]
        filters = [SearchFilter(), SearchFilter(source_prefix="ops/"), SearchFilter(tags=("dev",))]
        for search_filter in filters:
            with anyio.fail_after(10):
                _, ours = await store.search([], queries, 10, search_filter)
            for query, ranking in zip(queries, ours, strict=True):
                theirs = store._client.query_points(  # Qdrant local mode's own sparse search
                    store.collection,
                    query=models.SparseVector(indices=query.indices, values=query.values),
                    using=SPARSE,
                    limit=10,
                    query_filter=search_filter.to_qdrant(),
                ).points
                assert [round(chunk.score, 4) for chunk in ranking] == [round(point.score, 4) for point in theirs]
                # The same chunks with the same scores (ties at the cut may be any of the tied).
                floor = min((point.score for point in theirs), default=0.0) + 1e-4
                assert {chunk.id: round(chunk.score, 4) for chunk in ranking if chunk.score > floor} == {
                    str(point.id): round(point.score, 4) for point in theirs if point.score > floor
                }
                assert not {chunk.id for chunk in gone[1][0]} & {chunk.id for chunk in ranking}
    finally:
        await store.close()


async def test_the_in_process_index_is_rebuilt_from_the_store_when_it_is_opened_again(tmp_path: Path) -> None:
    settings = memory_settings(qdrant_path=str(tmp_path / "qdrant"))
    store = await VectorStore.open(settings)
    try:
        await store.ensure_collections(2, "fake")
        chunk = Chunk("rollback the canary deploy", "ops.md", "ops.md", "", 0)
        record = SourceRecord("ops.md", "ops.md", (), "markdown", "api", "h", 1, "")
        await store.upsert_chunks([chunk], [record], [[1.0, 0.0]], [bm25.document_vector(chunk.text)])
    finally:
        await store.close()

    again = await VectorStore.open(settings)
    try:
        await again.ensure_collections(2, "fake")
        with anyio.fail_after(10):
            _, [ranking] = await again.search([], [bm25.query_vector("canary rollback")], 5, SearchFilter())
    finally:
        await again.close()

    assert [chunk.source for chunk in ranking] == ["ops.md"]
