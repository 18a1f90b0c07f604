"""The peer arm's process: LangGraph's prebuilt ReAct agent with the official PostgreSQL checkpointer (sync).

Run by ``bench/peers.py`` with the interpreter of the peers' own virtual environment
(``.data/bench/peers-venv``, from ``requirements-bench-peers.txt``; never the suite's), so that none of
these packages is needed by the suite, its tests or the rest of ``make bench``. It builds what a user of
that stack would write for the bench's run:

- ``langgraph.prebuilt.create_react_agent`` over ``langchain_openai.ChatOpenAI`` pointed at the bench's fake
  LLM (Chat Completions, not streamed);
- the echo MCP server over stdio (the same server, started with the same command, as the suite's
  mcp-client-service runs), its tool listed and called with the MCP SDK's client, the same SDK and version the
  suite uses; the session lives on an event loop of its own thread and the tool is a plain (sync) LangChain
  tool over it, since the sync checkpointer needs ``invoke``;
- ``langgraph.checkpoint.postgres.PostgresSaver.from_conn_string`` on a database of its own (``setup()`` once),
  every step of every run checkpointed there; each run a new ``thread_id``.

Protocol, one line each way per run: the bench writes the run's user message (a JSON string) on stdin; the
process answers ``ok`` once ``invoke`` returned a run that made its tool calls and ended with the fake LLM's
answer, or ``error: <why>``. Before the first run it prints one JSON line, ``{"ready": ...}``, with its
packages' versions. It ends at the end of its input.
"""

from __future__ import annotations

import argparse
import asyncio
import importlib.metadata
import json
import sys
import threading
import uuid
import warnings
from collections.abc import Coroutine
from typing import Any, TypeVar

from langchain_core.messages import AIMessage, ToolMessage
from langchain_core.tools import StructuredTool
from langchain_openai import ChatOpenAI
from langgraph.checkpoint.postgres import PostgresSaver
from mcp import Client, StdioServerParameters
from mcp_types import TextContent

__all__ = ["main"]

PACKAGES = ("langgraph", "langgraph-prebuilt", "langgraph-checkpoint-postgres", "langchain-openai", "psycopg", "mcp")
_CALL_TIMEOUT_SECONDS = 30.0
_T = TypeVar("_T")


class _McpOnItsOwnLoop:
    """An MCP client session kept open on an event loop in a thread of its own, callable from sync code. The
    session is entered and left by one task (``_hold``), as anyio's cancel scopes require."""

    def __init__(self, server: StdioServerParameters) -> None:
        self._loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self._loop.run_forever, name="mcp-loop", daemon=True)
        self._thread.start()
        self._opened = threading.Event()
        self._stop = asyncio.Event()
        self._held = asyncio.run_coroutine_threadsafe(self._hold(server), self._loop)
        while not self._opened.wait(0.05):
            if self._held.done():
                self._held.result()  # raises why the session did not open
        self.client: Client = self._client

    async def _hold(self, server: StdioServerParameters) -> None:
        # cache=None: every call a real round trip, as the suite's own client makes them.
        async with Client(server, cache=None) as client:
            self._client = client
            self._opened.set()
            await self._stop.wait()

    def wait(self, coroutine: Coroutine[Any, Any, _T]) -> _T:
        return asyncio.run_coroutine_threadsafe(coroutine, self._loop).result(_CALL_TIMEOUT_SECONDS)

    def close(self) -> None:
        self._loop.call_soon_threadsafe(self._stop.set)
        self._held.result(_CALL_TIMEOUT_SECONDS)
        self._loop.call_soon_threadsafe(self._loop.stop)
        self._thread.join(timeout=_CALL_TIMEOUT_SECONDS)


def _tool(mcp: _McpOnItsOwnLoop, name: str) -> StructuredTool:
    """The MCP server's tool ``name`` as a sync LangChain tool (its JSON schema as the arguments' schema)."""
    listed = {tool.name: tool for tool in mcp.wait(mcp.client.list_tools()).tools}
    if name not in listed:
        raise SystemExit(f"the echo server lists no tool {name!r}: {sorted(listed)}")
    definition = listed[name]

    def call(**arguments: Any) -> str:
        result = mcp.wait(mcp.client.call_tool(name, arguments))
        text = "\n".join(part.text for part in result.content if isinstance(part, TextContent))
        if result.is_error:
            raise RuntimeError(text)
        return text

    return StructuredTool.from_function(
        func=call, name=name, description=definition.description or name, args_schema=definition.input_schema
    )


def _checked(result: dict[str, Any], rounds: int) -> str | None:
    """Why ``result`` is not the run the fake LLM scripts (``rounds`` tool results, then its answer), or None."""
    messages = result.get("messages", [])
    tool_results = sum(1 for message in messages if isinstance(message, ToolMessage))
    last = messages[-1] if messages else None
    if tool_results != rounds:
        return f"{tool_results} tool results, not {rounds}"
    if not isinstance(last, AIMessage) or last.tool_calls or not last.content:
        return f"the run did not end with an answer: {last!r:.200}"
    return None


def _versions() -> dict[str, str]:
    return {package: importlib.metadata.version(package) for package in PACKAGES}


def main() -> None:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--llm-url", required=True, help="the fake LLM's base URL, ending in /v1")
    parser.add_argument("--model", required=True, help="the fake LLM's script, e.g. rounds-3-fresh")
    parser.add_argument("--rounds", type=int, required=True, help="tool results a run must have")
    parser.add_argument("--database-url", required=True, help="PostgreSQL for the checkpointer (its own database)")
    parser.add_argument("--system", required=True, help="the system prompt")
    parser.add_argument("--tool", required=True, help="the echo server's tool the runs call")
    parser.add_argument("--server", required=True, help="the stdio MCP server's command line, as a JSON list")
    parser.add_argument("--server-cwd", required=True)
    options = parser.parse_args()
    command = json.loads(options.server)
    warnings.filterwarnings("ignore", category=DeprecationWarning)  # create_react_agent is kept, and deprecated
    from langgraph.prebuilt import create_react_agent

    mcp = _McpOnItsOwnLoop(StdioServerParameters(command=command[0], args=command[1:], cwd=options.server_cwd))
    try:
        model = ChatOpenAI(
            model=options.model, base_url=options.llm_url, api_key="bench-key", timeout=_CALL_TIMEOUT_SECONDS
        )
        with PostgresSaver.from_conn_string(options.database_url) as checkpointer:
            checkpointer.setup()
            agent = create_react_agent(
                model, [_tool(mcp, options.tool)], prompt=options.system, checkpointer=checkpointer
            )
            print(json.dumps({"ready": True, "versions": _versions()}), flush=True)
            for line in sys.stdin:
                config = {"configurable": {"thread_id": uuid.uuid4().hex}}
                try:
                    result = agent.invoke({"messages": [("user", json.loads(line))]}, config)
                    problem = _checked(result, options.rounds)
                except Exception as error:  # a failed run is reported to the bench, which stops: never timed
                    problem = f"{type(error).__name__}: {error}"
                print("ok" if problem is None else f"error: {problem}"[:500].replace("\n", " "), flush=True)
    finally:
        mcp.close()


if __name__ == "__main__":
    main()
