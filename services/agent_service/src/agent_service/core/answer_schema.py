"""The validator of a run's ``responseFormat`` schema (JSON Schema draft 2020-12), and why one cannot be used.

No ``$ref`` is ever fetched: the validator's registry is empty and retrieves nothing, so a schema may refer only
within itself. Planning refuses a schema that could never check an answer (``schema_problem``), before the run,
instead of failing the run after the model has answered. Pure: no I/O.
"""

from __future__ import annotations

from typing import Any

from jsonschema import Draft202012Validator
from jsonschema.exceptions import SchemaError
from referencing import Registry
from referencing.exceptions import Unresolvable
from referencing.jsonschema import DRAFT202012

__all__ = ["answer_validator", "schema_problem"]

_REFERENCES = ("$ref", "$dynamicRef")
_PROBES: tuple[Any, ...] = (None, {}, [], "", 0)
"""Values checked once at planning: a schema whose references loop forever or do not resolve fails on one of
them whatever its root's type (``RecursionError`` or ``Unresolvable``)."""


def answer_validator(schema: dict[str, Any]) -> Draft202012Validator:
    """The schema's validator, resolving references within the schema only (an empty registry that fetches
    nothing: a remote ``$ref`` is ``Unresolvable``, never a request)."""
    return Draft202012Validator(schema, registry=Registry())


def schema_problem(schema: dict[str, Any]) -> str | None:
    """Why no answer could ever be checked against ``schema`` (not draft 2020-12, a reference that does not resolve
    within it, references that loop forever); ``None``: it can be."""
    try:
        Draft202012Validator.check_schema(schema)
    except SchemaError as error:
        return f"it is not a valid JSON Schema (draft 2020-12): {error.message}"
    validator = answer_validator(schema)
    referring: list[dict[str, Any]] = []
    try:
        _check_references(schema, Registry().resolver_with_root(DRAFT202012.create_resource(schema)), referring)
        for probe in _PROBES:
            list(validator.iter_errors(probe))
    except Unresolvable as error:
        return f"it has a reference that does not resolve within the schema (none is fetched): {error}"
    except RecursionError:
        return "its references loop forever"
    # A loop below the root (under ``properties``, say) is met only by an answer that has that part: each schema
    # that refers is probed on its own. Only a loop counts here: the root's probe and the lookups above settled
    # resolution, and a subschema probed out of its ``$id`` scope may not resolve on its own.
    for node in referring:
        try:
            for probe in _PROBES:
                list(validator.evolve(schema=node).iter_errors(probe))
        except RecursionError:
            return "its references loop forever"
        except Unresolvable:
            continue
    return None


def _check_references(node: Any, resolver: Any, referring: list[dict[str, Any]]) -> None:
    """Every ``$ref`` and ``$dynamicRef`` of ``node`` looked up (``Unresolvable`` if one does not resolve), each in
    the scope of the nearest ``$id`` above it (``resolver``: a referencing ``Resolver``, whose type is not public);
    the schemas that have one added to ``referring``."""
    if isinstance(node, list):
        for item in node:
            _check_references(item, resolver, referring)
        return
    if not isinstance(node, dict):
        return
    if isinstance(node.get("$id"), str):
        resolver = resolver.in_subresource(DRAFT202012.create_resource(node))
    for key in _REFERENCES:
        if isinstance(reference := node.get(key), str):
            resolver.lookup(reference)
            referring.append(node)
    for key, value in node.items():
        if key not in ("const", "enum", "examples", "default"):  # values, not schemas
            _check_references(value, resolver, referring)
