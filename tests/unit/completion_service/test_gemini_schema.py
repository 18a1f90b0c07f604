"""JSON Schema -> Gemini's OpenAPI subset: each rewrite on its own, then any schema at all."""

from __future__ import annotations

import copy
import json
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from completion_service.providers.gemini.schema import (
    ALLOWED_KEYWORDS,
    ALLOWED_TYPES,
    to_gemini_parameters,
    to_gemini_schema,
)

ANY_VALUE = {
    "anyOf": [
        {"type": "string"},
        {"type": "number"},
        {"type": "boolean"},
        {"type": "object"},
        {
            "type": "array",
            "items": {"anyOf": [{"type": "string"}, {"type": "number"}, {"type": "boolean"}, {"type": "object"}]},
        },
    ]
}


def _object(**properties: Any) -> dict[str, Any]:
    return {"type": "object", "properties": properties}


def test_a_schema_gemini_understands_passes_unchanged() -> None:
    schema = {
        "type": "object",
        "title": "Search",
        "description": "What to look for.",
        "properties": {
            "query": {"type": "string", "minLength": 1, "maxLength": 200, "pattern": "^[^<>]*$"},
            "top_k": {"type": "integer", "minimum": 1, "maximum": 20, "format": "int32"},
            "since": {"type": "string", "format": "date-time"},
            "tags": {"type": "array", "items": {"type": "string", "enum": ["a", "b"]}, "minItems": 1, "maxItems": 3},
            "score": {"type": "number", "format": "double", "nullable": True},
            "strict": {"type": "boolean"},
        },
        "required": ["query"],
        "minProperties": 1,
    }
    assert to_gemini_parameters(schema) == schema


def test_the_input_schema_is_not_modified() -> None:
    schema = {"type": "object", "$defs": {"X": {"type": "string"}}, "properties": {"x": {"$ref": "#/$defs/X"}}}
    before = copy.deepcopy(schema)
    to_gemini_parameters(schema)
    assert schema == before


def test_annotation_keywords_gemini_rejects_are_dropped() -> None:
    schema = {
        "$schema": "https://json-schema.org/draft/2020-12/schema",
        "$id": "https://example.com/search",
        "$comment": "generated",
        "type": "object",
        "additionalProperties": False,
        "properties": {"query": {"type": "string", "examples": ["cats"], "readOnly": False}},
    }
    assert to_gemini_parameters(schema) == _object(query={"type": "string"})


def test_a_default_is_told_to_the_model_in_the_description() -> None:
    converted = to_gemini_schema({"type": "integer", "description": "How many.", "default": 5})
    assert converted == {"type": "integer", "description": "How many. (default: 5)"}


def test_refs_into_defs_and_definitions_are_inlined_with_their_siblings_winning() -> None:
    schema = {
        "type": "object",
        "$defs": {"Unit": {"type": "string", "enum": ["c", "f"], "description": "A unit."}},
        "definitions": {"Point": {"type": "object", "properties": {"x": {"type": "number"}}, "required": ["x"]}},
        "properties": {
            "unit": {"$ref": "#/$defs/Unit", "description": "The unit to answer in."},
            "at": {"$ref": "#/definitions/Point"},
        },
    }
    assert to_gemini_parameters(schema) == _object(
        unit={"type": "string", "enum": ["c", "f"], "description": "The unit to answer in."},
        at={"type": "object", "properties": {"x": {"type": "number"}}, "required": ["x"]},
    )


def test_a_recursive_ref_is_cut_one_level_down_into_a_described_object() -> None:
    schema = {
        "type": "object",
        "$defs": {
            "Node": {
                "title": "Node",
                "type": "object",
                "properties": {
                    "name": {"type": "string"},
                    "children": {"type": "array", "items": {"$ref": "#/$defs/Node"}},
                },
            }
        },
        "properties": {"tree": {"$ref": "#/$defs/Node"}},
    }
    tree = to_gemini_parameters(schema)["properties"]["tree"]  # type: ignore[index]
    assert tree["properties"]["name"] == {"type": "string"}
    assert tree["properties"]["children"]["items"] == {
        "title": "Node",
        "type": "object",
        "description": "(a nested Node of the same structure as above)",
    }


