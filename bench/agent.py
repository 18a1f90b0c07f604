"""4. agent-service: what a run adds per round to the same LLM and tool calls made directly.

A scripted LLM (``rounds-K``) asks for one tool per round for K rounds, then answers. Direct:
this process makes the K+1 Chat Completions calls to the fake LLM and the K ``tools/call`` to an
echo server over stdio with the SDK client. Through: one run of agent-service (which goes through
completion-service and mcp-client-service). Per-round overhead = (through - direct) / K.

Then concurrent runs (32 and 256) against an LLM that takes 50 ms per call: runs per second, p99
against a single run's time, and agent-service's resident memory per in-flight run; twice: with
the three services sharing the system-under-test core, then with agent-service alone there and
completion-service and mcp-client-service moved to the load core as its upstreams (the placement
the issue's "system under test on one core, upstreams on the other" means for agent-service; on
one core, 256 runs in flight leave about 2 ms of CPU per run for all three services together).
"""

from __future__ import annotations

import json
import os
import statistics
from collections.abc import AsyncIterator, Iterator
from contextlib import asynccontextmanager, contextmanager
from dataclasses import dataclass
from typing import Any

from mcp import Client
from mcp_types import TextContent

from bench.httpload import HttpConnection, encode_request
from bench.measure import LoadFigures, PeakRss, Probe, Rounds, WorkerFactory, closed_loop, interleave, peak_rss
from bench.probes import BenchError, HttpCall, http_call
from bench.processes import CoreTimes, Service, pin
from bench.report import SEQUENTIAL_COLUMNS, Section, Table, Target, add_arm, add_difference, mb, ms
from bench.suite import STDIO_TOOL, Suite

__all__ = ["CONCURRENCIES", "UPSTREAM_DELAY_MS", "direct_probe", "run_agent"]

CONCURRENCIES = (32, 256)
UPSTREAM_DELAY_MS = 50
PER_ROUND_TARGET = 0.003
TAIL_TARGET_RATIO = 2.0
_SATURATED = 0.9
"""A core busier than this during a load may be what limits it."""

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


def direct_probe(llm: Service, connection: HttpConnection, mcp: Client, rounds: int) -> Probe:
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
                "direct": direct_probe(suite.llm, llm_connection, suite.direct_stdio, rounds),
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

    suite_loads = await _concurrent_runs(suite, slow, min_runs=min_runs, load_seconds=load_seconds)
    # The same loads with agent-service alone on the system-under-test core: completion-service and
    # mcp-client-service become upstreams on the load core, as the LLM and the tool servers are.
    with _upstreams_on_load_core(suite):
        async with HttpConnection("127.0.0.1", suite.agent.port) as agent_connection:
            alone_single = await interleave(
                {"slow": slow.probe(agent_connection)}, Rounds(rounds=1, per_round=single_runs, warmup=2)
            )
        alone_loads = await _concurrent_runs(suite, slow, min_runs=min_runs, load_seconds=load_seconds)
    alone_single_run = statistics.median(alone_single["slow"].samples)
    loads = {c: load.figures for c, load in suite_loads.items()}
    memory = {c: load.rss for c, load in suite_loads.items()}

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

    # Per run the suite serves the run itself, each LLM call (completion-service) and each tool call
    # (mcp-client-service); the model check and the tool list are cached by agent-service.
    hops = _HopsFloor(seq["direct"].cpu_per_request, 1 + (rounds + 1) + rounds, floor.cpu_per_request)
    whole = _load_table(
        f"4. agent-service, concurrent runs against an LLM taking {UPSTREAM_DELAY_MS} ms per call "
        f"({rounds} rounds, stream: false); the three services share the system-under-test core",
        suite,
        len(single["slow"].samples),
        single_run,
        suite_loads,
        alone=False,
        hops=hops,
    )
    alone = _load_table(
        f"4. agent-service ALONE on the system-under-test core, concurrent runs against an LLM taking "
        f"{UPSTREAM_DELAY_MS} ms per call ({rounds} rounds, stream: false): completion-service and "
        "mcp-client-service moved to the load core, counted as upstreams",
        suite,
        len(alone_single["slow"].samples),
        alone_single_run,
        alone_loads,
        alone=True,
    )

    biggest = CONCURRENCIES[-1]
    tail_ratio = loads[biggest].p99 / single_run
    alone_tail = alone_loads[biggest].figures
    alone_ratio = alone_tail.p99 / alone_single_run
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
            f"{tail_ratio:.2f}x ({ms(loads[biggest].p99)} / {ms(single_run)} ms{_failed(suite_loads[biggest])}; "
            f"the bare exchanges alone: about {hops.cpu * biggest / (TAIL_TARGET_RATIO * single_run):.1f}x "
            "the CPU budget)",
            tail_ratio < TAIL_TARGET_RATIO and not suite_loads[biggest].failures,
        ),
        Target(
            f"agent alone on its core (completion-/mcp-client-service as upstreams): p99 of {biggest} "
            f"concurrent runs, {UPSTREAM_DELAY_MS} ms upstream",
            f"< {TAIL_TARGET_RATIO:g}x single run",
            f"{alone_ratio:.2f}x ({ms(alone_tail.p99)} / {ms(alone_single_run)} ms; agent-service CPU "
            f"{ms(alone_tail.cpu_per_request_of(suite.agent.pid))} ms/run{_failed(alone_loads[biggest])})",
            alone_ratio < TAIL_TARGET_RATIO and not alone_loads[biggest].failures,
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
        "agent_alone": {
            "single_run_ms": alone_single_run * 1000,
            "concurrent": {str(c): _load_figures(suite, alone_loads[c]) for c in CONCURRENCIES},
        },
    }
    for c in CONCURRENCIES:
        result["concurrent"][str(c)] |= _load_figures(suite, suite_loads[c])
    return Section("agent", tables=[table, whole, alone], targets=targets, figures=result)


