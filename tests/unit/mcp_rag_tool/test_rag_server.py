"""The server's behaviour around the index, through a real MCP client and real Qdrant (in memory or on disk).

The embedding model is swapped for a bag-of-words embedder here so these run in milliseconds;
tests/integration/mcp_rag_tool runs the same paths with all-MiniLM-L6-v2 over stdio and HTTP.
"""

from __future__ import annotations

import hashlib
import math
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import anyio
import httpx
import pytest
from mcp import Client
from mcp_types import CallToolResult, TextContent

from mcp_rag_tool.server import build_server
from mcp_rag_tool.settings import RagSettings
from support.servers import serve_app

pytestmark = pytest.mark.anyio


class WordHashEmbedder:
    """Texts that share words get close vectors: enough to tell documents on different topics apart."""

    dimension = 128

    async def embed(self, texts: Sequence[str]) -> list[list[float]]:
        return [self._vector(text) for text in texts]

    def _vector(self, text: str) -> list[float]:
        vector = [0.0] * self.dimension
        for word in text.lower().split():
            word = word.strip(".,?!:;`*#")
            if len(word) > 3:
                vector[int(hashlib.md5(word.encode()).hexdigest(), 16) % self.dimension] += 1.0
        norm = math.sqrt(sum(v * v for v in vector)) or 1.0
        return [v / norm for v in vector]


class FailingEmbedder:
    dimension = 128

    async def embed(self, texts: Sequence[str]) -> list[list[float]]:
        raise RuntimeError("embedding backend exploded")


class StuckEmbedder:
    """Never finishes embedding, like a model that takes too long to load."""

    dimension = 128

    async def embed(self, texts: Sequence[str]) -> list[list[float]]:
        await anyio.Event().wait()
        raise AssertionError("unreachable")


@pytest.fixture
def docs(tmp_path: Path) -> Path:
    folder = tmp_path / "docs"
    folder.mkdir()
    (folder / "baking.md").write_text(
        "# Sourdough baking\n\n## Starter\n\nFeed the sourdough starter flour and water twice daily; "
        "a healthy starter doubles within hours.\n"
    )
    (folder / "astronomy.md").write_text(
        "# Eclipses\n\nA solar eclipse happens when the moon passes between the earth and the sun.\n"
    )
    return folder


def _text(result: CallToolResult) -> str:
    block = result.content[0]
    assert isinstance(block, TextContent)
    return block.text


async def _search(client: Client, arguments: dict[str, Any]) -> CallToolResult:
    with anyio.fail_after(10):
        return await client.call_tool("search_documents", arguments)


async def test_the_document_that_answers_comes_first_as_text_and_structured_content(docs: Path) -> None:
    server = build_server(RagSettings(docs_paths=[docs]), embedder=WordHashEmbedder())

    async with Client(server) as client:
        result = await _search(client, {"queries": ["how often to feed a sourdough starter"], "top_k": 2})

    assert not result.is_error
    assert _text(result).startswith("[1] baking.md — Sourdough baking > Starter (score ")
    assert "Feed the sourdough starter" in _text(result)
    assert result.structured_content is not None
    first = result.structured_content["results"][0]
    assert (first["source"], first["title"], first["heading"]) == (
        "baking.md",
        "Sourdough baking",
        "Sourdough baking > Starter",
    )
    assert first["score"] > 0.3
    assert [r["source"] for r in result.structured_content["results"]] == ["baking.md", "astronomy.md"]


async def test_several_queries_each_find_their_document(docs: Path) -> None:
    server = build_server(RagSettings(docs_paths=[docs]), embedder=WordHashEmbedder())

    async with Client(server) as client:
        result = await _search(client, {"queries": ["solar eclipse moon", "sourdough starter"], "top_k": 5})

    assert result.structured_content is not None
    sources = [r["source"] for r in result.structured_content["results"]]
    assert sorted(sources) == ["astronomy.md", "baking.md"]  # each chunk once, though both queries found both


