"""Ingest throughput of ``mcp-rag-tool ingest``, end to end through the CLI, in chunks of about 200 tokens.

    .venv/bin/python -m bench.rag_ingest [--chunks 1200] [--precision auto|float32|bfloat16]

Writes Markdown files of 40 sections each, every section about 200 tokens of the bundled model's
tokenizer (its heading path included, so one section is one chunk), then runs the real command
(``python -m mcp_rag_tool ingest FOLDER``, a new process, into a new local-mode store) and reads
its summary line: chunks embedded, the seconds of the ingest itself and its rate. The wall time of
the whole process (interpreter start, model load, ingest, store written and closed) is given
beside it.
"""

from __future__ import annotations

import argparse
import os
import random
import re
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from bench.rag_latency import _VOCABULARY, _sentence
from bench.report import Table, Target
from mcp_rag_tool.tokens import WordPieceCounter, count_tokens

SECTIONS_PER_FILE = 40
SECTION_TOKENS = 200
GOAL_CHUNKS_PER_SECOND = 40.0
"""The target: chunks of about 200 tokens per second (8,000 tokens/s), end to end through the CLI."""

_SUMMARY = re.compile(r"(?P<chunks>\d+) chunks embedded in (?P<seconds>[\d.]+) s")


@dataclass(frozen=True)
class IngestFigures:
    chunks: int
    tokens_per_chunk: float
    ingest_seconds: float
    process_seconds: float
    precision: str

    @property
    def chunks_per_second(self) -> float:
        return self.chunks / self.ingest_seconds


def write_corpus(folder: Path, chunks: int, seed: int = 3) -> float:
    """Files of SECTIONS_PER_FILE sections of about SECTION_TOKENS tokens; returns the mean tokens per chunk."""
    rng = random.Random(seed)
    counter = WordPieceCounter.bundled()
    sizes: list[int] = []
    for number in range(-(-chunks // SECTIONS_PER_FILE)):
        title = f"Operations guide {number}"
        lines = [f"# {title}", ""]
        for section in range(min(SECTIONS_PER_FILE, chunks - number * SECTIONS_PER_FILE)):
            heading = f"{rng.choice(_VOCABULARY).title()} {section}"
            sentences = [_sentence(rng)]
            while True:
                text = f"{title} > {heading}\n\n{' '.join(sentences)}"
                size = count_tokens(counter, text) + counter.special_tokens
                if size >= SECTION_TOKENS - 15:
                    break
                sentences.append(_sentence(rng))
            sizes.append(size)
            lines += [f"## {heading}", "", " ".join(sentences), ""]
        (folder / f"guide-{number:03d}.md").write_text("\n".join(lines))
    return statistics.mean(sizes)


def measure_ingest(chunks: int, precision: str = "auto") -> IngestFigures:
    with tempfile.TemporaryDirectory(prefix="rag-ingest-bench-") as scratch:
        corpus = Path(scratch) / "corpus"
        corpus.mkdir()
        tokens = write_corpus(corpus, chunks)
        environment = {
            **os.environ,
            "RAG_QDRANT_PATH": str(Path(scratch) / "store"),
            "RAG_EMBED_PRECISION": precision,
            "RAG_QDRANT_URL": "",
        }
        started = time.perf_counter()
        finished = subprocess.run(
            [sys.executable, "-m", "mcp_rag_tool", "ingest", str(corpus)],
            env=environment,
            capture_output=True,
            text=True,
            timeout=3600,
            check=False,
        )
        process_seconds = time.perf_counter() - started
    summary = _SUMMARY.search(finished.stdout)
    if finished.returncode != 0 or summary is None:
        raise RuntimeError(f"mcp-rag-tool ingest failed ({finished.returncode}): {finished.stderr[-2000:]}")
    return IngestFigures(int(summary["chunks"]), tokens, float(summary["seconds"]), process_seconds, precision)


def ingest_table(figures: IngestFigures) -> tuple[Table, Target]:
    table = Table(f"mcp-rag-tool ingest through the CLI (embed precision {figures.precision})", ["measure", "value"])
    table.add("corpus", f"{figures.chunks:,} chunks of {figures.tokens_per_chunk:.0f} tokens on average")
    table.add(
        "ingest (read, chunk, embed, BM25, store)",
        f"{figures.ingest_seconds:.1f} s = {figures.chunks_per_second:.1f} chunks/s"
        f" = {figures.chunks_per_second * figures.tokens_per_chunk:,.0f} tokens/s",
    )
    table.add("the whole process (start, model load, ingest, close)", f"{figures.process_seconds:.1f} s")
    target = Target(
        "mcp-rag-tool ingest, ~200-token chunks",
        f">= {GOAL_CHUNKS_PER_SECOND:.0f} chunks/s",
        f"{figures.chunks_per_second:.1f} chunks/s",
        figures.chunks_per_second >= GOAL_CHUNKS_PER_SECOND,
    )
    return table, target


def main(argv: Sequence[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--chunks", type=int, default=1200, help="chunks in the corpus (default 1200)")
    parser.add_argument("--precision", default="auto", choices=("auto", "float32", "bfloat16"))
    args = parser.parse_args(argv)
    table, target = ingest_table(measure_ingest(args.chunks, args.precision))
    print("\n" + table.render())
    print(f"\n{target.name}: {target.goal}, measured {target.measured}: {target.verdict}")


if __name__ == "__main__":
    main()
