"""From a run request to a ``RunPlan``: its persona applied, limits checked, the tenant's rules applied, tools
discovered and filtered.

Everything here happens before the response starts, so every problem is still a plain 4xx/5xx. The persona and
system-prompt cascade (``apply_persona``, ``system_prompt_of``) is described in ``agent_service.core.personas``.
"""

from __future__ import annotations

import math
import time
import uuid
from collections import OrderedDict
from dataclasses import dataclass
from typing import Any, TypeVar

import anyio

from agent_service.admission.approval_rules import approval_tools, check_approval_patterns
from agent_service.admission.tenant_runtime import TenantRuntime
from agent_service.core.answer_schema import schema_problem
from agent_service.core.errors import UpstreamError
from agent_service.core.images import check_images
from agent_service.core.limits import RunLimits
from agent_service.core.personas import GENERATION_FIELDS, PERSONA_FIELDS, Generation, Persona
from agent_service.core.run import RunPlan
from agent_service.core.tenancy import DEFAULT_TENANT, NO_RULES, TenantRules, UserRole
from agent_service.infra.peers import CompletionClient, ToolsClient
from agent_service.settings import AgentSettings
from suite_common.deadline import Deadline
from suite_common.echo import clip, clip_names
from suite_common.errors import ApiError
from suite_common.logging import get_logger
from suite_common.wire import (
    AgentRunRequest,
    ModelPrices,
    NamedToolChoice,
    ReasoningControl,
    ResolvedModel,
    ResponseFormat,
    ToolChoice,
    ToolInfo,
    ToolSpec,
)

__all__ = ["ModelCheck", "ToolCatalog", "allowed_tools", "apply_persona", "plan_run", "system_prompt_of"]

_log = get_logger("agent_service.planning")

_FILLED = tuple(
    name
    for name in PERSONA_FIELDS
    # Not request fields: approval rules add to the request's (planning), the summary model is the plan's.
    if name not in ("description", "system_prompt", "approval", "summary_model", *GENERATION_FIELDS)
)
"""The persona's fields that are also a run request's: filled in when the request omits them."""


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


class ToolCatalog:
    """mcp-client-service's tool list of each tenant (the shared servers' tools and the tenant's own), reused for
    ``ttl`` seconds across that tenant's runs, and at most ``max_tenants`` tenants' lists kept."""

    def __init__(self, client: ToolsClient, ttl: float, *, max_tenants: int = 10_000) -> None:
        self.client = client
        self.ttl = ttl
        self.max_tenants = max_tenants
        self._lists: OrderedDict[str, tuple[float, list[ToolInfo]]] = OrderedDict()
        self._fetching: dict[str, anyio.Lock] = {}

    def _fresh(self, tenant: str, ttl: float) -> list[ToolInfo] | None:
        listed = self._lists.get(tenant)
        if listed is None or time.monotonic() - listed[0] >= ttl:
            return None
        return listed[1]

    async def tools(
        self, deadline: Deadline, *, tenant: str = DEFAULT_TENANT, max_age: float | None = None
    ) -> list[ToolInfo]:
        """``tenant``'s tool list, fetched again when older than ``ttl`` (or ``max_age``, when shorter)."""
        ttl = self.ttl if max_age is None else min(self.ttl, max_age)
        listed = self._fresh(tenant, ttl)
        if listed is not None:
            return listed
        # One fetch for many runs of a tenant starting at once; other tenants are not held up.
        lock = self._fetching.setdefault(tenant, anyio.Lock())
        try:
            async with lock:
                listed = self._fresh(tenant, ttl)
                if listed is None:
                    listed = await self.client.list_tools(deadline, tenant=tenant)
                    self._remember(tenant, listed)
                return listed
        finally:
            if not lock.locked() and lock.statistics().tasks_waiting == 0:
                self._fetching.pop(tenant, None)

    def forget(self, tenant: str) -> None:
        """Drop ``tenant``'s list (its servers changed here): its next run asks the gateway."""
        self._lists.pop(tenant, None)

    def _remember(self, tenant: str, listed: list[ToolInfo]) -> None:
        self._lists[tenant] = (time.monotonic(), listed)
        self._lists.move_to_end(tenant)
        while len(self._lists) > self.max_tenants:
            self._lists.popitem(last=False)


