"""The stdio transport to a spawned MCP server, with the limits the SDK's own does not have.

The SDK's ``stdio_client`` reads the child's stdout line by line into memory without a bound, so
a server that writes without ever sending a newline grows the gateway's memory until it dies.
This transport is the SDK's (same process group, same shutdown sequence: stdin closed, then
SIGTERM and SIGKILL to the whole tree, each wait bounded), with these differences:

- a line (one JSON-RPC message) longer than ``max_line_bytes`` ends the session: the child is
  killed at once and ``on_fatal`` says why;
- a line that is not a JSON-RPC message (a banner, a stray ``print``) is skipped and reported to
  ``on_noise``, instead of reaching the session as an exception; a message nested too deeply for
  the SDK's parser is parsed again by the standard library's, and an answer that cannot be
  parsed at all fails its request at once (``PARSE_ERROR``) instead of leaving it to time out;
- the child's environment is exactly ``env``: nothing is inherited implicitly;
- the child's stderr is read here, on a pipe of its own, in lines of at most
  ``STDERR_LINE_BYTES`` (the rest of a longer line is skipped), each handed to ``on_stderr``:
  a child can neither fill the gateway's own stderr nor write lines that pass for the gateway's.
"""

from __future__ import annotations

import json
import os
import re
import signal
from collections.abc import AsyncIterator, Awaitable, Callable, Mapping, Sequence
from contextlib import asynccontextmanager, suppress
from pathlib import Path

import anyio
import anyio.lowlevel
from anyio.abc import Process
from mcp.client._transport import TransportStreams
from mcp.client.stdio import _drain_stdout, _stop_server_process
from mcp.shared.message import SessionMessage
from mcp_types import PARSE_ERROR, ErrorData, JSONRPCError, JSONRPCMessage, jsonrpc_message_adapter
from pydantic import ValidationError

from mcp_client_service.config.options import DEFAULT_MAX_LINE_BYTES

__all__ = [
    "STDERR_LINE_BYTES",
    "bounded_stdio_transport",
    "describe_exit",
    "inherited_environment",
    "split_lines",
]

STDERR_LINE_BYTES = 4096
"""Longest stderr line handed on; the rest of a longer one is skipped."""

_STDERR_DRAIN_SECONDS = 1.0
"""After the child is stopped, how long what it wrote to stderr before it ended may take to be read."""

_ANSWER_ID = re.compile(
    rb'^\s*\{\s*"jsonrpc"\s*:\s*"2\.0"\s*,\s*"id"\s*:\s*(-?\d+|"(?:[^"\\]|\\.){0,200}")\s*,\s*"(?:result|error)"'
)
"""The id of an answer written in the usual key order, read from its first bytes."""

_WRITER_FLUSH_TIMEOUT = 0.5
"""As the SDK: time for accepted messages to reach the child before its stdin closes."""

_NOISE_PREVIEW_CHARS = 120


def inherited_environment(environ: Mapping[str, str], names: Sequence[str]) -> dict[str, str]:
    """The variables of ``names`` that ``environ`` has, without exported shell functions (``()...``)."""
    return {name: environ[name] for name in names if name in environ and not environ[name].startswith("()")}


def describe_exit(status: int) -> str:
    """``the server process exited with status 1`` / ``... was killed by signal SIGKILL``."""
    if status < 0:
        try:
            name = signal.Signals(-status).name
        except ValueError:
            name = str(-status)
        return f"the server process was killed by signal {name}"
    return f"the server process exited with status {status}"


def _parse_message(line: bytes) -> JSONRPCMessage | None:
    """``line`` as a JSON-RPC message; the standard library's parser for one nested beyond the SDK's."""
    try:
        return jsonrpc_message_adapter.validate_json(line, by_name=False)
    except (ValidationError, ValueError):
        pass
    try:
        return jsonrpc_message_adapter.validate_python(json.loads(line), by_name=False)
    except (ValidationError, ValueError, RecursionError):
        return None


def _unreadable_answer(line: bytes) -> JSONRPCError | None:
    """An error answer to the request that ``line`` answers but cannot be parsed, if its id can be read."""
    match = _ANSWER_ID.match(line[:512])
    if match is None:
        return None
    request_id = json.loads(match.group(1))
    detail = (
        f"the MCP server's answer ({len(line)} bytes) could not be parsed as JSON-RPC "
        "(malformed, or nested too deeply for a JSON parser)"
    )
    return JSONRPCError(jsonrpc="2.0", id=request_id, error=ErrorData(code=PARSE_ERROR, message=detail))


