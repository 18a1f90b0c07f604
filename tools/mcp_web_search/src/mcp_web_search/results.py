"""What a search returns, and how it reads for a model: pure data and a pure formatter."""

from __future__ import annotations

import re
from collections.abc import Callable, Iterable
from typing import Any

from pydantic import BaseModel, ConfigDict, Field

from mcp_web_search.urls import clean_url, url_key

__all__ = [
    "MAX_SNIPPET_CHARS",
    "SearchResult",
    "WebSearchOutput",
    "clean_text",
    "dedupe",
    "format_results",
    "result",
    "results_of",
]

# A snippet is a hint of what the page says, not the page: keep the model's context for many results.
MAX_SNIPPET_CHARS = 500
_WHITESPACE = re.compile(r"\s+")


class SearchResult(BaseModel):
    """One web page found by a search backend."""

    model_config = ConfigDict(frozen=True)

    title: str = Field(description="Title of the page.")
    url: str = Field(description="Address of the page.")
    snippet: str = Field(description="Short extract of the page that matched the query; may be empty.")
    published: str | None = Field(default=None, description="Publication date as the backend gave it (ISO 8601).")


class WebSearchOutput(BaseModel):
    """The structured result of ``web_search`` (its declared output schema)."""

    query: str = Field(description="The query that was searched.")
    site: str | None = Field(default=None, description="The domain the search was restricted to, if any.")
    backend: str = Field(description="Name of the search backend that answered.")
    results: list[SearchResult] = Field(description="Results, best first.")


def clean_text(value: object) -> str:
    """Whitespace collapsed; anything but a string is empty."""
    return _WHITESPACE.sub(" ", value).strip() if isinstance(value, str) else ""


def result(url: object, title: object, snippet: object, published: object = None) -> SearchResult | None:
    """A ``SearchResult`` from a backend's raw fields, or ``None`` when there is no http(s) URL.

    Tracking parameters leave the URL, a missing title falls back to the URL, a long snippet is cut.
    """
    if not isinstance(url, str) or not url.strip().lower().startswith(("http://", "https://")):
        return None
    address = clean_url(url.strip())
    text = clean_text(snippet)
    if len(text) > MAX_SNIPPET_CHARS:
        text = text[: MAX_SNIPPET_CHARS - 1].rstrip() + "…"
    date = clean_text(published)
    return SearchResult(title=clean_text(title) or address, url=address, snippet=text, published=date or None)


def results_of(entries: Iterable[object], read: Callable[[dict[str, Any]], SearchResult | None]) -> list[SearchResult]:
    """The results ``read`` makes of a backend's entries, in order; an entry that is not a JSON object, or that
    ``read`` makes nothing of (no http(s) URL: see ``result``), is left out."""
    return [item for entry in entries if isinstance(entry, dict) and (item := read(entry)) is not None]


def dedupe(results: Iterable[SearchResult]) -> list[SearchResult]:
    """The results in order, each page once (the first, best-ranked, copy): see ``urls.url_key``."""
    seen: set[str] = set()
    unique: list[SearchResult] = []
    for item in results:
        key = url_key(item.url)
        if key not in seen:
            seen.add(key)
            unique.append(item)
    return unique


def format_results(query: str, results: list[SearchResult], site: str | None = None) -> str:
    """Numbered, plain-text results a model can read and cite by number and URL."""
    on_site = f" on {site}" if site else ""
    if not results:
        advice = "Try other or broader keywords" + (", or search without `site`." if site else ".")
        return f'No web results found for "{query}"{on_site}. {advice}'
    noun = "result" if len(results) == 1 else "results"
    lines = [f'{len(results)} web {noun} for "{query}"{on_site}:']
    for number, result in enumerate(results, start=1):
        lines.append("")
        lines.append(f"{number}. {result.title}")
        lines.append(f"   URL: {result.url}")
        if result.published:
            lines.append(f"   Published: {result.published}")
        if result.snippet:
            lines.append(f"   {result.snippet}")
    return "\n".join(lines)
