"""The callers file: caller keys (``Authorization: Bearer``), their tenants and the tenants' rules, parsed.

The keys come from the callers file (``AGENT_CALLERS_FILE``, TOML)::

    [tenants.acme]            # what the tenant may do; every field is optional (omitted: no rule)
    max_concurrent_runs = 4   # runs in progress at once (overrides AGENT_MAX_CONCURRENT_RUNS_PER_TENANT; 0: no cap)
    models = ["gpt-4o*"]      # the models it may run (fnmatch globs)
    tools = ["search_documents", "web:*"]   # the tools it may use: names, "<server>:<tool>" or "<server>:*"
                                            #   (a name matches a tool as listed or as its server names it)
    deny_tools = ["rag:add_documents"]      # never these, even when allowed above (same forms)
    system_prompt = "You answer for ACME."  # the tenant's default system prompt (see agent_service.core.personas)
    reasoning_effort = "low"  # its runs' default generation controls, after the request's and the persona's:
    verbosity = "low"         #   reasoning_effort, reasoning_summary, verbosity (see agent_service.core.personas)
    max_iterations = 8        # caps of a run (and the defaults when a request names none): LLM calls,
    max_run_seconds = 60      #   wall clock, input + output tokens, cost in US dollars
    max_run_tokens = 50000
    max_run_cost_usd = 0.50
    monthly_tokens = 5000000  # the tenant's budgets per calendar month (UTC), all its users together
    monthly_cost_usd = 200.0
    user_monthly_tokens = 200000      # each end user's (X-User-Id) per calendar month
    user_monthly_cost_usd = 10.0
    role_monthly_tokens = {guest = 5000}      # an end user's monthly budget by role (X-User-Role): the role's,
    role_monthly_cost_usd = {guest = 0.10}    #   else none for admin and owner, else user_monthly_*
    tool_roles = {"rag:add_documents" = "admin", "web:*" = "user"}  # the lowest role that may use a tool (patterns
                              #   as in tools; several match: the highest role; unlisted tools: every role)
    max_mcp_servers = 20      # MCP servers of its own it may register through the admin API (default 20)
    approval = ["destructive", "billing:*"]  # calls that wait for a person's approval (patterns as in tools;
                              #   "destructive": every tool not annotated readOnlyHint: true)
    approval_timeout_seconds = 3600  # how long a run waits for them; then undecided calls are denied
    summary_model = "gpt-4o-mini"    # summarises a conversation's oldest turns when they no longer fit

    [personas.concise]        # a persona every tenant may use; [tenants.acme.personas.<name>]: acme's own
    system_prompt = "Answer in one sentence."
    model = "demo"

    [[keys]]
    name = "acme-platform"    # shown in logs, never the key
    tenant = "acme"
    sha256 = "<hex sha256 of the key>"   # or: key_env = "ACME_PLATFORM_KEY" (the key itself, from the environment)
    trusted = true            # may name the end user with X-User-Id and X-User-Role (default false)
    role = "admin"            # may use its tenant's admin API (/api/v1/admin/*); "operator": any tenant's, with
                              #   ?tenant= (default: none, the key runs and reads only)

A presented key is hashed (``hash_key``) and compared with every known key's hash in constant time
(``Callers.identify``: ``hmac.compare_digest``), all of them whichever matches, so the answer's timing says nothing
about the keys. With ``AGENT_CALLER_KEYS_IN_STORE`` keys are also kept in the run store (``python -m
agent_service.keys``, ``agent_service.access.stored_keys``); such a key's tenant has the rules of its
``[tenants.<name>]`` table in the file (``Callers.rules_of``), if there is one, else none. The request's caller is
identified by ``agent_service.api.auth``; the values it is made of (``Caller``, ``TenantRules``) are
``agent_service.core.tenancy``'s.
"""

from __future__ import annotations

