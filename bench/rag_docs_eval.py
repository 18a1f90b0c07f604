"""Page-level retrieval quality of mcp_rag_tool on real documentation HTML, per generator.

    .venv/bin/python -m bench.rag_docs_eval bench/rag_docs/python_library.json [--store PATH] [--per-question]
        [--precision auto|float32|bfloat16]

Each set (bench/rag_docs/*.json, read by bench.rag_docs_set) names installed documentation
(Debian's python3-doc: Sphinx; postgresql-doc-15: DocBook XSL; rust-doc: rustdoc), the pages of
it to index, and questions written as a developer would ask them, each labelled with the
page(s) that answer it. The pages are ingested with the bundled all-MiniLM-L6-v2 into a
persisted store (``--store``, default ``.data/bench/store_<set>_<precision>``; later runs find
them unchanged; ``mcp-rag-tool ingest`` into the same folder does the same; ``--as-is`` searches a store
without bringing it up to date), then every
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
from mcp_rag_tool.chunking import Chunk, ChunkLimits, chunk_sections, embedding_context, embedding_text
from mcp_rag_tool.cli import run_ingest
from mcp_rag_tool.documents import parse_document
from mcp_rag_tool.embeddings import MiniLMEmbedder, Precision
from mcp_rag_tool.fusion import Ranking, reciprocal_rank_fusion
from mcp_rag_tool.ingest import sparse_vector
from mcp_rag_tool.points import SearchFilter
from mcp_rag_tool.rerank import maximal_marginal_relevance
from mcp_rag_tool.retrieval import Retriever, SearchOptions
from mcp_rag_tool.settings import RagSettings
from mcp_rag_tool.sparse_index import IndexedChunk, SparseIndex
from mcp_rag_tool.store import VectorStore
from mcp_rag_tool.tokens import WordPieceCounter
from suite_common.logging import configure_logging

ROOT = Path(__file__).resolve().parent.parent
DEFAULT_ROW = "**by document + document vectors, k=2, 1/doc (default)**"
CONTEXT_WEIGHTS = (1.0, 3.0, 5.0, 8.0)
"""BM25F weights of the title and heading path tried besides the default (bm25.CONTEXT_WEIGHT)."""
SparseVariant = float | str | None
"""The BM25 vectors searched: None the stored ones, a number BM25F with that context weight, "flat" the
title and headings counted as body text (the vectors before fields)."""


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


async def use_sparse_variant(store: VectorStore, variant: SparseVariant) -> None:
    """Rebuild the store's in-process BM25 index from the stored chunks' text, title and heading, with
    other field weights (the dense vectors stay): the weights are tried without embedding again."""

    def rebuild() -> SparseIndex:
        index = SparseIndex()
        for points in store._pages(store._chunks, ["text", "title", "heading", "source_prefixes", "tags"], []):
            rows = []
            for point in points:
                payload = point.payload or {}
                chunk = Chunk(payload["text"], "", payload["title"], payload["heading"], 0)
                prefixes = tuple(payload.get("source_prefixes") or ())
                rows.append(
                    IndexedChunk(
                        str(point.id), _variant_vector(variant, chunk), prefixes, tuple(payload.get("tags") or ())
                    )
                )
            index.add(rows)
        return index

    store._sparse_index = await store._call(rebuild)  # in the store's turn, as its own scrolls


def lexical_only(set_path: Path) -> None:
    """BM25 alone by field weight, without a model or a store: the pages chunked as the ingest does, an
    in-process BM25 index per variant, pages ranked by their best chunk (as ``BM25 only`` ranks them)."""
    data, questions = load_set(set_path)
    limits = ChunkLimits(256, 32, counter=WordPieceCounter.bundled())
    chunks: list[Chunk] = []
    root = Path(str(data["root"]))
    for relative in page_files(data):
        parsed = parse_document(relative.name, (root / relative).read_bytes(), "html")
        chunks += chunk_sections(parsed.sections, str(relative), parsed.title, limits)
    print(f"\n{set_path.stem}: {len(chunks)} chunks; BM25 alone, no model\n")
    print("| BM25 variant | tune recall@5 | tune MRR@10 | held-out recall@5 | held-out MRR@10 |")
    print("| --- | --- | --- | --- | --- |")
    variants: list[SparseVariant] = ["flat", *CONTEXT_WEIGHTS, bm25.CONTEXT_WEIGHT]
    for variant in variants:
        index = SparseIndex()
        index.add(IndexedChunk(str(n), _variant_vector(variant, chunk), (), ()) for n, chunk in enumerate(chunks))
        row = ["no fields" if variant == "flat" else f"BM25F, context weight {variant:g}"]
        for half in halves(questions).values():
            ranked = []
            for question in half:
                sources = [
                    chunks[int(chunk_id)].source for chunk_id, _ in index.search(bm25.query_vector(question.text), 50)
                ]
                ranked.append(list(dict.fromkeys(sources)))
            recall, mrr = scores(ranked, half)
            row += [f"{recall:.3f}", f"{mrr:.3f}"]
        print("| " + " | ".join(row) + " |", flush=True)


def _variant_vector(variant: SparseVariant, chunk: Chunk) -> bm25.SparseVector:
    if variant == "flat":
        return bm25.document_vector(embedding_text(chunk))
    if isinstance(variant, float):
        return bm25.document_vector(chunk.text, embedding_context(chunk.title, chunk.heading), variant)
    return sparse_vector(chunk)


async def evaluate(
    set_path: Path, store_path: Path | None, per_question: bool, precision: Precision, as_is: bool = False
) -> None:
    data, questions = load_set(set_path)
    name = set_path.stem
    settings = RagSettings.model_construct()
    model = await MiniLMEmbedder.load(batch_size=settings.embed_batch_size, precision=precision)
    store_path = store_path or ROOT / ".data" / "bench" / f"store_{name}_{model.precision}"
    settings.qdrant_path = str(store_path)
    embedder = CachedEmbedder(model)
    if not as_is:
        # One folder of links per set, always the same: a document's origin is the folder it was found in,
        # so a store up to date is found unchanged by the next run (a new temporary folder re-ingested it all).
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
        stored: SparseVariant = None
        modes: list[tuple[str, SparseVariant, SearchOptions | None]] = [
            ("dense only", stored, replace(base, bm25=False, documents=False)),
            (
                f"BM25F only (context weight {bm25.CONTEXT_WEIGHT:g})",
                stored,
                replace(base, dense=False, documents=False),
            ),
            ("BM25 only, no fields (title and headings counted as body text)", "flat", None),
            ("naive RRF of BM25F and dense per chunk, k=60", stored, replace(base, rrf_k=60.0, documents=False)),
            ("chunk RRF + MMR (before)", stored, None),
            ("by document, k=2, 1/doc, no document vectors", stored, replace(base, documents=False)),
            (DEFAULT_ROW, stored, base),
        ]
        modes += [(f"default, BM25F context weight {w:g}", w, base) for w in CONTEXT_WEIGHTS]
        modes.append(("default, BM25 without fields", "flat", base))
        for k, per_document in ((2.0, 2), (10.0, 1), (60.0, 1)):
            modes.append(
                (
                    f"by document + document vectors, k={k:g}, {per_document}/doc",
                    stored,
                    replace(base, rrf_k=k, chunks_per_document=per_document),
                )
            )
        retriever = Retriever(store, embedder, base)
        print(
            f"\n{name}: {data['generator']}; {len(page_files(data))} pages, {chunk_count} chunks; "
            f"{len(questions)} questions; embedded in {model.precision}\n"
        )
        print("| retrieval | tune recall@5 | tune MRR@10 | held-out recall@5 | held-out MRR@10 |")
        print("| --- | --- | --- | --- | --- |")
        misses: list[str] = []
        current: SparseVariant = stored
        for mode, variant, options in modes:
            if variant != current:
                await use_sparse_variant(store, variant)
                current = variant
            row = [mode]
            for half in halves(questions).values():
                ranked = []
                for question in half:
                    if options is None and variant == "flat":  # BM25 alone over the flat index
                        only_bm25 = replace(base, dense=False, documents=False)
                        hits = await retriever.search([question.text], 10, None, only_bm25)
                        ranked.append([hit.source for hit in hits])
                    elif options is None:
                        ranked.append(await old_ranking(store, embedder, question.text, 10))
                    else:
                        ranked.append(
                            [hit.source for hit in await retriever.search([question.text], 10, None, options)]
                        )
                        if per_question and mode == DEFAULT_ROW:
                            top = ranked[-1][:5]
                            if not question.pages & set(top):
                                misses.append(f"  {question.text!r}: wanted {sorted(question.pages)}, got {top}")
                recall, mrr = scores(ranked, half)
                row += [f"{recall:.3f}", f"{mrr:.3f}"]
            print("| " + " | ".join(row) + " |", flush=True)
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
    parser.add_argument("--as-is", action="store_true", help="search the store as it is, without ingesting")
    parser.add_argument("--lexical", action="store_true", help="BM25 alone by field weight, no model, no store")
    args = parser.parse_args(argv)
    if args.lexical:
        lexical_only(args.set)
        return
    configure_logging("warning", "console")
    logging.getLogger("mcp_rag_tool").setLevel(logging.WARNING)
    anyio.run(evaluate, args.set, args.store, args.per_question, args.precision, args.as_is)


if __name__ == "__main__":
    main()
