"""``RunLimits``: the one question the loop asks before each LLM call."""

from __future__ import annotations

import pytest

from agent_service.limits import DEADLINE_SLACK_SECONDS, RunLimits
from suite_common.deadline import Deadline

pytestmark = pytest.mark.anyio


async def test_the_run_goes_on_while_it_has_rounds_and_time_left() -> None:
    limits = RunLimits(max_iterations=3, deadline=Deadline.after(60))
    assert [limits.stop_before_call(done) for done in range(3)] == [None, None, None]
    assert limits.stop_before_call(3) == "max_iterations"


async def test_a_passed_deadline_stops_the_run_before_its_next_call() -> None:
    limits = RunLimits(max_iterations=3, deadline=Deadline.after(-1))
    assert limits.stop_before_call(0) == "deadline"


async def test_the_last_round_done_ends_the_run_on_max_iterations_even_past_the_deadline() -> None:
    # As the loop always reported it: the rounds ran out first, whatever the clock says afterwards.
    limits = RunLimits(max_iterations=2, deadline=Deadline.after(-1))
    assert limits.stop_before_call(2) == "max_iterations"


async def test_a_failure_within_the_slack_of_the_deadline_is_the_deadlines_doing() -> None:
    assert RunLimits(max_iterations=1, deadline=Deadline.after(DEADLINE_SLACK_SECONDS / 2)).out_of_time()
    assert not RunLimits(max_iterations=1, deadline=Deadline.after(60)).out_of_time()
