"""JSON Schema (what MCP tools publish) as the OpenAPI 3.0 subset Gemini accepts in ``parameters``.

Gemini's ``Schema`` is a protobuf message: an unknown keyword (``$schema``, ``additionalProperties``,
``const``, ``oneOf``...) fails the whole request with ``Invalid JSON payload received``, ``type`` takes
one value, ``enum`` holds strings, and an ARRAY needs ``items``. The rewrite keeps the meaning:

- ``$ref`` into ``$defs`` / ``definitions`` is inlined; a recursive reference is cut, one level down,
  into a described free-form object;
- ``allOf`` is merged; ``oneOf`` becomes ``anyOf``; a ``null`` branch, a ``"null"`` in a type list or
  ``None`` in an ``enum`` becomes ``nullable``; a type list becomes ``anyOf`` of single types;
- ``const`` becomes a one-value ``enum``; a schema without ``type`` gets the one its keywords imply;
- what Gemini cannot enforce but the model should know (``default``, ``exclusiveMinimum``,
  ``multipleOf``, a ``format`` it rejects, a numeric ``enum``...) moves into the ``description``;
- what only annotates (``$schema``, ``$id``, ``examples``, ``readOnly``...) is dropped.

The tool server still validates the arguments it receives, so a constraint that survives only as
words can never let a wrong value through unnoticed: the model gets the tool's error and retries.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from suite_common.json_types import json_type

__all__ = ["ALLOWED_KEYWORDS", "ALLOWED_TYPES", "to_gemini_parameters", "to_gemini_schema"]

ALLOWED_KEYWORDS = frozenset(
    {
        "type",
        "format",
        "title",
        "description",
        "nullable",
        "enum",
        "items",
        "minItems",
        "maxItems",
        "properties",
        "required",
        "minProperties",
        "maxProperties",
        "minLength",
        "maxLength",
        "pattern",
        "minimum",
        "maximum",
        "anyOf",
    }
)
"""The ``Schema`` fields that both the Gemini API (v1beta) and Vertex AI (v1) document."""

ALLOWED_TYPES = frozenset({"string", "number", "integer", "boolean", "array", "object"})

_FORMATS: dict[str, frozenset[str]] = {
    "string": frozenset({"enum", "date-time"}),
    "number": frozenset({"float", "double"}),
    "integer": frozenset({"int32", "int64"}),
}
"""The formats Gemini documents per type; any other is told to the model in words."""

_MAX_DEPTH = 16
"""Nesting beyond this is cut like a recursive reference: such schemas are generated, not written."""

# Validation keywords Gemini has no field for, told to the model in the description when their value is simple.
_NOTED = (
    "exclusiveMinimum",
    "exclusiveMaximum",
    "multipleOf",
    "uniqueItems",
    "minContains",
    "maxContains",
)

_OBJECT_HINTS = (
    "properties",
    "required",
    "additionalProperties",
    "minProperties",
    "maxProperties",
    "patternProperties",
)
_ARRAY_HINTS = ("items", "prefixItems", "minItems", "maxItems", "uniqueItems", "contains")
_STRING_HINTS = ("minLength", "maxLength", "pattern")
_NUMBER_HINTS = ("minimum", "maximum", "exclusiveMinimum", "exclusiveMaximum", "multipleOf")

_KEYWORDS_BY_TYPE: dict[str, tuple[str, ...]] = {
    "object": ("properties", "required", "minProperties", "maxProperties", "additionalProperties"),
    "array": ("items", "prefixItems", "minItems", "maxItems", "uniqueItems", "contains"),
    "string": ("minLength", "maxLength", "pattern", "format", "enum", "const"),
    "number": ("minimum", "maximum", "exclusiveMinimum", "exclusiveMaximum", "multipleOf", "format", "enum", "const"),
    "integer": ("minimum", "maximum", "exclusiveMinimum", "exclusiveMaximum", "multipleOf", "format", "enum", "const"),
    "boolean": ("enum", "const"),
}
"""What moves into a branch when a type list becomes ``anyOf``: ``properties`` only belong on an OBJECT."""

_SCALAR_OR_OBJECT: list[dict[str, Any]] = [
    {"type": "string"},
    {"type": "number"},
    {"type": "boolean"},
    {"type": "object"},
]


def _any_value() -> dict[str, Any]:
    """Any JSON value (``{}`` or ``true`` in JSON Schema): Vertex AI refuses a schema without a type."""
    return {
        "anyOf": [
            *(dict(branch) for branch in _SCALAR_OR_OBJECT),
            {"type": "array", "items": {"anyOf": [dict(branch) for branch in _SCALAR_OR_OBJECT]}},
        ]
    }


@dataclass
class _Context:
    root: Mapping[str, Any]
    resolving: tuple[str, ...] = field(default=())


def to_gemini_parameters(schema: Mapping[str, Any]) -> dict[str, Any] | None:
    """A tool's ``inputSchema`` as ``FunctionDeclaration.parameters``, or ``None`` for a tool without
    parameters (Gemini refuses an OBJECT whose ``properties`` are empty, so ``parameters`` is left out)."""
    # MCP requires an object; a schema that leaves its type out means one.
    root = dict(schema) if "type" in schema else {**schema, "type": "object"}
    converted = to_gemini_schema(root)
    if "anyOf" in converted:
        converted = _one_object(converted)
    if converted.get("type") != "object" or not converted.get("properties"):
        return None
    return converted


def _one_object(union: dict[str, Any]) -> dict[str, Any]:
    """Gemini wants one OBJECT as parameters: alternatives of objects become one whose properties are
    all of theirs, none required, and the description says so."""
    properties: dict[str, Any] = {}
    for branch in union["anyOf"]:
        if branch.get("type") == "object":
            properties.update(
                {name: schema for name, schema in branch.get("properties", {}).items() if name not in properties}
            )
    result: dict[str, Any] = {key: union[key] for key in ("title", "description") if key in union}
    result["type"] = "object"
    if properties:
        result["properties"] = properties
    return _with_notes(result, ["the properties of one of several alternatives"])


def to_gemini_schema(schema: Any) -> dict[str, Any]:
    """Any JSON Schema as a Gemini ``Schema`` holding only ``ALLOWED_KEYWORDS``; the input is not changed."""
    root = schema if isinstance(schema, Mapping) else {}
    return _convert(schema, _Context(root), depth=0)


# --- the walk --------------------------------------------------------------------------------------


def _convert(node: Any, context: _Context, depth: int) -> dict[str, Any]:
    if not isinstance(node, Mapping):
        return _any_value()  # ``true`` (anything); ``false`` cannot be expressed and never reaches a model
    node = dict(node)
    if isinstance(node.get("$ref"), str):
        reference = node.pop("$ref")
        target = _resolve(reference, context)
        if target is None:
            return _with_notes(_annotated(node, _any_value()), [f"a value as described by {reference}"])
        if reference in context.resolving or depth >= _MAX_DEPTH:
            return _cut({**target, **node})
        # Siblings of ``$ref`` (a description, a default) refine what it points to.
        return _convert({**target, **node}, _Context(context.root, (*context.resolving, reference)), depth)
    if depth >= _MAX_DEPTH:
        return _cut(node)
    if isinstance(node.get("allOf"), list):
        node = _merge_all_of(node, context)
    return _convert_resolved(node, context, depth)


def _convert_resolved(node: dict[str, Any], context: _Context, depth: int) -> dict[str, Any]:
    branches = node.get("anyOf") if isinstance(node.get("anyOf"), list) else node.get("oneOf")
    if isinstance(branches, list):
        return _convert_union(node, branches, context, depth)

    types, null_listed = _types(node)
    nullable = node.get("nullable") is True or null_listed
    enum = _enum(node)
    null_only = null_listed and not types
    if enum is not None and None in enum:
        nullable = True
        enum = [value for value in enum if value is not None]
        null_only = null_only or not enum
    if not types and not null_only:
        implied = _implied_type(node, enum)
        types = [implied] if implied else []
    if len(types) > 1:
        return _type_union(node, types, context, depth, nullable)

    notes: list[str] = []
    if not types:
        result = _annotated(node, _any_value())
        if null_only:
            notes.append("always null")
    else:
        kind = types[0]
        result = _annotated(node, {"type": kind})
        if kind == "object":
            _object(node, result, notes, context, depth)
        elif kind == "array":
            _array(node, result, notes, context, depth)
        else:
            _scalar(node, kind, enum, result, notes)
    if nullable:
        result["nullable"] = True
    _note_common(node, notes)
    return _with_notes(result, notes)


def _convert_union(node: dict[str, Any], branches: list[Any], context: _Context, depth: int) -> dict[str, Any]:
    """``anyOf`` / ``oneOf``: null branches become ``nullable``, a single branch left is merged in."""
    nullable = node.get("nullable") is True
    kept: list[Any] = []
    for branch in branches:
        resolved = _resolved_ref(branch, context)
        if isinstance(resolved, Mapping) and resolved.get("type") == "null":
            nullable = True
        else:
            kept.append(branch)
    siblings = {key: value for key, value in node.items() if key not in ("anyOf", "oneOf", "type", "nullable")}
    if not kept:
        result = _annotated(node, _any_value())
        result["nullable"] = True
        return _with_notes(result, ["always null"])
    if len(kept) == 1:
        only = kept[0] if isinstance(kept[0], Mapping) else {}
        # The branch's own keywords first, the union's siblings (its description, its default) over them.
        merged = {**only, **siblings}
        if nullable:
            merged["nullable"] = True
        return _convert(merged, context, depth)
    result = _annotated(node, {"anyOf": _flatten_unions([_convert(branch, context, depth + 1) for branch in kept])})
    if nullable:
        result["nullable"] = True
    notes: list[str] = []
    _note_common(node, notes)
    return _with_notes(result, notes)


def _type_union(
    node: dict[str, Any], types: list[str], context: _Context, depth: int, nullable: bool
) -> dict[str, Any]:
    """``"type": ["string", "integer"]``: one ``anyOf`` branch per type, each with the keywords of its type."""
    branches = []
    for kind in types:
        branch = {key: node[key] for key in _KEYWORDS_BY_TYPE.get(kind, ()) if key in node}
        branches.append(_convert({**branch, "type": kind}, context, depth + 1))
    result = _annotated(node, {"anyOf": branches})
    if nullable:
        result["nullable"] = True
    notes: list[str] = []
    _note_common(node, notes)
    return _with_notes(result, notes)


def _object(node: dict[str, Any], result: dict[str, Any], notes: list[str], context: _Context, depth: int) -> None:
    properties = node.get("properties")
    if isinstance(properties, Mapping) and properties:
        result["properties"] = {str(name): _convert(schema, context, depth + 1) for name, schema in properties.items()}
        required = node.get("required")
        if isinstance(required, list):
            # Gemini refuses a required name that is not a property.
            names = [name for name in required if isinstance(name, str) and name in result["properties"]]
            if names:
                result["required"] = list(dict.fromkeys(names))
    for key in ("minProperties", "maxProperties"):
        if _is_count(node.get(key)):
            result[key] = node[key]
    values = node.get("additionalProperties")
    if isinstance(values, Mapping) and isinstance(values.get("type"), str):
        notes.append(f"other property values: {values['type']}")


def _array(node: dict[str, Any], result: dict[str, Any], notes: list[str], context: _Context, depth: int) -> None:
    items = node.get("items")
    prefix = node.get("prefixItems") if isinstance(node.get("prefixItems"), list) else None
    if isinstance(items, list):  # draft 4 tuples
        prefix, items = items, None
    if prefix:
        # Gemini has no tuples: any of the positions' schemas, and the order in words.
        converted = _flatten_unions([_convert(schema, context, depth + 1) for schema in prefix])
        if isinstance(items, Mapping):
            converted = _flatten_unions([*converted, _convert(items, context, depth + 1)])
        unique = [schema for position, schema in enumerate(converted) if schema not in converted[:position]]
        result["items"] = unique[0] if len(unique) == 1 else {"anyOf": unique}
        notes.append(f"items in order: {', '.join(_type_name(schema) for schema in converted)}")
    elif isinstance(items, Mapping | bool):
        result["items"] = _convert(items, context, depth + 1)
    else:
        result["items"] = _any_value()  # Gemini requires ``items`` on every ARRAY
    for key in ("minItems", "maxItems"):
        if _is_count(node.get(key)):
            result[key] = node[key]


def _scalar(node: dict[str, Any], kind: str, enum: list[Any] | None, result: dict[str, Any], notes: list[str]) -> None:
    fmt = node.get("format")
    if isinstance(fmt, str):
        if fmt in _FORMATS.get(kind, frozenset()):
            result["format"] = fmt
        else:
            notes.append(f"format: {fmt}")
    if kind == "string":
        for key in ("minLength", "maxLength"):
            if _is_count(node.get(key)):
                result[key] = node[key]
        if isinstance(node.get("pattern"), str):
            result["pattern"] = node["pattern"]
        if enum:
            result["enum"] = [value if isinstance(value, str) else json.dumps(value) for value in enum]
    elif kind in ("number", "integer"):
        for key in ("minimum", "maximum"):
            if _is_number(node.get(key)):
                result[key] = node[key]
        _note_draft4_exclusive(node, notes)
        if enum:
            # Gemini's ``enum`` holds strings; declaring numbers as strings would change the arguments.
            notes.append("one of: " + ", ".join(json.dumps(value) for value in enum))
    elif enum:
        notes.append("one of: " + ", ".join(json.dumps(value) for value in enum))


# --- helpers -----------------------------------------------------------------------------------


def _resolve(reference: str, context: _Context) -> dict[str, Any] | None:
    """The schema a local ``#/...`` JSON pointer names in the root schema, or ``None``."""
    if not reference.startswith("#"):
        return None  # a remote reference: nothing here to inline
    target: Any = context.root
    for raw in reference[1:].lstrip("/").split("/") if reference != "#" else []:
        segment = raw.replace("~1", "/").replace("~0", "~")
        if isinstance(target, Mapping) and segment in target:
            target = target[segment]
        elif isinstance(target, list) and segment.isdigit() and int(segment) < len(target):
            target = target[int(segment)]
        else:
            return None
    if isinstance(target, Mapping):
        return dict(target)
    return {} if target is True else None


