"""How figures are taken: interleaved sequential rounds, and closed-loop concurrent load.

A *probe* makes one request and returns its time to first byte (or ``None`` when that means
nothing); the driver times the whole call around it. Sequential arms are interleaved round by
round (A, B, C then C, B, A ...) so that drift on a shared machine hits every arm alike; each arm
is summarised as the median of its round p50s and the p99 of all its samples.
"""

from __future__ import annotations

import math
import statistics
import time
from collections.abc import AsyncIterator, Awaitable, Callable, Sequence
from contextlib import AbstractAsyncContextManager, asynccontextmanager
from dataclasses import dataclass, field

import anyio

from bench.processes import cpu_seconds, rss_bytes

__all__ = [
    "ArmFigures",
    "LoadFigures",
    "PeakRss",
    "Probe",
    "Rounds",
    "closed_loop",
    "interleave",
    "peak_rss",
    "percentile",
    "shared_probe",
]

Probe = Callable[[], Awaitable[float | None]]
WorkerFactory = Callable[[], AbstractAsyncContextManager[Probe]]
"""Opens what one concurrent worker needs (its own connection, say) and yields its probe."""


def percentile(values: Sequence[float], q: float) -> float:
    """Nearest-rank percentile (``q`` in 0..100) of a non-empty sample."""
    ordered = sorted(values)
    rank = max(1, math.ceil(q / 100 * len(ordered)))
    return ordered[rank - 1]


@dataclass(frozen=True)
class Rounds:
    rounds: int
    per_round: int
    warmup: int
    max_seconds: float | None = None
    """An arm's round ends after ``per_round`` requests or this long, whichever comes first: it keeps
    ``make bench`` bounded while a path is slow, and costs nothing once it is fast."""


@dataclass
class ArmFigures:
    """One arm of an interleaved comparison, in seconds."""

    round_p50s: list[float] = field(default_factory=list)
    samples: list[float] = field(default_factory=list)
    ttfb_round_p50s: list[float] = field(default_factory=list)
    ttfb_samples: list[float] = field(default_factory=list)
    cpu_by_pid: dict[int, float] = field(default_factory=dict)
    """CPU seconds each measured process spent over all samples of this arm."""

    @property
    def cpu(self) -> float:
        return sum(self.cpu_by_pid.values())

    @property
    def cpu_per_request(self) -> float:
        return self.cpu / len(self.samples)

    @property
    def per_round(self) -> float:
        """Requests per round on average (fewer than planned when rounds hit their time cap)."""
        return len(self.samples) / len(self.round_p50s)

    def cpu_per_request_of(self, pid: int) -> float:
        return self.cpu_by_pid.get(pid, 0.0) / len(self.samples)

    @property
    def p50(self) -> float:
        """The median of the round p50s."""
        return statistics.median(self.round_p50s)

    @property
    def p99(self) -> float:
        return percentile(self.samples, 99)

    @property
    def ttfb_p50(self) -> float:
        return statistics.median(self.ttfb_round_p50s)

    @property
    def ttfb_p99(self) -> float:
        return percentile(self.ttfb_samples, 99)


async def _sequential(
    probe: Probe,
    count: int,
    figures: ArmFigures | None,
    pids: Sequence[int] = (),
    max_seconds: float | None = None,
) -> None:
    totals: list[float] = []
    ttfbs: list[float] = []
    cpu_before = {pid: cpu_seconds([pid]) for pid in pids}
    stop_at = time.perf_counter() + max_seconds if max_seconds is not None else float("inf")
    for _ in range(count):
        if totals and time.perf_counter() > stop_at:
            break
        started = time.perf_counter()
        ttfb = await probe()
        totals.append(time.perf_counter() - started)
        if ttfb is not None:
            ttfbs.append(ttfb)
    if figures is None:
        return
    for pid, before in cpu_before.items():
        figures.cpu_by_pid[pid] = figures.cpu_by_pid.get(pid, 0.0) + cpu_seconds([pid]) - before
    figures.round_p50s.append(statistics.median(totals))
    figures.samples += totals
    if ttfbs:
        figures.ttfb_round_p50s.append(statistics.median(ttfbs))
        figures.ttfb_samples += ttfbs