def split_lines(pending: bytes | bytearray, chunk: bytes, max_line_bytes: int) -> tuple[list[bytes], int]:
    """The lines ``chunk`` ends, and where in ``chunk`` the unterminated rest starts.

    ``pending`` is what came before ``chunk`` without a newline: it starts the first line. The
    split stops before a line longer than ``max_line_bytes`` (newline excluded): that line and
    everything after it is the rest, so the caller sees ``pending`` grow past the limit. Pure,
    so the stdout reader's framing can be checked byte by byte without a process.
    """
    lines: list[bytes] = []
    start = 0
    while (end := chunk.find(b"\n", start)) >= 0:
        before = len(pending) if not lines else 0
        if before + end - start > max_line_bytes:
            break
        lines.append(bytes(pending) + chunk[start:end] if before else chunk[start:end])
        start = end + 1
    return lines, start


def _pipe_reader(fd: int) -> Callable[[], Awaitable[bytes]]:
    """Reads of at most 64 KiB from the non-blocking pipe ``fd`` (``b""`` at its end)."""

    async def read() -> bytes:
        while True:
            try:
                return os.read(fd, 65536)
            except BlockingIOError:
                await anyio.wait_readable(fd)

    return read


async def _read_stderr_lines(read: Callable[[], Awaitable[bytes]], on_line: Callable[[str], None]) -> None:
    """Every line ``read`` yields, cut to ``STDERR_LINE_BYTES`` (a longer line's rest is skipped)."""
    pending = bytearray()
    skipping = False

    def emit(raw: bytes, cut: bool) -> None:
        text = raw.rstrip(b"\r").decode("utf-8", "replace")
        on_line(text + (" [...]" if cut else ""))

    while chunk := await read():
        start = 0
        while (end := chunk.find(b"\n", start)) >= 0:
            if not skipping:
                pending += chunk[start:end]
                emit(bytes(pending[:STDERR_LINE_BYTES]), len(pending) > STDERR_LINE_BYTES)
            pending.clear()
            skipping = False
            start = end + 1
        if not skipping:
            pending += chunk[start:]
            if len(pending) > STDERR_LINE_BYTES:
                emit(bytes(pending[:STDERR_LINE_BYTES]), True)
                pending.clear()
                skipping = True
    if pending and not skipping:
        emit(bytes(pending), False)


def _kill_group(process: Process) -> None:
    # The child leads its own process group (start_new_session); a server that broke the
    # protocol gets no grace period, and neither do the children it spawned.
    with suppress(ProcessLookupError, PermissionError):
        os.killpg(process.pid, signal.SIGKILL)


async def _spawn(command: str, args: Sequence[str], env: dict[str, str], cwd: Path | None) -> tuple[Process, int]:
    """The child, leading a process group of its own, and the (non-blocking) read end of its stderr pipe."""
    # stderr on a pipe of our own: the SDK's shutdown closes the process's pipes, and what the
    # child wrote just before it ended must still be read after that.
    stderr_read, stderr_write = os.pipe()
    try:
        os.set_blocking(stderr_read, False)
        process = await anyio.open_process(
            [command, *args], env=env, cwd=cwd, stderr=stderr_write, start_new_session=True
        )
    except BaseException:
        os.close(stderr_read)
        raise
    finally:
        os.close(stderr_write)  # the child has its copy: the pipe ends when the child (and its children) do
    return process, stderr_read


