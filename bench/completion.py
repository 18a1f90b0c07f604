"""2. completion-service: what it adds to the same request sent straight to the (fake) upstream.

Sequential, interleaved: non-streamed, streamed (total and time to first byte), each through
the service and direct, in Chat Completions (``openai/``) and in the Responses API
(``openai-responses/``), on the same fake upstream. Then closed-loop throughput and p99 at 32
concurrent requests, and the service's resident memory idle and at its peak under that load.
"""

from __future__ import annotations

from typing import Any

from bench.httpload import HttpConnection
from bench.measure import LoadFigures, Rounds, closed_loop, interleave, peak_rss
from bench.probes import HttpCall, http_call
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
    mb,
    ms,
)
from bench.suite import STDIO_TOOL, Suite

__all__ = ["CONCURRENCY", "run_completion"]

CONCURRENCY = 32
ADDED_P50_TARGET = 0.001
ADDED_TTFB_TARGET = 0.0005
RESPONSES_VS_CHAT_TARGET = 0.0001
"""The Responses adapter adds at most this much more (p50, non-streamed and streamed) than the Chat one."""
RATE_TARGET = 1000.0

MESSAGES = [
    {"role": "system", "content": "You are a helpful assistant. Answer briefly."},
    {"role": "user", "content": "What does this benchmark measure? Answer in one sentence."},
]
TOOL = {
    "name": STDIO_TOOL,
    "description": "Return the text unchanged.",
    "inputSchema": {"type": "object", "properties": {"text": {"type": "string"}}, "required": ["text"]},
}


def neutral_body(*, stream: bool, prefix: str = "openai") -> dict[str, Any]:
    """The request to completion-service."""
    model = f"{prefix}/rounds-0"
    return {"model": model, "messages": MESSAGES, "tools": [TOOL], "toolChoice": "auto", "stream": stream}


def openai_body(*, stream: bool) -> dict[str, Any]:
    """The same request as completion-service sends it upstream."""
    tool = {"name": TOOL["name"], "description": TOOL["description"], "parameters": TOOL["inputSchema"]}
    body: dict[str, Any] = {
        "model": "rounds-0",
        "messages": MESSAGES,
        "stream": stream,
        "tools": [{"type": "function", "function": tool}],
        "tool_choice": "auto",
    }
    if stream:
        body["stream_options"] = {"include_usage": True}
    return body


def responses_body(*, stream: bool) -> dict[str, Any]:
    """The same request as completion-service sends it upstream in the Responses API."""
    tool = {"name": TOOL["name"], "description": TOOL["description"], "parameters": TOOL["inputSchema"]}
    return {
        "model": "rounds-0",
        "input": MESSAGES[1:],
        "stream": stream,
        "store": False,
        "include": ["reasoning.encrypted_content"],
        "instructions": MESSAGES[0]["content"],
        "tools": [{"type": "function", **tool, "strict": False}],
        "tool_choice": "auto",
    }


def _calls(suite: Suite) -> dict[str, HttpCall]:
    upstream, service, responses = "/v1/chat/completions", "/api/v1/completions", "/v1/responses"
    neutral = neutral_body
    return {
        "direct_json": http_call(suite.llm, "POST", upstream, openai_body(stream=False), must_contain=b'"stop"'),
        "through_json": http_call(suite.completion, "POST", service, neutral_body(stream=False), must_contain=b"stop"),
        "direct_sse": http_call(suite.llm, "POST", upstream, openai_body(stream=True), must_contain=b"[DONE]"),
        "through_sse": http_call(
            suite.completion, "POST", service, neutral_body(stream=True), must_contain=b"event: done"
        ),
        "direct_responses_json": http_call(
            suite.llm, "POST", responses, responses_body(stream=False), must_contain=b'"completed"'
        ),
        "through_responses_json": http_call(
            suite.completion, "POST", service, neutral(stream=False, prefix="openai-responses"), must_contain=b"stop"
        ),
        "direct_responses_sse": http_call(
            suite.llm, "POST", responses, responses_body(stream=True), must_contain=b"response.completed"
        ),
        "through_responses_sse": http_call(
            suite.completion,
            "POST",
            service,
            neutral(stream=True, prefix="openai-responses"),
            must_contain=b"event: done",
        ),
    }


