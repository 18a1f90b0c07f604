"""Page-level retrieval quality of mcp_rag_tool on real documentation HTML, per generator.

    .venv/bin/python -m bench.rag_docs_eval bench/rag_docs/python_library.json [--store PATH] [--per-question]
        [--precision auto|float32|bfloat16]

Each set (bench/rag_docs/*.json, read by bench.rag_docs_set) names installed documentation
(Debian's python3-doc: Sphinx; postgresql-doc-15: DocBook XSL; rust-doc: rustdoc), the pages of
it to index, and questions written as a developer would ask them, each labelled with the
page(s) that answer it. The pages are ingested with the bundled all-MiniLM-L6-v2 into a
persisted store (``--store``, default ``.data/bench/store_<set>_<precision>``; later runs find
them unchanged; ``mcp-rag-tool ingest`` into the same folder does the same), then every
question is asked through the tool's own retrieval in several configurations.
``--precision`` picks the model's arithmetic (``RAG_EMBED_PRECISION``) for both the ingest and the
questions, so that float32 and bfloat16 can be compared on the same pages.

recall@5: share of questions with a chunk of a labelled page among the first 5 results; MRR@10:
mean of 1/rank of the first such chunk within 10. Questions are split in two halves (even and
odd positions): parameters are chosen on the first ("tune") and reported on the second
("held out"). "chunk RRF + MMR" is the former ranking (fusion per chunk, MMR 0.7), and "no
document vectors" the one before document vectors joined the fusion, over the same index.
"""

from __future__ import annotations

import argparse
import logging
import shutil
import sys
import time
from collections.abc import Sequence
from dataclasses import replace
from pathlib import Path

import anyio

from bench.rag_docs_set import halves, link_pages, load_set, page_files, scores
from bench.rag_eval import CachedEmbedder
from mcp_rag_tool import bm25
from mcp_rag_tool.cli import run_ingest
from mcp_rag_tool.embeddings import MiniLMEmbedder, Precision
from mcp_rag_tool.fusion import Ranking, reciprocal_rank_fusion
from mcp_rag_tool.points import SearchFilter
from mcp_rag_tool.rerank import maximal_marginal_relevance
from mcp_rag_tool.retrieval import Retriever, SearchOptions
from mcp_rag_tool.settings import RagSettings
from mcp_rag_tool.store import VectorStore
from suite_common.logging import configure_logging

ROOT = Path(__file__).resolve().parent.parent


async def old_ranking(store: VectorStore, embedder: CachedEmbedder, query: str, top_k: int) -> list[str]:
    """The former ranking: RRF (k=2) per chunk, then MMR (lambda 0.7) over the best 30."""
    dense = await embedder.embed([query])
    sparse = [vector for vector in [bm25.query_vector(query)] if vector.indices]
    dense_rankings, sparse_rankings = await store.search(dense, sparse, 50, SearchFilter())
    rankings = [Ranking("dense", [c.id for c in r]) for r in dense_rankings]
    rankings += [Ranking("bm25", [c.id for c in r]) for r in sparse_rankings]
    chunks = {c.id: c for r in (*dense_rankings, *sparse_rankings) for c in r}
    fused = reciprocal_rank_fusion(rankings, {"dense": 1.0, "bm25": 1.0}, 2.0)[:30]
    vectors = await store.dense_vectors([item.id for item in fused])
    relevance = [item.score for item in fused]
    top = max(relevance, default=1.0) or 1.0
    picked = maximal_marginal_relevance(
        [score / top for score in relevance], [vectors[item.id] for item in fused], top_k, 0.7
    )
    picked.sort(key=lambda index: -relevance[index])
    return [chunks[fused[index].id].source for index in picked]


async def evaluate(set_path: Path, store_path: Path | None, per_question: bool, precision: Precision) -> None:
    data, questions = load_set(set_path)
    name = set_path.stem
    settings = RagSettings.model_construct()
    model = await MiniLMEmbedder.load(batch_size=settings.embed_batch_size, precision=precision)
    store_path = store_path or ROOT / ".data" / "bench" / f"store_{name}_{model.precision}"
    settings.qdrant_path = str(store_path)
    embedder = CachedEmbedder(model)
    # One folder of links per set, always the same: a document's origin is the folder it was found in, so a store
    # up to date is found unchanged by the next run (a new temporary folder each run re-ingested it all).
    pages = ROOT / ".data" / "bench" / f"pages_{name}"
    shutil.rmtree(pages, ignore_errors=True)
    pages.mkdir(parents=True)
    link_pages(data, pages)
    started = time.perf_counter()
    report = await run_ingest(settings, [pages], embedder=model)
    if report.chunks:
        print(f"ingested {report.chunks} chunks in {time.perf_counter() - started:.0f} s", file=sys.stderr)
    store = await VectorStore.open(settings)
    try:
        await store.ensure_collections(model.dimension, model.name)
        chunk_count = await store.count()
        base = SearchOptions.from_settings(settings)
        modes: dict[str, SearchOptions | None] = {
            "dense only": replace(base, bm25=False, documents=False),
            "BM25 only": replace(base, dense=False, documents=False),
            "chunk RRF + MMR (before)": None,
            "by document, k=2, 1/doc, no document vectors": replace(base, documents=False),
        }
        for k in (2.0, 10.0, 60.0):
            for per_document in (1, 2, 3):
                modes[f"by document, k={k:g}, {per_document}/doc"] = replace(
                    base, rrf_k=k, chunks_per_document=per_document
                )
        retriever = Retriever(store, embedder, base)
        print(
            f"\n{name}: {data['generator']}; {len(page_files(data))} pages, {chunk_count} chunks; "
            f"{len(questions)} questions; embedded in {model.precision}\n"
        )
        print("| retrieval | tune recall@5 | tune MRR@10 | held-out recall@5 | held-out MRR@10 |")
        print("| --- | --- | --- | --- | --- |")
        misses: list[str] = []
        for mode, options in modes.items():
            row = [mode]
            for half in halves(questions).values():
                ranked = []
                for question in half:
                    if options is None:
                        ranked.append(await old_ranking(store, embedder, question.text, 10))
                    else:
                        ranked.append(
                            [hit.source for hit in await retriever.search([question.text], 10, None, options)]
                        )
                        if per_question and options == base:
                            top = ranked[-1][:5]
                            if not question.pages & set(top):
                                misses.append(f"  {question.text!r}: wanted {sorted(question.pages)}, got {top}")
                recall, mrr = scores(ranked, half)
                row += [f"{recall:.3f}", f"{mrr:.3f}"]
            print("| " + " | ".join(row) + " |")
        if misses:
            print("\nmissed in the top 5 with the defaults:\n" + "\n".join(misses))
    finally:
        await store.close()


def main(argv: Sequence[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("set", type=Path, help="a question set, e.g. bench/rag_docs/python_library.json")
    parser.add_argument("--store", type=Path, help="the persisted store of its pages (ingested, or brought up to date)")
    parser.add_argument("--per-question", action="store_true", help="list the questions the defaults miss")
    parser.add_argument("--precision", default="auto", choices=("auto", "float32", "bfloat16"), help="see above")
    args = parser.parse_args(argv)
    configure_logging("warning", "console")
    logging.getLogger("mcp_rag_tool").setLevel(logging.WARNING)
    anyio.run(evaluate, args.set, args.store, args.per_question, args.precision)


if __name__ == "__main__":
    main()
