"""Personas: named presets of a run (system prompt, model, tools, limits) in the callers file, and the system-prompt
cascade.

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
from typing import TYPE_CHECKING, Any

from agent_service.names import is_name
from suite_common.echo import clip
from suite_common.errors import ApiError
from suite_common.wire import AgentRunRequest, Message, ReasoningControl, Verbosity

if TYPE_CHECKING:
    from agent_service.callers import TenantRules

__all__ = [
    "GENERATION_FIELDS",
    "NO_GENERATION",
    "PERSONA_FIELDS",
    "Generation",
    "Persona",
    "PersonaError",
    "apply_persona",
    "parse_generation",
    "parse_personas",
    "parse_system_prompt",
    "system_prompt_of",
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
    *GENERATION_FIELDS,
)
_FILLED = tuple(name for name in PERSONA_FIELDS if name not in ("description", "system_prompt", *GENERATION_FIELDS))
"""The persona's fields that are also a run request's: filled in when the request omits them."""


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


def _persona_named(request: AgentRunRequest, rules: TenantRules) -> Persona | None:
    if request.persona is None:
        return None
    persona = rules.personas.get(request.persona)
    if persona is None:
        names = ", ".join(sorted(rules.personas)) or "none"
        message = f"Unknown persona '{clip(request.persona)}'. Personas this caller may use: {names}."
        raise ApiError(400, "unknown_persona", message)
    return persona


def apply_persona(request: AgentRunRequest, rules: TenantRules, default_model: str = "") -> AgentRunRequest:
    """``request`` with the fields it omits taken from the persona it names (400 ``unknown_persona`` when the
    caller's tenant has none of that name); unchanged without one. The generation controls it omits, each on its
    own, are the persona's, else the tenant's. A model is then required: the request's, else its persona's, else
    ``default_model`` (the service's ``AGENT_DEFAULT_MODEL``), else a 400."""
    persona = _persona_named(request, rules)
    filled: dict[str, Any] = {}
    if persona is not None:
        for name in _FILLED:
            value = getattr(persona, name)
            if getattr(request, name) is None and value is not None:
                filled[name] = list(value) if name == "tools" else value
    presets = [persona.generation] if persona is not None else []
    filled.update(_generation(request, [*presets, rules.generation]))
    if filled:
        request = request.model_copy(update=filled)
    if request.model is None and default_model:
        request = request.model_copy(update={"model": default_model})
    if request.model is None:
        named = f"the persona '{clip(request.persona)}' names none" if request.persona else "the request names none"
        message = f"model is required: {named}, and this service has no default model (AGENT_DEFAULT_MODEL)."
        raise ApiError(400, "invalid_request", message)
    return request


def _generation(request: AgentRunRequest, presets: list[Generation]) -> dict[str, Any]:
    """The request's ``reasoning`` and ``verbosity`` with what it omits, field by field, from the first of
    ``presets`` (its persona's, its tenant's) that sets it; only the fields that change."""
    asked = request.reasoning or ReasoningControl()
    effort = asked.effort or next((p.reasoning.effort for p in presets if p.reasoning and p.reasoning.effort), None)
    summary = asked.summary or next((p.reasoning.summary for p in presets if p.reasoning and p.reasoning.summary), None)
    verbosity = request.verbosity or next((p.verbosity for p in presets if p.verbosity), None)
    changed: dict[str, Any] = {}
    if (effort, summary) != (asked.effort, asked.summary):
        changed["reasoning"] = ReasoningControl(effort=effort, summary=summary)
    if verbosity != request.verbosity:
        changed["verbosity"] = verbosity
    return changed


def system_prompt_of(request: AgentRunRequest, rules: TenantRules) -> str | None:
    """The system prompt the cascade chooses for ``request``, or None: when the request has a system message of its
    own (that one is used), or neither its persona nor its tenant has a prompt. A conversation's stored system
    message also wins; that is checked on each LLM call (``with_system_prompt``), where the conversation is known."""
    if any(message.role == "system" for message in request.messages):
        return None
    persona = _persona_named(request, rules)
    if persona is not None and persona.system_prompt is not None:
        return persona.system_prompt
    return rules.system_prompt


def with_system_prompt(messages: list[Message], prompt: str | None) -> list[Message]:
    """What an LLM call is sent: ``prompt`` first, unless there is none or the conversation has a system message."""
    if prompt is None or any(message.role == "system" for message in messages):
        return messages
    return [Message(role="system", content=prompt), *messages]
