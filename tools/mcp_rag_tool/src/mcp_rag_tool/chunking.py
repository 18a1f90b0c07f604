"""Cutting documents into chunks a small embedding model can read whole. Pure: text in, chunks out.

Markdown is split by headings first (each chunk remembers its heading path, such as
"Design > Wire contracts"), then by paragraphs and code fences, which are packed into chunks of
at most ``max_words`` words. Consecutive chunks of one section share up to ``overlap_words``
words so that a sentence cut at a boundary is still found whole in one of them. A code fence
is never split unless it alone is longer than a chunk; then each piece is fenced again.
Plain text is split by paragraphs only.
"""

from __future__ import annotations

import re
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import PurePath

__all__ = [
    "HEADING_SEPARATOR",
    "MARKDOWN_SUFFIXES",
    "SUPPORTED_SUFFIXES",
    "TEXT_SUFFIXES",
    "Chunk",
    "chunk_document",
    "chunk_markdown",
    "chunk_plain_text",
    "embedding_text",
]

MARKDOWN_SUFFIXES = frozenset({".md", ".markdown"})
TEXT_SUFFIXES = frozenset({".txt"})
SUPPORTED_SUFFIXES = MARKDOWN_SUFFIXES | TEXT_SUFFIXES
HEADING_SEPARATOR = " > "


@dataclass(frozen=True)
class Chunk:
    """One searchable passage of a document."""

    text: str
    source: str
    """Path of the document relative to the folder it was ingested from (or its file name)."""
    title: str
    """The document's first level-1 heading, or its file name."""
    heading: str
    """Headings enclosing the passage, outermost first, joined by " > "; empty before the first heading."""
    position: int
    """Index of the chunk in its document, from 0."""


def embedding_text(chunk: Chunk) -> str:
    """What gets embedded: the passage under its heading path, so a section's topic counts too."""
    context = chunk.heading or chunk.title
    return f"{context}\n\n{chunk.text}" if context else chunk.text


def chunk_document(text: str, source: str, *, max_words: int = 180, overlap_words: int = 30) -> list[Chunk]:
    """Chunk a document, as Markdown or as plain text according to the suffix of ``source``."""
    if PurePath(source).suffix.lower() in MARKDOWN_SUFFIXES:
        return chunk_markdown(text, source, max_words=max_words, overlap_words=overlap_words)
    return chunk_plain_text(text, source, max_words=max_words, overlap_words=overlap_words)


def chunk_markdown(text: str, source: str, *, max_words: int = 180, overlap_words: int = 30) -> list[Chunk]:
    _check_sizes(max_words, overlap_words)
    title, sections = _parse_markdown(text)
    return _chunks_of(sections, source, title or PurePath(source).name, max_words, overlap_words)


def chunk_plain_text(text: str, source: str, *, max_words: int = 180, overlap_words: int = 30) -> list[Chunk]:
    _check_sizes(max_words, overlap_words)
    blocks = [_Block.prose(paragraph) for paragraph in _paragraphs(text.splitlines())]
    return _chunks_of([_Section((), blocks)], source, PurePath(source).name, max_words, overlap_words)


# --- internals -------------------------------------------------------------------------------

_ATX_HEADING = re.compile(r"^ {0,3}(#{1,6})(?:[ \t]+(.*?))?[ \t]*$")
_ATX_CLOSING = re.compile(r"(?:^|[ \t]+)#+$")
_SETEXT_UNDERLINE = re.compile(r"^ {0,3}(=+|-+)[ \t]*$")
_FENCE_OPEN = re.compile(r"^ {0,3}(`{3,}|~{3,})")
_SENTENCE_END = re.compile(r"(?<=[.!?])\s+")
_FRONT_MATTER_LIMIT = 200  # lines; a "---" at the top with no close this early is a rule, not front matter


@dataclass(frozen=True)
class _Block:
    """A paragraph or a code fence: the unit chunks are packed from."""

    text: str
    is_code: bool
    words: int

    @classmethod
    def prose(cls, text: str) -> _Block:
        return cls(text, False, _word_count(text))

    @classmethod
    def code(cls, text: str) -> _Block:
        return cls(text, True, _word_count(text))


@dataclass(frozen=True)
class _Section:
    headings: tuple[str, ...]
    blocks: list[_Block]


def _check_sizes(max_words: int, overlap_words: int) -> None:
    if max_words < 1 or not 0 <= overlap_words < max_words:
        raise ValueError(f"need 0 <= overlap_words < max_words, got {overlap_words=} {max_words=}")


def _word_count(text: str) -> int:
    return len(text.split())


def _parse_markdown(text: str) -> tuple[str | None, list[_Section]]:
    """Split Markdown into sections by heading; returns the first H1 and the sections in order."""
    lines = _without_front_matter(text.splitlines())
    title: str | None = None
    open_headings: list[tuple[int, str]] = []
    sections = [_Section((), [])]
    paragraph: list[str] = []

    def flush_paragraph() -> None:
        if paragraph:
            sections[-1].blocks.append(_Block.prose("\n".join(paragraph)))
            paragraph.clear()

    def open_section(level: int, heading: str) -> None:
        nonlocal title
        if level == 1 and title is None and heading:
            title = heading
        open_headings[:] = [(lvl, text) for lvl, text in open_headings if lvl < level]
        open_headings.append((level, heading))
        sections.append(_Section(tuple(text for _, text in open_headings if text), []))

    index = 0
    while index < len(lines):
        line = lines[index]
        fence = _FENCE_OPEN.match(line)
        if fence:
            flush_paragraph()
            end = _fence_end(lines, index, fence.group(1))
            sections[-1].blocks.append(_Block.code("\n".join(lines[index : end + 1])))
            index = end + 1
            continue
        heading = _ATX_HEADING.match(line)
        if heading:
            flush_paragraph()
            open_section(len(heading.group(1)), _ATX_CLOSING.sub("", heading.group(2) or "").strip())
        elif paragraph and _SETEXT_UNDERLINE.match(line):
            # "Title\n=====" (level 1) or "Title\n-----" (level 2): the paragraph above is the heading.
            heading_text = " ".join(part.strip() for part in paragraph)
            paragraph.clear()
            open_section(1 if line.strip().startswith("=") else 2, heading_text)
        elif line.strip():
            paragraph.append(line)
        else:
            flush_paragraph()
        index += 1
    flush_paragraph()
    return title, sections


