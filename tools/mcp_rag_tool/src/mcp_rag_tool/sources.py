"""What ``list_sources`` and ``add_documents`` accept, return and show the model. Pure.

``validate_new_documents`` turns the ``add_documents`` argument into ``DocumentInput``s or
refuses it with a message saying what to change; the output models double as the tools'
outputSchemas.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from pydantic import BaseModel, Field

from mcp_rag_tool.documents import kind_of, normalize_tags
from mcp_rag_tool.ingest import API_ORIGIN, DocumentInput, IngestReport
from mcp_rag_tool.points import SourceRecord

__all__ = [
    "MAX_DOCUMENT_CHARS",
    "MAX_NEW_DOCUMENTS",
    "MAX_SOURCES_LISTED",
    "AddDocumentsOutput",
    "InvalidDocuments",
    "ListSourcesOutput",
    "NewDocument",
    "SourceInfo",
    "added_output",
    "format_added",
    "format_sources",
    "list_output",
    "select_sources",
    "validate_new_documents",
]

MAX_NEW_DOCUMENTS = 50
MAX_DOCUMENT_CHARS = 500_000
MAX_SOURCES_LISTED = 1000
_MAX_SOURCE_CHARS = 500
_MAX_TAGS = 20
_MAX_TAG_CHARS = 64


class NewDocument(BaseModel):
    """A document for ``add_documents``."""

    source: str = Field(description='A unique name such as "notes/meeting-2024-05-02.md"; the same name replaces it.')
    text: str = Field(
        description="The document's text; Markdown headings are understood (or HTML, if source ends in .html)."
    )
    title: str | None = Field(default=None, description="Its title; default: its first heading, or the source.")
    tags: list[str] = Field(default_factory=list, description="Tags to filter searches by, e.g. ['meeting', 'q2'].")


class InvalidDocuments(ValueError):
    """``add_documents`` arguments the tool refuses; the message says what to change."""


class SourceInfo(BaseModel):
    source: str = Field(description="The document's source, as search results name it.")
    title: str = Field(description="The document's title.")
    tags: list[str] = Field(description="Its tags.")
    kind: str = Field(description="markdown, text, html or pdf.")
    origin: str = Field(
        description="folder:<path> (found in that folder, at start-up or by the CLI) or api (add_documents)."
    )
    chunks: int = Field(description="How many searchable passages it was cut into.")
    updated_at: str = Field(description="When it was last (re)indexed, ISO 8601 UTC.")


class ListSourcesOutput(BaseModel):
    sources: list[SourceInfo] = Field(description="The indexed documents, by source.")
    total: int = Field(description="How many documents match, including any not listed past the limit.")


class AddDocumentsOutput(BaseModel):
    added: list[str] = Field(description="Sources indexed for the first time.")
    updated: list[str] = Field(description="Sources whose previous version was replaced.")
    unchanged: list[str] = Field(description="Sources already indexed with the same text, title and tags.")
    chunks: int = Field(description="Passages embedded and stored by this call.")


def validate_new_documents(documents: Sequence[NewDocument], known: Mapping[str, SourceRecord]) -> list[DocumentInput]:
    if not documents:
        raise InvalidDocuments('documents is empty: pass at least one {"source": ..., "text": ...}.')
    if len(documents) > MAX_NEW_DOCUMENTS:
        raise InvalidDocuments(f"documents has {len(documents)} items; pass at most {MAX_NEW_DOCUMENTS} per call.")
    inputs: list[DocumentInput] = []
    seen: set[str] = set()
    for index, document in enumerate(documents):
        where = f"documents[{index}]"
        source = document.source.strip()
        if not source or len(source) > _MAX_SOURCE_CHARS or any(ord(char) < 32 for char in source):
            raise InvalidDocuments(
                f"{where}.source must be a non-empty name of at most {_MAX_SOURCE_CHARS} characters on one line, "
                'such as "notes/onboarding.md".'
            )
        if source in seen:
            raise InvalidDocuments(f"{where}.source {source!r} appears twice; give each document its own source.")
        seen.add(source)
        owner = known.get(source)
        if owner is not None and owner.origin != API_ORIGIN:
            raise InvalidDocuments(
                f"{where}.source {source!r} is a file ingested from a folder ({owner.origin}); choose another "
                "source name, such as one under notes/."
            )
        if not document.text.strip():
            raise InvalidDocuments(f"{where}.text is empty; pass the document's text.")
        if len(document.text) > MAX_DOCUMENT_CHARS:
            raise InvalidDocuments(
                f"{where}.text is {len(document.text)} characters long; split it into documents of at most "
                f"{MAX_DOCUMENT_CHARS} characters."
            )
        tags = normalize_tags(document.tags)
        if len(tags) > _MAX_TAGS or any(len(tag) > _MAX_TAG_CHARS for tag in tags):
            raise InvalidDocuments(f"{where}.tags: at most {_MAX_TAGS} tags of at most {_MAX_TAG_CHARS} characters.")
        kind = kind_of(source, "markdown")
        inputs.append(
            DocumentInput(
                source=source,
                kind="markdown" if kind == "pdf" or kind is None else kind,  # text given as text is never a PDF
                data=document.text.encode(),
                origin=API_ORIGIN,
                title=(document.title or "").strip() or None,
                tags=tags,
            )
        )
    return inputs


def select_sources(records: Mapping[str, SourceRecord], source_prefix: str | None) -> list[SourceRecord]:
    """The committed records under ``source_prefix`` (whole path segments, as in search filters), by source."""
    selected = sorted((r for r in records.values() if r.committed), key=lambda record: record.source)
    if not source_prefix:
        return selected
    folder = source_prefix if source_prefix.endswith("/") else source_prefix + "/"
    return [r for r in selected if r.source == source_prefix or r.source.startswith(folder)]


def list_output(records: Sequence[SourceRecord], limit: int) -> ListSourcesOutput:
    return ListSourcesOutput(
        sources=[
            SourceInfo(
                source=record.source,
                title=record.title,
                tags=list(record.tags),
                kind=record.kind,
                origin=record.origin,
                chunks=record.chunks,
                updated_at=record.updated_at,
            )
            for record in records[:limit]
        ],
        total=len(records),
    )


def format_sources(output: ListSourcesOutput, source_prefix: str | None) -> str:
    where = f" under {source_prefix!r}" if source_prefix else ""
    if not output.sources:
        return f"No documents are indexed{where}."
    lines = [f"{output.total} indexed document{'s' if output.total != 1 else ''}{where}:"]
    for info in output.sources:
        tags = f"; tags: {', '.join(info.tags)}" if info.tags else ""
        lines.append(f"- {info.source} — {info.title} ({info.chunks} chunks{tags})")
    if output.total > len(output.sources):
        lines.append(f"... and {output.total - len(output.sources)} more; pass a source_prefix or a higher limit.")
    return "\n".join(lines)


def added_output(report: IngestReport) -> AddDocumentsOutput:
    by_outcome: dict[str, list[str]] = {"added": [], "updated": [], "unchanged": []}
    for source, outcome in report.outcomes.items():
        by_outcome.setdefault(outcome, []).append(source)
    return AddDocumentsOutput(
        added=by_outcome["added"],
        updated=by_outcome["updated"],
        unchanged=by_outcome["unchanged"],
        chunks=report.chunks,
    )


def format_added(output: AddDocumentsOutput) -> str:
    parts = []
    for label, sources in (("added", output.added), ("updated", output.updated), ("unchanged", output.unchanged)):
        if sources:
            parts.append(f"{label}: {', '.join(sources)}")
    return f"Indexed {output.chunks} passage{'s' if output.chunks != 1 else ''} ({'; '.join(parts)}). " + (
        "They can be searched now with search_documents."
    )
