"""What search_documents shows the model: input checks, merging of several queries, formatting."""

from __future__ import annotations

import pytest

from mcp_rag_tool.search import (
    InvalidSearchRequest,
    format_hits,
    format_no_documents,
    merge_hits,
    structured_output,
    validate_request,
)
from mcp_rag_tool.search import SearchHit as Hit


def _hit(source: str, position: int, score: float, heading: str = "H", title: str = "T") -> Hit:
    return Hit(
        source=source, title=title, heading=heading, position=position, text=f"text {source}#{position}", score=score
    )


def test_results_are_numbered_with_source_heading_and_score_above_the_passage() -> None:
    hits = [
        Hit(source="guide/design.md", title="Design", heading="Design > Wire contracts", position=3,
            text="JSON is camelCase.", score=0.8349),
        Hit(source="faq.txt", title="faq.txt", heading="", position=0, text="Ask the lead.", score=0.41),
    ]  # fmt: skip

    assert format_hits(hits) == (
        "[1] guide/design.md — Design > Wire contracts (score 0.83)\nJSON is camelCase.\n\n"
        "[2] faq.txt — faq.txt (score 0.41)\nAsk the lead."
    )


def test_no_hits_reads_as_a_sentence_not_an_empty_string() -> None:
    assert format_hits([]) == "No matching passages were found."


def test_the_empty_index_message_names_the_configured_paths() -> None:
    text = format_no_documents(["docs (not found)", "notes"])

    assert "No documents are indexed" in text
    assert "docs (not found), notes" in text


def test_structured_output_carries_every_field_with_a_rounded_score() -> None:
    output = structured_output([_hit("a.md", 0, 0.123456, heading="A > B", title="A")])

    assert output.model_dump() == {
        "results": [{"source": "a.md", "title": "A", "heading": "A > B", "text": "text a.md#0", "score": 0.1235}]
    }


def test_merging_keeps_each_chunk_once_with_its_best_score_best_first() -> None:
    first_query = [_hit("a.md", 0, 0.9), _hit("b.md", 1, 0.5), _hit("c.md", 0, 0.2)]
    second_query = [_hit("b.md", 1, 0.7), _hit("d.md", 2, 0.6), _hit("a.md", 0, 0.1)]

    merged = merge_hits([first_query, second_query], top_k=3)

    assert [(h.source, h.score) for h in merged] == [("a.md", 0.9), ("b.md", 0.7), ("d.md", 0.6)]


def test_chunks_of_one_document_at_different_positions_are_different_results() -> None:
    merged = merge_hits([[_hit("a.md", 0, 0.5), _hit("a.md", 1, 0.4)]], top_k=5)

    assert [h.position for h in merged] == [0, 1]


def test_valid_queries_are_returned_stripped() -> None:
    assert validate_request(["  how are retries configured?\n", "backoff"], 5) == [
        "how are retries configured?",
        "backoff",
    ]


@pytest.mark.parametrize(
    ("queries", "top_k", "expected"),
    [
        ([], 5, "queries is empty: pass at least one"),
        (["ok", "   "], 5, "queries[1] is empty"),
        (["x" * 2001], 5, "queries[0] is 2001 characters long; keep each query under 2000"),
        ([f"q{i}" for i in range(11)], 5, "pass at most 10 queries"),
        (["ok"], 0, "top_k must be between 1 and 50 (got 0)"),
        (["ok"], 51, "top_k must be between 1 and 50 (got 51)"),
    ],
)
def test_bad_input_is_refused_with_what_to_change(queries: list[str], top_k: int, expected: str) -> None:
    with pytest.raises(InvalidSearchRequest) as refused:
        validate_request(queries, top_k)

    assert expected in str(refused.value)


def test_limits_are_inclusive() -> None:
    assert validate_request(["x" * 2000] * 10, 50) == ["x" * 2000] * 10
    assert validate_request(["x"], 1) == ["x"]
