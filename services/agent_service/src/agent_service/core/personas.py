"""Personas: named presets of a run (system prompt, model, tools, limits) in the callers file, parsed; and the
system-prompt cascade they take part in (applied to a run request by ``agent_service.admission.planning``:
``apply_persona``, ``system_prompt_of``; put first in each LLM call by ``with_system_prompt``, here).

::

    [personas.concise]                 # every tenant may use it
    description = "Short answers"
    system_prompt = "Answer in one sentence."
    model = "demo"

    [tenants.acme]
    system_prompt = "You answer for ACME."   # the tenant's default prompt
    verbosity = "low"                        # the tenant's default generation controls (as a persona's below)

    [tenants.acme.personas.concise]      # acme's own: wins over the global one of the same name
    system_prompt = "Answer ACME's questions in one sentence."
    model = "gpt-4o-mini"
    tools = ["search_documents"]
    max_iterations = 4
    reasoning_effort = "low"             # the generation controls of its runs: minimal, low, medium or high;
    reasoning_summary = "auto"           #   auto or none; and verbosity = low, medium or high

A run request naming ``persona`` gets the persona's fields for those it omits (its own win); the result is checked
as any request is (the tenant's models and tools, the service's limits). The generation controls (``reasoning``,
``verbosity``) are, each on its own (effort, summary, verbosity), the request's, else its persona's, else its
tenant's; none: the provider's default. The system prompt is exactly one of, first
found: a ``system`` message of the run's conversation (the request's own, or one stored earlier in its
conversation), the persona's ``system_prompt``, the tenant's ``system_prompt``; none otherwise. The chosen prompt is
put first in every LLM call of the run and never stored, so a conversation continued run after run is never given
it twice, and each run gets the prompt of the persona it names.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from agent_service.core.names import TOOL_PATTERN, is_name
from suite_common.wire import Message, ReasoningControl, Verbosity

__all__ = [
    "GENERATION_FIELDS",
    "NO_GENERATION",
    "PERSONA_FIELDS",
    "Generation",
    "Persona",
    "PersonaError",
    "parse_generation",
    "parse_personas",
    "parse_system_prompt",
    "with_system_prompt",
]


@dataclass(frozen=True, slots=True)
class Generation:
    """The generation controls a persona or a tenant sets for its runs (``None``: not set)."""

    reasoning: ReasoningControl | None = None
    verbosity: Verbosity | None = None


NO_GENERATION = Generation()


@dataclass(frozen=True, slots=True)
class Persona:
    """A ``[personas.<name>]`` (or ``[tenants.<tenant>.personas.<name>]``) table; ``None``: not set, the request's
    own value or the service's default is used."""

    name: str
    description: str | None = None
    system_prompt: str | None = None
    model: str | None = None
    tools: tuple[str, ...] | None = None
    """Tool names, as a run request's ``tools`` (an empty list: no tools)."""
    max_iterations: int | None = None
    deadline_seconds: float | None = None
    max_total_tokens: int | None = None
    max_cost_usd: float | None = None
    temperature: float | None = None
    max_tokens: int | None = None
    generation: Generation = NO_GENERATION
    """Its ``reasoning_effort``, ``reasoning_summary`` and ``verbosity``."""
    approval: tuple[str, ...] = ()
    """Tools whose calls wait for approval in its runs, beside its tenant's (patterns as ``TenantRules.approval``)."""
    summary_model: str | None = None
    """The model that summarises its runs' conversations when they no longer fit (``None``: its tenant's, else the
    run's model)."""


GENERATION_FIELDS = ("reasoning_effort", "reasoning_summary", "verbosity")
"""The callers file's keys of the generation controls, in a persona's table or a tenant's."""
_CHOICES: dict[str, tuple[str, ...]] = {
    "reasoning_effort": ("minimal", "low", "medium", "high"),
    "reasoning_summary": ("auto", "none"),
    "verbosity": ("low", "medium", "high"),
}

PERSONA_FIELDS = (
    "description",
    "system_prompt",
    "model",
    "tools",
    "max_iterations",
    "deadline_seconds",
    "max_total_tokens",
    "max_cost_usd",
    "temperature",
    "max_tokens",
    "approval",
    "summary_model",
    *GENERATION_FIELDS,
)


class PersonaError(ValueError):
    """A persona table is wrong; the message says where and what (one line, without the file's name)."""


def _text(table: Mapping[str, Any], key: str, where: str) -> str | None:
    value = table.get(key)
    if value is not None and (not isinstance(value, str) or not value.strip()):
        raise PersonaError(f"{where}: {key} must be a non-empty string")
    return value


