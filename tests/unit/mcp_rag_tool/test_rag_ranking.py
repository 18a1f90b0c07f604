"""Ranking by document: the retrievers' rankings as a store would return them, fused by the Retriever.

The store is scripted here (the rankings are the input under test); test_rag_server and the
integration tests run the same code against Qdrant.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import pytest
from unit.mcp_rag_tool.rag_fakes import WordHashEmbedder

from mcp_rag_tool.bm25 import SparseVector
from mcp_rag_tool.points import SearchFilter, SearchHit
from mcp_rag_tool.retrieval import Retriever, SearchOptions

pytestmark = pytest.mark.anyio


def _chunk(chunk_id: str, *, link_list: bool = False) -> SearchHit:
    source = chunk_id.rstrip("0123456789") + ".html"  # "b2" is chunk 2 of b.html
    position = int(chunk_id[len(source) - 5 :] or 0)
    return SearchHit(chunk_id, source, source, "", position, f"text of {chunk_id}", (), 0.0, link_list)


class ScriptedStore:
    """Answers every search with the same dense, BM25 and document-vector rankings; records what it was asked."""

    def __init__(self, dense: Sequence[SearchHit], sparse: Sequence[SearchHit], documents: Sequence[str] = ()) -> None:
        self.dense, self.sparse, self.documents = list(dense), list(sparse), list(documents)
        self.asked: list[tuple[int, int]] = []
        self.documents_asked: list[int] = []

    async def search(
        self, dense: Sequence[Sequence[float]], sparse: Sequence[SparseVector], limit: int, _: SearchFilter
    ) -> tuple[list[list[SearchHit]], list[list[SearchHit]]]:
        self.asked.append((len(dense), len(sparse)))
        return [self.dense[:limit] for _ in dense], [self.sparse[:limit] for _ in sparse]

    async def rank_documents(self, dense: Sequence[Sequence[float]], limit: int, _: SearchFilter) -> list[list[str]]:
        self.documents_asked.append(len(dense))
        return [self.documents[:limit] for _ in dense]

    async def dense_vectors(self, ids: Sequence[str]) -> dict[str, list[float]]:
        return {chunk_id: [1.0, 0.0] if chunk_id.endswith("1") else [0.0, 1.0] for chunk_id in ids}


def _retriever(store: ScriptedStore, embedder: Any = None, **options: Any) -> Retriever:
    return Retriever(store, embedder or WordHashEmbedder(), SearchOptions(**options))  # type: ignore[arg-type]


def _ids(hits: Sequence[Any]) -> list[str]:
    return [f"{hit.source.removesuffix('.html')}{hit.position}" for hit in hits]


async def test_a_page_near_the_top_of_both_retrievers_beats_a_chunk_first_in_only_one() -> None:
    # Fused per chunk, a1 (first for dense, fifth for BM25) would win; b.html is second for dense
    # (b1) and first for BM25 (b2): as a page it is the better answer.
    filler = [_chunk(f"y{n}") for n in range(1, 4)]
    store = ScriptedStore(
        dense=[_chunk("a1"), _chunk("b1"), _chunk("x1")], sparse=[_chunk("b2"), *filler, _chunk("a1")]
    )

    hits = await _retriever(store).search(["question"], 5)

    assert [hit.source for hit in hits[:2]] == ["b.html", "a.html"]
    assert hits[0].score > hits[1].score


async def test_a_smaller_top_k_gives_a_prefix_of_a_larger_one() -> None:
    dense = [_chunk(name) for name in ("a1", "a2", "b1", "c1", "b2", "d1", "e1", "c2")]
    sparse = [_chunk(name) for name in ("c1", "a2", "e1", "b1", "f1", "a1", "d1")]
    for options in ({}, {"mmr_lambda": 0.5}, {"chunks_per_document": 3}):
        retriever = _retriever(ScriptedStore(dense, sparse), **options)
        ten = _ids(await retriever.search(["query words"], 10))
        for top_k in range(1, 10):
            assert _ids(await retriever.search(["query words"], top_k)) == ten[:top_k], (options, top_k)


async def test_a_retriever_of_weight_zero_is_not_run() -> None:
    store = ScriptedStore([_chunk("a1")], [_chunk("b1")], documents=["a.html", "b.html"])
    embedder = WordHashEmbedder()

    bm25_off = await _retriever(store, embedder, bm25_weight=0.0).search(["some words"], 5)
    documents_off = await _retriever(store, embedder, document_weight=0.0).search(["more words"], 5)
    only_bm25 = await _retriever(store, embedder, dense_weight=0.0, document_weight=0.0).search(["last words"], 5)

    assert store.asked == [(1, 0), (1, 1), (0, 1)]
    assert store.documents_asked == [1]
    assert embedder.embedded == ["some words", "more words"]  # BM25 alone needs no embedding
    assert _ids(bm25_off) == ["a1"]
    assert _ids(documents_off) == ["a1", "b1"]
    assert _ids(only_bm25) == ["b1"]


async def test_the_document_vectors_lift_a_page_whose_passages_all_lean_toward_the_query() -> None:
    # a.html and b.html tie on the chunk rankings (each first in one, second in the other); b.html's
    # document vector (all its passages about the question) is the nearest, so b.html goes first.
    dense = [_chunk("a1"), _chunk("b1"), _chunk("c1")]
    sparse = [_chunk("b2"), _chunk("a1"), _chunk("c1")]
    without = await _retriever(ScriptedStore(dense, sparse), document_weight=0.0).search(["question"], 3)
    store = ScriptedStore(dense, sparse, documents=["b.html", "c.html", "a.html"])

    hits = await _retriever(store).search(["question"], 3)

    assert [hit.source for hit in without] == ["a.html", "b.html", "c.html"]
    assert [hit.source for hit in hits] == ["b.html", "a.html", "c.html"]
    assert hits[0].score > hits[1].score > hits[2].score


async def test_a_document_found_only_by_its_document_vector_is_not_shown() -> None:
    # Only pages with a passage among the candidates can be shown: the document ranking reorders them.
    store = ScriptedStore([_chunk("a1")], [_chunk("a1")], documents=["z.html", "a.html"])

    hits = await _retriever(store).search(["question"], 5)

    assert _ids(hits) == ["a1"]


async def test_link_list_pages_rank_below_content_pages() -> None:
    toc = _chunk("toc1", link_list=True)
    store = ScriptedStore(dense=[toc, _chunk("a1"), _chunk("b1")], sparse=[toc, _chunk("b1"), _chunk("a1")])

    hits = await _retriever(store).search(["query words"], 3)

    assert [hit.source for hit in hits] == ["a.html", "b.html", "toc.html"]


async def test_a_page_brings_its_second_passage_only_when_it_is_nearly_as_good() -> None:
    dense = [_chunk("a1"), _chunk("b1"), _chunk("c1"), _chunk("d1"), _chunk("e1"), _chunk("a2")]
    sparse = [_chunk("a3"), _chunk("a1"), _chunk("b1")]

    hits = await _retriever(ScriptedStore(dense, sparse), chunks_per_document=2).search(["query words"], 4)

    # a3 (first for BM25 only) scores over half of a1 (first and second), so it follows a1;
    # a2 (sixth for dense only) scores far less and waits until the other pages had their turn.
    assert _ids(hits) == ["a1", "a3", "b1", "c1"]


class FirstWordScorer:
    """A cross-encoder stand-in: a passage scores 1 when it holds the query's first word, else 0."""

    async def score(self, query: str, passages: Sequence[str]) -> list[float]:
        word = query.split()[0]
        return [1.0 if word in passage else 0.0 for passage in passages]


async def test_with_a_cross_encoder_ranking_documents_is_not_asked_for() -> None:
    store = ScriptedStore([_chunk("a1"), _chunk("b1")], [_chunk("b1")], documents=["a.html", "b.html"])
    retriever = Retriever(store, WordHashEmbedder(), SearchOptions(), FirstWordScorer())  # type: ignore[arg-type]

    hits = await retriever.search(["b1 please"], 2)

    assert store.documents_asked == []  # the cross-encoder's order is the document order
    assert [hit.source for hit in hits] == ["b.html", "a.html"]


async def test_an_empty_document_ranking_leaves_the_scores_as_without_it() -> None:
    dense, sparse = [_chunk("a1"), _chunk("b1")], [_chunk("b1"), _chunk("a1")]

    without = await _retriever(ScriptedStore(dense, sparse), document_weight=0.0).search(["question"], 2)
    empty = await _retriever(ScriptedStore(dense, sparse, documents=[])).search(["question"], 2)

    assert [(hit.source, hit.score) for hit in empty] == [(hit.source, hit.score) for hit in without]
