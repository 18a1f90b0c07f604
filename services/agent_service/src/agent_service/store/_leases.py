"""The leases of runs (columns of ``runs``): renewed by their owner, released, claimed once expired, and runs whose
lease expired too long ago failed as abandoned; a cancel requested of whichever replica holds a run.
"""

from __future__ import annotations

from datetime import datetime, timedelta

import sqlalchemy as sa
from sqlalchemy import Connection

from agent_service.store._inputs import close_unparked
from agent_service.store._rows import read_run, run_record, utc_now
from agent_service.store.records import ACTIVE_STATUSES, UNFINISHED_STATUSES, RunRecord
from agent_service.store.schema import run_events, runs
from suite_common.sql import Database
from suite_common.wire import RunError, dump

__all__ = ["RunLeases"]


class RunLeases:
    """The leases part of ``RunStore``: each method one transaction on ``_db``."""

    _db: Database

    async def request_cancel(self, run_id: str) -> RunRecord | None:
        """Mark the run's cancel request (the owner sees it when it renews its leases); ``None`` for an unknown id.
        A run already final is returned unchanged."""

        def mark(connection: Connection) -> RunRecord | None:
            connection.execute(
                runs.update()
                .where(runs.c.run_id == run_id, runs.c.status.in_(ACTIVE_STATUSES), runs.c.cancel_requested.is_(False))
                .values(cancel_requested=True, updated_at=utc_now())
            )
            return read_run(connection, run_id)

        return await self._db.run(f"request the cancel of run {run_id}", mark, write=True)

    async def renew_leases(self, owner: str, run_ids: list[str], *, lease_seconds: float) -> set[str]:
        """Push the lease of ``owner``'s active runs among ``run_ids`` to now + ``lease_seconds``. Returns the ids
        among them whose cancel was requested, and those ``owner`` no longer holds (taken over, or no longer
        active): both stop."""
        if not run_ids:
            return set()

        def renew(connection: Connection) -> dict[str, bool]:
            # A run being cancelled keeps its lease too: its owner still has to finish it.
            result = connection.execute(
                runs.update()
                .where(runs.c.run_id.in_(run_ids), runs.c.lease_owner == owner, runs.c.status.in_(ACTIVE_STATUSES))
                .values(lease_expires_at=utc_now() + timedelta(seconds=lease_seconds))
                .returning(runs.c.run_id, runs.c.cancel_requested)
            )
            return {row.run_id: bool(row.cancel_requested) for row in result}

        held = await self._db.run(f"renew the leases of {owner}", renew, write=True)
        return {run_id for run_id in run_ids if held.get(run_id, True)}

    async def release(self, owner: str, run_ids: list[str]) -> None:
        """Let another replica take these runs at once (the lease expires now): a replica shutting down."""
        if not run_ids:
            return

        def release(connection: Connection) -> None:
            connection.execute(
                runs.update()
                .where(runs.c.run_id.in_(run_ids), runs.c.lease_owner == owner, runs.c.status.in_(ACTIVE_STATUSES))
                .values(lease_expires_at=utc_now())
            )

        await self._db.run(f"release the runs of {owner}", release, write=True)

    async def claim_expired(
        self, owner: str, *, lease_seconds: float, abandon_before: datetime, limit: int
    ) -> list[RunRecord]:
        """Take over active runs whose lease has expired, and waiting runs whose wait's limit passed (still
        ``waiting``, ``resumes`` unchanged: see ``RunWaits.expire_wait``): owner, lease and ``resumes + 1`` set,
        returned. Several
        replicas claim at once without taking the same run twice (``FOR UPDATE SKIP LOCKED`` on PostgreSQL).
        A run whose lease expired before ``abandon_before`` is not claimed but marked ``failed`` with the error
        ``abandoned`` (see ``fail_abandoned``)."""

        def claim(connection: Connection) -> list[RunRecord]:
            now = utc_now()
            _fail_abandoned(connection, abandon_before=abandon_before, now=now)
            expired = (
                connection.execute(
                    sa.select(runs.c.run_id)
                    # A waiting run's lease_expires_at is its wait's limit: the claimer denies what is undecided.
                    .where(runs.c.status.in_(UNFINISHED_STATUSES), runs.c.lease_expires_at < now)
                    .order_by(runs.c.lease_expires_at)
                    .limit(limit)
                    # Rows another replica is claiming right now are skipped, not waited for nor taken twice.
                    .with_for_update(skip_locked=True)
                )
                .scalars()
                .all()
            )
            if not expired:
                return []
            result = connection.execute(
                runs.update()
                # The same conditions again: a run is never taken over unless it is still active and expired.
                .where(
                    runs.c.run_id.in_(expired), runs.c.status.in_(UNFINISHED_STATUSES), runs.c.lease_expires_at < now
                )
                .values(
                    lease_owner=owner,
                    lease_expires_at=now + timedelta(seconds=lease_seconds),
                    # A wait that ran out is no crash: it does not count as a resume.
                    resumes=sa.case((runs.c.status == "waiting", runs.c.resumes), else_=runs.c.resumes + 1),
                    updated_at=now,
                )
                .returning(*runs.c)
            )
            claimed = {row.run_id: run_record(row) for row in result}
            # A run taken over mid-round: the questions its round asked are not answered through it any more.
            crashed = [run_id for run_id, record in claimed.items() if record.status in ACTIVE_STATUSES]
            close_unparked(connection, crashed, now)
            return [claimed[run_id] for run_id in expired if run_id in claimed]

        return await self._db.run(f"claim expired runs for {owner}", claim, write=True)

    async def fail_abandoned(self, *, abandon_before: datetime) -> int:
        """Mark ``failed`` (error ``abandoned``: no replica held the run's lease for too long) every active run whose
        lease expired before ``abandon_before``, with an ``error`` event appended; returns how many."""
        return await self._db.run(
            "fail abandoned runs",
            lambda connection: _fail_abandoned(connection, abandon_before=abandon_before, now=utc_now()),
            write=True,
        )


def _abandoned_message(abandoned_for: timedelta) -> str:
    seconds = max(0, round(abandoned_for.total_seconds()))
    return (
        f"The run was abandoned: no replica of agent-service held it for more than {seconds} seconds (the one "
        "running it stopped and no other took it over in time). Start the run again."
    )


def _fail_abandoned(connection: Connection, *, abandon_before: datetime, now: datetime) -> int:
    # SKIP LOCKED: a run another replica is claiming or failing right now is left to it (no waiting, and no
    # deadlock between two sweepers that would lock the same runs in another order).
    abandoned = connection.execute(
        sa.select(runs.c.run_id, runs.c.last_seq)
        .where(runs.c.status.in_(ACTIVE_STATUSES), runs.c.lease_expires_at < abandon_before)
        .with_for_update(skip_locked=True)
    ).all()
    if not abandoned:
        return 0
    message = _abandoned_message(now - abandon_before)
    for run_id, last_seq in abandoned:
        connection.execute(
            runs.update()
            .where(runs.c.run_id == run_id)
            .values(
                status="failed",
                finish_reason="error",
                error_code="abandoned",
                error_message=message,
                lease_owner=None,
                lease_expires_at=None,
                last_seq=last_seq + 1,
                updated_at=now,
            )
        )
    # The run's last event, so that a client following the stream sees it end.
    connection.execute(
        run_events.insert(),
        [
            {
                "run_id": run_id,
                "seq": last_seq + 1,
                "type": "error",
                "data": dump(RunError(run_id=run_id, code="abandoned", message=message)),
            }
            for run_id, last_seq in abandoned
        ],
    )
    return len(abandoned)
