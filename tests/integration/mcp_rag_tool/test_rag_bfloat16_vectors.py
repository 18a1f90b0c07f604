"""bfloat16 and float32 vectors of the real all-MiniLM-L6-v2 are interchangeable.

An index built in one precision is searched in the other (the setting may change between a
``mcp-rag-tool ingest`` and the server, or between machines sharing a Qdrant server), so the two
must agree to within float noise, not merely be similar: a cosine of at least 0.999 for every text,
and the same nearest passage for every query.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
import torch

from mcp_rag_tool.embeddings import MiniLMEmbedder
from mcp_rag_tool.html_text import extract_html

pytestmark = pytest.mark.anyio

FIXTURES = Path(__file__).resolve().parents[2] / "unit" / "mcp_rag_tool" / "fixtures"


def _passages() -> list[str]:
    words: list[str] = []
    for page in sorted(FIXTURES.glob("*/*.html")):  # real Sphinx and DocBook pages
        words += extract_html(page.read_text(encoding="utf-8")).markdown.split()
    return [" ".join(words[start : start + 100]) for start in range(0, min(len(words), 100 * 48), 100)]


async def test_bfloat16_vectors_are_within_float_noise_of_float32_ones_and_rank_passages_alike() -> None:
    passages = _passages()
    queries = [
        "get the largest items of a list without sorting it",
        "skip the first rows of a query result",
        "copy a nested structure so that changes do not affect the original",
        "create an index without locking writes to the table",
    ]
    float32 = await MiniLMEmbedder.load(precision="float32")
    bfloat16 = await MiniLMEmbedder.load(precision="bfloat16")

    exact = np.array(await float32.embed(passages + queries))
    fast = np.array(await bfloat16.embed(passages + queries))

    assert (float32.precision, bfloat16.precision) == ("float32", "bfloat16")
    assert {parameter.dtype for parameter in bfloat16._model.parameters()} == {torch.bfloat16}
    assert {parameter.dtype for parameter in float32._model.parameters()} == {torch.float32}
    assert len(passages) >= 40
    cosines = (exact * fast).sum(axis=1) / np.linalg.norm(fast, axis=1) / np.linalg.norm(exact, axis=1)
    assert cosines.min() >= 0.999
    best_exact = (exact[-len(queries) :] @ exact[: len(passages)].T).argmax(axis=1)
    best_fast = (fast[-len(queries) :] @ exact[: len(passages)].T).argmax(axis=1)  # bf16 query, f32 index
    assert best_fast.tolist() == best_exact.tolist()
