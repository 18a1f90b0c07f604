"""Runs as this replica executes them: stored as they begin, followed, cancelled, and taken over after a crash.

A run is executed by one replica at a time, the owner of its lease. The owner renews the leases of its runs every
third of ``lease_seconds``; a replica that stops renewing (killed, frozen, cut off) loses its runs to whichever
replica's keeper claims them first, which resumes each from its last stored step (``plans.takeover``).
Without a store (``AGENT_DATABASE_URL`` empty) runs are executed the same way and simply not kept.

Each run also holds one of its tenant's slots (``run_slots``) from ``begin`` to the end of ``execute``; the keeper
renews the slots of the runs here with their leases, so a dead replica's slots expire like its leases. A run of a
tenant with monthly budgets carries their guard (``spending``), given in ``begin`` and again when taken over.
"""

from __future__ import annotations

import os
import socket
import uuid
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass, replace
from datetime import UTC, datetime, timedelta

import anyio
from anyio.abc import TaskGroup

from agent_service.admission.budgets import Spending
from agent_service.admission.run_slots import UNCAPPED, LocalRunSlots, RunSlots
from agent_service.admission.spend_ledgers import LocalSpendLedger
from agent_service.core.errors import UpstreamError
from agent_service.core.run import LlmCall, ResumePoint, RunOutcome, RunPlan
from agent_service.core.tenancy import DEFAULT_TENANT, Caller
from agent_service.engine.loop import AgentLoop
from agent_service.runs.journal import TERMINAL_EVENTS, LiveSink, RunJournal, RunMoved, StoredEventSink
from agent_service.runs.plans import conversation_settings, stored_plan, takeover
from agent_service.settings import AgentSettings
from agent_service.store import (
    ConversationBusy,
    ConversationFull,
    ConversationLimits,
    ConversationRecord,
    ConversationSummary,
    ConversationTooLarge,
    ModelUsage,
    NewRun,
    RunRecord,
    RunStore,
    StoredEvent,
    StoreError,
    UnknownCursor,
)
from suite_common.errors import ApiError
from suite_common.lifecycle import Lifecycle
from suite_common.logging import get_logger
from suite_common.wire import (
    AgentRunRequest,
    Message,
    RunDone,
    RunError,
    RunErrorDetail,
    RunResumed,
    RunStarted,
)

__all__ = ["RESUMED_SEQ_GAP", "AgentRuns", "StartedRun"]

_log = get_logger("agent_service.runs")

RESUMED_SEQ_GAP = 100_000
"""A run taken over numbers its events from its last stored one plus this: the crashed replica may have sent events
it never stored (text of an unfinished answer), and a client re-attaching after those must still get every new one."""

_CANCELLED = "The run was cancelled before this tool call finished."
_WAIT_FOR_CANCEL_SECONDS = 2.0


def _not_stored() -> ApiError:
    return ApiError(404, "runs_not_stored", "Runs are not stored by this service (AGENT_DATABASE_URL is empty).")


def _unavailable(error: StoreError) -> ApiError:
    """503 ``store_unavailable``; the driver's words (addresses, SQL states) go to the log only."""
    _log.warning("store_unavailable", error=str(error))
    return ApiError(
        503, "store_unavailable", "The run store is unavailable; try again shortly.", headers={"Retry-After": "1"}
    )


@dataclass
class StartedRun:
    """A run stored and about to be executed here."""

    plan: RunPlan
    journal: RunJournal
    detached: bool
    resume: ResumePoint | None = None
    scope: anyio.CancelScope | None = None
    outcome: RunOutcome | None = None
    """Set once the run has ended here."""
    stop_reason: str | None = None
    """Why this replica stopped it: ``cancelled`` (asked to), ``moved`` (the lease was lost); ``None``: its client
    left or the service is shutting down."""

    def stop(self, reason: str) -> None:
        self.stop_reason = reason
        if self.scope is not None:
            self.scope.cancel()


