"""An MCP server with a read-only, an idempotent and a non-idempotent tool, each call held at a gate the test opens.

For crash tests of agent-service: served in the test's own process over streamable HTTP, it outlives the
agent-service process the test kills, and the test reads what happened to every call from the ``Ledger`` itself::

    ledger = Ledger()
    async with ledger.serving() as url, running_gateway({"ledger": {"url": url}}) as gateway:
        ...
        await ledger.wait_for_state("send_payment", {"amount": 42}, 1, "started")
        ledger.open("send_payment", {"amount": 42})

Tools, each with its MCP annotations:

- ``get_status(key)``: ``readOnlyHint: true`` (the status ``set_status`` set last, or ``unknown``);
- ``set_status(key, value)``: ``idempotentHint: true`` (setting the same status twice changes nothing);
- ``send_payment(amount)``: ``idempotentHint: false``, ``destructiveHint: true`` (a second call pays twice).

A call is known by its tool, its arguments and its attempt: the first call of ``set_status`` with given arguments
is attempt 1, the next one with the same arguments (a call made again after a crash) attempt 2, and so on; calls
made at once with different arguments are told apart whatever order they start in. A call is counted as
**started** when it begins, **completed** when it returned its result, or **cancelled** when it was stopped before
that (its client cancelled it, or the caller's connection went away and the gateway abandoned it). A call returns
only once the test opened its gate (``open``; a gate may be opened before its call starts), so a call stays in
flight exactly as long as the test wants. Completions are what a tool's effect means here: a payment completed
twice is a payment made twice.
"""

from __future__ import annotations

import json
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from typing import Any, Literal

import anyio
from mcp.server.mcpserver import MCPServer
from mcp.types import ToolAnnotations

from support.servers import serve_app

__all__ = ["LEDGER_TOOLS", "Ledger", "LedgerCall"]

LEDGER_TOOLS = ("get_status", "set_status", "send_payment")
"""The tool names, in the order the server lists them."""

ToolName = Literal["get_status", "set_status", "send_payment"]
CallState = Literal["started", "completed", "cancelled"]


@dataclass
class LedgerCall:
    """One call of a tool: ``attempt`` counts the calls of the tool with the same arguments, from 1."""

    tool: str
    arguments: dict[str, Any]
    attempt: int
    state: CallState = "started"


@dataclass
class Ledger:
    """The server and what its tools were asked to do; for use in the event loop that serves it."""

    calls: list[LedgerCall] = field(default_factory=list)
    """Every call, in the order they started."""
    statuses: dict[str, str] = field(default_factory=dict)
    """What ``set_status`` set, by key (once its call completed)."""
    _gates: dict[tuple[str, str, int], anyio.Event] = field(default_factory=dict)
    _changed: anyio.Event | None = None

    # --- what the test reads ----------------------------------------------------------------------------

    def of(self, tool: ToolName, state: CallState | None = None) -> list[LedgerCall]:
        """The calls of ``tool`` (in the given state, when one is given), in the order they started."""
        return [call for call in self.calls if call.tool == tool and (state is None or call.state == state)]

    def started(self, tool: ToolName) -> int:
        """How many calls of ``tool`` began, however they ended."""
        return len(self.of(tool))

    def completed(self, tool: ToolName) -> list[dict[str, Any]]:
        """The arguments of each call of ``tool`` that returned its result, in the order the calls started."""
        return [call.arguments for call in self.of(tool, "completed")]

    async def wait_until(self, condition: Callable[[Ledger], bool]) -> None:
        """Returns once ``condition(self)`` holds (bound the wait with ``anyio.fail_after``)."""
        while not condition(self):
            if self._changed is None:
                self._changed = anyio.Event()
            await self._changed.wait()

    def state(self, tool: ToolName, arguments: dict[str, Any], attempt: int = 1) -> CallState | None:
        """Where that call is; ``None``: it has not started."""
        for call in self.of(tool):
            if call.arguments == arguments and call.attempt == attempt:
                return call.state
        return None

    async def wait_for_state(
        self, tool: ToolName, arguments: dict[str, Any], attempt: int, *states: CallState
    ) -> CallState:
        """Returns once that call is in one of ``states`` (bound the wait with ``anyio.fail_after``)."""
        await self.wait_until(lambda ledger: ledger.state(tool, arguments, attempt) in states)
        state = self.state(tool, arguments, attempt)
        assert state is not None
        return state

    def open(self, tool: ToolName, arguments: dict[str, Any], attempt: int = 1) -> None:
        """Let that call return its result (now, or as soon as it starts)."""
        self._gate(tool, arguments, attempt).set()

    # --- serving ------------------------------------------------------------------------------------------

    @asynccontextmanager
    async def serving(self) -> AsyncIterator[str]:
        """The server over streamable HTTP on a loopback port; yields its MCP endpoint URL."""
        async with serve_app(self.build().streamable_http_app()) as base_url:
            yield base_url + "/mcp"

    def build(self, name: str = "ledger") -> MCPServer:
        server = MCPServer(name)

        async def get_status(key: str) -> str:
            """The status of `key` (changes nothing)."""
            await self._held("get_status", {"key": key})
            return f"{key} is {self.statuses.get(key, 'unknown')}"

        async def set_status(key: str, value: str) -> str:
            """Set the status of `key` to `value` (setting it again to the same value changes nothing)."""
            await self._held("set_status", {"key": key, "value": value})
            self.statuses[key] = value
            return f"{key} is {value}"

        async def send_payment(amount: int) -> str:
            """Send a payment of `amount` (each call pays again)."""
            await self._held("send_payment", {"amount": amount})
            return f"paid {amount}"

        server.add_tool(get_status, annotations=ToolAnnotations(read_only_hint=True))
        server.add_tool(set_status, annotations=ToolAnnotations(idempotent_hint=True, destructive_hint=False))
        server.add_tool(send_payment, annotations=ToolAnnotations(idempotent_hint=False, destructive_hint=True))
        return server

    async def _held(self, tool: ToolName, arguments: dict[str, Any]) -> None:
        attempt = 1 + sum(1 for call in self.of(tool) if call.arguments == arguments)
        call = LedgerCall(tool, arguments, attempt)
        self.calls.append(call)
        self._wake()
        try:
            await self._gate(tool, arguments, attempt).wait()
        except anyio.get_cancelled_exc_class():
            call.state = "cancelled"
            self._wake()
            raise
        call.state = "completed"
        self._wake()

    def _gate(self, tool: str, arguments: dict[str, Any], attempt: int) -> anyio.Event:
        key = (tool, json.dumps(arguments, sort_keys=True), attempt)
        if key not in self._gates:
            self._gates[key] = anyio.Event()
        return self._gates[key]

    def _wake(self) -> None:
        if self._changed is not None:
            self._changed.set()
            self._changed = None
