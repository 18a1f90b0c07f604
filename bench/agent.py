"""4. agent-service: what a run adds per round to the same LLM and tool calls made directly.

A scripted LLM (``rounds-K``) asks for one tool per round for K rounds, then answers. Direct:
this process makes the K+1 Chat Completions calls to the fake LLM and the K ``tools/call`` to an
echo server over stdio with the SDK client. Through: one run of agent-service (which goes through
completion-service and mcp-client-service). Per-round overhead = (through - direct) / K.

Then concurrent runs (32 and 256) against an LLM that takes 50 ms per call: runs per second, p99
against a single run's time, and agent-service's resident memory per in-flight run.
"""

from __future__ import annotations

import json
import os
import statistics
from typing import Any

from mcp import Client
from mcp_types import TextContent

from bench.httpload import HttpConnection, encode_request
from bench.measure import LoadFigures, PeakRss, Probe, Rounds, closed_loop, interleave, peak_rss
from bench.probes import BenchError, HttpCall, http_call
from bench.processes import Service
from bench.report import SEQUENTIAL_COLUMNS, Section, Table, Target, add_arm, add_difference, mb, ms
from bench.suite import STDIO_TOOL, Suite

__all__ = ["CONCURRENCIES", "UPSTREAM_DELAY_MS", "run_agent"]

CONCURRENCIES = (32, 256)
UPSTREAM_DELAY_MS = 50
PER_ROUND_TARGET = 0.003
TAIL_TARGET_RATIO = 2.0

MESSAGES = [
    {"role": "system", "content": "You are a helpful assistant. Use the tools."},
    {"role": "user", "content": "Run the rounds of the benchmark, then answer."},
]
_OPENAI_TOOLS = [
    {
        "type": "function",
        "function": {
            "name": STDIO_TOOL,
            "description": "Return the text unchanged.",
            "parameters": {"type": "object", "properties": {"text": {"type": "string"}}, "required": ["text"]},
        },
    }
]


def _direct_probe(llm: Service, connection: HttpConnection, mcp: Client, rounds: int) -> Probe:
    """The calls a run makes, made by this process: K+1 LLM calls and K MCP tool calls over stdio."""
    host = f"127.0.0.1:{llm.port}"

    async def probe() -> float | None:
        messages: list[dict[str, Any]] = list(MESSAGES)
        for _ in range(rounds + 1):
            body = {
                "model": f"rounds-{rounds}",
                "messages": messages,
                "stream": False,
                "tools": _OPENAI_TOOLS,
                "tool_choice": "auto",
            }
            request = encode_request(
                "POST",
                "/v1/chat/completions",
                host=host,
                body=json.dumps(body).encode(),
                headers={"content-type": "application/json"},
            )
            reply = await connection.send(request)
            if reply.status != 200:
                raise BenchError(f"fake LLM answered {reply.status}")
            message = json.loads(reply.body)["choices"][0]["message"]
            messages.append(message)
            for call in message.get("tool_calls") or []:
                function = call["function"]
                result = await mcp.call_tool(function["name"], json.loads(function["arguments"]))
                text = result.content[0].text if isinstance(result.content[0], TextContent) else ""
                messages.append({"role": "tool", "tool_call_id": call["id"], "content": text})
        return None

    return probe


def _run_call(suite: Suite, model: str, rounds: int, *, stream: bool) -> HttpCall:
    body = {"model": model, "messages": MESSAGES, "tools": [STDIO_TOOL], "stream": stream}
    must = b'"finishReason":"stop"' if stream else f'"iterations":{rounds + 1}'.encode()
    return http_call(suite.agent, "POST", "/api/v1/agent/run", body, must_contain=must)