async def run_completion(suite: Suite, plan: Rounds, *, load_requests: int, load_seconds: float) -> Section:
    hello = http_call(suite.hello, "GET", "/hello", must_contain=b"hello")
    calls = _calls(suite)
    async with (
        HttpConnection("127.0.0.1", suite.hello.port) as hello_connection,
        HttpConnection("127.0.0.1", suite.llm.port) as llm_connection,
        HttpConnection("127.0.0.1", suite.completion.port) as service_connection,
    ):
        arms = {"floor": hello.probe(hello_connection)}
        for name, call in calls.items():
            arms[name] = call.probe(service_connection if name.startswith("through") else llm_connection)
        sut = [suite.completion.pid]
        through = {name: sut for name in arms if name.startswith("through")}
        seq = await interleave(arms, plan, cpu_pids={"floor": [suite.hello.pid], **through})

    loads: dict[str, LoadFigures] = {}

    async def run_load(call: HttpCall, pids: list[int] | None = None) -> LoadFigures:
        return await closed_loop(
            call.workers(),
            concurrency=CONCURRENCY,
            requests=load_requests,
            max_seconds=load_seconds,
            cpu_pids=pids or [],
        )

    loads["direct_json"] = await run_load(calls["direct_json"])
    async with peak_rss(suite.completion.pid) as memory:
        loads["through_json"] = await run_load(calls["through_json"], sut)
        loads["through_sse"] = await run_load(calls["through_sse"], sut)

    floor = seq["floor"]
    table = Table(
        f"2. completion-service, sequential ({plan.rounds} interleaved rounds x {plan.per_round} requests)",
        SEQUENTIAL_COLUMNS,
    )
    add_arm(table, "floor: GET /hello", floor, floor)
    add_arm(table, "direct: fake upstream, JSON", seq["direct_json"], floor)
    add_arm(table, "through completion-service, JSON", seq["through_json"], floor)
    added_json = add_difference(table, "  added, JSON", seq["through_json"], seq["direct_json"])
    add_arm(table, "direct: fake upstream, SSE, total", seq["direct_sse"], floor)
    add_arm(table, "through completion-service, SSE, total", seq["through_sse"], floor)
    added_sse = add_difference(table, "  added, SSE total", seq["through_sse"], seq["direct_sse"])
    add_arm(table, "direct: fake upstream, SSE, first byte", seq["direct_sse"], floor, ttfb=True)
    add_arm(table, "through completion-service, SSE, first byte", seq["through_sse"], floor, ttfb=True)
    added_ttfb = add_difference(table, "  added, time to first byte", seq["through_sse"], seq["direct_sse"], ttfb=True)
    add_arm(table, "direct: fake upstream, Responses JSON", seq["direct_responses_json"], floor)
    add_arm(table, "through completion-service, Responses JSON", seq["through_responses_json"], floor)
    added_responses_json = add_difference(
        table, "  added, Responses JSON", seq["through_responses_json"], seq["direct_responses_json"]
    )
    add_arm(table, "direct: fake upstream, Responses SSE, total", seq["direct_responses_sse"], floor)
    add_arm(table, "through completion-service, Responses SSE, total", seq["through_responses_sse"], floor)
    added_responses_sse = add_difference(
        table, "  added, Responses SSE total", seq["through_responses_sse"], seq["direct_responses_sse"]
    )
    table.notes.append(
        "request: system + user message and one tool; answer: 17 words (streamed: one chunk per word + usage; "
        "Responses: one output_text.delta per word between its item, part and response events)"
    )
    table.notes.append(CPU_NOTE)

    load = load_table(f"2. completion-service, closed loop at {CONCURRENCY} concurrent requests")
    add_load(load, "direct: fake upstream, JSON", loads["direct_json"])
    add_load(load, "through completion-service, JSON", loads["through_json"])
    add_load(load, "through completion-service, SSE", loads["through_sse"])
    load.notes.append(
        f"completion-service RSS: {mb(memory.before)} MiB idle (after warm-up), peak {mb(memory.peak)} MiB under load"
    )

    rate = loads["through_json"].rate
    targets = [
        Target(
            "completion: added p50, non-streamed",
            f"<= {ADDED_P50_TARGET * 1000:g} ms",
            f"{ms(added_json)} ms (service CPU {ms(seq['through_json'].cpu_per_request)} ms/req)",
            added_json <= ADDED_P50_TARGET,
        ),
        Target(
            "completion: added time to first byte",
            f"<= {ADDED_TTFB_TARGET * 1000:g} ms",
            f"{ms(added_ttfb)} ms",
            added_ttfb <= ADDED_TTFB_TARGET,
        ),
        Target(
            "completion: Responses adapter's added p50 vs Chat Completions', JSON",
            f"<= +{RESPONSES_VS_CHAT_TARGET * 1000:g} ms",
            f"{ms(added_responses_json)} ms vs {ms(added_json)} ms (service CPU "
            f"{ms(seq['through_responses_json'].cpu_per_request)} vs {ms(seq['through_json'].cpu_per_request)} ms/req)",
            added_responses_json - added_json <= RESPONSES_VS_CHAT_TARGET,
        ),
        Target(
            "completion: Responses adapter's added p50 vs Chat Completions', SSE total",
            f"<= +{RESPONSES_VS_CHAT_TARGET * 1000:g} ms",
            f"{ms(added_responses_sse)} ms vs {ms(added_sse)} ms (service CPU "
            f"{ms(seq['through_responses_sse'].cpu_per_request)} vs {ms(seq['through_sse'].cpu_per_request)} ms/req)",
            added_responses_sse - added_sse <= RESPONSES_VS_CHAT_TARGET,
        ),
        Target(
            f"completion: throughput at {CONCURRENCY} concurrent, one core",
            f">= {RATE_TARGET:.0f} req/s",
            f"{rate:.0f} req/s (p99 {ms(loads['through_json'].p99)} ms; CPU-bound ceiling "
            f"{1 / loads['through_json'].cpu_per_request:.0f} req/s)",
            rate >= RATE_TARGET,
        ),
    ]
    figures: dict[str, Any] = {
        "sequential_ms": {name: {"p50": arm.p50 * 1000, "p99": arm.p99 * 1000} for name, arm in seq.items()},
        "ttfb_ms": {
            name: {"p50": seq[name].ttfb_p50 * 1000, "p99": seq[name].ttfb_p99 * 1000}
            for name in ("direct_sse", "through_sse")
        },
        "added_ms": {
            "json_p50": added_json * 1000,
            "sse_p50": added_sse * 1000,
            "ttfb_p50": added_ttfb * 1000,
            "responses_json_p50": added_responses_json * 1000,
            "responses_sse_p50": added_responses_sse * 1000,
        },
        "load": {
            name: {"concurrency": f.concurrency, "rps": f.rate, "p50_ms": f.p50 * 1000, "p99_ms": f.p99 * 1000}
            for name, f in loads.items()
        },
        "rss_mib": {"idle": memory.before / 2**20, "peak": memory.peak / 2**20},
    }
    return Section("completion", tables=[table, load], targets=targets, figures=figures)
