"""Naive baselines of page-level retrieval on a documentation set: what issue 31 asks the project to beat.

    .venv/bin/python -m bench.rag_baselines bench/rag_docs/rust_std.json [--per-question]
        [--precision auto|float32|bfloat16]
    .venv/bin/python -m bench.rag_baselines bench/rag_docs/rust_std.json --chunk-sizes

Over the same pages, questions, halves and metrics as ``bench.rag_docs_eval`` (``bench.rag_docs_set``),
but none of the project's retrieval: each page's extracted text (``html_text.extract_html``, the
one HTML reader) is cut into plain 180-word chunks, in reading order, without headings, titles,
fields or document vectors, and ranked by

- **BM25 alone**: Okapi BM25 (k1 1.2, b 0.75) with the corpus's own IDF and average chunk length,
  over the terms of the project's tokenizer (``bm25.terms``: lower-cased, stemmed, stop words
  dropped) — the textbook scoring, not the project's sparse vectors;
- **dense alone**: cosine similarity of the bundled all-MiniLM-L6-v2's vectors (the model reads
  at most 256 tokens of a chunk, as it does in the project);
- **RRF (k=60)**: reciprocal rank fusion of the two chunk rankings, each cut at 100 chunks.

A page ranks where its best chunk does (later chunks of a page already shown are skipped), so a
ranking is of pages, as the project's results are. ``--chunk-sizes`` prints instead how the
project's own ingest (``parse_document`` and ``chunk_sections`` with the default settings, no
model needed) cuts the same pages: how many chunks, the share under 20 words, the median. The
chunk vectors are cached in ``.data/bench/baselines_<set>_<precision>.npz``, keyed by a hash of
the chunk texts (a changed extractor or page set embeds again).
"""

from __future__ import annotations

import argparse
import hashlib
import logging
import math
import re
import sys
import time
from collections import Counter
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path

import anyio
import numpy as np

from bench.rag_docs_set import halves, load_set, page_files, scores
from mcp_rag_tool import bm25
from mcp_rag_tool.chunking import ChunkLimits, chunk_sections
from mcp_rag_tool.documents import parse_document
from mcp_rag_tool.embeddings import MiniLMEmbedder, Precision
from mcp_rag_tool.fusion import Ranking, reciprocal_rank_fusion
from mcp_rag_tool.html_text import extract_html
from mcp_rag_tool.settings import RagSettings
from mcp_rag_tool.tokens import WordPieceCounter
from suite_common.logging import configure_logging

ROOT = Path(__file__).resolve().parent.parent
CHUNK_WORDS = 180
RRF_K = 60.0
RRF_DEPTH = 100
"""How many chunks of each ranking the fusion sees."""
K1, B = 1.2, 0.75
_MARKUP_ONLY = re.compile(r"^(?:#+|`{3,}|~{3,})$")
"""Words that are only the Markdown shape html_text gives headings and code: not text."""


@dataclass(frozen=True)
class PlainChunk:
    page: str
    """The page's path relative to the set's root, as questions are labelled."""
    text: str


def plain_chunks(text: str, page: str, size: int = CHUNK_WORDS) -> list[PlainChunk]:
    """``text`` cut into consecutive pieces of ``size`` words (the last one shorter), no overlap."""
    words = [word for word in text.split() if not _MARKUP_ONLY.match(word)]
    return [PlainChunk(page, " ".join(words[start : start + size])) for start in range(0, len(words), size)]


def pages_in_order(chunk_ranking: Iterable[int], chunks: Sequence[PlainChunk], limit: int = 10) -> list[str]:
    """The pages of a ranking of chunks, each at the rank of its best chunk."""
    pages: list[str] = []
    for index in chunk_ranking:
        page = chunks[index].page
        if page not in pages:
            pages.append(page)
            if len(pages) == limit:
                break
    return pages


