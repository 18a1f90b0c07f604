"""Tool arguments against a tool's ``inputSchema``, structured results against its ``outputSchema``.

A violation is described for a model to correct itself: the JSON path of the offending field
(``$.legs[0].date``) and what was wrong with it (``expected string, got integer 7``), never a
Python ``repr``. Compiling a JSON Schema costs far more than using it, so ``SchemaValidators``
keeps one compiled validator per tool and schema: a schema is compiled again only when the
catalog brings a different one.

Schemas are JSON Schema 2020-12 unless they say otherwise (``$schema``), as MCP specifies.
``$ref`` resolves within the schema document only: nothing is ever fetched. A schema that
cannot be compiled or resolved is logged and not enforced, since refusing every call of a
tool for its server's mistake would help nobody (discovery reports such tools).
"""

from __future__ import annotations

import json
import re
from collections.abc import Hashable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from jsonschema import Draft202012Validator, SchemaError
from jsonschema import ValidationError as SchemaViolation
from jsonschema.exceptions import relevance
from jsonschema.protocols import Validator
from jsonschema.validators import validator_for
from referencing import Registry
from referencing.exceptions import Unresolvable

from suite_common.echo import clip
from suite_common.json_types import json_type
from suite_common.logging import get_logger

__all__ = [
    "MAX_REPORTED_VIOLATIONS",
    "SchemaValidators",
    "Violation",
    "describe_violations",
    "json_path",
    "violation_from_error",
    "violations_of",
]

_log = get_logger("mcp_client_service.calls.validation")

MAX_REPORTED_VIOLATIONS = 5
"""A model fixes a few named problems better than it reads a wall of them."""

_MAX_VALUE_CHARS = 60
_MAX_CACHED_VALIDATORS = 4096
"""Far above any real catalog; a bound all the same, as tools come and go across reloads."""

_IDENTIFIER = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")


@dataclass(frozen=True)
class Violation:
    path: str
    """JSON path of the offending value, ``$`` being the whole instance."""
    problem: str

    def __str__(self) -> str:
        return f"{self.path}: {self.problem}"


def json_path(parts: Iterable[str | int]) -> str:
    """``$.legs[0].date``; a key that is not an identifier is quoted: ``$["departure time"]``."""
    path = "$"
    for part in parts:
        if isinstance(part, int):
            path += f"[{part}]"
            continue
        part = clip(part)  # a caller's key, echoed in messages
        if _IDENTIFIER.match(part):
            path += f".{part}"
        else:
            path += f"[{json.dumps(part, ensure_ascii=False)}]"
    return path


def _render(value: Any) -> str:
    text = json.dumps(value, ensure_ascii=False, default=str)
    return clip(text, _MAX_VALUE_CHARS)


def _got(value: Any) -> str:
    """``got string "ten"``; containers by their type alone, as their text says little."""
    kind = json_type(value)
    return f"got {kind}" if kind in ("object", "array") else f"got {kind} {_render(value)}"


def _one_of(values: Sequence[Any]) -> str:
    return ", ".join(_render(value) for value in values)


def _describe_keyword(error: SchemaViolation) -> str:
    """What is wrong with the value at the error's path, by the keyword it failed."""
    keyword = error.validator
    expected: Any = error.validator_value
    value: Any = error.instance
    if keyword == "type":
        kinds = [expected] if isinstance(expected, str) else list(expected)
        return f"expected {' or '.join(kinds)}, {_got(value)}"
    if keyword == "enum":
        return f"must be one of {_one_of(expected)}; {_got(value)}"
    if keyword == "const":
        return f"must be {_render(expected)}; {_got(value)}"
    if keyword in ("minimum", "maximum", "exclusiveMinimum", "exclusiveMaximum"):
        relation = {"minimum": ">=", "maximum": "<=", "exclusiveMinimum": ">", "exclusiveMaximum": "<"}[str(keyword)]
        # Draft-04 spells an exclusive bound as a boolean beside the bound, and fails "minimum".
        exclusive = {"minimum": "exclusiveMinimum", "maximum": "exclusiveMaximum"}.get(str(keyword))
        if exclusive is not None and isinstance(error.schema, dict) and error.schema.get(exclusive) is True:
            relation = relation[0]
        return f"must be {relation} {_render(expected)}; got {_render(value)}"
    if keyword == "multipleOf":
        return f"must be a multiple of {_render(expected)}; got {_render(value)}"
    if keyword in ("minLength", "maxLength"):
        bound = "at least" if keyword == "minLength" else "at most"
        return f"must be {bound} {expected} characters long; got {len(value)}"
    if keyword in ("minItems", "maxItems"):
        bound = "at least" if keyword == "minItems" else "at most"
        return f"must have {bound} {expected} items; got {len(value)}"
    if keyword in ("minProperties", "maxProperties"):
        bound = "at least" if keyword == "minProperties" else "at most"
        return f"must have {bound} {expected} properties; got {len(value)}"
    if keyword == "pattern":
        return f"must match the pattern {_render(expected)}; got {_render(value)}"
    if keyword == "uniqueItems":
        return "must not contain the same item twice"
    if keyword == "not":
        return "matches a shape that is not allowed here"
    if keyword == "oneOf" and not error.context:
        return "matches more than one of the allowed alternatives (oneOf allows exactly one)"
    if keyword in ("oneOf", "anyOf"):
        return _describe_alternatives(error)
    if error.schema is False:
        return "is not allowed here"
    # Rarer keywords (dependentRequired, contains, ...): the library's text, which names them.
    return error.message


