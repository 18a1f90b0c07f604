"""JSON Schema (what MCP tools publish) as Anthropic accepts a tool's ``input_schema``: draft 2020-12, an object.

MCP servers often write older drafts; their forms are rewritten to the 2020-12 keywords that mean
the same (``exclusiveMinimum: true`` with ``minimum``, tuple ``items``, ``dependencies``), and the
``$schema`` that names another draft is dropped. Pure functions, no I/O; Gemini's own subset is
``gemini.schema``.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

__all__ = ["input_schema"]

# JSON Schema keywords whose value is one schema, a list of schemas, or a map of names to schemas.
_ONE_SCHEMA = (
    "additionalProperties",
    "items",
    "additionalItems",
    "contains",
    "propertyNames",
    "not",
    "if",
    "then",
    "else",
    "unevaluatedItems",
    "unevaluatedProperties",
)
_SCHEMA_LISTS = ("allOf", "anyOf", "oneOf", "prefixItems")
_SCHEMA_MAPS = ("properties", "patternProperties", "$defs", "definitions", "dependentSchemas")


def input_schema(schema: Mapping[str, Any]) -> dict[str, Any]:
    """A tool's JSON Schema as Anthropic accepts it: draft 2020-12 with ``"type": "object"`` at the top."""
    rewritten: dict[str, Any] = _schema(dict(schema))
    rewritten.pop("$schema", None)
    if "type" not in rewritten:
        rewritten["type"] = "object"  # tool input is always an object; Anthropic requires saying so
    return rewritten


def _schema(schema: Any) -> Any:
    if not isinstance(schema, dict):
        return schema  # true / false are schemas too
    out = dict(schema)
    for bound, limit in (("exclusiveMinimum", "minimum"), ("exclusiveMaximum", "maximum")):
        flag = out.get(bound)
        if isinstance(flag, bool):  # draft 4: a flag on minimum / maximum
            del out[bound]
            if flag and limit in out:
                out[bound] = out.pop(limit)
    if isinstance(out.get("items"), list):  # draft 7 tuple form
        out["prefixItems"] = out.pop("items")
        if "additionalItems" in out:
            out["items"] = out.pop("additionalItems")
    if isinstance(out.get("dependencies"), dict):
        for name, dependency in out.pop("dependencies").items():
            kind = "dependentRequired" if isinstance(dependency, list) else "dependentSchemas"
            out.setdefault(kind, {})[name] = dependency
    if "properties" in out and not isinstance(out["properties"], dict):
        out["properties"] = {}  # `[]` or null from serializers of empty maps
    for key in _ONE_SCHEMA:
        if key in out:
            out[key] = _schema(out[key])
    for key in _SCHEMA_LISTS:
        if isinstance(out.get(key), list):
            out[key] = [_schema(item) for item in out[key]]
    for key in _SCHEMA_MAPS:
        if isinstance(out.get(key), dict):
            out[key] = {name: _schema(item) for name, item in out[key].items()}
    return out
