"""Runs that wait for a person (the waiting columns of ``runs``): parked by their owner with the round's approvals
(``_approvals``) and questions (``_inputs``), their wait run out, cancelled while they wait.

A waiting run has no lease owner; its ``lease_expires_at`` is the earliest limit of what it waits for, after which
the lease sweep claims it (``_leases.claim_expired``, status still ``waiting``) and its claimer ends what has run out
(``expire_wait``: approvals denied, questions declined); a run that still waits for something else is parked again
until that one's limit.
"""

from __future__ import annotations

from collections.abc import Sequence
from datetime import timedelta
from typing import Any

import sqlalchemy as sa
from sqlalchemy import Connection

from agent_service.core.run import AskedInput
from agent_service.core.tenancy import DEFAULT_TENANT
from agent_service.store._approvals import Decision, decide_approvals, hold_approvals
from agent_service.store._inputs import InputDecision, announce_early_answers, answer_inputs, ask_inputs
from agent_service.store._rows import read_run, utc_now
from agent_service.store._wait_rows import locked_run, settle
from agent_service.store.records import ACTIVE_STATUSES, LeaseLost, NewApproval, Parked, RunRecord, StoredEvent
from agent_service.store.schema import approvals, inputs, run_events, run_messages, runs
from suite_common.sql import Database
from suite_common.wire import Message

__all__ = ["RunWaits"]


