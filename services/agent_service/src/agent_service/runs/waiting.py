"""Runs that wait for a person's approval: decided, resumed, run out of time, cancelled, and waited for by their
client.

A waiting run lives in the store only (``RunStore.park``, done by the executor when the loop holds calls): no
replica holds it, nothing of it is in a process, so it survives any replica's death and any replica takes its
decision. The decision that leaves nothing of the round undecided claims the run for the deciding replica, which
resumes it here at once; a wait whose limit passes is claimed by the lease sweep (``takeover``), which denies what is
undecided ("no decision in time") and resumes it the same way. A resumed run has a fresh deadline of what it had
left when it began to wait, makes each approved call once, tells the model of each denied one, and goes on.
"""

from __future__ import annotations

from dataclasses import replace

from agent_service.core.errors import UpstreamError
from agent_service.core.run import RunOutcome
from agent_service.core.tenancy import DEFAULT_TENANT
from agent_service.engine.approvals import NO_DECISION_IN_TIME, denied_result
from agent_service.runs.reading import RunReader
from agent_service.runs.running import CANCELLED_CALL, RunExecutor, StartedRun, store_unavailable
from agent_service.store import (
    ApprovalNotPending,
    ApprovalRecord,
    Decided,
    Decision,
    RunRecord,
    RunStore,
    StoredEvent,
    StoreError,
)
from suite_common.echo import clip
from suite_common.errors import ApiError
from suite_common.logging import get_logger
from suite_common.wire import ApprovalDecision, Message, RunDone, dump

__all__ = ["WaitingRuns"]

_log = get_logger("agent_service.runs")


