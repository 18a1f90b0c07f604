"""The embedding model's throughput on this CPU by arithmetic, threads and batch size, and int8's fidelity.

    .venv/bin/python -m bench.rag_embed_cpu [--passages 128] [--rounds 2]

What a CPU without native bfloat16 (``RAG_EMBED_PRECISION=float32`` emulates one) can expect from
the ingest: the bundled all-MiniLM-L6-v2 encodes the same real passages (the embedded text of the
chunks of the committed fixture pages, Sphinx and DocBook, cycled to ``--passages``) in each arm,
the arms interleaved round by round so that a change of the machine's load touches them alike.
Reported per arm: chunks/s (wall) and CPU seconds per 100 chunks (all threads of the process),
best round. torch's dynamic int8 quantisation of the linear layers is measured for speed and for
fidelity: the cosine of its vectors with float32's (min and mean) and whether each passage's
nearest neighbour stays the same.
"""

from __future__ import annotations

import argparse
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import numpy as np
import numpy.typing as npt

from mcp_rag_tool.chunking import ChunkLimits, chunk_sections, embedding_text
from mcp_rag_tool.documents import parse_document
from mcp_rag_tool.embeddings import native_bfloat16, offline_model_environment
from mcp_rag_tool.tokens import WordPieceCounter, bundled_model_path

FIXTURES = Path(__file__).resolve().parent.parent / "tests" / "unit" / "mcp_rag_tool" / "fixtures"


def passages(count: int) -> list[str]:
    limits = ChunkLimits(256, 32, counter=WordPieceCounter.bundled())
    texts: list[str] = []
    for page in sorted(FIXTURES.glob("*/*.html")):
        parsed = parse_document(page.name, page.read_bytes(), "html")
        texts += [embedding_text(chunk) for chunk in chunk_sections(parsed.sections, page.name, parsed.title, limits)]
    return [texts[index % len(texts)] for index in range(count)]


def timed(encode: Callable[[], Any]) -> tuple[float, float]:
    wall, cpu = time.perf_counter(), time.process_time()
    encode()
    return time.perf_counter() - wall, time.process_time() - cpu


def main(argv: Sequence[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--passages", type=int, default=128)
    parser.add_argument("--rounds", type=int, default=2)
    args = parser.parse_args(argv)
    offline_model_environment()
    import torch
    from sentence_transformers import SentenceTransformer

    texts = passages(args.passages)
    model = SentenceTransformer(str(bundled_model_path()), device="cpu")
    quantised = torch.ao.quantization.quantize_dynamic(  # type: ignore[no-untyped-call]
        SentenceTransformer(str(bundled_model_path()), device="cpu"), {torch.nn.Linear}, dtype=torch.qint8
    )
    bf16 = SentenceTransformer(str(bundled_model_path()), device="cpu").to(torch.bfloat16)

    def encoder(chosen: Any, batch: int) -> Callable[[], npt.NDArray[np.float32]]:
        return lambda: chosen.encode(texts, batch_size=batch, normalize_embeddings=True, show_progress_bar=False)

    arms: dict[str, tuple[int, Callable[[], Any]]] = {}
    for threads in (1, 2):
        for batch in (8, 32, 64):
            arms[f"float32, {threads} thread(s), batch {batch}"] = (threads, encoder(model, batch))
    arms["int8 dynamic (float32 CPU), 2 threads, batch 32"] = (2, encoder(quantised, 32))
    arms[f"bfloat16 weights ({'native' if native_bfloat16() else 'EMULATED'}), 2 threads, batch 32"] = (
        2,
        encoder(bf16, 32),
    )
    best: dict[str, tuple[float, float]] = {}
    for _ in range(args.rounds):
        for name, (threads, encode) in arms.items():
            torch.set_num_threads(threads)
            wall, cpu = timed(encode)
            if name not in best or wall < best[name][0]:
                best[name] = (wall, cpu)
    torch.set_num_threads(2)
    print(f"\n{len(texts)} passages, best of {args.rounds} rounds\n")
    print("| arm | chunks/s (wall) | CPU s per 100 chunks |")
    print("| --- | --- | --- |")
    for name, (wall, cpu) in best.items():
        print(f"| {name} | {len(texts) / wall:.1f} | {100 * cpu / len(texts):.2f} |")
    reference = encoder(model, 32)()
    for name, chosen in (("int8 dynamic", quantised), ("bfloat16 weights", bf16)):
        vectors = np.asarray(encoder(chosen, 32)(), dtype=np.float64)
        cosines = np.sum(vectors * reference, axis=1)
        same = np.mean(
            np.argsort(-(vectors @ reference.T), axis=1)[:, 1] == np.argsort(-(reference @ reference.T), axis=1)[:, 1]
        )
        print(
            f"\n{name} vs float32: cosine min {cosines.min():.4f}, mean {cosines.mean():.4f}; "
            f"same nearest other passage for {same:.0%}"
        )


if __name__ == "__main__":
    main()
