"""A documentation question set (bench/rag_docs/*.json): its pages, its questions, its halves and metrics.

Shared by ``bench.rag_docs_eval`` (the project's retrieval) and ``bench.rag_baselines`` (the naive
baselines), so that both select the same pages, split the questions the same way and score alike.

A set names a ``root`` folder of installed documentation and its pages: ``pages`` (paths relative
to the root, without ``.html``) or ``glob`` (one pattern or a list of them, relative to the
root). A page is known by its path relative to the root ("heapq.html", "vec/struct.Vec.html"):
that is also the source the ingest gives it, since the pages are linked into a scratch folder
with the same relative layout (rustdoc has an ``index.html`` in every module).
Each question is labelled with the page(s) that answer it.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TypeVar

__all__ = ["Question", "halves", "link_pages", "load_set", "page_files", "scores"]

_T = TypeVar("_T")


@dataclass(frozen=True)
class Question:
    text: str
    pages: frozenset[str]
    """The answering pages' paths relative to the set's root, with ``.html``."""


def load_set(path: Path) -> tuple[dict[str, object], list[Question]]:
    data = json.loads(path.read_text())
    questions = [Question(item["q"], frozenset(f"{page}.html" for page in item["pages"])) for item in data["questions"]]
    return data, questions


def page_files(data: dict[str, object]) -> list[Path]:
    """The set's pages, relative to its root, sorted."""
    root = Path(str(data["root"]))
    if "pages" in data:
        return [Path(f"{page}.html") for page in data["pages"]]  # type: ignore[attr-defined]
    patterns = data["glob"] if isinstance(data["glob"], list) else [data["glob"]]
    return sorted({file.relative_to(root) for pattern in patterns for file in root.glob(str(pattern))})


def link_pages(data: dict[str, object], folder: Path) -> None:
    """Symlink the set's pages into ``folder`` under their paths relative to the root."""
    root = Path(str(data["root"]))
    for relative in page_files(data):
        link = folder / relative
        link.parent.mkdir(parents=True, exist_ok=True)
        link.symlink_to(root / relative)


def halves(items: Sequence[_T]) -> dict[str, list[_T]]:
    """Even positions tune, odd positions are held out (questions, or their positions)."""
    return {"tune": list(items[0::2]), "held out": list(items[1::2])}


def scores(ranked: Sequence[Sequence[str]], questions: Sequence[Question]) -> tuple[float, float]:
    """(recall@5, MRR@10) of page rankings: a hit is a labelled page, by its path relative to the root."""
    hits, reciprocal = 0, 0.0
    for pages, question in zip(ranked, questions, strict=True):
        ranks = [rank for rank, page in enumerate(pages[:10], start=1) if page in question.pages]
        hits += bool(ranks and ranks[0] <= 5)
        reciprocal += 1.0 / ranks[0] if ranks else 0.0
    return hits / len(questions), reciprocal / len(questions)
