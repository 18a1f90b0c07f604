"""Leases: the runs executing here keep theirs, and runs whose replica stopped renewing are taken over here.

A run is executed by one replica at a time, the owner of its lease. The owner renews the leases of its runs every
third of ``lease_seconds`` (``LeaseKeeper.keep``), with the tenant slots they hold; a replica that stops renewing
(killed, frozen, cut off) loses its runs to whichever replica's keeper claims them first, which resumes each from
its last stored step (``plans.takeover``). A replica shutting down releases its runs at once (``release_all``).
"""

from __future__ import annotations

import anyio

from agent_service.core.errors import UpstreamError
from agent_service.core.run import RunOutcome
from agent_service.core.tenancy import DEFAULT_TENANT
from agent_service.runs.journal import RunJournal
from agent_service.runs.reading import abandon_before
from agent_service.runs.running import CANCELLED_CALL, RunExecutor, StartedRun
from agent_service.runs.waiting import WaitingRuns
from agent_service.store import RunRecord, StoreError
from suite_common.logging import get_logger
from suite_common.wire import RunDone, RunError, RunErrorDetail, RunResumed

__all__ = ["RESUMED_SEQ_GAP", "LeaseKeeper"]

_log = get_logger("agent_service.runs")

RESUMED_SEQ_GAP = 100_000
"""A run taken over numbers its events from its last stored one plus this: the crashed replica may have sent events
it never stored (text of an unfinished answer), and a client re-attaching after those must still get every new one."""