import hashlib
import hmac
import os
import re
import tomllib
from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from agent_service.core.names import TENANT_NAME_RULE, is_name
from agent_service.core.personas import (
    GENERATION_FIELDS,
    Persona,
    PersonaError,
    parse_generation,
    parse_personas,
    parse_system_prompt,
)
from agent_service.core.tenancy import (
    DEFAULT_INPUT_TIMEOUT_SECONDS,
    NO_RULES,
    TOOL_PATTERN,
    USER_ROLES,
    KeyRole,
    TenantRules,
    UserRole,
)
from suite_common.wire import DEFAULT_MAX_TENANT_SERVERS

__all__ = [
    "KEY_ROLES",
    "MAX_APPROVAL_TIMEOUT_SECONDS",
    "CallerKey",
    "Callers",
    "CallersFileError",
    "hash_key",
    "load_callers",
    "parse_callers",
]

_SETTING = "AGENT_CALLERS_FILE"
_SHA256_HEX = re.compile(r"[0-9a-fA-F]{64}")


class CallersFileError(ValueError):
    """The callers file cannot be used; the message names the setting and the problem (one line)."""


@dataclass(frozen=True, slots=True)
class CallerKey:
    name: str
    tenant: str
    digest: bytes = field(repr=False)
    """The sha256 of the key (never the key itself)."""
    trusted: bool = False
    role: KeyRole | None = None


KEY_ROLES: tuple[KeyRole, ...] = ("admin", "operator")


@dataclass(frozen=True, slots=True)
class Callers:
    """The callers file, parsed: its tenants (with their rules) and keys."""

    rules: Mapping[str, TenantRules]
    keys: tuple[CallerKey, ...]
    unlisted: TenantRules = NO_RULES
    """The rules of a tenant without a ``[tenants.<name>]`` table (a key kept in the store may name one): no rule,
    and the personas every tenant may use."""

    @property
    def tenants(self) -> frozenset[str]:
        return frozenset(self.rules)

    def rules_of(self, tenant: str) -> TenantRules:
        return self.rules.get(tenant, self.unlisted)

    def any_run_cap(self) -> bool:
        """Whether some tenant has a cap of its own on runs in progress (then slots are counted)."""
        return any(rules.max_concurrent_runs for rules in self.rules.values())

    def identify(self, presented: str) -> CallerKey | None:
        """The key ``presented`` is, or None; compares with every key, in constant time each."""
        digest = hash_key(presented)
        found = None
        for key in self.keys:
            if hmac.compare_digest(digest, key.digest):
                found = key
        return found


def hash_key(key: str) -> bytes:
    return hashlib.sha256(key.encode("utf-8")).digest()


def _fail(source: str, problem: str) -> CallersFileError:
    return CallersFileError(f"{_SETTING}: {source}: {problem}")


def _key(entry: Any, index: int, tenants: frozenset[str], source: str, environ: Mapping[str, str]) -> CallerKey:
    where = f"keys[{index}]"
    if not isinstance(entry, dict):
        raise _fail(source, f"{where} must be a table")
    unknown = sorted(set(entry) - {"name", "tenant", "sha256", "key_env", "trusted", "role"})
    if unknown:
        raise _fail(source, f"{where}: unknown field {unknown[0]!r}")
    name = entry.get("name")
    if not isinstance(name, str) or not is_name(name):
        raise _fail(source, f"{where}: name must be letters, digits, '.', '_' or '-' (at most 64)")
    where = f"key {name!r}"
    tenant = entry.get("tenant")
    if not isinstance(tenant, str) or tenant not in tenants:
        raise _fail(source, f"{where}: tenant {tenant!r} is not one of [tenants.*]")
    trusted = entry.get("trusted", False)
    if not isinstance(trusted, bool):
        raise _fail(source, f"{where}: trusted must be true or false")
    role = entry.get("role")
    if role is not None and role not in KEY_ROLES:
        raise _fail(source, f"{where}: role must be one of {', '.join(KEY_ROLES)} (or left out: the key runs only)")
    sha256, key_env = entry.get("sha256"), entry.get("key_env")
    if (sha256 is None) == (key_env is None):
        raise _fail(source, f"{where}: give either sha256 or key_env (one source of the key)")
    if sha256 is not None:
        if not isinstance(sha256, str) or not _SHA256_HEX.fullmatch(sha256):
            raise _fail(source, f"{where}: sha256 must be 64 hex digits (the sha256 of the key)")
        digest = bytes.fromhex(sha256)
    else:
        if not isinstance(key_env, str) or not key_env:
            raise _fail(source, f"{where}: key_env must name an environment variable")
        value = environ.get(key_env, "").strip()
        if not value:
            raise _fail(source, f"{where}: the environment variable {key_env} is not set")
        digest = hash_key(value)
    return CallerKey(name=name, tenant=tenant, digest=digest, trusted=trusted, role=role)


