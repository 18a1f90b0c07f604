"""A person's answer to an MCP server's question (``elicitation/create``, form mode), made ready for the server.

The gateway checks an answer before it reaches the server, and agent-service before it stores one, with the same
rules: ``answer_content`` fills what the answer leaves out from the requested schema's ``default``s (SEP-1034: a
client applies them) and checks the result against the schema. The spec restricts that schema to an object of flat
primitive properties (string, number, integer, boolean, enums), which is all a form can ask.
"""

from __future__ import annotations

from typing import Any

from jsonschema import Draft202012Validator
from jsonschema.exceptions import SchemaError

__all__ = ["InvalidAnswer", "answer_content", "with_defaults"]


class InvalidAnswer(ValueError):
    """The answer does not fit the requested schema (the message says where), or the schema is not one."""


def with_defaults(schema: dict[str, Any], content: dict[str, Any] | None) -> dict[str, Any]:
    """``content`` with each property it leaves out set to the schema's ``default`` for it, where there is one."""
    filled = dict(content or {})
    properties = schema.get("properties")
    if isinstance(properties, dict):
        for name, spec in properties.items():
            if name not in filled and isinstance(spec, dict) and "default" in spec:
                filled[name] = spec["default"]
    return filled


def answer_content(schema: dict[str, Any], content: dict[str, Any] | None) -> dict[str, Any]:
    """The accepted answer as the server gets it: defaults filled in, checked against ``schema``.

    Raises ``InvalidAnswer`` naming the first property at fault (or the schema's own problem).
    """
    filled = with_defaults(schema, content)
    try:
        Draft202012Validator.check_schema(schema)
    except SchemaError as error:
        raise InvalidAnswer(f"the requested schema is not a JSON Schema: {error.message}") from None
    problems = sorted(Draft202012Validator(schema).iter_errors(filled), key=lambda error: list(error.path))
    if problems:
        first = problems[0]
        where = ".".join(str(part) for part in first.path) or "the answer"
        raise InvalidAnswer(f"{where}: {first.message}")
    return filled