def test_a_ref_that_cannot_be_resolved_becomes_any_value_with_a_note() -> None:
    converted = to_gemini_schema({"$ref": "https://example.com/schemas/thing.json"})
    assert converted == {**ANY_VALUE, "description": "(a value as described by https://example.com/schemas/thing.json)"}


def test_const_becomes_a_one_value_enum() -> None:
    assert to_gemini_schema({"const": "insert_text"}) == {"type": "string", "enum": ["insert_text"]}
    assert to_gemini_schema({"type": "string", "const": "x"}) == {"type": "string", "enum": ["x"]}


def test_a_type_list_with_null_becomes_one_type_and_nullable() -> None:
    assert to_gemini_schema({"type": ["string", "null"], "description": "A name."}) == {
        "type": "string",
        "nullable": True,
        "description": "A name.",
    }


def test_a_nullable_object_keeps_its_properties_on_the_object() -> None:
    converted = to_gemini_schema({"type": ["object", "null"], "properties": {"a": {"type": "string"}}})
    assert converted == {"type": "object", "properties": {"a": {"type": "string"}}, "nullable": True}


def test_a_type_list_of_several_types_becomes_any_of_with_each_types_keywords_in_its_branch() -> None:
    converted = to_gemini_schema(
        {"type": ["string", "array"], "description": "One id or many.", "minLength": 3, "items": {"type": "string"}}
    )
    assert converted == {
        "description": "One id or many.",
        "anyOf": [{"type": "string", "minLength": 3}, {"type": "array", "items": {"type": "string"}}],
    }


def test_any_of_with_a_null_branch_becomes_nullable_and_keeps_the_unions_description() -> None:
    # What pydantic writes for ``limit: int | None = None``.
    schema = {
        "anyOf": [{"type": "integer"}, {"type": "null"}],
        "default": None,
        "title": "Limit",
        "description": "At most.",
    }
    assert to_gemini_schema(schema) == {
        "title": "Limit",
        "description": "At most.",
        "type": "integer",
        "nullable": True,
    }


def test_any_of_with_a_null_branch_and_a_ref_resolves_the_ref() -> None:
    schema = {
        "type": "object",
        "$defs": {"Mode": {"type": "string", "enum": ["fast", "deep"]}},
        "properties": {"mode": {"anyOf": [{"$ref": "#/$defs/Mode"}, {"type": "null"}]}},
    }
    assert to_gemini_parameters(schema) == _object(mode={"type": "string", "enum": ["fast", "deep"], "nullable": True})


def test_one_of_becomes_any_of() -> None:
    converted = to_gemini_schema({"oneOf": [{"type": "string"}, {"type": "integer"}, {"type": "null"}]})
    assert converted == {"anyOf": [{"type": "string"}, {"type": "integer"}], "nullable": True}


def test_all_of_parts_are_merged() -> None:
    schema = {
        "type": "object",
        "$defs": {"Base": {"type": "object", "properties": {"id": {"type": "string"}}, "required": ["id"]}},
        "allOf": [
            {"$ref": "#/$defs/Base"},
            {"properties": {"note": {"type": "string"}}, "required": ["note"]},
        ],
    }
    assert to_gemini_parameters(schema) == {
        "type": "object",
        "properties": {"id": {"type": "string"}, "note": {"type": "string"}},
        "required": ["id", "note"],
    }


@pytest.mark.parametrize(
    ("schema", "expected"),
    [
        ({"type": "string", "format": "date-time"}, {"type": "string", "format": "date-time"}),
        ({"type": "string", "format": "email"}, {"type": "string", "description": "(format: email)"}),
        ({"type": "string", "format": "uri"}, {"type": "string", "description": "(format: uri)"}),
        ({"type": "integer", "format": "int64"}, {"type": "integer", "format": "int64"}),
        ({"type": "number", "format": "float"}, {"type": "number", "format": "float"}),
        ({"type": "integer", "format": "float"}, {"type": "integer", "description": "(format: float)"}),
    ],
)
def test_only_the_formats_gemini_documents_for_a_type_are_kept(schema: dict[str, Any], expected: Any) -> None:
    assert to_gemini_schema(schema) == expected


def test_constraints_gemini_cannot_enforce_are_told_in_words() -> None:
    schema = {
        "type": "number",
        "description": "A ratio.",
        "exclusiveMinimum": 0,
        "exclusiveMaximum": 1,
        "multipleOf": 0.25,
    }
    assert to_gemini_schema(schema) == {
        "type": "number",
        "description": "A ratio. (exclusiveMinimum: 0; exclusiveMaximum: 1; multipleOf: 0.25)",
    }