_RULE_FIELDS = (
    "max_concurrent_runs",
    "models",
    "tools",
    "deny_tools",
    "max_iterations",
    "max_run_seconds",
    "max_run_tokens",
    "max_run_cost_usd",
    "monthly_tokens",
    "monthly_cost_usd",
    "user_monthly_tokens",
    "user_monthly_cost_usd",
    "role_monthly_tokens",
    "role_monthly_cost_usd",
    "tool_roles",
    "max_mcp_servers",
    "approval",
    "approval_timeout_seconds",
    "input_timeout_seconds",
    "summary_model",
)
_WHOLE_LIMITS = ("max_iterations", "max_run_tokens", "monthly_tokens", "user_monthly_tokens")
_AMOUNT_LIMITS = ("max_run_seconds", "max_run_cost_usd", "monthly_cost_usd", "user_monthly_cost_usd")


def _names(
    table: dict[str, Any], key: str, where: str, source: str, pattern: re.Pattern[str] | None
) -> tuple[str, ...] | None:
    value = table.get(key)
    if value is None:
        return None
    if not isinstance(value, list) or not all(isinstance(item, str) and item for item in value):
        raise _fail(source, f"{where}: {key} must be a list of non-empty strings")
    if pattern is not None:
        bad = next((item for item in value if not pattern.fullmatch(item)), None)
        if bad is not None:
            raise _fail(source, f"{where}: {key}: {bad!r} is not a tool name, '<server>:<tool>' or '<server>:*'")
    return tuple(value)


def _whole(value: Any, least: int) -> bool:
    return isinstance(value, int) and not isinstance(value, bool) and value >= least


MAX_APPROVAL_TIMEOUT_SECONDS = 30 * 24 * 3600
"""The longest wait for approvals (or answers) a tenant may set: a run parked longer is forgotten, not waited for (and
a wait past what a date can hold would fail the run when it parks)."""


def _amount(value: Any) -> bool:
    return isinstance(value, int | float) and not isinstance(value, bool) and 0 < value < float("inf")


def _limits(table: dict[str, Any], where: str, source: str) -> dict[str, Any]:
    """The tenant's limits and budgets: whole numbers (tokens, iterations) or amounts (seconds, dollars), above 0."""
    limits: dict[str, Any] = {}
    for key in _WHOLE_LIMITS:
        value = table.get(key)
        if value is not None and not _whole(value, 1):
            raise _fail(source, f"{where}: {key} must be a whole number, 1 or more")
        limits[key] = value
    for key in _AMOUNT_LIMITS:
        value = table.get(key)
        if value is not None:
            if not _amount(value):
                raise _fail(source, f"{where}: {key} must be a number above 0")
            value = float(value)
        limits[key] = value
    return limits


_ROLES_SHOWN = ", ".join(USER_ROLES)


def _role_table(table: dict[str, Any], key: str, where: str, source: str) -> dict[UserRole, Any]:
    """``table[key]``: an inline table whose keys are end-user roles (empty when absent)."""
    value = table.get(key, {})
    if not isinstance(value, dict):
        raise _fail(source, f"{where}: {key} must be a table of roles, e.g. {key} = {{guest = ...}}")
    unknown = next((role for role in value if role not in USER_ROLES), None)
    if unknown is not None:
        raise _fail(source, f"{where}: {key}: {unknown!r} is not a role ({_ROLES_SHOWN})")
    return {role: value[role] for role in USER_ROLES if role in value}


