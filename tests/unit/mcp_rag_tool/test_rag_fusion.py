"""Weighted reciprocal rank fusion across retrievers and queries."""

from __future__ import annotations

import pytest

from mcp_rag_tool.fusion import Ranking, best_possible_score, reciprocal_rank_fusion

WEIGHTS = {"dense": 1.0, "bm25": 1.0}


def _ids(rankings: list[Ranking[str]], k: float = 2, weights: dict[str, float] = WEIGHTS) -> list[str]:
    return [item.id for item in reciprocal_rank_fusion(rankings, weights, k)]


def test_scores_are_summed_reciprocal_ranks() -> None:
    fused = reciprocal_rank_fusion([Ranking("dense", ["a", "b"]), Ranking("bm25", ["b", "c"])], WEIGHTS, 2)

    assert [item.id for item in fused] == ["b", "a", "c"]
    assert [item.score for item in fused] == pytest.approx([1 / 4 + 1 / 3, 1 / 3, 1 / 4])


def test_every_id_appears_once_across_retrievers_and_queries() -> None:
    rankings = [
        Ranking("dense", ["a", "b", "c"]),
        Ranking("bm25", ["c", "a"]),
        Ranking("dense", ["b", "d"]),  # a second query
        Ranking("bm25", []),  # a query no keyword matched
    ]

    assert sorted(_ids(rankings)) == ["a", "b", "c", "d"]


def test_with_a_small_k_one_retrievers_first_hit_beats_two_middling_ranks() -> None:
    # An exact error code that only BM25 finds must not drown under chunks both rank around fifth.
    rankings = [Ranking("dense", ["x", "y", "z", "m1", "shared"]), Ranking("bm25", ["code", "p", "q", "r", "shared"])]

    assert _ids(rankings, k=2)[:2] == ["x", "code"]
    assert _ids(rankings, k=60)[0] == "shared"  # the RRF paper's k rewards agreement over being first


def test_weights_tip_the_balance_between_retrievers() -> None:
    rankings = [Ranking("dense", ["d"]), Ranking("bm25", ["k"])]

    assert _ids(rankings, weights={"dense": 1.0, "bm25": 2.0}) == ["k", "d"]
    assert _ids(rankings, weights={"dense": 2.0, "bm25": 1.0}) == ["d", "k"]


def test_ties_go_to_the_better_single_rank_then_to_the_first_seen() -> None:
    tied = [Ranking("dense", ["a", "b"]), Ranking("bm25", ["b", "a"])]
    by_rank = [Ranking("dense", ["p", "q", "r"]), Ranking("bm25", ["q"])]

    assert _ids(tied) == ["a", "b"]
    assert reciprocal_rank_fusion(by_rank, {"dense": 1.0, "bm25": 0.0}, 2)[0].id == "p"


def test_the_best_possible_score_is_first_place_everywhere() -> None:
    rankings = [Ranking("dense", ["a"]), Ranking("bm25", ["a"]), Ranking("dense", ["a"])]

    best = best_possible_score(rankings, {"dense": 1.0, "bm25": 0.5}, 2)

    assert best == pytest.approx(2.5 / 3)
    assert reciprocal_rank_fusion(rankings, {"dense": 1.0, "bm25": 0.5}, 2)[0].score == pytest.approx(best)
