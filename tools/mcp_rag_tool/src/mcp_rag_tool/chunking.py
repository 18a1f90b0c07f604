"""Cutting documents into chunks the embedding model reads whole. Pure: text in, chunks out.

A document is first split into sections (Markdown: by headings, each section remembering its
heading path such as "Design > Wire contracts"; plain text: one section; PDF: one per page),
then each section's paragraphs and code fences are packed into chunks. Sizes are counted in
tokens of the embedding model's tokenizer: what gets embedded (the heading path, then the
passage, plus the model's special tokens) never exceeds ``max_tokens``. Consecutive chunks of
one section share up to ``overlap_tokens`` tokens, so that a sentence cut at a boundary is still
found whole in one of them. A code fence is never split unless it alone is longer than a chunk;
then each piece is fenced again. Cuts fall between sentences, else between words.
"""

from __future__ import annotations

import re
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import PurePath

from mcp_rag_tool.tokens import TokenCounter, WordCounter, count_tokens

__all__ = [
    "HEADING_SEPARATOR",
    "Block",
    "Chunk",
    "ChunkLimits",
    "Section",
    "chunk_markdown",
    "chunk_plain_text",
    "chunk_sections",
    "embedding_text",
    "markdown_sections",
    "split_front_matter",
    "text_sections",
]

HEADING_SEPARATOR = " > "


@dataclass(frozen=True)
class Chunk:
    """One searchable passage of a document."""

    text: str
    source: str
    """Where the document comes from: its path relative to the ingested folder, or the name it was added under."""
    title: str
    """The document's title (front matter, first level-1 heading, HTML/PDF title), or its file name."""
    heading: str
    """Headings enclosing the passage, outermost first, joined by " > "; empty before the first heading."""
    position: int
    """Index of the chunk in its document, from 0."""


@dataclass(frozen=True)
class ChunkLimits:
    """How big chunks may be, in tokens counted by ``counter`` (one token per word by default)."""

    max_tokens: int = 256
    overlap_tokens: int = 32
    counter: TokenCounter = field(default_factory=WordCounter)

    def __post_init__(self) -> None:
        if self.max_tokens - self.counter.special_tokens < 4:
            raise ValueError(f"max_tokens={self.max_tokens} leaves no room for text")
        if not 0 <= 2 * self.overlap_tokens <= self.max_tokens:
            raise ValueError(
                f"need 0 <= overlap_tokens <= max_tokens / 2, got {self.overlap_tokens=} {self.max_tokens=}"
            )


@dataclass(frozen=True)
class Block:
    """A paragraph or a code fence: the unit chunks are packed from."""

    text: str
    is_code: bool = False


@dataclass(frozen=True)
class Section:
    headings: tuple[str, ...]
    blocks: list[Block]


def embedding_text(chunk: Chunk) -> str:
    """What gets embedded (and indexed for keywords): the passage under its heading path, or its title."""
    context = chunk.heading or chunk.title
    return f"{context}\n\n{chunk.text}" if context else chunk.text


def chunk_markdown(text: str, source: str, limits: ChunkLimits | None = None) -> list[Chunk]:
    _, body = split_front_matter(text)
    title, sections = markdown_sections(body)
    return chunk_sections(sections, source, title or PurePath(source).name, limits or ChunkLimits())


def chunk_plain_text(text: str, source: str, limits: ChunkLimits | None = None) -> list[Chunk]:
    return chunk_sections(text_sections(text), source, PurePath(source).name, limits or ChunkLimits())