class AgentRuns:
    def __init__(
        self,
        loop: AgentLoop,
        store: RunStore | None,
        settings: AgentSettings,
        lifecycle: Lifecycle,
        slots: RunSlots | None = None,
        spending: Spending | None = None,
    ) -> None:
        self.loop = loop
        self.store = store
        self.settings = settings
        self.lifecycle = lifecycle
        self.slots = slots if slots is not None else LocalRunSlots(settings.lease_seconds)
        self.spending = spending if spending is not None else Spending(LocalSpendLedger(), rules={})
        self.owner = f"{socket.gethostname()}:{os.getpid()}:{uuid.uuid4().hex[:8]}"
        self.active: dict[str, StartedRun] = {}
        self.slots_held: dict[str, str] = {}
        """Run id → tenant, for each run holding a slot taken here (renewed by the keeper, released at its end)."""
        self._task_group: TaskGroup | None = None

    # --- the service's lifetime ------------------------------------------------------------------------

    @asynccontextmanager
    async def running(self) -> AsyncIterator[None]:
        """Within it: detached and resumed runs execute, and the keeper renews and claims leases."""
        async with anyio.create_task_group() as task_group:
            self._task_group = task_group
            task_group.start_soon(self._keep)
            try:
                yield
            finally:
                task_group.cancel_scope.cancel()
                await self._release_all()
                self._task_group = None

    async def _release_all(self) -> None:
        """Runs still here at shutdown go to another replica at once, not after their lease."""
        if self.store is None or not self.active:
            return
        with anyio.CancelScope(shield=True), anyio.move_on_after(2.0):
            try:
                await self.store.release(self.owner, list(self.active))
            except StoreError as error:
                _log.warning("run_release_failed", error=str(error))

    # --- beginning and executing -----------------------------------------------------------------------

    async def begin(
        self, plan: RunPlan, request: AgentRunRequest, *, send: LiveSink | None, caller: Caller
    ) -> StartedRun:
        """Check the monthly budgets of ``caller``'s tenant and user (429 ``budget_exhausted``), take a slot of its
        tenant (429 ``too_many_runs`` over its cap), then store the run, as ``caller``'s, before the response starts
        (a busy conversation is still a plain 409); ``send``: the client that stays attached (``None``: the run is
        detached and followed through its journal). A refused run is never stored."""
        detached = request.on_disconnect == "continue"
        store = self.store
        if store is None and (request.conversation_id is not None or detached):
            field = "conversationId" if request.conversation_id is not None else 'onDisconnect "continue"'
            raise ApiError(400, "runs_not_stored", f"{field} needs stored runs (AGENT_DATABASE_URL is empty).")
        plan = await self.admit(plan, caller)
        try:
            return await self._begin(plan, request, send=send, caller=caller)
        except BaseException:
            await self.release_slot(plan.run_id)
            raise

    async def admit(self, plan: RunPlan, caller: Caller) -> RunPlan:
        """Check the monthly budgets of ``caller``'s tenant and user (429 ``budget_exhausted``), then take a slot of
        its tenant (429 ``too_many_runs`` over its cap) for ``plan.run_id``, renewed until ``release_slot``: what a
        run holds from ``begin`` to its end, and a plain completion of the OpenAI front for its one call (it costs
        what a run's call costs, so the cap bounds both together). The plan with its budgets' guard."""
        tenant = caller.tenant
        plan = replace(plan, spending=await self.spending.admit(tenant, caller.user))
        cap = caller.rules.max_concurrent_runs
        if cap is None:
            cap = self.settings.max_concurrent_runs_per_tenant
        await self.slots.acquire(tenant, plan.run_id, cap or UNCAPPED)  # 0: no cap
        self.slots_held[plan.run_id] = tenant
        return plan

    async def _begin(
        self, plan: RunPlan, request: AgentRunRequest, *, send: LiveSink | None, caller: Caller
    ) -> StartedRun:
        detached = request.on_disconnect == "continue"
        store = self.store
        if store is None:
            journal = RunJournal(plan.run_id, store=None, owner=self.owner, base=0, send=send)
            return StartedRun(plan, journal, detached)
        new = NewRun(
            run_id=plan.run_id,
            model=plan.model,
            plan=stored_plan(plan),
            input_messages=plan.messages,
            conversation_id=request.conversation_id,
            caller=caller.name,
            tenant=caller.tenant,
            user=caller.user,
            settings=conversation_settings(request) if request.conversation_id is not None else None,
        )
        limits = ConversationLimits(self.settings.conversation_max_bytes, self.settings.conversation_max_runs)
        try:
            earlier = await store.create_run(
                new, owner=self.owner, lease_seconds=self.settings.lease_seconds, limits=limits
            )
        except ConversationTooLarge as large:
            raise ApiError(
                413,
                "conversation_too_large",
                f"Conversation {large.conversation_id} holds {large.stored} bytes of messages; with this run's "
                f"{large.adding} it would pass its limit of {large.limit} bytes. Start a new conversation.",
            ) from None
        except ConversationFull as full:
            raise ApiError(
                409,
                "conversation_full",
                f"Conversation {full.conversation_id} has {full.runs} runs, its limit of runs. Start a new "
                "conversation.",
            ) from None
        except ConversationBusy as busy:
            raise ApiError(
                409,
                "conversation_busy",
                f"Conversation {busy.conversation_id} has a run in progress ({busy.run_id}); "
                "wait for it to end or cancel it.",
            ) from None
        except StoreError as error:
            raise _unavailable(error) from None
        if earlier:
            plan = replace(plan, messages=[*earlier, *plan.messages])
        journal = RunJournal(
            plan.run_id, store=store, owner=self.owner, base=len(earlier), send=send, telemetry=self.loop.telemetry
        )
        started = StartedRun(plan, journal, detached)
        self.active[plan.run_id] = started
        return started

    async def execute(self, run: StartedRun, *, stream_text: bool) -> RunOutcome:
        """Run to the end here, in the calling task; ``run_started`` first, unless the run is resumed. A run stopped
        through ``StartedRun.stop`` ends with finish reason ``cancelled``, or the error ``run_moved``. Raises only
        when cancelled from outside: its client left (the run is stored as cancelled) or the service is shutting
        down (the run is released to another replica)."""
        plan, journal = run.plan, run.journal
        try:
            with anyio.CancelScope() as scope:
                run.scope = scope
                if run.stop_reason is not None:  # stopped before it started
                    scope.cancel()
                if run.resume is None:
                    await journal.emit(
                        RunStarted(
                            run_id=plan.run_id,
                            model=plan.model,
                            tools=[tool.name for tool in plan.tools],
                            max_iterations=plan.limits.max_iterations,
                        )
                    )
                outcome = await self.loop.run(
                    plan,
                    journal.emit,
                    stream_text=stream_text,
                    recorder=journal if journal.store is not None else None,
                    resume=run.resume,
                )
                outcome = await self._store_outcome(run, outcome)
                run.outcome = outcome
                return outcome
            run.outcome = await self._stopped(run)  # only ``run.stop`` cancels this scope
            return run.outcome
        except anyio.get_cancelled_exc_class():
            with anyio.CancelScope(shield=True):
                if self.lifecycle.interrupted:
                    await journal.log_calls()  # a call the shutdown cut off: counted in the budgets, so logged
                    await self._release(plan.run_id)
                elif run.stop_reason is None:  # its client left
                    journal.send = None
                    run.stop_reason = "cancelled"
                    await self._stored_cancel(run)
            raise
        finally:
            self.active.pop(plan.run_id, None)
            if run.stop_reason != "moved":  # moved: the slot (same run id) is the new owner's now
                await self.release_slot(plan.run_id)
            else:
                self.slots_held.pop(plan.run_id, None)
            journal.ended.set()

    async def release_slot(self, run_id: str) -> None:
        """Give back the slot taken for ``run_id`` here, if any."""
        tenant = self.slots_held.pop(run_id, None)
        if tenant is not None:
            with anyio.CancelScope(shield=True):
                await self.slots.release(tenant, run_id)

    async def _stopped(self, run: StartedRun) -> RunOutcome:
        journal = run.journal
        if run.stop_reason == "moved":
            moved = RunMoved(run.plan.run_id)
            # Told to its client only: the run's stored events go on elsewhere.
            await journal.tell(RunError(run_id=run.plan.run_id, code=moved.code, message=moved.message))
            return RunOutcome("error", journal.iterations, journal.usage, [], moved)
        await self._stored_cancel(run)
        return RunOutcome("cancelled", journal.iterations, journal.usage, [])

    async def _release(self, run_id: str) -> None:
        if self.store is None:
            return
        with anyio.move_on_after(2.0):
            try:
                await self.store.release(self.owner, [run_id])
            except StoreError as error:
                _log.warning("run_release_failed", run_id=run_id, error=str(error))

    async def _store_outcome(self, run: StartedRun, outcome: RunOutcome) -> RunOutcome:
        """The outcome stored, its last events told (``done`` or ``error``: only once stored); the outcome to answer
        with: the loop's, or the error that kept it from being stored (no answer may say more than the store)."""
        error = outcome.error
        if isinstance(error, RunMoved):  # nothing more is written here
            run.stop_reason = "moved"
            await run.journal.tell(RunError(run_id=run.plan.run_id, code=error.code, message=error.message))
            return outcome
        try:
            await run.journal.finish(outcome)
        except RunMoved as moved:
            run.stop_reason = "moved"
            return replace(outcome, error=moved)
        except UpstreamError as failure:  # the store is down: the lease lapses and another replica finishes it
            _log.error("run_outcome_not_stored", run_id=run.plan.run_id, error=failure.message)
            return replace(outcome, error=failure)
        return outcome

    async def _stored_cancel(self, run: StartedRun) -> None:
        if run.journal.store is None:
            return
        done = RunDone(
            run_id=run.plan.run_id,
            finish_reason="cancelled",
            iterations=run.journal.iterations,
            usage=run.journal.usage,
        )
        with anyio.CancelScope(shield=True), anyio.move_on_after(5.0):
            try:
                await run.journal.finish_cancelled(done, _CANCELLED)
            except UpstreamError as error:
                _log.error("run_cancel_not_stored", run_id=run.plan.run_id, error=error.message)

    def detach(self, run: StartedRun, *, stream_text: bool) -> None:
        """Execute ``run`` in the background: its client may leave, the run goes on until it ends or the service
        stops (then another replica takes it over)."""
        if self._task_group is None:
            raise RuntimeError("AgentRuns.running() is not entered")
        self._task_group.start_soon(self._execute_tracked, run, stream_text)

    async def _execute_tracked(self, run: StartedRun, stream_text: bool) -> None:
        # Counted as work in flight, so that a draining service waits for it as for a request.
        with self.lifecycle.track(), anyio.CancelScope() as scope, self.lifecycle.cancels(scope):
            try:
                await self.execute(run, stream_text=stream_text)
            except Exception as error:  # a bug: logged; the lease lapses and the run is taken over
                _log.error("run_crashed", run_id=run.plan.run_id, exc_info=error)

    # --- following, reading, cancelling ----------------------------------------------------------------

    def _store(self) -> RunStore:
        if self.store is None:
            raise _not_stored()
        return self.store

    async def get(self, run_id: str, *, tenant: str | None = None) -> RunRecord | None:
        """The stored run (``None`` if unknown, or of another tenant than ``tenant``: ``None`` is any tenant); one
        whose lease lapsed longer ago than ``abandon_after_seconds`` is failed first, so that it says what
        happened to it."""
        store = self._store()
        try:
            record = await store.get_run(run_id)
            if record is not None and tenant is not None and (record.tenant or DEFAULT_TENANT) != tenant:
                return None  # exactly as an unknown run: whether another tenant's exists is not said
            if record is not None and record.active and self._abandoned(record):
                await store.fail_abandoned(abandon_before=self._abandon_before())
                record = await store.get_run(run_id)
        except StoreError as error:
            raise _unavailable(error) from None
        return record

    def _abandon_before(self) -> datetime:
        return datetime.now(UTC) - timedelta(seconds=self.settings.abandon_after_seconds)

    def _abandoned(self, record: RunRecord) -> bool:
        expires = record.lease_expires_at
        return expires is None or expires < self._abandon_before()

    async def follow(self, run_id: str, after: int, send: StoredEventSink) -> None:
        """Send the run's events after ``after``, stored ones first, then live ones until its last; from whichever
        replica executes it (here: as they are emitted; elsewhere: as they are stored, polled)."""
        store = self._store()
        poll = self.settings.events_poll_seconds
        while True:
            local = self.active.get(run_id)
            flushed, tail = local.journal.snapshot(after) if local is not None else (None, [])
            events: list[StoredEvent] = []
            try:
                if flushed is None or after < flushed:
                    while True:
                        page = await store.events_after(run_id, after if not events else events[-1].seq)
                        events += page if flushed is None else [event for event in page if event.seq <= flushed]
                        if len(page) < 1000 or (flushed is not None and page[-1].seq >= flushed):
                            break
            except StoreError as error:
                raise _unavailable(error) from None
            events += tail
            for event in events:
                await send(event)
                after = event.seq
                if event.type in TERMINAL_EVENTS:
                    return
            if events:
                continue
            if local is not None:
                with anyio.move_on_after(poll):
                    await local.journal.wait_changed()
                continue
            record = await self.get(run_id)
            if record is None:
                return
            if not record.active:  # ended: once its last stored event is sent, nothing more will come
                if not await self._events_after(run_id, after):
                    return
                continue
            await anyio.sleep(poll)

    async def messages(self, run_id: str) -> list[Message]:
        try:
            return await self._store().run_messages(run_id)
        except StoreError as error:
            raise _unavailable(error) from None

    async def conversation(
        self, conversation_id: str, *, tenant: str, limit: int, max_bytes: int, before: tuple[str, int] | None
    ) -> ConversationRecord | None:
        """A page of the tenant's conversation (see ``RunStore.get_conversation``); a ``before`` that names no run
        of it is a 400."""
        try:
            return await self._store().get_conversation(
                conversation_id, tenant=tenant, limit=limit, max_bytes=max_bytes, before=before
            )
        except UnknownCursor:
            raise ApiError(400, "invalid_request", "before is not a cursor of this conversation.") from None
        except StoreError as error:
            raise _unavailable(error) from None

    async def conversations(self, limit: int, *, tenant: str) -> list[ConversationSummary]:
        """The tenant's conversations updated last, newest first. Read only: a run abandoned long ago shows as it was
        stored until a replica's keeper fails it (its sweep does, every ``lease_seconds / 3``)."""
        try:
            return await self._store().list_conversations(limit, tenant=tenant)
        except StoreError as error:
            raise _unavailable(error) from None

    async def usage(self, tenant: str, start: datetime, end: datetime, *, user: str | None) -> list[ModelUsage]:
        """The tenant's (or its end user's) LLM calls over ``[start, end)``, summed per model."""
        try:
            return await self._store().usage_by_model(tenant, start, end, user=user)
        except StoreError as error:
            raise _unavailable(error) from None

    async def log_usage(self, caller: Caller, call: LlmCall) -> None:
        """Log an LLM call made outside a run (a run's calls are logged with its steps). Without a store, nothing; a
        store that fails is logged, not raised: the call was made and answered, its answer is not thrown away."""
        if self.store is None:
            return
        try:
            await self.store.log_usage(call, tenant=caller.tenant, user=caller.user, caller=caller.name)
        except StoreError as error:
            _log.warning("usage_not_logged", model=call.model, error=str(error))

    async def _events_after(self, run_id: str, after: int) -> list[StoredEvent]:
        try:
            return await self._store().events_after(run_id, after, limit=1)
        except StoreError as error:
            raise _unavailable(error) from None

    async def cancel(self, run_id: str, *, tenant: str) -> RunRecord | None:
        """Stop the run wherever it executes: here at once, on another replica when it next renews its lease.
        ``None``: no such run of ``tenant`` (a run's tenant never changes, so checking first is enough)."""
        store = self._store()
        if await self.get(run_id, tenant=tenant) is None:
            return None
        local = self.active.get(run_id)
        try:
            record = await store.request_cancel(run_id)
        except StoreError as error:
            raise _unavailable(error) from None
        if local is not None:
            local.stop("cancelled")
            with anyio.move_on_after(_WAIT_FOR_CANCEL_SECONDS):
                await local.journal.ended.wait()
            record = await self.get(run_id)
        return record

    # --- leases and takeovers --------------------------------------------------------------------------

    async def _keep(self) -> None:
        interval = self.settings.lease_seconds / 3
        while True:
            await self._renew_slots()
            if self.store is not None:
                try:
                    await self._renew()
                    if not self.lifecycle.draining:
                        await self._claim()
                except StoreError as error:
                    _log.warning("run_leases_not_renewed", error=str(error))
            await anyio.sleep(interval)

    async def _renew_slots(self) -> None:
        by_tenant: dict[str, list[str]] = {}
        for run_id, tenant in self.slots_held.items():
            by_tenant.setdefault(tenant, []).append(run_id)
        for tenant, run_ids in by_tenant.items():
            await self.slots.renew(tenant, run_ids)

    async def _renew(self) -> None:
        assert self.store is not None
        local = [run_id for run_id, run in self.active.items() if run.journal.store is not None]
        if not local:
            return
        stop = await self.store.renew_leases(self.owner, local, lease_seconds=self.settings.lease_seconds)
        for run_id in stop:
            run = self.active.get(run_id)
            if run is None:
                continue
            record = await self.store.get_run(run_id)
            lost = record is None or record.lease_owner != self.owner or not record.active
            _log.info("run_stopped_by_lease", run_id=run_id, reason="moved" if lost else "cancelled")
            run.stop("moved" if lost else "cancelled")

    async def _claim(self) -> None:
        assert self.store is not None
        assert self._task_group is not None
        claimed = await self.store.claim_expired(
            self.owner,
            lease_seconds=self.settings.lease_seconds,
            abandon_before=self._abandon_before(),
            limit=16,
        )
        for record in claimed:
            self._task_group.start_soon(self._take_over, record)

    async def _take_over(self, record: RunRecord) -> None:
        """Resume a run whose replica stopped renewing its lease; this replica holds the lease now."""
        outcome = "failed"
        tenant = record.tenant or DEFAULT_TENANT
        try:
            outcome = await self._resume(record, tenant)
        except (StoreError, UpstreamError) as error:  # the lease lapses again: another sweep retries
            _log.warning("run_takeover_failed", run_id=record.run_id, error=str(error))
        except Exception as error:  # a run this version cannot resume (a bug, a plan it cannot read): failed, once
            _log.error("run_takeover_failed", run_id=record.run_id, exc_info=error)
            await self._fail_unresumable(record)
        finally:
            self.loop.telemetry.run_taken_over(run_id=record.run_id, outcome=outcome, resumes=record.resumes)
            if outcome != "resumed":  # ended here, or left: the dead replica's slot for it (same run id) goes too
                with anyio.CancelScope(shield=True):
                    await self.slots.release(tenant, record.run_id)

    async def _fail_unresumable(self, record: RunRecord) -> None:
        assert self.store is not None
        message = "The run could not be resumed after the service running it stopped; start it again."
        detail = RunErrorDetail(code="not_resumable", message=message)
        journal = RunJournal(
            record.run_id, store=self.store, owner=self.owner, base=0, next_seq=record.last_seq + RESUMED_SEQ_GAP
        )
        try:
            await journal.finish_failed(RunError(run_id=record.run_id, code=detail.code, message=message), detail)
        except UpstreamError as error:
            _log.warning("run_takeover_failed", run_id=record.run_id, error=error.message)

    async def _resume(self, record: RunRecord, tenant: str) -> str:
        store = self.store
        assert store is not None
        task_group = self._task_group
        if task_group is None:  # shutting down: the lease lapses again and another replica takes the run
            return "failed"
        run_id = record.run_id
        journal = RunJournal(
            run_id,
            store=store,
            owner=self.owner,
            base=0,
            next_seq=record.last_seq + RESUMED_SEQ_GAP,
            attempt=record.resumes,
            telemetry=self.loop.telemetry,
        )
        earlier = await store.earlier_messages(run_id)
        taken = takeover(record, earlier, await store.run_messages(run_id))
        journal.base = len(earlier)
        journal.iterations, journal.usage = record.iterations, record.usage
        # The interrupted round's calls without a stored result: a run that ends here, cancelled or failed, still
        # answers each (as the replica that made them would have), so that its conversation can go on.
        resume = taken.resume
        journal.open_calls = {
            call.id: (resume.turn_position - journal.base + 1 + index, call)
            for index, call in enumerate(resume.calls)
            if call.id not in resume.results
        }
        if record.cancel_requested:
            done = RunDone(run_id=run_id, finish_reason="cancelled", iterations=record.iterations, usage=record.usage)
            await journal.finish_cancelled(done, _CANCELLED)
            return "cancelled"
        if record.resumes > self.settings.max_resumes:
            message = (
                f"The service running this run stopped {record.resumes} times while it ran (AGENT_MAX_RESUMES is "
                f"{self.settings.max_resumes}); it is not resumed again: it may be what stops the service."
            )
            detail = RunErrorDetail(code="resumed_too_often", message=message)
            await journal.finish_failed(RunError(run_id=run_id, code=detail.code, message=message), detail)
            return "resumed_too_often"
        await journal.emit(RunResumed(run_id=run_id, iterations=record.iterations, resumes=record.resumes))
        # Stored at once, not with the next step: followers on other replicas learn of the takeover now, and a
        # crash of this replica before that step (a slow tool call) does not erase it from the run's events.
        await journal.flush()
        if taken.finished is not None:  # its final answer was stored; only its end was not
            await journal.emit(
                RunDone(run_id=run_id, finish_reason=taken.finished, iterations=record.iterations, usage=record.usage)
            )
            await journal.finish(RunOutcome(taken.finished, record.iterations, record.usage, []))
            return "finished"
        # Admitted once already: over its tenant's cap it still goes on (refusing it now would fail a run its
        # client was told had started), but it counts, so new runs wait. Redis down: it goes on uncounted.
        try:
            await self.slots.acquire(tenant, run_id, UNCAPPED)
            self.slots_held[run_id] = tenant
        except ApiError as error:
            _log.warning("run_slot_not_taken", run_id=run_id, error=error.message)
        # Its budgets as its tenant's rules say now, its end user's included.
        plan = replace(taken.plan, spending=self.spending.guard(tenant, record.user))
        run = StartedRun(plan, journal, detached=True, resume=taken.resume)
        self.active[run_id] = run
        task_group.start_soon(self._execute_tracked, run, True)
        return "resumed"
