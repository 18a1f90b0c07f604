"""Structure-aware chunking: heading paths, token bounds and overlap, code fences, plain text, the real tokenizer."""

from __future__ import annotations

import itertools
import re

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from mcp_rag_tool.chunking import (
    Chunk,
    ChunkLimits,
    Section,
    chunk_markdown,
    chunk_plain_text,
    chunk_sections,
    embedding_text,
    split_front_matter,
    text_sections,
)
from mcp_rag_tool.tokens import WordCounter, WordPieceCounter, count_tokens


def _words(text: str) -> list[str]:
    return text.split()


def _numbered_sentences(count: int, prefix: str = "w") -> str:
    """Sentences of eight words each, every word unique, so overlap and loss are visible."""
    return " ".join(" ".join(f"{prefix}{s}_{w}" for w in range(8)) + "." for s in range(count))


def _limits(max_tokens: int, overlap: int) -> ChunkLimits:
    return ChunkLimits(max_tokens=max_tokens, overlap_tokens=overlap, counter=WordCounter())


@pytest.fixture(scope="module")
def wordpiece() -> WordPieceCounter:
    return WordPieceCounter.bundled()


def test_headings_become_heading_paths_and_the_first_h1_the_title() -> None:
    doc = """# Design

Intro paragraph.

## Wire contracts

Contracts are camelCase.

### Errors ###

Every error is JSON.

## Testing

Run the real thing.
"""
    chunks = chunk_markdown(doc, "guide/design.md")

    assert [(c.heading, c.text) for c in chunks] == [
        ("Design", "Intro paragraph."),
        ("Design > Wire contracts", "Contracts are camelCase."),
        ("Design > Wire contracts > Errors", "Every error is JSON."),
        ("Design > Testing", "Run the real thing."),
    ]
    assert {c.title for c in chunks} == {"Design"}
    assert {c.source for c in chunks} == {"guide/design.md"}
    assert [c.position for c in chunks] == [0, 1, 2, 3]


def test_text_before_any_heading_has_an_empty_heading_path_and_the_file_name_is_the_title() -> None:
    chunks = chunk_markdown("Preamble text.\n\n## Later\n\nBody.", "notes.md")

    assert [(c.heading, c.text) for c in chunks] == [("", "Preamble text."), ("Later", "Body.")]
    assert {c.title for c in chunks} == {"notes.md"}


def test_setext_headings_are_understood_and_front_matter_is_not_text() -> None:
    doc = "---\ntitle: ignored\ntags: [a]\n---\nOverview\n========\n\nFirst.\n\nDetails\n-------\n\nSecond.\n"

    chunks = chunk_markdown(doc, "x.md")

    assert [(c.heading, c.text) for c in chunks] == [("Overview", "First."), ("Overview > Details", "Second.")]
    assert chunks[0].title == "Overview"


def test_front_matter_fields_are_read_flat_including_block_lists() -> None:
    fields, body = split_front_matter('---\ntitle: "Rate limits"\ntags:\n  - api\n  - v2\n---\n# Body\n')

    assert fields == {"title": '"Rate limits"', "tags": "api, v2"}
    assert body == "# Body"


def test_chunks_stay_within_the_token_limit_and_overlap_their_predecessor() -> None:
    doc = "# Long\n\n" + _numbered_sentences(40)  # one 320-word paragraph under a one-word heading

    chunks = chunk_markdown(doc, "long.md", _limits(51, 10))

    assert len(chunks) > 5
    # The heading path is embedded with every chunk and counts against the limit: 1 + 50 words.
    assert all(len(_words(embedding_text(c))) <= 51 for c in chunks)
    for previous, current in itertools.pairwise(chunks):
        assert _words(current.text)[:10] == _words(previous.text)[-10:]
    covered = {word for c in chunks for word in _words(c.text)}
    assert covered == set(_words(_numbered_sentences(40)))


def test_small_paragraphs_are_packed_together_up_to_the_limit() -> None:
    paragraphs = [" ".join(f"p{p}_{w}" for w in range(10)) for p in range(9)]  # 9 x 10 words

    chunks = chunk_markdown("\n\n".join(paragraphs), "p.md", _limits(41, 0))  # the title "p.md" takes 1

    assert [len(_words(c.text)) for c in chunks] == [40, 40, 10]
    assert chunks[0].text == "\n\n".join(paragraphs[:4])


def test_overlap_does_not_cross_into_another_section() -> None:
    doc = "## A\n\n" + _numbered_sentences(10, "a") + "\n\n## B\n\n" + _numbered_sentences(2, "b")

    chunks = chunk_markdown(doc, "s.md", _limits(51, 10))

    section_b = [c for c in chunks if c.heading == "B"]
    assert len(section_b) == 1
    assert all(word.startswith("b") for word in _words(section_b[0].text))


def test_a_code_fence_is_kept_whole_and_its_comments_are_not_headings() -> None:
    code = "```python\n# not a heading\n\ndef handler():\n    return 1\n```"
    doc = "# Guide\n\n" + _numbered_sentences(4) + "\n\n" + code + "\n\nAfter the code."

    chunks = chunk_markdown(doc, "g.md", _limits(41, 5))

    holding = [c for c in chunks if "def handler" in c.text]
    assert len(holding) == 1
    assert code in holding[0].text
    assert {c.heading for c in chunks} == {"Guide"}


