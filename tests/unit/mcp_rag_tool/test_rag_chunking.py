"""Markdown-aware chunking: heading paths, size bound and overlap, code fences, plain text."""

from __future__ import annotations

import itertools
import re

from hypothesis import given, settings
from hypothesis import strategies as st

from mcp_rag_tool.chunking import Chunk, chunk_document, chunk_markdown, chunk_plain_text, embedding_text


def _words(text: str) -> list[str]:
    return text.split()


def _numbered_sentences(count: int, prefix: str = "w") -> str:
    """Sentences of eight words each, every word unique, so overlap and loss are visible."""
    return " ".join(" ".join(f"{prefix}{s}_{w}" for w in range(8)) + "." for s in range(count))


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


def test_setext_headings_and_front_matter_are_understood() -> None:
    doc = "---\ntitle: ignored\ntags: [a]\n---\nOverview\n========\n\nFirst.\n\nDetails\n-------\n\nSecond.\n"

    chunks = chunk_markdown(doc, "x.md")

    assert [(c.heading, c.text) for c in chunks] == [("Overview", "First."), ("Overview > Details", "Second.")]
    assert chunks[0].title == "Overview"


def test_chunks_stay_within_the_word_limit_and_overlap_their_predecessor() -> None:
    doc = "# Long\n\n" + _numbered_sentences(40)  # one 320-word paragraph

    chunks = chunk_markdown(doc, "long.md", max_words=50, overlap_words=10)

    assert len(chunks) > 5
    assert all(len(_words(c.text)) <= 50 for c in chunks)
    for previous, current in itertools.pairwise(chunks):
        assert _words(current.text)[:10] == _words(previous.text)[-10:]
    covered = {word for c in chunks for word in _words(c.text)}
    assert covered == set(_words(_numbered_sentences(40)))


def test_small_paragraphs_are_packed_together_up_to_the_limit() -> None:
    paragraphs = [" ".join(f"p{p}_{w}" for w in range(10)) for p in range(9)]  # 9 x 10 words

    chunks = chunk_markdown("\n\n".join(paragraphs), "p.md", max_words=40, overlap_words=0)

    assert [len(_words(c.text)) for c in chunks] == [40, 40, 10]
    assert chunks[0].text == "\n\n".join(paragraphs[:4])


def test_overlap_does_not_cross_into_another_section() -> None:
    doc = "## A\n\n" + _numbered_sentences(10, "a") + "\n\n## B\n\n" + _numbered_sentences(2, "b")

    chunks = chunk_markdown(doc, "s.md", max_words=50, overlap_words=10)

    section_b = [c for c in chunks if c.heading == "B"]
    assert len(section_b) == 1
    assert all(word.startswith("b") for word in _words(section_b[0].text))


def test_a_code_fence_is_kept_whole_and_its_comments_are_not_headings() -> None:
    code = "```python\n# not a heading\n\ndef handler():\n    return 1\n```"
    doc = "# Guide\n\n" + _numbered_sentences(4) + "\n\n" + code + "\n\nAfter the code."

    chunks = chunk_markdown(doc, "g.md", max_words=40, overlap_words=5)

    holding = [c for c in chunks if "def handler" in c.text]
    assert len(holding) == 1
    assert code in holding[0].text
    assert {c.heading for c in chunks} == {"Guide"}


def test_an_oversized_code_fence_is_split_into_fenced_pieces() -> None:
    body = "\n".join(f"line_{i} = compute({i}, {i + 1})" for i in range(40))  # 40 lines x 4 words
    doc = f"~~~sh\n{body}\n~~~\n"

    chunks = chunk_markdown(doc, "c.md", max_words=30, overlap_words=5)

    assert len(chunks) > 1
    for chunk in chunks:
        assert len(_words(chunk.text)) <= 30
        assert chunk.text.startswith("~~~sh\n")
        assert chunk.text.endswith("\n~~~")
    lines = [line for c in chunks for line in c.text.splitlines() if line.startswith("line_")]
    assert lines == body.splitlines()


def test_plain_text_is_split_by_paragraphs_without_reading_markdown() -> None:
    text = "# not a heading\nfirst paragraph\n\n\nsecond paragraph\n"

    chunks = chunk_plain_text(text, "readme.txt", max_words=6, overlap_words=0)

    assert [(c.heading, c.text) for c in chunks] == [
        ("", "# not a heading\nfirst paragraph"),
        ("", "second paragraph"),
    ]
    assert {c.title for c in chunks} == {"readme.txt"}


def test_the_suffix_decides_between_markdown_and_plain_text() -> None:
    assert chunk_document("# Title\n\nbody", "a.markdown")[0].heading == "Title"
    assert chunk_document("# Title\n\nbody", "a.txt")[0].heading == ""


def test_an_empty_or_blank_document_has_no_chunks() -> None:
    assert chunk_markdown("", "empty.md") == []
    assert chunk_markdown("  \n\n# Only a heading\n\n", "h.md") == []
    assert chunk_plain_text("\n \n", "blank.txt") == []


def test_the_embedded_text_carries_the_heading_path() -> None:
    chunk = Chunk(text="Body.", source="a.md", title="A", heading="A > Retries", position=0)

    assert embedding_text(chunk) == "A > Retries\n\nBody."


_word = st.from_regex(re.compile(r"[a-z]{1,8}"), fullmatch=True)
_paragraph = st.lists(_word, min_size=1, max_size=120).map(" ".join)
_line = st.one_of(_paragraph, st.just(""), st.just("```"), _word.map(lambda w: f"## {w}"))


@settings(max_examples=150, deadline=None)
@given(
    lines=st.lists(_line, max_size=30),
    max_words=st.integers(min_value=20, max_value=80),
    overlap=st.integers(min_value=0, max_value=19),
)
def test_no_chunk_exceeds_the_limit_and_no_word_is_lost(lines: list[str], max_words: int, overlap: int) -> None:
    doc = "\n".join(lines)

    chunks = chunk_markdown(doc, "p.md", max_words=max_words, overlap_words=overlap)

    assert all(len(_words(c.text)) <= max_words for c in chunks)
    body_words = {w for line in lines if not line.startswith("## ") for w in _words(line)}
    assert body_words <= {w for c in chunks for w in _words(c.text)}
