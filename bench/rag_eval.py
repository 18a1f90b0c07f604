"""Retrieval quality of mcp_rag_tool on the labelled corpus in bench/rag_corpus: recall@5 and MRR@10.

    .venv/bin/python bench/rag_eval.py [--rerank-model PATH] [--per-question] [--sweep-k 60,10,5]

Ingests bench/rag_corpus/docs (Markdown, text and HTML on varied technical topics, with
near-duplicates and error-code catalogues) with the bundled all-MiniLM-L6-v2 into an in-memory
Qdrant, then asks each question of bench/rag_corpus/questions.json through the tool's own
retrieval code in five ways: dense only, BM25 only, hybrid (reciprocal rank fusion of both),
hybrid with the document vectors in the fusion (the default), and hybrid + rerank (MMR, plus a
cross-encoder when --rerank-model names a local one).

recall@5: the share of questions with a passage of a labelled document among the first 5
results. MRR@10: the mean of 1/rank of the first such passage within the first 10 (0 if none).
A question labelled with two documents (exact copies of each other) counts as found when either
is. Prints one table overall and one per kind of question (and, with --sweep-k, the hybrid at
other values of RRF's k). Takes under a minute on 2 idle cores, most of it loading the model
and embedding the corpus; bench/rag_latency.py measures speed.
"""

from __future__ import annotations

import argparse
import json
import logging
import statistics
import sys
import time
from collections.abc import Sequence
from dataclasses import dataclass, replace
from pathlib import Path

import anyio

from mcp_rag_tool.chunking import ChunkLimits
from mcp_rag_tool.embeddings import MiniLMEmbedder
from mcp_rag_tool.ingest import Ingester
from mcp_rag_tool.rerank import CrossEncoderScorer, PassageScorer
from mcp_rag_tool.retrieval import Retriever, SearchOptions
from mcp_rag_tool.settings import IN_MEMORY, RagSettings
from mcp_rag_tool.store import VectorStore
from mcp_rag_tool.tokens import WordPieceCounter
from suite_common.logging import configure_logging

CORPUS = Path(__file__).resolve().parent / "rag_corpus"


@dataclass(frozen=True)
class Question:
    text: str
    kind: str
    sources: frozenset[str]


@dataclass(frozen=True)
class Mode:
    name: str
    options: SearchOptions


class CachedEmbedder:
    """The model, remembering each text's vector: every mode asks for the same questions."""

    def __init__(self, model: MiniLMEmbedder) -> None:
        self._model = model
        self._vectors: dict[str, list[float]] = {}
        self.name = model.name
        self.dimension = model.dimension

    async def embed(self, texts: Sequence[str]) -> list[list[float]]:
        missing = [text for text in dict.fromkeys(texts) if text not in self._vectors]
        if missing:
            self._vectors.update(zip(missing, await self._model.embed(missing), strict=True))
        return [self._vectors[text] for text in texts]

    async def aclose(self) -> None:
        return None


@dataclass
class Outcome:
    question: Question
    top5: list[str]
    top10: list[str]

    @property
    def found_in_5(self) -> bool:
        return any(source in self.question.sources for source in self.top5)

    @property
    def reciprocal_rank(self) -> float:
        for rank, source in enumerate(self.top10, start=1):
            if source in self.question.sources:
                return 1.0 / rank
        return 0.0


def load_questions() -> list[Question]:
    raw = json.loads((CORPUS / "questions.json").read_text())
    return [Question(item["question"], item["kind"], frozenset(item["sources"])) for item in raw]