_MAX_KNOWN_MODELS = 256

_LIST_MODELS_SECONDS = 2.0
"""How long naming the models a caller may run, when it asked for an unknown one, may wait for completion-service."""


class ModelCheck:
    """Asks completion-service whether it can route a model, before a run's response starts.

    Without it, a streamed run with a misspelt model would answer 200 and then an error event.
    Names that route are remembered for ``ttl`` seconds, with where they go (and at which prices);
    names that do not are asked again.
    """

    def __init__(self, client: CompletionClient, ttl: float) -> None:
        self.client = client
        self.ttl = ttl
        self._known: dict[str, tuple[float, ResolvedModel]] = {}
        self._checking: dict[str, anyio.Lock] = {}

    def _fresh(self, model: str) -> ResolvedModel | None:
        known = self._known.get(model)
        if known is None or time.monotonic() - known[0] >= self.ttl:
            return None
        return known[1]

    async def check(self, model: str, deadline: Deadline) -> ResolvedModel:
        """Where completion-service sends ``model``: raises ``UpstreamError`` when it cannot route it."""
        resolved = self._fresh(model)
        if resolved is not None:
            return resolved
        # One request per model for many runs starting at once (when the memory of it expires under
        # load, every run would ask otherwise); other models are not held up.
        lock = self._checking.setdefault(model, anyio.Lock())
        try:
            async with lock:
                resolved = self._fresh(model)
                if resolved is None:
                    resolved = await self.client.check_model(model, deadline)
                    self._remember(model, resolved)
                return resolved
        finally:
            if not lock.locked() and lock.statistics().tasks_waiting == 0:
                self._checking.pop(model, None)  # nobody waits: callers choose the names, keep none

    async def unknown(self, model: str, rules: TenantRules, deadline: Deadline) -> ApiError:
        """400 ``model_not_found`` for a name completion-service cannot route, naming only the models the caller's
        tenant may run. completion-service's own message names its whole catalog and the operator's settings to
        configure more: neither is the caller's business."""
        try:
            listed = await self.client.list_models(deadline)
        except UpstreamError:
            listed = []  # the refusal stands without the list
        names = [str(entry["id"]) for entry in listed if "id" in entry and rules.allows_model(str(entry["id"]))]
        mine = f"Models this caller may run: {clip_names(names)}." if names else "This caller may run no listed model."
        return ApiError(400, "model_not_found", f"Unknown model '{clip(model)}'. {mine}")

    def _remember(self, model: str, resolved: ResolvedModel) -> None:
        now = time.monotonic()
        if len(self._known) >= _MAX_KNOWN_MODELS:
            # With an OpenAI-compatible endpoint configured every name routes, so callers choose
            # how many names there are: keep only the fresh ones, and never more than the cap.
            self._known = {name: known for name, known in self._known.items() if now - known[0] < self.ttl}
            if len(self._known) >= _MAX_KNOWN_MODELS:
                self._known.clear()
        self._known[model] = (now, resolved)


_Number = TypeVar("_Number", int, float)


def _shown(value: float) -> str:
    return str(value) if isinstance(value, int) else f"{value:g}"


def _capped(
    field: str, asked: _Number | None, caps: list[tuple[_Number | None, str]], *, preset: bool = False
) -> _Number | None:
    """``asked`` when no cap is below it (400 ``invalid_request`` naming the lowest cap otherwise); omitted: the
    lowest cap (``None`` when there is none). ``caps``: each cap (``None``: none) with where it is set. ``preset``:
    ``asked`` is a persona's, not the caller's: above a cap, it is the cap (the caller asked for nothing)."""
    set_caps = [(cap, source) for cap, source in caps if cap is not None]
    lowest = min(set_caps, key=lambda item: item[0], default=None)
    if asked is None:
        return lowest[0] if lowest is not None else None
    if lowest is not None and asked > lowest[0] and preset:
        return lowest[0]
    if lowest is not None and asked > lowest[0]:
        cap, source = lowest
        raise ApiError(400, "invalid_request", f"{field} may be at most {_shown(cap)}, {source} (got {_shown(asked)}).")
    return asked


