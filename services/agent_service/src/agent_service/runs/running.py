"""Runs as this replica executes them: begun (admitted, stored), executed to their end, detached.

``RunExecutor`` holds what the replica's runs share: its lease owner's name, the runs executing here (``active``),
the tenant slots they hold (``slots_held``), and the task group detached and resumed runs execute in (set while
``AgentRuns.running`` is entered). Reading runs (``reading``) and keeping their leases (``takeover``) work on it.
"""

from __future__ import annotations

import os
import socket
import uuid
from collections.abc import Callable, Coroutine
from dataclasses import dataclass, field, replace
from typing import Any

import anyio
from anyio.abc import TaskGroup

from agent_service.admission.budgets import Budgets
from agent_service.admission.run_slots import UNCAPPED, RunSlots, SlotClaim
from agent_service.core.errors import UpstreamError
from agent_service.core.images import messages_by_reference
from agent_service.core.limits import SpendGuard
from agent_service.core.run import ResumePoint, RunOutcome, RunPlan
from agent_service.core.tenancy import DEFAULT_TENANT, Caller
from agent_service.engine.loop import AgentLoop
from agent_service.runs.journal import LiveSink, RunJournal, RunMoved
from agent_service.runs.plans import Takeover, conversation_settings, stored_plan, takeover
from agent_service.runs.summaries import StoredSummary
from agent_service.settings import AgentSettings
from agent_service.store import (
    ConversationBusy,
    ConversationFull,
    ConversationLimits,
    ConversationTooLarge,
    NewApproval,
    NewRun,
    Parked,
    RunRecord,
    RunStore,
    StoreError,
)
from suite_common.errors import ApiError
from suite_common.lifecycle import Lifecycle
from suite_common.logging import get_logger
from suite_common.wire import AgentRunRequest, RunDone, RunError, RunStarted

__all__ = ["CANCELLED_CALL", "RunExecutor", "StartedRun", "store_unavailable"]

_log = get_logger("agent_service.runs")

CANCELLED_CALL = "The run was cancelled before this tool call finished."
"""The result of a tool call that a cancelled run did not see finish."""


def store_unavailable(error: StoreError) -> ApiError:
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
    parked: bool = False
    """It waits for approvals or answers in the store (``_park``): this replica has let go of it."""
    stop_reason: str | None = None
    """Why this replica stopped it: ``cancelled`` (asked to), ``moved`` (the lease was lost); ``None``: its client
    left or the service is shutting down."""

    def stop(self, reason: str) -> None:
        self.stop_reason = reason
        if self.scope is not None:
            self.scope.cancel()


def _owner_name() -> str:
    """This replica's name as the owner of leases: its host, its process and a random part."""
    return f"{socket.gethostname()}:{os.getpid()}:{uuid.uuid4().hex[:8]}"