@dataclass(frozen=True)
class _ConcurrentLoad:
    figures: LoadFigures
    rss: PeakRss
    system_busy: float
    """Share of time the system-under-test core was busy during the load (anyone's work)."""
    load_busy: float
    """The same for the load core (this client, the fakes, and the upstream services when moved there)."""
    failures: list[str]
    """Runs that did not answer as they must (an overloaded suite may fail some): counted, not fatal."""


def _failed(load: _ConcurrentLoad) -> str:
    return f"; {len(load.failures)} runs failed" if load.failures else ""


def _counting_failures(workers: WorkerFactory, failures: list[str]) -> WorkerFactory:
    @asynccontextmanager
    async def worker() -> AsyncIterator[Probe]:
        async with workers() as probe:

            async def counted() -> float | None:
                try:
                    return await probe()
                except (BenchError, OSError, EOFError) as error:  # EOFError: IncompleteReadError
                    failures.append(str(error)[:200])
                    return None

            yield counted

    return worker


async def _concurrent_runs(
    suite: Suite, slow: HttpCall, *, min_runs: int, load_seconds: float
) -> dict[int, _ConcurrentLoad]:
    sut = [suite.agent.pid, suite.completion.pid, suite.mcp.pid]
    loads: dict[int, _ConcurrentLoad] = {}
    before: dict[str, CoreTimes] = {}

    def mark() -> None:
        before["system"] = CoreTimes.read(suite.cores.system)
        before["load"] = CoreTimes.read(suite.cores.load)

    for concurrency in CONCURRENCIES:
        failures: list[str] = []
        async with peak_rss(suite.agent.pid) as rss:
            figures = await closed_loop(
                _counting_failures(slow.workers(), failures),
                concurrency=concurrency,
                requests=max(concurrency, min_runs),
                max_seconds=load_seconds,
                cpu_pids=sut,
                on_start=mark,
            )
        loads[concurrency] = _ConcurrentLoad(
            figures,
            rss,
            CoreTimes.read(suite.cores.system).busy_since(before["system"]),
            CoreTimes.read(suite.cores.load).busy_since(before["load"]),
            failures,
        )
    return loads


@contextmanager
def _upstreams_on_load_core(suite: Suite) -> Iterator[None]:
    """completion-service and mcp-client-service on the load core while the body runs, then back."""
    moved = (suite.completion.pid, suite.mcp.pid)
    for pid in moved:
        pin(pid, suite.cores.load)
    try:
        yield
    finally:
        for pid in moved:
            pin(pid, suite.cores.system)


@dataclass(frozen=True)
class _HopsFloor:
    """An estimate of the CPU the system-under-test core spends per run on the exchanges alone, from this run's arms:
    the direct arm's client CPU (the run's LLM and MCP calls made by a raw client and the SDK) plus every
    response the services serve, at the hello floor's cost. agent-service's own calls to its siblings
    count as free, and the services' clients cost more than the bench's lean one, so it errs low."""

    direct_cpu: float
    responses: int
    response_cpu: float

    @property
    def cpu(self) -> float:
        return self.direct_cpu + self.responses * self.response_cpu


