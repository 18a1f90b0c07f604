"""What search_documents shows the model: input checks, filters, formatting, structured output."""

from __future__ import annotations

from typing import Any

import pytest

from mcp_rag_tool.points import SearchFilter, SearchHit, source_prefixes
from mcp_rag_tool.search import (
    InvalidSearchRequest,
    format_hits,
    format_no_documents,
    format_no_match,
    parse_filter,
    structured_output,
    validate_request,
)


def _hit(source: str, position: int, score: float, heading: str = "H", title: str = "T") -> SearchHit:
    return SearchHit(
        id=f"{source}#{position}",
        source=source,
        title=title,
        heading=heading,
        position=position,
        text=f"text {source}#{position}",
        tags=("ops",),
        score=score,
    )


def test_results_are_numbered_with_source_heading_and_score_above_the_passage() -> None:
    hits = [
        SearchHit(id="d3", source="guide/design.md", title="Design", heading="Design > Wire contracts", position=3,
                  text="JSON is camelCase.", tags=(), score=0.8349),
        SearchHit(id="f0", source="faq.txt", title="faq.txt", heading="", position=0, text="Ask the lead.", tags=(),
                  score=0.41),
    ]  # fmt: skip

    assert format_hits(hits) == (
        "[1] guide/design.md — Design > Wire contracts (score 0.83)\nJSON is camelCase.\n\n"
        "[2] faq.txt — faq.txt (score 0.41)\nAsk the lead."
    )


def test_no_hits_reads_as_a_sentence_with_advice() -> None:
    assert format_hits([]).startswith("No matching passages were found. Rephrase the query")


def test_the_empty_index_message_names_the_configured_paths_and_the_formats() -> None:
    text = format_no_documents(["docs (not found)", "notes"])

    assert "No documents are indexed" in text
    assert "docs (not found), notes" in text
    assert ".html, .htm, .pdf" in text


def test_a_filter_that_matches_nothing_points_to_list_sources() -> None:
    text = format_no_match(SearchFilter(source_prefix="guides/", tags=("billing",)))

    assert "source_prefix 'guides/' and tags billing" in text
    assert "Call list_sources" in text


def test_structured_output_carries_every_field_with_a_rounded_score() -> None:
    output = structured_output([_hit("a.md", 2, 0.123456, heading="A > B", title="A")])

    assert output.model_dump() == {
        "results": [
            {
                "source": "a.md",
                "title": "A",
                "heading": "A > B",
                "position": 2,
                "tags": ["ops"],
                "text": "text a.md#2",
                "score": 0.1235,
            }
        ]
    }


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


@pytest.mark.parametrize(
    ("value", "expected"),
    [
        (None, SearchFilter()),
        ({}, SearchFilter()),
        ({"source_prefix": "./guides/"}, SearchFilter(source_prefix="guides/")),
        ({"source_prefix": "/ops"}, SearchFilter(source_prefix="ops")),
        ({"tags": ["Billing", "billing", " Q2 "]}, SearchFilter(tags=("billing", "q2"))),
        ({"tags": "ops"}, SearchFilter(tags=("ops",))),
        ({"source_prefix": "a/b.md", "tags": ["x"]}, SearchFilter(source_prefix="a/b.md", tags=("x",))),
    ],
)
def test_filters_are_normalised(value: Any, expected: SearchFilter) -> None:
    assert parse_filter(value) == expected


@pytest.mark.parametrize(
    ("value", "expected"),
    [
        ("guides", "filter must be an object"),
        ({"folder": "guides"}, "filter has unknown keys 'folder'"),
        ({"source_prefix": 3}, "filter.source_prefix must be a non-empty path string"),
        ({"source_prefix": "./"}, "filter.source_prefix must be a non-empty path string"),
        ({"tags": [1, 2]}, "filter.tags must be a list of non-empty strings"),
    ],
)
def test_a_bad_filter_is_refused_with_the_shape_to_use(value: Any, expected: str) -> None:
    with pytest.raises(InvalidSearchRequest) as refused:
        parse_filter(value)

    assert expected in str(refused.value)
    assert 'use {"source_prefix": "guides/"} and/or {"tags": ["billing"]}' in str(refused.value)


def test_too_many_filter_tags_are_refused() -> None:
    with pytest.raises(InvalidSearchRequest, match=r"filter\.tags has 21 tags; pass at most 20"):
        parse_filter({"tags": [f"t{i}" for i in range(21)]})


def test_a_source_lies_in_each_of_its_folders() -> None:
    assert source_prefixes("guides/setup/linux.md") == ["guides/", "guides/setup/", "guides/setup/linux.md"]
    assert source_prefixes("readme.md") == ["readme.md"]
