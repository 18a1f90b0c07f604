"""What ``search_documents`` accepts, returns and shows the model. Pure: no I/O, no model, no store.

``validate_request`` and ``parse_filter`` turn bad arguments into messages that tell the model
what to change; ``format_hits`` renders the numbered passages the model reads and cites;
``SearchDocumentsOutput`` is the structured result (and the tool's outputSchema).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from pydantic import BaseModel, Field

from mcp_rag_tool.documents import normalize_tags
from mcp_rag_tool.points import SearchFilter, SearchHit

__all__ = [
    "FILTER_SCHEMA",
    "MAX_QUERIES",
    "MAX_QUERY_CHARS",
    "MAX_TOP_K",
    "DocumentMatch",
    "InvalidSearchRequest",
    "SearchDocumentsOutput",
    "describe_filter",
    "format_hits",
    "format_no_documents",
    "format_no_match",
    "format_no_tenant_documents",
    "parse_filter",
    "structured_output",
    "validate_request",
]

MAX_QUERIES = 10
MAX_QUERY_CHARS = 2000
MAX_TOP_K = 50
_MAX_FILTER_TAGS = 20

FILTER_SCHEMA: dict[str, Any] = {
    "type": "object",
    "description": (
        "Optional: search only some documents. source_prefix keeps sources under a folder or equal to a file "
        '(whole path segments: "guides/" or "guides/setup.md"); tags keeps documents carrying any of the tags. '
        "Call list_sources to see the sources and tags."
    ),
    "properties": {
        "source_prefix": {"type": "string", "description": 'A folder or file path, e.g. "guides/".'},
        "tags": {"type": "array", "items": {"type": "string"}, "description": "Match documents with any of these."},
    },
    "additionalProperties": False,
}


class DocumentMatch(BaseModel):
    source: str = Field(description="Where the document comes from: its path in the indexed folder, or its name.")
    title: str = Field(description="The document's title.")
    heading: str = Field(description='Headings enclosing the passage, e.g. "Design > Wire contracts".')
    position: int = Field(description="Index of the passage in its document, from 0.")
    tags: list[str] = Field(description="Tags of the document.")
    text: str = Field(description="The passage itself.")
    score: float = Field(description="Relevance from 0 to 1; compare within one answer only.")


class SearchDocumentsOutput(BaseModel):
    results: list[DocumentMatch] = Field(description="The best passages, most relevant first; [n] in the text is n-1.")


class InvalidSearchRequest(ValueError):
    """Arguments the tool refuses; the message says what to change."""


def validate_request(queries: Sequence[str], top_k: int) -> list[str]:
    """Check the arguments of ``search_documents``; returns the queries stripped of surrounding space."""
    if not queries:
        raise InvalidSearchRequest(
            'queries is empty: pass at least one question or phrase, e.g. {"queries": ["how are retries configured?"]}.'
        )
    if len(queries) > MAX_QUERIES:
        raise InvalidSearchRequest(
            f"queries has {len(queries)} items; pass at most {MAX_QUERIES} queries per call "
            "(merge similar ones, or make several calls)."
        )
    cleaned: list[str] = []
    for index, query in enumerate(queries):
        text = query.strip()
        if not text:
            raise InvalidSearchRequest(
                f"queries[{index}] is empty; every query must be a non-empty question or phrase."
            )
        if len(text) > MAX_QUERY_CHARS:
            raise InvalidSearchRequest(
                f"queries[{index}] is {len(text)} characters long; keep each query under {MAX_QUERY_CHARS} "
                "characters (a short question or a few key phrases works best)."
            )
        cleaned.append(text)
    if not 1 <= top_k <= MAX_TOP_K:
        raise InvalidSearchRequest(f"top_k must be between 1 and {MAX_TOP_K} (got {top_k}).")
    return cleaned


def parse_filter(value: object) -> SearchFilter:
    """The ``filter`` argument as a ``SearchFilter``; anything malformed is refused with the fix."""
    if value is None:
        return SearchFilter()
    usage = 'use {"source_prefix": "guides/"} and/or {"tags": ["billing"]}, or leave filter out'
    if not isinstance(value, dict):
        raise InvalidSearchRequest(f"filter must be an object; {usage}.")
    unknown = sorted(set(value) - {"source_prefix", "tags"})
    if unknown:
        raise InvalidSearchRequest(f"filter has unknown keys {', '.join(map(repr, unknown))}; {usage}.")
    prefix = value.get("source_prefix")
    if prefix is not None and (not isinstance(prefix, str) or not prefix.strip().lstrip("./")):
        raise InvalidSearchRequest(f"filter.source_prefix must be a non-empty path string; {usage}.")
    tags = value.get("tags")
    if tags is not None:
        if isinstance(tags, str):
            tags = [tags]
        if not isinstance(tags, list) or not all(isinstance(tag, str) and tag.strip() for tag in tags):
            raise InvalidSearchRequest(f"filter.tags must be a list of non-empty strings; {usage}.")
        if len(tags) > _MAX_FILTER_TAGS:
            raise InvalidSearchRequest(f"filter.tags has {len(tags)} tags; pass at most {_MAX_FILTER_TAGS}.")
    return SearchFilter(
        source_prefix=_normalize_prefix(prefix) if isinstance(prefix, str) else None,
        tags=normalize_tags(tags or ()),
    )


def describe_filter(search_filter: SearchFilter) -> str:
    parts = []
    if search_filter.source_prefix is not None:
        parts.append(f"source_prefix {search_filter.source_prefix!r}")
    if search_filter.tags:
        parts.append(f"tags {', '.join(search_filter.tags)}")
    return " and ".join(parts)


def format_hits(hits: Sequence[SearchHit]) -> str:
    """The text the model reads: numbered passages, each under a line naming where it comes from."""
    if not hits:
        return "No matching passages were found. Rephrase the query, or say the documents do not cover it."
    return "\n\n".join(_format_hit(number, hit) for number, hit in enumerate(hits, start=1))


def format_no_documents(configured_paths: Sequence[str]) -> str:
    paths = ", ".join(configured_paths) if configured_paths else "(none)"
    return (
        "No documents are indexed, so there is nothing to search. "
        f"Configured document paths: {paths}. Supported files: .md, .markdown, .txt, .html, .htm, .pdf. "
        "Tell the user the document collection is empty rather than guessing an answer from it."
    )


def format_no_tenant_documents() -> str:
    return (
        "No documents have been added to this tenant's collection yet, so there is nothing to search "
        "(add_documents adds them). Tell the user the document collection is empty rather than guessing an answer."
    )


def format_no_match(search_filter: SearchFilter) -> str:
    return (
        f"No indexed document matches the filter ({describe_filter(search_filter)}). "
        "Call list_sources to see the sources and tags, or search again without the filter."
    )


def structured_output(hits: Sequence[SearchHit]) -> SearchDocumentsOutput:
    return SearchDocumentsOutput(
        results=[
            DocumentMatch(
                source=hit.source,
                title=hit.title,
                heading=hit.heading,
                position=hit.position,
                tags=list(hit.tags),
                text=hit.text,
                score=round(hit.score, 4),
            )
            for hit in hits
        ]
    )


def _normalize_prefix(prefix: str) -> str:
    text = prefix.strip().replace("\\", "/")
    while text.startswith(("./", "/")):
        text = text[1:] if text.startswith("/") else text[2:]
    return text


def _format_hit(number: int, hit: SearchHit) -> str:
    where = hit.heading or hit.title
    return f"[{number}] {hit.source} — {where} (score {hit.score:.2f})\n{hit.text}"
