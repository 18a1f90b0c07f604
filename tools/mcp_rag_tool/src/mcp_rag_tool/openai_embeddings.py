"""Embeddings from any OpenAI-compatible ``POST /v1/embeddings`` endpoint (OpenAI, vLLM, Ollama, TEI ...).

Request: ``{"model", "input": [texts], "encoding_format": "float", "dimensions"?}`` with
``Authorization: Bearer <key>``; response: ``{"object": "list", "data": [{"object": "embedding",
"index", "embedding"}], "model", "usage"}``, ``data`` put back in ``index`` order. A connection
error, timeout, 429 or 5xx is retried a bounded number of times with exponential backoff and
jitter (a ``Retry-After`` of up to ``MAX_RETRY_AFTER_SECONDS`` is honoured; the suite's one policy,
``suite_common.retry``); anything else is an ``EmbeddingError`` carrying the endpoint's own message.
The key is never logged.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

import httpx
from tenacity import RetryCallState

from mcp_rag_tool.settings import RagSettings
from suite_common.logging import get_logger
from suite_common.retry import RetryableFailure, retry_after_seconds, retry_policy

__all__ = ["MAX_RETRY_AFTER_SECONDS", "EmbeddingError", "OpenAIEmbedder"]

MAX_RETRY_AFTER_SECONDS = 20.0
_RETRYABLE_STATUS = frozenset({408, 409, 429, 500, 502, 503, 504})
_PROBE_TEXT = "dimension probe"
_MAX_BACKOFF_SECONDS = 8.0

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
        retrying = retry_policy(
            max_retries=self._max_retries,
            max_retry_after=MAX_RETRY_AFTER_SECONDS,
            max_backoff=_MAX_BACKOFF_SECONDS,
            before_sleep=_log_retry,
        )
        attempts = 0
        try:
            async for attempt in retrying:
                attempts = attempt.retry_state.attempt_number
                with attempt:
                    return await self._post(body, len(texts))
        except RetryableFailure as failure:
            if isinstance(failure.error.__cause__, httpx.TransportError):
                raise EmbeddingError(f"{failure.error} after {attempts} attempts") from failure.error.__cause__
            raise failure.error from None
        raise AssertionError("tenacity returns or raises")  # pragma: no cover

    async def _post(self, body: dict[str, Any], expected: int) -> list[list[float]]:
        """One attempt; a failure worth another is a ``RetryableFailure``."""
        try:
            response = await self._client.post("/embeddings", json=body)
        except httpx.TransportError as exc:  # timeouts included
            unreachable = EmbeddingError(
                f"the embeddings endpoint {self._client.base_url} could not be reached ({type(exc).__name__})"
            )
            unreachable.__cause__ = exc
            raise RetryableFailure(unreachable, reason=type(exc).__name__) from exc
        if response.status_code == 200:
            return _vectors(response, expected)
        refused = EmbeddingError(f"the embeddings endpoint answered {response.status_code}: {_error_message(response)}")
        if response.status_code in _RETRYABLE_STATUS:
            raise RetryableFailure(refused, retry_after_seconds(response.headers), reason=str(response.status_code))
        raise refused


def _log_retry(state: RetryCallState) -> None:
    failure = state.outcome.exception() if state.outcome else None
    reason = failure.reason if isinstance(failure, RetryableFailure) else repr(failure)
    _log.warning(
        "embeddings_retry", attempt=state.attempt_number, reason=reason, delay_seconds=round(state.upcoming_sleep, 2)
    )


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


def _error_message(response: httpx.Response) -> str:
    try:
        error = response.json().get("error")
    except ValueError:
        error = None
    if isinstance(error, dict) and isinstance(error.get("message"), str):
        return str(error["message"])[:500]
    return response.text[:500] or response.reason_phrase
