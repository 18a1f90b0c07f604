"""Who is calling: caller keys (``Authorization: Bearer``), their tenant, and the end user a trusted caller names.

The keys come from the callers file (``AGENT_CALLERS_FILE``, TOML)::

    [tenants.acme]            # what the tenant may do; every field is optional (omitted: no rule)
    max_concurrent_runs = 4   # runs in progress at once (overrides AGENT_MAX_CONCURRENT_RUNS_PER_TENANT; 0: no cap)
    models = ["gpt-4o*"]      # the models it may run (fnmatch globs)
    tools = ["search_documents", "web:*"]   # the tools it may use: names, "<server>:<tool>" or "<server>:*"
                                            #   (a name matches a tool as listed or as its server names it)
    deny_tools = ["rag:add_documents"]      # never these, even when allowed above (same forms)
    system_prompt = "You answer for ACME."  # the tenant's default system prompt (see agent_service.personas)
    reasoning_effort = "low"  # its runs' default generation controls, after the request's and the persona's:
    verbosity = "low"         #   reasoning_effort, reasoning_summary, verbosity (see agent_service.personas)
    max_iterations = 8        # caps of a run (and the defaults when a request names none): LLM calls,
    max_run_seconds = 60      #   wall clock, input + output tokens, cost in US dollars
    max_run_tokens = 50000
    max_run_cost_usd = 0.50
    monthly_tokens = 5000000  # the tenant's budgets per calendar month (UTC), all its users together
    monthly_cost_usd = 200.0
    user_monthly_tokens = 200000      # each end user's (X-User-Id) per calendar month
    user_monthly_cost_usd = 10.0

    [personas.concise]        # a persona every tenant may use; [tenants.acme.personas.<name>]: acme's own
    system_prompt = "Answer in one sentence."
    model = "demo"

    [[keys]]
    name = "acme-platform"    # shown in logs, never the key
    tenant = "acme"
    sha256 = "<hex sha256 of the key>"   # or: key_env = "ACME_PLATFORM_KEY" (the key itself, from the environment)
    trusted = true            # may name the end user with X-User-Id (default false)

A presented key is hashed and compared with every known key's hash in constant time (``hmac.compare_digest``),
all of them whichever matches, so the answer's timing says nothing about the keys. With
``AGENT_CALLER_KEYS_IN_STORE`` keys are also kept in the run store (``python -m agent_service.keys``), looked up
by their hash when no key of the file matched (``agent_service.stored_keys``); such a key's tenant has the rules
of its ``[tenants.<name>]`` table in the file, if there is one, else none. Without a callers file and store keys
the API is open, as on a laptop: every request is the caller ``anonymous`` of the tenant ``default``, which may
name a user.

``CallerMiddleware`` is the one place that checks: ``/api/v1/agent/*`` and ``/v1/*`` need a key; the health,
metrics, OpenAPI and console page routes stay open. The store unreachable when a key has to be looked up there:
503 ``store_unavailable``. With keys, the lines logged while serving a request carry
``caller``, ``tenant`` and ``user``. Handlers (and the limiter) read the caller with ``caller_of``.
"""

from __future__ import annotations

import hashlib
import hmac
import os
import re
import tomllib
from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from fnmatch import fnmatchcase
from pathlib import Path
from typing import Any

import structlog
from starlette.requests import Request
from starlette.responses import JSONResponse
from starlette.types import ASGIApp, Receive, Scope, Send

from agent_service.names import USER_ID_RULE, is_name, is_user_id
from agent_service.openai_wire import error_body
from agent_service.personas import (
    GENERATION_FIELDS,
    NO_GENERATION,
    Generation,
    Persona,
    PersonaError,
    parse_generation,
    parse_personas,
    parse_system_prompt,
)
from agent_service.store import DEFAULT_TENANT, StoreError
from agent_service.stored_keys import StoredKeys
from suite_common.errors import error_response
from suite_common.logging import get_logger

__all__ = [
    "ANONYMOUS",
    "CALLER_ERRORS",
    "DEFAULT_TENANT",
    "NO_RULES",
    "PROTECTED_PREFIXES",
    "TOOL_PATTERN",
    "Caller",
    "CallerKey",
    "CallerMiddleware",
    "Callers",
    "CallersFileError",
    "TenantRules",
    "caller_of",
    "hash_key",
    "load_callers",
    "parse_callers",
    "tool_matches",
]

_log = get_logger("agent_service.callers")

