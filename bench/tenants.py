"""8. Tenant servers: what a run of a tenant with 3 MCP servers of its own costs over one with shared servers only.

One more agent-service, with a callers file of two tenants, runs on the system-under-test core behind the suite's
completion-service and mcp-client-service (runs not stored, as in the agent benchmark): ``shared-only`` has no
server of its own; ``own`` registers 3 through agent-service's admin API (``POST /api/v1/admin/mcp-servers`` with
its admin key, forwarded to the gateway's tenant API and kept in the gateway's store), each an echo MCP server over
streamable HTTP on loopback (its own process on the load core, tools prefixed ``t1_``, ``t2_``, ``t3_``, the same
echo tools as the shared ``echo-http`` server's ``h_``). The gateway's outbound policy allows loopback
(``MCP_CLIENT_SSRF_ALLOW_LOOPBACK``, as the suite starts it).

Three runs (``rounds-1``: one tool call, then the answer; ``stream: false``), interleaved in one run once every
session is open (the warm-up opens them):

- ``shared-only``'s run calling the shared ``h_echo`` (the base);
- ``own``'s run calling ``t1_echo`` on its own server: the target, what a tenant's own server adds;
- ``own``'s run calling the shared ``h_echo``: what a tenant's own catalog costs a run that uses none of its tools.

Per arm: p50, p99, the suite's CPU per run (agent-service, completion-service and mcp-client-service), added p50 and
CPU against the base, and the p50 ratio.
"""

from __future__ import annotations

import hashlib
import secrets
from contextlib import AsyncExitStack, ExitStack
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

import anyio
import httpx

from bench.agent import MESSAGES
from bench.httpload import HttpConnection
from bench.measure import Rounds, interleave
from bench.probes import BenchError, HttpCall, http_call
from bench.processes import Service, free_port, start
from bench.profiling import profiling
from bench.report import Section, Table, Target, ms
from bench.suite import HTTP_TOOL, Suite, start_agent

__all__ = ["ADDED_PER_RUN_TARGET", "run_tenants"]

ADDED_PER_RUN_TARGET = 0.0003
"""What a tenant's own servers may add to a run (seconds of p50 latency) over shared servers only (issue 27)."""
OWN_SERVERS = 3
_ROUNDS = 1
_READY_SECONDS = 30.0
"""How long the gateway may take to connect to and list the tenant's servers it registered."""

_SHARED_TENANT, _OWN_TENANT = "shared-only", "own"
_KEYS = {tenant: f"bench-{secrets.token_hex(16)}" for tenant in (_SHARED_TENANT, _OWN_TENANT)}
_CALLERS = "".join(
    f"""
[tenants.{tenant}]

[[keys]]
name = "{tenant}-admin"
tenant = "{tenant}"
sha256 = "{hashlib.sha256(key.encode()).hexdigest()}"
role = "admin"
"""
    for tenant, key in _KEYS.items()
)
"""Both tenants alike (an admin key each, no limit of their own) but for the servers ``own`` registers."""


def _own_tool(index: int) -> str:
    return f"t{index}_echo"


@dataclass(frozen=True)
class _Arm:
    key: str
    label: str
    tenant: str
    tool: str


ARMS = (
    _Arm("shared", f"tenant with shared servers only, shared tool {HTTP_TOOL}", _SHARED_TENANT, HTTP_TOOL),
    _Arm(
        "own", f"tenant with {OWN_SERVERS} servers of its own, its own tool {_own_tool(1)}", _OWN_TENANT, _own_tool(1)
    ),
    _Arm(
        "own_shared",
        f"tenant with {OWN_SERVERS} servers of its own, shared tool {HTTP_TOOL}",
        _OWN_TENANT,
        HTTP_TOOL,
    ),
)