class RunWaits:
    """The waiting part of ``RunStore``: each method one transaction on ``_db``."""

    _db: Database

    async def park(
        self,
        run_id: str,
        events: list[StoredEvent],
        held: list[NewApproval],
        *,
        owner: str,
        wait_seconds: float,
        deadline_left_seconds: float,
        asked: Sequence[AskedInput] = (),
        lease_seconds: float = 30.0,
    ) -> Parked:
        """The run begins to wait: ``events`` stored, ``held`` stored as pending approvals (until now +
        ``wait_seconds``) and ``asked`` as pending questions (until their own ``expires_at``), its status
        ``waiting`` without a lease owner until the earliest of those limits. ``asked`` answered before (while the
        round ran) get their ``input_decided`` events; when that leaves nothing pending, the run is claimed again
        for ``owner`` (``lease_seconds``) to resume at once (``RESUMED``). ``CANCELLED`` (writing nothing): its
        cancel was asked for, it is not parked (a waiting run is not stopped by its lease: the cancel would be lost).
        Raises ``LeaseLost`` (writing nothing) when ``owner`` no longer holds the run."""

        def park(connection: Connection) -> Parked:
            now = utc_now()
            approvals_expire = now + timedelta(seconds=wait_seconds)
            limits = [approvals_expire] if held else []
            limits += [question.expires_at for question in asked]
            values: dict[str, Any] = {
                "status": "waiting",
                "lease_owner": None,
                "lease_expires_at": min(limits, default=approvals_expire),
                "waiting_since": now,
                "deadline_left_seconds": deadline_left_seconds,
                "updated_at": now,
            }
            if events:
                values["last_seq"] = events[-1].seq  # numbered on from the run's last stored one
            result = connection.execute(
                runs.update()
                .where(
                    runs.c.run_id == run_id,
                    runs.c.lease_owner == owner,
                    runs.c.status.in_(ACTIVE_STATUSES),
                    runs.c.cancel_requested.is_(False),
                )
                .values(**values)
            )
            if result.rowcount != 1:
                cancelled = connection.execute(
                    sa.select(runs.c.run_id).where(
                        runs.c.run_id == run_id,
                        runs.c.lease_owner == owner,
                        runs.c.status.in_(ACTIVE_STATUSES),
                        runs.c.cancel_requested.is_(True),
                    )
                ).one_or_none()
                if cancelled is not None:
                    return Parked.CANCELLED
                raise LeaseLost(f"Run {run_id} is no longer held by {owner}.")
            if events:
                connection.execute(
                    run_events.insert(),
                    [{"run_id": run_id, "seq": e.seq, "type": e.type, "data": e.data} for e in events],
                )
            tenant = connection.execute(sa.select(runs.c.tenant).where(runs.c.run_id == run_id)).scalar_one()
            hold_approvals(connection, run_id, tenant or DEFAULT_TENANT, held, now, approvals_expire)
            ask_inputs(connection, run_id, tenant or DEFAULT_TENANT, asked, now)
            last_seq = connection.execute(sa.select(runs.c.last_seq).where(runs.c.run_id == run_id)).scalar_one()
            announced = announce_early_answers(connection, run_id, asked, last_seq)
            if settle(connection, run_id, last_seq=announced, owner=owner, lease_seconds=lease_seconds, now=now):
                return Parked.RESUMED
            return Parked.WAITING

        return await self._db.run(f"park run {run_id} to wait for a person", park, write=True)

    async def expire_wait(self, run_id: str, *, owner: str, message: str) -> RunRecord | None:
        """A waiting run ``owner`` claimed once its wait's limit passed: its approvals that ran out denied with
        ``message`` and its questions that ran out declined (``approval_decided`` / ``input_decided`` events, by
        nobody). Nothing pending left: its status ``tool_loop``, the run returned. ``None``: the run is not
        ``owner``'s waiting run any more (decided meanwhile, or cancelled), or it still waits for something whose
        limit is later (parked again until then)."""

        def expire(connection: Connection) -> RunRecord | None:
            now = utc_now()
            row = locked_run(connection, run_id)
            if row is None or row.status != "waiting" or row.lease_owner != owner:
                return None
            ran_out = connection.execute(
                sa.select(approvals.c.tool_call_id)
                .where(approvals.c.run_id == run_id, approvals.c.status == "pending", approvals.c.expires_at <= now)
                .order_by(approvals.c.iteration, approvals.c.requested_at, approvals.c.tool_call_id)
            ).scalars()
            denied = [Decision(tool_call_id, approve=False, message=message) for tool_call_id in ran_out]
            decide_approvals(connection, run_id, denied, None, now)
            unanswered = connection.execute(
                sa.select(inputs.c.input_id)
                .where(inputs.c.run_id == run_id, inputs.c.status == "pending", inputs.c.expires_at <= now)
                .order_by(inputs.c.iteration, inputs.c.requested_at, inputs.c.input_id)
            ).scalars()
            declined = [InputDecision(input_id, "decline") for input_id in unanswered]
            last_seq = answer_inputs(connection, run_id, declined, None, now)
            later = [
                connection.execute(
                    sa.select(sa.func.min(table.c.expires_at)).where(
                        table.c.run_id == run_id, table.c.status == "pending"
                    )
                ).scalar_one()
                for table in (approvals, inputs)
            ]
            still = [limit for limit in later if limit is not None]
            if still:  # waits on for what has time left: parked again (no owner) until its limit
                connection.execute(
                    runs.update()
                    .where(runs.c.run_id == run_id)
                    .values(lease_owner=None, lease_expires_at=min(still), last_seq=last_seq, updated_at=now)
                )
                return None
            connection.execute(
                runs.update()
                .where(runs.c.run_id == run_id)
                .values(status="tool_loop", waiting_since=None, last_seq=last_seq, updated_at=now)
            )
            return read_run(connection, run_id)

        return await self._db.run(f"end the wait of run {run_id}", expire, write=True)

    async def cancel_waiting(
        self, run_id: str, answers: list[tuple[int, Message]], done: StoredEvent
    ) -> RunRecord | None:
        """End a run that waits (nobody executes it): its held calls answered (``answers``: positions in the run),
        its pending approvals denied and questions cancelled, ``done`` stored as its last event, status
        ``cancelled``. ``None``: it was not waiting (any more)."""

        def cancel(connection: Connection) -> RunRecord | None:
            now = utc_now()
            row = locked_run(connection, run_id)
            if row is None or row.status != "waiting" or row.lease_owner is not None:
                return None
            connection.execute(
                approvals.update()
                .where(approvals.c.run_id == run_id, approvals.c.status == "pending")
                .values(status="denied", message="The run was cancelled.", decided_at=now)
            )
            connection.execute(
                inputs.update()
                .where(inputs.c.run_id == run_id, inputs.c.status == "pending")
                .values(status="cancelled", decided_at=now)
            )
            if answers:
                connection.execute(
                    run_messages.insert(),
                    [
                        {
                            "run_id": run_id,
                            "position": position,
                            "message": message.model_dump(mode="json", by_alias=True, exclude_none=True),
                        }
                        for position, message in answers
                    ],
                )
            seq = max(done.seq, row.last_seq + 1)
            connection.execute(
                run_events.insert(), [{"run_id": run_id, "seq": seq, "type": done.type, "data": done.data}]
            )
            connection.execute(
                runs.update()
                .where(runs.c.run_id == run_id)
                .values(
                    status="cancelled",
                    finish_reason="cancelled",
                    cancel_requested=True,
                    lease_owner=None,
                    lease_expires_at=None,
                    waiting_since=None,
                    last_seq=seq,
                    updated_at=now,
                )
            )
            return read_run(connection, run_id)

        return await self._db.run(f"cancel the waiting run {run_id}", cancel, write=True)