def _check_limits(
    request: AgentRunRequest,
    settings: AgentSettings,
    rules: TenantRules,
    preset: frozenset[str] = frozenset(),
    runtime: TenantRuntime | None = None,
) -> RunLimits:
    """The run's limits: the request's, each capped by the service, the caller's tenant and its runtime (what its
    admin set), and the lowest cap when the request names none. Its clock starts now, so discovery counts against
    its deadline. ``preset``: the fields its persona filled, which a cap lowers instead of refusing."""
    service, tenant = "the service's cap", "the cap of the caller's tenant"
    admin = "the tenant's runtime (/api/v1/admin/runtime)"
    max_iterations = _capped(
        "maxIterations",
        request.max_iterations,
        [
            (settings.max_iterations, f"{service} (AGENT_MAX_ITERATIONS)"),
            (rules.max_iterations, tenant),
            (runtime.max_iterations if runtime is not None else None, admin),
        ],
        preset="max_iterations" in preset,
    )
    deadline = _capped(
        "deadlineSeconds",
        request.deadline_seconds,
        [(settings.run_deadline_seconds, f"{service} (AGENT_RUN_DEADLINE_SECONDS)"), (rules.max_run_seconds, tenant)],
        preset="deadline_seconds" in preset,
    )
    assert max_iterations is not None  # the service's caps are always set
    assert deadline is not None
    return RunLimits(
        max_iterations=max_iterations,
        deadline=Deadline.after(deadline),
        max_total_tokens=_capped(
            "maxTotalTokens",
            request.max_total_tokens,
            [(rules.max_run_tokens, tenant)],
            preset="max_total_tokens" in preset,
        ),
        max_cost_usd=_capped(
            "maxCostUsd", request.max_cost_usd, [(rules.max_run_cost_usd, tenant)], preset="max_cost_usd" in preset
        ),
    )


_PRESET_LIMITS = ("max_iterations", "deadline_seconds", "max_total_tokens", "max_cost_usd")
"""The limits a persona may fill: capped like the request's own, lowered to a cap rather than refused."""

_RECHECK_UNAVAILABLE_SECONDS = 1.0
"""Before refusing a run because all its tools are unavailable, a tool list older than this is fetched again."""

_BEST_EFFORT_LISTING_SECONDS = 5.0
"""How long a request that goes on without tools when they cannot be listed (the OpenAI front) waits for the list."""


def _tenant_allows(tool: ToolInfo, rules: TenantRules) -> bool:
    """The tenant's ``tools`` and ``deny_tools`` choose among the shared tools; its own servers' it always may use."""
    return tool.tenant is not None or rules.allows_tool(tool.server, tool.name, tool.server_tool)


def allowed_tools(listed: list[ToolInfo], rules: TenantRules, role: UserRole) -> list[ToolInfo]:
    """The tools of ``listed`` an end user of ``role`` may use within the tenant's rules: the only ones such a
    caller is ever offered or shown."""
    return [
        tool
        for tool in listed
        if _tenant_allows(tool, rules) and rules.role_allows_tool(role, tool.server, tool.name, tool.server_tool)
    ]


def _check_model(model: str, rules: TenantRules, persona: str | None = None) -> None:
    """``persona``: the persona whose model it is (the request named none)."""
    if not rules.allows_model(model):
        whose = f" (the model of the persona '{clip(persona)}')" if persona is not None else ""
        message = f"The model '{clip(model)}'{whose} is not allowed to this caller's tenant."
        raise ApiError(403, "model_not_allowed", message)


def _cost_limit(
    asked: AgentRunRequest, request: AgentRunRequest, rules: TenantRules, user: str | None, role: UserRole
) -> str | None:
    """The first cost limit a run is subject to, as a refusal names it; ``None``: none, its cost need not be known.
    ``asked``: the request as it came, ``request``: as its persona filled it; ``user``: the run's end user, of
    ``role``."""
    if asked.max_cost_usd is not None:
        return "the request's maxCostUsd"
    if request.max_cost_usd is not None:
        return f"the max_cost_usd of the persona '{clip(request.persona)}'"
    if rules.max_run_cost_usd is not None:
        return "the tenant's max_run_cost_usd"
    if rules.monthly_cost_usd is not None:
        return "the tenant's monthly_cost_usd"
    if user is not None:
        limit, setting = rules.user_monthly_cost_usd_of(role)
        if limit is not None:
            return f"the end user's monthly budget ({setting})"
    return None


