"""What a search returns and how the tool presents it. Pure: no I/O, no model, no store.

``validate_request`` turns bad arguments into messages that tell the model what to change;
``merge_hits`` combines the hits of several queries; ``format_hits`` renders the text the model
reads; ``SearchDocumentsOutput`` is the structured result (and the tool's outputSchema).
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass

from pydantic import BaseModel, Field

__all__ = [
    "MAX_QUERIES",
    "MAX_QUERY_CHARS",
    "MAX_TOP_K",
    "DocumentMatch",
    "InvalidSearchRequest",
    "SearchDocumentsOutput",
    "SearchHit",
    "format_hits",
    "format_no_documents",
    "merge_hits",
    "structured_output",
    "validate_request",
]

MAX_QUERIES = 10
MAX_QUERY_CHARS = 2000
MAX_TOP_K = 50


@dataclass(frozen=True)
class SearchHit:
    """A chunk found by a query, with its cosine similarity to it."""

    source: str
    title: str
    heading: str
    position: int
    text: str
    score: float

    @property
    def key(self) -> tuple[str, int]:
        """Identifies the chunk, whichever query found it."""
        return (self.source, self.position)


class DocumentMatch(BaseModel):
    source: str = Field(description="Path of the document, relative to the folder it was indexed from.")
    title: str = Field(description="The document's title (its first level-1 heading, or its file name).")
    heading: str = Field(description='Headings enclosing the passage, e.g. "Design > Wire contracts".')
    text: str = Field(description="The passage itself.")
    score: float = Field(description="Cosine similarity to the closest query; higher is more relevant.")


class SearchDocumentsOutput(BaseModel):
    results: list[DocumentMatch] = Field(description="The best passages, most relevant first.")


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


def merge_hits(hits_per_query: Iterable[Iterable[SearchHit]], top_k: int) -> list[SearchHit]:
    """One entry per chunk, with the best score any query gave it; the ``top_k`` best, best first."""
    best: dict[tuple[str, int], SearchHit] = {}
    for hits in hits_per_query:
        for hit in hits:
            kept = best.get(hit.key)
            if kept is None or hit.score > kept.score:
                best[hit.key] = hit
    ranked = sorted(best.values(), key=lambda hit: (-hit.score, hit.source, hit.position))
    return ranked[:top_k]


def format_hits(hits: Sequence[SearchHit]) -> str:
    """The text the model reads: numbered passages, each under a line naming where it comes from."""
    if not hits:
        return "No matching passages were found."
    return "\n\n".join(_format_hit(number, hit) for number, hit in enumerate(hits, start=1))


def format_no_documents(configured_paths: Sequence[str]) -> str:
    paths = ", ".join(configured_paths) if configured_paths else "(none)"
    return (
        "No documents are indexed, so there is nothing to search. "
        f"Configured document paths: {paths}. Supported files: .md, .markdown, .txt. "
        "Tell the user the document collection is empty rather than guessing an answer from it."
    )


def structured_output(hits: Sequence[SearchHit]) -> SearchDocumentsOutput:
    return SearchDocumentsOutput(
        results=[
            DocumentMatch(
                source=hit.source, title=hit.title, heading=hit.heading, text=hit.text, score=round(hit.score, 4)
            )
            for hit in hits
        ]
    )


def _format_hit(number: int, hit: SearchHit) -> str:
    where = hit.heading or hit.title
    return f"[{number}] {hit.source} — {where} (score {hit.score:.2f})\n{hit.text}"
