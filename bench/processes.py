"""The processes of a benchmark: started on loopback, pinned to a core, waited for, measured, stopped.

The system under test runs on one core and everything else (the load client, fake upstreams,
MCP echo servers) on the other, so that neither steals the other's CPU. A stdio MCP server that
a service spawns inherits the service's core; ``pin_descendants`` moves it to the upstreams'.
"""

from __future__ import annotations

import contextlib
import os
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Iterator, Sequence
from contextlib import ExitStack
from dataclasses import dataclass
from pathlib import Path

import httpx

__all__ = [
    "ROOT",
    "CoreTimes",
    "Cores",
    "Service",
    "cpu_seconds",
    "free_port",
    "pin",
    "pin_descendants",
    "rss_bytes",
    "start",
]

ROOT = Path(__file__).resolve().parents[1]

_READY_TIMEOUT_SECONDS = 120.0


@dataclass(frozen=True)
class Cores:
    """Which CPUs the system under test and the load (client and upstreams) may use."""

    system: frozenset[int]
    load: frozenset[int]

    @property
    def pinned(self) -> bool:
        return self.system != self.load

    @classmethod
    def choose(cls) -> Cores:
        """The first CPU for the system under test, the rest for the load; one CPU: no pinning."""
        available = sorted(os.sched_getaffinity(0))
        if len(available) < 2:
            return cls(frozenset(available), frozenset(available))
        return cls(frozenset(available[:1]), frozenset(available[1:]))

    def describe(self) -> str:
        if not self.pinned:
            return f"not pinned: only CPU {sorted(self.system)} is available, shared by everything"
        return (
            f"system under test pinned to CPU {_cpus(self.system)}; load client, fake upstreams and MCP echo "
            f"servers pinned to CPU {_cpus(self.load)}"
        )


def _cpus(cpus: frozenset[int]) -> str:
    return ",".join(str(cpu) for cpu in sorted(cpus))


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
        return port


def _threads(pid: int) -> list[int]:
    try:
        return [int(tid) for tid in os.listdir(f"/proc/{pid}/task")]
    except OSError:
        return []


def _pin(pid: int, cpus: frozenset[int]) -> None:
    """Every thread of ``pid`` onto ``cpus`` (a thread made before the first call keeps its old mask)."""
    for tid in _threads(pid) or [pid]:
        with contextlib.suppress(OSError):  # a thread that has just ended
            os.sched_setaffinity(tid, cpus)


def _children(pid: int) -> list[int]:
    children: list[int] = []
    for tid in _threads(pid):
        try:
            with open(f"/proc/{pid}/task/{tid}/children") as file:
                children += [int(child) for child in file.read().split()]
        except OSError:
            continue
    return children


def pin(pid: int, cpus: frozenset[int]) -> None:
    """Move the running process ``pid`` (every thread) onto ``cpus``; its children stay where they are."""
    _pin(pid, cpus)


def pin_descendants(pid: int, cpus: frozenset[int]) -> list[int]:
    """Move every process below ``pid`` (stdio MCP servers a service spawned) onto ``cpus``."""
    moved: list[int] = []
    pending = _children(pid)
    while pending:
        child = pending.pop()
        _pin(child, cpus)
        moved.append(child)
        pending += _children(child)
    return moved


def _process_cpu_clock(pid: int) -> int:
    """The id of ``pid``'s CPU-time clock, as ``clock_getcpuclockid(3)`` makes it (glibc: CPUCLOCK_SCHED of the
    process, every thread's run time in nanoseconds, those that have ended included)."""
    return ((~pid) << 3) | 2


def cpu_seconds(pids: Sequence[int]) -> float:
    """CPU time ``pids`` have run so far, in seconds: all their threads', those that have ended too (a graph runner
    that starts a thread pool per step, say: summing its live threads' counters missed a quarter of its CPU)."""
    total = 0.0
    for pid in pids:
        try:
            total += time.clock_gettime(_process_cpu_clock(pid))
        except OSError:  # the process has ended
            continue
    return total