def _load_table(
    title: str,
    suite: Suite,
    singles: int,
    single_run: float,
    loads: dict[int, _ConcurrentLoad],
    *,
    alone: bool,
    hops: _HopsFloor | None = None,
) -> Table:
    cpu_column = "agent CPU ms/run" if alone else "suite CPU ms/run"
    table = Table(
        title,
        [
            "",
            "runs",
            "runs/s",
            "p50 ms",
            "p99 ms",
            "p99 / single",
            cpu_column,
            "RSS MiB before/peak",
            "KiB/run",
            "SUT core busy",
            "load core busy",
            "failed",
        ],
    )
    table.add("single run (sequential)", str(singles), "", ms(single_run), "", "1.00", "", "", "", "", "", "")
    for concurrency, load in loads.items():
        figures, rss = load.figures, load.rss
        cpu = figures.cpu_per_request_of(suite.agent.pid) if alone else figures.cpu_per_request
        table.add(
            f"{concurrency} concurrent",
            str(figures.requests),
            f"{figures.rate:.1f}",
            ms(figures.p50),
            ms(figures.p99),
            f"{figures.p99 / single_run:.2f}",
            ms(cpu),
            f"{mb(rss.before)}/{mb(rss.peak)}",
            f"{rss.growth / concurrency / 1024:.0f}",
            f"{load.system_busy:.0%}",
            f"{load.load_busy:.0%}",
            str(len(load.failures)),
        )
    if not suite.cores.pinned:
        table.notes.append("not pinned (one CPU): every process shares it, so this placement changes nothing")
    elif alone:
        table.notes.append(
            "system-under-test core: agent-service only; load core: this load client, the fake LLM, the echo MCP "
            "servers, completion-service and mcp-client-service (the upstreams of agent-service)"
        )
    else:
        table.notes.append(
            "the whole suite (agent-, completion-, mcp-client-service) shares the system-under-test core"
        )
    biggest = CONCURRENCIES[-1]
    budget = TAIL_TARGET_RATIO * single_run / biggest
    table.notes.append(
        f"budget: {biggest} runs in flight finish within {TAIL_TARGET_RATIO:g}x a single run only if the "
        f"system-under-test core spends under {TAIL_TARGET_RATIO:g} x {ms(single_run)} / {biggest} = {ms(budget)} ms "
        "of CPU per run"
    )
    if hops is not None:
        table.notes.append(
            f"the exchanges alone cost about {ms(hops.cpu)} ms of CPU per run on that core (an estimate): "
            f"{ms(hops.direct_cpu)} "
            f"(the run's LLM and MCP calls, as the direct arm's raw client and SDK make them) + {hops.responses} "
            f"responses served x {ms(hops.response_cpu)} (the hello floor), agent-service's own calls counted as "
            f"free: {hops.cpu / budget:.1f}x the budget before any work of the suite's own"
        )
    table.notes.append(f"CPU per run{' (the upstream services too)' if alone else ''}, split:")
    for concurrency, load in loads.items():
        split = ", ".join(
            f"{service.name} {ms(load.figures.cpu_per_request_of(service.pid))}"
            for service in (suite.agent, suite.completion, suite.mcp)
        )
        table.notes.append(f"  at {concurrency}: {split} ms per run")
    table.notes.append(
        "KiB/run: agent-service's peak RSS growth over its RSS before the load, per in-flight run; core busy: "
        "/proc/stat, whoever ran there (the machine may be shared)"
    )
    for concurrency, load in loads.items():
        if alone and load.load_busy >= _SATURATED:
            table.notes.append(
                f"at {concurrency}: the load core was {load.load_busy:.0%} busy, so the upstreams there (the two "
                "services above all) may set the pace rather than agent-service"
            )
        if load.failures:
            table.notes.append(f"failed at {concurrency}: {len(load.failures)} runs, first: {load.failures[0]}")
    return table


def _load_figures(suite: Suite, load: _ConcurrentLoad) -> dict[str, Any]:
    figures = load.figures
    return {
        "runs": figures.requests,
        "runs_per_s": figures.rate,
        "p50_ms": figures.p50 * 1000,
        "p99_ms": figures.p99 * 1000,
        "cpu_ms_per_run": {
            service.name: figures.cpu_per_request_of(service.pid) * 1000
            for service in (suite.agent, suite.completion, suite.mcp)
        },
        "system_core_busy": load.system_busy,
        "load_core_busy": load.load_busy,
        "failed_runs": len(load.failures),
    }