def _role_budgets(table: dict[str, Any], where: str, source: str) -> dict[str, Any]:
    """``role_monthly_tokens`` (whole numbers, 1 or more) and ``role_monthly_cost_usd`` (amounts above 0), by role."""
    tokens: dict[UserRole, int] = {}
    for role, value in _role_table(table, "role_monthly_tokens", where, source).items():
        if not _whole(value, 1):
            raise _fail(source, f"{where}: role_monthly_tokens.{role} must be a whole number, 1 or more")
        tokens[role] = value
    cost: dict[UserRole, float] = {}
    for role, value in _role_table(table, "role_monthly_cost_usd", where, source).items():
        if not _amount(value):
            raise _fail(source, f"{where}: role_monthly_cost_usd.{role} must be a number above 0")
        cost[role] = float(value)
    return {"role_monthly_tokens": tokens, "role_monthly_cost_usd": cost}


def _tool_roles(table: dict[str, Any], where: str, source: str) -> dict[str, UserRole]:
    """``tool_roles``: tool pattern (as in ``tools``) -> the lowest role that may use it."""
    value = table.get("tool_roles", {})
    if not isinstance(value, dict):
        raise _fail(source, f'{where}: tool_roles must be a table, e.g. tool_roles = {{"rag:add_documents" = "admin"}}')
    roles: dict[str, UserRole] = {}
    for pattern, role in value.items():
        if not TOOL_PATTERN.fullmatch(pattern):
            problem = f"{pattern!r} is not a tool name, '<server>:<tool>' or '<server>:*'"
            raise _fail(source, f"{where}: tool_roles: {problem}")
        if role not in USER_ROLES:
            raise _fail(source, f"{where}: tool_roles: {pattern!r} = {role!r} is not a role ({_ROLES_SHOWN})")
        roles[pattern] = role
    return roles


def _rules(name: str, table: dict[str, Any], source: str) -> TenantRules:
    where = f"tenant {name!r}"
    unknown = sorted(set(table) - set(_RULE_FIELDS))
    if unknown:
        raise _fail(source, f"{where}: unknown field {unknown[0]!r} (expected {', '.join(_RULE_FIELDS)})")
    cap = table.get("max_concurrent_runs")
    if cap is not None and not _whole(cap, 0):
        raise _fail(source, f"{where}: max_concurrent_runs must be a whole number, 0 or more (0: no cap)")
    max_servers = table.get("max_mcp_servers", DEFAULT_MAX_TENANT_SERVERS)
    if not _whole(max_servers, 0):
        raise _fail(source, f"{where}: max_mcp_servers must be a whole number, 0 or more (0: none of its own)")
    approval_timeout = table.get("approval_timeout_seconds", 3600.0)
    if not _amount(approval_timeout) or approval_timeout > MAX_APPROVAL_TIMEOUT_SECONDS:
        raise _fail(
            source,
            f"{where}: approval_timeout_seconds must be a number above 0 and at most {MAX_APPROVAL_TIMEOUT_SECONDS} "
            "(30 days)",
        )
    input_timeout = table.get("input_timeout_seconds", DEFAULT_INPUT_TIMEOUT_SECONDS)
    if not _amount(input_timeout) or input_timeout > MAX_APPROVAL_TIMEOUT_SECONDS:
        raise _fail(
            source,
            f"{where}: input_timeout_seconds must be a number above 0 and at most {MAX_APPROVAL_TIMEOUT_SECONDS} "
            "(30 days)",
        )
    summary_model = table.get("summary_model")
    if summary_model is not None and (not isinstance(summary_model, str) or not summary_model.strip()):
        raise _fail(source, f"{where}: summary_model must be a model name")
    return TenantRules(
        max_concurrent_runs=cap,
        models=_names(table, "models", where, source, None),
        tools=_names(table, "tools", where, source, TOOL_PATTERN),
        deny_tools=_names(table, "deny_tools", where, source, TOOL_PATTERN) or (),
        tool_roles=_tool_roles(table, where, source),
        max_mcp_servers=max_servers,
        approval=_names(table, "approval", where, source, TOOL_PATTERN) or (),
        approval_timeout_seconds=float(approval_timeout),
        input_timeout_seconds=float(input_timeout),
        summary_model=summary_model,
        **_limits(table, where, source),
        **_role_budgets(table, where, source),
    )


