"""Embeddings from an OpenAI-compatible endpoint: a scripted loopback server speaking OpenAI's wire format."""

from __future__ import annotations

import math
import sys
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import anyio
import pytest
from integration.mcp_rag_tool.fake_openai_embeddings import EmbeddingsServer, bag_of_words_vector
from mcp import Client
from structlog.testing import capture_logs

from mcp_rag_tool.openai_embeddings import EmbeddingError, OpenAIEmbedder
from mcp_rag_tool.server import build_server
from mcp_rag_tool.settings import IN_MEMORY, RagSettings
from mcp_rag_tool.tokens import WordCounter
from support.servers import free_port, serve_app

pytestmark = pytest.mark.anyio


@pytest.fixture
async def endpoint() -> AsyncIterator[tuple[EmbeddingsServer, str]]:
    fake = EmbeddingsServer()
    async with serve_app(fake.app) as url:
        yield fake, f"{url}/v1"


def _settings(url: str, **overrides: Any) -> RagSettings:
    values: dict[str, Any] = {
        "embedding_provider": "openai",
        "embedding_url": url,
        "embedding_api_key": "sk-test",
        "embedding_model": "text-embedding-3-small",
        "embed_batch_size": 2,
        "qdrant_path": IN_MEMORY,
        "docs_paths": [],
    }
    return RagSettings(**(values | overrides))


def _unit(vector: list[float]) -> list[float]:
    norm = math.sqrt(sum(v * v for v in vector))
    return [v / norm for v in vector]


async def test_requests_use_openais_wire_format_and_vectors_come_back_in_input_order(
    endpoint: tuple[EmbeddingsServer, str],
) -> None:
    fake, url = endpoint
    texts = ["retry budgets and backoff", "solar eclipse over the sea", "sourdough starter feeding"]

    embedder = await OpenAIEmbedder.connect(_settings(url))
    try:
        vectors = await embedder.embed(texts)
    finally:
        await embedder.aclose()

    assert fake.requests == [
        {"model": "text-embedding-3-small", "input": ["dimension probe"], "encoding_format": "float"},
        {"model": "text-embedding-3-small", "input": texts[:2], "encoding_format": "float"},
        {"model": "text-embedding-3-small", "input": texts[2:], "encoding_format": "float"},
    ]
    assert set(fake.authorizations) == {"Bearer sk-test"}
    assert (embedder.name, embedder.dimension) == ("openai:text-embedding-3-small", 64)
    for vector, text in zip(vectors, texts, strict=True):
        assert vector == pytest.approx(_unit(bag_of_words_vector(text, 64)))


async def test_configured_dimensions_are_asked_for(endpoint: tuple[EmbeddingsServer, str]) -> None:
    fake, url = endpoint

    embedder = await OpenAIEmbedder.connect(_settings(url, embedding_dimensions=32))
    await embedder.aclose()

    assert fake.requests[0]["dimensions"] == 32
    assert (embedder.name, embedder.dimension) == ("openai:text-embedding-3-small@32", 32)


async def test_a_429_with_a_short_retry_after_is_retried_then_succeeds(endpoint: tuple[EmbeddingsServer, str]) -> None:
    fake, url = endpoint
    embedder = await OpenAIEmbedder.connect(_settings(url))
    fake.fail_next(429, {"Retry-After": "0"})
    fake.fail_next(503, {"Retry-After": "0"})

    try:
        with capture_logs() as logs:
            [vector] = await embedder.embed(["eclipse"])
    finally:
        await embedder.aclose()

    assert len(vector) == 64
    assert len(fake.requests) == 4  # probe, 429, 503, success
    assert [entry["reason"] for entry in logs if entry["event"] == "embeddings_retry"] == ["429", "503"]


async def test_a_retry_after_too_long_to_wait_is_an_error_at_once(endpoint: tuple[EmbeddingsServer, str]) -> None:
    fake, url = endpoint
    embedder = await OpenAIEmbedder.connect(_settings(url))
    fake.fail_next(429, {"Retry-After": "120"})

    try:
        with anyio.fail_after(5), pytest.raises(EmbeddingError, match="answered 429: scripted failure 429"):
            await embedder.embed(["eclipse"])
    finally:
        await embedder.aclose()


