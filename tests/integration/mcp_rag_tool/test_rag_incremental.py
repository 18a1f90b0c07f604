"""Incremental ingest with the real all-MiniLM-L6-v2, over real MCP sessions on streamable HTTP.

Each "restart" is a new server on the same persisted Qdrant folder, as when mcp-client-service
restarts the tool: its start-up ingest skips unchanged files, replaces changed ones and drops
deleted ones. The model is loaded once for the session (see conftest.py).
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Sequence
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import anyio
import pytest
from mcp import Client
from mcp_types import CallToolResult, TextContent

from mcp_rag_tool.cli import run_ingest
from mcp_rag_tool.embeddings import MiniLMEmbedder
from mcp_rag_tool.server import build_server
from mcp_rag_tool.settings import IN_MEMORY, RagSettings
from mcp_rag_tool.tokens import WordPieceCounter
from support.servers import serve_app

pytestmark = pytest.mark.anyio

CALL_TIMEOUT = 60  # model inference on a busy 2-core machine


class CountingEmbedder:
    """The shared model, counting what it embeds (to see what a restart re-embedded)."""

    def __init__(self, model: MiniLMEmbedder) -> None:
        self._model = model
        self.texts: list[str] = []
        self.name = model.name
        self.dimension = model.dimension

    async def embed(self, texts: Sequence[str]) -> list[list[float]]:
        self.texts.extend(texts)
        return await self._model.embed(texts)

    async def aclose(self) -> None:
        return None


@pytest.fixture
def docs(tmp_path: Path) -> Path:
    root = tmp_path / "docs"
    (root / "ops").mkdir(parents=True)
    (root / "ops" / "timeouts.md").write_text(
        "---\ntags: [nginx]\n---\n# Proxy timeouts\n\nWhen the upstream does not answer within proxy_read_timeout "
        "(60 seconds by default), nginx returns 504 Gateway Timeout.\n"
    )
    (root / "kitchen.txt").write_text("Feed the sourdough starter flour and water twice a day.\n")
    (root / "errors.html").write_text(
        "<html><head><title>Payment errors</title></head><body><h1>Payment errors</h1>"
        "<p>PAY-4012 means the card was declined by the issuing bank.</p></body></html>"
    )
    return root


@asynccontextmanager
async def session(settings: RagSettings, embedder: Any, counter: WordPieceCounter) -> AsyncIterator[Client]:
    server = build_server(settings, embedder, counter=counter)
    async with serve_app(server.streamable_http_app()) as url, Client(f"{url}/mcp") as client:
        yield client


async def _call(client: Client, tool: str, arguments: dict[str, Any]) -> CallToolResult:
    with anyio.fail_after(CALL_TIMEOUT):
        return await client.call_tool(tool, arguments)


def _text(result: CallToolResult) -> str:
    block = result.content[0]
    assert isinstance(block, TextContent)
    return block.text


def _sources(result: CallToolResult) -> list[str]:
    assert result.structured_content is not None, _text(result)
    return [r["source"] for r in result.structured_content["results"]]


async def test_ingest_search_change_and_delete_across_restarts(
    docs: Path, tmp_path: Path, minilm: MiniLMEmbedder, wordpiece: WordPieceCounter
) -> None:
    settings = RagSettings(docs_paths=[docs], qdrant_path=str(tmp_path / "qdrant"))
    first, second, third = CountingEmbedder(minilm), CountingEmbedder(minilm), CountingEmbedder(minilm)
    timeout_question = {"queries": ["what does nginx answer when the backend is too slow?"], "top_k": 3}

    async with session(settings, first, wordpiece) as client:
        found = await _call(client, "search_documents", timeout_question)
        by_code = await _call(client, "search_documents", {"queries": ["PAY-4012"], "top_k": 1})
    (docs / "ops" / "timeouts.md").write_text(
        "# Proxy timeouts\n\nnginx now waits 300 seconds (proxy_read_timeout 300s) before it answers 504.\n"
    )
    async with session(settings, second, wordpiece) as client:
        changed = await _call(client, "search_documents", timeout_question)
        listed = await _call(client, "list_sources", {})
    (docs / "kitchen.txt").unlink()
    async with session(settings, third, wordpiece) as client:
        sourdough = await _call(client, "search_documents", {"queries": ["sourdough starter"], "top_k": 5})
        after_delete = await _call(client, "list_sources", {})

    assert _sources(found)[0] == "ops/timeouts.md"
    assert "60 seconds by default" in _text(found)
    assert _text(by_code).startswith("[1] errors.html — Payment errors")
    # The restart re-embedded the changed file only (and its queries), not the two unchanged ones.
    assert [text for text in second.texts if "sourdough" in text or "PAY-4012" in text] == []
    assert any("300 seconds" in text for text in second.texts)
    assert _sources(changed)[0] == "ops/timeouts.md"
    assert "300 seconds" in _text(changed)
    assert "60 seconds by default" not in _text(changed)
    assert listed.structured_content is not None
    assert listed.structured_content["total"] == 3
    assert "kitchen.txt" not in _sources(sourdough)
    assert after_delete.structured_content is not None
    assert [s["source"] for s in after_delete.structured_content["sources"]] == ["errors.html", "ops/timeouts.md"]
    assert third.texts == ["sourdough starter"]  # nothing re-embedded but the query


async def test_a_command_line_ingest_and_the_server_share_one_index(
    docs: Path, tmp_path: Path, minilm: MiniLMEmbedder, wordpiece: WordPieceCounter
) -> None:
    settings = RagSettings(docs_paths=[docs], qdrant_path=str(tmp_path / "qdrant"))
    (docs / "kitchen.txt").write_text("Bake the loaf at 250 degrees in a preheated Dutch oven.\n")

    report = await run_ingest(settings, [docs], embedder=minilm, counter=wordpiece)
    restarted = CountingEmbedder(minilm)
    async with session(settings, restarted, wordpiece) as client:
        result = await _call(client, "search_documents", {"queries": ["oven temperature for bread"], "top_k": 1})

    assert report.added == 3
    assert _sources(result) == ["kitchen.txt"]
    assert restarted.texts == ["oven temperature for bread"]  # the server found everything up to date


async def test_filters_list_sources_and_added_documents_with_the_real_model(
    docs: Path, minilm: MiniLMEmbedder, wordpiece: WordPieceCounter
) -> None:
    settings = RagSettings(docs_paths=[docs], qdrant_path=IN_MEMORY)
    note = {
        "source": "notes/oncall.md",
        "text": "# On-call\n\nPage the database team for replication lag.",
        "tags": ["oncall"],
    }

    async with session(settings, minilm, wordpiece) as client:
        in_ops = await _call(
            client, "search_documents", {"queries": ["card declined"], "filter": {"source_prefix": "ops/"}}
        )
        tagged = await _call(client, "search_documents", {"queries": ["timeouts"], "filter": {"tags": ["nginx"]}})
        added = await _call(client, "add_documents", {"documents": [note]})
        found = await _call(client, "search_documents", {"queries": ["who do I call about replica delay?"], "top_k": 1})
        listed = await _call(client, "list_sources", {"source_prefix": "notes"})
        too_long = await _call(client, "search_documents", {"queries": ["why " * 1000]})

    assert _sources(in_ops) == ["ops/timeouts.md"]
    assert _sources(tagged) == ["ops/timeouts.md"]
    assert not added.is_error
    assert _sources(found) == ["notes/oncall.md"]
    assert _text(listed) == "1 indexed document under 'notes':\n- notes/oncall.md — On-call (1 chunks; tags: oncall)"
    assert too_long.is_error
    assert "keep each query under 2000 characters" in _text(too_long)


async def test_an_empty_folder_gives_an_empty_index_that_says_so(
    tmp_path: Path, minilm: MiniLMEmbedder, wordpiece: WordPieceCounter
) -> None:
    (tmp_path / "empty").mkdir()
    settings = RagSettings(docs_paths=[tmp_path / "empty"], qdrant_path=IN_MEMORY)

    async with session(settings, minilm, wordpiece) as client:
        result = await _call(client, "search_documents", {"queries": ["anything at all"]})

    assert not result.is_error
    assert _text(result).startswith("No documents are indexed, so there is nothing to search.")
