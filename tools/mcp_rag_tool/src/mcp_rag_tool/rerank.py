"""Reranking the fused candidates: a cross-encoder's relevance (optional), then maximal marginal relevance.

MMR picks results one at a time, each maximising ``lambda * relevance - (1 - lambda) * (its
highest cosine similarity to a result already picked)``, relevance and similarity both on a
0-1 scale. Near-duplicates (the same paragraph in two files, two versions of one page) are
nearly identical in embedding space, so the second copy loses to the next distinct passage
instead of taking a slot. The picked results are then shown in order of relevance.

The cross-encoder reads query and passage together, which judges relevance better than
comparing two separately made vectors; it is a sentence-transformers ``CrossEncoder`` loaded
from a local folder (``RAG_RERANK_MODEL_PATH``), never downloaded.
"""

from __future__ import annotations

import math
import threading
from collections.abc import Sequence
from pathlib import Path
from typing import Any, Protocol

import anyio
import anyio.to_thread
import numpy as np

from mcp_rag_tool.embeddings import offline_model_environment, run_in_daemon_thread

__all__ = ["CrossEncoderScorer", "PassageScorer", "maximal_marginal_relevance"]


class PassageScorer(Protocol):
    """Scores how well each passage answers a query: higher is better, comparable across passages."""

    async def score(self, query: str, passages: Sequence[str]) -> list[float]: ...


def maximal_marginal_relevance(
    relevance: Sequence[float], vectors: Sequence[Sequence[float]], count: int, lambda_: float
) -> list[int]:
    """Indexes of the ``count`` candidates MMR picks, in the order it picked them (most relevant first).

    ``relevance`` is on a 0-1 scale (the fused score over its best possible value, or a
    cross-encoder's probability); ``vectors`` are compared by cosine similarity; ``lambda_ = 1``
    is plain relevance order.
    """
    if len(relevance) != len(vectors):
        raise ValueError(f"{len(relevance)} relevance scores for {len(vectors)} vectors")
    if not relevance or count <= 0:
        return []
    scores = np.asarray(relevance, dtype=np.float64)
    matrix = np.asarray(vectors, dtype=np.float64)
    norms = np.linalg.norm(matrix, axis=1, keepdims=True)
    unit = matrix / np.where(norms > 0, norms, 1.0)
    similarity = unit @ unit.T

    picked: list[int] = []
    closest = np.full(len(scores), -np.inf)  # highest similarity to anything picked so far
    available = np.ones(len(scores), dtype=bool)
    for _ in range(min(count, len(scores))):
        penalty = np.where(np.isfinite(closest), closest, 0.0)
        marginal = lambda_ * scores - (1 - lambda_) * penalty
        marginal[~available] = -np.inf
        choice = int(np.argmax(marginal))  # ties: the earlier, i.e. more relevant, candidate
        picked.append(choice)
        available[choice] = False
        closest = np.maximum(closest, similarity[choice])
    return picked


class CrossEncoderScorer:
    """A sentence-transformers cross-encoder from a local folder; scores are its logits through a sigmoid.

    Create it with ``await CrossEncoderScorer.load(path)``.
    """

    def __init__(self, model: Any, *, batch_size: int = 32) -> None:
        self._model = model
        self._batch_size = batch_size
        self._lock = anyio.Lock()
        self._predict_lock = threading.Lock()  # as MiniLMEmbedder: one predict at a time, even if abandoned

    @classmethod
    async def load(cls, path: Path, *, batch_size: int = 32) -> CrossEncoderScorer:
        def load_model() -> Any:
            if not path.is_dir():
                raise FileNotFoundError(f"RAG_RERANK_MODEL_PATH {path} is not a folder")
            offline_model_environment()
            from sentence_transformers import CrossEncoder

            return CrossEncoder(str(path), device="cpu", local_files_only=True)

        return cls(await run_in_daemon_thread(load_model), batch_size=batch_size)

    async def score(self, query: str, passages: Sequence[str]) -> list[float]:
        if not passages:
            return []
        async with self._lock:
            return await anyio.to_thread.run_sync(self._predict, query, list(passages), abandon_on_cancel=True)

    def _predict(self, query: str, passages: list[str]) -> list[float]:
        with self._predict_lock:
            logits = self._model.predict(
                [(query, passage) for passage in passages],
                batch_size=self._batch_size,
                convert_to_numpy=True,
                show_progress_bar=False,
                activation_fn=_identity(),
            )
        values = np.asarray(logits, dtype=np.float64).reshape(len(passages), -1)
        # One logit: relevance. Several (a classifier): the last class is "relevant" by convention.
        return [1.0 / (1.0 + math.exp(-float(row[-1]))) for row in values]


def _identity() -> Any:
    import torch

    return torch.nn.Identity()