def _describe_alternatives(error: SchemaViolation) -> str:
    """``matches none of the allowed alternatives: (1) ...; (2) ...``: each branch's most telling error."""
    by_branch: dict[Hashable, list[SchemaViolation]] = {}
    for sub in error.context or ():
        branch = sub.relative_schema_path[0] if sub.relative_schema_path else 0
        by_branch.setdefault(branch, []).append(sub)
    # `relevance` is jsonschema's own ranking (what `best_match` uses): deeper paths, specific keywords.
    best_by_branch = {branch: max(subs, key=relevance) for branch, subs in by_branch.items()}
    reasons = []
    for number, sub in enumerate(best_by_branch.values(), start=1):
        inner = json_path(list(sub.absolute_path)[len(error.absolute_path) :])[1:].removeprefix(".")
        reasons.append(
            f"({number}) {inner}: {_describe_keyword(sub)}" if inner else f"({number}) {_describe_keyword(sub)}"
        )
    return "matches none of the allowed alternatives: " + "; ".join(reasons)


def violation_from_error(error: SchemaViolation) -> list[Violation]:
    """One or more ``Violation`` for one jsonschema error (``required`` names each missing field)."""
    base = list(error.absolute_path)
    instance = error.instance
    required: Any = error.validator_value
    if error.validator == "required" and isinstance(instance, dict):
        missing = [name for name in required if name not in instance]
        return [Violation(json_path([*base, name]), "is required but missing") for name in missing]
    if error.validator == "additionalProperties" and isinstance(instance, dict) and error.validator_value is False:
        properties = error.schema.get("properties", {}) if isinstance(error.schema, Mapping) else {}
        patterns = error.schema.get("patternProperties", {}) if isinstance(error.schema, Mapping) else {}
        extras = [
            name
            for name in instance
            if name not in properties and not any(re.search(pattern, name) for pattern in patterns)
        ]
        allowed = ", ".join(properties) or "none"
        return [
            Violation(json_path([*base, name]), f"is not an accepted property (accepted: {allowed})") for name in extras
        ]
    return [Violation(json_path(base), _describe_keyword(error))]


def violations_of(validator: Validator, instance: Any) -> list[Violation]:
    """Every violation of ``instance``, by path, without repeats."""
    found: dict[Violation, None] = {}
    for error in validator.iter_errors(instance):
        for violation in violation_from_error(error):
            found.setdefault(violation, None)
    return sorted(found, key=lambda violation: violation.path)


def describe_violations(violations: Sequence[Violation]) -> str:
    """``$.a: expected integer, got string "1"; $.b: is required but missing`` (the first few)."""
    shown = "; ".join(str(violation) for violation in violations[:MAX_REPORTED_VIOLATIONS])
    hidden = len(violations) - MAX_REPORTED_VIOLATIONS
    return shown + (f"; and {hidden} more" if hidden > 0 else "")


@dataclass(frozen=True)
class _Compiled:
    schema: Mapping[str, Any]
    validator: Validator | None
    """``None`` when the schema could not be compiled: it is then not enforced."""


class SchemaValidators:
    """Compiled validators by (tool, which schema), compiled again only when a tool's schema changes.

    The catalog hands out the same schema object for as long as a catalog version lasts, so the
    usual check is an identity test; an equal schema from a new catalog version is recognised by
    comparison and not compiled again either.
    """

    def __init__(self) -> None:
        self._compiled: dict[tuple[str, str], _Compiled] = {}
        self.compilations = 0
        """How many schemas were compiled (tests check that calls do not compile)."""

    def validator(self, key: tuple[str, str], schema: Mapping[str, Any]) -> Validator | None:
        entry = self._compiled.get(key)
        if entry is not None and (entry.schema is schema or entry.schema == schema):
            return entry.validator
        if len(self._compiled) >= _MAX_CACHED_VALIDATORS:
            self._compiled.clear()
        self.compilations += 1
        validator = _compile(key, schema)
        self._compiled[key] = _Compiled(schema=schema, validator=validator)
        return validator

    def check(self, key: tuple[str, str], schema: Mapping[str, Any], instance: Any) -> list[Violation]:
        """The violations of ``instance``; none when the schema is not usable (logged once per compile)."""
        validator = self.validator(key, schema)
        if validator is None:
            return []
        try:
            return violations_of(validator, instance)
        except (Unresolvable, re.error, SchemaError) as error:
            # A dangling $ref or a bad regex shows up only while validating: stop enforcing this schema.
            _log.warning("mcp_tool_schema_unusable", tool=key[0], schema=key[1], error=f"{type(error).__name__}")
            self._compiled[key] = _Compiled(schema=schema, validator=None)
            return []


def _compile(key: tuple[str, str], schema: Mapping[str, Any]) -> Validator | None:
    try:
        validator_class = validator_for(schema, default=Draft202012Validator)
        validator_class.check_schema(dict(schema))
    except SchemaError as error:
        _log.warning("mcp_tool_schema_unusable", tool=key[0], schema=key[1], error=error.message)
        return None
    # An empty registry: `$ref` resolves within the document (and the metaschemas), never over the network.
    validator: Validator = validator_class(dict(schema), registry=Registry())
    return validator
