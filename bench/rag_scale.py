"""search_documents latency through MCP at 10,000 and 100,000 chunks, embedded default (Qdrant local mode).

    .venv/bin/python -m bench.rag_scale [--sizes 10000,100000] [--searches 60]

Synthetic chunks: two or three sentences of technical vocabulary each (as bench/rag_latency.py
writes them), with random unit dense vectors (embedding 100,000 chunks would take hours on two
cores; a search costs the same whatever the vectors hold) and their real BM25 vectors, 20 chunks
to a document, each document with its document vector (the normalised mean of its chunks'), as
the ingest writes them. They are written straight into a local-mode store in memory (the
persisted folder is loaded into the same in-memory structures when opened, so searches cost the
same). The server is the real one
(``build_server`` over that store, the bundled MiniLM embedding each query), called through an
MCP client session; each figure is the wall time of one ``tools/call``, and beside it the CPU
time the process spent on it (all threads): on a machine shared with other work the wall time
mostly measures the wait for a core, the CPU time what the call costs. Also timed: dense only
and BM25 only, through the retriever.
"""

from __future__ import annotations

import argparse
import logging
import random
import statistics
import time
from collections.abc import Sequence

import anyio
import anyio.to_thread
import numpy as np
from mcp import Client

from bench.rag_ingest import ingest_table, measure_ingest
from bench.rag_latency import _VOCABULARY, _percentile, _sentence
from bench.report import Section, Table, Target
from mcp_rag_tool import bm25
from mcp_rag_tool.chunking import Chunk
from mcp_rag_tool.embeddings import MiniLMEmbedder
from mcp_rag_tool.points import SourceRecord
from mcp_rag_tool.retrieval import Retriever, SearchOptions
from mcp_rag_tool.server import build_server
from mcp_rag_tool.settings import IN_MEMORY, RagSettings
from mcp_rag_tool.store import VectorStore
from mcp_rag_tool.tokens import WordCounter
from suite_common.logging import configure_logging

_CHUNKS_PER_DOCUMENT = 20
_WRITE_BATCH = 2000
_GOALS_MS = {10_000: 50.0, 100_000: 100.0}
"""The latency targets: search_documents p50 through MCP, embedded default (local-mode Qdrant)."""


async def fill(store: VectorStore, size: int, dimension: int, rng: random.Random) -> None:
    generator = np.random.default_rng(7)
    for start in range(0, size, _WRITE_BATCH):
        count = min(_WRITE_BATCH, size - start)
        texts = [" ".join(_sentence(rng) for _ in range(rng.choice((2, 3)))) for _ in range(count)]
        chunks, records = [], []
        for offset, text in enumerate(texts):
            number = start + offset
            source = f"doc-{number // _CHUNKS_PER_DOCUMENT:05d}.md"
            chunks.append(Chunk(text, source, source, "Section", number % _CHUNKS_PER_DOCUMENT))
            records.append(SourceRecord(source, source, (), "markdown", "bench", "synthetic", _CHUNKS_PER_DOCUMENT, ""))
        vectors = generator.standard_normal((count, dimension)).astype(np.float32)
        vectors /= np.linalg.norm(vectors, axis=1, keepdims=True)
        await store.upsert_chunks(chunks, records, vectors.tolist(), [bm25.document_vector(t) for t in texts])
        # each document's vector, as the ingest writes it: the normalised mean of its chunks' vectors
        of_document: dict[str, list[int]] = {}
        for offset, chunk in enumerate(chunks):
            of_document.setdefault(chunk.source, []).append(offset)
        means = {source: vectors[rows].mean(axis=0) for source, rows in of_document.items()}
        await store.write_document_vectors(
            [
                (records[rows[0]], (means[source] / np.linalg.norm(means[source])).tolist())
                for source, rows in of_document.items()
            ]
        )