async def evaluate(rerank_model: Path | None, per_question: bool, sweep_k: list[float]) -> None:
    settings = RagSettings.model_construct()  # the defaults, whatever RAG_* variables say
    settings.qdrant_path = IN_MEMORY
    questions = load_questions()
    started = time.perf_counter()
    embedder = CachedEmbedder(await MiniLMEmbedder.load(batch_size=settings.embed_batch_size))
    scorer: PassageScorer | None = await CrossEncoderScorer.load(rerank_model) if rerank_model else None
    counter = WordPieceCounter.bundled()
    store = await VectorStore.open(settings)
    try:
        await store.ensure_collections(embedder.dimension, embedder.name)
        limits = ChunkLimits(settings.chunk_max_tokens, settings.chunk_overlap_tokens, counter=counter)
        report = await Ingester(store, embedder, limits, batch_size=settings.embed_batch_size).ingest_folders(
            [CORPUS / "docs"]
        )
        load_seconds = time.perf_counter() - started
        defaults = SearchOptions.from_settings(settings)
        retriever = Retriever(store, embedder, defaults, scorer)
        rerank_name = "hybrid + rerank (cross-encoder, MMR)" if scorer else "hybrid + rerank (MMR)"
        modes = [
            Mode("dense only", defaults.only(dense=True, bm25=False, documents=False, rerank=False)),
            Mode("BM25 only", defaults.only(dense=False, bm25=True, documents=False, rerank=False)),
            Mode("hybrid (RRF)", defaults.only(dense=True, bm25=True, documents=False, rerank=False)),
            Mode("hybrid + document vectors", defaults.only(dense=True, bm25=True, documents=True, rerank=False)),
            Mode(rerank_name, defaults.only(dense=True, bm25=True, documents=True, rerank=True)),
        ]
        hybrid = defaults.only(dense=True, bm25=True, documents=True, rerank=False)
        modes += [Mode(f"hybrid (RRF, k={k:g})", replace(hybrid, rrf_k=k)) for k in sweep_k]
        results: dict[str, list[Outcome]] = {}
        for mode in modes:
            outcomes = []
            for question in questions:
                top10 = await retriever.search([question.text], 10, options=mode.options)
                top5 = (
                    top10[:5]
                    if not mode.options.rerank
                    else await retriever.search([question.text], 5, options=mode.options)
                )
                outcomes.append(Outcome(question, [hit.source for hit in top5], [hit.source for hit in top10]))
            results[mode.name] = outcomes
    finally:
        await store.close()

    print(
        f"\nRetrieval on bench/rag_corpus: {report.documents} documents, {report.chunks} chunks, "
        f"{len(questions)} questions (index built in {load_seconds:.0f} s, model load included)\n"
    )
    _print_table(results)
    print(
        f"\n(defaults: RRF k={defaults.rrf_k:g}, weights dense {defaults.dense_weight:g}, BM25 "
        f"{defaults.bm25_weight:g}, document vectors {defaults.document_weight:g})"
    )
    for kind in sorted({question.kind for question in questions}):
        subset = {name: [o for o in outcomes if o.question.kind == kind] for name, outcomes in results.items()}
        count = len(next(iter(subset.values())))
        print(f"\n{kind} questions ({count}):\n")
        _print_table(subset)
    if per_question:
        _print_misses(results)


def _print_table(results: dict[str, list[Outcome]]) -> None:
    print("| retrieval | recall@5 | MRR@10 |")
    print("| --- | --- | --- |")
    for name, outcomes in results.items():
        recall = statistics.mean(outcome.found_in_5 for outcome in outcomes)
        mrr = statistics.mean(outcome.reciprocal_rank for outcome in outcomes)
        print(f"| {name} | {recall:.3f} | {mrr:.3f} |")


def _print_misses(results: dict[str, list[Outcome]]) -> None:
    print("\nQuestions not answered first (rank of the first labelled document, '-' if not in the top 10):\n")
    names = list(results)
    rows = zip(*results.values(), strict=True)
    for outcomes in rows:
        ranks = [_rank(outcome) for outcome in outcomes]
        if any(rank != "1" for rank in ranks):
            cells = ", ".join(f"{name}: {rank}" for name, rank in zip(names, ranks, strict=True))
            print(f"- {outcomes[0].question.text!r} ({cells})")


def _rank(outcome: Outcome) -> str:
    return str(round(1 / outcome.reciprocal_rank)) if outcome.reciprocal_rank else "-"


def main(argv: Sequence[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--rerank-model", type=Path, help="local folder of a sentence-transformers cross-encoder")
    parser.add_argument("--per-question", action="store_true", help="also list the questions not answered first")
    parser.add_argument(
        "--sweep-k", default="", help="comma-separated values of RRF's k to evaluate the hybrid with as well"
    )
    args = parser.parse_args(argv)
    sweep_k = [float(value) for value in args.sweep_k.split(",") if value.strip()]
    configure_logging("warning", "console")
    logging.getLogger("mcp_rag_tool").setLevel(logging.WARNING)
    anyio.run(evaluate, args.rerank_model, args.per_question, sweep_k)
    sys.stdout.flush()


if __name__ == "__main__":
    main()