async def run_agent(
    suite: Suite, plan: Rounds, *, rounds: int, single_runs: int, min_runs: int, load_seconds: float
) -> Section:
    """``min_runs``: runs of a concurrent load (every worker makes at least one; no new run starts after
    ``load_seconds``)."""
    hello = http_call(suite.hello, "GET", "/hello", must_contain=b"hello")
    through_json = _run_call(suite, f"openai/rounds-{rounds}", rounds, stream=False)
    through_sse = _run_call(suite, f"openai/rounds-{rounds}", rounds, stream=True)
    slow = _run_call(suite, f"openai/rounds-{rounds}-delay-{UPSTREAM_DELAY_MS}", rounds, stream=False)
    sut = [suite.agent.pid, suite.completion.pid, suite.mcp.pid]
    async with (
        HttpConnection("127.0.0.1", suite.hello.port) as hello_connection,
        HttpConnection("127.0.0.1", suite.llm.port) as llm_connection,
        HttpConnection("127.0.0.1", suite.agent.port) as agent_connection,
    ):
        seq = await interleave(
            {
                "floor": hello.probe(hello_connection),
                "direct": _direct_probe(suite.llm, llm_connection, suite.direct_stdio, rounds),
                "through_json": through_json.probe(agent_connection),
                "through_sse": through_sse.probe(agent_connection),
            },
            plan,
            cpu_pids={"floor": [suite.hello.pid], "direct": [os.getpid()], "through_json": sut, "through_sse": sut},
        )
        single = await interleave(
            {"slow": slow.probe(agent_connection)}, Rounds(rounds=1, per_round=single_runs, warmup=2)
        )
    single_run = statistics.median(single["slow"].samples)

    loads: dict[int, LoadFigures] = {}
    memory: dict[int, PeakRss] = {}
    for concurrency in CONCURRENCIES:
        async with peak_rss(suite.agent.pid) as memory[concurrency]:
            loads[concurrency] = await closed_loop(
                slow.workers(),
                concurrency=concurrency,
                requests=max(concurrency, min_runs),
                max_seconds=load_seconds,
                cpu_pids=sut,
            )

    floor = seq["floor"]
    table = Table(
        f"4. agent-service, sequential: {rounds} tool rounds per run ({rounds + 1} LLM calls, {rounds} tool calls); "
        f"{plan.rounds} interleaved rounds x {plan.per_round} runs",
        SEQUENTIAL_COLUMNS,
    )
    add_arm(table, "floor: GET /hello", floor, floor)
    add_arm(table, "direct: LLM calls + SDK tools/call (stdio)", seq["direct"], floor)
    add_arm(table, "through agent-service, stream: false", seq["through_json"], floor)
    per_round = add_difference(
        table, "  added per round, stream: false", seq["through_json"], seq["direct"], per=rounds
    )
    add_arm(table, "through agent-service, stream: true", seq["through_sse"], floor)
    add_difference(table, "  added per round, stream: true", seq["through_sse"], seq["direct"], per=rounds)
    through = seq["through_json"]
    split = ", ".join(
        f"{service.name} {ms(through.cpu_per_request_of(service.pid) / rounds)} ms"
        for service in (suite.agent, suite.completion, suite.mcp)
    )
    table.notes.append(f"CPU per round, stream: false: {split}")
    table.notes.append(
        f"per call: completion-service {ms(through.cpu_per_request_of(suite.completion.pid) / (rounds + 1))} ms "
        f"per LLM call, mcp-client-service {ms(through.cpu_per_request_of(suite.mcp.pid) / rounds)} ms per tool call"
    )
    table.notes.append(
        "CPU: through = the three services together; direct = this process (raw HTTP client + MCP SDK client)"
    )

    load = Table(
        f"4. agent-service, concurrent runs against an LLM taking {UPSTREAM_DELAY_MS} ms per call "
        f"({rounds} rounds, stream: false)",
        [
            "",
            "runs",
            "runs/s",
            "p50 ms",
            "p99 ms",
            "p99 / single",
            "suite CPU ms/run",
            "RSS MiB before/peak",
            "KiB/run",
        ],
    )
    load.add("single run (sequential)", str(len(single["slow"].samples)), "", ms(single_run), "", "1.00", "", "", "")
    for concurrency in CONCURRENCIES:
        figures, rss = loads[concurrency], memory[concurrency]
        load.add(
            f"{concurrency} concurrent",
            str(figures.requests),
            f"{figures.rate:.1f}",
            ms(figures.p50),
            ms(figures.p99),
            f"{figures.p99 / single_run:.2f}",
            ms(figures.cpu_per_request),
            f"{mb(rss.before)}/{mb(rss.peak)}",
            f"{rss.growth / concurrency / 1024:.0f}",
        )
    load.notes.append("the whole suite (agent-, completion-, mcp-client-service) shares the system-under-test core")
    load.notes.append("suite CPU: the three services' CPU time per run, split:")
    for concurrency in CONCURRENCIES:
        split = ", ".join(
            f"{service.name} {ms(loads[concurrency].cpu_per_request_of(service.pid))}"
            for service in (suite.agent, suite.completion, suite.mcp)
        )
        load.notes.append(f"  at {concurrency}: {split} ms per run")
    load.notes.append("KiB/run: agent-service's peak RSS growth over its RSS before the load, per in-flight run")

    biggest = CONCURRENCIES[-1]
    tail_ratio = loads[biggest].p99 / single_run
    targets = [
        Target(
            "agent: added p50 per round",
            f"<= {PER_ROUND_TARGET * 1000:g} ms",
            f"{ms(per_round)} ms (suite CPU {ms(seq['through_json'].cpu_per_request / rounds)} ms/round)",
            per_round <= PER_ROUND_TARGET,
        ),
        Target(
            f"agent: p99 of {biggest} concurrent runs, {UPSTREAM_DELAY_MS} ms upstream",
            f"< {TAIL_TARGET_RATIO:g}x single run",
            f"{tail_ratio:.2f}x ({ms(loads[biggest].p99)} / {ms(single_run)} ms)",
            tail_ratio < TAIL_TARGET_RATIO,
        ),
    ]
    result: dict[str, Any] = {
        "rounds": rounds,
        "sequential_ms": {name: {"p50": arm.p50 * 1000, "p99": arm.p99 * 1000} for name, arm in seq.items()},
        "added_per_round_ms": per_round * 1000,
        "single_run_ms": single_run * 1000,
        "concurrent": {
            str(c): {
                "runs": loads[c].requests,
                "runs_per_s": loads[c].rate,
                "p50_ms": loads[c].p50 * 1000,
                "p99_ms": loads[c].p99 * 1000,
                "rss_before_mib": memory[c].before / 2**20,
                "rss_peak_mib": memory[c].peak / 2**20,
                "kib_per_run": memory[c].growth / c / 1024,
            }
            for c in CONCURRENCIES
        },
    }
    return Section("agent", tables=[table, load], targets=targets, figures=result)
