"""Ingest throughput and search_documents latency of mcp_rag_tool on a synthetic 10,000-chunk corpus.

    .venv/bin/python bench/rag_latency.py [--chunks 10000] [--searches 100]

Writes a corpus of Markdown files into a temporary folder (sections of two or three sentences
of technical vocabulary, with error codes sprinkled in, one chunk per section), ingests it with
the bundled all-MiniLM-L6-v2 into Qdrant local mode persisted in a temporary folder (the
default setup), ingests it again unchanged (the incremental path), then times searches through
the tool's own retrieval (dense + BM25, fusion, MMR) with one and with three queries per call.
Prints one table. With the defaults it takes about 5 minutes on 2 otherwise idle cores, most of
it embedding (twice that when other work shares the cores); --chunks makes it shorter.
"""

from __future__ import annotations

import argparse
import logging
import random
import statistics
import tempfile
import time
from collections.abc import Sequence
from pathlib import Path

import anyio

from mcp_rag_tool.chunking import ChunkLimits
from mcp_rag_tool.embeddings import MiniLMEmbedder
from mcp_rag_tool.ingest import Ingester
from mcp_rag_tool.retrieval import Retriever, SearchOptions
from mcp_rag_tool.settings import RagSettings
from mcp_rag_tool.store import VectorStore
from mcp_rag_tool.tokens import WordPieceCounter, count_tokens
from suite_common.logging import configure_logging

SECTIONS_PER_DOCUMENT = 20

_VOCABULARY = """
    request response timeout retry backoff jitter latency throughput queue worker thread process memory
    cache eviction index shard replica leader follower quorum snapshot checkpoint journal segment offset
    partition consumer producer broker topic schema migration rollback deploy canary rollout feature
    flag config secret token certificate handshake cipher proxy gateway upstream downstream route
    balancer health probe metric alert dashboard trace span sampling budget objective incident
    postmortem runbook oncall pager escalation capacity autoscaling node pod container image registry
    volume mount network socket port firewall policy role permission audit log rotation compression
    encoding parser validator serializer buffer stream batch window watermark deadline cancellation lock
    mutex semaphore transaction isolation deadlock vacuum bloat statistics planner query join cluster
    region zone failover backup restore archive retention quota limit throttle burst bucket
""".split()  # noqa: SIM905  (a word list reads better as text)

_TEMPLATES = [
    "The {a} keeps the {b} within its {c} while the {d} waits for the {e}.",
    "When the {a} fails, the {b} falls back to the {c} and records a {d} for the {e}.",
    "Set the {a} {b} before the {c} starts, otherwise the {d} ignores the {e}.",
    "Error {code} means the {a} rejected the {b} because the {c} exceeded its {d}.",
    "Each {a} owns one {b}; a {c} moves it to another {d} during a {e}.",
]


def _sentence(rng: random.Random) -> str:
    words = {key: rng.choice(_VOCABULARY) for key in "abcde"}
    return rng.choice(_TEMPLATES).format(code=f"E{rng.randrange(10000, 99999)}", **words)


def write_corpus(folder: Path, chunks: int, seed: int = 7) -> tuple[int, list[str]]:
    """Documents of SECTIONS_PER_DOCUMENT sections, one chunk each; returns the file count and the embedded texts."""
    rng = random.Random(seed)
    documents = -(-chunks // SECTIONS_PER_DOCUMENT)
    embedded: list[str] = []
    for number in range(documents):
        sections = min(SECTIONS_PER_DOCUMENT, chunks - number * SECTIONS_PER_DOCUMENT)
        title = f"Service {number} handbook"
        lines = [f"# {title}", ""]
        for section in range(sections):
            heading = f"{rng.choice(_VOCABULARY).title()} {section}"
            body = " ".join(_sentence(rng) for _ in range(rng.choice((2, 3))))
            lines += [f"## {heading}", "", body, ""]
            embedded.append(f"{title} > {heading}\n\n{body}")
        (folder / f"service-{number:04d}.md").write_text("\n".join(lines))
    return documents, embedded


class TimedEmbedder:
    """The model, with the time spent embedding added up."""

    def __init__(self, model: MiniLMEmbedder) -> None:
        self._model = model
        self.name = model.name
        self.dimension = model.dimension
        self.seconds = 0.0

    async def embed(self, texts: Sequence[str]) -> list[list[float]]:
        started = time.perf_counter()
        try:
            return await self._model.embed(texts)
        finally:
            self.seconds += time.perf_counter() - started

    async def aclose(self) -> None:
        return None


def _percentile(values: Sequence[float], fraction: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, round(fraction * (len(ordered) - 1)))]