def _headers(tenant: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {_KEYS[tenant]}"}


def _run_call(agent: Service, arm: _Arm) -> HttpCall:
    body = {"model": f"openai/rounds-{_ROUNDS}", "messages": MESSAGES, "tools": [arm.tool], "stream": False}
    return http_call(
        agent,
        "POST",
        "/api/v1/agent/run",
        body,
        headers=_headers(arm.tenant),
        must_contain=f'"iterations":{_ROUNDS + 1}'.encode(),
    )


def _start_echo_servers(stack: ExitStack, suite: Suite) -> list[Service]:
    """The tenant's servers: one echo MCP server over streamable HTTP each, on the load core with the other fakes."""
    servers = []
    for index in range(1, OWN_SERVERS + 1):
        port = free_port()
        args = ["python", "-m", "bench.echo_server", "--transport", "streamable-http", "--tool-prefix", f"t{index}_"]
        servers.append(
            start(
                stack,
                f"echo-http-tenant-{index}",
                [*args, "--port", str(port)],
                port=port,
                cpus=suite.cores.load,
                logs=suite.logs,
                ready_path="/mcp",
            )
        )
    return servers


async def _register(agent: Service, echo_servers: list[Service]) -> None:
    """The tenant's servers registered through the admin API, then waited for until each has listed its tools."""
    async with httpx.AsyncClient(base_url=agent.url, headers=_headers(_OWN_TENANT), timeout=10) as admin:
        for index, server in enumerate(echo_servers, start=1):
            body = {"name": f"notes{index}", "url": f"{server.url}/mcp", "transport": "streamable-http"}
            answer = await admin.post("/api/v1/admin/mcp-servers", json=body)
            if answer.status_code != 201:
                raise BenchError(f"registering {body['name']}: {answer.status_code} {answer.text[:300]}")
        listed: dict[str, Any] = {}
        with anyio.move_on_after(_READY_SECONDS):
            while True:
                listed = (await admin.get("/api/v1/admin/mcp-servers")).json()
                if all(server["toolCount"] > 0 for server in listed["servers"]):
                    return
                await anyio.sleep(0.1)  # another process connects: nothing to await but its answers
        raise BenchError(f"the tenant's servers did not list their tools within {_READY_SECONDS:g} s: {listed}")


async def run_tenants(suite: Suite, plan: Rounds, *, profiles: Path | None = None) -> Section:
    """The section ``make bench`` prints (``--only tenants``), with the issue's target. The suite's own agent-service
    takes no part: one with the callers file of both tenants is started, and stopped at the end. ``profiles``: record
    it and the gateway with py-spy while the arms run (``--profile``), into that folder."""
    callers = suite.logs / "bench-tenant-callers.toml"
    callers.write_text(_CALLERS)
    with ExitStack() as stack:
        echo_servers = _start_echo_servers(stack, suite)
        agent = start_agent(stack, suite, "agent-service-tenants", {"AGENT_CALLERS_FILE": str(callers)})
        await _register(agent, echo_servers)
        sut = [agent.pid, suite.completion.pid, suite.mcp.pid]
        async with AsyncExitStack() as connections:
            arms = {
                arm.key: _run_call(agent, arm).probe(
                    await connections.enter_async_context(HttpConnection("127.0.0.1", agent.port))
                )
                for arm in ARMS
            }
            # Warm-up apart: every session to the tenant's server opened, every catalog built and cached.
            await interleave(arms, replace(plan, rounds=0))
            with profiling([agent, suite.mcp], profiles or suite.logs, "tenants", enabled=profiles is not None):
                figures = await interleave(arms, replace(plan, warmup=0), cpu_pids={arm.key: sut for arm in ARMS})
        return _section(suite, agent, figures, plan)


def _section(suite: Suite, agent: Service, figures: dict[str, Any], plan: Rounds) -> Section:
    table = Table(
        f"8. Tenant servers: the same run ({_ROUNDS} round, one tool call, stream: false, not stored) of a tenant "
        f"with shared servers only and of one with {OWN_SERVERS} servers of its own (streamable HTTP, loopback), "
        f"sessions open; {plan.rounds} interleaved rounds x {plan.per_round} runs",
        [
            "",
            "runs/round",
            "p50 ms",
            "p99 ms",
            "suite CPU ms/run",
            "added ms/run",
            "added CPU ms/run",
            "p50 ratio",
        ],
    )
    base = figures["shared"]
    control = figures["own"].cpu_per_request_of(suite.completion.pid) - base.cpu_per_request_of(suite.completion.pid)
    result: dict[str, Any] = {"arms": {}, "completion_cpu_noise_ms_per_run": control * 1000}
    for arm in ARMS:
        figure = figures[arm.key]
        added, added_cpu = figure.p50 - base.p50, figure.cpu_per_request - base.cpu_per_request
        is_base = arm.key == "shared"
        table.add(
            arm.label,
            f"{figure.per_round:.0f}",
            ms(figure.p50),
            ms(figure.p99),
            ms(figure.cpu_per_request),
            "" if is_base else ms(added),
            "" if is_base else ms(added_cpu),
            "1.00" if is_base else f"{figure.p50 / base.p50:.3f}",
        )
        result["arms"][arm.key] = {
            "p50_ms": figure.p50 * 1000,
            "p99_ms": figure.p99 * 1000,
            "suite_cpu_ms_per_run": figure.cpu_per_request * 1000,
            "cpu_ms_per_run": {
                service.name: figure.cpu_per_request_of(service.pid) * 1000
                for service in (agent, suite.completion, suite.mcp)
            },
            "added_ms_per_run": added * 1000,
            "added_cpu_ms_per_run": added_cpu * 1000,
            "p50_ratio": figure.p50 / base.p50,
        }

    for arm in ARMS:
        split = ", ".join(
            f"{service.name} {ms(figures[arm.key].cpu_per_request_of(service.pid))}"
            for service in (agent, suite.completion, suite.mcp)
        )
        table.notes.append(f"CPU per run, {arm.key}: {split} ms")
    table.notes.append(
        f"completion-service does the same work in every arm: its CPU difference, own - shared ({ms(control)} ms/run), "
        "is this run's noise"
    )
    table.notes.append(
        "added = this arm - the shared-only tenant's run (p50 of runs, median of round p50s); suite CPU: the three "
        "services' own, from /proc; the echo servers run on the load core (the tenant's are processes of their own, "
        "alike but for their tools' prefix)"
    )
    own = figures["own"]
    added = own.p50 - base.p50
    target = Target(
        f"tenants: a run calling a tenant's own server ({OWN_SERVERS} of its own), added p50 over shared servers only",
        f"<= {ADDED_PER_RUN_TARGET * 1000:g} ms",
        f"{ms(added)} ms (suite CPU {ms(own.cpu_per_request - base.cpu_per_request)} ms/run; a run "
        f"{own.p50 / base.p50:.3f}x the shared-only tenant's)",
        added <= ADDED_PER_RUN_TARGET,
    )
    return Section("tenants", tables=[table], targets=[target], figures=result)
