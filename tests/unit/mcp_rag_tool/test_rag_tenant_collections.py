"""RAG_TENANT_COLLECTIONS: each tenant the gateway names in _meta["io.loopsuite/caller"] searches, lists and adds in a
collection of its own, through a real MCP session and a real Qdrant (local mode, on disk)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import anyio
import pytest
from mcp import Client
from mcp_types import CallToolResult, TextContent
from unit.mcp_rag_tool.rag_fakes import WordHashEmbedder, memory_settings

from mcp_rag_tool.server import build_server
from mcp_rag_tool.settings import RagSettings
from mcp_rag_tool.tokens import WordCounter
from suite_common.wire import CALLER_META_KEY

pytestmark = pytest.mark.anyio

BAKING = {"source": "baking.md", "text": "# Sourdough\n\nFeed the sourdough starter flour and water twice daily."}


@pytest.fixture
def shared_docs(tmp_path: Path) -> Path:
    folder = tmp_path / "docs"
    folder.mkdir()
    (folder / "eclipses.md").write_text("# Eclipses\n\nA solar eclipse happens when the moon hides the sun.\n")
    return folder


def _caller(tenant: str) -> dict[str, Any]:
    return {CALLER_META_KEY: {"tenant": tenant, "user": "u1", "role": "user", "runId": "run-1"}}


async def _call(client: Client, tool: str, arguments: dict[str, Any], tenant: str | None = None) -> CallToolResult:
    with anyio.fail_after(10):
        return await client.call_tool(tool, arguments, meta=_caller(tenant) if tenant else None)  # type: ignore[arg-type]


def _text(result: CallToolResult) -> str:
    block = result.content[0]
    assert isinstance(block, TextContent)
    return block.text


def _found(result: CallToolResult) -> list[str]:
    assert not result.is_error, _text(result)
    assert result.structured_content is not None
    return [hit["source"] for hit in result.structured_content["results"]]


def _on(shared_docs: Path, tmp_path: Path) -> RagSettings:
    return memory_settings(shared_docs, qdrant_path=str(tmp_path / "qdrant"), tenant_collections=True)


async def test_a_tenant_adds_to_and_searches_its_own_collection_and_no_other_tenant_sees_it(
    shared_docs: Path, tmp_path: Path
) -> None:
    server = build_server(_on(shared_docs, tmp_path), WordHashEmbedder(), counter=WordCounter())
    async with Client(server) as client:
        added = await _call(client, "add_documents", {"documents": [BAKING]}, tenant="acme")
        assert not added.is_error, _text(added)

        own = await _call(client, "search_documents", {"queries": ["sourdough starter"]}, tenant="acme")
        shared_topic = await _call(client, "search_documents", {"queries": ["solar eclipse moon"]}, tenant="acme")
        other = await _call(client, "search_documents", {"queries": ["sourdough starter"]}, tenant="globex")
        other_sources = await _call(client, "list_sources", {}, tenant="globex")
        own_sources = await _call(client, "list_sources", {}, tenant="acme")

    assert _found(own) == ["baking.md"]
    assert _found(shared_topic) == ["baking.md"]  # the shared collection (eclipses.md) is not searched
    assert _found(other) == []
    assert "No documents have been added to this tenant's collection yet" in _text(other)
    assert other_sources.structured_content is not None
    assert other_sources.structured_content["sources"] == []
    assert own_sources.structured_content is not None
    assert [s["source"] for s in own_sources.structured_content["sources"]] == ["baking.md"]


async def test_a_tenants_collection_is_kept_in_the_store_across_restarts(shared_docs: Path, tmp_path: Path) -> None:
    settings = _on(shared_docs, tmp_path)
    async with Client(build_server(settings, WordHashEmbedder(), counter=WordCounter())) as client:
        assert not (await _call(client, "add_documents", {"documents": [BAKING]}, tenant="Acme_Corp")).is_error

    async with Client(build_server(settings, WordHashEmbedder(), counter=WordCounter())) as client:
        found = await _call(client, "search_documents", {"queries": ["sourdough"]}, tenant="Acme_Corp")

    assert _found(found) == ["baking.md"]


@pytest.mark.parametrize(
    ("tool", "arguments"),
    [
        ("search_documents", {"queries": ["eclipse"]}),
        ("list_sources", {}),
        ("add_documents", {"documents": [BAKING]}),
    ],
)
async def test_a_call_that_names_no_tenant_is_refused_when_collections_are_per_tenant(
    shared_docs: Path, tmp_path: Path, tool: str, arguments: dict[str, Any]
) -> None:
    server = build_server(_on(shared_docs, tmp_path), WordHashEmbedder(), counter=WordCounter())
    async with Client(server) as client:
        result = await _call(client, tool, arguments)

    assert result.is_error
    assert "does not say which tenant it acts for" in _text(result)
    assert CALLER_META_KEY in _text(result)


async def test_without_the_setting_every_caller_shares_one_collection_whatever_its_meta(shared_docs: Path) -> None:
    server = build_server(memory_settings(shared_docs), WordHashEmbedder(), counter=WordCounter())
    async with Client(server) as client:
        assert not (await _call(client, "add_documents", {"documents": [BAKING]}, tenant="acme")).is_error
        anonymous = await _call(client, "search_documents", {"queries": ["sourdough starter"]})
        other = await _call(client, "search_documents", {"queries": ["solar eclipse"]}, tenant="globex")

    assert _found(anonymous)[0] == "baking.md"
    assert _found(other)[0] == "eclipses.md"


def test_tenant_collection_names_are_readable_when_safe_and_never_shared_by_two_tenants() -> None:
    settings = memory_settings()

    assert settings.tenant_collection("acme") == "documents__acme"
    names = {settings.tenant_collection(t) for t in ("acme", "Acme", "acme_x", "acme.x", "x_sources", "../etc")}
    assert len(names) == 6
    for name in names - {"documents__acme"}:
        assert name.startswith("documents__t.")
        assert set(name[len("documents__t.") :]) <= set("0123456789abcdef")