def _without_front_matter(lines: list[str]) -> list[str]:
    if not lines or lines[0].strip() != "---":
        return lines
    for index in range(1, min(len(lines), _FRONT_MATTER_LIMIT)):
        if lines[index].strip() in ("---", "..."):
            return lines[index + 1 :]
    return lines


def _fence_end(lines: Sequence[str], start: int, marker: str) -> int:
    """Index of the line closing the fence opened at ``start`` (the last line if it never closes)."""
    closing = re.compile(rf"^ {{0,3}}{re.escape(marker[0])}{{{len(marker)},}}[ \t]*$")
    for index in range(start + 1, len(lines)):
        if closing.match(lines[index]):
            return index
    return len(lines) - 1


def _paragraphs(lines: Sequence[str]) -> Iterator[str]:
    current: list[str] = []
    for line in lines:
        if line.strip():
            current.append(line)
        elif current:
            yield "\n".join(current)
            current = []
    if current:
        yield "\n".join(current)


def _chunks_of(
    sections: Sequence[_Section], source: str, title: str, max_words: int, overlap_words: int
) -> list[Chunk]:
    chunks: list[Chunk] = []
    for section in sections:
        units = [unit for block in section.blocks for unit in _fit(block, max_words, overlap_words)]
        heading = HEADING_SEPARATOR.join(section.headings)
        for text in _pack(units, max_words, overlap_words):
            chunks.append(Chunk(text=text, source=source, title=title, heading=heading, position=len(chunks)))
    return chunks


def _fit(block: _Block, max_words: int, overlap_words: int) -> list[_Block]:
    """Cut a block that cannot fit in one chunk; smaller blocks pass through whole."""
    if block.words <= max_words:
        return [block]
    if block.is_code:
        return _split_code(block.text, max_words)
    # Leave room for the overlap the packer puts in front of each piece.
    return [_Block.prose(piece) for piece in _split_prose(block.text, max_words - overlap_words)]


def _split_prose(text: str, budget: int) -> list[str]:
    """Pack sentences into pieces of at most ``budget`` words; a longer sentence is cut by words."""
    pieces: list[str] = []
    current: list[str] = []
    for sentence in _SENTENCE_END.split(text):
        words = sentence.split()
        while len(words) > budget:
            if current:
                pieces.append(" ".join(current))
                current = []
            pieces.append(" ".join(words[:budget]))
            words = words[budget:]
        if len(current) + len(words) > budget:
            pieces.append(" ".join(current))
            current = []
        current.extend(words)
    if current:
        pieces.append(" ".join(current))
    return pieces


def _split_code(text: str, max_words: int) -> list[_Block]:
    """Cut an oversized code fence by lines; every piece is fenced again so it still reads as code."""
    lines = text.splitlines()
    opening = lines[0]
    marker = _FENCE_OPEN.match(opening)
    fence = marker.group(1) if marker else "```"
    has_closing = len(lines) > 1 and lines[-1].strip().startswith(fence[0] * len(fence))
    body = lines[1:-1] if has_closing else lines[1:]
    closing = lines[-1] if has_closing else fence
    budget = max(1, max_words - _word_count(opening) - _word_count(closing))
    pieces: list[list[str]] = [[]]
    size = 0
    for line in body:
        for part in _split_line(line, budget):
            words = _word_count(part)
            if pieces[-1] and size + words > budget:
                pieces.append([])
                size = 0
            pieces[-1].append(part)
            size += words
    return [_Block.code("\n".join([opening, *piece, closing])) for piece in pieces]


def _split_line(line: str, budget: int) -> list[str]:
    words = line.split()
    if len(words) <= budget:
        return [line]
    return [" ".join(words[start : start + budget]) for start in range(0, len(words), budget)]


def _pack(units: Sequence[_Block], max_words: int, overlap_words: int) -> list[str]:
    """Greedily fill chunks with whole units, each new chunk starting with the last one's tail."""
    texts: list[str] = []
    current: list[_Block] = []
    size = 0
    for unit in units:
        if current and size + unit.words > max_words:
            texts.append(_join(current))
            current = _tail(current, min(overlap_words, max_words - unit.words))
            size = sum(block.words for block in current)
        current.append(unit)
        size += unit.words
    if current:
        texts.append(_join(current))
    return texts


def _tail(blocks: Sequence[_Block], budget: int) -> list[_Block]:
    """The last ``budget`` words of ``blocks``: whole blocks, then part of a paragraph (never of code)."""
    tail: list[_Block] = []
    size = 0
    for block in reversed(blocks):
        if size + block.words <= budget:
            tail.insert(0, block)
            size += block.words
            continue
        if not block.is_code and size < budget:
            tail.insert(0, _Block.prose(" ".join(block.text.split()[size - budget :])))
        break
    return tail


def _join(blocks: Sequence[_Block]) -> str:
    return "\n\n".join(block.text for block in blocks)
