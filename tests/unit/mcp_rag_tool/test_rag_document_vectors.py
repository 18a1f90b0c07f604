"""Document vectors: each document's normalised mean chunk vector, written by the ingest, ranked by the store.

Written through the real Ingester into Qdrant (in memory or a folder); ranked both by the
in-process matrix of local mode and by the code path a Qdrant server takes (``query_batch_points``
on the documents collection, run here against Qdrant's own local implementation of it).
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path

import numpy as np
import pytest
from qdrant_client import QdrantClient
from unit.mcp_rag_tool.rag_fakes import WordHashEmbedder, memory_settings

from mcp_rag_tool.chunking import ChunkLimits
from mcp_rag_tool.ingest import API_ORIGIN, DocumentInput, Ingester
from mcp_rag_tool.points import DENSE, SearchFilter
from mcp_rag_tool.settings import RagSettings
from mcp_rag_tool.store import VectorStore
from mcp_rag_tool.tokens import WordCounter

pytestmark = pytest.mark.anyio

LIMITS = ChunkLimits(40, 0, counter=WordCounter())
TOPICS = {
    "ops/backup.md": "backup snapshot restore archive retention",
    "ops/deploy.md": "deploy rollout canary rollback release",
    "dev/api/auth.md": "token certificate handshake cipher secret",
    "dev/guide/queue.md": "queue worker consumer producer broker",
}

QUERIES = [  # each shares 3, 2, 1 and 0 words with the four documents: no ties to order arbitrarily
    "rollback canary release token secret queue",
    "token secret cipher backup snapshot queue",
    "broker queue worker consumer snapshot restore token",
]


def _document(source: str, words: str, sections: int = 6) -> DocumentInput:
    body = "\n\n".join(
        f"## Part {n}\n\n" + " ".join(f"{word} {word}s handled{n}" for word in words.split()) for n in range(sections)
    )
    tags = ("ops",) if source.startswith("ops/") else ("dev",)
    return DocumentInput(source, "markdown", f"# {source}\n\n{body}".encode(), API_ORIGIN, tags=tags)


async def _ingest(store: VectorStore, embedder: WordHashEmbedder, documents: list[DocumentInput]) -> None:
    # batch_size 2: a document's chunks are embedded in several calls, so its mean spans them
    await Ingester(store, embedder, LIMITS, batch_size=2).add(documents)


async def _open_with_topics(store: VectorStore, embedder: WordHashEmbedder) -> VectorStore:
    await store.ensure_collections(embedder.dimension, embedder.name)
    await _ingest(store, embedder, [_document(source, words) for source, words in TOPICS.items()])
    return store


@pytest.fixture
def embedder() -> WordHashEmbedder:
    return WordHashEmbedder()


@pytest.fixture
async def store(embedder: WordHashEmbedder) -> AsyncIterator[VectorStore]:
    """An in-memory store with the four TOPICS documents ingested."""
    opened = await VectorStore.open(memory_settings())
    try:
        yield await _open_with_topics(opened, embedder)
    finally:
        await opened.close()


def _stored(store: VectorStore, collection: str) -> list[tuple[str, list[float]]]:
    """``(source, dense vector)`` of every point of a collection, as Qdrant stored them."""
    points = store._client.scroll(collection, limit=1000, with_payload=True, with_vectors=[DENSE])[0]
    stored = []
    for point in points:
        assert isinstance(point.vector, dict)
        vector = point.vector[DENSE]
        assert isinstance(vector, list)
        stored.append((str((point.payload or {})["source"]), [float(value) for value in vector]))  # type: ignore[arg-type]
    return stored


def _stored_chunk_vectors(store: VectorStore, source: str) -> np.ndarray:
    return np.array([vector for of, vector in _stored(store, store.collection) if of == source])


def _stored_document_vectors(store: VectorStore) -> dict[str, list[float]]:
    return dict(_stored(store, store._documents))


async def test_each_document_vector_is_the_normalised_mean_of_its_chunks_vectors(
    store: VectorStore, embedder: WordHashEmbedder
) -> None:

    documents = _stored_document_vectors(store)
    assert set(documents) == set(TOPICS)
    for source in TOPICS:
        chunks = _stored_chunk_vectors(store, source)
        assert len(chunks) > 2
        mean = chunks.mean(axis=0)
        assert documents[source] == pytest.approx((mean / np.linalg.norm(mean)).tolist(), abs=1e-5)


async def test_documents_are_ranked_by_their_vectors_with_the_searchs_filter(
    store: VectorStore, embedder: WordHashEmbedder
) -> None:
    [query] = await embedder.embed(["how do I restore a snapshot from the archive"])

    [everywhere] = await store.rank_documents([query], 10, SearchFilter())
    [under_dev] = await store.rank_documents([query], 10, SearchFilter(source_prefix="dev/"))
    [tagged_ops] = await store.rank_documents([query], 1, SearchFilter(tags=("ops",)))

    assert everywhere[0] == "ops/backup.md"
    assert sorted(everywhere) == sorted(TOPICS)
    assert sorted(under_dev) == ["dev/api/auth.md", "dev/guide/queue.md"]
    assert tagged_ops == ["ops/backup.md"]


@pytest.mark.filterwarnings("ignore:Payload indexes have no effect in the local Qdrant")
async def test_the_server_path_ranks_documents_as_local_mode_does(embedder: WordHashEmbedder) -> None:
    local = await VectorStore.open(memory_settings())
    server = VectorStore(QdrantClient(location=":memory:"), "documents", server=True)  # no in-process index
    try:
        for each in (local, server):
            await _open_with_topics(each, embedder)
        queries = await embedder.embed(QUERIES)
        for search_filter in (SearchFilter(), SearchFilter(source_prefix="ops"), SearchFilter(tags=("dev",))):
            ours = await local.rank_documents(queries, 4, search_filter)
            theirs = await server.rank_documents(queries, 4, search_filter)
            assert ours == theirs, search_filter
        assert server._document_index is None
    finally:
        await local.close()
        await server.close()


async def test_a_changed_document_gets_a_new_vector_and_a_removed_or_emptied_one_loses_it(
    store: VectorStore, embedder: WordHashEmbedder
) -> None:
    before = _stored_document_vectors(store)
    [query] = await embedder.embed(["broker consumer queue"])

    await _ingest(store, embedder, [_document("ops/backup.md", "broker consumer queue worker producer")])
    after = _stored_document_vectors(store)
    [ranked] = await store.rank_documents([query], 2, SearchFilter())
    await _ingest(store, embedder, [DocumentInput("ops/deploy.md", "markdown", b"", API_ORIGIN)])
    await store.remove_documents([(await store.sources())["dev/api/auth.md"]])
    [remaining] = await store.rank_documents([query], 10, SearchFilter())

    assert after["ops/backup.md"] != pytest.approx(before["ops/backup.md"], abs=1e-3)
    assert set(ranked) == {"ops/backup.md", "dev/guide/queue.md"}  # the new vector, in-process too
    assert sorted(remaining) == ["dev/guide/queue.md", "ops/backup.md"]
    assert sorted(_stored_document_vectors(store)) == sorted(remaining)


async def test_document_vectors_are_loaded_again_from_a_persisted_folder(
    tmp_path: Path, embedder: WordHashEmbedder
) -> None:
    settings = memory_settings(qdrant_path=str(tmp_path / "qdrant"))
    store = await VectorStore.open(settings)
    try:
        await _open_with_topics(store, embedder)
        queries = await embedder.embed(QUERIES)
        before = await store.rank_documents(queries, 4, SearchFilter())
    finally:
        await store.close()

    again = await VectorStore.open(settings)
    try:
        assert not await again.ensure_collections(embedder.dimension, embedder.name)  # kept, not rebuilt
        assert len(again._document_index or ()) == len(TOPICS)
        assert await again.rank_documents(queries, 4, SearchFilter()) == before
    finally:
        await again.close()


async def _older_store(
    settings: RagSettings, embedder: WordHashEmbedder, *, fill_cut_short: bool
) -> tuple[dict[str, list[float]], int]:
    """A persisted store as an earlier release (no documents collection) or an interrupted fill left it;
    returns the document vectors an ingest would have written and the chunk count."""
    store = await VectorStore.open(settings)
    try:
        await _open_with_topics(store, embedder)
        expected, chunks = _stored_document_vectors(store), await store.count()
        store._client.delete_collection(store._documents)
        if fill_cut_short:
            store._create_documents_collection(embedder.dimension, complete=False)
    finally:
        await store.close()
    return expected, chunks


@pytest.mark.parametrize("fill_cut_short", [False, True], ids=["no documents collection", "fill interrupted"])
async def test_a_store_without_complete_document_vectors_gets_them_from_its_chunks_and_loses_nothing(
    tmp_path: Path, embedder: WordHashEmbedder, fill_cut_short: bool
) -> None:
    settings = memory_settings(qdrant_path=str(tmp_path / "qdrant"))
    expected, chunks = await _older_store(settings, embedder, fill_cut_short=fill_cut_short)

    again = await VectorStore.open(settings)
    try:
        rebuilt = await again.ensure_collections(embedder.dimension, embedder.name)
        [ranked] = await again.rank_documents(await embedder.embed([QUERIES[0]]), 4, SearchFilter())
        assert not rebuilt
        assert await again.count() == chunks  # nothing dropped, nothing to embed again
        assert sorted(await again.sources()) == sorted(TOPICS)
        filled = _stored_document_vectors(again)
        assert sorted(filled) == sorted(expected)
        for source, vector in expected.items():
            assert filled[source] == pytest.approx(vector, abs=1e-5)
        assert ranked[0] == "ops/deploy.md"  # the in-process index has them too
        assert again._client.get_collection(again._documents).config.metadata == {"complete": True}
    finally:
        await again.close()
