"""``make bench`` (``python -m bench``): what the suite adds to the calls it makes, as figures.

Starts, in this process tree on loopback: a hello endpoint (the floor), a fake OpenAI-compatible
LLM, echo MCP servers over stdio and streamable HTTP, completion-service, mcp-client-service and
agent-service. The services run on one core; this process (the load client, the direct SDK
clients) and the fakes on the other (agent-service's concurrent runs are measured a second time
with it alone on its core and the other two services moved to the other one, as its upstreams).
Then, in order: the load client check, the floor, and the completion-service, mcp-client-service
and agent-service benchmarks, then agent-service's OpenAI front against its agent API, then what
storing runs costs agent-service (not stored, SQLite, PostgreSQL: ``bench/persistence.py``) and what the
per-tenant run slot costs a run (none, in memory, Redis: ``bench/limits.py``), what a tenant's own MCP
servers cost its runs (``bench/tenants.py``), and what users run: agent-service with PostgreSQL, Redis tenancy and
the tool cache against the bare loop (``bench/production.py``; ``--only peers`` adds LangGraph with its PostgreSQL
checkpointer, from a virtual environment of its own that ``make bench-peers`` makes), then (the
services stopped) mcp_rag_tool's search latency at 10,000 and 100,000 synthetic chunks
(``bench/rag_scale.py``) and ``mcp-rag-tool ingest``'s throughput (``bench/rag_ingest.py``); each
prints its tables as it ends, and a summary of the targets closes the run. The summary is also
written to ``.data/bench/summary.json`` and ``summary.md``.
Figures, never a gate: the exit code is 0 even when a target is missed.

Options: ``--quick`` (or ``BENCH_QUICK=1``) for a short run while iterating; ``--only`` to run
some benchmarks; ``--profile`` to record the services with py-spy (see ``bench/profiling.py``);
``--log-level`` for the services (default ``info``, their own default). From make:
``make bench BENCH_QUICK=1`` or ``make bench BENCH_ARGS="--only agent --profile"``.
"""

from __future__ import annotations

import argparse
import json
import os
import time
from dataclasses import asdict, dataclass
from datetime import UTC, datetime
from pathlib import Path

import uvloop

from bench.agent import run_agent
from bench.clients import run_clients
from bench.completion import run_completion
from bench.floor import run_floor
from bench.limits import run_limits
from bench.mcp_client import run_mcp_client
from bench.measure import Rounds
from bench.openai_front import run_openai_front
from bench.persistence import run_persistence
from bench.processes import ROOT, Cores, pin
from bench.production import run_production
from bench.profiling import profiling
from bench.rag_scale import run_rag
from bench.report import Section, machine, render_summary, summary_markdown
from bench.suite import running_suite
from bench.tenants import run_tenants

__all__ = ["main"]

BENCHMARKS = (
    "client",
    "floor",
    "completion",
    "mcp",
    "agent",
    "openai",
    "persistence",
    "limits",
    "tenants",
    "production",
    "rag",
    "peers",
)
OPTIONAL = ("peers",)
"""Benchmarks only ``--only`` runs: the peer arm needs a virtual environment of its own (``make bench-peers``)."""


@dataclass(frozen=True)
class Plan:
    sequential: Rounds
    agent_sequential: Rounds
    persistence_sequential: Rounds
    """Three agent-services (not stored, SQLite, PostgreSQL) interleaved: an even count of rounds, so that
    each mode goes first as often as last."""
    tenants_sequential: Rounds
    """Two tenants' runs differing by well under a millisecond: many short rounds, so that drift cancels out."""
    agent_rounds: int
    single_runs: int
    min_concurrent_runs: int
    load_requests: int
    load_seconds: float
    """A closed-loop load stops at ``load_requests`` or after this long, whichever comes first."""
    rag_sizes: tuple[int, ...] = (10_000, 100_000)
    """Corpus sizes (chunks) of the mcp_rag_tool search latency benchmark."""
    rag_ingest_chunks: int = 1200
    """Chunks of about 200 tokens that ``mcp-rag-tool ingest`` embeds in the ingest benchmark."""

    @classmethod
    def full(cls) -> Plan:
        return cls(
            sequential=Rounds(rounds=5, per_round=200, warmup=100, max_seconds=4.0),
            agent_sequential=Rounds(rounds=5, per_round=200, warmup=20, max_seconds=8.0),
            persistence_sequential=Rounds(rounds=6, per_round=150, warmup=20, max_seconds=6.0),
            tenants_sequential=Rounds(rounds=24, per_round=40, warmup=20, max_seconds=2.0),
            agent_rounds=3,
            single_runs=20,
            min_concurrent_runs=96,
            load_requests=10_000,
            load_seconds=6.0,
        )

    @classmethod
    def quick(cls) -> Plan:
        return cls(
            sequential=Rounds(rounds=3, per_round=60, warmup=30, max_seconds=1.5),
            agent_sequential=Rounds(rounds=3, per_round=30, warmup=5, max_seconds=3.0),
            persistence_sequential=Rounds(rounds=4, per_round=40, warmup=10, max_seconds=2.0),
            tenants_sequential=Rounds(rounds=8, per_round=20, warmup=10, max_seconds=1.0),
            agent_rounds=3,
            single_runs=8,
            min_concurrent_runs=32,
            load_requests=3000,
            load_seconds=2.0,
            rag_sizes=(10_000,),
            rag_ingest_chunks=300,
        )


def _print(text: str) -> None:
    print(text, flush=True)


