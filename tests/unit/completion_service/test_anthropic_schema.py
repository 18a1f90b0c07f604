"""Tool schemas as Anthropic accepts them: older JSON Schema drafts rewritten to 2020-12, an object at the top."""

from __future__ import annotations

from completion_service.providers.anthropic.schema import input_schema

SEARCH_SCHEMA = {
    "type": "object",
    "properties": {"query": {"type": "string"}, "top_k": {"type": "integer", "default": 5}},
    "required": ["query"],
}


def test_older_json_schema_drafts_are_rewritten_to_what_2020_12_says_the_same_way() -> None:
    schema = {
        "$schema": "http://json-schema.org/draft-04/schema#",
        "properties": {
            "count": {
                "type": "integer",
                "minimum": 0,
                "exclusiveMinimum": True,
                "maximum": 9,
                "exclusiveMaximum": False,
            },
            "point": {"type": "array", "items": [{"type": "number"}, {"type": "number"}], "additionalItems": False},
            "items": {"type": "array", "items": {"type": "string"}},  # a property called "items" is no keyword
            "card": {"type": "string"},
        },
        "dependencies": {"card": ["billing"], "count": {"required": ["unit"]}},
        "definitions": {"unit": {"enum": ["m", "s"], "default": {"items": [1]}}},
    }
    assert input_schema(schema) == {
        "type": "object",
        "properties": {
            "count": {"type": "integer", "exclusiveMinimum": 0, "maximum": 9},
            "point": {"type": "array", "prefixItems": [{"type": "number"}, {"type": "number"}], "items": False},
            "items": {"type": "array", "items": {"type": "string"}},
            "card": {"type": "string"},
        },
        "dependentRequired": {"card": ["billing"]},
        "dependentSchemas": {"count": {"required": ["unit"]}},
        "definitions": {"unit": {"enum": ["m", "s"], "default": {"items": [1]}}},  # data, not schema: untouched
    }


def test_a_schema_without_a_type_or_with_a_list_for_properties_is_made_an_object() -> None:
    assert input_schema({"properties": []}) == {"type": "object", "properties": {}}
    assert input_schema(SEARCH_SCHEMA) == SEARCH_SCHEMA
