"""parse_searxng and format_results: SearXNG's JSON answer to what the model reads."""

from __future__ import annotations

from typing import Any

import pytest

from mcp_web_search.backends.base import SearchBackendError
from mcp_web_search.backends.searxng import parse_searxng
from mcp_web_search.results import SearchResult, format_results
from support.fake_searxng import DEFAULT_RESULTS


def _body(results: list[Any]) -> dict[str, Any]:
    return {
        "query": "model context protocol",
        "number_of_results": 0,
        "results": results,
        "answers": [],
        "corrections": [],
        "infoboxes": [],
        "suggestions": ["mcp server"],
        "unresponsive_engines": [["google", "timeout"]],
    }


def test_realistic_answer_becomes_results_in_searxng_order() -> None:
    results = parse_searxng(_body(DEFAULT_RESULTS))

    assert [r.url for r in results] == [entry["url"] for entry in DEFAULT_RESULTS]
    assert results[0] == SearchResult(
        title="Specification - Model Context Protocol",
        url="https://modelcontextprotocol.io/specification/2025-06-18",
        snippet=DEFAULT_RESULTS[0]["content"],
        published=None,
    )
    assert results[1].published == "2025-11-25T00:00:00"


def test_missing_title_falls_back_to_url_and_missing_content_to_empty_snippet() -> None:
    results = parse_searxng(_body([{"url": "https://example.org/a", "engine": "brave", "score": 1.0}]))

    assert results == [SearchResult(title="https://example.org/a", url="https://example.org/a", snippet="")]


def test_entries_without_a_web_url_are_skipped() -> None:
    body = _body(
        [
            {"title": "no url", "content": "x"},
            {"url": None, "title": "null url"},
            {"url": "magnet:?xt=urn:btih:abc", "title": "a torrent"},
            "not an object",
            {"url": "https://example.org/kept", "title": "Kept"},
        ]
    )

    assert [r.title for r in parse_searxng(body)] == ["Kept"]


def test_duplicate_urls_keep_only_the_first_and_best_ranked() -> None:
    body = _body(
        [
            {"url": "https://example.org/page", "title": "First"},
            {"url": "http://EXAMPLE.org/page/", "title": "Same page over http with a slash"},
            {"url": "https://example.org/page#section", "title": "Same page, a fragment"},
            {"url": "https://example.org/page?lang=de", "title": "Another page"},
        ]
    )

    assert [r.title for r in parse_searxng(body)] == ["First", "Another page"]


def test_whitespace_is_collapsed_and_long_snippets_are_cut() -> None:
    body = _body([{"url": "https://example.org", "title": "  A\n  title ", "content": "word " * 300}])

    (result,) = parse_searxng(body)

    assert result.title == "A title"
    assert len(result.snippet) == 500
    assert result.snippet.endswith("…")


def test_empty_published_date_is_none() -> None:
    body = _body([{"url": "https://example.org", "title": "T", "publishedDate": ""}])

    assert parse_searxng(body)[0].published is None


@pytest.mark.parametrize("body", [[], "html", {"query": "q"}, {"results": "none"}, None])
def test_a_body_that_is_not_a_searxng_answer_is_a_backend_error(body: Any) -> None:
    with pytest.raises(SearchBackendError, match="no `results` list") as caught:
        parse_searxng(body)

    assert caught.value.backend == "searxng"


def test_format_results_numbers_each_result_with_its_url_date_and_snippet() -> None:
    results = [
        SearchResult(title="First", url="https://a.example", snippet="About a.", published="2025-01-02T00:00:00"),
        SearchResult(title="Second", url="https://b.example", snippet=""),
    ]

    assert format_results("two sites", results) == (
        '2 web results for "two sites":\n'
        "\n"
        "1. First\n"
        "   URL: https://a.example\n"
        "   Published: 2025-01-02T00:00:00\n"
        "   About a.\n"
        "\n"
        "2. Second\n"
        "   URL: https://b.example"
    )


def test_format_results_says_when_nothing_was_found() -> None:
    text = format_results("qwzx", [])

    assert text.startswith('No web results found for "qwzx"')
    assert "broader keywords" in text
