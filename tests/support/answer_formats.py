"""The structured answer the tests of ``responseFormat`` ask for: a city and its population."""

from __future__ import annotations

from typing import Any

__all__ = ["CITY_SCHEMA", "PARIS"]

CITY_SCHEMA: dict[str, Any] = {
    "type": "object",
    "properties": {"city": {"type": "string"}, "population": {"type": "integer", "minimum": 1}},
    "required": ["city", "population"],
    "additionalProperties": False,
}
"""Strict-mode ready (every property required, no others), as OpenAI's strict schemas must be."""

PARIS: dict[str, Any] = {"city": "Paris", "population": 2102650}
"""A value valid against ``CITY_SCHEMA``."""