async def test_a_single_query_string_is_taken_as_a_list_of_one(docs: Path) -> None:
    server = build_server(RagSettings(docs_paths=[docs]), embedder=WordHashEmbedder())

    async with Client(server) as client:
        result = await _search(client, {"queries": "solar eclipse", "top_k": 1})

    assert not result.is_error
    assert _text(result).startswith("[1] astronomy.md — Eclipses")


async def test_bad_input_is_an_error_result_telling_the_model_what_to_change(docs: Path) -> None:
    server = build_server(RagSettings(docs_paths=[docs]), embedder=WordHashEmbedder())

    async with Client(server) as client:
        too_many = await _search(client, {"queries": ["eclipse"], "top_k": 500})
        blank = await _search(client, {"queries": ["eclipse", " "]})

    assert too_many.is_error
    assert "top_k must be between 1 and 50 (got 500)" in _text(too_many)
    assert blank.is_error
    assert "queries[1] is empty" in _text(blank)


async def test_an_empty_index_says_so_and_names_the_configured_paths(tmp_path: Path) -> None:
    empty = tmp_path / "empty"
    empty.mkdir()
    settings = RagSettings(docs_paths=[empty, tmp_path / "missing"])
    server = build_server(settings, embedder=WordHashEmbedder())

    async with Client(server) as client:
        result = await _search(client, {"queries": ["anything"]})

    assert not result.is_error
    assert "No documents are indexed" in _text(result)
    assert f"{empty}, {tmp_path / 'missing'} (not found)" in _text(result)
    assert result.structured_content == {"results": []}


async def test_a_failed_ingest_makes_every_call_an_error_with_the_reason(docs: Path) -> None:
    server = build_server(RagSettings(docs_paths=[docs]), embedder=FailingEmbedder())

    async with Client(server) as client:
        results = [await _search(client, {"queries": ["eclipse"]}) for _ in range(2)]

    for result in results:
        assert result.is_error
        assert "building the index failed (RuntimeError: embedding backend exploded)" in _text(result)


async def test_a_search_waits_for_the_index_no_longer_than_configured(docs: Path) -> None:
    settings = RagSettings(docs_paths=[docs], index_ready_timeout_seconds=0.2)
    server = build_server(settings, embedder=StuckEmbedder())

    async with Client(server) as client:
        result = await _search(client, {"queries": ["eclipse"]})

    assert result.is_error
    assert "still being built" in _text(result)
    assert "Try the same call again" in _text(result)


async def test_reindexing_a_persisted_collection_forgets_removed_documents(docs: Path, tmp_path: Path) -> None:
    settings = RagSettings(docs_paths=[docs], qdrant_path=str(tmp_path / "qdrant"))
    query = {"queries": ["solar eclipse moon"], "top_k": 5}

    async with Client(build_server(settings, embedder=WordHashEmbedder())) as client:
        before = await _search(client, query)
    (docs / "astronomy.md").unlink()
    async with Client(build_server(settings, embedder=WordHashEmbedder())) as client:
        after = await _search(client, query)

    assert before.structured_content is not None
    assert after.structured_content is not None
    assert {r["source"] for r in before.structured_content["results"]} == {"astronomy.md", "baking.md"}
    assert [r["source"] for r in after.structured_content["results"]] == ["baking.md"]


async def test_readyz_reports_a_failed_index_while_healthz_stays_ok(docs: Path) -> None:
    server = build_server(RagSettings(docs_paths=[docs]), embedder=FailingEmbedder())

    async with serve_app(server.streamable_http_app()) as url, httpx.AsyncClient(base_url=url, timeout=5) as http:
        async with Client(f"{url}/mcp") as client:  # a search returns once the build is over
            await _search(client, {"queries": ["eclipse"]})
        health = await http.get("/healthz")
        ready = await http.get("/readyz")

    assert (health.status_code, health.json()) == (200, {"status": "ok"})
    assert ready.status_code == 503
    assert ready.json()["checks"]["index"] == "failed: RuntimeError: embedding backend exploded"