def _check_priced(model: str, resolved: ResolvedModel, limit: str) -> None:
    """A run under a cost ``limit`` may only use a model priced wherever it may be answered: an unpriced answer
    (``<provider>/<model>``, ``demo``, a catalog entry without prices) has no cost, so it would escape the limit.
    Refused with 403 ``model_not_priced``, naming the model, its unpriced fallbacks if they are why, and ``limit``."""
    if resolved.prices is None:
        why = f"The model '{clip(model)}' has no price in completion-service's catalog"
    else:
        unpriced = [fallback.id for fallback in resolved.fallbacks or [] if fallback.prices is None]
        if not unpriced:
            return
        names = clip_names(unpriced)
        why = f"The model '{clip(model)}' falls back to one without a price in completion-service's catalog ({names})"
    message = (
        f"{why}; {limit} needs every call's cost to be known. Use a model with prices (a catalog entry that has them)."
    )
    raise ApiError(403, "model_not_priced", message)


def _select_tools(
    request: AgentRunRequest, listed: list[ToolInfo], rules: TenantRules, role: UserRole
) -> list[ToolInfo]:
    """The run's tools, among those the tenant and the end user's ``role`` may use. Omitted: every tool that is
    available now. Named: each must be listed, available or not: a tool whose server is restarting is not an
    unknown name (its calls fail with a tool result saying why and when to retry). A listed tool the tenant, or
    the user's role, may not use is refused by name (403 ``tool_not_allowed``): the list the gateway answers is
    the tenant's (the shared tools and its own), not a secret from it."""
    allowed = allowed_tools(listed, rules, role)
    if request.tools is None:
        return [tool for tool in allowed if tool.unavailable is None]
    by_name = {tool.name: tool for tool in allowed}
    listed_by_name = {tool.name: tool for tool in listed}
    refused = [name for name in request.tools if name not in by_name and name in listed_by_name]
    if refused:
        of_tenant = [name for name in refused if _tenant_allows(listed_by_name[name], rules)]
        whom = f"to the end user's role ({role})" if len(of_tenant) == len(refused) else "to this caller's tenant"
        raise ApiError(403, "tool_not_allowed", f"Tools not allowed {whom}: {clip_names(refused)}.")
    unknown = [name for name in request.tools if name not in by_name]
    if unknown:
        names = ", ".join(sorted(by_name)) or "none"
        raise ApiError(400, "unknown_tools", f"Unknown tools: {clip_names(unknown)}. Available tools: {names}.")
    return [by_name[name] for name in dict.fromkeys(request.tools)]


def _all_unavailable(tools: list[ToolInfo]) -> bool:
    return bool(tools) and all(tool.unavailable is not None for tool in tools)


def _unavailable_error(tools: list[ToolInfo]) -> ApiError:
    """503 ``tools_unavailable``: every tool the run asked for is configured but cannot be called now."""
    reasons = "; ".join(f"{tool.name}: {tool.unavailable.reason}" for tool in tools if tool.unavailable)
    waits = [tool.unavailable.retry_after_seconds for tool in tools if tool.unavailable]
    # The soonest any of them may be back; a server being reconnected right now says nothing: 1 s.
    known = [wait for wait in waits if wait is not None]
    retry_after = max(1, math.ceil(min(known))) if len(known) == len(waits) else 1
    message = f"None of the run's tools can be called now ({reasons}). Try again in {retry_after} s."
    return ApiError(503, "tools_unavailable", message, headers={"Retry-After": str(retry_after)})


def _check_tool_choice(choice: ToolChoice, names: set[str]) -> None:
    """``names``: the run's tools, the suite's and the caller's own."""
    if isinstance(choice, NamedToolChoice) and choice.name not in names:
        raise ApiError(
            400, "invalid_request", f"toolChoice names '{clip(choice.name)}', which is not among the run's tools."
        )
    if choice == "required" and not names:
        raise ApiError(400, "invalid_request", "toolChoice is 'required' but no tool is available to this run.")


