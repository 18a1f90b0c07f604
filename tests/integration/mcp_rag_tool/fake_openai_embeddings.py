"""A scripted OpenAI embeddings server: ``POST /v1/embeddings`` in OpenAI's wire format.

Request ``{"model", "input": [texts], "encoding_format": "float", "dimensions"?}`` with
``Authorization: Bearer <key>``; answer ``{"object": "list", "data": [{"object": "embedding",
"index", "embedding"}], "model", "usage": {"prompt_tokens", "total_tokens"}}``. The vectors are
hashed bags of words (texts that share words are close), and ``data`` comes back in reverse
order, which the API allows (clients must sort by ``index``). Queue failures with ``fail_next``;
they answer with OpenAI's error body.
"""

from __future__ import annotations

import hashlib
import math
from collections import deque
from dataclasses import dataclass, field
from typing import Any

from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse
from starlette.routing import Route

__all__ = ["EmbeddingsServer", "bag_of_words_vector"]

ERROR_TYPES = {400: "invalid_request_error", 401: "invalid_request_error", 429: "rate_limit_exceeded"}


def bag_of_words_vector(text: str, dimension: int) -> list[float]:
    vector = [0.0] * dimension
    for word in text.lower().split():
        word = word.strip(".,?!:;`*#()[]\"'")
        if len(word) > 3:
            vector[int(hashlib.md5(word.encode()).hexdigest(), 16) % dimension] += 1.0
    norm = math.sqrt(sum(v * v for v in vector)) or 1.0
    return [2.0 * v / norm for v in vector]  # not unit length: the client must not assume it is


@dataclass
class EmbeddingsServer:
    api_key: str = "sk-test"
    dimension: int = 64
    requests: list[dict[str, Any]] = field(default_factory=list)
    authorizations: list[str | None] = field(default_factory=list)
    failures: deque[tuple[int, dict[str, str]]] = field(default_factory=deque)

    def fail_next(self, status: int, headers: dict[str, str] | None = None) -> None:
        self.failures.append((status, headers or {}))

    @property
    def app(self) -> Starlette:
        return Starlette(routes=[Route("/v1/embeddings", self._embeddings, methods=["POST"])])

    @property
    def embedded_texts(self) -> list[str]:
        return [text for body in self.requests for text in body["input"]]

    async def _embeddings(self, request: Request) -> JSONResponse:
        body = await request.json()
        self.requests.append(body)
        self.authorizations.append(request.headers.get("authorization"))
        if request.headers.get("authorization") != f"Bearer {self.api_key}":
            return _error(401, "Incorrect API key provided: sk-wr***.", "invalid_api_key")
        if self.failures:
            status, headers = self.failures.popleft()
            return _error(status, f"scripted failure {status}", None, headers)
        texts = body["input"] if isinstance(body["input"], list) else [body["input"]]
        size = body.get("dimensions") or self.dimension
        data = [
            {"object": "embedding", "index": index, "embedding": bag_of_words_vector(text, size)}
            for index, text in enumerate(texts)
        ]
        tokens = sum(len(text.split()) for text in texts)
        return JSONResponse(
            {
                "object": "list",
                "data": list(reversed(data)),
                "model": body["model"],
                "usage": {"prompt_tokens": tokens, "total_tokens": tokens},
            }
        )


def _error(status: int, message: str, code: str | None, headers: dict[str, str] | None = None) -> JSONResponse:
    body = {"error": {"message": message, "type": ERROR_TYPES.get(status, "server_error"), "param": None, "code": code}}
    return JSONResponse(body, status_code=status, headers=headers)
