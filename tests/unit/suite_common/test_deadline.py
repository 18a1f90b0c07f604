"""``Deadline``: the X-Deadline-Ms header both ways, the time left, child deadlines, and the clock of cancel scopes."""

from __future__ import annotations

import math

import anyio
import pytest

from suite_common.deadline import Deadline
from suite_common.errors import ApiError

pytestmark = pytest.mark.anyio


@pytest.mark.parametrize(
    ("header", "seconds"),
    [(None, 60.0), ("1500", 1.5), (" 250.5 ", 0.2505), ("0", 0.0), ("-20", 0.0), ("90000", 60.0)],
)
async def test_the_deadline_is_the_cap_shortened_by_the_callers_header(header: str | None, seconds: float) -> None:
    headers = {} if header is None else {"X-Deadline-Ms": header}
    deadline = Deadline.from_header(headers, cap=60)
    assert deadline.seconds == seconds
    assert deadline.remaining() <= seconds
    assert deadline.expired() is (seconds == 0)


async def test_without_a_header_and_without_a_cap_there_is_no_deadline() -> None:
    deadline = Deadline.from_header({}, cap=math.inf)
    assert deadline.remaining() == math.inf
    assert not deadline.expired()
    assert deadline.header() == {}
    assert Deadline.never() == deadline


@pytest.mark.parametrize("header", ["soon", "", "nan", "inf", "1e3ms"])
async def test_a_deadline_header_that_is_not_a_number_is_a_400(header: str) -> None:
    with pytest.raises(ApiError) as caught:
        Deadline.from_header({"X-Deadline-Ms": header}, cap=60)
    assert caught.value.status == 400
    assert caught.value.code == "invalid_request"
    assert "X-Deadline-Ms header must be a number of milliseconds" in caught.value.message


async def test_the_header_carries_the_whole_milliseconds_left_and_reads_back() -> None:
    deadline = Deadline.after(1.5)
    sent = deadline.header()
    assert 1400 <= int(sent["X-Deadline-Ms"]) <= 1500
    received = Deadline.from_header(sent, cap=60)
    assert received.at <= deadline.at
    assert Deadline.after(-3).header() == {"X-Deadline-Ms": "0"}


async def test_time_left_never_goes_below_zero_and_a_past_deadline_has_expired() -> None:
    past = Deadline.after(-3)
    assert past.remaining() == 0.0
    assert past.expired()
    assert not Deadline.after(60).expired()


async def test_a_child_deadline_is_the_earlier_of_the_parent_and_its_limit() -> None:
    parent = Deadline.after(10)
    shorter = parent.capped(1)
    assert shorter.at < parent.at
    assert shorter.seconds == pytest.approx(1, abs=0.05)
    longer = parent.capped(30)
    assert longer.at == parent.at
    assert longer.seconds <= 10
    assert Deadline.never().capped(2).seconds == 2


async def test_a_cancel_scope_at_the_deadline_ends_when_the_deadline_says_it_has_expired() -> None:
    deadline = Deadline.after(0.05)
    with anyio.fail_after(5), anyio.CancelScope(deadline=deadline.at) as scope:
        await anyio.sleep(10)
    assert scope.cancelled_caught
    assert deadline.expired()
    assert deadline.remaining() == 0.0
