"""Hybrid retrieval: every query runs dense and BM25 retrieval, rankings are fused, the best are reranked.

1. Each query is embedded (dense) and tokenized into a BM25 query (sparse); one batched Qdrant
   request returns each retriever's ``candidates`` best chunks per query, filter applied.
2. Weighted reciprocal rank fusion (``fusion``) merges all rankings, across retrievers and queries.
3. Reranking (``rerank``) looks at the ``rerank_candidates`` best fused chunks: a cross-encoder
   rescores them when one is configured, then maximal marginal relevance picks ``top_k`` of
   them without near-duplicates. Without reranking, the first ``top_k`` fused chunks are the result.

Scores shown are on a 0-1 scale: the cross-encoder's probability when there is one, else the
fused score divided by that of a chunk ranked first by every retriever for every query.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, replace

from mcp_rag_tool import bm25
from mcp_rag_tool.embeddings import Embedder
from mcp_rag_tool.fusion import FusedItem, Ranking, best_possible_score, reciprocal_rank_fusion
from mcp_rag_tool.rerank import PassageScorer, maximal_marginal_relevance
from mcp_rag_tool.search import SearchHit
from mcp_rag_tool.settings import RagSettings
from mcp_rag_tool.store import SearchFilter, StoredChunk, VectorStore

__all__ = ["DENSE_RETRIEVER", "SPARSE_RETRIEVER", "Retriever", "SearchOptions"]

DENSE_RETRIEVER = "dense"
SPARSE_RETRIEVER = "bm25"


@dataclass(frozen=True)
class SearchOptions:
    """How a search runs; from the settings, and varied by the retrieval benchmark."""

    dense: bool = True
    bm25: bool = True
    rerank: bool = True
    candidates: int = 50
    rrf_k: float = 2.0
    dense_weight: float = 1.0
    bm25_weight: float = 1.0
    rerank_candidates: int = 30
    mmr_lambda: float = 0.7

    @classmethod
    def from_settings(cls, settings: RagSettings) -> SearchOptions:
        return cls(
            candidates=settings.search_candidates,
            rrf_k=settings.rrf_k,
            dense_weight=settings.dense_weight,
            bm25_weight=settings.bm25_weight,
            rerank_candidates=settings.rerank_candidates,
            mmr_lambda=settings.mmr_lambda,
        )

    def only(self, *, dense: bool, bm25: bool, rerank: bool) -> SearchOptions:
        return replace(self, dense=dense, bm25=bm25, rerank=rerank)


class Retriever:
    def __init__(
        self,
        store: VectorStore,
        embedder: Embedder,
        options: SearchOptions,
        scorer: PassageScorer | None = None,
    ) -> None:
        self._store = store
        self._embedder = embedder
        self._options = options
        self._scorer = scorer

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
        dense = await self._embedder.embed(list(queries)) if options.dense else []
        sparse = [vector for vector in map(bm25.query_vector, queries) if vector.indices] if options.bm25 else []
        dense_rankings, sparse_rankings = await self._store.search(dense, sparse, options.candidates, search_filter)
        rankings = [Ranking(DENSE_RETRIEVER, [chunk.id for chunk in ranking]) for ranking in dense_rankings]
        rankings += [Ranking(SPARSE_RETRIEVER, [chunk.id for chunk in ranking]) for ranking in sparse_rankings]
        chunks = {chunk.id: chunk for ranking in (*dense_rankings, *sparse_rankings) for chunk in ranking}
        weights = {DENSE_RETRIEVER: options.dense_weight, SPARSE_RETRIEVER: options.bm25_weight}
        fused = reciprocal_rank_fusion(rankings, weights, options.rrf_k)
        scale = best_possible_score(rankings, weights, options.rrf_k) or 1.0
        if not options.rerank:
            return [_hit(chunks[item.id], item.score / scale) for item in fused[:top_k]]
        pool = fused[: max(options.rerank_candidates, top_k)]
        relevance = await self._relevance(queries, pool, chunks, scale)
        picked = await self._diverse(pool, relevance, top_k, options.mmr_lambda)
        picked.sort(key=lambda index: -relevance[index])
        return [_hit(chunks[pool[index].id], relevance[index]) for index in picked]

    async def _relevance(
        self, queries: Sequence[str], pool: Sequence[FusedItem[str]], chunks: dict[str, StoredChunk], scale: float
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


def _passage(chunk: StoredChunk) -> str:
    context = chunk.heading or chunk.title
    return f"{context}\n\n{chunk.text}" if context else chunk.text


def _hit(chunk: StoredChunk, score: float) -> SearchHit:
    return SearchHit(
        source=chunk.source,
        title=chunk.title,
        heading=chunk.heading,
        position=chunk.position,
        text=chunk.text,
        tags=chunk.tags,
        score=min(1.0, max(0.0, score)),
    )