@dataclass(frozen=True)
class _Discovery:
    """Where a run's tools come from: its tenant's list in ``catalog``."""

    catalog: ToolCatalog
    tenant: str
    agent_enabled: bool
    """False (the tenant's runtime): the tenant has no tool of ours, and the gateway is not asked."""
    best_effort: bool
    """A list that cannot be had leaves a run that named no tools without any (logged), instead of failing it."""

    async def tools(self, request: AgentRunRequest, deadline: Deadline, max_age: float | None = None) -> list[ToolInfo]:
        if not self.agent_enabled:
            return []
        if not self.best_effort or request.tools is not None:
            return await self.catalog.tools(deadline, tenant=self.tenant, max_age=max_age)
        try:
            bounded = deadline.capped(_BEST_EFFORT_LISTING_SECONDS)
            return await self.catalog.tools(bounded, tenant=self.tenant, max_age=max_age)
        except UpstreamError as error:
            _log.warning("tools_unlisted_plain_completion", code=error.code, error=error.message)
            return []


async def _resolve(
    request: AgentRunRequest,
    model: str,
    rules: TenantRules,
    role: UserRole,
    limits: RunLimits,
    cost_limit: str | None,
    discovery: _Discovery,
    models: ModelCheck,
) -> tuple[list[ToolInfo], ModelPrices | None, int | None, bool]:
    """What the peers say of the run: its tools, its model's prices and context window, and whether the run's own
    deadline ran out while they were asked (``True``: the run goes on with what is known, and ends as ``deadline`` in
    the loop)."""
    deadline = limits.deadline
    tools: list[ToolInfo] = []
    prices = None
    try:
        resolved = await models.check(model, deadline)
        prices = resolved.prices
        window = resolved.context_tokens
        if cost_limit is not None:
            _check_priced(model, resolved, cost_limit)
        # The plain path: no tool discovery when the caller wants no tools.
        if request.tool_choice != "none" and request.tools != []:
            # Assigned before the re-check: a re-check cut off by the run's deadline keeps this selection.
            tools = _select_tools(request, await discovery.tools(request, deadline), rules, role)
            if _all_unavailable(tools):  # maybe back already: asked again before refusing
                tools = _select_tools(
                    request, await discovery.tools(request, deadline, _RECHECK_UNAVAILABLE_SECONDS), rules, role
                )
                if _all_unavailable(tools):
                    raise _unavailable_error(tools)
    except UpstreamError as error:
        if error.code == "model_not_found":
            raise await models.unknown(model, rules, Deadline.after(_LIST_MODELS_SECONDS)) from None
        if not limits.out_of_time():
            raise  # the peer's failure, as it is (an ``ApiError``)
        # The run's own deadline ran out, not the peer: the loop ends the run as "deadline", as it
        # does when the deadline passes in any round (a 504 here blamed the peer; found by fuzzing).
        return tools, prices, None, True
    return tools, prices, window, False


def _check_response_format(response_format: ResponseFormat | None) -> None:
    """A schema the answer could never be checked against is refused before the run (400)."""
    if response_format is None or response_format.json_schema is None:
        return
    problem = schema_problem(response_format.json_schema.schema_)
    if problem is not None:
        raise ApiError(400, "invalid_request", clip(f"responseFormat.json_schema.schema: {problem}", 500))