def _resolved_ref(node: Any, context: _Context) -> Any:
    if isinstance(node, Mapping) and isinstance(node.get("$ref"), str):
        target = _resolve(node["$ref"], context)
        if target is not None:
            return {**target, **{key: value for key, value in node.items() if key != "$ref"}}
    return node


def _cut(node: Mapping[str, Any]) -> dict[str, Any]:
    """A recursive reference, or nesting too deep: a scalar keeps its type, anything else becomes a
    described free-form object (the model can still nest further; the tool validates what it gets)."""
    types, _ = _types(node)
    if len(types) == 1 and types[0] not in ("object", "array"):
        return _annotated(node, {"type": types[0]})
    title = node.get("title")
    what = f"a nested {title}" if isinstance(title, str) and title else "a nested value"
    return _with_notes(_annotated(node, {"type": "object"}), [f"{what} of the same structure as above"])


def _merge_all_of(node: dict[str, Any], context: _Context, seen: tuple[str, ...] = ()) -> dict[str, Any]:
    """``allOf``: every part must hold, so their properties and requirements add up. A part that refers
    back to a schema being merged adds nothing new and is skipped."""
    merged: dict[str, Any] = {key: value for key, value in node.items() if key != "allOf"}
    for part in node["allOf"]:
        reference = part.get("$ref") if isinstance(part, Mapping) else None
        if isinstance(reference, str):
            if reference in seen or reference in context.resolving:
                continue
            seen = (*seen, reference)
        resolved = _resolved_ref(part, context)
        if not isinstance(resolved, Mapping):
            continue
        if isinstance(resolved.get("allOf"), list):
            resolved = _merge_all_of(dict(resolved), context, seen)
        for key, value in resolved.items():
            if key == "properties" and isinstance(value, Mapping):
                merged["properties"] = {**value, **(merged.get("properties") or {})}
            elif key == "required" and isinstance(value, list):
                merged["required"] = list(dict.fromkeys([*(merged.get("required") or []), *value]))
            else:
                merged.setdefault(key, value)
    return merged