async def test_retries_are_bounded(endpoint: tuple[EmbeddingsServer, str]) -> None:
    fake, url = endpoint
    embedder = await OpenAIEmbedder.connect(_settings(url, embedding_max_retries=1))
    for _ in range(3):
        fake.fail_next(500, {"Retry-After": "0"})

    try:
        with pytest.raises(EmbeddingError, match="answered 500"):
            await embedder.embed(["eclipse"])
    finally:
        await embedder.aclose()

    assert len(fake.requests) == 3  # probe, then one attempt and one retry


async def test_a_wrong_key_is_not_retried_and_its_message_is_kept(endpoint: tuple[EmbeddingsServer, str]) -> None:
    fake, url = endpoint

    with pytest.raises(EmbeddingError, match="answered 401: Incorrect API key provided"):
        await OpenAIEmbedder.connect(_settings(url, embedding_api_key="sk-wrong"))

    assert len(fake.requests) == 1


async def test_an_unreachable_endpoint_is_an_error_naming_it() -> None:
    url = f"http://127.0.0.1:{free_port()}/v1"

    with pytest.raises(EmbeddingError, match="could not be reached"):
        await OpenAIEmbedder.connect(_settings(url, embedding_max_retries=0, embedding_timeout_seconds=2))


async def test_the_server_indexes_and_searches_with_the_endpoints_vectors(
    endpoint: tuple[EmbeddingsServer, str], tmp_path: Path
) -> None:
    fake, url = endpoint
    (tmp_path / "eclipses.md").write_text("# Eclipses\n\nA solar eclipse happens when the moon hides the sun.")
    (tmp_path / "bread.md").write_text("# Bread\n\nFeed the sourdough starter twice daily.")
    server = build_server(_settings(url, docs_paths=[tmp_path]), counter=WordCounter())

    async with serve_app(server.streamable_http_app()) as base, Client(f"{base}/mcp") as client:
        with anyio.fail_after(20):
            result = await client.call_tool("search_documents", {"queries": ["when does a solar eclipse happen"]})

    assert result.structured_content is not None
    assert result.structured_content["results"][0]["source"] == "eclipses.md"
    assert "Eclipses\n\nA solar eclipse happens when the moon hides the sun." in fake.embedded_texts
    assert "when does a solar eclipse happen" in fake.embedded_texts


async def test_the_ingest_command_runs_against_the_endpoint_and_skips_what_it_already_has(
    endpoint: tuple[EmbeddingsServer, str], tmp_path: Path
) -> None:
    _, url = endpoint
    docs = tmp_path / "docs"
    docs.mkdir()
    (docs / "a.md").write_text("# A\n\nAlpha.")
    (docs / "b.html").write_text("<h1>B</h1><p>Beta.</p>")
    env = {
        "RAG_EMBEDDING_PROVIDER": "openai",
        "RAG_EMBEDDING_URL": url,
        "RAG_EMBEDDING_API_KEY": "sk-test",
        "RAG_QDRANT_PATH": str(tmp_path / "qdrant"),
        "PATH": str(Path(sys.executable).parent),
    }
    command = [sys.executable, "-m", "mcp_rag_tool", "ingest", str(docs)]

    with anyio.fail_after(60):
        first = await anyio.run_process(command, env=env, check=False)
        (docs / "a.md").write_text("# A\n\nAlpha, changed.")
        second = await anyio.run_process(command, env=env, check=False)

    assert first.returncode == 0, first.stderr.decode()
    assert first.stdout.decode().startswith("ingested 2 documents: 2 added, 0 updated, 0 unchanged")
    assert second.stdout.decode().startswith("ingested 2 documents: 0 added, 1 updated, 1 unchanged")
    # The command draws a progress bar (a line, stderr not being a terminal) instead of info logs.
    assert "documents 2/2" in second.stderr.decode()
    assert "sk-test" not in (first.stderr + second.stderr).decode()
