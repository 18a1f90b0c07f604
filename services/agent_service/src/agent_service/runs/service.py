"""Runs as this replica executes them: stored as they begin, followed, cancelled, and taken over after a crash.

A run is executed by one replica at a time, the owner of its lease. The owner renews the leases of its runs every
third of ``lease_seconds``; a replica that stops renewing (killed, frozen, cut off) loses its runs to whichever
replica's keeper claims them first, which resumes each from its last stored step (``plans.takeover``).
Without a store (``AGENT_DATABASE_URL`` empty) runs are executed the same way and simply not kept.

Each run also holds one of its tenant's slots (``run_slots``) from ``begin`` to the end of ``execute``; the keeper
renews the slots of the runs here with their leases, so a dead replica's slots expire like its leases. A run of a
tenant with monthly budgets carries their guard (``RunPlan.spending``), given in ``begin`` and again when taken over.

``AgentRuns`` is the one face of three parts over one ``RunExecutor``: executing (``running``), reading
(``reading``), leases and takeovers (``takeover``).
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from datetime import datetime

import anyio

from agent_service.admission.budgets import Budgets
from agent_service.admission.run_slots import LocalRunSlots, RunSlots
from agent_service.admission.spend_ledgers import LocalSpendLedger
from agent_service.core.images import DecodedImage
from agent_service.core.limits import SpendGuard
from agent_service.core.run import LlmCall, RunOutcome, RunPlan
from agent_service.core.tenancy import Caller
from agent_service.engine.loop import AgentLoop
from agent_service.runs.journal import LiveSink, StoredEventSink
from agent_service.runs.reading import RunReader
from agent_service.runs.running import RunExecutor, StartedRun
from agent_service.runs.takeover import LeaseKeeper
from agent_service.runs.waiting import WaitingRuns
from agent_service.settings import AgentSettings
from agent_service.store import (
    Answered,
    ApprovalRecord,
    AuditCursor,
    AuditedCall,
    AuditFilter,
    ConversationRecord,
    ConversationSummary,
    Decided,
    InputRecord,
    ModelUsage,
    RunRecord,
    RunStore,
)
from suite_common.lifecycle import Lifecycle
from suite_common.wire import AgentRunRequest, ApprovalDecision, InputAnswer, Message

__all__ = ["AgentRuns"]


class AgentRuns:
    """The runs of this replica: what the service's routes use. Each method is its part's (see there)."""

    def __init__(
        self,
        loop: AgentLoop,
        store: RunStore | None,
        settings: AgentSettings,
        lifecycle: Lifecycle,
        slots: RunSlots | None = None,
        budgets: Budgets | None = None,
    ) -> None:
        self.executor = RunExecutor(
            loop,
            store,
            settings,
            lifecycle,
            slots if slots is not None else LocalRunSlots(settings.lease_seconds),
            budgets if budgets is not None else Budgets(LocalSpendLedger(), rules={}),
        )
        self.reader = RunReader(self.executor)
        self.waiting = WaitingRuns(self.executor, self.reader)
        self.keeper = LeaseKeeper(self.executor, self.waiting)

    @property
    def store(self) -> RunStore | None:
        """Where runs are kept (``None``: they are not)."""
        return self.executor.store

    # --- the service's lifetime ------------------------------------------------------------------------

    @asynccontextmanager
    async def running(self) -> AsyncIterator[None]:
        """Within it: detached and resumed runs execute, and the keeper renews and claims leases; on the way out,
        the writes still under way (``admission.pending``) are waited for."""
        try:
            async with anyio.create_task_group() as task_group:
                self.executor.task_group = task_group
                task_group.start_soon(self.keeper.keep)
                try:
                    yield
                finally:
                    task_group.cancel_scope.cancel()
                    await self.keeper.release_all()
                    self.executor.task_group = None
        finally:
            # The writes sent off the answers' paths (slots given back, calls' usage added), the cancelled runs'
            # last ones included: made before the service's Redis client closes.
            await self.executor.budgets.pending.drain()

    # --- beginning and executing (``RunExecutor``) ------------------------------------------------------

    async def begin(
        self, plan: RunPlan, request: AgentRunRequest, *, send: LiveSink | None, caller: Caller
    ) -> StartedRun:
        return await self.executor.begin(plan, request, send=send, caller=caller)

    async def admit(self, plan: RunPlan, caller: Caller) -> RunPlan:
        return await self.executor.admit(plan, caller)

    async def execute(self, run: StartedRun, *, stream_text: bool) -> RunOutcome:
        return await self.executor.execute(run, stream_text=stream_text)

    def detach(self, run: StartedRun, *, stream_text: bool) -> None:
        self.executor.detach(run, stream_text=stream_text)

    async def release_slot(self, run_id: str, *, spending: SpendGuard | None = None) -> None:
        await self.executor.release_slot(run_id, spending=spending)

    # --- following, reading, cancelling (``RunReader``) -------------------------------------------------

    async def get(self, run_id: str, *, tenant: str | None = None) -> RunRecord | None:
        return await self.reader.get(run_id, tenant=tenant)

    async def follow(self, run_id: str, after: int, send: StoredEventSink) -> None:
        await self.reader.follow(run_id, after, send)

    async def image(self, sha256: str, *, tenant: str) -> DecodedImage | None:
        return await self.reader.image(sha256, tenant=tenant)

    async def messages(self, run_id: str) -> list[Message]:
        return await self.reader.messages(run_id)

    async def conversation(
        self, conversation_id: str, *, tenant: str, limit: int, max_bytes: int, before: tuple[str, int] | None
    ) -> ConversationRecord | None:
        return await self.reader.conversation(
            conversation_id, tenant=tenant, limit=limit, max_bytes=max_bytes, before=before
        )

    async def conversations(self, limit: int, *, tenant: str) -> list[ConversationSummary]:
        return await self.reader.conversations(limit, tenant=tenant)

    async def usage(self, tenant: str, start: datetime, end: datetime, *, user: str | None) -> list[ModelUsage]:
        return await self.reader.usage(tenant, start, end, user=user)

    async def audit(
        self, tenant: str, where: AuditFilter, *, limit: int, after: AuditCursor | None
    ) -> tuple[list[AuditedCall], AuditCursor | None]:
        return await self.reader.audit(tenant, where, limit=limit, after=after)

    async def log_usage(self, caller: Caller, call: LlmCall) -> None:
        await self.reader.log_usage(caller, call)

    async def cancel(self, run_id: str, *, tenant: str) -> RunRecord | None:
        record = await self.reader.get(run_id, tenant=tenant)
        if record is not None and record.waiting:  # nobody executes it: ended here, at once
            cancelled = await self.waiting.cancel(record)
            if cancelled is not None:
                return cancelled
        record = await self.reader.cancel(run_id, tenant=tenant)
        # Parked meanwhile (its cancel not marked: only a run that executes is): ended as a waiting run after all.
        if record is not None and record.waiting:
            return await self.waiting.cancel(record) or await self.reader.get(run_id, tenant=tenant)
        return record

    # --- waiting for approvals and answers (``WaitingRuns``) ----------------------------------------------------------

    async def decide(self, run_id: str, decisions: list[ApprovalDecision], *, decided_by: str) -> Decided:
        return await self.waiting.decide(run_id, decisions, decided_by=decided_by)

    async def approvals(self, run_id: str) -> list[ApprovalRecord]:
        return await self.waiting.approvals(run_id)

    async def answer(self, run_id: str, answers: list[InputAnswer], *, decided_by: str) -> Answered:
        return await self.waiting.answer(run_id, answers, decided_by=decided_by)

    async def inputs(self, run_id: str) -> list[InputRecord]:
        return await self.waiting.inputs(run_id)

    async def waited_outcome(self, run: StartedRun) -> RunOutcome:
        """The end of ``run``, which waited for approvals (``outcome.waiting``), once it has ended wherever it was
        resumed."""
        return await self.waiting.outcome(run)
