"""A run parked to wait for approvals gives its tenant slot back, and never the slot of the run resumed from it."""

from __future__ import annotations

from typing import Any, cast

import pytest

from agent_service.admission.run_slots import LocalRunSlots
from agent_service.core.run import RunOutcome
from agent_service.runs.running import RunExecutor, StartedRun
from agent_service.store import NewApproval, Parked
from suite_common.errors import ApiError
from suite_common.lifecycle import Lifecycle
from suite_common.wire import ToolCall, Usage
from unit.agent_service.test_loop import plan
from unit.agent_service.test_planning import SETTINGS

pytestmark = pytest.mark.anyio


class CancelAsked:
    """A journal whose run's cancel was asked for just before it parks: the store does not park it."""

    store = None
    iterations = 1

    def __init__(self) -> None:
        self.usage = Usage()

    async def park(
        self,
        held: list[NewApproval],
        *,
        wait_seconds: float,
        deadline_left_seconds: float,
        asked: object = (),
        lease_seconds: float = 0,
    ) -> Parked:
        return Parked.CANCELLED


class ResumedAtOnce:
    """A journal whose park is followed at once by a decision on this replica resuming the run (same run id)."""

    def __init__(self, runs: RunExecutor, run_id: str) -> None:
        self.runs, self.run_id = runs, run_id

    async def park(
        self,
        held: list[NewApproval],
        *,
        wait_seconds: float,
        deadline_left_seconds: float,
        asked: object = (),
        lease_seconds: float = 0,
    ) -> Parked:
        await self.runs.hold_slot("acme", self.run_id)  # what ``WaitingRuns._resume`` does
        return Parked.WAITING

    async def release_stored(self) -> None:
        pass


async def test_a_run_resumed_the_instant_it_parks_keeps_the_slot_it_took() -> None:
    slots = LocalRunSlots(60)
    runs = RunExecutor(cast(Any, None), None, SETTINGS, Lifecycle(grace_seconds=1), slots, cast(Any, None))
    waiting = plan("send_payment")
    await runs.hold_slot("acme", waiting.run_id)  # the slot it took when it began
    run = StartedRun(waiting, cast(Any, ResumedAtOnce(runs, waiting.run_id)), detached=True)
    held = RunOutcome("stop", 1, Usage(), [], waiting=[ToolCall(id="call_pay", name="send_payment", arguments={})])

    await runs._park(run, held)

    assert runs.slots_held == {waiting.run_id: "acme"}
    with pytest.raises(ApiError) as refused:
        await slots.acquire("acme", "run_other", 1)  # the resumed run's slot is still counted
    assert refused.value.code == "too_many_runs"


async def test_a_run_whose_cancel_was_asked_for_as_it_parks_ends_cancelled_instead_of_waiting() -> None:
    runs = RunExecutor(cast(Any, None), None, SETTINGS, Lifecycle(grace_seconds=1), LocalRunSlots(60), cast(Any, None))
    run = StartedRun(plan("send_payment"), cast(Any, CancelAsked()), detached=True)
    held = RunOutcome("stop", 1, Usage(), [], waiting=[ToolCall(id="call_pay", name="send_payment", arguments={})])

    outcome = await runs._park(run, held)

    assert (outcome.finish_reason, outcome.waiting) == ("cancelled", [])
    assert (run.parked, run.stop_reason) == (False, "cancelled")
