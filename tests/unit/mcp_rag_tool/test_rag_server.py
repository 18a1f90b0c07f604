"""The server's tools and their errors, through a real MCP client and a real Qdrant (in memory or on disk).

The embedding model is swapped for a bag-of-words embedder here so these run in milliseconds;
tests/integration/mcp_rag_tool runs the same paths with all-MiniLM-L6-v2 over stdio and HTTP.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import anyio
import httpx
import pytest
from mcp import Client
from mcp.server.mcpserver import MCPServer
from mcp.server.mcpserver.exceptions import ToolError
from mcp_types import CallToolResult, TextContent
from structlog.testing import capture_logs
from unit.mcp_rag_tool.rag_fakes import FailingEmbedder, StuckEmbedder, WordHashEmbedder, memory_settings

from mcp_rag_tool.embeddings import Embedder
from mcp_rag_tool.index import DocumentIndex
from mcp_rag_tool.server import add_documents_tool, build_server, list_sources_tool, search_documents_tool
from mcp_rag_tool.settings import RagSettings
from mcp_rag_tool.sources import NewDocument
from mcp_rag_tool.store import VectorStore
from mcp_rag_tool.tokens import WordCounter
from support.servers import serve_app

pytestmark = pytest.mark.anyio


@pytest.fixture
def docs(tmp_path: Path) -> Path:
    folder = tmp_path / "docs"
    (folder / "kitchen").mkdir(parents=True)
    (folder / "kitchen" / "baking.md").write_text(
        "---\ntags: [food]\n---\n# Sourdough baking\n\n## Starter\n\nFeed the sourdough starter flour and water "
        "twice daily; a healthy starter doubles within hours.\n"
    )
    (folder / "astronomy.md").write_text(
        "# Eclipses\n\nA solar eclipse happens when the moon passes between the earth and the sun.\n"
    )
    return folder


def _server(settings: RagSettings, embedder: Embedder | None = None) -> MCPServer[DocumentIndex]:
    return build_server(settings, embedder or WordHashEmbedder(), counter=WordCounter())


def _text(result: CallToolResult) -> str:
    block = result.content[0]
    assert isinstance(block, TextContent)
    return block.text


async def _call(client: Client, tool: str, arguments: dict[str, Any]) -> CallToolResult:
    with anyio.fail_after(10):
        return await client.call_tool(tool, arguments)


def _sources(result: CallToolResult) -> list[str]:
    assert result.structured_content is not None
    return [r["source"] for r in result.structured_content["results"]]


async def test_the_three_tools_are_listed_with_input_and_output_schemas(docs: Path) -> None:
    async with Client(_server(memory_settings(docs))) as client:
        listed = await client.list_tools()

    tools = {tool.name: tool for tool in listed.tools}
    assert sorted(tools) == ["add_documents", "list_sources", "search_documents"]
    search = tools["search_documents"]
    assert search.input_schema["required"] == ["queries"]
    assert search.input_schema["properties"]["filter"]["properties"].keys() == {"source_prefix", "tags"}
    assert search.output_schema is not None
    assert search.output_schema["required"] == ["results"]
    assert all(tool.output_schema is not None for tool in tools.values())


async def test_add_documents_can_be_turned_off(docs: Path) -> None:
    async with Client(_server(memory_settings(docs, add_documents_enabled=False))) as client:
        listed = await client.list_tools()

    assert sorted(tool.name for tool in listed.tools) == ["list_sources", "search_documents"]


async def test_the_document_that_answers_comes_first_as_numbered_text_and_structured_content(docs: Path) -> None:
    async with Client(_server(memory_settings(docs))) as client:
        result = await _call(client, "search_documents", {"queries": ["how often to feed a sourdough starter"]})

    assert not result.is_error
    assert _text(result).startswith("[1] kitchen/baking.md — Sourdough baking > Starter (score ")
    assert "Feed the sourdough starter" in _text(result)
    assert result.structured_content is not None
    first = result.structured_content["results"][0]
    assert (first["source"], first["title"], first["heading"], first["tags"]) == (
        "kitchen/baking.md",
        "Sourdough baking",
        "Sourdough baking > Starter",
        ["food"],
    )
    assert 0 < first["score"] <= 1


async def test_several_queries_each_find_their_document_once(docs: Path) -> None:
    async with Client(_server(memory_settings(docs))) as client:
        result = await _call(
            client, "search_documents", {"queries": ["solar eclipse moon", "sourdough starter"], "top_k": 5}
        )

    assert sorted(_sources(result)) == ["astronomy.md", "kitchen/baking.md"]


async def test_a_single_query_string_is_taken_as_a_list_of_one(docs: Path) -> None:
    async with Client(_server(memory_settings(docs))) as client:
        result = await _call(client, "search_documents", {"queries": "solar eclipse", "top_k": 1})

    assert not result.is_error
    assert _text(result).startswith("[1] astronomy.md — Eclipses")


async def test_filters_narrow_the_search_by_folder_and_by_tag(docs: Path) -> None:
    async with Client(_server(memory_settings(docs))) as client:
        by_folder = await _call(
            client, "search_documents", {"queries": ["eclipse"], "filter": {"source_prefix": "kitchen"}}
        )
        by_file = await _call(
            client, "search_documents", {"queries": ["eclipse"], "filter": {"source_prefix": "astronomy.md"}}
        )
        by_tag = await _call(client, "search_documents", {"queries": ["eclipse"], "filter": {"tags": ["FOOD"]}})
        nothing = await _call(client, "search_documents", {"queries": ["eclipse"], "filter": {"source_prefix": "kit"}})

    assert _sources(by_folder) == ["kitchen/baking.md"]
    assert _sources(by_file) == ["astronomy.md"]
    assert _sources(by_tag) == ["kitchen/baking.md"]
    assert not nothing.is_error
    assert _text(nothing).startswith("No indexed document matches the filter (source_prefix 'kit').")


@pytest.mark.parametrize(
    ("arguments", "expected"),
    [
        ({"queries": ["eclipse"], "top_k": 500}, "top_k must be between 1 and 50 (got 500)"),
        ({"queries": ["eclipse", " "]}, "queries[1] is empty"),
        ({"queries": ["x" * 5000]}, "queries[0] is 5000 characters long; keep each query under 2000"),
        ({"queries": [f"q{i}" for i in range(12)]}, "queries has 12 items; pass at most 10"),
        ({"queries": ["eclipse"], "filter": {"path": "a"}}, "filter has unknown keys 'path'"),
        ({"queries": ["eclipse"], "filter": "astronomy"}, "filter must be an object"),
    ],
)
async def test_bad_input_is_an_error_result_telling_the_model_what_to_change(
    docs: Path, arguments: dict[str, Any], expected: str
) -> None:
    async with Client(_server(memory_settings(docs))) as client:
        result = await _call(client, "search_documents", arguments)
        still_fine = await _call(client, "search_documents", {"queries": ["eclipse"]})

    assert result.is_error
    assert expected in _text(result)
    assert not still_fine.is_error


async def test_an_empty_index_says_so_and_names_the_configured_paths(tmp_path: Path) -> None:
    empty = tmp_path / "empty"
    empty.mkdir()
    settings = memory_settings(docs_paths=[empty, tmp_path / "missing"])

    async with Client(_server(settings)) as client:
        result = await _call(client, "search_documents", {"queries": ["anything"]})
        listed = await _call(client, "list_sources", {})

    assert not result.is_error
    assert "No documents are indexed" in _text(result)
    assert f"{empty}, {tmp_path / 'missing'} (not found)" in _text(result)
    assert result.structured_content == {"results": []}
    assert _text(listed) == "No documents are indexed."


async def test_list_sources_shows_each_document_with_title_tags_and_chunks(docs: Path) -> None:
    async with Client(_server(memory_settings(docs))) as client:
        everything = await _call(client, "list_sources", {})
        kitchen = await _call(client, "list_sources", {"source_prefix": "kitchen/"})
        first = await _call(client, "list_sources", {"limit": 1})
        refused = await _call(client, "list_sources", {"limit": 0})

    assert _text(everything) == (
        "2 indexed documents:\n- astronomy.md — Eclipses (1 chunks)\n- kitchen/baking.md — Sourdough baking "
        "(1 chunks; tags: food)"
    )
    assert everything.structured_content is not None
    assert everything.structured_content["total"] == 2
    baking = everything.structured_content["sources"][1]
    assert (baking["source"], baking["kind"], baking["tags"], baking["origin"]) == (
        "kitchen/baking.md",
        "markdown",
        ["food"],
        f"folder:{await anyio.Path(docs).resolve()}",
    )
    assert kitchen.structured_content is not None
    assert [s["source"] for s in kitchen.structured_content["sources"]] == ["kitchen/baking.md"]
    assert _text(first).endswith("... and 1 more; pass a source_prefix or a higher limit.")
    assert refused.is_error
    assert "limit must be between 1 and 1000 (got 0)" in _text(refused)


async def test_added_documents_are_searchable_at_once_and_replaced_by_source(docs: Path) -> None:
    note = {
        "source": "notes/wifi.md",
        "text": "# Office wifi\n\nThe guest wifi password rotates monthly.",
        "tags": ["IT"],
    }

    async with Client(_server(memory_settings(docs))) as client:
        added = await _call(client, "add_documents", {"documents": [note]})
        again = await _call(client, "add_documents", {"documents": [note]})
        replaced = await _call(
            client,
            "add_documents",
            {"documents": [{**note, "text": "# Office wifi\n\nThe guest wifi password rotates weekly."}]},
        )
        found = await _call(
            client, "search_documents", {"queries": ["guest wifi password"], "filter": {"tags": ["it"]}}
        )

    assert _text(added) == "Indexed 1 passage (added: notes/wifi.md). They can be searched now with search_documents."
    assert added.structured_content == {"added": ["notes/wifi.md"], "updated": [], "unchanged": [], "chunks": 1}
    assert again.structured_content == {"added": [], "updated": [], "unchanged": ["notes/wifi.md"], "chunks": 0}
    assert replaced.structured_content is not None
    assert replaced.structured_content["updated"] == ["notes/wifi.md"]
    assert _sources(found) == ["notes/wifi.md"]
    assert "rotates weekly" in _text(found)


@pytest.mark.parametrize(
    ("documents", "expected"),
    [
        ([], "documents is empty"),
        ([{"source": "astronomy.md", "text": "hijack"}], "is a file ingested from a folder"),
        ([{"source": " ", "text": "x"}], "documents[0].source must be a non-empty name"),
        ([{"source": "a.md", "text": "  "}], "documents[0].text is empty"),
        ([{"source": "a.md", "text": "x"}, {"source": "a.md", "text": "y"}], "appears twice"),
        ([{"source": "a.md", "text": "x" * 500_001}], "split it into documents of at most 500000 characters"),
        ([{"source": f"n{i}.md", "text": "x"} for i in range(51)], "pass at most 50 per call"),
    ],
)
async def test_bad_documents_are_refused_with_what_to_change(
    docs: Path, documents: list[dict[str, Any]], expected: str
) -> None:
    async with Client(_server(memory_settings(docs))) as client:
        result = await _call(client, "add_documents", {"documents": documents})
        listed = await _call(client, "list_sources", {})

    assert result.is_error
    assert expected in _text(result)
    assert listed.structured_content is not None
    assert listed.structured_content["total"] == 2  # nothing was added


async def test_a_failed_build_makes_every_call_an_error_with_the_reason(docs: Path) -> None:
    async with Client(_server(memory_settings(docs), FailingEmbedder())) as client:
        results = [await _call(client, "search_documents", {"queries": ["eclipse"]}) for _ in range(2)]
        listed = await _call(client, "list_sources", {})

    for result in [*results, listed]:
        assert result.is_error
        assert "building the index failed (RuntimeError: embedding backend exploded)" in _text(result)


async def test_a_call_waits_for_the_index_no_longer_than_configured(docs: Path) -> None:
    settings = memory_settings(docs, index_ready_timeout_seconds=0.2)

    async with Client(_server(settings, StuckEmbedder())) as client:
        result = await _call(client, "search_documents", {"queries": ["eclipse"]})

    assert result.is_error
    assert "still being built" in _text(result)
    assert "Try the same call again" in _text(result)


async def test_a_restart_on_a_persisted_index_forgets_removed_documents(docs: Path, tmp_path: Path) -> None:
    settings = RagSettings(docs_paths=[docs], qdrant_path=str(tmp_path / "qdrant"))
    query = {"queries": ["solar eclipse moon"], "top_k": 5}

    async with Client(_server(settings)) as client:
        before = await _call(client, "search_documents", query)
    (docs / "astronomy.md").unlink()
    async with Client(_server(settings)) as client:
        after = await _call(client, "search_documents", query)

    assert set(_sources(before)) == {"astronomy.md", "kitchen/baking.md"}
    assert _sources(after) == ["kitchen/baking.md"]


async def test_a_server_configured_for_other_folders_drops_the_old_ones(docs: Path, tmp_path: Path) -> None:
    other = tmp_path / "other"
    other.mkdir()
    (other / "tides.md").write_text("# Tides\n\nThe moon's pull raises the tides twice a day.")
    store = str(tmp_path / "qdrant")

    async with Client(_server(RagSettings(docs_paths=[docs], qdrant_path=store))) as client:
        before = await _call(client, "list_sources", {})
    async with Client(_server(RagSettings(docs_paths=[other], qdrant_path=store))) as client:
        after = await _call(client, "list_sources", {})

    assert before.structured_content is not None
    assert before.structured_content["total"] == 2
    assert after.structured_content is not None
    assert [s["source"] for s in after.structured_content["sources"]] == ["tides.md"]


async def test_without_configured_folders_the_server_serves_what_the_cli_ingested(docs: Path, tmp_path: Path) -> None:
    from mcp_rag_tool.cli import run_ingest

    settings = RagSettings(docs_paths=[], qdrant_path=str(tmp_path / "qdrant"))
    await run_ingest(settings, [docs], embedder=WordHashEmbedder(), counter=WordCounter())

    async with Client(_server(settings)) as client:
        result = await _call(client, "search_documents", {"queries": ["solar eclipse"], "top_k": 1})

    assert _sources(result) == ["astronomy.md"]


async def test_a_locked_store_folder_falls_back_to_memory_and_still_serves(docs: Path, tmp_path: Path) -> None:
    settings = RagSettings(docs_paths=[docs], qdrant_path=str(tmp_path / "qdrant"))
    holder = await VectorStore.open(settings)  # another process, as far as Qdrant's lock is concerned
    try:
        with capture_logs() as logs:
            async with Client(_server(settings)) as client:
                result = await _call(client, "search_documents", {"queries": ["solar eclipse"]})
    finally:
        await holder.close()

    assert _sources(result)[0] == "astronomy.md"
    assert any(entry["event"] == "qdrant_path_locked_using_memory" for entry in logs)


async def test_readyz_reports_a_failed_index_while_healthz_stays_ok(docs: Path) -> None:
    server = _server(memory_settings(docs), FailingEmbedder())

    async with serve_app(server.streamable_http_app()) as url, httpx.AsyncClient(base_url=url, timeout=5) as http:
        async with Client(f"{url}/mcp") as client:  # a search returns once the build is over
            await _call(client, "search_documents", {"queries": ["eclipse"]})
        health = await http.get("/healthz")
        ready = await http.get("/readyz")

    assert (health.status_code, health.json()) == (200, {"status": "ok"})
    assert ready.status_code == 503
    assert ready.json()["checks"]["index"] == "failed: RuntimeError: embedding backend exploded"


async def test_the_published_schema_accepts_a_lone_query_string_as_the_gateway_validates_it(docs: Path) -> None:
    # The gateway checks arguments against inputSchema before calling; an array-only schema made it
    # refuse {"queries": "one string"}, which the README promises and the handler accepts.
    from mcp_client_service.calls.validation import SchemaValidators

    async with Client(_server(memory_settings(docs))) as client:
        listed = await client.list_tools()
        schema = next(tool for tool in listed.tools if tool.name == "search_documents").input_schema
        validators = SchemaValidators()
        key = ("rag", "search_documents")
        assert validators.check(key, schema, {"queries": "solar eclipse"}) == []
        assert validators.check(key, schema, {"queries": ["solar eclipse", "moon"]}) == []
        assert validators.check(key, schema, {"queries": 7}) != []
        result = await _call(client, "search_documents", {"queries": "solar eclipse", "top_k": 1})

    assert not result.is_error
    assert _sources(result) == ["astronomy.md"]


async def test_add_documents_reports_progress_to_a_caller_that_asks_for_it(docs: Path) -> None:
    heard: list[tuple[float, float | None, str | None]] = []

    async def on_progress(progress: float, total: float | None, message: str | None) -> None:
        heard.append((progress, total, message))

    notes = [{"source": f"notes/{n}.md", "text": f"# Note {n}\n\nThe kettle number {n} boils water."} for n in range(3)]
    async with Client(_server(memory_settings(docs))) as client:
        with anyio.fail_after(10):
            result = await client.call_tool("add_documents", {"documents": notes}, progress_callback=on_progress)

    assert not result.is_error
    assert heard, "no progress notification arrived"
    assert heard[-1][:2] == (3, 3)
    assert heard[-1][2] == "3/3 documents, 3 chunks"
    assert [p for p, _, _ in heard] == sorted({p for p, _, _ in heard})  # strictly increasing, as MCP requires


async def test_the_tool_functions_answer_without_an_mcp_session(docs: Path) -> None:
    settings = memory_settings(docs)
    index = DocumentIndex(settings, embedder=WordHashEmbedder(), counter=WordCounter())
    heard: list[tuple[float, float | None, str | None]] = []

    async def on_progress(progress: float, total: float | None, message: str | None) -> None:
        heard.append((progress, total, message))

    note = NewDocument(source="notes/kettle.md", text="# Kettle\n\nThe kettle boils water for the tea.")
    with anyio.fail_after(10):
        async with index.serving():
            added = await add_documents_tool(index, [note], on_progress)
            found = await search_documents_tool(index, settings, ["kettle boils water"], 1, {"source_prefix": "notes/"})
            listed = await list_sources_tool(index, " /kitchen/", 10)
            with pytest.raises(ToolError, match=r"limit must be between 1 and 1000 \(got 0\)"):
                await list_sources_tool(index, None, 0)
            with pytest.raises(ToolError, match="queries is empty"):
                await search_documents_tool(index, settings, [], 5, None)

    assert not added.is_error
    assert heard[-1][:2] == (1, 1)
    assert _sources(found) == ["notes/kettle.md"]
    assert listed.structured_content is not None
    assert [s["source"] for s in listed.structured_content["sources"]] == ["kitchen/baking.md"]