class OkapiBM25:
    """Textbook BM25 over a fixed list of texts, with the corpus's own IDF and average length."""

    def __init__(self, texts: Sequence[str]) -> None:
        self._postings: dict[str, tuple[np.ndarray, np.ndarray]] = {}
        lengths = np.zeros(len(texts))
        postings: dict[str, tuple[list[int], list[int]]] = {}
        for index, text in enumerate(texts):
            counts = Counter(bm25.terms(text))
            lengths[index] = sum(counts.values())
            for term, tf in counts.items():
                ids, tfs = postings.setdefault(term, ([], []))
                ids.append(index)
                tfs.append(tf)
        self._size = len(texts)
        self._norm = K1 * (1 - B + B * lengths / max(lengths.mean(), 1.0))
        self._postings = {term: (np.array(ids), np.array(tfs, dtype=float)) for term, (ids, tfs) in postings.items()}

    def scores(self, query: str) -> np.ndarray:
        total = np.zeros(self._size)
        for term in dict.fromkeys(bm25.terms(query)):
            if term not in self._postings:
                continue
            ids, tfs = self._postings[term]
            idf = math.log(1 + (self._size - len(ids) + 0.5) / (len(ids) + 0.5))
            total[ids] += idf * tfs * (K1 + 1) / (tfs + self._norm[ids])
        return total


def ranked(scores_: np.ndarray) -> list[int]:
    """Indices by descending score, ties in index order; chunks that score 0 are left out."""
    order = np.argsort(-scores_, kind="stable")
    return [int(index) for index in order if scores_[index] > 0]


def fused(keyword: Sequence[int], dense: Sequence[int]) -> list[int]:
    """Naive RRF (k=60) of the two chunk rankings, each cut at RRF_DEPTH."""
    rankings = [Ranking("bm25", keyword[:RRF_DEPTH]), Ranking("dense", dense[:RRF_DEPTH])]
    return [item.id for item in reciprocal_rank_fusion(rankings, {"bm25": 1.0, "dense": 1.0}, RRF_K)]


def load_chunks(data: dict[str, object]) -> list[PlainChunk]:
    root = Path(str(data["root"]))
    chunks: list[PlainChunk] = []
    for relative in page_files(data):
        page = extract_html((root / relative).read_text(encoding="utf-8", errors="replace"))
        chunks.extend(plain_chunks(page.markdown, relative.as_posix()))
    return chunks


def project_chunk_words(data: dict[str, object]) -> list[int]:
    """The words of each chunk the project's ingest makes of the set's pages (its text, without the heading path)."""
    settings = RagSettings.model_construct()
    limits = ChunkLimits(settings.chunk_max_tokens, settings.chunk_overlap_tokens, counter=WordPieceCounter.bundled())
    root = Path(str(data["root"]))
    words: list[int] = []
    for relative in page_files(data):
        parsed = parse_document(relative.as_posix(), (root / relative).read_bytes(), "html")
        words += [
            len(chunk.text.split())
            for chunk in chunk_sections(parsed.sections, relative.as_posix(), parsed.title, limits)
        ]
    return words


def print_chunk_sizes(set_path: Path) -> None:
    words = sorted(project_chunk_words(load_set(set_path)[0]))
    short = sum(count < 20 for count in words)
    print(
        f"{set_path.stem}: the project's ingest makes {len(words):,} chunks; {short:,} ({short / len(words):.0%}) "
        f"under 20 words; median {words[len(words) // 2]} words"
    )


def chunks_digest(chunks: Sequence[PlainChunk]) -> str:
    return hashlib.sha256("\x00".join(f"{c.page}\x01{c.text}" for c in chunks).encode()).hexdigest()


def cached_vectors(cache: Path, digest: str) -> np.ndarray | None:
    """The cached chunk vectors, if they were computed for these very chunks."""
    if not cache.exists():
        return None
    with np.load(cache) as stored:
        return np.asarray(stored["vectors"]) if str(stored["digest"]) == digest else None


