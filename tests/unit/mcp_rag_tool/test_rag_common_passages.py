"""Common passages: text found word for word on many documents is left out of rankings and document vectors.

The bookkeeping alone (``CommonPassages``), then through the real Ingester into a local-mode store
(in memory, and a folder reopened): searches, BM25 and document vectors, as documents come and go.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
from unit.mcp_rag_tool.rag_fakes import WordHashEmbedder, memory_settings

from mcp_rag_tool import bm25
from mcp_rag_tool.chunking import ChunkLimits
from mcp_rag_tool.common_passages import CommonPassages
from mcp_rag_tool.ingest import API_ORIGIN, DocumentInput, Ingester
from mcp_rag_tool.points import SearchFilter
from mcp_rag_tool.store import VectorStore
from mcp_rag_tool.tokens import WordCounter

pytestmark = pytest.mark.anyio

LIMITS = ChunkLimits(40, 0, counter=WordCounter())
BOILERPLATE = "Returns the argument unchanged."
TOPICS = {
    "vec.md": "growable vector pushes elements capacity",
    "map.md": "hashmap stores keys values buckets",
    "heap.md": "binary heap priority queue ordering",
    "path.md": "filesystem path components extension",
    "cell.md": "interior mutability borrow checking runtime",
    "mutex.md": "mutual exclusion lock guard poisoning",
}


def test_a_passage_held_by_enough_documents_is_common_whatever_its_case_and_spacing() -> None:
    passages = CommonPassages(3)
    change = passages.add([("a1", "a", BOILERPLATE), ("b1", "b", BOILERPLATE.upper()), ("a2", "a", "own text")])
    assert not change.hide  # two documents only
    assert not passages.is_common("a1")

    change = passages.add([("c1", "c", "  returns the   argument\nunchanged. ")])

    assert change.hide == {"a1", "b1", "c1"}
    assert change.sources == {"a", "b", "c"}
    assert passages.kept_chunks("a") == ["a2"]
    assert passages.has_common("c")
    assert not passages.has_common("d")


def test_a_passage_stops_being_common_when_a_document_holding_it_goes() -> None:
    passages = CommonPassages(3)
    passages.add([(f"{source}1", source, BOILERPLATE) for source in "abc"])
    passages.add([("a2", "a", BOILERPLATE)])  # a second copy on the same document counts once

    change = passages.remove(["c1"])

    assert change.show == {"a1", "a2", "b1"}
    assert not change.hide
    assert not passages.is_common("a1")


def test_zero_documents_turns_it_off() -> None:
    passages = CommonPassages(0)
    assert not passages.add([(f"{n}", f"doc{n}", BOILERPLATE) for n in range(10)]).hide


def _document(source: str, words: str) -> DocumentInput:
    body = f"# {source}\n\n## About\n\n{words} {words}\n\n## From\n\n{BOILERPLATE}\n"
    return DocumentInput(source, "markdown", body.encode(), API_ORIGIN)


async def _search_texts(store: VectorStore, embedder: WordHashEmbedder, query: str) -> set[str]:
    [dense], [sparse] = await store.search(
        await embedder.embed([query]), [bm25.query_vector(query)], 20, SearchFilter()
    )
    return {hit.text for hit in dense} | {hit.text for hit in sparse}


async def _document_vector(store: VectorStore, source: str) -> np.ndarray:
    assert store._document_index is not None
    return np.array(store._document_index.vectors([source])[source])


async def test_common_chunks_are_left_out_of_searches_and_document_vectors_until_few_documents_hold_them() -> None:
    embedder = WordHashEmbedder()
    store = await VectorStore.open(memory_settings(common_passage_documents=5))
    try:
        await store.ensure_collections(embedder.dimension, embedder.name)
        ingester = Ingester(store, embedder, LIMITS)
        await ingester.add([_document(source, words) for source, words in TOPICS.items()])
        [about] = await embedder.embed([f"# vec.md > About\n\n{TOPICS['vec.md']} {TOPICS['vec.md']}"])

        assert BOILERPLATE not in await _search_texts(store, embedder, "returns the argument unchanged")
        assert await _document_vector(store, "vec.md") == pytest.approx(np.array(about), abs=1e-5)

        sources = await store.sources()
        await store.remove_documents([sources["mutex.md"], sources["cell.md"]])  # four documents hold it now

        assert BOILERPLATE in await _search_texts(store, embedder, "returns the argument unchanged")
        assert await _document_vector(store, "vec.md") != pytest.approx(np.array(about), abs=1e-3)
    finally:
        await store.close()


async def test_a_reopened_store_finds_the_common_passages_again(tmp_path: Path) -> None:
    embedder = WordHashEmbedder()
    settings = memory_settings(qdrant_path=str(tmp_path / "qdrant"), common_passage_documents=5)
    store = await VectorStore.open(settings)
    try:
        await store.ensure_collections(embedder.dimension, embedder.name)
        await Ingester(store, embedder, LIMITS).add([_document(source, words) for source, words in TOPICS.items()])
        before = await _document_vector(store, "heap.md")
    finally:
        await store.close()
    store = await VectorStore.open(settings)
    try:
        await store.ensure_collections(embedder.dimension, embedder.name)
        assert BOILERPLATE not in await _search_texts(store, embedder, "returns the argument unchanged")
        assert await _document_vector(store, "heap.md") == pytest.approx(before, abs=1e-5)
    finally:
        await store.close()
