from __future__ import annotations

from typing import Literal

import pytest
from pydantic import BaseModel, Field, ValidationError

from suite_common.echo import MAX_ECHO_CHARS, clip, clip_names
from suite_common.http import describe_validation_error


def test_short_text_comes_back_unchanged_and_long_text_is_cut_with_a_marker() -> None:
    assert clip("gpt-4o") == "gpt-4o"
    assert clip("x" * MAX_ECHO_CHARS) == "x" * MAX_ECHO_CHARS
    assert clip("x" * 70_000) == "x" * (MAX_ECHO_CHARS - 1) + "…"
    assert clip(12345, limit=3) == "12…"


def test_a_long_list_shows_its_first_names_and_counts_the_rest() -> None:
    assert clip_names(["a", "b"]) == "a, b"
    assert clip_names([f"t{n}" for n in range(10_000)], limit=3) == "t0, t1, t2 and 9,997 more"
    assert clip_names(["a", "c" * 500]) == f"a, {'c' * (MAX_ECHO_CHARS - 1)}…"


class _Tagged(BaseModel):
    kind: Literal["a"]


class _Body(BaseModel):
    scores: dict[str, int]
    item: _Tagged | None = Field(default=None, discriminator="kind")


def test_a_validation_message_clips_the_callers_keys_and_quoted_input() -> None:
    key = "k" * 10_000
    with pytest.raises(ValidationError) as raised:
        _Body.model_validate({"scores": {key: "many"}, "item": {"kind": "z" * 10_000}})

    message = describe_validation_error(raised.value)

    assert f"scores.{'k' * (MAX_ECHO_CHARS - 1)}…: Input should be a valid integer" in message
    assert len(message) < 3 * MAX_ECHO_CHARS + 250