async def plan_run(
    request: AgentRunRequest,
    settings: AgentSettings,
    catalog: ToolCatalog,
    models: ModelCheck,
    client_tools: list[ToolSpec] | None = None,
    *,
    rules: TenantRules = NO_RULES,
    tenant: str = DEFAULT_TENANT,
    user: str | None = None,
    role: UserRole = "user",
    runtime: TenantRuntime | None = None,
    tools_best_effort: bool = False,
    offer_approval_tools: bool = True,
) -> RunPlan:
    """``client_tools``: tools the caller runs itself (see ``RunPlan.client_tools``); one of ours with the same
    name is left out of the run, since the caller, who declared it, expects to run it. ``rules``: the caller's
    tenant's; a model it may not run is refused before anything else (403 ``model_not_allowed``), and a tool it
    may not use is never in the run. ``tenant``: the caller's, whose run it is. A persona the request names fills
    what it omits, first of all (``apply_persona``); what it fills is checked as the request's own fields are.
    ``user``: the run's end user, whose monthly budget counts too; ``role``: that user's (``X-User-Role``), which
    decides the tools it is offered (the tenant's ``tool_roles``; a tool named above it: 403 ``tool_not_allowed``)
    and its monthly budget. A run under any cost limit may only use a model with known prices, its fallbacks'
    included (403 ``model_not_priced``). ``runtime``: the tenant's (``agent_service.admission.tenant_runtime``):
    its ``maxIterations`` caps the run's, its ``toolCacheSeconds`` the cached results' lifetime, and with
    ``agentEnabled`` false the run has none of the suite's tools (the gateway is not asked). ``tools_best_effort``:
    a tool list the gateway cannot give leaves a run that named no tools without any (a plain completion on the
    OpenAI front), logged, instead of failing it. ``offer_approval_tools`` false (a front whose clients cannot
    approve a call): the tools that need approval are not offered, and a ``toolChoice`` naming one is a 400."""
    check_images(request.messages, settings.run_images_max_bytes)
    asked = request
    _check_response_format(request.response_format)
    check_approval_patterns(asked.require_approval)
    request = apply_persona(request, rules, settings.default_model)
    preset = frozenset(name for name in _PRESET_LIMITS if getattr(asked, name) is None and getattr(request, name))
    model = request.model
    assert model is not None  # apply_persona refuses a request left without one
    persona = rules.personas.get(request.persona) if request.persona is not None else None
    from_persona = persona is not None and asked.model is None and model == persona.model
    _check_model(model, rules, request.persona if from_persona else None)
    limits = _check_limits(request, settings, rules, preset, runtime)
    cost_limit = _cost_limit(asked, request, rules, user, role)
    agent_enabled = runtime is None or runtime.agent_enabled
    discovery = _Discovery(catalog, tenant, agent_enabled, tools_best_effort)
    tools, prices, window, out_of_time = await _resolve(
        request, model, rules, role, limits, cost_limit, discovery, models
    )
    client_tools = client_tools or []
    if client_tools:
        client_names = {spec.name for spec in client_tools}
        tools = [tool for tool in tools if tool.name not in client_names]
    choice = request.tool_choice
    needs_approval = approval_tools(
        tools, rules.approval, persona.approval if persona is not None else None, asked.require_approval
    )
    if needs_approval and not offer_approval_tools:  # left out before the choice is checked against the tools
        if isinstance(choice, NamedToolChoice) and choice.name in needs_approval:
            raise ApiError(
                400,
                "invalid_request",
                f"toolChoice names '{clip(choice.name)}', a tool that needs a person's approval: it is not offered "
                "on this API (no client of it can approve a call).",
            )
        tools = [tool for tool in tools if tool.name not in needs_approval]
        needs_approval = frozenset()
    if not out_of_time:
        _check_tool_choice(choice, {tool.name for tool in tools} | {spec.name for spec in client_tools})
    return RunPlan(
        run_id=f"run_{uuid.uuid4().hex}",
        model=model,
        messages=request.messages,
        tools=tools,
        tool_choice=choice,
        limits=limits,
        max_tokens=request.max_tokens,
        temperature=request.temperature,
        reasoning=request.reasoning,
        verbosity=request.verbosity,
        client_tools=client_tools,
        system_prompt=system_prompt_of(request, rules),
        tenant=tenant,
        prices=prices,
        tool_cache_seconds=runtime.tool_cache_seconds if runtime is not None else None,
        # "text" asks for nothing: the run is planned as one without a format.
        response_format=None
        if request.response_format is None or request.response_format.type == "text"
        else request.response_format,
        context_tokens=window,
        summary_model=(persona.summary_model if persona is not None else None) or rules.summary_model,
        approval_tools=needs_approval,
        approval_timeout_seconds=rules.approval_timeout_seconds,
        # A front whose clients cannot approve a call cannot answer a question either: the gateway declines it.
        input_timeout_seconds=rules.input_timeout_seconds if offer_approval_tools else None,
    )