def _types(node: Mapping[str, Any]) -> tuple[list[str], bool]:
    """The declared types without ``null``, and whether ``null`` was one of them."""
    declared = node.get("type")
    listed = declared if isinstance(declared, list) else [declared] if isinstance(declared, str) else []
    nullable = "null" in listed
    types = [str(kind).lower() for kind in listed if kind != "null"]
    return list(dict.fromkeys(kind for kind in types if kind in ALLOWED_TYPES)), nullable


def _enum(node: Mapping[str, Any]) -> list[Any] | None:
    if "const" in node:
        return [node["const"]]
    enum = node.get("enum")
    return list(enum) if isinstance(enum, list) else None


def _implied_type(node: Mapping[str, Any], enum: list[Any] | None) -> str | None:
    """The type a schema without ``type`` must have, judging by its keywords or its values."""
    if any(key in node for key in _OBJECT_HINTS):
        return "object"
    if any(key in node for key in _ARRAY_HINTS):
        return "array"
    if enum:
        kinds = {json_type(value) for value in enum}
        if len(kinds) == 1 and (kind := kinds.pop()) in ALLOWED_TYPES:
            return kind
        return "string"  # mixed values (or of no Gemini type): each one is spelled out as a string
    if any(key in node for key in _STRING_HINTS) or node.get("format") in _FORMATS["string"]:
        return "string"
    if any(key in node for key in _NUMBER_HINTS):
        return "number"
    return None


