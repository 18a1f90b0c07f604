"""From a document's bytes to its title, tags and sections, by format. Pure apart from pypdf's parsing.

Markdown (``.md``, ``.markdown``): front matter ``title`` and ``tags`` are read, then headings.
Plain text (``.txt``): paragraphs. HTML (``.html``, ``.htm``): converted to Markdown-shaped text
first (``html_text``), so its headings make heading paths too. PDF (``.pdf``): the text of each
page (pypdf), one section per page with the heading "Page N".
"""

from __future__ import annotations

import io
import re
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from pathlib import PurePath
from typing import Literal

from mcp_rag_tool.chunking import Section, markdown_sections, split_front_matter, text_sections
from mcp_rag_tool.html_text import extract_html

__all__ = [
    "SUPPORTED_SUFFIXES",
    "DocumentKind",
    "ParsedDocument",
    "UnreadableDocument",
    "kind_of",
    "normalize_tags",
    "parse_document",
    "parse_tags",
]

DocumentKind = Literal["markdown", "text", "html", "pdf"]

_KINDS: dict[str, DocumentKind] = {
    ".md": "markdown",
    ".markdown": "markdown",
    ".txt": "text",
    ".html": "html",
    ".htm": "html",
    ".pdf": "pdf",
}
SUPPORTED_SUFFIXES = frozenset(_KINDS)


class UnreadableDocument(Exception):
    """The bytes are not a document of their format (a broken or encrypted PDF, say)."""


@dataclass(frozen=True)
class ParsedDocument:
    kind: DocumentKind
    title: str
    tags: tuple[str, ...]
    sections: list[Section]
    link_list: bool = False
    """Mostly links (an HTML index or table of contents): ranked below content pages."""


def kind_of(source: str, default: DocumentKind | None = None) -> DocumentKind | None:
    """The format a file name's suffix says, else ``default``."""
    return _KINDS.get(PurePath(source).suffix.lower(), default)


def parse_document(
    source: str,
    data: bytes,
    kind: DocumentKind,
    *,
    title: str | None = None,
    tags: Sequence[str] = (),
) -> ParsedDocument:
    """Parse ``data``; ``title`` and ``tags`` given by the caller win over what the document says."""
    fallback_title = PurePath(source).name or source
    found_tags: tuple[str, ...] = ()
    link_list = False
    if kind == "pdf":
        found_title, sections = _pdf_sections(data)
    elif kind == "text":
        found_title, sections = None, text_sections(_decode(data))
    else:
        text = _decode(data)
        if kind == "html":
            page = extract_html(text)
            markdown_title, sections = markdown_sections(page.markdown)
            found_title = page.title or markdown_title
            link_list = page.is_link_list
        else:
            front, body = split_front_matter(text)
            markdown_title, sections = markdown_sections(body)
            found_title = _unquote(front.get("title", "")) or markdown_title
            found_tags = parse_tags(front.get("tags", ""))
    return ParsedDocument(
        kind=kind,
        title=(title or found_title or fallback_title).strip(),
        tags=normalize_tags([*tags, *found_tags]),
        sections=sections,
        link_list=link_list,
    )


def parse_tags(value: str) -> tuple[str, ...]:
    """``[a, b]``, ``a, b`` or ``"a" 'b'``: the tags of a front matter line."""
    return normalize_tags(_unquote(part) for part in re.split(r"[,\s]+", value.strip().strip("[]")) if _unquote(part))


def _decode(data: bytes) -> str:
    if data.startswith(b"\xef\xbb\xbf"):
        data = data[3:]
    return data.decode("utf-8", errors="replace")


def _unquote(value: str) -> str:
    return value.strip().strip("\"'").strip()


def normalize_tags(values: Iterable[str]) -> tuple[str, ...]:
    """Tags compare case-insensitively: each stripped and lower-cased, once, in order."""
    seen: dict[str, None] = {}
    for value in values:
        tag = value.strip().lower()
        if tag and tag not in seen:
            seen[tag] = None
    return tuple(seen)


def _pdf_sections(data: bytes) -> tuple[str | None, list[Section]]:
    from pypdf import PdfReader
    from pypdf.errors import PdfReadError

    try:
        reader = PdfReader(io.BytesIO(data))
        if reader.is_encrypted and not reader.decrypt(""):
            raise UnreadableDocument("the PDF is encrypted")
        title = reader.metadata.title if reader.metadata is not None else None
        sections: list[Section] = []
        for number, page in enumerate(reader.pages, start=1):
            sections.extend(text_sections(_pdf_paragraphs(page.extract_text() or ""), (f"Page {number}",)))
    except (PdfReadError, ValueError, KeyError, TypeError) as exc:
        raise UnreadableDocument(f"not a readable PDF ({type(exc).__name__}: {exc})") from exc
    return (title.strip() or None) if isinstance(title, str) else None, sections


def _pdf_paragraphs(text: str) -> str:
    """pypdf gives one line per text line and rarely a blank line: make short runs of lines paragraphs.

    A line that ends a sentence and is shorter than most lines ends its paragraph, which is how
    laid-out text ends paragraphs; other line breaks are joined.
    """
    lines = [line.strip() for line in text.splitlines()]
    if not any(lines):
        return ""
    widths = sorted(len(line) for line in lines if line)
    typical = widths[len(widths) * 3 // 4]
    out: list[str] = []
    for line in lines:
        if not line:
            out.append("")
            continue
        out.append(line)
        if line.endswith((".", "!", "?", ":")) and len(line) < 0.8 * typical:
            out.append("")
    return "\n".join(out)