class _ChildPipes:
    """The tasks that carry one child's stdin, stdout and stderr, and its shutdown.

    ``read_stream`` and ``write_stream`` are the session's ends of them.
    """

    def __init__(
        self,
        process: Process,
        stderr_read: int,
        *,
        max_line_bytes: int,
        on_noise: Callable[[str], None],
        on_fatal: Callable[[str], None],
        on_exit: Callable[[int | None], None],
        on_stderr: Callable[[str], None],
    ) -> None:
        self._process = process
        self._stderr_read = stderr_read
        self._max_line_bytes = max_line_bytes
        self._on_noise, self._on_fatal, self._on_exit, self._on_stderr = on_noise, on_fatal, on_exit, on_stderr
        self._read_stream_writer, self.read_stream = anyio.create_memory_object_stream[SessionMessage | Exception](0)
        self.write_stream, self._write_stream_reader = anyio.create_memory_object_stream[SessionMessage](0)
        self._writer_done = anyio.Event()
        self._stderr_done = anyio.Event()
        self._stderr_scope = anyio.CancelScope()

    async def _deliver(self, line: bytes) -> None:
        line = line.rstrip(b"\r")
        if not line.strip():
            return
        message = _parse_message(line)
        if message is None:
            unreadable = _unreadable_answer(line)
            if unreadable is not None:
                await self._read_stream_writer.send(SessionMessage(unreadable))
                return
            preview = line[:_NOISE_PREVIEW_CHARS].decode("utf-8", "replace")
            self._on_noise(preview + ("..." if len(line) > _NOISE_PREVIEW_CHARS else ""))
            return
        await self._read_stream_writer.send(SessionMessage(message))

    async def read_stderr(self) -> None:
        try:
            with self._stderr_scope, suppress(OSError):
                await _read_stderr_lines(_pipe_reader(self._stderr_read), self._on_stderr)
        finally:
            self._stderr_done.set()

    async def read_stdout(self) -> None:
        process, max_line_bytes = self._process, self._max_line_bytes
        assert process.stdout is not None
        pending = bytearray()
        try:
            async with self._read_stream_writer:
                try:
                    async for chunk in process.stdout:
                        lines, rest = split_lines(pending, chunk, max_line_bytes)
                        if lines:
                            pending.clear()
                        for line in lines:
                            await self._deliver(line)
                        pending += chunk[rest:]
                        if len(pending) > max_line_bytes:
                            _kill_group(process)
                            self._on_fatal(
                                f"the server wrote more than {max_line_bytes} bytes without a newline "
                                "(MCP_CLIENT_STDIO_MAX_LINE_BYTES), so its session was closed"
                            )
                            return
                finally:
                    pending.clear()
                    await _drain_stdout(process)
        except (anyio.ClosedResourceError, anyio.BrokenResourceError, ConnectionError):
            pass  # the session is gone or our own shutdown closed the pipe: the session sees the end

    async def write_stdin(self) -> None:
        stdin = self._process.stdin
        assert stdin is not None
        try:
            async with self._write_stream_reader:
                async for session_message in self._write_stream_reader:
                    text = session_message.message.model_dump_json(by_alias=True, exclude_unset=True)
                    await stdin.send((text + "\n").encode())
        except (anyio.ClosedResourceError, anyio.BrokenResourceError, OSError):
            await self._read_stream_writer.aclose()  # the session sees the end instead of a request hanging
        finally:
            self._writer_done.set()

    async def shutdown(self) -> None:
        self.read_stream.close()
        self.write_stream.close()
        with anyio.move_on_after(_WRITER_FLUSH_TIMEOUT):
            await self._writer_done.wait()
        await _stop_server_process(self._process)
        self._on_exit(self._process.returncode)
        with anyio.move_on_after(_STDERR_DRAIN_SECONDS):
            await self._stderr_done.wait()
        self._stderr_scope.cancel()
        for stream in (self.read_stream, self.write_stream, self._read_stream_writer, self._write_stream_reader):
            await stream.aclose()
        await anyio.lowlevel.checkpoint()


@asynccontextmanager
async def bounded_stdio_transport(
    command: str,
    args: Sequence[str],
    *,
    env: dict[str, str],
    cwd: Path | None = None,
    max_line_bytes: int = DEFAULT_MAX_LINE_BYTES,
    on_noise: Callable[[str], None] = lambda _: None,
    on_fatal: Callable[[str], None] = lambda _: None,
    on_exit: Callable[[int | None], None] = lambda _: None,
    on_stderr: Callable[[str], None] = lambda _: None,
) -> AsyncIterator[TransportStreams]:
    """Spawn ``command`` and yield the session's streams over its stdin/stdout.

    ``on_exit`` gets the child's exit status once it is gone (negative: the signal that ended it).
    Raises ``OSError`` if the process cannot be started.
    """
    process, stderr_read = await _spawn(command, args, env, cwd)
    # As in the SDK: no await between the spawn and the task group, or a cancellation there
    # would leak the live process.
    pipes = _ChildPipes(
        process,
        stderr_read,
        max_line_bytes=max_line_bytes,
        on_noise=on_noise,
        on_fatal=on_fatal,
        on_exit=on_exit,
        on_stderr=on_stderr,
    )
    try:
        async with anyio.create_task_group() as tg:
            tg.start_soon(pipes.read_stdout)
            tg.start_soon(pipes.write_stdin)
            tg.start_soon(pipes.read_stderr)
            try:
                yield pipes.read_stream, pipes.write_stream
            finally:
                # Bounded inside, and shielded so that a cancelled caller cannot leak the child.
                with anyio.CancelScope(shield=True):
                    await pipes.shutdown()
                tg.cancel_scope.cancel()
    finally:
        os.close(stderr_read)  # no task waits on it any more
    await anyio.lowlevel.cancel_shielded_checkpoint()