def test_draft_4_exclusive_bounds_keep_the_bound_and_say_it_is_exclusive() -> None:
    assert to_gemini_schema({"type": "integer", "minimum": 0, "exclusiveMinimum": True}) == {
        "type": "integer",
        "minimum": 0,
        "description": "(exclusiveMinimum: 0)",
    }


def test_a_numeric_enum_keeps_its_type_and_lists_the_values_in_words() -> None:
    # Gemini's enum holds strings only; declaring them as strings would change the arguments' type.
    assert to_gemini_schema({"type": "integer", "enum": [1, 2, 3]}) == {
        "type": "integer",
        "description": "(one of: 1, 2, 3)",
    }


def test_null_in_an_enum_becomes_nullable() -> None:
    assert to_gemini_schema({"enum": ["asc", "desc", None]}) == {
        "type": "string",
        "enum": ["asc", "desc"],
        "nullable": True,
    }


@pytest.mark.parametrize(
    ("schema", "expected_type"),
    [
        ({"properties": {"a": {"type": "string"}}}, "object"),
        ({"items": {"type": "string"}}, "array"),
        ({"enum": ["a", "b"]}, "string"),
        ({"enum": [1, 2]}, "integer"),
        ({"maxLength": 3}, "string"),
        ({"minimum": 0}, "number"),
    ],
)
def test_a_schema_without_type_gets_the_type_its_keywords_imply(schema: dict[str, Any], expected_type: str) -> None:
    assert to_gemini_schema(schema)["type"] == expected_type


def test_an_untyped_schema_accepts_any_value_since_vertex_requires_a_type() -> None:
    assert to_gemini_schema({"description": "Anything."}) == {"description": "Anything.", **ANY_VALUE}
    assert to_gemini_schema(True) == ANY_VALUE


def test_an_array_without_items_gets_items_since_gemini_requires_them() -> None:
    assert to_gemini_schema({"type": "array"}) == {"type": "array", "items": ANY_VALUE}


def test_tuples_become_items_of_any_of_the_positions_with_the_order_in_words() -> None:
    converted = to_gemini_schema({"type": "array", "prefixItems": [{"type": "number"}, {"type": "string"}]})
    assert converted == {
        "type": "array",
        "items": {"anyOf": [{"type": "number"}, {"type": "string"}]},
        "description": "(items in order: number, string)",
    }


def test_a_free_form_object_loses_additional_properties_and_says_what_its_values_are() -> None:
    converted = to_gemini_schema(
        _object(labels={"type": "object", "additionalProperties": {"type": "string"}, "description": "Labels."})
    )
    assert converted["properties"]["labels"] == {
        "type": "object",
        "description": "Labels. (other property values: string)",
    }


def test_required_names_that_are_not_properties_are_dropped() -> None:
    converted = to_gemini_schema({"type": "object", "properties": {"a": {"type": "string"}}, "required": ["a", "b"]})
    assert converted["required"] == ["a"]


@pytest.mark.parametrize(
    "schema",
    [
        {"type": "object", "properties": {}},
        {"type": "object"},
        {"type": "object", "additionalProperties": False, "$schema": "x"},
        {},
    ],
)
def test_a_tool_without_parameters_has_no_parameters_at_all(schema: dict[str, Any]) -> None:
    # Gemini refuses "parameters.properties: should be non-empty for OBJECT type".
    assert to_gemini_parameters(schema) is None


# --- any schema at all --------------------------------------------------------------------------

_scalars = st.none() | st.booleans() | st.integers(-5, 5) | st.floats(-5, 5, allow_nan=False) | st.text(max_size=5)
_types = st.sampled_from(["string", "number", "integer", "boolean", "array", "object", "null"])
_keyword_values: dict[str, st.SearchStrategy[Any]] = {
    "type": _types | st.lists(_types, min_size=1, max_size=3),
    "description": st.text(max_size=10),
    "title": st.text(max_size=10),
    "format": st.sampled_from(["date-time", "email", "enum", "int32", "double", "uuid"]),
    "enum": st.lists(_scalars, max_size=4),
    "const": _scalars,
    "default": _scalars,
    "examples": st.lists(_scalars, max_size=2),
    "minLength": st.integers(0, 5),
    "pattern": st.just("^a"),
    "minimum": st.integers(-3, 3),
    "exclusiveMinimum": st.integers(-3, 3) | st.booleans(),
    "multipleOf": st.integers(1, 3),
    "minItems": st.integers(0, 3),
    "uniqueItems": st.booleans(),
    "additionalProperties": st.booleans(),
    "required": st.lists(st.sampled_from(["a", "b", "c"]), max_size=3),
    "nullable": st.booleans(),
    "deprecated": st.booleans(),
    "$comment": st.text(max_size=5),
    "$ref": st.sampled_from(["#/$defs/A", "#/$defs/B", "#/definitions/C", "#", "#/$defs/missing", "other.json"]),
}


