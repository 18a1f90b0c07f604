"""The peer arm of ``bench/production.py``: LangGraph's prebuilt agent with its PostgreSQL checkpointer, in a process
of its own (``bench/peer_langgraph.py``) run by the interpreter of a virtual environment of its own.

That environment, ``.data/bench/peers-venv``, is made from ``requirements-bench-peers.txt`` by ``make bench-peers``
(which then runs the arm); nothing else needs it. Without it the arm is left out with a note saying how to make it.
The process runs on the system-under-test core, as the suite's services do, and its stdio echo server on the load
core, as mcp-client-service's is; the bench sends it one line per run and times the answer.
"""

from __future__ import annotations

import asyncio
import json
import os
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from dataclasses import dataclass
from pathlib import Path

from bench.measure import Probe
from bench.probes import BenchError
from bench.processes import ROOT, Cores, pin, pin_descendants

__all__ = ["PEERS_REQUIREMENTS", "PEERS_VENV", "PeerProcess", "missing_peers_venv", "running_peer"]

PEERS_VENV = ROOT / ".data" / "bench" / "peers-venv"
PEERS_REQUIREMENTS = ROOT / "requirements-bench-peers.txt"
_INSTALLED = PEERS_VENV / ".installed"
"""Written by ``make bench-peers`` once every package of the requirements is in."""
_START_TIMEOUT_SECONDS = 60.0
"""Importing LangGraph and LangChain, opening the MCP session and the checkpointer's setup()."""
_RUN_TIMEOUT_SECONDS = 30.0


def missing_peers_venv(venv: Path = PEERS_VENV) -> str | None:
    """Why the peer arm cannot run (its virtual environment is missing or half made), or None."""
    if (venv / "bin" / "python").exists() and (venv / ".installed").exists():
        return None
    where = venv.relative_to(ROOT) if venv.is_relative_to(ROOT) else venv
    return (
        f"the peer arm needs its own virtual environment, {where} (not found or not complete): "
        f"`make bench-peers` makes it from {PEERS_REQUIREMENTS.name} and runs this arm"
    )


@dataclass
class PeerProcess:
    process: asyncio.subprocess.Process
    versions: dict[str, str]

    @property
    def pid(self) -> int:
        return self.process.pid

    def probe(self, user_text: Callable[[], str]) -> Probe:
        """One run per call, its user message ``user_text()``; anything but ``ok`` fails the benchmark."""
        stdin, stdout = self.process.stdin, self.process.stdout
        assert stdin is not None
        assert stdout is not None

        async def probe() -> float | None:
            stdin.write(json.dumps(user_text()).encode() + b"\n")
            await stdin.drain()
            answer = await asyncio.wait_for(stdout.readline(), _RUN_TIMEOUT_SECONDS)
            if answer != b"ok\n":
                raise BenchError(f"the LangGraph peer answered {answer[:300]!r}")
            return None

        return probe


@asynccontextmanager
async def running_peer(
    *,
    cores: Cores,
    logs: Path,
    llm_url: str,
    model: str,
    rounds: int,
    database_url: str,
    system: str,
    tool: str,
    server: list[str],
) -> AsyncIterator[PeerProcess]:
    """The peer process, ready for runs, on the system-under-test core (its stdio server on the load core); it
    is stopped on exit (end of input, then SIGKILL if it lingers)."""
    log = logs / "peer-langgraph.log"
    log.parent.mkdir(parents=True, exist_ok=True)
    with log.open("wb") as errors:
        process = await asyncio.create_subprocess_exec(
            str(PEERS_VENV / "bin" / "python"),
            "-m",
            "bench.peer_langgraph",
            f"--llm-url={llm_url}",
            f"--model={model}",
            f"--rounds={rounds}",
            f"--database-url={database_url}",
            f"--system={system}",
            f"--tool={tool}",
            f"--server={json.dumps(server)}",
            f"--server-cwd={ROOT}",
            cwd=ROOT,
            env={**os.environ, "PYTHONPATH": str(ROOT), "LANGSMITH_TRACING": "false"},
            stdin=asyncio.subprocess.PIPE,
            stdout=asyncio.subprocess.PIPE,
            stderr=errors,
        )
    try:
        pin(process.pid, cores.system)
        assert process.stdout is not None
        try:
            first = await asyncio.wait_for(process.stdout.readline(), _START_TIMEOUT_SECONDS)
        except TimeoutError:
            first = b""
        if not first.startswith(b'{"ready"'):
            tail = log.read_text(errors="replace")[-2000:]
            raise BenchError(f"the LangGraph peer did not start ({first[:200]!r}); its log, {log}:\n{tail}")
        pin(process.pid, cores.system)  # threads started while it set up (its MCP loop's)
        pin_descendants(process.pid, cores.load)
        yield PeerProcess(process, json.loads(first)["versions"])
    finally:
        await _stop(process)


async def _stop(process: asyncio.subprocess.Process) -> None:
    if process.returncode is not None:
        return
    if process.stdin is not None:
        process.stdin.close()
    try:
        await asyncio.wait_for(process.wait(), 10)
    except TimeoutError:
        process.kill()
        await process.wait()
