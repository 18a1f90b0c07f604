"""What agent-service adds per round, against the same LLM and tool calls made directly.

Starts, as separate processes on loopback: the fake LLM (bench/fake_llm.py), completion-service,
mcp-client-service (with the echo MCP server over stdio) and agent-service. Then, interleaved:

- through the suite: one non-streamed agent run of K tool rounds (K+1 LLM calls, K tool calls);
- directly: the same K+1 LLM calls to the fake LLM and K MCP ``tools/call`` to an echo server
  over stdio, made by this process with httpx and the MCP SDK client.

Per-round overhead = (median run time - median direct time) / K. Prints figures; never a gate.
Run: ``make bench`` or ``.venv/bin/python bench/agent_round_overhead.py [--rounds K] [--runs N]``.
"""

from __future__ import annotations

import argparse
import os
import secrets
import socket
import statistics
import subprocess
import sys
import time
from contextlib import ExitStack
from pathlib import Path
from typing import Any

import anyio
import httpx
from mcp import Client, StdioServerParameters

ROOT = Path(__file__).resolve().parents[1]
ECHO_SERVER = ROOT / "tests" / "support" / "echo_mcp_server.py"


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
        return port


def _start(stack: ExitStack, args: list[str], env: dict[str, str], ready_url: str) -> None:
    process = subprocess.Popen(args, env={**os.environ, **env}, stderr=subprocess.DEVNULL, cwd=ROOT)
    stack.callback(process.wait, 10)
    stack.callback(process.terminate)
    give_up = time.monotonic() + 60
    while time.monotonic() < give_up:
        try:
            if httpx.get(ready_url, timeout=1).status_code in (200, 404, 405):
                return
        except httpx.HTTPError:
            pass
        time.sleep(0.1)
    raise SystemExit(f"{args} did not become ready")


def _conversation() -> list[dict[str, Any]]:
    return [{"role": "user", "content": "run the rounds"}]


async def _direct(llm_url: str, rounds: int, runs: int, http: httpx.AsyncClient, mcp: Client) -> list[float]:
    timings = []
    for _ in range(runs):
        started = time.perf_counter()
        messages = _conversation()
        tools = [{"type": "function", "function": {"name": "echo", "parameters": {"type": "object"}}}]
        for _ in range(rounds + 1):
            reply = (
                await http.post(
                    f"{llm_url}/v1/chat/completions",
                    json={"model": f"rounds-{rounds}", "messages": messages, "tools": tools},
                )
            ).json()["choices"][0]["message"]
            messages.append(reply)
            for call in reply.get("tool_calls") or []:
                result = await mcp.call_tool("echo", {"text": "x"})
                messages.append({"role": "tool", "tool_call_id": call["id"], "content": str(result.content)})
        timings.append(time.perf_counter() - started)
    return timings


async def _through(agent_url: str, rounds: int, runs: int, http: httpx.AsyncClient) -> list[float]:
    timings = []
    body = {"model": f"openai/rounds-{rounds}", "stream": False, "tools": ["echo"], "messages": _conversation()}
    for _ in range(runs):
        started = time.perf_counter()
        response = await http.post(f"{agent_url}/api/v1/agent/run", json=body)
        if response.status_code != 200 or response.json()["iterations"] != rounds + 1:
            raise SystemExit(f"unexpected run: {response.text}")
        timings.append(time.perf_counter() - started)
    return timings


async def _measure(llm_url: str, agent_url: str, rounds: int, runs: int, blocks: int) -> dict[str, list[float]]:
    direct: list[float] = []
    through: list[float] = []
    params = StdioServerParameters(command=sys.executable, args=[str(ECHO_SERVER)])
    async with httpx.AsyncClient(timeout=30) as http, Client(params) as mcp:
        await _direct(llm_url, rounds, 5, http, mcp)  # warm-up
        await _through(agent_url, rounds, 5, http)
        for _ in range(blocks):  # interleaved, so drift hits both sides alike
            direct += await _direct(llm_url, rounds, runs, http, mcp)
            through += await _through(agent_url, rounds, runs, http)
    return {"direct": direct, "through": through}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--runs", type=int, default=40, help="runs per block")
    parser.add_argument("--blocks", type=int, default=5)
    options = parser.parse_args()
    llm, completion, mcp, agent = (_free_port() for _ in range(4))
    secret = secrets.token_urlsafe(16)
    config = ROOT / ".data" / "bench_mcp_servers.json"
    config.parent.mkdir(exist_ok=True)
    config.write_text(f'{{"mcpServers": {{"echo": {{"command": "{sys.executable}", "args": ["{ECHO_SERVER}"]}}}}}}')
    python = sys.executable
    with ExitStack() as stack:
        _start(stack, [python, "bench/fake_llm.py", str(llm)], {}, f"http://127.0.0.1:{llm}/v1/chat/completions")
        _start(
            stack,
            [python, "-m", "completion_service"],
            {
                "COMPLETION_PORT": str(completion),
                "COMPLETION_OPENAI_BASE_URL": f"http://127.0.0.1:{llm}/v1",
                "COMPLETION_OPENAI_API_KEY": "bench",
                "COMPLETION_LOG_LEVEL": "warning",
            },
            f"http://127.0.0.1:{completion}/readyz",
        )
        _start(
            stack,
            [python, "-m", "mcp_client_service"],
            {
                "MCP_CLIENT_PORT": str(mcp),
                "MCP_CLIENT_SERVICE_SECRET": secret,
                "MCP_CLIENT_SERVERS_CONFIG": str(config),
                "MCP_CLIENT_LOG_LEVEL": "warning",
            },
            f"http://127.0.0.1:{mcp}/readyz",
        )
        _start(
            stack,
            [python, "-m", "agent_service"],
            {
                "AGENT_PORT": str(agent),
                "AGENT_COMPLETION_URL": f"http://127.0.0.1:{completion}",
                "AGENT_MCP_CLIENT_URL": f"http://127.0.0.1:{mcp}",
                "AGENT_MCP_SERVICE_SECRET": secret,
                "AGENT_LOG_LEVEL": "warning",
            },
            f"http://127.0.0.1:{agent}/healthz",
        )
        llm_url, agent_url = f"http://127.0.0.1:{llm}", f"http://127.0.0.1:{agent}"
        figures = anyio.run(_measure, llm_url, agent_url, options.rounds, options.runs, options.blocks)
    direct, through = (statistics.median(figures[k]) * 1000 for k in ("direct", "through"))
    p99 = statistics.quantiles(figures["through"], n=100)[98] * 1000
    per_round = (through - direct) / options.rounds
    print(f"machine: {os.cpu_count()} cores; all processes share them (no pinning); loopback only")
    runs = len(figures["through"])
    print(f"{options.rounds} tool rounds per run ({options.rounds + 1} LLM calls), {runs} runs a side")
    print(f"{'':32}{'median ms':>12}")
    print(f"{'direct (LLM + MCP stdio calls)':32}{direct:12.2f}")
    print(f"{'through agent-service':32}{through:12.2f}   p99 {p99:.2f} ms")
    print(f"{'added per round':32}{per_round:12.2f}   ratio through/direct {through / direct:.2f}")


if __name__ == "__main__":
    main()