def _whole(table: Mapping[str, Any], key: str, where: str) -> int | None:
    value = table.get(key)
    if value is not None and (not isinstance(value, int) or isinstance(value, bool) or value < 1):
        raise PersonaError(f"{where}: {key} must be a whole number, 1 or more")
    return value


def _number(table: Mapping[str, Any], key: str, where: str, *, low: float, high: float | None = None) -> float | None:
    value = table.get(key)
    if value is None:
        return None
    if not isinstance(value, int | float) or isinstance(value, bool) or not math.isfinite(value):
        raise PersonaError(f"{where}: {key} must be a number")
    if high is None and value <= low:
        raise PersonaError(f"{where}: {key} must be more than {low:g}")
    if high is not None and not low <= value <= high:
        raise PersonaError(f"{where}: {key} must be from {low:g} to {high:g}")
    return float(value)


def parse_generation(table: Mapping[str, Any], where: str) -> Generation:
    """A persona's or a tenant's ``reasoning_effort``, ``reasoning_summary`` and ``verbosity``; raises
    ``PersonaError``."""
    for key, choices in _CHOICES.items():
        value = table.get(key)
        if value is not None and value not in choices:
            raise PersonaError(f"{where}: {key} must be one of {', '.join(choices)}")
    effort, summary = table.get("reasoning_effort"), table.get("reasoning_summary")
    reasoning = None if effort is None and summary is None else ReasoningControl(effort=effort, summary=summary)
    return Generation(reasoning=reasoning, verbosity=table.get("verbosity"))


def _persona(name: str, table: Any, where: str) -> Persona:
    if not isinstance(table, dict):
        raise PersonaError(f"{where} must be a table")
    unknown = sorted(set(table) - set(PERSONA_FIELDS))
    if unknown:
        raise PersonaError(f"{where}: unknown field {unknown[0]!r} (expected {', '.join(PERSONA_FIELDS)})")
    tools = table.get("tools")
    if tools is not None and (not isinstance(tools, list) or not all(isinstance(t, str) and t for t in tools)):
        raise PersonaError(f"{where}: tools must be a list of tool names")
    approval = table.get("approval", [])
    if not isinstance(approval, list) or not all(isinstance(p, str) and TOOL_PATTERN.fullmatch(p) for p in approval):
        raise PersonaError(
            f"{where}: approval must be a list of tool names, '<server>:<tool>', '<server>:*' or 'destructive'"
        )
    return Persona(
        name=name,
        description=_text(table, "description", where),
        system_prompt=_text(table, "system_prompt", where),
        model=_text(table, "model", where),
        tools=None if tools is None else tuple(tools),
        max_iterations=_whole(table, "max_iterations", where),
        deadline_seconds=_number(table, "deadline_seconds", where, low=0),
        max_total_tokens=_whole(table, "max_total_tokens", where),
        max_cost_usd=_number(table, "max_cost_usd", where, low=0),
        temperature=_number(table, "temperature", where, low=0, high=2),
        max_tokens=_whole(table, "max_tokens", where),
        generation=parse_generation(table, where),
        approval=tuple(approval),
        summary_model=_text(table, "summary_model", where),
    )


def parse_personas(tables: Any, tenant: str | None = None) -> dict[str, Persona]:
    """``tables``: the callers file's ``personas`` table, or ``tenant``'s; raises ``PersonaError``."""
    if tables is None:
        return {}
    table_name = "personas" if tenant is None else f"tenants.{tenant}.personas"
    if not isinstance(tables, dict):
        raise PersonaError(f"{table_name} must be tables: [{table_name}.<name>]")
    owner = "" if tenant is None else f"tenant {tenant!r}: "
    for name in tables:
        if not is_name(name):
            raise PersonaError(f"{owner}persona {name!r}: a name is letters, digits, '.', '_' or '-' (at most 64)")
    return {name: _persona(name, table, f"{owner}persona {name!r}") for name, table in tables.items()}


def parse_system_prompt(table: Mapping[str, Any], where: str) -> str | None:
    """A tenant's default ``system_prompt``; raises ``PersonaError``."""
    return _text(table, "system_prompt", where)


def with_system_prompt(messages: list[Message], prompt: str | None) -> list[Message]:
    """What an LLM call is sent: ``prompt`` first, unless there is none or the conversation has a system message."""
    if prompt is None or any(message.role == "system" for message in messages):
        return messages
    return [Message(role="system", content=prompt), *messages]
