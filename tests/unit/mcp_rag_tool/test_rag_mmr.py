"""Maximal marginal relevance: near-duplicates give way to the next distinct passage."""

from __future__ import annotations

import pytest

from mcp_rag_tool.rerank import maximal_marginal_relevance

# Two copies of one passage (a, a2), and two distinct passages.
VECTORS = [[1.0, 0.0, 0.0], [0.99, 0.141, 0.0], [0.0, 1.0, 0.0], [0.0, 0.0, 1.0]]
RELEVANCE = [0.9, 0.88, 0.6, 0.5]


def test_a_near_duplicate_loses_its_place_to_a_distinct_passage() -> None:
    assert maximal_marginal_relevance(RELEVANCE, VECTORS, 3, 0.7) == [0, 2, 3]


def test_lambda_one_is_plain_relevance_order() -> None:
    assert maximal_marginal_relevance(RELEVANCE, VECTORS, 4, 1.0) == [0, 1, 2, 3]


def test_the_duplicate_still_comes_when_nothing_else_is_left() -> None:
    assert maximal_marginal_relevance(RELEVANCE, VECTORS, 10, 0.7) == [0, 2, 3, 1]


def test_equal_relevance_keeps_candidate_order_and_zero_vectors_are_tolerated() -> None:
    assert maximal_marginal_relevance([0.5, 0.5], [[0.0, 0.0], [0.0, 0.0]], 2, 0.7) == [0, 1]


def test_nothing_to_pick_and_mismatched_inputs() -> None:
    assert maximal_marginal_relevance([], [], 3, 0.7) == []
    with pytest.raises(ValueError, match="2 relevance scores for 1 vectors"):
        maximal_marginal_relevance([0.1, 0.2], [[1.0]], 1, 0.7)
