"""Checking tool arguments and structured results against JSON Schemas, and naming what is wrong."""

from __future__ import annotations

from typing import Any

import pytest

from mcp_client_service.calls.validation import SchemaValidators, Violation, describe_violations, json_path
from support.misbehaving_mcp_server import PLAN_TRIP_SCHEMA

KEY = ("plan_trip", "inputSchema")

VALID_TRIP: dict[str, Any] = {
    "traveller": {"name": "Ada", "age": 36},
    "legs": [
        {"from": "LHR", "to": "JFK", "when": "2026-03-01"},
        {"from": "JFK", "to": "LHR", "when": {"flexible": True}},
    ],
    "cabin": "economy",
}


def _problems(arguments: dict[str, Any], schema: dict[str, Any] = PLAN_TRIP_SCHEMA) -> list[str]:
    return [str(violation) for violation in SchemaValidators().check(KEY, schema, arguments)]


def test_valid_arguments_have_no_violations() -> None:
    assert _problems(VALID_TRIP) == []


def test_a_wrong_type_names_the_field_the_expected_type_and_what_came() -> None:
    assert _problems({**VALID_TRIP, "traveller": {"name": "Ada", "age": "thirty"}}) == [
        '$.traveller.age: expected integer, got string "thirty"'
    ]


def test_a_missing_required_field_is_named_by_its_own_path() -> None:
    trip = {**VALID_TRIP, "legs": [{"from": "LHR", "when": "2026-03-01"}]}

    assert _problems(trip) == ["$.legs[0].to: is required but missing"]


def test_fields_behind_ref_and_defs_are_named_where_they_are_in_the_arguments() -> None:
    trip = {**VALID_TRIP, "legs": [*VALID_TRIP["legs"], {"from": "LHR", "to": 7, "when": "2026-03-09"}]}

    assert _problems(trip) == ["$.legs[2].to: expected string, got integer 7"]


def test_an_enum_violation_lists_the_allowed_values() -> None:
    assert _problems({**VALID_TRIP, "cabin": "first"}) == [
        '$.cabin: must be one of "economy", "business"; got string "first"'
    ]


def test_a_oneof_violation_says_why_each_alternative_failed() -> None:
    trip = {**VALID_TRIP, "legs": [{"from": "LHR", "to": "JFK", "when": "next tuesday"}]}

    (problem,) = _problems(trip)

    assert problem.startswith("$.legs[0].when: matches none of the allowed alternatives: ")
    assert '(1) must match the pattern "^[0-9]{4}-[0-9]{2}-[0-9]{2}$"; got "next tuesday"' in problem
    assert '(2) expected object, got string "next tuesday"' in problem


def test_a_oneof_alternative_failing_deeper_names_the_inner_field() -> None:
    trip = {**VALID_TRIP, "legs": [{"from": "LHR", "to": "JFK", "when": {"flexible": "yes"}}]}

    (problem,) = _problems(trip)

    assert '(2) flexible: must be true; got string "yes"' in problem


def test_an_unexpected_property_is_named_with_the_accepted_ones() -> None:
    assert _problems({**VALID_TRIP, "seat": "12A"}) == [
        "$.seat: is not an accepted property (accepted: traveller, legs, cabin)"
    ]


def test_bounds_of_numbers_strings_and_arrays_are_stated() -> None:
    trip = {**VALID_TRIP, "traveller": {"name": "", "age": -1}, "legs": []}

    assert _problems(trip) == [
        "$.legs: must have at least 1 items; got 0",
        "$.traveller.age: must be >= 0; got -1",
        "$.traveller.name: must be at least 1 characters long; got 0",
    ]


def test_every_violation_is_reported_at_most_five_then_counted() -> None:
    violations = [Violation(f"$.field{index}", "is required but missing") for index in range(7)]

    text = describe_violations(violations)

    assert text.count("is required but missing") == 5
    assert text.endswith("; and 2 more")


def test_keys_that_are_not_identifiers_are_quoted_in_the_path() -> None:
    assert json_path(["legs", 0, "departure time"]) == '$.legs[0]["departure time"]'
    assert json_path([]) == "$"


def test_a_schema_is_compiled_once_however_many_calls_check_against_it() -> None:
    validators = SchemaValidators()

    for _ in range(50):
        validators.check(KEY, PLAN_TRIP_SCHEMA, VALID_TRIP)

    assert validators.compilations == 1


def test_an_equal_schema_from_a_new_catalog_version_is_not_compiled_again_a_changed_one_is() -> None:
    validators = SchemaValidators()
    validators.check(KEY, PLAN_TRIP_SCHEMA, VALID_TRIP)

    relisted = {**PLAN_TRIP_SCHEMA}  # an equal schema object from a later listing
    assert validators.check(KEY, relisted, VALID_TRIP) == []
    assert validators.compilations == 1

    changed = {**PLAN_TRIP_SCHEMA, "required": ["traveller", "legs", "cabin"]}
    assert validators.check(KEY, changed, VALID_TRIP) == []
    assert validators.compilations == 2
    assert [str(v) for v in validators.check(KEY, changed, {"traveller": {"name": "A", "age": 1}, "legs": [1]})] == [
        "$.cabin: is required but missing",
        "$.legs[0]: expected object, got integer 1",
    ]


@pytest.mark.parametrize(
    "schema",
    [
        {"type": "object", "properties": {"a": {"type": "no-such-type"}}},  # not a valid JSON Schema
        {"type": "object", "properties": {"a": {"$ref": "#/$defs/missing"}}},  # a $ref that resolves nowhere
        {"type": "object", "properties": {"a": {"$ref": "https://example.com/remote.json"}}},  # never fetched
    ],
    ids=["invalid", "dangling-ref", "remote-ref"],
)
def test_a_schema_that_cannot_be_used_is_not_enforced(schema: dict[str, Any]) -> None:
    validators = SchemaValidators()

    assert validators.check(("t", "inputSchema"), schema, {"a": 1}) == []
    assert validators.check(("t", "inputSchema"), schema, {"a": 1}) == []


def test_a_schema_declaring_an_older_dialect_is_checked_by_that_dialect() -> None:
    # Draft 7's "dependencies" keyword does not exist in 2020-12.
    schema = {
        "$schema": "http://json-schema.org/draft-07/schema#",
        "type": "object",
        "dependencies": {"card": ["expiry"]},
    }

    assert _problems({"card": "4111"}, schema) == ["$: 'expiry' is a dependency of 'card'"]


def test_draft_04_exclusive_bounds_are_stated_as_strict() -> None:
    # Draft 4 spells an exclusive bound as a boolean beside "minimum"/"maximum"; 0 fails "> 0", not ">= 0".
    schema = {
        "$schema": "http://json-schema.org/draft-04/schema#",
        "type": "object",
        "properties": {
            "low": {"type": "number", "minimum": 0, "exclusiveMinimum": True},
            "high": {"type": "number", "maximum": 10, "exclusiveMaximum": True},
            "inclusive": {"type": "number", "minimum": 0, "exclusiveMinimum": False},
        },
    }

    assert _problems({"low": 0, "high": 10, "inclusive": -1}, schema) == [
        "$.high: must be < 10; got 10",
        "$.inclusive: must be >= 0; got -1",
        "$.low: must be > 0; got 0",
    ]