_SETTING = "AGENT_CALLERS_FILE"
PROTECTED_PREFIXES = ("/api/v1/agent/", "/v1/")
"""The paths that need a caller key (when the service has keys): the one list, which /openapi.json documents too."""
CALLER_ERRORS = {
    400: "X-User-Id is not 1 to 128 printable ASCII characters without spaces (invalid_request).",
    401: "No caller key (Authorization: Bearer), or an unknown or revoked one (unauthorized, WWW-Authenticate).",
    403: "X-User-Id from a caller whose key is not trusted (user_not_allowed).",
    503: "The run store, which holds caller keys (AGENT_CALLER_KEYS_IN_STORE), is unavailable (store_unavailable).",
}
"""What ``CallerMiddleware`` answers on a protected path, by status, for /openapi.json (with the operation's own)."""
_OPENAI_PREFIX = "/v1/"
_USER_HEADER = b"x-user-id"
_SHA256_HEX = re.compile(r"[0-9a-fA-F]{64}")


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

    @property
    def has_monthly_budget(self) -> bool:
        """Whether its runs are counted against a monthly budget at all (otherwise they cost nothing to check)."""
        budgets = (self.monthly_tokens, self.monthly_cost_usd, self.user_monthly_tokens, self.user_monthly_cost_usd)
        return any(budget is not None for budget in budgets)

    # Personas and the system-prompt cascade (agent_service.personas): set from the callers file in
    # ``parse_callers``, apart from the rules above.
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
        """``tool``: as the gateway lists it; ``server_tool``: its own name on ``server``, if another (a rule
        naming either name matches: ``tool_matches``)."""
        if self.tools is not None and not any(
            tool_matches(pattern, server, tool, server_tool) for pattern in self.tools
        ):
            return False
        return not any(tool_matches(pattern, server, tool, server_tool) for pattern in self.deny_tools)

    def servers_named(self) -> set[str]:
        """The MCP servers its ``tools`` and ``deny_tools`` name (``<server>:<tool>``, ``<server>:*``)."""
        patterns = (*(self.tools or ()), *self.deny_tools)
        return {pattern.partition(":")[0] for pattern in patterns if ":" in pattern}


NO_RULES = TenantRules()


@dataclass(frozen=True, slots=True)
class Caller:
    """Who sent a request: the key's ``name``, its ``tenant``, the end user a trusted caller named (or None), and
    the tenant's ``rules`` (an open API has none)."""

    name: str
    tenant: str
    user: str | None = None
    rules: TenantRules = field(default=NO_RULES, repr=False)


ANONYMOUS = Caller("anonymous", DEFAULT_TENANT)


class CallersFileError(ValueError):
    """The callers file cannot be used; the message names the setting and the problem (one line)."""


@dataclass(frozen=True, slots=True)
class CallerKey:
    name: str
    tenant: str
    digest: bytes = field(repr=False)
    """The sha256 of the key (never the key itself)."""
    trusted: bool = False


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
    unknown = sorted(set(entry) - {"name", "tenant", "sha256", "key_env", "trusted"})
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
    return CallerKey(name=name, tenant=tenant, digest=digest, trusted=trusted)


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
)
_WHOLE_LIMITS = ("max_iterations", "max_run_tokens", "monthly_tokens", "user_monthly_tokens")
_AMOUNT_LIMITS = ("max_run_seconds", "max_run_cost_usd", "monthly_cost_usd", "user_monthly_cost_usd")
TOOL_PATTERN = re.compile(r"[^:\s]+(:[^:\s]+)?")
"""What ``tool_matches`` takes: a tool's name, ``<server>:<tool>`` or ``<server>:*``."""


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


def _limits(table: dict[str, Any], where: str, source: str) -> dict[str, Any]:
    """The tenant's limits and budgets: whole numbers (tokens, iterations) or amounts (seconds, dollars), above 0."""
    limits: dict[str, Any] = {}
    for key in _WHOLE_LIMITS:
        value = table.get(key)
        if value is not None and (not isinstance(value, int) or isinstance(value, bool) or value < 1):
            raise _fail(source, f"{where}: {key} must be a whole number, 1 or more")
        limits[key] = value
    for key in _AMOUNT_LIMITS:
        value = table.get(key)
        if value is not None:
            if not isinstance(value, int | float) or isinstance(value, bool) or not 0 < value < float("inf"):
                raise _fail(source, f"{where}: {key} must be a number above 0")
            value = float(value)
        limits[key] = value
    return limits


