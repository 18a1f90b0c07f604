"""A person's answer to a server's question: defaults filled in (SEP-1034), checked against the requested schema."""

from __future__ import annotations

import pytest

from suite_common.elicitation import InvalidAnswer, answer_content

SCHEMA = {
    "type": "object",
    "properties": {
        "name": {"type": "string", "default": "John Doe"},
        "age": {"type": "integer", "default": 30},
        "status": {"type": "string", "enum": ["active", "inactive"], "default": "active"},
        "verified": {"type": "boolean"},
    },
    "required": ["verified"],
}


def test_an_answer_that_leaves_fields_out_gets_the_schemas_defaults() -> None:
    assert answer_content(SCHEMA, {"verified": True}) == {
        "name": "John Doe",
        "age": 30,
        "status": "active",
        "verified": True,
    }


def test_what_the_person_gave_wins_over_a_default() -> None:
    assert answer_content(SCHEMA, {"verified": False, "age": 41})["age"] == 41


def test_an_answer_of_the_wrong_type_is_refused_naming_the_field() -> None:
    with pytest.raises(InvalidAnswer, match="age"):
        answer_content(SCHEMA, {"verified": True, "age": "forty"})


def test_a_missing_required_field_without_a_default_is_refused() -> None:
    with pytest.raises(InvalidAnswer, match="verified"):
        answer_content(SCHEMA, {})


def test_a_value_outside_the_enum_is_refused() -> None:
    with pytest.raises(InvalidAnswer, match="status"):
        answer_content(SCHEMA, {"verified": True, "status": "gone"})


def test_a_schema_that_is_not_one_is_refused_as_such() -> None:
    with pytest.raises(InvalidAnswer, match="not a JSON Schema"):
        answer_content({"type": "object", "properties": {"x": {"type": 7}}}, {})