@dataclass(eq=False)
class RunExecutor:
    """Begins runs and executes them here, in the calling task or detached; the state the replica's runs share."""

    loop: AgentLoop
    store: RunStore | None
    settings: AgentSettings
    lifecycle: Lifecycle
    slots: RunSlots
    budgets: Budgets
    owner: str = field(default_factory=_owner_name, init=False)
    active: dict[str, StartedRun] = field(default_factory=dict, init=False)
    slots_held: dict[str, str] = field(default_factory=dict, init=False)
    """Run id → tenant, for each run holding a slot taken here (renewed by the keeper, released at its end)."""
    task_group: TaskGroup | None = field(default=None, init=False)
    """Where detached and resumed runs execute: set while ``AgentRuns.running`` is entered."""
    resume_claimed: Callable[[str], Coroutine[Any, Any, None]] | None = field(default=None, init=False)
    """Resumes a run claimed here by its own park (``WaitingRuns.resume_claimed``): its questions were answered
    before it parked."""

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
        what a run's call costs, so the cap bounds both together). The plan with its budgets' guard. Both in one
        Redis round trip when the budgets and the slots share one Redis (``Budgets.admit``)."""
        tenant = caller.tenant
        cap = caller.rules.max_concurrent_runs
        if cap is None:
            cap = self.settings.max_concurrent_runs_per_tenant
        slot = SlotClaim(self.slots, tenant, plan.run_id, cap or UNCAPPED)  # 0: no cap
        plan = replace(plan, spending=await self.budgets.admit(tenant, caller.user, caller.role, slot))
        self.slots_held[plan.run_id] = tenant
        return plan

    async def _begin(
        self, plan: RunPlan, request: AgentRunRequest, *, send: LiveSink | None, caller: Caller
    ) -> StartedRun:
        detached = request.on_disconnect == "continue"
        store = self.store
        # Whom its tool calls act for (``RunPlan.caller``): the caller's end user and that user's role (a role is an end
        # user's: none without one, as the run's ``user_role`` column keeps it), the conversation.
        role = caller.role if caller.user is not None else None
        plan = replace(plan, user=caller.user, role=role, conversation_id=request.conversation_id)
        if store is not None and request.conversation_id is not None:
            plan = replace(plan, summaries=StoredSummary(store, caller.tenant, request.conversation_id))
        if store is None:
            journal = RunJournal(
                plan.run_id, store=None, owner=self.owner, base=0, send=send, telemetry=self.loop.telemetry
            )
            return StartedRun(plan, journal, detached)
        # Stored with its images by reference (kept first); the run itself goes on with them as they came.
        input_messages, images = messages_by_reference(plan.messages)
        new = NewRun(
            run_id=plan.run_id,
            model=plan.model,
            plan=stored_plan(plan),
            input_messages=input_messages,
            conversation_id=request.conversation_id,
            caller=caller.name,
            tenant=caller.tenant,
            user=caller.user,
            user_role=role,
            settings=conversation_settings(request) if request.conversation_id is not None else None,
        )
        limits = ConversationLimits(self.settings.conversation_max_bytes, self.settings.conversation_max_runs)
        try:
            if images:
                await store.put_images(caller.tenant, images)
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
            raise store_unavailable(error) from None
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
                if outcome.parks:
                    outcome = await self._park(run, outcome)
                else:
                    outcome = await self._store_outcome(run, outcome)
                run.outcome = outcome
                return outcome
            run.outcome = await self._stopped(run)  # only ``run.stop`` cancels this scope
            return run.outcome
        except anyio.get_cancelled_exc_class():
            with anyio.CancelScope(shield=True):
                if self.lifecycle.interrupted:
                    await journal.log_calls()  # a call the shutdown cut off: counted in the budgets, so logged
                    await self.release_lease(plan.run_id)
                elif run.stop_reason is None and not run.parked:  # its client left (a parked run waits on)
                    journal.send = None
                    run.stop_reason = "cancelled"
                    await self._stored_cancel(run)
            raise
        finally:
            if run.parked:  # let go of already (``_park``): the run id may be resumed here again by now
                pass
            elif run.stop_reason != "moved":  # moved: the slot (same run id) is the new owner's now
                self._let_go(run)
                await self.release_slot(plan.run_id, spending=plan.spending)
            else:
                self._let_go(run)
                self.slots_held.pop(plan.run_id, None)
            journal.ended.set()

    def _let_go(self, run: StartedRun) -> None:
        if self.active.get(run.plan.run_id) is run:
            del self.active[run.plan.run_id]

    async def release_slot(self, run_id: str, *, now: bool = False, spending: SpendGuard | None = None) -> None:
        """Give back the slot taken for ``run_id`` here, if any: off the answer's path when the slots are shared
        (``pending``: the next admission of its tenant here waits for it, the shutdown too), with the usage of the
        run's last call when no add has sent it yet (``spending``, its guard: ``Budgets.release``); unless ``now``
        (the run id may take a slot again at once, elsewhere: the release must come first)."""
        tenant = self.slots_held.pop(run_id, None)
        if tenant is None:
            return
        if self.slots.shared and not now:
            slot = SlotClaim(self.slots, tenant, run_id, UNCAPPED)  # given back: its cap no longer matters
            self.budgets.pending.start(tenant, self.budgets.release(slot, spending))
            return
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

    async def release_lease(self, run_id: str) -> None:
        """Let another replica take ``run_id`` over at once (its lease expires now), within two seconds."""
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

    async def _park(self, run: StartedRun, outcome: RunOutcome) -> RunOutcome:
        """The run waits for approvals of ``outcome.waiting`` and answers to ``outcome.asked``, in the store
        (``RunStore.park``): nothing of it stays here, its slot is released first; the last decision or answer, or
        the wait's limit, resumes it on any replica (``waiting``). A
        run that cannot be parked fails, as one whose step cannot be stored; one whose cancel was asked for ends
        cancelled."""
        plan = run.plan
        servers = {tool.name: tool.server for tool in plan.tools}
        held = [
            NewApproval(call.id, outcome.iterations, call.name, servers.get(call.name), call.arguments)
            for call in outcome.waiting
        ]
        # Released before the park write, not after: a decision may resume the run here the instant it is parked,
        # and the slot it takes then has the same key (its run id): given back now, not off the path.
        await self.release_slot(plan.run_id, now=True)
        run.parked = True  # from here on its lease is not renewed, nor the run stopped for the lease it gives up
        try:
            parked = await run.journal.park(
                held,
                wait_seconds=plan.approval_timeout_seconds,
                deadline_left_seconds=max(0.0, plan.limits.deadline.remaining()),
                asked=outcome.asked,
                lease_seconds=self.settings.lease_seconds,
            )
        except RunMoved as moved:
            run.parked, run.stop_reason = False, "moved"
            await run.journal.tell(RunError(run_id=plan.run_id, code=moved.code, message=moved.message))
            return replace(outcome, waiting=[], asked=[], error=moved)
        except UpstreamError as failure:  # the lease lapses and another replica takes the run over
            run.parked = False
            _log.error("run_not_parked", run_id=plan.run_id, error=failure.message)
            await run.journal.tell(RunError(run_id=plan.run_id, code=failure.code, message=failure.message))
            return replace(outcome, waiting=[], asked=[], error=failure)
        except BaseException:  # cancelled before the write (which is shielded): not parked, stopped as any run
            run.parked = False
            raise
        if not parked:  # its cancel was asked for just before: it ends cancelled, as a cancelled waiting run
            run.parked, run.stop_reason = False, "cancelled"
            await self._stored_cancel(run)
            return RunOutcome("cancelled", run.journal.iterations, run.journal.usage, [])
        # Let go of before its client hears of the wait: a decision may resume it here the next instant.
        self._let_go(run)
        await run.journal.release_stored()
        if parked is Parked.RESUMED:  # answered while its round ran: it goes on at once, as a decided run does
            if self.task_group is None or self.resume_claimed is None:
                await self.release_lease(plan.run_id)  # shutting down: another replica takes it over
            else:
                self.task_group.start_soon(self.resume_claimed, plan.run_id)
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
                await run.journal.finish_cancelled(done, CANCELLED_CALL)
            except UpstreamError as error:
                _log.error("run_cancel_not_stored", run_id=run.plan.run_id, error=error.message)

    async def reopen(
        self, record: RunRecord, *, next_seq: int, deadline_seconds: float | None = None, decided: bool = False
    ) -> tuple[RunJournal, Takeover]:
        """A stored run this replica holds the lease of now (taken over, or resumed after its wait): its journal,
        numbered from ``next_seq`` and counted on from what is stored, and where the run resumes, its round's
        decisions included (``deadline_seconds``, ``decided``: as ``plans.takeover``'s). The one place both paths
        rebuild the run: its plan with its budgets as its tenant's rules say now and its conversation's summary."""
        store = self.store
        assert store is not None
        run_id = record.run_id
        journal = RunJournal(
            run_id,
            store=store,
            owner=self.owner,
            base=0,
            next_seq=next_seq,
            attempt=record.resumes,
            telemetry=self.loop.telemetry,
        )
        earlier = await store.earlier_messages(run_id)
        own = await store.run_messages(run_id)
        approvals = await store.approvals(run_id)
        inputs = await store.inputs(run_id)
        taken = takeover(
            record,
            earlier,
            own,
            deadline_seconds=deadline_seconds,
            approvals=approvals,
            inputs=inputs,
            decided=decided,
        )
        tenant = record.tenant or DEFAULT_TENANT
        # Its budgets as its tenant's rules say now, its end user's (by the role the user had) included.
        plan = replace(taken.plan, spending=self.budgets.guard(tenant, record.user, record.user_role or "user"))
        if record.conversation_id is not None:
            plan = replace(plan, summaries=StoredSummary(store, tenant, record.conversation_id))
        taken = replace(taken, plan=plan)
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
        return journal, taken

    async def hold_slot(self, tenant: str, run_id: str) -> None:
        """A slot of its tenant for a resumed run. Admitted once already: over its tenant's cap it still goes on
        (refusing it now would fail a run its client was told had started), but it counts, so new runs wait. Redis
        down: it goes on uncounted."""
        try:
            await self.slots.acquire(tenant, run_id, UNCAPPED)
            self.slots_held[run_id] = tenant
        except ApiError as error:
            _log.warning("run_slot_not_taken", run_id=run_id, error=error.message)

    def detach(self, run: StartedRun, *, stream_text: bool) -> None:
        """Execute ``run`` in the background: its client may leave, the run goes on until it ends or the service
        stops (then another replica takes it over)."""
        if self.task_group is None:
            raise RuntimeError("AgentRuns.running() is not entered")
        self.task_group.start_soon(self.execute_tracked, run, stream_text)

    async def execute_tracked(self, run: StartedRun, stream_text: bool) -> None:
        """``execute`` as a task of ``task_group`` (a detached or resumed run): counted as work in flight, so that a
        draining service waits for it as for a request; a crash is logged, not raised."""
        with self.lifecycle.track(), anyio.CancelScope() as scope, self.lifecycle.cancels(scope):
            try:
                await self.execute(run, stream_text=stream_text)
            except Exception as error:  # a bug: logged; the lease lapses and the run is taken over
                _log.error("run_crashed", run_id=run.plan.run_id, exc_info=error)
