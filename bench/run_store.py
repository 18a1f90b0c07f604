"""``python -m bench.run_store URL...``: how long the run store takes to record one typical step.

A typical step of a run: one message and three events (``record``), on a run created for it. Prints the median
and 95th percentile per call for each URL given (``sqlite:///path`` or ``postgresql://...``; the database is
migrated first and left with the runs it wrote: use a throwaway one). Figures, never a gate.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import statistics
import time
import uuid

from agent_service.store import NewRun, RunStore, Step, StoredEvent
from suite_common.wire import Message, ToolCall

__all__ = ["measure_record"]

_WARMUP_CALLS = 200


async def measure_record(url: str, calls: int) -> tuple[list[float], float]:
    """Seconds per ``record`` call, ``calls`` of them (after a warm-up: pool filled, statements prepared), and
    this process's CPU seconds per call (all its threads: aiosqlite runs SQLite on one of its own)."""
    store = await RunStore.open(url)
    try:
        run = NewRun(
            run_id=f"bench_{uuid.uuid4().hex}",
            model="bench/model",
            plan={"tools": ["search"]},
            input_messages=[Message(role="user", content="What is the weather in Zürich?")],
        )
        await store.create_run(run, owner="bench", lease_seconds=600)
        message = Message(
            role="assistant",
            content="Let me look that up for you.",
            tool_calls=[ToolCall(id="call_1", name="search", arguments={"query": "weather Zürich today"})],
        )
        timings: list[float] = []
        cpu_started = 0.0
        for call in range(_WARMUP_CALLS + calls):
            seq = call * 3
            step = Step(
                messages=[(1 + call, message)],
                events=[
                    StoredEvent(seq=seq + n, type="text", data=json.dumps({"type": "text", "delta": "word " * 8}))
                    for n in (1, 2, 3)
                ],
                status="processing",
                iterations=call + 1,
            )
            if call == _WARMUP_CALLS:
                cpu_started = time.process_time()
            started = time.perf_counter()
            await store.record(run.run_id, step, owner="bench")
            if call >= _WARMUP_CALLS:
                timings.append(time.perf_counter() - started)
        return timings, (time.process_time() - cpu_started) / calls
    finally:
        await store.aclose()


async def _main(urls: list[str], calls: int) -> None:
    for url in urls:
        timings, cpu = await measure_record(url, calls)
        timings.sort()
        median = statistics.median(timings) * 1e6
        p95 = timings[int(len(timings) * 0.95)] * 1e6
        backend = url.split(":", 1)[0]
        print(
            f"{backend:12} record(1 message + 3 events): median {median:6.0f} µs, p95 {p95:6.0f} µs, "
            f"CPU {cpu * 1e6:6.0f} µs ({calls} calls)"
        )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("urls", nargs="+", help="database URLs (throwaway databases)")
    parser.add_argument("--calls", type=int, default=2000)
    arguments = parser.parse_args()
    asyncio.run(_main(arguments.urls, arguments.calls))


if __name__ == "__main__":
    main()