def _rules(name: str, table: dict[str, Any], source: str) -> TenantRules:
    where = f"tenant {name!r}"
    unknown = sorted(set(table) - set(_RULE_FIELDS))
    if unknown:
        raise _fail(source, f"{where}: unknown field {unknown[0]!r} (expected {', '.join(_RULE_FIELDS)})")
    cap = table.get("max_concurrent_runs")
    if cap is not None and (not isinstance(cap, int) or isinstance(cap, bool) or cap < 0):
        raise _fail(source, f"{where}: max_concurrent_runs must be a whole number, 0 or more (0: no cap)")
    return TenantRules(
        max_concurrent_runs=cap,
        models=_names(table, "models", where, source, None),
        tools=_names(table, "tools", where, source, TOOL_PATTERN),
        deny_tools=_names(table, "deny_tools", where, source, TOOL_PATTERN) or (),
        **_limits(table, where, source),
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
            raise _fail(source, f"tenant {tenant!r}: a name is letters, digits, '.', '_' or '-' (at most 64)")
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


def caller_of(request: Request) -> Caller:
    """The request's caller, as ``CallerMiddleware`` identified it."""
    caller = request.scope.get("state", {}).get("caller")
    if not isinstance(caller, Caller):
        raise RuntimeError("no caller on the request: CallerMiddleware is not installed")
    return caller


def _header(scope: Scope, name: bytes) -> str | None:
    return next((value.decode("latin-1") for key, value in scope["headers"] if key == name), None)


def _bearer(scope: Scope) -> str | None:
    value = _header(scope, b"authorization")
    if value is None:
        return None
    scheme, _, token = value.strip().partition(" ")
    token = token.strip()
    return token if scheme.lower() == "bearer" and token else None


class CallerMiddleware:
    """Identifies the caller of every HTTP request (``scope["state"]["caller"]``); refuses a protected path without
    a known key (401), and ``X-User-Id`` from a key that may not name users (403).

    The keys: the callers file's (``callers``), checked first, in memory; then, when ``stored`` is given, the run
    store's, only for a protected path that no file key matched. Neither: an open API."""

    def __init__(self, app: ASGIApp, *, callers: Callers | None, stored: StoredKeys | None = None) -> None:
        self.app = app
        self.callers = callers
        self.stored = stored
        self.open = callers is None and stored is None

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        path: str = scope["path"]
        protected = path.startswith(PROTECTED_PREFIXES)
        user = _header(scope, _USER_HEADER)
        if self.open:
            caller, trusted = ANONYMOUS, True  # an open API: whoever can reach it is trusted, as on a laptop
        else:
            presented = _bearer(scope)
            try:
                identified = await self._identify(presented, protected)
            except StoreError as error:
                _log.warning("caller_keys_unavailable", path=path, error=str(error))
                message = "The run store, which holds the caller keys, is unavailable; try again shortly."
                refusal = self._refuse(path, 503, "store_unavailable", message, {"Retry-After": "1"})
                await refusal(scope, receive, send)
                return
            if identified is None:
                if protected:
                    reason = "Missing" if presented is None else "Unknown"
                    message = f"{reason} caller key: send Authorization: Bearer <key>."
                    await self._refuse(path, 401, "unauthorized", message, {"WWW-Authenticate": "Bearer"})(
                        scope, receive, send
                    )
                    return
                caller, trusted = ANONYMOUS, False
            else:
                caller, trusted = identified
        if user is not None and protected:
            if not trusted:
                message = f"The caller {caller.name} may not name the end user (X-User-Id): its key is not trusted."
                await self._refuse(path, 403, "user_not_allowed", message)(scope, receive, send)
                return
            if not is_user_id(user):
                message = f"X-User-Id must be {USER_ID_RULE}."
                await self._refuse(path, 400, "invalid_request", message)(scope, receive, send)
                return
            caller = replace(caller, user=user)
        scope.setdefault("state", {})["caller"] = caller
        if self.open or caller is ANONYMOUS:
            await self.app(scope, receive, send)
            return
        # Every line logged while serving the request says whose it is (names only, never the key).
        context = {"caller": caller.name, "tenant": caller.tenant} | ({"user": caller.user} if caller.user else {})
        with structlog.contextvars.bound_contextvars(**context):
            await self.app(scope, receive, send)

    async def _identify(self, presented: str | None, protected: bool) -> tuple[Caller, bool] | None:
        """The caller whose key is ``presented`` and whether it is trusted, or None for no key or an unknown one.
        The store is asked only for a protected path (an open one serves anybody the same)."""
        if presented is None:
            return None
        if self.callers is not None:
            key = self.callers.identify(presented)
            if key is not None:
                return Caller(key.name, key.tenant, rules=self.callers.rules[key.tenant]), key.trusted
        if self.stored is None or not protected:
            return None
        stored = await self.stored.find(hash_key(presented))
        if stored is None:
            return None
        rules = self.callers.rules_of(stored.tenant) if self.callers is not None else NO_RULES
        return Caller(stored.name, stored.tenant, rules=rules), stored.trusted

    @staticmethod
    def _refuse(path: str, status: int, code: str, message: str, headers: dict[str, str] | None = None) -> JSONResponse:
        _log.info("caller_refused", path=path, status=status, code=code)
        if path.startswith(_OPENAI_PREFIX):  # the OpenAI SDK reads its own error shape
            return JSONResponse(error_body(status, code, message), status_code=status, headers=headers)
        return error_response(status, code, message, headers)
