"""1. The floor: a loopback HTTP round trip to a hello endpoint, and one MCP ``tools/call`` to an echo
server with the SDK client directly, over stdio and over streamable HTTP."""

from __future__ import annotations

import os

from bench.httpload import HttpConnection
from bench.measure import Rounds, interleave
from bench.probes import http_call, mcp_call_probe
from bench.report import CPU_NOTE, SEQUENTIAL_COLUMNS, Section, Table, add_arm
from bench.suite import HTTP_TOOL, STDIO_TOOL, Suite

__all__ = ["run_floor"]


async def run_floor(suite: Suite, plan: Rounds) -> Section:
    hello = http_call(suite.hello, "GET", "/hello", must_contain=b"hello")
    async with HttpConnection("127.0.0.1", suite.hello.port) as connection:
        figures = await interleave(
            {
                "hello": hello.probe(connection),
                "stdio": mcp_call_probe(suite.direct_stdio, STDIO_TOOL, {"text": "hello"}),
                "http": mcp_call_probe(suite.direct_http, HTTP_TOOL, {"text": "hello"}),
            },
            plan,
            cpu_pids={"hello": [suite.hello.pid], "stdio": [os.getpid()], "http": [os.getpid()]},
        )
    floor = figures["hello"]
    table = Table(
        f"1. Floor ({plan.rounds} interleaved rounds x {plan.per_round} sequential requests)", SEQUENTIAL_COLUMNS
    )
    add_arm(table, "GET /hello (Starlette on uvicorn, SUT core)", floor, floor)
    add_arm(table, "MCP tools/call echo, SDK client, stdio", figures["stdio"], floor)
    add_arm(table, "MCP tools/call echo, SDK client, streamable HTTP", figures["http"], floor)
    table.notes.append("x floor: p50 over the hello round trip's p50, both measured in these rounds")
    table.notes.append(CPU_NOTE)
    return Section(
        "floor",
        tables=[table],
        figures={name: {"p50_ms": arm.p50 * 1000, "p99_ms": arm.p99 * 1000} for name, arm in figures.items()},
    )