async def interleave(
    arms: dict[str, Probe],
    plan: Rounds,
    cpu_pids: dict[str, Sequence[int]] | None = None,
    per_round: dict[str, int] | None = None,
) -> dict[str, ArmFigures]:
    """Warm every arm up, then ``plan.rounds`` rounds of ``plan.per_round`` sequential requests per arm
    (``per_round`` may give an arm fewer).

    ``cpu_pids`` names, per arm, the processes whose CPU time that arm's requests cost (its system
    under test); their CPU time is summed over each arm's rounds."""
    pids = cpu_pids or {}
    counts = per_round or {}
    for probe in arms.values():
        await _sequential(probe, plan.warmup, None)
    figures = {name: ArmFigures() for name in arms}
    order = list(arms)
    for index in range(plan.rounds):
        for name in order if index % 2 == 0 else reversed(order):
            count = counts.get(name, plan.per_round)
            await _sequential(arms[name], count, figures[name], pids.get(name, ()), plan.max_seconds)
    return figures


@dataclass(frozen=True)
class LoadFigures:
    concurrency: int
    requests: int
    seconds: float
    latencies: list[float]
    cpu_by_pid: dict[int, float] = field(default_factory=dict)
    """CPU seconds of each measured process during the load."""

    @property
    def cpu(self) -> float:
        return sum(self.cpu_by_pid.values())

    @property
    def cpu_per_request(self) -> float:
        return self.cpu / self.requests

    def cpu_per_request_of(self, pid: int) -> float:
        return self.cpu_by_pid.get(pid, 0.0) / self.requests

    @property
    def rate(self) -> float:
        return self.requests / self.seconds

    @property
    def p50(self) -> float:
        return percentile(self.latencies, 50)

    @property
    def p99(self) -> float:
        return percentile(self.latencies, 99)


async def closed_loop(
    workers: WorkerFactory,
    *,
    concurrency: int,
    requests: int,
    max_seconds: float | None = None,
    on_start: Callable[[], None] | None = None,
    cpu_pids: Sequence[int] = (),
) -> LoadFigures:
    """``concurrency`` workers, each sending its next request as soon as its last one answered,
    until ``requests`` were sent or ``max_seconds`` have passed (no new request starts then).
    Workers open their resources before the clock starts; the CPU time of ``cpu_pids`` is
    counted while the load runs."""
    remaining = requests
    latencies: list[float] = []
    last_answer = 0.0
    ready = 0
    all_ready = anyio.Event()
    go = anyio.Event()
    stop_at = float("inf")

    async def worker() -> None:
        nonlocal remaining, ready, last_answer
        async with workers() as probe:
            ready += 1
            if ready == concurrency:
                all_ready.set()
            await go.wait()
            while remaining > 0 and time.perf_counter() < stop_at:
                remaining -= 1
                started = time.perf_counter()
                await probe()
                last_answer = time.perf_counter()
                latencies.append(last_answer - started)

    async with anyio.create_task_group() as tg:
        for _ in range(concurrency):
            tg.start_soon(worker)
        await all_ready.wait()
        if on_start is not None:
            on_start()
        cpu_before = {pid: cpu_seconds([pid]) for pid in cpu_pids}
        started = time.perf_counter()
        if max_seconds is not None:
            stop_at = started + max_seconds
        go.set()
    cpu = {pid: cpu_seconds([pid]) - before for pid, before in cpu_before.items()}
    return LoadFigures(concurrency, len(latencies), last_answer - started, latencies, cpu)


def shared_probe(probe: Probe) -> WorkerFactory:
    """Workers that all use one probe (one MCP session multiplexing concurrent calls)."""

    @asynccontextmanager
    async def factory() -> AsyncIterator[Probe]:
        yield probe

    return factory


@dataclass
class PeakRss:
    """Resident memory of a process: before a load, and the highest seen while it ran."""

    before: int
    peak: int

    @property
    def growth(self) -> int:
        return max(0, self.peak - self.before)


@asynccontextmanager
async def peak_rss(pid: int, interval: float = 0.01) -> AsyncIterator[PeakRss]:
    """Sample ``pid``'s RSS every ``interval`` seconds while the body runs."""
    figures = PeakRss(before=rss_bytes(pid), peak=rss_bytes(pid))

    async def sample() -> None:
        while True:
            figures.peak = max(figures.peak, rss_bytes(pid))
            await anyio.sleep(interval)

    async with anyio.create_task_group() as tg:
        tg.start_soon(sample)
        try:
            yield figures
        finally:
            figures.peak = max(figures.peak, rss_bytes(pid))
            tg.cancel_scope.cancel()