_PERSONA_TENANT_FIELDS = ("system_prompt", "personas", *GENERATION_FIELDS)
"""A tenant's fields that are not rules: its default system prompt, its own personas and its default generation
controls."""


def _personas(tables: Any, tenant: str | None, source: str) -> dict[str, Persona]:
    try:
        return parse_personas(tables, tenant)
    except PersonaError as error:
        raise _fail(source, str(error)) from None


def _with_personas(
    rules: TenantRules, tenant: str, table: dict[str, Any], shared: Mapping[str, Persona], source: str
) -> TenantRules:
    where = f"tenant {tenant!r}"
    try:
        prompt = parse_system_prompt(table, where)
        generation = parse_generation(table, where)
    except PersonaError as error:
        raise _fail(source, str(error)) from None
    own = _personas(table.get("personas"), tenant, source)
    return replace(rules, system_prompt=prompt, personas={**shared, **own}, generation=generation)


def parse_callers(
    text: str, *, source: str = "callers file", environ: Mapping[str, str] | None = None, keys_required: bool = True
) -> Callers:
    """The callers file's content; every way it can be wrong is a ``CallersFileError`` (one line).
    ``keys_required=False`` (keys kept in the store): a file of tenants only is fine."""
    try:
        data = tomllib.loads(text)
    except tomllib.TOMLDecodeError as error:
        raise _fail(source, f"not valid TOML: {error}") from None
    unknown = sorted(set(data) - {"tenants", "keys", "personas"})
    if unknown:
        raise _fail(source, f"unknown table {unknown[0]!r} (expected [tenants.*], [personas.*] and [[keys]])")
    tenant_tables = data.get("tenants", {})
    if not isinstance(tenant_tables, dict) or not all(isinstance(t, dict) for t in tenant_tables.values()):
        raise _fail(source, "tenants must be tables: [tenants.<name>]")
    for tenant in tenant_tables:
        if not is_name(tenant):
            raise _fail(source, f"tenant {tenant!r}: a tenant's name is {TENANT_NAME_RULE}")
    shared = _personas(data.get("personas"), None, source)
    rules = {
        tenant: _with_personas(
            _rules(tenant, {key: value for key, value in table.items() if key not in _PERSONA_TENANT_FIELDS}, source),
            tenant,
            table,
            shared,
            source,
        )
        for tenant, table in tenant_tables.items()
    }
    tenants = frozenset(rules)
    entries = data.get("keys", [])
    if not isinstance(entries, list) or (keys_required and not entries):
        raise _fail(source, "no [[keys]]: at least one caller key is needed")
    keys = tuple(
        _key(entry, index, tenants, source, os.environ if environ is None else environ)
        for index, entry in enumerate(entries)
    )
    names = [key.name for key in keys]
    duplicate = next((name for name in names if names.count(name) > 1), None)
    if duplicate is not None:
        raise _fail(source, f"two keys are named {duplicate!r}; a name tells keys apart in logs")
    digests = [key.digest for key in keys]
    if len(set(digests)) != len(digests):
        raise _fail(source, "two keys are the same key; give each caller its own")
    return Callers(rules=rules, keys=keys, unlisted=replace(NO_RULES, personas=shared))


def load_callers(path: Path, *, environ: Mapping[str, str] | None = None, keys_required: bool = True) -> Callers:
    try:
        text = path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as error:
        problem = error.strerror if isinstance(error, OSError) and error.strerror else str(error)
        raise _fail(str(path), f"cannot read it: {problem}") from None
    return parse_callers(text, source=str(path), environ=environ, keys_required=keys_required)
