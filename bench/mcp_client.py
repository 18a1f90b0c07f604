"""3. mcp-client-service: call-tool and list-tools through the service, against the MCP SDK client
straight to the same echo server, over stdio and streamable HTTP; then throughput at 16 and 64
concurrent calls (the direct SDK client multiplexes them over one session, as the service does)."""

from __future__ import annotations

import os
from typing import Any

from bench.httpload import HttpConnection
from bench.measure import LoadFigures, Rounds, closed_loop, interleave, shared_probe
from bench.probes import http_call, mcp_call_probe, mcp_list_probe
from bench.report import (
    CPU_NOTE,
    SEQUENTIAL_COLUMNS,
    Section,
    Table,
    Target,
    add_arm,
    add_difference,
    add_load,
    load_table,
    ms,
)
from bench.suite import HTTP_TOOL, SECRET_HEADER, STDIO_TOOL, Suite

__all__ = ["CONCURRENCIES", "run_mcp_client"]

CONCURRENCIES = (16, 64)
ADDED_CALL_TARGET = 0.0015
LIST_TARGET = 0.001

ARGUMENTS = {"text": "hello from the benchmark"}


async def run_mcp_client(suite: Suite, plan: Rounds, *, load_requests: int, load_seconds: float) -> Section:
    auth = {SECRET_HEADER: suite.secret}
    hello = http_call(suite.hello, "GET", "/hello", must_contain=b"hello")
    path = "/mcp/v1/tools/call-tool"
    through = {
        transport: http_call(
            suite.mcp,
            "POST",
            path,
            {"name": tool, "arguments": ARGUMENTS},
            headers=auth,
            must_contain=b'"isError":false',
        )
        for transport, tool in (("stdio", STDIO_TOOL), ("http", HTTP_TOOL))
    }
    list_tools = http_call(suite.mcp, "GET", "/mcp/v1/tools/list-tools", headers=auth, must_contain=STDIO_TOOL.encode())
    direct = {"stdio": suite.direct_stdio, "http": suite.direct_http}
    direct_tool = {"stdio": STDIO_TOOL, "http": HTTP_TOOL}

    async with (
        HttpConnection("127.0.0.1", suite.hello.port) as hello_connection,
        HttpConnection("127.0.0.1", suite.mcp.port) as service_connection,
    ):
        seq = await interleave(
            {
                "floor": hello.probe(hello_connection),
                "direct_call_stdio": mcp_call_probe(direct["stdio"], STDIO_TOOL, ARGUMENTS),
                "through_call_stdio": through["stdio"].probe(service_connection),
                "direct_call_http": mcp_call_probe(direct["http"], HTTP_TOOL, ARGUMENTS),
                "through_call_http": through["http"].probe(service_connection),
                "direct_list_stdio": mcp_list_probe(direct["stdio"]),
                "direct_list_http": mcp_list_probe(direct["http"]),
                "through_list": list_tools.probe(service_connection),
            },
            plan,
            cpu_pids={
                "floor": [suite.hello.pid],
                **{
                    name: [os.getpid()]
                    for name in ("direct_call_stdio", "direct_call_http", "direct_list_stdio", "direct_list_http")
                },
                **{name: [suite.mcp.pid] for name in ("through_call_stdio", "through_call_http", "through_list")},
            },
        )

    loads: dict[str, LoadFigures] = {}
    for concurrency in CONCURRENCIES:
        for transport in ("stdio", "http"):
            loads[f"direct_{transport}_{concurrency}"] = await closed_loop(
                shared_probe(mcp_call_probe(direct[transport], direct_tool[transport], ARGUMENTS)),
                concurrency=concurrency,
                requests=load_requests,
                max_seconds=load_seconds,
                cpu_pids=[os.getpid()],
            )
            loads[f"through_{transport}_{concurrency}"] = await closed_loop(
                through[transport].workers(),
                concurrency=concurrency,
                requests=load_requests,
                max_seconds=load_seconds,
                cpu_pids=[suite.mcp.pid],
            )

    floor = seq["floor"]
    table = Table(
        f"3. mcp-client-service, sequential ({plan.rounds} interleaved rounds x {plan.per_round} requests)",
        SEQUENTIAL_COLUMNS,
    )
    add_arm(table, "floor: GET /hello", floor, floor)
    added: dict[str, float] = {}
    for transport in ("stdio", "http"):
        add_arm(table, f"direct: SDK tools/call, {transport}", seq[f"direct_call_{transport}"], floor)
        add_arm(table, f"through call-tool, {transport}", seq[f"through_call_{transport}"], floor)
        added[transport] = add_difference(
            table, f"  added, {transport}", seq[f"through_call_{transport}"], seq[f"direct_call_{transport}"]
        )
    add_arm(table, "direct: SDK tools/list, stdio", seq["direct_list_stdio"], floor)
    add_arm(table, "direct: SDK tools/list, http", seq["direct_list_http"], floor)
    add_arm(table, "through list-tools (from the catalog)", seq["through_list"], floor)
    table.notes.append(CPU_NOTE)

    load = load_table("3. mcp-client-service, closed loop (echo tool)")
    load.notes.append("direct: one SDK session multiplexes the concurrent calls, as the service's does")
    load.notes.append("CPU: the service's for call-tool; this process's (the SDK client) for direct")
    load.notes.append(
        "the echo servers share the load core with this process: at high rates they, not the service, may set the pace"
    )
    for concurrency in CONCURRENCIES:
        for transport in ("stdio", "http"):
            add_load(load, f"direct: SDK, {transport}", loads[f"direct_{transport}_{concurrency}"])
            add_load(load, f"through call-tool, {transport}", loads[f"through_{transport}_{concurrency}"])

    list_p50 = seq["through_list"].p50
    targets = [
        Target(
            f"mcp-client: added p50 to a tool call, {transport}",
            f"<= {ADDED_CALL_TARGET * 1000:g} ms",
            f"{ms(added[transport])} ms (service CPU {ms(seq[f'through_call_{transport}'].cpu_per_request)} ms/call)",
            added[transport] <= ADDED_CALL_TARGET,
        )
        for transport in ("stdio", "http")
    ]
    targets.append(
        Target(
            "mcp-client: list-tools p50 (whole round trip)",
            f"< {LIST_TARGET * 1000:g} ms",
            f"{ms(list_p50)} ms ({list_p50 / floor.p50:.2f}x floor)",
            list_p50 < LIST_TARGET,
        )
    )
    figures: dict[str, Any] = {
        "sequential_ms": {name: {"p50": arm.p50 * 1000, "p99": arm.p99 * 1000} for name, arm in seq.items()},
        "added_ms": {transport: value * 1000 for transport, value in added.items()},
        "load": {
            name: {"concurrency": f.concurrency, "rps": f.rate, "p50_ms": f.p50 * 1000, "p99_ms": f.p99 * 1000}
            for name, f in loads.items()
        },
    }
    return Section("mcp_client", tables=[table, load], targets=targets, figures=figures)