async def run(chunks: int, searches: int) -> None:
    rng = random.Random(11)
    with tempfile.TemporaryDirectory(prefix="rag-bench-") as scratch:
        root = Path(scratch)
        corpus, data = root / "corpus", root / "qdrant"
        corpus.mkdir()
        files, embedded_texts = write_corpus(corpus, chunks)
        settings = RagSettings.model_construct()  # the defaults, whatever RAG_* variables say
        settings.qdrant_path = str(data)
        counter = WordPieceCounter.bundled()
        tokens = statistics.mean(count_tokens(counter, text) + counter.special_tokens for text in embedded_texts)
        loaded = time.perf_counter()
        model = await MiniLMEmbedder.load(batch_size=settings.embed_batch_size)
        load_seconds = time.perf_counter() - loaded
        embedder = TimedEmbedder(model)
        limits = ChunkLimits(settings.chunk_max_tokens, settings.chunk_overlap_tokens, counter=counter)

        store = await VectorStore.open(settings)
        try:
            await store.ensure_collections(embedder.dimension, embedder.name)
            ingester = Ingester(store, embedder, limits, batch_size=settings.embed_batch_size)
            first = await ingester.ingest_folders([corpus])
            embed_seconds = embedder.seconds
            again = await ingester.ingest_folders([corpus])
            stored = await store.count()
        finally:
            await store.close()

        reopened = time.perf_counter()
        store = await VectorStore.open(settings)
        reopen_seconds = time.perf_counter() - reopened
        try:
            retriever = Retriever(store, model, SearchOptions.from_settings(settings))
            questions = [
                " ".join(rng.choice(_VOCABULARY) for _ in range(rng.choice((4, 6, 8)))) + "?" for _ in range(searches)
            ]
            codes = [f"E{rng.randrange(10000, 99999)}" for _ in range(searches // 4)]
            await retriever.search(["warm up"], 5)
            single = [await _timed(retriever, [question]) for question in questions + codes]
            triple = [
                await _timed(retriever, [questions[i], questions[-i - 1], codes[i % len(codes)]])
                for i in range(searches // 4)
            ]
            dense = retriever.options.only(dense=True, bm25=False, documents=False, rerank=False)
            sparse = retriever.options.only(dense=False, bm25=True, documents=False, rerank=False)
            dense_only = [await _timed(retriever, [question], dense) for question in questions[: searches // 4]]
            bm25_only = [await _timed(retriever, [question], sparse) for question in questions[: searches // 4]]
        finally:
            await store.close()

    rows = [
        (
            "corpus",
            f"{files} Markdown files, {first.chunks} chunks ({tokens:.0f} tokens each on average), {stored} stored",
        ),
        ("model load", f"{load_seconds:.1f} s"),
        ("first ingest", f"{first.seconds:.1f} s = {first.chunks / first.seconds:.1f} chunks/s end to end"),
        ("  of which embedding", f"{embed_seconds:.1f} s = {first.chunks / embed_seconds:.1f} chunks/s"),
        ("  of which the rest", f"{first.seconds - embed_seconds:.1f} s (read, chunk, BM25 vectors, Qdrant writes)"),
        ("re-ingest, nothing changed", f"{again.seconds:.1f} s ({again.unchanged} documents skipped by hash)"),
        ("re-open the persisted store", f"{reopen_seconds:.1f} s"),
        ("search, 1 query (hybrid + MMR)", _latency(single)),
        ("search, 3 queries per call", _latency(triple)),
        ("dense only, 1 query", _latency(dense_only)),
        ("BM25 only, 1 query", _latency(bm25_only)),
    ]
    print(f"\nmcp_rag_tool on {first.chunks} synthetic chunks (Qdrant local mode, all-MiniLM-L6-v2 on CPU)\n")
    print("| measure | value |\n| --- | --- |")
    for name, value in rows:
        print(f"| {name} | {value} |")


async def _timed(retriever: Retriever, queries: list[str], options: SearchOptions | None = None) -> float:
    started = time.perf_counter()
    await retriever.search(queries, 5, options=options)
    return time.perf_counter() - started


def _latency(seconds: Sequence[float]) -> str:
    p50, p95 = _percentile(seconds, 0.5) * 1000, _percentile(seconds, 0.95) * 1000
    return f"p50 {p50:.0f} ms, p95 {p95:.0f} ms (n={len(seconds)}, mean {statistics.mean(seconds) * 1000:.0f} ms)"


def main(argv: Sequence[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--chunks", type=int, default=10_000, help="chunks in the synthetic corpus (default 10000)")
    parser.add_argument("--searches", type=int, default=100, help="single-query searches to time (default 100)")
    args = parser.parse_args(argv)
    configure_logging("warning", "console")
    logging.getLogger("mcp_rag_tool").setLevel(logging.WARNING)
    anyio.run(run, args.chunks, args.searches)


if __name__ == "__main__":
    main()