class WaitingRuns:
    """The waiting runs of ``runs``' store, as this replica decides, resumes and cancels them."""

    def __init__(self, runs: RunExecutor, reader: RunReader) -> None:
        self._runs = runs
        self._reader = reader

    def _store(self) -> RunStore:
        store = self._runs.store
        if store is None:
            raise ApiError(404, "runs_not_stored", "Runs are not stored by this service (AGENT_DATABASE_URL is empty).")
        return store

    async def decide(self, run_id: str, decisions: list[ApprovalDecision], *, decided_by: str) -> Decided:
        """Record the decisions (409 ``approval_not_pending`` for a call that does not wait for one, and then none
        is kept); the run resumes here once no call of its round waits any more."""
        store = self._store()
        seen: set[str] = set()
        for decision in decisions:
            if decision.tool_call_id in seen:
                raise ApiError(400, "invalid_request", f"toolCallId {clip(decision.tool_call_id)} is decided twice.")
            seen.add(decision.tool_call_id)
        try:
            decided = await store.decide(
                run_id,
                [Decision(d.tool_call_id, d.approve, d.message) for d in decisions],
                decided_by=decided_by,
                owner=self._runs.owner,
                lease_seconds=self._runs.settings.lease_seconds,
            )
        except ApprovalNotPending as refused:
            raise ApiError(
                409,
                "approval_not_pending",
                f"The tool call {clip(refused.tool_call_id)} of run {clip(run_id)} does not wait for a decision: "
                "decided already, unknown, or the run is not waiting.",
            ) from None
        except StoreError as error:
            raise store_unavailable(error) from None
        if decided.resumed:
            await self._resume(decided.record, decided.approvals)
        return decided

    async def approvals(self, run_id: str) -> list[ApprovalRecord]:
        try:
            return await self._store().approvals(run_id)
        except StoreError as error:
            raise store_unavailable(error) from None

    async def expired(self, record: RunRecord) -> str:
        """A waiting run the lease sweep claimed here, its wait's limit passed: its undecided calls denied, then
        resumed. How it went, for telemetry (``decided``: it was decided or cancelled meanwhile)."""
        store = self._store()
        ended = await store.expire_wait(record.run_id, owner=self._runs.owner, message=NO_DECISION_IN_TIME)
        if ended is None:
            return "decided"
        await self._resume(ended, await store.approvals(record.run_id))
        return "resumed"

    async def _resume(self, record: RunRecord, approvals: list[ApprovalRecord]) -> None:
        """Execute the run, claimed here, from its waiting round: approved calls made, denied ones answered."""
        runs = self._runs
        task_group = runs.task_group
        if task_group is None:  # shutting down: its lease lapses and another replica takes it over
            return
        run_id = record.run_id
        journal, taken = await runs.reopen(
            record, next_seq=record.last_seq + 1, deadline_seconds=record.deadline_left_seconds
        )
        resume = taken.resume
        open_ids = {call.id for call in resume.calls if call.id not in resume.results}
        decided = {approval.tool_call_id: approval for approval in approvals if approval.tool_call_id in open_ids}
        approved = {call_id for call_id, approval in decided.items() if approval.status == "approved"}
        denied = {
            call_id: denied_result(approval.message)
            for call_id, approval in decided.items()
            if approval.status == "denied"
        }
        resume = replace(resume, redispatch=resume.redispatch | approved, answered=denied)
        tenant = record.tenant or DEFAULT_TENANT
        await runs.hold_slot(tenant, run_id)
        plan = replace(taken.plan, spending=runs.budgets.guard(tenant, record.user, record.user_role or "user"))
        run = StartedRun(plan, journal, detached=True, resume=resume)
        runs.active[run_id] = run
        _log.info("run_resumed_after_approval", run_id=run_id, approved=len(approved), denied=len(denied))
        task_group.start_soon(runs.execute_tracked, run, True)

    async def cancel(self, record: RunRecord) -> RunRecord | None:
        """End a waiting run at once (nobody executes it): cancelled, its held calls answered. ``None``: it was not
        waiting any more (decided meanwhile: cancel it as a running one)."""
        store = self._store()
        try:
            own = await store.run_messages(record.run_id)
            turn = next((index for index in range(len(own) - 1, -1, -1) if own[index].role == "assistant"), None)
            answers: list[tuple[int, Message]] = []
            if turn is not None:
                answered = {message.tool_call_id for message in own[turn + 1 :] if message.role == "tool"}
                for index, call in enumerate(own[turn].tool_calls or []):
                    if call.id not in answered:
                        message = Message(role="tool", tool_call_id=call.id, content=CANCELLED_CALL, is_error=True)
                        answers.append((turn + 1 + index, message))
            done = RunDone(
                run_id=record.run_id, finish_reason="cancelled", iterations=record.iterations, usage=record.usage
            )
            event = StoredEvent(record.last_seq + 1, done.type, dump(done))
            return await store.cancel_waiting(record.run_id, answers, event)
        except StoreError as error:
            raise store_unavailable(error) from None

    async def outcome(self, run: StartedRun) -> RunOutcome:
        """The end of a run that waited, for a client that waits for it (``stream: false``): once its last event is
        stored, as the store says it ended."""
        store = self._store()

        async def skip(_: StoredEvent) -> None:  # only its end matters: ``follow`` returns after the last event
            pass

        await self._reader.follow(run.plan.run_id, run.journal.flushed_seq, skip)
        try:
            record = await store.get_run(run.plan.run_id)
            own = await store.run_messages(run.plan.run_id)
        except StoreError as error:
            raise store_unavailable(error) from None
        if record is None:
            raise ApiError(404, "run_not_found", f"No run {run.plan.run_id} is stored.")
        appended = own[len(run.plan.messages) - run.journal.base :]
        failure = UpstreamError(record.error.code, record.error.message) if record.error is not None else None
        finish = record.finish_reason if record.finish_reason not in (None, "error") else "stop"
        return RunOutcome(
            finish or "stop",
            record.iterations,
            record.usage,
            appended,
            failure,
            appended_from=len(run.plan.messages),
            budget=record.budget,
        )
