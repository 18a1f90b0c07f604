"""The pure parts of the documentation evaluation: page selection, plain chunks, halves, metrics and
the naive baselines' scoring (bench.rag_docs_set, bench.rag_baselines)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from bench.rag_baselines import OkapiBM25, PlainChunk, fused, pages_in_order, plain_chunks, ranked
from bench.rag_docs_set import Question, halves, link_pages, load_set, page_files, scores


def test_plain_chunks_are_consecutive_180_word_pieces_without_the_markdown_shape() -> None:
    words = [f"w{number}" for number in range(400)]
    text = "# Title\n\n" + " ".join(words[:200]) + "\n\n```\n" + " ".join(words[200:]) + "\n```\n"

    chunks = plain_chunks(text, "vec/struct.Vec.html")

    assert [len(chunk.text.split()) for chunk in chunks] == [180, 180, 41]  # "Title" is text, "#" is not
    assert " ".join(chunk.text for chunk in chunks).split() == ["Title", *words]
    assert {chunk.page for chunk in chunks} == {"vec/struct.Vec.html"}
    assert plain_chunks("", "empty.html") == []


def test_a_page_ranks_where_its_best_chunk_does() -> None:
    chunks = [PlainChunk(page, "text") for page in ("a", "a", "b", "c", "d")]

    assert pages_in_order([1, 0, 3, 2, 4], chunks) == ["a", "c", "b", "d"]
    assert pages_in_order([1, 0, 3, 2, 4], chunks, limit=2) == ["a", "c"]


def test_recall_at_5_and_mrr_at_10_on_a_hand_made_ranking() -> None:
    questions = [Question(f"q{number}", frozenset({"x.html"})) for number in range(3)]
    rankings = [
        ["a.html", "x.html", "b.html"],  # rank 2: a hit in the top 5, 1/2
        ["a", "b", "c", "d", "e", "x.html"],  # rank 6: no hit in the top 5, but 1/6 within 10
        [f"p{rank}" for rank in range(10)] + ["x.html"],  # rank 11: nothing
    ]

    recall, mrr = scores(rankings, questions)

    assert recall == pytest.approx(1 / 3)
    assert mrr == pytest.approx((1 / 2 + 1 / 6) / 3)


def test_even_positions_tune_and_odd_positions_are_held_out() -> None:
    assert halves(["q0", "q1", "q2", "q3", "q4"]) == {"tune": ["q0", "q2", "q4"], "held out": ["q1", "q3"]}


def test_pages_are_known_by_their_path_under_the_root_so_same_named_pages_stay_apart(tmp_path: Path) -> None:
    root = tmp_path / "std"
    for page in ("vec/index.html", "fs/index.html", "fs/fn.write.html", "fs/ignored.txt"):
        (root / page).parent.mkdir(parents=True, exist_ok=True)
        (root / page).write_text(f"<p>{page}</p>")
    set_file = tmp_path / "set.json"
    set_file.write_text(
        json.dumps(
            {
                "generator": "rustdoc",
                "root": str(root),
                "glob": ["vec/*.html", "fs/*.html"],
                "questions": [{"q": "write a file", "pages": ["fs/fn.write"]}],
            }
        )
    )
    scratch = tmp_path / "scratch"

    data, questions = load_set(set_file)
    link_pages(data, scratch)

    assert page_files(data) == [Path("fs/fn.write.html"), Path("fs/index.html"), Path("vec/index.html")]
    assert (scratch / "vec/index.html").read_text() == "<p>vec/index.html</p>"
    assert (scratch / "fs/index.html").read_text() == "<p>fs/index.html</p>"
    assert questions == [Question("write a file", frozenset({"fs/fn.write.html"}))]


def test_bm25_prefers_the_rarer_term_and_leaves_out_chunks_without_any() -> None:
    index = OkapiBM25(
        [
            "the vector grows its capacity when full",
            "a vector of bytes",
            "a vector of words",
            "the weather is fine today",
        ]
    )

    ranking = ranked(index.scores("vector capacity"))

    assert ranking[0] == 0  # both terms, and "capacity" is in one chunk only
    assert set(ranking) == {0, 1, 2}


def test_naive_rrf_puts_what_both_rankings_agree_on_first() -> None:
    assert fused([1, 2, 3], [4, 2, 5])[0] == 2
    assert fused([1, 2], [])[:2] == [1, 2]
