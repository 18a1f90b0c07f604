"""5. agent-service's OpenAI-compatible front: what ``POST /v1/chat/completions`` adds to the same run.

Both arms make the same run against the fake LLM (``rounds-K``: K tool rounds, then an answer, every
available tool offered; ``make bench`` uses K = 0, one LLM call: the front's own work does not depend
on the rounds, and a short run leaves less noise around it). One arm goes through the agent API
(``POST /api/v1/agent/run``), the other through the OpenAI front, interleaved, ``stream: false`` and
``stream: true`` (``live``). The front's added cost per request = front - agent API; the CPU column
is agent-service's own (the other services do the same work in both arms).
"""

from __future__ import annotations

import json
import statistics
import time
from collections.abc import Callable
from typing import Any

from agent_service.api.openai_wire import (
    AgentInfo,
    ChatCompletionRequest,
    ChunkWriter,
    chat_completion,
    client_tool_specs,
    final_text,
    to_messages,
    to_tool_choice,
)
from bench.httpload import HttpConnection
from bench.measure import Rounds, interleave
from bench.probes import http_call
from bench.report import SEQUENTIAL_COLUMNS, Section, Table, Target, add_arm, add_difference, ms
from bench.suite import Suite
from suite_common.sse import encode_event
from suite_common.wire import AgentRunRequest, AgentRunResult, Message, RunText, Usage, dump

__all__ = ["run_openai_front"]

ADDED_TARGET = 0.0003
"""The front may add at most this (seconds) to a request, against the same run through the agent API."""

MESSAGES = [
    {"role": "system", "content": "You are a helpful assistant. Use the tools."},
    {"role": "user", "content": "Run the rounds of the benchmark, then answer."},
]


_DELTAS = [f"word{i} " for i in range(20)]
"""A streamed answer of 20 text deltas."""


def _native_work(body: bytes) -> None:
    """What the agent API does of its own with a request and its answer: parse, answer, stream the text."""
    request = AgentRunRequest.model_validate_json(body)
    answer = Message(role="assistant", content="".join(_DELTAS))
    AgentRunResult(
        run_id="run_1", message=answer, messages=[answer], finish_reason="stop", iterations=1, usage=Usage()
    ).model_dump_json(by_alias=True, exclude_none=True)
    for delta in _DELTAS:
        event = RunText(run_id="run_1", iteration=1, delta=delta)
        encode_event(dump(event), event=event.type, id=1)
    del request


def _front_work(body: bytes) -> None:
    """The same for the OpenAI front: parse, translate, answer, stream the text as chunks."""
    request = ChatCompletionRequest.model_validate_json(body)
    AgentRunRequest(
        model=request.model,
        messages=to_messages(request),
        tool_choice=to_tool_choice(request),
        max_tokens=request.max_completion_tokens or request.max_tokens,
        temperature=request.temperature,
    )
    client_tool_specs(request)
    answer = Message(role="assistant", content="".join(_DELTAS))
    agent = AgentInfo(run_id="run_1", finish_reason="stop", iterations=1)
    chat_completion(
        completion_id="chatcmpl-1",
        created=1,
        model=request.model,
        content=final_text([answer]),
        tool_calls=None,
        agent=agent,
        usage=Usage(),
    ).model_dump_json(exclude_none=True)
    writer = ChunkWriter("chatcmpl-1", 1, request.model, include_usage=False)
    for delta in _DELTAS:
        RunText(run_id="run_1", iteration=1, delta=delta)  # the loop still makes the event
        f"data: {writer.text(delta)}\n\n".encode()
    f"data: {writer.finish(agent)}\n\n".encode()


def _translation_cpu(rounds: int, per_round: int) -> dict[str, float]:
    """CPU seconds per request of each side's own work, in this process: median of interleaved rounds."""
    body = json.dumps({"model": "m", "messages": MESSAGES}).encode()
    work: dict[str, Callable[[bytes], None]] = {"native": _native_work, "front": _front_work}
    samples: dict[str, list[float]] = {name: [] for name in work}
    for _ in range(rounds):
        for name, function in work.items():
            started = time.process_time()
            for _ in range(per_round):
                function(body)
            samples[name].append((time.process_time() - started) / per_round)
    return {name: statistics.median(values) for name, values in samples.items()}


