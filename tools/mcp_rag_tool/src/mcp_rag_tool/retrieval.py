"""Hybrid retrieval: every query runs dense and BM25 retrieval, rankings are fused by document.

1. Each query is embedded (dense) and tokenized into a BM25 query (sparse); each retriever returns
   its ``candidates`` best chunks per query, filter applied, and the document vectors (each
   document's normalised mean chunk vector) give the ``candidates`` nearest documents. A
   retriever of weight 0 is not run.
2. Documents are ranked by weighted reciprocal rank fusion of the retrievers' rankings *of
   documents* (each document at the rank of its best chunk there, ``fusion.document_rankings``)
   and of the document-vector ranking (and, when ``RAG_PAGE_MODEL_PATH`` is set, the page model's
   ranking of documents, ``page_model``); only documents with a chunk among the candidates can be
   shown, so the latter reorder those. Link-list pages (indexes, tables of contents) go below
   content pages. Chunks are scored by the same fusion of the chunk rankings.
3. The result lists documents in that order, each with its best chunk, then up to
   ``chunks_per_document - 1`` more of its chunks that score at least half as well as its best;
   chunks left over follow in fused order. Nothing in this depends on ``top_k``, which only cuts the
   list: the top 5 are the first 5 of the top 10.
4. Optionally, a cross-encoder (``RAG_RERANK_MODEL_PATH``) rescores the ``rerank_candidates`` best
   fused chunks and a document then ranks by its best rescored chunk; and maximal marginal relevance
   (``RAG_MMR_LAMBDA`` below 1, off by default) orders chunks to push near-duplicates down.

Scores shown are on a 0-1 scale: a document's fused score over that of a document ranked first
everywhere (or its best cross-encoder probability), carried by its best chunk; a document's further
chunks get that score times their own share of the best chunk's score.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, replace
from typing import Protocol

from mcp_rag_tool import bm25
from mcp_rag_tool.embeddings import Embedder
from mcp_rag_tool.fusion import (
    FusedItem,
    Ranking,
    best_possible_score,
    document_rankings,
    reciprocal_rank_fusion,
)
from mcp_rag_tool.points import SearchFilter, SearchHit
from mcp_rag_tool.rerank import PassageScorer, maximal_marginal_relevance
from mcp_rag_tool.settings import RagSettings
from mcp_rag_tool.store import VectorStore

__all__ = [
    "DENSE_RETRIEVER",
    "DOCUMENT_RETRIEVER",
    "PAGE_RETRIEVER",
    "SPARSE_RETRIEVER",
    "PageRanker",
    "Retriever",
    "SearchOptions",
]

DENSE_RETRIEVER = "dense"
SPARSE_RETRIEVER = "bm25"
DOCUMENT_RETRIEVER = "document"
PAGE_RETRIEVER = "page"


class PageRanker(Protocol):
    """Ranks documents for each query by a model of its own (``page_model.PageVectors``)."""

    async def rank(self, queries: Sequence[str], limit: int, search_filter: SearchFilter) -> list[list[str]]: ...


@dataclass(frozen=True)
class SearchOptions:
    """How a search runs; from the settings, and varied by the retrieval benchmark."""

    dense: bool = True
    bm25: bool = True
    documents: bool = True
    rerank: bool = True
    candidates: int = 50
    rrf_k: float = 2.0
    dense_weight: float = 1.0
    bm25_weight: float = 1.0
    document_weight: float = 1.0
    rerank_candidates: int = 30
    mmr_lambda: float = 1.0
    chunks_per_document: int = 1

    @classmethod
    def from_settings(cls, settings: RagSettings) -> SearchOptions:
        return cls(
            candidates=settings.search_candidates,
            rrf_k=settings.rrf_k,
            dense_weight=settings.dense_weight,
            bm25_weight=settings.bm25_weight,
            document_weight=settings.document_weight,
            rerank_candidates=settings.rerank_candidates,
            mmr_lambda=settings.mmr_lambda,
            chunks_per_document=settings.chunks_per_document,
        )

    def only(self, *, dense: bool, bm25: bool, documents: bool, rerank: bool) -> SearchOptions:
        return replace(self, dense=dense, bm25=bm25, rerank=rerank, documents=documents)


class Retriever:
    def __init__(
        self,
        store: VectorStore,
        embedder: Embedder,
        options: SearchOptions,
        scorer: PassageScorer | None = None,
        pages: PageRanker | None = None,
    ) -> None:
        self._store = store
        self._embedder = embedder
        self._options = options
        self._scorer = scorer
        self._pages = pages
        """The page model's ranking of documents (``RAG_PAGE_MODEL_PATH``), fused like the document vectors'."""

    @property
    def options(self) -> SearchOptions:
        return self._options

    async def search(
        self,
        queries: Sequence[str],
        top_k: int,
        search_filter: SearchFilter | None = None,
        options: SearchOptions | None = None,
    ) -> list[SearchHit]:
        options = options or self._options
        search_filter = search_filter or SearchFilter()
        use_dense = options.dense and options.dense_weight > 0
        use_bm25 = options.bm25 and options.bm25_weight > 0
        # a cross-encoder, when it ranks, orders documents by its own scores: no document ranking then
        reranking = self._scorer is not None and options.rerank
        use_documents = options.documents and options.document_weight > 0 and not reranking
        vectors = await self._embedder.embed(list(queries)) if use_dense or use_documents else []
        dense = vectors if use_dense else []
        sparse = [vector for vector in map(bm25.query_vector, queries) if vector.indices] if use_bm25 else []
        dense_rankings, sparse_rankings = await self._store.search(dense, sparse, options.candidates, search_filter)
        page_rankings = [
            Ranking(DOCUMENT_RETRIEVER, sources)
            for sources in (
                await self._store.rank_documents(vectors, options.candidates, search_filter) if use_documents else []
            )
            if sources  # an empty ranking would only lower every score's scale
        ]
        if use_documents and self._pages is not None:
            ranked = await self._pages.rank(queries, options.candidates, search_filter)
            page_rankings += [Ranking(PAGE_RETRIEVER, sources) for sources in ranked if sources]
        rankings = [Ranking(DENSE_RETRIEVER, [chunk.id for chunk in ranking]) for ranking in dense_rankings]
        rankings += [Ranking(SPARSE_RETRIEVER, [chunk.id for chunk in ranking]) for ranking in sparse_rankings]
        chunks = {chunk.id: chunk for ranking in (*dense_rankings, *sparse_rankings) for chunk in ranking}
        if not chunks:
            return []
        weights = {DENSE_RETRIEVER: options.dense_weight, SPARSE_RETRIEVER: options.bm25_weight}
        fused = reciprocal_rank_fusion(rankings, weights, options.rrf_k)
        scale = best_possible_score(rankings, weights, options.rrf_k) or 1.0
        chunk_score = {item.id: item.score / scale for item in fused}
        order = [item.id for item in fused]
        if options.rerank and (self._scorer is not None or options.mmr_lambda < 1.0):
            pool = fused[: options.rerank_candidates]
            relevance = await self._relevance(queries, pool, chunks, scale)
            picked = await self._diverse(pool, relevance, len(pool), options.mmr_lambda)
            reranked = [pool[index].id for index in picked]
            if self._scorer is not None:
                chunk_score = {pool[index].id: relevance[index] for index in range(len(pool))}
            order = reranked + [item.id for item in fused[len(pool) :]]
        weights[DOCUMENT_RETRIEVER] = options.document_weight
        documents = self._rank_documents(rankings, page_rankings, chunks, weights, options, chunk_score)
        return _by_document(order, chunks, chunk_score, documents, options.chunks_per_document, top_k)

    def _rank_documents(
        self,
        rankings: Sequence[Ranking[str]],
        page_rankings: Sequence[Ranking[str]],
        chunks: dict[str, SearchHit],
        weights: dict[str, float],
        options: SearchOptions,
        chunk_score: dict[str, float],
    ) -> dict[str, float]:
        """Each document's score (0-1), in rank order: content pages first, link lists after.

        ``page_rankings`` (documents by their document vectors) join the fusion of the chunk
        rankings turned into document rankings; a cross-encoder, when on, ranks by its own scores."""
        if self._scorer is not None and options.rerank:
            scores: dict[str, float] = {}
            for chunk_id, score in chunk_score.items():
                source = chunks[chunk_id].source
                scores[source] = max(scores.get(source, 0.0), score)
            ranked = sorted(scores.items(), key=lambda entry: -entry[1])
        else:
            by_document = document_rankings(rankings, {chunk_id: chunk.source for chunk_id, chunk in chunks.items()})
            by_document += page_rankings
            fused = reciprocal_rank_fusion(by_document, weights, options.rrf_k)
            scale = best_possible_score(by_document, weights, options.rrf_k) or 1.0
            ranked = [(item.id, item.score / scale) for item in fused]
        link_lists = {chunk.source for chunk in chunks.values() if chunk.link_list}
        ranked.sort(key=lambda entry: entry[0] in link_lists)  # stable: keeps the order within each group
        return dict(ranked)

    async def _relevance(
        self, queries: Sequence[str], pool: Sequence[FusedItem[str]], chunks: dict[str, SearchHit], scale: float
    ) -> list[float]:
        if self._scorer is None or not pool:
            return [item.score / scale for item in pool]
        passages = [_passage(chunks[item.id]) for item in pool]
        best = [0.0] * len(pool)
        for query in queries:  # a passage is as relevant as it is to the query it answers best
            for index, score in enumerate(await self._scorer.score(query, passages)):
                best[index] = max(best[index], score)
        return best

    async def _diverse(
        self, pool: Sequence[FusedItem[str]], relevance: Sequence[float], top_k: int, mmr_lambda: float
    ) -> list[int]:
        if mmr_lambda >= 1.0 or len(pool) <= 1:
            return sorted(range(len(pool)), key=lambda index: -relevance[index])[:top_k]
        vectors = await self._store.dense_vectors([item.id for item in pool])
        dimension = self._embedder.dimension
        matrix = [vectors.get(item.id) or [0.0] * dimension for item in pool]
        return maximal_marginal_relevance(relevance, matrix, top_k, mmr_lambda)


def _by_document(
    order: Sequence[str],
    chunks: dict[str, SearchHit],
    chunk_score: dict[str, float],
    documents: dict[str, float],
    per_document: int,
    limit: int,
) -> list[SearchHit]:
    """Documents in rank order, each with its best chunk and its other good ones; then the rest.

    The order never depends on ``limit``: it only stops the list (the top 5 are the first 5 of the top 10).
    """
    of_document: dict[str, list[str]] = {}
    for chunk_id in order:
        of_document.setdefault(chunks[chunk_id].source, []).append(chunk_id)
    hits: list[SearchHit] = []
    taken: set[str] = set()
    for source, document_score in documents.items():
        ids = of_document.get(source, [])
        if not ids:
            continue
        best = chunk_score.get(ids[0], 0.0) or 1.0
        for rank, chunk_id in enumerate(ids[:per_document]):
            share = min(1.0, chunk_score.get(chunk_id, 0.0) / best)
            if rank > 0 and share < 0.5:
                break
            hits.append(_hit(chunks[chunk_id], document_score * share))
            taken.add(chunk_id)
            if len(hits) == limit:
                return hits
    for chunk_id in order:
        if len(hits) == limit:
            break
        if chunk_id not in taken:
            source = chunks[chunk_id].source
            best = chunk_score.get(of_document[source][0], 0.0) or 1.0
            share = min(1.0, chunk_score.get(chunk_id, 0.0) / best)
            hits.append(_hit(chunks[chunk_id], documents.get(source, 0.0) * share))
    return hits


def _passage(chunk: SearchHit) -> str:
    context = chunk.heading or chunk.title
    return f"{context}\n\n{chunk.text}" if context else chunk.text


def _hit(chunk: SearchHit, score: float) -> SearchHit:
    return replace(chunk, score=min(1.0, max(0.0, score)))
