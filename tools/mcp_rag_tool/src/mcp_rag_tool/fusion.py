"""Weighted reciprocal rank fusion of several rankings (retrievers x queries). Pure.

A chunk earns ``weight / (k + rank)`` from every ranking it appears in (rank from 1), summed.
Ranks, not scores, are fused: a cosine similarity and a BM25 score are on unrelated scales,
while "second best for this retriever" means the same thing for both. ``k`` flattens the
difference between the first ranks: the RRF paper's 60 suits fusing many deep rankings, where
agreement should count most; with two retrievers, a small k (2, Qdrant's own default) keeps a
chunk that one retriever ranks first above chunks both rank middling, which is what a search
for an exact error code (BM25 only) or a paraphrase (dense only) needs.
"""

from __future__ import annotations

from collections.abc import Hashable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Generic, TypeVar

__all__ = ["FusedItem", "Ranking", "best_possible_score", "document_rankings", "reciprocal_rank_fusion"]

_K = TypeVar("_K", bound=Hashable)


@dataclass(frozen=True)
class Ranking(Generic[_K]):
    """The ids one retriever returned for one query, best first."""

    retriever: str
    ids: Sequence[_K]


@dataclass(frozen=True)
class FusedItem(Generic[_K]):
    id: _K
    score: float
    best_rank: int
    """The best (smallest) rank any ranking gave it: the tie-breaker."""


def reciprocal_rank_fusion(
    rankings: Iterable[Ranking[_K]], weights: Mapping[str, float], k: float
) -> list[FusedItem[_K]]:
    """Every id of ``rankings`` once, best fused score first (ties: best single rank, then first seen)."""
    scores: dict[_K, float] = {}
    best_rank: dict[_K, int] = {}
    for ranking in rankings:
        weight = weights.get(ranking.retriever, 1.0)
        for rank, item in enumerate(ranking.ids, start=1):
            scores[item] = scores.get(item, 0.0) + weight / (k + rank)
            best_rank[item] = min(best_rank.get(item, rank), rank)
    order = {item: index for index, item in enumerate(scores)}
    fused = [FusedItem(item, score, best_rank[item]) for item, score in scores.items()]
    fused.sort(key=lambda entry: (-entry.score, entry.best_rank, order[entry.id]))
    return fused


def best_possible_score(rankings: Iterable[Ranking[_K]], weights: Mapping[str, float], k: float) -> float:
    """What an id ranked first everywhere would score: divides fused scores into a 0-1 scale."""
    return sum(weights.get(ranking.retriever, 1.0) / (k + 1) for ranking in rankings)


def document_rankings(rankings: Iterable[Ranking[_K]], document_of: Mapping[_K, str]) -> list[Ranking[str]]:
    """Each ranking of chunks as a ranking of their documents, each document at the rank of its best chunk.

    Fusing these instead of the chunk rankings lets a page whose different chunks are near the top
    of both retrievers beat a page with one chunk first in one retriever and absent from the other.
    """
    result: list[Ranking[str]] = []
    for ranking in rankings:
        seen: dict[str, None] = {}
        for item in ranking.ids:
            seen.setdefault(document_of[item], None)
        result.append(Ranking(ranking.retriever, list(seen)))
    return result
