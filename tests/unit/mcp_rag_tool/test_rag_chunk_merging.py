"""Chunks a model can embed, on real pages: small sections merged under their heading, the title and
heading path in the embedded text, API signatures with their first sentence; BM25F's context field."""

from __future__ import annotations

import math
from pathlib import Path

import pytest

from mcp_rag_tool import bm25
from mcp_rag_tool.chunking import Chunk, ChunkLimits, chunk_markdown, chunk_sections, embedding_text
from mcp_rag_tool.documents import parse_document
from mcp_rag_tool.ingest import sparse_vector
from mcp_rag_tool.tokens import WordCounter, WordPieceCounter

FIXTURES = Path(__file__).parent / "fixtures"


@pytest.fixture(scope="module")
def wordpiece() -> WordPieceCounter:
    return WordPieceCounter.bundled()


def _page_chunks(name: str, counter: WordPieceCounter, merge: int | None = None) -> list[Chunk]:
    """A fixture page chunked as the tool does by default (256 tokens, 32 overlap, merged to 128)."""
    path = FIXTURES / name
    parsed = parse_document(path.name, path.read_bytes(), "html")
    limits = ChunkLimits(256, 32, counter=counter, merge_tokens=merge)
    return chunk_sections(parsed.sections, path.name, parsed.title, limits)


def _short(chunks: list[Chunk]) -> int:
    return sum(len(chunk.text.split()) < 20 for chunk in chunks)


def test_small_api_entries_of_a_sphinx_page_are_merged_into_fewer_fuller_chunks(wordpiece: WordPieceCounter) -> None:
    apart = _page_chunks("sphinx/heapq.html", wordpiece, merge=0)
    merged = _page_chunks("sphinx/heapq.html", wordpiece)

    assert len(merged) < len(apart)
    assert _short(apart) >= 3  # heapify, nlargest ...: one-line entries on their own
    assert _short(merged) <= 1
    words = {word for chunk in apart for word in chunk.text.split()}
    assert words <= {word for chunk in merged for word in chunk.text.split()}  # nothing lost


def test_an_api_signature_stays_with_its_first_sentence(wordpiece: WordPieceCounter) -> None:
    merged = _page_chunks("sphinx/heapq.html", wordpiece)

    holding = [chunk for chunk in merged if "heapq.heapify(x)\nTransform list x into a heap" in chunk.text]

    assert len(holding) == 1
    assert holding[0].heading == "heapq — Heap queue algorithm"  # the entries' shared heading


def test_every_embedded_chunk_of_a_docbook_page_names_its_page(wordpiece: WordPieceCounter) -> None:
    chunks = _page_chunks("docbook/sql-droptable.html", wordpiece)

    assert chunks
    assert all(embedding_text(chunk).startswith("DROP TABLE") for chunk in chunks)
    assert any("Synopsis" in chunk.text or "Synopsis" in chunk.heading for chunk in chunks)


def test_every_embedded_chunk_of_a_sphinx_page_fits_the_model_window(wordpiece: WordPieceCounter) -> None:
    for page in ("sphinx/heapq.html", "sphinx/numeric.html", "sphinx/pwd.html"):
        for chunk in _page_chunks(page, wordpiece):
            tokens = wordpiece.special_tokens + sum(wordpiece.word_tokens(embedding_text(chunk).split()))
            assert tokens <= 256, (page, chunk.heading)


def test_sections_of_different_chapters_are_never_merged() -> None:
    doc = "# Guide\n\n## Install\n\n### Linux\n\nApt.\n\n## Configure\n\nEdit the file.\n"
    limits = ChunkLimits(200, 0, counter=WordCounter())

    chunks = chunk_markdown(doc, "guide.md", limits)

    assert [(chunk.heading, chunk.text) for chunk in chunks] == [
        ("Guide > Install > Linux", "Apt."),
        ("Guide > Configure", "Edit the file."),
    ]


def test_a_section_merges_with_its_subsections_under_its_own_heading() -> None:
    doc = "# Guide\n\n## Install\n\nTwo ways.\n\n### Linux\n\nApt.\n\n### macOS\n\nBrew.\n"
    limits = ChunkLimits(200, 0, counter=WordCounter())

    chunks = chunk_markdown(doc, "guide.md", limits)

    assert [(chunk.heading, chunk.text) for chunk in chunks] == [
        ("Guide > Install", "Two ways.\n\nLinux\nApt.\n\nmacOS\nBrew."),
    ]


def test_without_context_the_vector_is_classic_bm25() -> None:
    filler = " ".join(f"zq{a}{b}" for a in "abcde" for b in "abcdefghij")  # 50 plain words
    text = f"the timeout of a retry and another timeout {filler}"
    vector = bm25.document_vector(text)
    tf, length = 2.0, len(list(bm25.terms(text)))
    expected = tf * (bm25.K1 + 1) / (tf + bm25.K1 * (1 - bm25.B + bm25.B * length / bm25.AVERAGE_LENGTH))
    index = bm25.query_vector("timeout").indices[0]

    assert math.isclose(dict(zip(vector.indices, vector.values, strict=True))[index], expected, rel_tol=1e-6)


def test_a_term_of_the_title_counts_more_than_in_the_body(wordpiece: WordPieceCounter) -> None:
    chunk = next(c for c in _page_chunks("docbook/sql-droptable.html", wordpiece) if "CASCADE" in c.text)
    table = bm25.query_vector("table").indices[0]

    def weight(vector: bm25.SparseVector) -> float:
        return dict(zip(vector.indices, vector.values, strict=True)).get(table, 0.0)

    fielded = weight(sparse_vector(chunk))  # "DROP TABLE" is the page title: its context field
    as_body = weight(bm25.document_vector(chunk.text, "DROP TABLE", context_weight=1.0))
    only_body = weight(bm25.document_vector(chunk.text))

    assert bm25.CONTEXT_WEIGHT > 1
    assert fielded > as_body > only_body
