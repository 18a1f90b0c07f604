"""mcp-rag-tool as users run it: `python -m mcp_rag_tool` over real stdio and real streamable HTTP,
with the bundled all-MiniLM-L6-v2 and Qdrant local mode persisted in a folder.

Each transport gets one server process for the whole module (loading torch and the model takes
seconds); the HTTP one is started first so that both load at the same time.
"""

from __future__ import annotations

import subprocess
import sys
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import anyio
import httpx
import pytest
from anyio.abc import Process
from anyio.streams.text import TextReceiveStream
from mcp import Client
from mcp.client.session import IncomingMessage
from mcp.client.stdio import StdioServerParameters, get_default_environment
from mcp_types import CallToolResult, TextContent

from support.servers import free_port

pytestmark = pytest.mark.anyio

SEARCH_TIMEOUT = 90  # the first search waits for torch, the model and the ingest on a busy machine

DOCS = {
    "baking/sourdough.md": """# Sourdough bread

## Keeping a starter

Feed the sourdough starter equal weights of flour and water once or twice a day. A healthy
starter doubles in size within four to eight hours of a feeding and smells pleasantly sour.

## Baking

Bake the loaf in a preheated Dutch oven at 250 °C, lid on for twenty minutes, then lid off.
""",
    "space/eclipses.md": """# Eclipses

A solar eclipse happens when the Moon passes between the Earth and the Sun and casts its shadow
on the Earth. A lunar eclipse happens when the Earth's shadow falls on the full Moon.
""",
    "networking.md": """# TCP

## Opening a connection

A TCP connection opens with a three-way handshake: the client sends SYN, the server answers
SYN-ACK, and the client confirms with ACK.

```text
client -> SYN -> server
client <- SYN-ACK <- server
client -> ACK -> server
```
""",
    "garden.txt": "Water tomato plants deeply at the base in the morning, and mulch them to keep the soil moist.\n",
}


@pytest.fixture(scope="module")
def docs_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("rag-docs")
    for relative, text in DOCS.items():
        (root / relative).parent.mkdir(parents=True, exist_ok=True)
        (root / relative).write_text(text)
    return root


def _server_env(docs_dir: Path, data_dir: Path) -> dict[str, str]:
    """Each server process gets its own store: Qdrant local mode lets one process at a time open a folder."""
    return {"RAG_DOCS_PATHS": str(docs_dir), "RAG_QDRANT_PATH": str(data_dir), "RAG_LOG_FORMAT": "console"}


@dataclass
class HttpServer:
    """`python -m mcp_rag_tool --transport streamable-http`, followed through its log on stderr."""

    port: int
    listening: anyio.Event = field(default_factory=anyio.Event)
    started: bool = False

    async def base_url(self) -> str:
        with anyio.fail_after(30):
            await self.listening.wait()
        assert self.started, "the HTTP server exited before listening (see its log above)"
        return f"http://127.0.0.1:{self.port}"

    async def follow(self, lines: AsyncIterator[str]) -> None:
        """Copy the server's log to ours (a full pipe would block it) and note when it listens."""
        async for line in lines:
            sys.stderr.write(line)
            if "Uvicorn running on" in line:
                self.started = True
                self.listening.set()
        self.listening.set()


@pytest.fixture(scope="module")
async def http_server(docs_dir: Path, tmp_path_factory: pytest.TempPathFactory) -> AsyncIterator[HttpServer]:
    """Started first, without waiting for it, so that it loads the model while the stdio tests run."""
    server = HttpServer(port=free_port())
    command = [sys.executable, "-m", "mcp_rag_tool", "--transport", "streamable-http", "--port", str(server.port)]
    env = get_default_environment() | _server_env(docs_dir, tmp_path_factory.mktemp("http-qdrant"))
    async with await anyio.open_process(command, env=env, stdout=None, stderr=subprocess.PIPE) as process:
        assert process.stderr is not None
        try:
            async with anyio.create_task_group() as tasks:
                tasks.start_soon(server.follow, _lines(TextReceiveStream(process.stderr)))
                yield server
                tasks.cancel_scope.cancel()
        finally:
            await _stop(process)


