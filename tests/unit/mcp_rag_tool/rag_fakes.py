"""Stand-ins for the embedding model in the RAG tool's fast tests: hashed bags of words, failures, hangs.

The real model takes seconds to load; tests/integration/mcp_rag_tool runs the same paths with it.
"""

from __future__ import annotations

import hashlib
import math
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import anyio

from mcp_rag_tool.settings import IN_MEMORY, RagSettings

__all__ = ["FailingEmbedder", "StuckEmbedder", "WordHashEmbedder", "memory_settings"]


def memory_settings(docs: Path | None = None, **overrides: Any) -> RagSettings:
    """Settings with an in-memory store (tests never write into the working directory)."""
    values: dict[str, Any] = {"docs_paths": [docs] if docs is not None else [], "qdrant_path": IN_MEMORY}
    return RagSettings(**(values | overrides))


class WordHashEmbedder:
    """Texts that share words get close vectors: enough to tell documents on different topics apart.

    Records every text it embedded, so tests can see what an ingest re-embedded.
    """

    name = "word-hash"
    dimension = 128

    def __init__(self) -> None:
        self.embedded: list[str] = []
        self.batches: list[int] = []

    async def embed(self, texts: Sequence[str]) -> list[list[float]]:
        self.embedded.extend(texts)
        self.batches.append(len(texts))
        return [self._vector(text) for text in texts]

    async def aclose(self) -> None:
        return None

    def _vector(self, text: str) -> list[float]:
        vector = [0.0] * self.dimension
        for word in text.lower().split():
            word = word.strip(".,?!:;`*#()[]\"'")
            if len(word) > 3:
                vector[int(hashlib.md5(word.encode()).hexdigest(), 16) % self.dimension] += 1.0
        norm = math.sqrt(sum(v * v for v in vector)) or 1.0
        return [v / norm for v in vector]


class FailingEmbedder(WordHashEmbedder):
    async def embed(self, texts: Sequence[str]) -> list[list[float]]:
        raise RuntimeError("embedding backend exploded")


class StuckEmbedder(WordHashEmbedder):
    """Never finishes embedding, like a model that takes too long to load."""

    async def embed(self, texts: Sequence[str]) -> list[list[float]]:
        await anyio.Event().wait()
        raise AssertionError("unreachable")
