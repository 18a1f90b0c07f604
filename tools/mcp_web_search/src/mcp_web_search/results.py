"""What a search returns, and how it reads for a model: pure data and a pure formatter."""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict, Field

__all__ = ["SearchResult", "WebSearchOutput", "format_results"]


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
    backend: str = Field(description="Name of the search backend that answered.")
    results: list[SearchResult] = Field(description="Results, best first.")


def format_results(query: str, results: list[SearchResult]) -> str:
    """Numbered, plain-text results a model can read and cite by number and URL."""
    if not results:
        return f'No web results found for "{query}". Try other or broader keywords.'
    noun = "result" if len(results) == 1 else "results"
    lines = [f'{len(results)} web {noun} for "{query}":']
    for number, result in enumerate(results, start=1):
        lines.append("")
        lines.append(f"{number}. {result.title}")
        lines.append(f"   URL: {result.url}")
        if result.published:
            lines.append(f"   Published: {result.published}")
        if result.snippet:
            lines.append(f"   {result.snippet}")
    return "\n".join(lines)
