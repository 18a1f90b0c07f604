"""The bench's CPU figures (bench/processes.py): a process's CPU time includes what its ended threads ran."""

from __future__ import annotations

import subprocess
import sys

from bench.processes import cpu_seconds

_BURNS_IN_ENDED_THREADS = """
import sys, threading, time

def burn():
    started = time.thread_time()
    while time.thread_time() - started < 0.1:
        pass

for _ in range(3):
    thread = threading.Thread(target=burn)
    thread.start()
    thread.join()
print("burnt", flush=True)
sys.stdin.readline()
"""


def test_the_cpu_of_threads_that_have_ended_is_counted() -> None:
    child = subprocess.Popen(
        [sys.executable, "-c", _BURNS_IN_ENDED_THREADS], stdin=subprocess.PIPE, stdout=subprocess.PIPE
    )
    try:
        assert child.stdout is not None
        assert child.stdout.readline() == b"burnt\n"
        assert cpu_seconds([child.pid]) >= 0.3  # three threads of 0.1 s each, all ended
    finally:
        child.communicate(b"\n", timeout=10)
    assert cpu_seconds([child.pid]) == 0.0  # an ended process counts nothing