class LeaseKeeper:
    """Renews the leases and slots of ``runs``' runs, stops those it lost, claims and resumes expired ones."""

    def __init__(self, runs: RunExecutor, waiting: WaitingRuns) -> None:
        self._runs = runs
        self._waiting = waiting

    async def release_all(self) -> None:
        """Runs still here at shutdown go to another replica at once, not after their lease."""
        runs = self._runs
        if runs.store is None or not runs.active:
            return
        with anyio.CancelScope(shield=True), anyio.move_on_after(2.0):
            try:
                await runs.store.release(runs.owner, list(runs.active))
            except StoreError as error:
                _log.warning("run_release_failed", error=str(error))

    async def keep(self) -> None:
        """Every third of ``lease_seconds``, until cancelled: renew the slots and leases of the runs here, and (unless
        the service is draining) claim expired runs, each resumed in ``runs.task_group``."""
        interval = self._runs.settings.lease_seconds / 3
        while True:
            await self._renew_slots()
            if self._runs.store is not None:
                try:
                    await self._renew()
                    if not self._runs.lifecycle.draining:
                        await self._claim()
                except StoreError as error:
                    _log.warning("run_leases_not_renewed", error=str(error))
            await anyio.sleep(interval)

    async def _renew_slots(self) -> None:
        by_tenant: dict[str, list[str]] = {}
        for run_id, tenant in self._runs.slots_held.items():
            by_tenant.setdefault(tenant, []).append(run_id)
        for tenant, run_ids in by_tenant.items():
            await self._runs.slots.renew(tenant, run_ids)

    async def _renew(self) -> None:
        runs = self._runs
        assert runs.store is not None
        # A run parked to wait for approvals gave its lease up: it is not renewed, nor stopped for having none.
        local = [run_id for run_id, run in runs.active.items() if run.journal.store is not None and not run.parked]
        if not local:
            return
        stop = await runs.store.renew_leases(runs.owner, local, lease_seconds=runs.settings.lease_seconds)
        for run_id in stop:
            run = runs.active.get(run_id)
            if run is None:
                continue
            record = await runs.store.get_run(run_id)
            lost = record is None or record.lease_owner != runs.owner or not record.active
            _log.info("run_stopped_by_lease", run_id=run_id, reason="moved" if lost else "cancelled")
            run.stop("moved" if lost else "cancelled")

    async def _claim(self) -> None:
        runs = self._runs
        assert runs.store is not None
        assert runs.task_group is not None
        claimed = await runs.store.claim_expired(
            runs.owner,
            lease_seconds=runs.settings.lease_seconds,
            abandon_before=abandon_before(runs.settings),
            limit=16,
        )
        for record in claimed:
            runs.task_group.start_soon(self._take_over, record)

    async def _take_over(self, record: RunRecord) -> None:
        """Resume a run whose replica stopped renewing its lease; this replica holds the lease now."""
        outcome = "failed"
        tenant = record.tenant or DEFAULT_TENANT
        if record.waiting:  # its wait's limit passed: no crash, no takeover
            await self._end_wait(record)
            return
        try:
            outcome = await self._resume(record, tenant)
        except (StoreError, UpstreamError) as error:  # the lease lapses again: another sweep retries
            _log.warning("run_takeover_failed", run_id=record.run_id, error=str(error))
        except Exception as error:  # a run this version cannot resume (a bug, a plan it cannot read): failed, once
            _log.error("run_takeover_failed", run_id=record.run_id, exc_info=error)
            await self._fail_unresumable(record)
        finally:
            self._runs.loop.telemetry.run_taken_over(run_id=record.run_id, outcome=outcome, resumes=record.resumes)
            if outcome != "resumed":  # ended here, or left: the dead replica's slot for it (same run id) goes too
                with anyio.CancelScope(shield=True):
                    await self._runs.slots.release(tenant, record.run_id)

    async def _end_wait(self, record: RunRecord) -> None:
        """A waiting run claimed here once its wait's limit passed: what ran out denied or declined, then resumed."""
        try:
            await self._waiting.expired(record)
        except (StoreError, UpstreamError) as error:  # the lease lapses again (still waiting): another sweep retries
            _log.warning("run_wait_not_ended", run_id=record.run_id, error=str(error))
        except Exception as error:  # a bug: logged; the same
            _log.error("run_wait_not_ended", run_id=record.run_id, exc_info=error)

    async def _fail_unresumable(self, record: RunRecord) -> None:
        runs = self._runs
        assert runs.store is not None
        message = "The run could not be resumed after the service running it stopped; start it again."
        detail = RunErrorDetail(code="not_resumable", message=message)
        journal = RunJournal(
            record.run_id, store=runs.store, owner=runs.owner, base=0, next_seq=record.last_seq + RESUMED_SEQ_GAP
        )
        try:
            await journal.finish_failed(RunError(run_id=record.run_id, code=detail.code, message=message), detail)
        except UpstreamError as error:
            _log.warning("run_takeover_failed", run_id=record.run_id, error=error.message)

    async def _resume(self, record: RunRecord, tenant: str) -> str:
        """End the run claimed here if it must not go on (cancelled, resumed too often, or only its end unstored),
        else execute it from its last stored step in ``runs.task_group``; how it went, for telemetry."""
        runs = self._runs
        store = runs.store
        assert store is not None
        task_group = runs.task_group
        if task_group is None:  # shutting down: the lease lapses again and another replica takes the run
            return "failed"
        run_id = record.run_id
        journal, taken = await runs.reopen(record, next_seq=record.last_seq + RESUMED_SEQ_GAP)
        if record.cancel_requested:
            done = RunDone(run_id=run_id, finish_reason="cancelled", iterations=record.iterations, usage=record.usage)
            await journal.finish_cancelled(done, CANCELLED_CALL)
            return "cancelled"
        if record.resumes > runs.settings.max_resumes:
            message = (
                f"The service running this run stopped {record.resumes} times while it ran (AGENT_MAX_RESUMES is "
                f"{runs.settings.max_resumes}); it is not resumed again: it may be what stops the service."
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
        await runs.hold_slot(tenant, run_id)
        run = StartedRun(taken.plan, journal, detached=True, resume=taken.resume)
        runs.active[run_id] = run
        task_group.start_soon(runs.execute_tracked, run, True)
        return "resumed"