def chunk_sections(sections: Sequence[Section], source: str, title: str, limits: ChunkLimits) -> list[Chunk]:
    """Pack every section's blocks into chunks whose embedded text fits ``limits``."""
    packer = _Packer(limits.counter)
    chunks: list[Chunk] = []
    for section in sections:
        heading = HEADING_SEPARATOR.join(section.headings)
        context_tokens = count_tokens(limits.counter, heading or title)
        # A heading path longer than half a chunk is pathological: then the model cuts its window short.
        budget = max(limits.max_tokens - limits.counter.special_tokens - context_tokens, limits.max_tokens // 2)
        overlap = min(limits.overlap_tokens, budget // 2)
        for text in packer.pack(section.blocks, budget, overlap):
            chunks.append(Chunk(text=text, source=source, title=title, heading=heading, position=len(chunks)))
    return chunks


def split_front_matter(text: str) -> tuple[dict[str, str], str]:
    """A leading ``---`` block of ``key: value`` lines, and the text after it (unchanged if there is none).

    Only flat keys are read (values of nested YAML are left as their raw text): enough for
    ``title`` and ``tags``, without a YAML parser.
    """
    lines = text.splitlines()
    if not lines or lines[0].strip() != "---":
        return {}, text
    for end in range(1, min(len(lines), _FRONT_MATTER_LIMIT)):
        if lines[end].strip() in ("---", "..."):
            fields: dict[str, str] = {}
            key = ""
            for line in lines[1:end]:
                match = _FRONT_MATTER_FIELD.match(line)
                if match:
                    key = match.group(1).lower()
                    fields[key] = match.group(2).strip()
                elif key and line.strip().startswith("- "):  # a YAML block list under the last key
                    fields[key] = f"{fields[key]}, {line.strip()[2:].strip()}".lstrip(", ")
            return fields, "\n".join(lines[end + 1 :])
    return {}, text


def markdown_sections(text: str) -> tuple[str | None, list[Section]]:
    """Split Markdown into sections by heading; returns the first H1 and the sections in order."""
    lines = text.splitlines()
    title: str | None = None
    open_headings: list[tuple[int, str]] = []
    sections = [Section((), [])]
    paragraph: list[str] = []

    def flush_paragraph() -> None:
        if paragraph:
            sections[-1].blocks.append(Block("\n".join(paragraph)))
            paragraph.clear()

    def open_section(level: int, heading: str) -> None:
        nonlocal title
        if level == 1 and title is None and heading:
            title = heading
        open_headings[:] = [(lvl, text) for lvl, text in open_headings if lvl < level]
        open_headings.append((level, heading))
        sections.append(Section(tuple(text for _, text in open_headings if text), []))

    index = 0
    while index < len(lines):
        line = lines[index]
        fence = _FENCE_OPEN.match(line)
        if fence:
            flush_paragraph()
            end = _fence_end(lines, index, fence.group(1))
            sections[-1].blocks.append(Block("\n".join(lines[index : end + 1]), is_code=True))
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
    return title, [section for section in sections if section.blocks]


def text_sections(text: str, headings: tuple[str, ...] = ()) -> list[Section]:
    """Plain text: one section of paragraphs (blank-line separated); Markdown syntax is not read."""
    blocks = [Block(paragraph) for paragraph in _paragraphs(text.splitlines())]
    return [Section(headings, blocks)] if blocks else []


# --- internals -------------------------------------------------------------------------------

_ATX_HEADING = re.compile(r"^ {0,3}(#{1,6})(?:[ \t]+(.*?))?[ \t]*$")
_ATX_CLOSING = re.compile(r"(?:^|[ \t]+)#+$")
_SETEXT_UNDERLINE = re.compile(r"^ {0,3}(=+|-+)[ \t]*$")
_FENCE_OPEN = re.compile(r"^ {0,3}(`{3,}|~{3,})")
_SENTENCE_END = re.compile(r"(?<=[.!?])\s+")
_FRONT_MATTER_LIMIT = 200  # lines; a "---" at the top with no close this early is a rule, not front matter
_FRONT_MATTER_FIELD = re.compile(r"^([A-Za-z_][\w-]*)\s*:(.*)$")


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


@dataclass(frozen=True)
class _Unit:
    """A block, or a piece of one, that fits a chunk; ``tokens`` counted once."""

    text: str
    is_code: bool
    tokens: int


class _Packer:
    def __init__(self, counter: TokenCounter) -> None:
        self._counter = counter

    def pack(self, blocks: Sequence[Block], budget: int, overlap: int) -> list[str]:
        """Greedily fill chunks with whole units, each new chunk starting with the last one's tail."""
        units = [unit for block in blocks for unit in self._fit(block, budget, overlap)]
        texts: list[str] = []
        current: list[_Unit] = []
        size = 0
        for unit in units:
            if current and size + unit.tokens > budget:
                texts.append("\n\n".join(u.text for u in current))
                current = self._tail(current, min(overlap, budget - unit.tokens))
                size = sum(u.tokens for u in current)
            current.append(unit)
            size += unit.tokens
        if current:
            texts.append("\n\n".join(u.text for u in current))
        return texts

    def _tokens(self, text: str) -> int:
        return count_tokens(self._counter, text)

    def _fit(self, block: Block, budget: int, overlap: int) -> list[_Unit]:
        """Cut a block that cannot fit in one chunk; smaller blocks pass through whole."""
        tokens = self._tokens(block.text)
        if tokens <= budget:
            return [_Unit(block.text, block.is_code, tokens)]
        if block.is_code:
            return self._split_code(block.text, budget)
        # Leave room for the overlap the packer puts in front of each piece.
        return [_Unit(text, False, size) for text, size in self._split_prose(block.text, budget - overlap)]

    def _split_prose(self, text: str, budget: int) -> list[tuple[str, int]]:
        """Pack sentences into pieces of at most ``budget`` tokens; a longer sentence is cut by words."""
        pieces: list[tuple[str, int]] = []
        current: list[str] = []
        size = 0
        for sentence in _SENTENCE_END.split(text):
            words = self._words_within(sentence.split(), budget)
            counts = self._counter.word_tokens(words)
            sentence_size = sum(counts)
            if current and size + sentence_size > budget:
                pieces.append((" ".join(current), size))
                current, size = [], 0
            if sentence_size <= budget:
                current.extend(words)
                size += sentence_size
                continue
            for word, count in zip(words, counts, strict=True):
                if current and size + count > budget:
                    pieces.append((" ".join(current), size))
                    current, size = [], 0
                current.append(word)
                size += count
        if current:
            pieces.append((" ".join(current), size))
        return pieces

    def _words_within(self, words: list[str], budget: int) -> list[str]:
        """``words``, with any single word longer than ``budget`` tokens cut into pieces that fit."""
        counts = self._counter.word_tokens(words)
        if all(count <= budget for count in counts):
            return words
        result: list[str] = []
        for word, count in zip(words, counts, strict=True):
            result.extend(self._cut_word(word, budget) if count > budget else [word])
        return result

    def _cut_word(self, word: str, budget: int) -> list[str]:
        # A word piece covers at least one character, so ``budget`` characters are at most ``budget`` tokens.
        width = max(1, budget)
        pieces = [word[start : start + width] for start in range(0, len(word), width)]
        return [piece for long in pieces for piece in self._halve_until_fits(long, budget)]

    def _halve_until_fits(self, piece: str, budget: int) -> list[str]:
        if len(piece) <= 1 or self._tokens(piece) <= budget:
            return [piece]
        middle = len(piece) // 2
        return self._halve_until_fits(piece[:middle], budget) + self._halve_until_fits(piece[middle:], budget)

    def _split_code(self, text: str, budget: int) -> list[_Unit]:
        """Cut an oversized code fence by lines; every piece is fenced again so it still reads as code."""
        lines = text.splitlines()
        opening = lines[0]
        marker = _FENCE_OPEN.match(opening)
        fence = marker.group(1) if marker else "```"
        has_closing = len(lines) > 1 and lines[-1].strip().startswith(fence[0] * len(fence))
        body = lines[1:-1] if has_closing else lines[1:]
        closing = lines[-1] if has_closing else fence
        frame = self._tokens(opening) + self._tokens(closing)
        line_budget = max(1, budget - frame)
        pieces: list[list[str]] = [[]]
        size = 0
        for line in body:
            for part, part_size in self._split_line(line, line_budget):
                if pieces[-1] and size + part_size > line_budget:
                    pieces.append([])
                    size = 0
                pieces[-1].append(part)
                size += part_size
        return [
            _Unit("\n".join([opening, *piece, closing]), True, self._tokens("\n".join(piece)) + frame)
            for piece in pieces
        ]

    def _split_line(self, line: str, budget: int) -> list[tuple[str, int]]:
        size = self._tokens(line)
        if size <= budget:
            return [(line, size)]
        return self._split_prose(" ".join(self._words_within(line.split(), budget)), budget)

    def _tail(self, units: Sequence[_Unit], budget: int) -> list[_Unit]:
        """The last ``budget`` tokens of ``units``: whole units, then the end of a paragraph (never of code)."""
        tail: list[_Unit] = []
        size = 0
        for unit in reversed(units):
            if size + unit.tokens <= budget:
                tail.insert(0, unit)
                size += unit.tokens
                continue
            if not unit.is_code and size < budget:
                words = unit.text.split()
                counts = self._counter.word_tokens(words)
                taken, taken_size = 0, 0
                while taken < len(words) and taken_size + counts[-1 - taken] <= budget - size:
                    taken_size += counts[-1 - taken]
                    taken += 1
                if taken:
                    tail.insert(0, _Unit(" ".join(words[-taken:]), False, taken_size))
            break
        return tail