def _annotated(node: Mapping[str, Any], result: dict[str, Any]) -> dict[str, Any]:
    """``result`` with the title and description of ``node`` first."""
    annotations = {key: node[key] for key in ("title", "description") if isinstance(node.get(key), str) and node[key]}
    return {**annotations, **result}


def _note_common(node: Mapping[str, Any], notes: list[str]) -> None:
    for key in _NOTED:
        value = node.get(key)
        draft4_flag = key.startswith("exclusive") and isinstance(value, bool)  # see _note_draft4_exclusive
        if isinstance(value, bool | int | float | str) and not draft4_flag:
            notes.append(f"{key}: {json.dumps(value)}")
    if node.get("default") is not None:  # ``default: null`` only repeats that the value may be left out
        notes.append(f"default: {json.dumps(node['default'], ensure_ascii=False)}")
    if node.get("deprecated") is True:
        notes.append("deprecated")


def _note_draft4_exclusive(node: Mapping[str, Any], notes: list[str]) -> None:
    # Draft 4 spelled exclusivity as booleans beside minimum / maximum.
    for flag, bound in (("exclusiveMinimum", "minimum"), ("exclusiveMaximum", "maximum")):
        if node.get(flag) is True and _is_number(node.get(bound)):
            notes.append(f"{flag}: {json.dumps(node[bound])}")


def _with_notes(result: dict[str, Any], notes: list[str]) -> dict[str, Any]:
    if notes:
        description = result.get("description", "")
        suffix = "(" + "; ".join(notes) + ")"
        result["description"] = f"{description} {suffix}" if description else suffix
    return result


def _flatten_unions(schemas: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Branches that are themselves bare unions are spread into the outer one."""
    flat: list[dict[str, Any]] = []
    for schema in schemas:
        if set(schema) == {"anyOf"}:
            flat.extend(schema["anyOf"])
        else:
            flat.append(schema)
    return flat


def _type_name(schema: Mapping[str, Any]) -> str:
    kind = schema.get("type")
    return kind if isinstance(kind, str) else "any"


def _is_count(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool) and value >= 0


def _is_number(value: Any) -> bool:
    return isinstance(value, int | float) and not isinstance(value, bool)