async def _run(options: argparse.Namespace, plan: Plan, cores: Cores, data: Path) -> list[Section]:
    sections: list[Section] = []
    profiles = data / "profiles"

    section_started = time.monotonic()

    def done(section: Section) -> None:
        nonlocal section_started
        sections.append(section)
        for table in section.tables:
            _print("\n" + table.render())
        _print(f"  ({section.name}: {time.monotonic() - section_started:.0f} s)")
        section_started = time.monotonic()

    async with running_suite(cores, data, log_level=options.log_level) as suite:
        section_started = time.monotonic()
        _print(f"suite up: logs in {suite.logs}")
        services = [suite.agent, suite.completion, suite.mcp]
        if "client" in options.only:
            done(
                await run_clients(
                    suite,
                    sequential=plan.sequential.per_round * 2,
                    requests=plan.load_requests,
                    seconds=plan.load_seconds,
                )
            )
        if "floor" in options.only:
            done(await run_floor(suite, plan.sequential))
        if "completion" in options.only:
            with profiling([suite.completion], profiles, "completion", enabled=options.profile):
                done(
                    await run_completion(
                        suite, plan.sequential, load_requests=plan.load_requests, load_seconds=plan.load_seconds
                    )
                )
        if "mcp" in options.only:
            with profiling([suite.mcp], profiles, "mcp", enabled=options.profile):
                done(
                    await run_mcp_client(
                        suite, plan.sequential, load_requests=plan.load_requests, load_seconds=plan.load_seconds
                    )
                )
        if "agent" in options.only:
            with profiling(services, profiles, "agent", enabled=options.profile):
                done(
                    await run_agent(
                        suite,
                        plan.agent_sequential,
                        rounds=plan.agent_rounds,
                        single_runs=plan.single_runs,
                        min_runs=plan.min_concurrent_runs,
                        load_seconds=plan.load_seconds,
                    )
                )
        if "openai" in options.only:
            with profiling([suite.agent], profiles, "openai", enabled=options.profile):
                done(await run_openai_front(suite, plan.sequential, rounds=0))
        if "persistence" in options.only:
            done(await run_persistence(suite, plan.persistence_sequential, rounds=plan.agent_rounds))
        if "limits" in options.only:
            done(await run_limits(suite, plan.persistence_sequential))
        if "tenants" in options.only:
            # Its own agent-service: it profiles that one and the gateway itself.
            done(await run_tenants(suite, plan.tenants_sequential, profiles=profiles if options.profile else None))
        if "production" in options.only or "peers" in options.only:
            # --only peers: the production arm and bare, with LangGraph beside them in the same rounds.
            done(
                await run_production(
                    suite,
                    plan.persistence_sequential,
                    rounds=plan.agent_rounds,
                    with_peer="peers" in options.only,
                    profiles=profiles if options.profile else None,
                )
            )
    if "rag" in options.only:  # needs none of the services: run once they are down
        # The tool runs as a process of its own on every core (torch uses both): unpin this process,
        # every thread of it, and so the ingest command it starts, from the load core.
        pin(os.getpid(), cores.system | cores.load)
        section_started = time.monotonic()
        done(await run_rag(plan.rag_sizes, searches=60, ingest_chunks=plan.rag_ingest_chunks))
    return sections


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="python -m bench", description=(__doc__ or "").splitlines()[0])
    parser.add_argument(
        "--quick",
        action="store_true",
        default=os.environ.get("BENCH_QUICK", "") not in ("", "0"),
        help="fewer and shorter rounds, for iterating (also BENCH_QUICK=1)",
    )
    parser.add_argument(
        "--only",
        nargs="+",
        choices=BENCHMARKS,
        default=[name for name in BENCHMARKS if name not in OPTIONAL],
        help="run these benchmarks only (peers: the production arm against LangGraph, only when named)",
    )
    parser.add_argument("--profile", action="store_true", help="record the services with py-spy")
    parser.add_argument(
        "--log-level",
        default="info",
        choices=["debug", "info", "warning", "error"],
        help="the services' log level (their default: info, what production pays per request)",
    )
    options = parser.parse_args(argv)
    plan = Plan.quick() if options.quick else Plan.full()
    data = ROOT / ".data" / "bench"
    data.mkdir(parents=True, exist_ok=True)
    cores = Cores.choose()
    os.sched_setaffinity(0, cores.load)  # this process, and every fake it starts, on the load core
    info = machine()
    pinning = cores.describe()
    _print(
        f"loopsuite bench ({'quick' if options.quick else 'full'}): {info['cpu']}, {info['cores']} cores, "
        f"Python {info['python']}, uvloop {info['uvloop']}, httptools {info['httptools']}"
    )
    _print(f"{pinning}; loopback only; load client: raw HTTP/1.1 keep-alive on asyncio streams under uvloop")
    started = time.monotonic()
    sections = uvloop.run(_run(options, plan, cores, data))
    targets = [target for section in sections for target in section.targets]
    if targets:
        _print("\n" + render_summary(targets))
    elapsed = time.monotonic() - started
    _print(f"\n{len(sections)} benchmarks in {elapsed:.0f} s; summary in {data}/summary.json and summary.md")
    when = datetime.now(UTC).strftime("%Y-%m-%d %H:%M UTC")
    mode = "quick" if options.quick else "full"
    summary = {
        "date": when,
        "machine": info,
        "pinning": pinning,
        "mode": mode,
        "seconds": elapsed,
        "targets": [asdict(target) | {"verdict": target.verdict} for target in targets],
        "figures": {section.name: section.figures for section in sections},
    }
    (data / "summary.json").write_text(json.dumps(summary, indent=2) + "\n")
    (data / "summary.md").write_text(summary_markdown(info, pinning, targets, sections, heading=f"{mode} run, {when}"))
    if options.profile:
        _print(f"profiles in {data / 'profiles'} (*.top.txt: where on-CPU time went)")


if __name__ == "__main__":
    main()