def store_vectors(cache: Path, digest: str, vectors: np.ndarray) -> None:
    cache.parent.mkdir(parents=True, exist_ok=True)
    np.savez(cache, digest=np.array(digest), vectors=vectors)


async def chunk_vectors(model: MiniLMEmbedder, chunks: Sequence[PlainChunk], cache: Path) -> np.ndarray:
    digest = chunks_digest(chunks)
    vectors = cached_vectors(cache, digest)
    if vectors is None:
        started, process_started = time.perf_counter(), time.process_time()
        vectors = np.asarray(await model.embed([chunk.text for chunk in chunks]), dtype=np.float32)
        print(
            f"embedded {len(chunks)} chunks in {time.perf_counter() - started:.0f} s "
            f"({time.process_time() - process_started:.0f} s of CPU)",
            file=sys.stderr,
        )
        store_vectors(cache, digest, vectors)
    return vectors


async def evaluate(set_path: Path, precision: Precision, per_question: bool) -> None:
    data, questions = load_set(set_path)
    chunks = load_chunks(data)
    model = await MiniLMEmbedder.load(precision=precision)
    vectors = await chunk_vectors(
        model, chunks, ROOT / ".data" / "bench" / f"baselines_{set_path.stem}_{model.precision}.npz"
    )
    lexical = OkapiBM25([chunk.text for chunk in chunks])
    query_vectors = np.asarray(await model.embed([question.text for question in questions]), dtype=np.float32)
    modes = ("BM25 alone", "dense alone (MiniLM)", f"naive RRF of the two (k={RRF_K:g})")
    rankings: dict[str, list[list[str]]] = {mode: [] for mode in modes}  # per mode, per question
    for question, query_vector in zip(questions, query_vectors, strict=True):
        keyword = ranked(lexical.scores(question.text))
        dense = [int(index) for index in np.argsort(-(vectors @ query_vector), kind="stable")]
        for mode, chunk_ranking in zip(modes, (keyword, dense, fused(keyword, dense)), strict=True):
            rankings[mode].append(pages_in_order(chunk_ranking, chunks))
    words = [len(chunk.text.split()) for chunk in chunks]
    print(
        f"\n{set_path.stem}: {data['generator']}; {len(page_files(data))} pages, {len(chunks)} plain chunks "
        f"of {CHUNK_WORDS} words ({sum(words):,} words); {len(questions)} questions; MiniLM in {model.precision}\n"
    )
    print("| naive baseline | tune recall@5 | tune MRR@10 | held-out recall@5 | held-out MRR@10 |")
    print("| --- | --- | --- | --- | --- |")
    positions = halves(list(range(len(questions))))
    for mode in modes:
        row = [mode]
        for half in positions.values():
            recall, mrr = scores([rankings[mode][index] for index in half], [questions[index] for index in half])
            row += [f"{recall:.3f}", f"{mrr:.3f}"]
        print("| " + " | ".join(row) + " |")
    if per_question:
        print(f"\nmissed in the top 5 by {modes[-1]}:")
        for question, pages in zip(questions, rankings[modes[-1]], strict=True):
            if not question.pages & set(pages[:5]):
                print(f"  {question.text!r}: wanted {sorted(question.pages)}, got {pages[:5]}")


def main(argv: Sequence[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("set", type=Path, help="a question set, e.g. bench/rag_docs/rust_std.json")
    parser.add_argument("--precision", default="auto", choices=("auto", "float32", "bfloat16"), help="MiniLM's")
    parser.add_argument("--per-question", action="store_true", help="list the questions the naive RRF misses")
    parser.add_argument("--chunk-sizes", action="store_true", help="only the sizes of the project's chunks (see above)")
    args = parser.parse_args(argv)
    configure_logging("warning", "console")
    logging.getLogger("mcp_rag_tool").setLevel(logging.WARNING)
    if args.chunk_sizes:
        print_chunk_sizes(args.set)
    else:
        anyio.run(evaluate, args.set, args.precision, args.per_question)


if __name__ == "__main__":
    main()
