"""One run's journal: its events numbered, handed to the attached client, and stored with each step.

The loop reports its steps here (``RunRecorder``); each step is one store transaction carrying the step's
messages and every event emitted since the previous one. Events not stored yet stay readable here, so a
client following the run on this replica sees text as it is generated, not a step later.

What a client is told must be what the run's store says, even if this replica dies the next instant: an event that
states what the run did (``DURABLE_EVENTS``: a tool call, its result, the run's end) reaches a client only once it
is stored, and the events after it wait behind it (``_held``). This costs no write of its own: the tool calls are
stored with their turn before any tool runs, a result by the write that already follows it (while the run goes on to
its next LLM call), the final answer and ``done`` by the run's end.

Each tool call's audit row goes with the write that stores its result; a call that ended without one (cancelled, or
cut short by the run's failure) has its row stored by the run's end, which answers it.
"""

from __future__ import annotations

import asyncio
import functools
import time
from collections import deque
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import replace

import anyio

from agent_service.core.errors import UpstreamError
from agent_service.core.images import DecodedImage, by_reference
from agent_service.core.run import AskedInput, LlmCall, RunOutcome, ToolCallRecord
from agent_service.infra.telemetry import RunTelemetry
from agent_service.store import LeaseLost, NewApproval, Parked, RunStore, Step, StoredEvent, StoreError
from suite_common.logging import get_logger
from suite_common.wire import (
    Message,
    RunError,
    RunErrorDetail,
    RunEvent,
    ToolCall,
    Usage,
    dump,
)

__all__ = ["DURABLE_EVENTS", "TERMINAL_EVENTS", "LiveSink", "RunJournal", "RunMoved", "StoredEventSink"]

_log = get_logger("agent_service.runs")

StoredEventSink = Callable[[StoredEvent], Awaitable[None]]
"""Where a follower's events go, as stored."""
LiveSink = Callable[[RunEvent, StoredEvent], Awaitable[None]]
"""Where the attached client's events go, as emitted and as stored (numbered and encoded)."""

TERMINAL_EVENTS = frozenset({"done", "error"})
"""A run's last stored event is one of these."""
DURABLE_EVENTS = frozenset(
    {
        "tool_call",
        "tool_result",
        "approval_required",
        "approval_decided",
        "input_required",
        "input_decided",
        *TERMINAL_EVENTS,
    }
)
"""Events that state what the run did: told to a client (attached, or following on this replica) once stored only.
The others (text, reasoning, progress) are told as they come: a run taken over after a crash says so
(``run_resumed``) and asks the model again for an answer whose end was not stored."""


class RunMoved(UpstreamError):
    """Another replica took the run over (this one's lease had expired): this one stops and writes nothing more."""

    def __init__(self, run_id: str) -> None:
        super().__init__(
            "run_moved",
            f"Another instance took this run over; follow it at GET /api/v1/agent/runs/{run_id}/events.",
            status=409,
        )


def _not_stored() -> UpstreamError:
    return UpstreamError(
        "store_unavailable",
        "The run could not be stored: the run store is unavailable.",
        status=503,
        headers={"Retry-After": "1"},
    )


@functools.cache
def _no_telemetry() -> RunTelemetry:
    """One for every journal given none: a ``RunTelemetry`` registers its metrics anew, too much to build per run."""
    return RunTelemetry.disabled()


_LOG_CALLS_SECONDS = 2.0
"""How long logging the calls of a run being handed over may hold up the shutdown (one short write)."""


