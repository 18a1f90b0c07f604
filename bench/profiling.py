"""``--profile``: py-spy samples the services while a benchmark loads them.

For each profiled process it writes the collapsed stacks (``<label>-<service>.collapsed``,
loadable in speedscope or flamegraph.pl) and a summary (``.top.txt``) of where the busy samples
went: by the project function that made the call and the package it called into (the view that
says what to fix), by package, by function (own and inclusive).

py-spy cannot tell a thread that waits for the CPU (or sits in a ``send`` that woke a peer on the
same core) from one that computes, so samples whose innermost frame is the event loop itself or a
socket write/read are counted apart as "waiting or in a syscall", and the rest is close to CPU
time (checked against /proc schedstat). Sampling slows the services a little: a profiled run's
figures are not the ones to quote.
"""

from __future__ import annotations

import contextlib
import re
import shutil
import signal
import subprocess
import sys
import time
from collections import Counter
from collections.abc import Iterator, Sequence
from pathlib import Path

from bench.processes import Service

__all__ = ["profiling", "summarise"]

_RATE = 250
_FRAME = re.compile(r"^(?P<function>.*?) \((?P<path>[^()]*?)(?::\d+)?\)$")
_SHORTEN = re.compile(r"^.*/(?:site-packages|src|lib/python3\.\d+)/")
_PROJECT = ("suite_common/", "agent_service/", "completion_service/", "mcp_client_service/")
_WAITING = frozenset(
    {
        *("Runner.run", "SocketStream.send", "SocketStream.receive", "RequestResponseCycle.send"),
        *("StreamWriter._write", "StreamWriter._writelines"),  # aiohttp's client writing a request: a socket write
        "StreamWriter.writelines",  # asyncio's (the Redis client's)
        "PeerConnection.send",  # agent-service's client of its siblings: a timer set, then the socket write
    }
)
"""Innermost frames that stand for the event loop's own wait (epoll, from C) or a socket syscall (a write on loopback
wakes the peer: on a shared core the writer is often preempted there, and sampled as if it computed)."""

_SERVER_FRAMES: tuple[str, ...] = (
    *("<frozen", "runpy", "asyncio/", "anyio/", "uvicorn/main.py", "uvicorn/server.py", "uvicorn/_compat.py"),
    *_PROJECT,  # only entry points reach here: see _is_project_code
)
"""Frames below any request's work: event loop, task runners, the server's entry, the service's main."""

Frame = tuple[str, str]


def _py_spy() -> str:
    beside = Path(sys.executable).parent / "py-spy"
    found = str(beside) if beside.exists() else shutil.which("py-spy")
    if found is None:
        raise SystemExit("--profile needs py-spy (in requirements-dev.txt): .venv/bin/pip install py-spy")
    return found


def _frame(raw: str) -> Frame:
    """``(function, short path)`` of a py-spy frame ``function (path:line)``."""
    match = _FRAME.match(raw.strip())
    if match is None:
        return raw.strip(), "?"
    return match["function"], _SHORTEN.sub("", match["path"])


def _package(path: str) -> str:
    return path.split("/", 1)[0]


def _is_project_code(path: str) -> bool:
    # A service's entry point (``serve``, ``__main__``) is below everything: it says nothing of who calls what.
    return path.startswith(_PROJECT) and not path.endswith(("/serve.py", "/__main__.py"))


def _caller_and_callee(frames: list[Frame]) -> str:
    """``project function -> package it called`` for the innermost project frame of a stack."""
    innermost = max((i for i, (_, path) in enumerate(frames) if _is_project_code(path)), default=None)
    if innermost is None:
        below_server = [path for _, path in frames if not path.startswith(_SERVER_FRAMES)]
        return f"(no project frame) {_package(below_server[0] if below_server else frames[-1][1])}"
    function, path = frames[innermost]
    callee = "its own code" if innermost == len(frames) - 1 else _package(frames[innermost + 1][1])
    return f"{function} ({path}) -> {callee}"


def summarise(collapsed: str, top: int = 30) -> str:
    """Busy samples by caller -> callee, by package, and by function (own and inclusive)."""
    by_call: Counter[str] = Counter()
    packages: Counter[str] = Counter()
    own: Counter[str] = Counter()
    inclusive: Counter[str] = Counter()
    busy = waiting = 0
    for line in collapsed.splitlines():
        stack, _, count_text = line.rpartition(" ")
        if not stack or not count_text.isdigit():
            continue
        count = int(count_text)
        frames = [_frame(frame) for frame in stack.split(";")]
        if frames[-1][0] in _WAITING:
            waiting += count
            continue
        busy += count
        leaf_function, leaf_path = frames[-1]
        own[f"{leaf_function} ({leaf_path})"] += count
        packages[_package(leaf_path)] += count
        by_call[_caller_and_callee(frames)] += count
        for name in {f"{function} ({path})" for function, path in frames}:
            inclusive[name] += count
    if not busy:
        return "no busy samples (was the process loaded?)\n"

    def block(title: str, counter: Counter[str]) -> list[str]:
        rows = [f"{title} (% of {busy} busy samples at {_RATE} Hz)"]
        rows += [f"{count / busy * 100:6.1f}%  {name}" for name, count in counter.most_common(top)]
        return [*rows, ""]

    lines = [f"busy samples: {busy}; waiting or in a syscall (not counted below): {waiting}", ""]
    lines += block("by project function -> the package it called", by_call)
    lines += block("own time by package", packages)
    lines += block("own time by function", own)
    lines += block("inclusive time by function", inclusive)
    return "\n".join(lines)


@contextlib.contextmanager
def profiling(services: Sequence[Service], folder: Path, label: str, *, enabled: bool) -> Iterator[None]:
    """Record ``services`` with py-spy while the body runs (nothing when not ``enabled``)."""
    if not enabled:
        yield
        return
    folder.mkdir(parents=True, exist_ok=True)
    spies: list[tuple[Service, Path, subprocess.Popen[bytes]]] = []
    for service in services:
        output = folder / f"{label}-{service.name}.collapsed"
        command = [_py_spy(), "record", "--pid", str(service.pid), "--rate", str(_RATE), "--format", "raw"]
        command += ["--output", str(output), "--nonblocking", "--full-filenames"]
        spy = subprocess.Popen(command, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        spies.append((service, output, spy))
    time.sleep(0.5)  # py-spy attaches asynchronously; without this the first samples are lost
    try:
        yield
    finally:
        for _, _, spy in spies:
            spy.send_signal(signal.SIGINT)
        for service, output, spy in spies:
            try:
                spy.wait(timeout=60)
            except subprocess.TimeoutExpired:
                spy.kill()
            if output.exists():
                (folder / f"{label}-{service.name}.top.txt").write_text(summarise(output.read_text()))