def test_an_oversized_code_fence_is_split_into_fenced_pieces() -> None:
    body = "\n".join(f"line_{i} = compute({i}, {i + 1})" for i in range(40))  # 40 lines x 4 words
    doc = f"~~~sh\n{body}\n~~~\n"

    chunks = chunk_markdown(doc, "c.md", _limits(31, 5))

    assert len(chunks) > 1
    for chunk in chunks:
        assert len(_words(chunk.text)) <= 30
        assert chunk.text.startswith("~~~sh\n")
        assert chunk.text.endswith("\n~~~")
    lines = [line for c in chunks for line in c.text.splitlines() if line.startswith("line_")]
    assert lines == body.splitlines()


def test_plain_text_is_split_by_paragraphs_without_reading_markdown() -> None:
    text = "# not a heading\nfirst paragraph\n\n\nsecond paragraph\n"

    chunks = chunk_plain_text(text, "readme.txt", _limits(7, 0))  # the title takes 1 of 7

    assert [(c.heading, c.text) for c in chunks] == [
        ("", "# not a heading\nfirst paragraph"),
        ("", "second paragraph"),
    ]
    assert {c.title for c in chunks} == {"readme.txt"}


def test_an_empty_or_blank_document_has_no_chunks() -> None:
    assert chunk_markdown("", "empty.md") == []
    assert chunk_markdown("  \n\n# Only a heading\n\n", "h.md") == []
    assert chunk_plain_text("\n \n", "blank.txt") == []


def test_the_embedded_text_carries_the_heading_path_or_else_the_title() -> None:
    with_heading = Chunk(text="Body.", source="a.md", title="A", heading="A > Retries", position=0)
    without = Chunk(text="Body.", source="a.txt", title="a.txt", heading="", position=0)

    assert embedding_text(with_heading) == "A > Retries\n\nBody."
    assert embedding_text(without) == "a.txt\n\nBody."


def test_limits_leave_room_for_text_and_overlap_at_most_half_a_chunk() -> None:
    with pytest.raises(ValueError, match="overlap_tokens"):
        ChunkLimits(max_tokens=40, overlap_tokens=21, counter=WordCounter())
    with pytest.raises(ValueError, match="no room for text"):
        ChunkLimits(max_tokens=3, overlap_tokens=0, counter=WordCounter())


def test_with_the_model_tokenizer_every_embedded_chunk_fits_the_window(wordpiece: WordPieceCounter) -> None:
    identifiers = " ".join(f"ERR_CONN_RESET_{i} 0x8007{i:04x} naïve-café" for i in range(120))
    doc = f"# Errors\n\n## Network > Resets\n\n{_numbered_sentences(60)}\n\n{identifiers}\n\n```\n{identifiers}\n```\n"

    chunks = chunk_markdown(doc, "errors.md", ChunkLimits(max_tokens=64, overlap_tokens=8, counter=wordpiece))

    assert len(chunks) > 10
    for chunk in chunks:
        tokens = count_tokens(wordpiece, embedding_text(chunk)) + wordpiece.special_tokens
        assert tokens <= 64, (tokens, chunk.text[:80])
    assert "ERR_CONN_RESET_119" in " ".join(c.text for c in chunks)


def test_the_token_count_matches_what_the_tokenizer_makes_of_the_whole_text(wordpiece: WordPieceCounter) -> None:
    from tokenizers import Tokenizer

    from mcp_rag_tool.tokens import bundled_model_path

    tokenizer = Tokenizer.from_file(str(bundled_model_path() / "tokenizer.json"))
    tokenizer.no_padding()
    text = "Retry-After: 30 seconds (HTTP 429); see `max_inflight_requests` and naïve café\n\n# Heading"

    expected = len(tokenizer.encode(text, add_special_tokens=True).ids)

    assert count_tokens(wordpiece, text) + wordpiece.special_tokens == expected
    assert wordpiece.special_tokens == 2


def test_a_word_longer_than_a_chunk_is_cut_rather_than_overflowing(wordpiece: WordPieceCounter) -> None:
    blob = "A" * 3000  # a base64 blob, say: one "word" of hundreds of tokens

    chunks = chunk_plain_text(f"before {blob} after", "blob.txt", ChunkLimits(64, 8, counter=wordpiece))

    assert all(count_tokens(wordpiece, embedding_text(c)) + 2 <= 64 for c in chunks)
    assert "".join(c.text for c in chunks).count("A") >= 3000


def test_sections_made_elsewhere_keep_their_headings() -> None:
    sections = [*text_sections("Page one text.", ("Page 1",)), Section(("Page 2",), [])]

    chunks = chunk_sections(sections, "report.pdf", "Annual report", _limits(50, 0))

    assert [(c.heading, c.title, c.text) for c in chunks] == [("Page 1", "Annual report", "Page one text.")]


_word = st.from_regex(re.compile(r"[a-z]{1,8}"), fullmatch=True)
_paragraph = st.lists(_word, min_size=1, max_size=120).map(" ".join)
_line = st.one_of(_paragraph, st.just(""), st.just("```"), _word.map(lambda w: f"## {w}"))


@settings(max_examples=150, deadline=None)
@given(
    lines=st.lists(_line, max_size=30),
    max_tokens=st.integers(min_value=24, max_value=80),
    overlap=st.integers(min_value=0, max_value=12),
)
def test_no_chunk_exceeds_the_limit_and_no_word_is_lost(lines: list[str], max_tokens: int, overlap: int) -> None:
    doc = "\n".join(lines)

    chunks = chunk_markdown(doc, "p.md", _limits(max_tokens, overlap))

    assert all(len(_words(embedding_text(c))) <= max_tokens for c in chunks)
    body_words = {w for line in lines if not line.startswith("## ") for w in _words(line)}
    assert body_words <= {w for c in chunks for w in _words(c.text)}
