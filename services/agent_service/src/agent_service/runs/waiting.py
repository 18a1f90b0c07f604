"""Runs that wait for a person: for approvals of their calls, and for answers to their tool servers' questions
(MCP elicitation); decided and answered, resumed, run out of time, cancelled, and waited for by their client.

A waiting run lives in the store only (``RunStore.park``, done by the executor when the loop holds calls): no
replica holds it, nothing of it is in a process, so it survives any replica's death and any replica takes its
decision or answer. The decision or answer that leaves nothing of the round pending claims the run for that replica,
which resumes it here at once; a wait whose limit passes is claimed by the lease sweep (``takeover``), which denies
what is undecided ("no decision in time") and declines what is unanswered, and resumes it the same way. A resumed
run has a fresh deadline of what it had left when it began to wait, makes each approved call once, tells the model
of each denied one, forwards each answer to the gateway where its call waited and follows that call to its result,
and goes on.
"""

from __future__ import annotations

import json

import anyio

from agent_service.core.errors import OUTBOUND_BLOCKED, UpstreamError, outbound_blocked
from agent_service.core.run import RunOutcome
from agent_service.core.tenancy import DEFAULT_TENANT
from agent_service.engine.approvals import NO_DECISION_IN_TIME
from agent_service.engine.context import CONTEXT_LENGTH_EXCEEDED
from agent_service.engine.output import INVALID_OUTPUT, INVALID_OUTPUT_STATUS
from agent_service.runs.reading import RunReader
from agent_service.runs.running import CANCELLED_CALL, RunExecutor, StartedRun, store_unavailable
from agent_service.store import (
    Answered,
    ApprovalNotPending,
    ApprovalRecord,
    Decided,
    Decision,
    InputDecision,
    InputNotPending,
    InputRecord,
    RunRecord,
    RunStore,
    StoredEvent,
    StoreError,
)
from suite_common.deadline import Deadline
from suite_common.echo import clip
from suite_common.elicitation import InvalidAnswer, answer_content
from suite_common.errors import ApiError
from suite_common.logging import get_logger
from suite_common.wire import ApprovalDecision, CallerContext, ElicitationAnswer, InputAnswer, Message, RunDone, dump

__all__ = ["WaitingRuns", "stored_failure"]

_log = get_logger("agent_service.runs")

_CANCEL_SECONDS = 5.0
"""The longest a cancel waits to tell the gateway that a cancelled run's questions will not be answered."""