async def measure(size: int, searches: int, model: MiniLMEmbedder) -> tuple[list[tuple[str, str]], float]:
    """The figures of one corpus size, and the p50 wall time of a search through MCP in ms."""
    rng = random.Random(size)
    settings = RagSettings(qdrant_path=IN_MEMORY, docs_paths=[])
    store = await VectorStore.open(settings)
    await store.ensure_collections(model.dimension, model.name)
    started = time.perf_counter()
    await fill(store, size, model.dimension, rng)
    fill_seconds = time.perf_counter() - started
    questions = [" ".join(rng.choice(_VOCABULARY) for _ in range(rng.choice((4, 6, 8)))) + "?" for _ in range(searches)]

    retriever = Retriever(store, model, SearchOptions())
    embedding = []
    for question in questions[: searches // 2]:
        started_cpu = time.process_time()
        await model.embed([question])
        embedding.append(time.process_time() - started_cpu)
    dense = [await _timed(retriever, q, SearchOptions(bm25=False, documents=False)) for q in questions[: searches // 2]]
    sparse = [
        await _timed(retriever, q, SearchOptions(dense=False, documents=False)) for q in questions[: searches // 2]
    ]

    async def given_store(_: RagSettings) -> VectorStore:
        return store  # the server closes it when its session ends

    server = build_server(settings, model, counter=WordCounter(), open_store=given_store)
    calls: list[float] = []
    cpu: list[float] = []
    async with Client(server) as client:
        await client.call_tool("search_documents", {"queries": ["warm up"]})
        for question in questions:
            begun, begun_cpu = time.perf_counter(), time.process_time()
            result = await client.call_tool("search_documents", {"queries": [question], "top_k": 5})
            calls.append(time.perf_counter() - begun)
            cpu.append(time.process_time() - begun_cpu)
            assert not result.is_error
    return [
        (f"{size:,} chunks: written in", f"{fill_seconds:.0f} s"),
        (f"{size:,} chunks: search_documents through MCP, 1 query, wall", _latency(calls)),
        (f"{size:,} chunks: search_documents through MCP, 1 query, CPU", _latency(cpu)),
        (f"{size:,} chunks: query embedding alone, CPU", _latency(embedding)),
        (f"{size:,} chunks: dense only (embed + search), CPU", _latency(dense)),
        (f"{size:,} chunks: BM25 only, CPU", _latency(sparse)),
    ], _percentile(calls, 0.5) * 1000


async def _timed(retriever: Retriever, question: str, options: SearchOptions) -> float:
    """CPU time of one search (see the module's docstring)."""
    started = time.process_time()
    await retriever.search([question], 5, options=options)
    return time.process_time() - started


def _latency(seconds: Sequence[float]) -> str:
    p50, p95 = _percentile(seconds, 0.5) * 1000, _percentile(seconds, 0.95) * 1000
    return f"p50 {p50:.1f} ms, p95 {p95:.1f} ms (n={len(seconds)}, mean {statistics.mean(seconds) * 1000:.1f} ms)"


async def run_rag(sizes: Sequence[int], searches: int, *, ingest_chunks: int = 0) -> Section:
    """The section ``make bench`` prints (``--only rag``), with its latency targets and, when
    ``ingest_chunks``, the ingest throughput target (``bench/rag_ingest.py``)."""
    model = await MiniLMEmbedder.load()
    table = Table(
        "mcp_rag_tool search latency (synthetic chunks, Qdrant local mode, MiniLM on CPU)", ["measure", "value"]
    )
    targets: list[Target] = []
    figures: dict[str, float] = {}
    for size in sizes:
        rows, p50 = await measure(size, searches, model)
        for name, value in rows:
            table.add(name, value)
        figures[f"search_p50_ms_{size}"] = round(p50, 1)
        goal = _GOALS_MS.get(size)
        if goal is not None:
            targets.append(
                Target(
                    f"search_documents p50 through MCP, {size:,} chunks",
                    f"< {goal:.0f} ms",
                    f"{p50:.0f} ms",
                    p50 < goal,
                )
            )
    table.notes.append(
        f"wall: one tools/call; CPU: the process's CPU time for it (all threads); query embedding in {model.precision}"
    )
    tables = [table]
    if ingest_chunks:
        ingest = await anyio.to_thread.run_sync(measure_ingest, ingest_chunks)  # a process of its own
        ingest_rows, ingest_target = ingest_table(ingest)
        tables.append(ingest_rows)
        targets.append(ingest_target)
        figures["ingest_chunks_per_second"] = round(ingest.chunks_per_second, 1)
    return Section("rag", tables=tables, targets=targets, figures=figures)


async def run(sizes: Sequence[int], searches: int) -> None:
    section = await run_rag(sizes, searches)
    for table in section.tables:
        print("\n" + table.render())


def main(argv: Sequence[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--sizes", default="10000,100000", help="corpus sizes in chunks, comma-separated")
    parser.add_argument("--searches", type=int, default=60, help="searches timed per size")
    args = parser.parse_args(argv)
    configure_logging("warning", "console")
    logging.getLogger("mcp_rag_tool").setLevel(logging.WARNING)
    anyio.run(run, [int(size) for size in args.sizes.split(",")], args.searches)


if __name__ == "__main__":
    main()