@dataclass(frozen=True)
class CoreTimes:
    """Busy and total time of some CPUs so far (``/proc/stat`` ticks), whoever ran on them."""

    busy: int
    total: int

    @classmethod
    def read(cls, cpus: frozenset[int]) -> CoreTimes:
        busy = total = 0
        try:
            with open("/proc/stat") as stat:
                for line in stat:
                    name, *fields = line.split()
                    if name.startswith("cpu") and name[3:].isdigit() and int(name[3:]) in cpus:
                        ticks = [int(field) for field in fields[:8]]  # user .. steal; guest is inside user
                        total += sum(ticks)
                        busy += sum(ticks) - ticks[3] - ticks[4]  # less idle and iowait
        except OSError:
            pass
        return cls(busy, total)

    def busy_since(self, before: CoreTimes) -> float:
        """The share of time these CPUs were busy since ``before`` (0..1; every process, ours or not)."""
        total = self.total - before.total
        return (self.busy - before.busy) / total if total > 0 else 0.0


def rss_bytes(pid: int) -> int:
    """Resident memory of ``pid`` now, from ``/proc``."""
    with open(f"/proc/{pid}/status") as status:
        for line in status:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) * 1024
    raise RuntimeError(f"no VmRSS for {pid}")


@dataclass
class Service:
    name: str
    process: subprocess.Popen[bytes]
    url: str

    @property
    def pid(self) -> int:
        return self.process.pid

    @property
    def port(self) -> int:
        return int(self.url.rsplit(":", 1)[1])


def _stop(process: subprocess.Popen[bytes]) -> None:
    if process.poll() is None:
        process.send_signal(signal.SIGTERM)
        try:
            process.wait(timeout=10)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()


def _wait_ready(name: str, process: subprocess.Popen[bytes], ready_url: str, log: Path) -> None:
    give_up = time.monotonic() + _READY_TIMEOUT_SECONDS
    with httpx.Client(timeout=2.0) as http:
        while time.monotonic() < give_up:
            if process.poll() is not None:
                tail = log.read_text(errors="replace")[-2000:]
                raise SystemExit(f"{name} exited with code {process.returncode} while starting:\n{tail}")
            try:
                if http.get(ready_url).status_code < 500:
                    return
            except httpx.HTTPError:
                pass
            time.sleep(0.05)
    raise SystemExit(f"{name} was not ready within {_READY_TIMEOUT_SECONDS:.0f} s ({ready_url}); see {log}")


@contextlib.contextmanager
def _log_file(path: Path) -> Iterator[int]:
    path.parent.mkdir(parents=True, exist_ok=True)
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
    try:
        yield fd
    finally:
        os.close(fd)


def start(
    stack: ExitStack,
    name: str,
    args: list[str],
    *,
    port: int,
    cpus: frozenset[int],
    logs: Path,
    env: dict[str, str] | None = None,
    ready_path: str = "/healthz",
) -> Service:
    """Start ``args`` (``python`` is this interpreter) on ``cpus``, wait until ``ready_path`` answers
    below 500, and stop it (SIGTERM, then SIGKILL) when ``stack`` closes. Its output goes to a log file."""
    command = [sys.executable if arg == "python" else arg for arg in args]
    log = logs / f"{name}.log"
    with _log_file(log) as fd:
        process = subprocess.Popen(
            command, cwd=ROOT, env={**os.environ, **(env or {})}, stdout=fd, stderr=fd, stdin=subprocess.DEVNULL
        )
    stack.callback(_stop, process)
    _pin(process.pid, cpus)
    url = f"http://127.0.0.1:{port}"
    _wait_ready(name, process, url + ready_path, log)
    _pin(process.pid, cpus)  # threads started while it booted
    return Service(name, process, url)
