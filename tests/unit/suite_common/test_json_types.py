"""The JSON Schema type name of a decoded value, and of a value JSON cannot hold."""

from __future__ import annotations

import datetime

import pytest

from suite_common.json_types import json_type


@pytest.mark.parametrize(
    ("value", "kind"),
    [
        (None, "null"),
        (True, "boolean"),
        (7, "integer"),
        (7.0, "number"),
        ("seven", "string"),
        ([7], "array"),
        ({"n": 7}, "object"),
        ((7,), "tuple"),
        (datetime.date(2026, 1, 1), "date"),
    ],
)
def test_each_value_is_named_as_json_schema_names_it(value: object, kind: str) -> None:
    assert json_type(value) == kind


def test_without_integers_a_whole_number_is_a_number_as_json_itself_says() -> None:
    assert json_type(7, integers=False) == "number"
    assert json_type(True, integers=False) == "boolean"
    assert json_type(7.5, integers=False) == "number"
