"""Tenancy as plain values: who calls (``Caller``), what its tenant may do (``TenantRules``), and how a tool rule
names tools (``TOOL_PATTERN``, ``tool_matches``).

No I/O: the callers file that fills these in is read by ``agent_service.access.callers_file``, and the request's
caller is identified by ``agent_service.api.auth``. ``DEFAULT_TENANT`` is the tenant of an open API and of runs
stored before tenants existed.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from fnmatch import fnmatchcase
from typing import Literal, TypeVar

from agent_service.core.names import TOOL_PATTERN
from agent_service.core.personas import NO_GENERATION, Generation, Persona
from suite_common.wire import DEFAULT_MAX_TENANT_SERVERS, UserRole

__all__ = [
    "ANONYMOUS",
    "DEFAULT_INPUT_TIMEOUT_SECONDS",
    "DEFAULT_TENANT",
    "NO_RULES",
    "TOOL_PATTERN",
    "USER_ROLES",
    "Caller",
    "KeyRole",
    "TenantRules",
    "UserRole",
    "role_at_least",
    "tool_matches",
]

KeyRole = Literal["admin", "operator"]
"""What a caller key may do besides running: ``admin``, its tenant's admin API; ``operator``, any tenant's."""

DEFAULT_TENANT = "default"
"""The tenant of a run stored without one (before callers were configured, or by an open API), and of the
conversations stored before conversations were keyed by tenant."""

DEFAULT_INPUT_TIMEOUT_SECONDS = 600.0
"""How long a run waits for an answer to a tool server's question unless its tenant says (``input_timeout_seconds``)."""

USER_ROLES: tuple[UserRole, ...] = ("guest", "user", "admin", "owner")
"""An end user's roles, lowest first: a role may do what every role before it may."""

UNLIMITED_ROLES: frozenset[UserRole] = frozenset({"admin", "owner"})
"""The roles without a monthly budget of their own unless the tenant's ``role_monthly_*`` gives them one."""


def role_at_least(role: UserRole, lowest: UserRole) -> bool:
    """Whether ``role`` is ``lowest`` or above it (``USER_ROLES``' order)."""
    return USER_ROLES.index(role) >= USER_ROLES.index(lowest)


def tool_matches(pattern: str, server: str, tool: str, server_tool: str | None = None) -> bool:
    """``pattern``: a tool's name, ``<server>:<tool>``, or ``<server>:*`` (every tool of that MCP server).

    A tool has two names when the gateway renames it (a server's ``toolPrefix``, ``<server>__<tool>`` under
    ``MCP_CLIENT_TOOL_NAME_COLLISION=prefix``): ``tool`` as the gateway lists it and ``server_tool`` as its
    server knows it. A name in a pattern matches either, so that a rule holds however the tool is listed."""
    names = (tool,) if server_tool is None else (tool, server_tool)
    pattern_server, colon, pattern_tool = pattern.partition(":")
    if not colon:
        return pattern in names
    return pattern_server == server and (pattern_tool == "*" or pattern_tool in names)