def _nodes(keywords: dict[str, st.SearchStrategy[Any]]) -> st.SearchStrategy[dict[str, Any]]:
    """Schemas of a few keywords each: all of them at once would only make slow, contradictory schemas."""
    return st.lists(st.sampled_from(sorted(keywords)), max_size=4, unique=True).flatmap(
        lambda keys: st.fixed_dictionaries({key: keywords[key] for key in keys})
    )


def _schemas(children: st.SearchStrategy[Any]) -> st.SearchStrategy[Any]:
    structural: dict[str, st.SearchStrategy[Any]] = {
        "properties": st.dictionaries(st.sampled_from(["a", "b", "c", "d"]), children, max_size=3),
        "items": children | st.lists(children, max_size=2),
        "prefixItems": st.lists(children, max_size=2),
        "anyOf": st.lists(children, max_size=3),
        "oneOf": st.lists(children, max_size=3),
        "allOf": st.lists(children, max_size=2),
        "additionalProperties": children,
    }
    return st.booleans() | _nodes({**_keyword_values, **structural})


_any_schema = st.recursive(_nodes(_keyword_values), _schemas, max_leaves=10)


@st.composite
def _root_schemas(draw: st.DrawFn) -> dict[str, Any]:
    root = draw(_any_schema)
    root = dict(root) if isinstance(root, dict) else {}
    root["$defs"] = {"A": draw(_any_schema), "B": draw(_any_schema)}
    root["definitions"] = {"C": draw(_any_schema)}
    return root


def _check(schema: Any, path: str) -> None:
    assert isinstance(schema, dict), path
    assert set(schema) <= ALLOWED_KEYWORDS, f"{path}: {set(schema) - ALLOWED_KEYWORDS}"
    # Vertex AI refuses a schema without a type; a union's branches carry theirs.
    assert "type" in schema or "anyOf" in schema, path
    kind = schema.get("type")
    if kind is not None:
        assert kind in ALLOWED_TYPES, path
    if "anyOf" in schema:
        assert "type" not in schema, path
        assert len(schema["anyOf"]) >= 2, path
        for index, branch in enumerate(schema["anyOf"]):
            _check(branch, f"{path}.anyOf[{index}]")
    if kind == "array":
        _check(schema["items"], f"{path}.items")
    else:
        assert "items" not in schema, path
        assert "minItems" not in schema, path
    if "properties" in schema:
        assert kind == "object", path
        assert schema["properties"], path
        for name, child in schema["properties"].items():
            _check(child, f"{path}.properties.{name}")
    if "required" in schema:
        assert set(schema["required"]) <= set(schema.get("properties", {})), path
    if "enum" in schema:
        assert kind == "string", path
        assert all(isinstance(value, str) for value in schema["enum"]), path
    if "format" in schema:
        allowed = {"string": {"enum", "date-time"}, "number": {"float", "double"}, "integer": {"int32", "int64"}}
        assert schema["format"] in allowed.get(kind or "", set()), path
    for key in ("title", "description"):
        if key in schema:
            assert isinstance(schema[key], str), path
    if "nullable" in schema:
        assert schema["nullable"] is True, path


@settings(max_examples=150, deadline=None)
@given(_root_schemas())
def test_any_json_schema_becomes_one_with_only_keywords_and_shapes_gemini_accepts(schema: dict[str, Any]) -> None:
    before = copy.deepcopy(schema)
    converted = to_gemini_schema(schema)
    _check(json.loads(json.dumps(converted)), "$")
    assert schema == before
    parameters = to_gemini_parameters(schema)
    if parameters is not None:
        _check(parameters, "$")