class WaitingRuns:
    """The waiting runs of ``runs``' store, as this replica decides, resumes and cancels them."""

    def __init__(self, runs: RunExecutor, reader: RunReader) -> None:
        self._runs = runs
        self._reader = reader
        runs.resume_claimed = self.resume_claimed

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
            await self._resume_decided(decided.record)
        return decided

    async def answer(self, run_id: str, answers: list[InputAnswer], *, decided_by: str) -> Answered:
        """Record the answers to the run's questions (409 ``input_not_pending`` for one that does not wait for an
        answer, 400 ``invalid_input`` for an accepted content its schema refuses: then none is kept); the run
        resumes here once nothing of its round waits any more."""
        store = self._store()
        seen: set[str] = set()
        for answer in answers:
            if answer.input_id in seen:
                raise ApiError(400, "invalid_request", f"inputId {clip(answer.input_id)} is answered twice.")
            seen.add(answer.input_id)
        questions = await self.inputs(run_id)
        pending = {question.input_id: question for question in questions if question.status == "pending"}
        checked = [_checked(run_id, answer, pending.get(answer.input_id)) for answer in answers]
        try:
            answered = await store.answer(
                run_id,
                checked,
                decided_by=decided_by,
                owner=self._runs.owner,
                lease_seconds=self._runs.settings.lease_seconds,
            )
        except InputNotPending as refused:
            raise _not_pending(run_id, refused.input_id) from None
        except StoreError as error:
            raise store_unavailable(error) from None
        if answered.resumed:
            await self._resume_decided(answered.record)
        return answered

    async def resume_claimed(self, run_id: str) -> None:
        """A run claimed here by its own park (its questions answered while its round ran), resumed."""
        try:
            record = await self._store().get_run(run_id)
        except StoreError as error:  # the lease lapses and another replica takes the run over
            _log.warning("run_not_resumed_after_wait", run_id=run_id, error=str(error))
            return
        if record is not None:
            await self._resume_decided(record)

    async def _resume_decided(self, record: RunRecord) -> None:
        """The run claimed here by the decision or answer that left nothing pending, resumed."""
        try:
            await self._resume(record, decided=True)
        except Exception as error:  # the decisions are kept (200): a takeover resumes the run from them
            _log.warning("run_not_resumed_after_wait", run_id=record.run_id, error=str(error))
            await self._runs.release_lease(record.run_id)

    async def inputs(self, run_id: str) -> list[InputRecord]:
        try:
            return await self._store().inputs(run_id)
        except StoreError as error:
            raise store_unavailable(error) from None

    async def approvals(self, run_id: str) -> list[ApprovalRecord]:
        try:
            return await self._store().approvals(run_id)
        except StoreError as error:
            raise store_unavailable(error) from None

    async def expired(self, record: RunRecord) -> str:
        """A waiting run the lease sweep claimed here, its wait's limit passed: its undecided calls denied and its
        unanswered questions declined, then resumed. How it went, for telemetry (``decided``: it was decided or
        cancelled meanwhile, or it waits on for what has a later limit)."""
        store = self._store()
        ended = await store.expire_wait(record.run_id, owner=self._runs.owner, message=NO_DECISION_IN_TIME)
        if ended is None:
            return "decided"
        await self._resume(ended, decided=True)
        return "resumed"

    async def _resume(self, record: RunRecord, *, decided: bool) -> None:
        """Execute the run, claimed here, from its waiting round (``reopen`` answers the denied calls and says which
        approved ones are made: ``decided``, resumed by the decision itself, makes each); a run whose cancel was
        asked for ends cancelled instead."""
        runs = self._runs
        task_group = runs.task_group
        # Shutting down: another replica takes it over at once, from its stored decisions.
        if task_group is None:
            await runs.release_lease(record.run_id)
            return
        run_id = record.run_id
        journal, taken = await runs.reopen(
            record, next_seq=record.last_seq + 1, deadline_seconds=record.deadline_left_seconds, decided=decided
        )
        if record.cancel_requested:
            done = RunDone(run_id=run_id, finish_reason="cancelled", iterations=record.iterations, usage=record.usage)
            await journal.finish_cancelled(done, CANCELLED_CALL)
            return
        resume = taken.resume
        await runs.hold_slot(record.tenant or DEFAULT_TENANT, run_id)
        run = StartedRun(taken.plan, journal, detached=True, resume=resume)
        runs.active[run_id] = run
        _log.info(
            "run_resumed_after_wait",
            run_id=run_id,
            made=len(resume.redispatch),
            denied=len(resume.answered),
            answered=len(resume.answers),
        )
        task_group.start_soon(runs.execute_tracked, run, True)

    async def cancel(self, record: RunRecord) -> RunRecord | None:
        """End a waiting run at once (nobody executes it): cancelled, its held calls answered, its questions
        cancelled (at the gateway too). ``None``: it was not waiting any more (decided meanwhile: cancel it as a
        running one)."""
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
            asked = [question for question in await store.inputs(record.run_id) if question.status == "pending"]
            cancelled = await store.cancel_waiting(record.run_id, answers, event)
        except StoreError as error:
            raise store_unavailable(error) from None
        if cancelled is not None:
            await self._cancel_questions(cancelled, asked)
        return cancelled

    async def _cancel_questions(self, record: RunRecord, asked: list[InputRecord]) -> None:
        """The gateway told that nobody will answer the questions of a run cancelled while it waited (``cancel``),
        so that their calls end now rather than when the gateway's own limit passes. Best effort, bounded: the run
        is cancelled already."""
        if not asked:
            return
        caller = CallerContext(tenant=record.tenant or DEFAULT_TENANT, user=record.user, run_id=record.run_id)
        tools = self._runs.loop.dispatch.tools
        with anyio.move_on_after(_CANCEL_SECONDS):
            for question in asked:
                try:
                    await tools.answer_question(
                        question.input_id, ElicitationAnswer(action="cancel"), Deadline.after(_CANCEL_SECONDS), caller
                    )
                except UpstreamError as error:
                    _log.warning("question_not_cancelled", run_id=record.run_id, error=error.message)

    async def outcome(self, run: StartedRun) -> RunOutcome:
        """The end of a run that waited, for a client that waits for it (``stream: false``): once its last event is
        stored, as the store says it ended."""
        store = self._store()

        last: list[StoredEvent] = []

        async def keep(event: StoredEvent) -> None:  # only its end matters: ``follow`` returns after the last event
            last[:] = [event]

        await self._reader.follow(run.plan.run_id, run.journal.flushed_seq, keep)
        try:
            record = await store.get_run(run.plan.run_id)
            own = await store.run_messages(run.plan.run_id)
        except StoreError as error:
            raise store_unavailable(error) from None
        if record is None:
            raise ApiError(404, "run_not_found", f"No run {run.plan.run_id} is stored.")
        appended = own[len(run.plan.messages) - run.journal.base :]
        failure = stored_failure(record.error.code, record.error.message) if record.error is not None else None
        finish = record.finish_reason if record.finish_reason not in (None, "error") else "stop"
        warnings = json.loads(last[0].data).get("warnings") if last and last[0].type == "done" else None
        return RunOutcome(
            finish or "stop",
            record.iterations,
            record.usage,
            appended,
            failure,
            appended_from=len(run.plan.messages),
            budget=record.budget,
            warnings=warnings,
            output=record.output,
        )


_STORED_ERROR_STATUS = {
    INVALID_OUTPUT: INVALID_OUTPUT_STATUS,
    OUTBOUND_BLOCKED: outbound_blocked().status,
    CONTEXT_LENGTH_EXCEEDED: 400,  # the completion service's status for it, passed through to a live run's client
}
"""The HTTP status a live run's client gets for a run error of these codes (any other: 502, a peer's failure)."""


def _checked(run_id: str, answer: InputAnswer, question: InputRecord | None) -> InputDecision:
    """``answer`` as it is kept: an accepted content with its schema's defaults filled and checked (400
    ``invalid_input``), none with a decline or a cancel."""
    if question is None:
        raise _not_pending(run_id, answer.input_id)
    if answer.action != "accept":
        return InputDecision(answer.input_id, answer.action)
    try:
        content = answer_content(question.requested_schema, answer.content)
    except InvalidAnswer as invalid:
        raise ApiError(400, "invalid_input", f"inputId {clip(answer.input_id)}: {invalid}") from None
    return InputDecision(answer.input_id, "accept", content)


def _not_pending(run_id: str, input_id: str) -> ApiError:
    return ApiError(
        409,
        "input_not_pending",
        f"The input {clip(input_id)} of run {clip(run_id)} does not wait for an answer: answered already, unknown, "
        "or the run is not waiting.",
    )


def stored_failure(code: str, message: str) -> UpstreamError:
    """A stored run error as the failure to answer with: the status a live run of it would have answered."""
    return UpstreamError(code, message, status=_STORED_ERROR_STATUS.get(code, 502))
