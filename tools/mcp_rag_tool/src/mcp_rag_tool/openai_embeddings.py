"""Embeddings from any OpenAI-compatible ``POST /v1/embeddings`` endpoint (OpenAI, vLLM, Ollama, TEI ...).

Request: ``{"model", "input": [texts], "encoding_format": "float", "dimensions"?}`` with
``Authorization: Bearer <key>``; response: ``{"object": "list", "data": [{"object": "embedding",
"index", "embedding"}], "model", "usage"}``, ``data`` put back in ``index`` order. A connection
error, timeout, 429 or 5xx is retried a bounded number of times with exponential backoff and
jitter (a ``Retry-After`` of up to ``MAX_RETRY_AFTER_SECONDS`` is honoured); anything else is
an ``EmbeddingError`` carrying the endpoint's own message. The key is never logged.
"""

from __future__ import annotations

import math
import random
from collections.abc import Sequence
from typing import Any

import anyio
import httpx

from mcp_rag_tool.settings import RagSettings
from suite_common.logging import get_logger

__all__ = ["MAX_RETRY_AFTER_SECONDS", "EmbeddingError", "OpenAIEmbedder"]

MAX_RETRY_AFTER_SECONDS = 20.0
_RETRYABLE_STATUS = frozenset({408, 409, 429, 500, 502, 503, 504})
_PROBE_TEXT = "dimension probe"

_log = get_logger("mcp_rag_tool.openai_embeddings")


class EmbeddingError(Exception):
    """The embeddings endpoint refused or failed; the message says why, in words a user can act on."""


class OpenAIEmbedder:
    """Create with ``await OpenAIEmbedder.connect(settings)``, which also learns the vector size."""

    def __init__(
        self,
        client: httpx.AsyncClient,
        *,
        model: str,
        dimensions: int | None,
        batch_size: int,
        max_retries: int,
        dimension: int = 0,
    ) -> None:
        self._client = client
        self._model = model
        self._dimensions = dimensions
        self._batch_size = batch_size
        self._max_retries = max_retries
        self._dimension = dimension

    @classmethod
    async def connect(
        cls, settings: RagSettings, *, transport: httpx.AsyncBaseTransport | None = None
    ) -> OpenAIEmbedder:
        headers = {"Accept": "application/json"}
        if settings.embedding_api_key is not None:
            headers["Authorization"] = f"Bearer {settings.embedding_api_key.get_secret_value()}"
        client = httpx.AsyncClient(
            base_url=settings.embedding_url,
            headers=headers,
            timeout=httpx.Timeout(settings.embedding_timeout_seconds),
            transport=transport,
        )
        embedder = cls(
            client,
            model=settings.embedding_model,
            dimensions=settings.embedding_dimensions,
            batch_size=settings.embed_batch_size,
            max_retries=settings.embedding_max_retries,
        )
        try:
            [probe] = await embedder.embed([_PROBE_TEXT])
        except BaseException:
            await client.aclose()
            raise
        embedder._dimension = len(probe)
        return embedder

    @property
    def name(self) -> str:
        suffix = f"@{self._dimensions}" if self._dimensions is not None else ""
        return f"openai:{self._model}{suffix}"

    @property
    def dimension(self) -> int:
        return self._dimension

    async def aclose(self) -> None:
        await self._client.aclose()

    async def embed(self, texts: Sequence[str]) -> list[list[float]]:
        vectors: list[list[float]] = []
        for start in range(0, len(texts), self._batch_size):
            vectors.extend(await self._embed_batch(list(texts[start : start + self._batch_size])))
        return vectors

    async def _embed_batch(self, texts: list[str]) -> list[list[float]]:
        body: dict[str, Any] = {"model": self._model, "input": texts, "encoding_format": "float"}
        if self._dimensions is not None:
            body["dimensions"] = self._dimensions
        for attempt in range(self._max_retries + 1):
            last_attempt = attempt == self._max_retries
            try:
                response = await self._client.post("/embeddings", json=body)
            except httpx.TransportError as exc:  # timeouts included
                if last_attempt:
                    raise EmbeddingError(
                        f"the embeddings endpoint {self._client.base_url} could not be reached "
                        f"({type(exc).__name__}) after {attempt + 1} attempts"
                    ) from exc
                await self._back_off(attempt, None, reason=type(exc).__name__)
                continue
            if response.status_code == 200:
                return _vectors(response, len(texts))
            if response.status_code in _RETRYABLE_STATUS and not last_attempt:
                retry_after = _retry_after_seconds(response)
                if retry_after is None or retry_after <= MAX_RETRY_AFTER_SECONDS:
                    await self._back_off(attempt, retry_after, reason=str(response.status_code))
                    continue
            raise EmbeddingError(f"the embeddings endpoint answered {response.status_code}: {_error_message(response)}")
        raise AssertionError("unreachable: the last attempt returns or raises")

    async def _back_off(self, attempt: int, retry_after: float | None, *, reason: str) -> None:
        delay = retry_after if retry_after is not None else min(8.0, 0.5 * 2**attempt) * random.uniform(0.5, 1.0)
        _log.warning("embeddings_retry", attempt=attempt + 1, reason=reason, delay_seconds=round(delay, 2))
        await anyio.sleep(delay)


def _vectors(response: httpx.Response, expected: int) -> list[list[float]]:
    try:
        data = response.json()["data"]
        ordered = sorted(data, key=lambda item: int(item["index"]))
        vectors = [[float(value) for value in item["embedding"]] for item in ordered]
    except (ValueError, KeyError, TypeError) as exc:
        raise EmbeddingError(f"the embeddings endpoint sent a response that is not an embeddings list ({exc})") from exc
    if len(vectors) != expected or len({len(vector) for vector in vectors}) > 1:
        raise EmbeddingError(
            f"the embeddings endpoint returned {len(vectors)} vectors of mixed or wrong count for {expected} texts"
        )
    return [_unit(vector) for vector in vectors]


def _unit(vector: list[float]) -> list[float]:
    # OpenAI's vectors are unit length already; other servers' may not be, and MMR compares by dot product.
    norm = math.sqrt(sum(value * value for value in vector))
    return [value / norm for value in vector] if norm > 0 else vector


def _retry_after_seconds(response: httpx.Response) -> float | None:
    value = response.headers.get("retry-after")
    if value is None:
        return None
    try:
        return max(0.0, float(value))
    except ValueError:
        return None  # an HTTP date: rare for these APIs; fall back to backoff


def _error_message(response: httpx.Response) -> str:
    try:
        error = response.json().get("error")
    except ValueError:
        error = None
    if isinstance(error, dict) and isinstance(error.get("message"), str):
        return str(error["message"])[:500]
    return response.text[:500] or response.reason_phrase