@dataclass(frozen=True, slots=True)
class TenantRules:
    """What a tenant may use (its ``[tenants.<name>]`` table); ``None``: no rule, everything is allowed."""

    max_concurrent_runs: int | None = None
    """Overrides ``AGENT_MAX_CONCURRENT_RUNS_PER_TENANT`` for this tenant (0: no cap)."""
    models: tuple[str, ...] | None = None
    """fnmatch globs of the model names it may run."""
    tools: tuple[str, ...] | None = None
    """The tools it may use: names, ``<server>:<tool>`` or ``<server>:*``."""
    deny_tools: tuple[str, ...] = ()
    """Tools it may never use, even when ``tools`` allows them (same forms)."""
    max_iterations: int | None = None
    """LLM calls per run at most: caps a request's ``maxIterations``, and is its default (below the service's)."""
    max_run_seconds: float | None = None
    """Wall clock of a run at most: caps ``deadlineSeconds``, and is its default."""
    max_run_tokens: int | None = None
    """Input and output tokens of a run at most: caps ``maxTotalTokens``, and is its default."""
    max_run_cost_usd: float | None = None
    """Cost of a run at most, in US dollars: caps ``maxCostUsd``, and is its default."""
    monthly_tokens: int | None = None
    """Tokens of all the tenant's runs in a calendar month (UTC)."""
    monthly_cost_usd: float | None = None
    """Cost of all the tenant's runs in a calendar month (UTC), in US dollars."""
    user_monthly_tokens: int | None = None
    """Tokens of each end user's (``X-User-Id``) runs in a calendar month (UTC); runs without a user count toward
    the tenant's budgets only."""
    user_monthly_cost_usd: float | None = None
    """Cost of each end user's runs in a calendar month (UTC), in US dollars."""
    role_monthly_tokens: Mapping[UserRole, int] = field(default_factory=dict)
    """Each end user's monthly tokens by the user's role (``X-User-Role``), instead of ``user_monthly_tokens``."""
    role_monthly_cost_usd: Mapping[UserRole, float] = field(default_factory=dict)
    """Each end user's monthly cost by the user's role, in US dollars, instead of ``user_monthly_cost_usd``."""
    tool_roles: Mapping[str, UserRole] = field(default_factory=dict)
    """Tool pattern (as in ``tools``) -> the lowest end-user role that may use the tools it matches; a tool that no
    pattern matches: every role. Applies to the shared tools and the tenant's own alike."""
    max_mcp_servers: int = DEFAULT_MAX_TENANT_SERVERS
    """How many MCP servers of its own the tenant may register (the admin API), the operator's cap."""
    approval: tuple[str, ...] = ()
    """Tools whose calls wait for a person's approval: patterns as in ``tools``, or ``destructive`` (every tool whose
    MCP annotations do not say ``readOnlyHint: true``). A persona's and a request's patterns add to these."""
    approval_timeout_seconds: float = 3600.0
    """How long a run waits for approvals; then its undecided calls are denied ("no decision in time")."""
    input_timeout_seconds: float = DEFAULT_INPUT_TIMEOUT_SECONDS
    """How long a run waits for a person's answer to a tool server's question (``input_required``); then the
    question is declined."""
    summary_model: str | None = None
    """The model that summarises a conversation's oldest turns when they no longer fit (``None``: the run's)."""

    @property
    def has_monthly_budget(self) -> bool:
        """Whether its runs are counted against a monthly budget at all (otherwise they cost nothing to check)."""
        budgets = (self.monthly_tokens, self.monthly_cost_usd, self.user_monthly_tokens, self.user_monthly_cost_usd)
        return any(budget is not None for budget in budgets) or bool(
            self.role_monthly_tokens or self.role_monthly_cost_usd
        )

    def user_monthly_tokens_of(self, role: UserRole) -> tuple[int | None, str]:
        """An end user's monthly tokens for ``role`` (``None``: unlimited) and the field of the callers file that
        says so: the role's own (``role_monthly_tokens``), else none for ``admin`` and ``owner``, else the
        tenant's ``user_monthly_tokens``."""
        return _by_role(role, self.role_monthly_tokens, self.user_monthly_tokens, "tokens")

    def user_monthly_cost_usd_of(self, role: UserRole) -> tuple[float | None, str]:
        """An end user's monthly cost for ``role``, chosen as ``user_monthly_tokens_of`` chooses tokens."""
        return _by_role(role, self.role_monthly_cost_usd, self.user_monthly_cost_usd, "cost_usd")

    # Personas and the system-prompt cascade (agent_service.core.personas): set from the callers file in
    # ``agent_service.access.callers_file.parse_callers``, apart from the rules above.
    system_prompt: str | None = None
    """The tenant's default system prompt (the last of the cascade)."""
    personas: Mapping[str, Persona] = field(default_factory=dict)
    """The personas it may use, by name: the global ones and its own (its own win)."""
    generation: Generation = NO_GENERATION
    """Its runs' default generation controls (``reasoning_effort``, ``reasoning_summary``, ``verbosity``), after
    the request's and its persona's."""

    def allows_model(self, model: str) -> bool:
        return self.models is None or any(fnmatchcase(model, pattern) for pattern in self.models)

    def allows_tool(self, server: str, tool: str, server_tool: str | None = None) -> bool:
        """Whether ``tools`` and ``deny_tools`` allow a shared tool (the tenant's own are never subject to them).
        ``tool``: as the gateway lists it; ``server_tool``: its own name on ``server``, if another (a rule naming
        either name matches: ``tool_matches``)."""
        if self.tools is None and not self.deny_tools:  # no tool rule: checked for every tool of every run
            return True
        if self.tools is not None and not any(
            tool_matches(pattern, server, tool, server_tool) for pattern in self.tools
        ):
            return False
        return not any(tool_matches(pattern, server, tool, server_tool) for pattern in self.deny_tools)

    def lowest_role(self, server: str, tool: str, server_tool: str | None = None) -> UserRole | None:
        """The lowest end-user role that may use the tool (``tool_roles``: the highest of the patterns matching it),
        or ``None`` when no pattern matches it (every role may)."""
        if not self.tool_roles:
            return None
        matched = [
            role for pattern, role in self.tool_roles.items() if tool_matches(pattern, server, tool, server_tool)
        ]
        return max(matched, key=USER_ROLES.index, default=None)

    def role_allows_tool(self, role: UserRole, server: str, tool: str, server_tool: str | None = None) -> bool:
        """Whether an end user of ``role`` may use the tool (``tool_roles``)."""
        lowest = self.lowest_role(server, tool, server_tool)
        return lowest is None or role_at_least(role, lowest)

    def servers_named(self) -> set[str]:
        """The shared MCP servers its ``tools`` and ``deny_tools`` name (``<server>:<tool>``, ``<server>:*``).
        Not ``tool_roles``': they may name the tenant's own servers, which the gateway's shared list lacks."""
        patterns = (*(self.tools or ()), *self.deny_tools)
        return {pattern.partition(":")[0] for pattern in patterns if ":" in pattern}


_Amount = TypeVar("_Amount", int, float)


def _by_role(
    role: UserRole, by_role: Mapping[UserRole, _Amount], per_user: _Amount | None, unit: str
) -> tuple[_Amount | None, str]:
    if role in by_role:
        return by_role[role], f"role_monthly_{unit}.{role}"
    if role in UNLIMITED_ROLES:
        return None, f"role_monthly_{unit}.{role}"
    return per_user, f"user_monthly_{unit}"


NO_RULES = TenantRules()


@dataclass(frozen=True, slots=True)
class Caller:
    """Who sent a request: the key's ``name``, its ``tenant``, the end user a trusted caller named (or None) and
    that user's role, the tenant's ``rules`` (an open API has none), and the key's own role."""

    name: str
    tenant: str
    user: str | None = None
    rules: TenantRules = field(default=NO_RULES, repr=False)
    role: UserRole = "user"
    """The end user's role, named by a trusted caller with ``X-User-Role`` (default ``user``)."""
    key_role: KeyRole | None = None
    """The key's own role (``role`` in the callers file or ``keys add --role``): who may use the admin API."""

    @property
    def decider(self) -> str:
        """Who a person's decision is recorded as (an approval's, an answer's ``decidedBy``): ``<key>`` or
        ``<key>/<user>``."""
        return self.name if self.user is None else f"{self.name}/{self.user}"


ANONYMOUS = Caller("anonymous", DEFAULT_TENANT)
