"""The X-Deadline-Ms header: seconds left, and the budget a handler may spend."""

from __future__ import annotations

import pytest

from suite_common.deadline import parse_deadline_ms, time_budget
from suite_common.errors import ApiError


@pytest.mark.parametrize(
    ("header", "seconds"),
    [(None, None), ("1500", 1.5), (" 250.5 ", 0.2505), ("0", 0.0), ("-20", 0.0)],
)
def test_the_deadline_header_gives_the_seconds_left(header: str | None, seconds: float | None) -> None:
    assert parse_deadline_ms(header) == seconds


@pytest.mark.parametrize("header", ["soon", "", "nan", "1e3ms"])
def test_a_deadline_header_that_is_not_a_number_is_refused(header: str) -> None:
    with pytest.raises(ValueError, match="not a number of milliseconds"):
        parse_deadline_ms(header)


def test_the_budget_is_the_cap_shortened_by_the_callers_deadline() -> None:
    assert time_budget({}, 60) == 60
    assert time_budget({"X-Deadline-Ms": "1500"}, 60) == 1.5
    assert time_budget({"X-Deadline-Ms": "90000"}, 60) == 60


def test_a_malformed_deadline_header_is_a_400() -> None:
    with pytest.raises(ApiError) as caught:
        time_budget({"X-Deadline-Ms": "soon"}, 60)
    assert caught.value.status == 400