@dataclass
class StdioSession:
    client: Client
    transport_errors: list[Exception] = field(default_factory=list)


@pytest.fixture(scope="module")
async def stdio(
    docs_dir: Path, http_server: HttpServer, tmp_path_factory: pytest.TempPathFactory
) -> AsyncIterator[StdioSession]:
    """One MCP session with `python -m mcp_rag_tool` over stdio (``http_server`` only to start that first)."""
    transport_errors: list[Exception] = []

    async def record(message: IncomingMessage) -> None:
        if isinstance(message, Exception):  # e.g. a stdout line that is not JSON-RPC
            transport_errors.append(message)

    env = _server_env(docs_dir, tmp_path_factory.mktemp("stdio-qdrant"))
    params = StdioServerParameters(command=sys.executable, args=["-m", "mcp_rag_tool"], env=env)
    # read_timeout_seconds bounds the handshake (a cancel scope cannot wrap entering the client).
    async with Client(params, message_handler=record, read_timeout_seconds=30) as client:
        yield StdioSession(client, transport_errors)


async def _search(client: Client, arguments: dict[str, Any], tool: str = "search_documents") -> CallToolResult:
    return await client.call_tool(tool, arguments, read_timeout_seconds=SEARCH_TIMEOUT)


def _text(result: CallToolResult) -> str:
    block = result.content[0]
    assert isinstance(block, TextContent)
    return block.text


async def test_stdio_lists_the_tools_with_input_and_output_schemas(stdio: StdioSession) -> None:
    with anyio.fail_after(10):  # answered at once, while the model is still loading
        listed = await stdio.client.list_tools()

    assert sorted(tool.name for tool in listed.tools) == ["add_documents", "list_sources", "search_documents"]
    tool = next(tool for tool in listed.tools if tool.name == "search_documents")
    assert tool.description is not None
    assert "cite the source" in tool.description.lower()
    assert tool.input_schema["required"] == ["queries"]
    # A list of queries, or one query as a plain string: the schema says both, so a gateway that
    # validates arguments passes a lone string on.
    assert [branch["type"] for branch in tool.input_schema["properties"]["queries"]["anyOf"]] == ["array", "string"]
    assert tool.output_schema is not None
    assert tool.output_schema["required"] == ["results"]


async def test_stdio_search_puts_the_document_that_answers_first(stdio: StdioSession) -> None:
    result = await _search(stdio.client, {"queries": ["How often should I feed my sourdough starter?"], "top_k": 3})

    assert not result.is_error, _text(result)
    assert _text(result).startswith("[1] baking/sourdough.md — Sourdough bread > Keeping a starter (score ")
    assert "Feed the sourdough starter" in _text(result)
    assert result.structured_content is not None
    results = result.structured_content["results"]
    assert len(results) == 3
    assert results[0]["source"] == "baking/sourdough.md"
    assert results[0]["title"] == "Sourdough bread"
    assert results[0]["score"] > 0.4
    assert results[0]["score"] >= results[1]["score"] >= results[2]["score"]


async def test_stdio_several_queries_find_each_topic_once(stdio: StdioSession) -> None:
    result = await _search(
        stdio.client, {"queries": ["why does the moon cast a shadow on earth", "TCP three-way handshake"], "top_k": 2}
    )

    assert result.structured_content is not None
    sources = [r["source"] for r in result.structured_content["results"]]
    assert sorted(sources) == ["networking.md", "space/eclipses.md"]
    handshake = next(r for r in result.structured_content["results"] if r["source"] == "networking.md")
    assert "client -> SYN -> server" in handshake["text"]  # the code fence came along with its section