async def run_openai_front(suite: Suite, plan: Rounds, *, rounds: int) -> Section:
    model = f"openai/rounds-{rounds}"
    native_body: dict[str, Any] = {"model": model, "messages": MESSAGES}
    front_body: dict[str, Any] = {"model": model, "messages": MESSAGES}
    calls = {
        "native_json": http_call(
            suite.agent, "POST", "/api/v1/agent/run", native_body, must_contain=b'"finishReason":"stop"'
        ),
        "front_json": http_call(
            suite.agent, "POST", "/v1/chat/completions", front_body, must_contain=b'"finish_reason":"stop"'
        ),
        "native_sse": http_call(
            suite.agent,
            "POST",
            "/api/v1/agent/run",
            native_body | {"stream": True},
            must_contain=b'"finishReason":"stop"',
        ),
        "front_sse": http_call(
            suite.agent,
            "POST",
            "/v1/chat/completions",
            front_body | {"stream": True},
            must_contain=b"data: [DONE]",
        ),
    }
    async with HttpConnection("127.0.0.1", suite.agent.port) as connection:
        seq = await interleave(
            {name: call.probe(connection) for name, call in calls.items()},
            plan,
            cpu_pids={name: [suite.agent.pid] for name in calls},
        )
    table = Table(
        f"5. agent-service's OpenAI front against the agent API, the same run ({rounds} tool rounds, "
        f"{rounds + 1} LLM calls, every tool offered); {plan.rounds} interleaved rounds x {plan.per_round} requests",
        SEQUENTIAL_COLUMNS,
    )
    native = seq["native_json"]
    add_arm(table, "agent API, stream: false", native, native)
    add_arm(table, "OpenAI front, stream: false", seq["front_json"], native)
    added_json = add_difference(table, "  added by the front, stream: false", seq["front_json"], native)
    add_arm(table, "agent API, stream: true", seq["native_sse"], native)
    add_arm(table, "OpenAI front, stream: true (live)", seq["front_sse"], native)
    added_sse = add_difference(table, "  added by the front, stream: true", seq["front_sse"], seq["native_sse"])
    table.notes.append("the ratio column is each arm's p50 over the agent API's (stream: false); CPU: agent-service's")
    own = _translation_cpu(plan.rounds, 2000)
    own_added = own["front"] - own["native"]
    table.notes.append(
        f"each side's own work, in process (parse, translate, answer, {len(_DELTAS)} text deltas): agent API "
        f"{own['native'] * 1e6:.0f} us, OpenAI front {own['front'] * 1e6:.0f} us of CPU per request: the front adds "
        f"{own_added * 1e6:.0f} us; everything else (planning, the loop, the calls) is the same code in both arms"
    )
    ratio_json = seq["front_json"].p50 / native.p50
    ratio_sse = seq["front_sse"].p50 / seq["native_sse"].p50
    cpu_added = seq["front_json"].cpu_per_request - native.cpu_per_request
    targets = [
        Target(
            "openai front: its own added CPU per request (in process)",
            f"< {ADDED_TARGET * 1000:g} ms",
            f"{ms(own_added)} ms ({own['front'] / own['native']:.2f}x the agent API's own "
            f"{own['native'] * 1e6:.0f} us)",
            own_added < ADDED_TARGET,
        ),
        Target(
            "openai front: added per request, stream: false",
            f"< {ADDED_TARGET * 1000:g} ms",
            f"{ms(added_json)} ms ({ratio_json:.3f}x the agent API's {ms(native.p50)} ms; "
            f"agent-service CPU {ms(cpu_added)} ms)",
            added_json < ADDED_TARGET,
        ),
        Target(
            "openai front: added per request, stream: true",
            f"< {ADDED_TARGET * 1000:g} ms",
            f"{ms(added_sse)} ms ({ratio_sse:.3f}x the agent API's {ms(seq['native_sse'].p50)} ms)",
            added_sse < ADDED_TARGET,
        ),
    ]
    figures = {
        "rounds": rounds,
        "sequential_ms": {name: {"p50": arm.p50 * 1000, "p99": arm.p99 * 1000} for name, arm in seq.items()},
        "added_ms": {"json": added_json * 1000, "sse": added_sse * 1000},
        "ratio": {"json": ratio_json, "sse": ratio_sse},
        "agent_cpu_added_ms": cpu_added * 1000,
        "own_cpu_us": {name: seconds * 1e6 for name, seconds in own.items()},
    }
    return Section("openai", tables=[table], targets=targets, figures=figures)