class RunJournal:
    """Implements the loop's ``RunRecorder``. Without a store, it only numbers events and hands them on."""

    def __init__(
        self,
        run_id: str,
        *,
        store: RunStore | None,
        owner: str,
        base: int,
        next_seq: int = 1,
        attempt: int = 0,
        send: LiveSink | None = None,
        telemetry: RunTelemetry | None = None,
    ) -> None:
        """``base``: the position in the loop's conversation of the run's first own message (the earlier runs'
        messages of its conversation come before it). ``attempt``: the run's ``resumes`` (0 unless taken over),
        stamped on each LLM call it logs. ``send``: the client attached to the run, if any."""
        self.run_id = run_id
        self.attempt = attempt
        self.store = store
        self.owner = owner
        self.base = base
        self.next_seq = next_seq
        self.send = send
        self.telemetry = telemetry or _no_telemetry()
        self.flushed_seq = next_seq - 1
        self.unflushed: list[StoredEvent] = []
        """Emitted, not stored yet, in order; removed from the front once stored."""
        self.recorded: set[int] = set()
        """The run's own positions stored so far."""
        self.open_calls: dict[str, tuple[int, ToolCall]] = {}
        """The last assistant turn's calls still without a stored result: id → (position, call)."""
        self.iterations = 0
        self.usage = Usage()
        self.unlogged: list[LlmCall] = []
        """LLM calls not in the usage log yet: written with the next step (the final answer's, with the run's end).
        A write that failed leaves them here, and the run's end writes them again: if that write had committed
        unseen, the store skips the calls already logged (each is identified by its round and ``attempt``)."""
        self.unaudited: list[ToolCallRecord] = []
        """Audit rows of tool calls not stored yet that the run's end stores: calls that ended without a result of
        their own, and those whose result's write failed (the end writes them again; a row that committed unseen is
        skipped by the store, as a usage row is)."""
        self.ended = anyio.Event()
        self._writing: list[asyncio.Task[None]] = []
        """Result writes under way (``result``)."""
        self._write_lock = anyio.Lock()
        self._changed: anyio.Event | None = None
        self._held: deque[tuple[RunEvent, StoredEvent]] = deque()
        self.asked_here = False
        """A tool server asked a question during this run here (stored pending before its run parks)."""
        """Emitted, not sent to the attached client yet: from the first durable event not stored yet on, in order."""
        self._send_lock = anyio.Lock(fast_acquire=True)
        """Held events go out one sender at a time (a result's write ends in its own task)."""

    # --- events ---------------------------------------------------------------------------------------

    async def emit(self, event: RunEvent) -> None:
        if self.store is None and self.send is None:  # nobody reads it (a run not stored, answered as JSON)
            self.next_seq += 1
            return
        stored = StoredEvent(self.next_seq, event.type, dump(event))
        self.next_seq += 1
        if self.store is not None:
            self.unflushed.append(stored)
            self._wake()
            if self.send is not None and (self._held or event.type in DURABLE_EVENTS):
                self._held.append((event, stored))  # sent by the write that stores it (``_release``)
                return
        if self.send is not None:
            await self.send(event, stored)

    async def _release(self) -> None:
        """Send the attached client the held events that may go now: up to the first durable one not stored yet."""
        if not self._held:
            return
        async with self._send_lock:
            while self._held:
                event, stored = self._held[0]
                if event.type in DURABLE_EVENTS and stored.seq > self.flushed_seq:
                    return
                if self.send is not None:
                    await self.send(event, stored)
                # Taken off only once sent: an event emitted meanwhile sees one held, and queues behind it.
                self._held.popleft()

    async def tell(self, event: RunEvent) -> None:
        """Tell the attached client ``event``, which is not stored (why its stream ends here, while the run's stored
        events end elsewhere or never): after the held events stored, instead of those that are not."""
        await self._settle(raise_failure=False)
        await self._release()
        self._held.clear()
        if self.send is not None:
            await self.send(event, StoredEvent(self.next_seq, event.type, dump(event)))

    def snapshot(self, after: int) -> tuple[int, list[StoredEvent]]:
        """``(flushed_seq, events after ``after`` not stored yet that may be told)``, taken at one instant: together
        with the store's events up to ``flushed_seq`` they are every event after ``after`` up to the first durable
        one not stored yet (told once stored: ``wait_changed`` returns then)."""
        tail = []
        for event in self.unflushed:
            if event.type in DURABLE_EVENTS:
                break
            if event.seq > after:
                tail.append(event)
        return self.flushed_seq, tail

    async def wait_changed(self) -> None:
        """Returns when an event is emitted or stored (bound the wait with a cancel scope)."""
        if self._changed is None:
            self._changed = anyio.Event()
        await self._changed.wait()

    def _wake(self) -> None:
        if self._changed is not None:
            self._changed.set()
            self._changed = None

    # --- the loop's RunRecorder -----------------------------------------------------------------------

    async def turn(self, position: int, message: Message, *, iterations: int, usage: Usage, call: LlmCall) -> None:
        local = position - self.base
        calls = message.tool_calls or []
        self.open_calls = {tool_call.id: (local + 1 + index, tool_call) for index, tool_call in enumerate(calls)}
        self.iterations, self.usage = iterations, usage
        self.unlogged.append(replace(call, attempt=self.attempt))
        if not calls:
            # The final answer: written with the run's end (``finish``), which comes right after; one write
            # less per run. A crash in between makes the replica that takes over ask the model again (its client
            # was not told ``done``: that waits for the end's write).
            return
        await self._write(Step(messages=[(local, message)], status="tool_loop", iterations=iterations, usage=usage))
        await self._release()  # its tool calls

    async def repair(self, position: int, answer: Message, prompt: Message, *, iterations: int, usage: Usage) -> None:
        # The one path where a final answer is not the run's last step: stored now with the message that follows
        # it, so that the positions after it (the repair round's) have no gap, and a takeover resumes the round.
        local = position - self.base
        self.iterations, self.usage = iterations, usage
        step = Step(
            messages=[(local, answer), (local + 1, prompt)], status="tool_loop", iterations=iterations, usage=usage
        )
        await self._write(step)
        await self._release()

    async def result(self, position: int, message: Message, *, audit: ToolCallRecord | None) -> None:
        if message.tool_call_id is not None:
            self.open_calls.pop(message.tool_call_id, None)
        # Not awaited: the run goes on (to its next LLM call) while the result is written, and its ``tool_result``
        # event goes to the client once written. The next step's write and the run's end wait for it first, so
        # that a result that could not be stored still fails the run before any other tool runs; a crash before
        # it is stored makes the call one without a stored result, which no client was told.
        audited = [replace(audit, attempt=self.attempt)] if audit is not None else []
        step = Step(messages=[(position - self.base, message)], tool_calls=audited)
        write = asyncio.get_running_loop().create_task(self._store_result(step))
        self._writing.append(write)

    async def _store_result(self, step: Step) -> None:
        await self._write(step, settle=False)
        try:
            await self._release()
        except OSError:  # the client has gone (its stream says so itself): not a failure to store
            self.send = None
            self._held.clear()

    def unanswered(self, audit: ToolCallRecord) -> None:
        self.unaudited.append(replace(audit, attempt=self.attempt))

    async def cut_off(self, call: LlmCall, *, usage: Usage) -> None:
        # Nothing written now (the run is being cut short): the run's end, which comes next, logs it and stores
        # ``usage`` (``finish``, or ``finish_cancelled`` with ``self.usage``).
        self.usage = usage
        self.unlogged.append(replace(call, attempt=self.attempt))

    async def log_calls(self) -> None:
        """Log the calls no step logged yet (a call cut off by the shutdown that hands the run over, whose estimate
        is in the budgets already, and the audit rows of the tool calls it cancelled), with the run's usage so far,
        and nothing else: the run's messages and events stay
        as stored, for the replica that takes it over. Shielded and bounded (``_LOG_CALLS_SECONDS``); a failure is
        noted only (the run is being handed over: its lease lapses either way)."""
        store = self.store
        if store is None or not (self.unlogged or self.unaudited):
            return
        with anyio.CancelScope(shield=True), anyio.move_on_after(_LOG_CALLS_SECONDS):
            async with self._write_lock:
                logged, audited = list(self.unlogged), list(self.unaudited)
                step = Step(usage=self.usage, calls=logged, tool_calls=audited)
                try:
                    await store.record(self.run_id, step, owner=self.owner)
                except (LeaseLost, StoreError) as error:
                    _log.warning("run_calls_not_logged", run_id=self.run_id, calls=len(logged), error=str(error))
                    return
                del self.unlogged[: len(logged)]
                del self.unaudited[: len(audited)]

    async def _settle(self, *, raise_failure: bool = True) -> None:
        """Wait for the results being written; raise the first failure among them (``raise_failure``)."""
        writing, self._writing = self._writing, []
        failure: BaseException | None = None
        for write in writing:
            try:
                await write
            except Exception as error:
                failure = failure or error
        if failure is not None and raise_failure:
            raise failure

    async def flush(self) -> None:
        """Store the events emitted since the last step now, changing nothing else."""
        await self._write(Step())
        await self._release()

    async def park(
        self,
        held: list[NewApproval],
        *,
        wait_seconds: float,
        deadline_left_seconds: float,
        asked: Sequence[AskedInput] = (),
        lease_seconds: float = 30.0,
    ) -> Parked:
        """The run begins to wait for approvals of ``held`` and answers to ``asked``: the events emitted since the
        last step (its ``approval_required`` and ``input_required``) stored with its status ``waiting``, the pending
        approvals and questions, in one transaction
        (``RunStore.park``); the client is told with ``release_stored``. ``CANCELLED``: its cancel was asked for, it
        is not parked (nothing written); ``RESUMED``: its questions were answered before it parked, it is claimed
        again (``lease_seconds``) to resume at once. Raises as a step's write does."""
        store = self.store
        if store is None:
            return Parked.WAITING
        if self.unlogged or self.unaudited:  # none in practice (the round's turn logged its call): kept all the same
            await self._write(Step())
        await self._settle()
        async with self._write_lock:
            events = list(self.unflushed)
            try:
                with anyio.CancelScope(shield=True):
                    parked = await store.park(
                        self.run_id,
                        events,
                        held,
                        owner=self.owner,
                        wait_seconds=wait_seconds,
                        deadline_left_seconds=deadline_left_seconds,
                        asked=asked,
                        lease_seconds=lease_seconds,
                    )
            except LeaseLost:
                raise RunMoved(self.run_id) from None
            except StoreError as error:
                _log.warning("run_not_stored", run_id=self.run_id, error=str(error))
                raise _not_stored() from None
            if not parked:
                return parked
            del self.unflushed[: len(events)]
            if events:
                self.flushed_seq = events[-1].seq
            self._wake()
        return parked

    async def forwarded(self, input_id: str) -> None:
        store = self.store
        if store is None:
            return
        try:
            await store.forget_answer(self.run_id, input_id)
        except StoreError as error:  # kept a while longer: the run goes on all the same
            _log.warning("input_answer_not_forgotten", run_id=self.run_id, error=str(error))

    async def asked(self, question: AskedInput) -> None:
        """The question stored as pending now, before its ``input_required`` is: an answer may come as soon as that
        is told, while the round's other calls still run. Raises as a step's write does."""
        store = self.store
        if store is None:
            return
        self.asked_here = True
        try:
            await store.ask(self.run_id, question, owner=self.owner)
        except LeaseLost:
            raise RunMoved(self.run_id) from None
        except StoreError as error:
            _log.warning("run_not_stored", run_id=self.run_id, error=str(error))
            raise _not_stored() from None

    async def release_stored(self) -> None:
        """Tell the attached client the events held until stored that are stored now (after ``park``)."""
        await self._release()

    # --- the end --------------------------------------------------------------------------------------

    async def finish(self, outcome: RunOutcome) -> None:
        """The loop's outcome stored: whatever it appended that no step stored (the results a failed round closed
        with), its last events, and its final status."""
        await self._settle(raise_failure=False)  # a result not stored is written here, as any other left over
        messages = []
        for index, message in enumerate(outcome.appended):
            local = outcome.appended_from + index - self.base
            if local not in self.recorded:
                messages.append((local, message))
        error = outcome.error
        step = Step(
            messages=messages,
            status="failed" if error is not None else "completed",
            iterations=outcome.iterations,
            usage=outcome.usage,
            finish_reason="error" if error is not None else outcome.finish_reason,
            error=RunErrorDetail(code=error.code, message=error.message) if error is not None else None,
            budget=outcome.budget if error is None else None,
            output=outcome.output if error is None else None,
        )
        await self._end(step)

    async def finish_cancelled(self, done: RunEvent, reason: str) -> None:
        """A run cancelled midway: its open tool calls answered with ``reason``, ``done`` stored last."""
        await self.emit(done)
        step = Step(
            messages=self._open_calls_answered(reason),
            status="cancelled",
            iterations=self.iterations,
            usage=self.usage,
            finish_reason="cancelled",
        )
        await self._end(step)

    async def finish_failed(self, error: RunEvent, detail: RunErrorDetail) -> None:
        """A run failed without running (a takeover refused): its open tool calls answered with the reason, ``error``
        stored as its last event."""
        await self.emit(error)
        reason = f"The run failed before this tool call finished: {detail.message}"
        step = Step(messages=self._open_calls_answered(reason), status="failed", finish_reason="error", error=detail)
        await self._end(step)

    async def _end(self, step: Step) -> None:
        """Store the run's end, then tell the client its last events; an end not stored is told as the error it is
        (``run_moved``: another replica has the run; ``store_unavailable``: one will take it over), and raised."""
        try:
            await self._write(step, final=True)
        except UpstreamError as error:
            await self.tell(RunError(run_id=self.run_id, code=error.code, message=error.message))
            raise
        await self._release()

    def _open_calls_answered(self, reason: str) -> list[tuple[int, Message]]:
        return [
            (position, Message(role="tool", tool_call_id=call_id, content=reason, is_error=True))
            for call_id, (position, _) in self.open_calls.items()
        ]

    # --- writing --------------------------------------------------------------------------------------

    async def _write(self, step: Step, *, final: bool = False, settle: bool = True) -> None:
        store = self.store
        if store is None:
            return
        if settle:
            await self._settle()
        # One write at a time, in emission order: parallel tool calls finish at once, and a follower must
        # never find event N+1 stored before event N.
        async with self._write_lock:
            events = list(self.unflushed)
            step.events = events
            logged = list(self.unlogged)
            step.calls = logged
            own, audited = step.tool_calls, list(self.unaudited) if final else []
            step.tool_calls = [*own, *audited]
            started = time.perf_counter()
            written = False
            try:
                # Shielded: a write cut off midway may still commit (on PostgreSQL a step is one statement), and the
                # journal would then write its events twice. It is short, and bounded by the store's own timeouts.
                with anyio.CancelScope(shield=True):
                    await _keep_images(store, self.run_id, step)
                    if final:
                        await store.finish(self.run_id, step, owner=self.owner)
                        if self.asked_here:  # its round ended without parking (cancelled, failed)
                            await store.close_inputs(self.run_id)
                    else:
                        await store.record(self.run_id, step, owner=self.owner)
                written = True
            except LeaseLost:
                raise RunMoved(self.run_id) from None
            except StoreError as error:
                self.telemetry.store_write(time.perf_counter() - started, ok=False)
                _log.warning("run_not_stored", run_id=self.run_id, error=str(error))
                raise _not_stored() from None
            finally:
                if not written:  # the run's end writes them again
                    self.unaudited.extend(own)
            self.telemetry.store_write(time.perf_counter() - started, ok=True)
            del self.unflushed[: len(events)]
            del self.unlogged[: len(logged)]
            del self.unaudited[: len(audited)]
            if events:
                self.flushed_seq = events[-1].seq
            self.recorded.update(position for position, _ in step.messages)
            self._wake()


async def _keep_images(store: RunStore, run_id: str, step: Step) -> None:
    """The step's messages as stored: their ``data:`` images kept in the run's tenant's images first, referred to by
    the messages (``core.images``)."""
    kept: list[DecodedImage] = []
    messages = []
    for position, message in step.messages:
        message, images = by_reference(message)
        messages.append((position, message))
        kept += images
    if kept:
        await store.put_run_images(run_id, kept)
        step.messages = messages