@pytest.mark.parametrize(
    ("arguments", "expected"),
    [
        ({"queries": []}, "queries is empty: pass at least one question or phrase"),
        ({"queries": ["x" * 2001]}, "keep each query under 2000 characters"),
        ({"queries": ["tomatoes"], "top_k": 0}, "top_k must be between 1 and 50 (got 0)"),
        ({"queries": ["tomatoes"], "filter": {"colour": "red"}}, "filter has unknown keys 'colour'"),
    ],
)
async def test_stdio_bad_input_is_an_error_saying_what_to_change(
    stdio: StdioSession, arguments: dict[str, Any], expected: str
) -> None:
    result = await _search(stdio.client, arguments)

    assert result.is_error
    assert expected in _text(result)


async def test_stdio_filters_lists_and_adds_documents(stdio: StdioSession) -> None:
    in_space = await _search(stdio.client, {"queries": ["shadow"], "filter": {"source_prefix": "space/"}})
    listed = await _search(stdio.client, {}, tool="list_sources")
    note = {"source": "notes/compost.md", "text": "# Compost\n\nTurn the compost heap every two weeks."}
    added = await _search(stdio.client, {"documents": [note]}, tool="add_documents")
    found = await _search(stdio.client, {"queries": ["how often should the compost pile be turned?"], "top_k": 1})

    assert in_space.structured_content is not None
    assert [r["source"] for r in in_space.structured_content["results"]] == ["space/eclipses.md"]
    assert _text(listed).splitlines() == [
        "4 indexed documents:",
        "- baking/sourdough.md — Sourdough bread (2 chunks)",
        "- garden.txt — garden.txt (1 chunks)",
        "- networking.md — TCP (1 chunks)",
        "- space/eclipses.md — Eclipses (1 chunks)",
    ]
    assert not added.is_error, _text(added)
    assert _text(found).startswith("[1] notes/compost.md — Compost (score")


async def test_stdio_stdout_carries_nothing_but_protocol(stdio: StdioSession) -> None:
    result = await _search(stdio.client, {"queries": ["watering tomatoes"], "top_k": 1})  # model loaded, ingest done

    assert _text(result).startswith("[1] garden.txt — garden.txt (score")
    assert stdio.transport_errors == []


async def test_streamable_http_serves_search_and_health(http_server: HttpServer) -> None:
    http_url = await http_server.base_url()
    async with httpx.AsyncClient(base_url=http_url, timeout=10) as http:
        health = await http.get("/healthz")
        async with Client(f"{http_url}/mcp") as client:
            result = await _search(client, {"queries": ["When does a lunar eclipse happen?"], "top_k": 2})
            refused = await _search(client, {"queries": ["eclipse"], "top_k": 99})
            listed = await _search(client, {"source_prefix": "baking"}, tool="list_sources")
        ready = await http.get("/readyz")

    assert (health.status_code, health.json()) == (200, {"status": "ok"})
    assert not result.is_error, _text(result)
    assert _text(result).startswith("[1] space/eclipses.md — Eclipses (score ")
    assert result.structured_content is not None
    assert result.structured_content["results"][0]["source"] == "space/eclipses.md"
    assert refused.is_error
    assert "top_k must be between 1 and 50 (got 99)" in _text(refused)
    assert listed.structured_content is not None
    assert [s["source"] for s in listed.structured_content["sources"]] == ["baking/sourdough.md"]
    assert (ready.status_code, ready.json()["checks"]) == (200, {"index": "ok"})


async def _lines(stream: TextReceiveStream) -> AsyncIterator[str]:
    pending = ""
    async for piece in stream:
        pending += piece
        *complete, pending = pending.split("\n")
        for line in complete:
            yield line + "\n"
    if pending:
        yield pending


async def _stop(process: Process) -> None:
    if process.returncode is None:
        process.terminate()
        with anyio.move_on_after(10):
            await process.wait()
        if process.returncode is None:
            process.kill()
            await process.wait()
