"""agent-service settings, read from ``AGENT_*`` environment variables."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Annotated, Literal, Self

from pydantic import AfterValidator, BeforeValidator, Field, SecretStr, field_validator, model_validator
from pydantic_settings import NoDecode, SettingsConfigDict

from agent_service.core.images import DEFAULT_RUN_IMAGES_MAX_BYTES
from agent_service.core.tenancy import TOOL_PATTERN
from suite_common.settings import ServiceSettings, blank_as_none, http_url

__all__ = ["HARD_MAX_ITERATIONS", "MIN_PEPPER_CHARS", "AgentSettings"]

MIN_PEPPER_CHARS = 32
"""The shortest tool-cache pepper taken: 32 characters, such as 16 random bytes in hex, or more."""

HARD_MAX_ITERATIONS = 15
"""No run makes more LLM calls than this, whatever the settings or the request say."""


def _json_object(value: object) -> object:
    """``AGENT_TOOL_CACHE_TTLS`` from the environment: a JSON object (blank: none)."""
    if not isinstance(value, str):
        return value
    if not value.strip():
        return {}
    try:
        return json.loads(value)
    except json.JSONDecodeError as error:
        raise ValueError(f'must be a JSON object such as {{"search_documents": 300}} ({error})') from None


def _tool_ttls(ttls: dict[str, float]) -> dict[str, float]:
    bad = next((pattern for pattern in ttls if not TOOL_PATTERN.fullmatch(pattern)), None)
    if bad is not None:
        raise ValueError(f"{bad!r} is not a tool name, '<server>:<tool>' or '<server>:*'")
    return ttls


ToolTtls = Annotated[
    dict[str, Annotated[float, Field(ge=0, allow_inf_nan=False)]],
    NoDecode,
    BeforeValidator(_json_object),
    AfterValidator(_tool_ttls),
]


class AgentSettings(ServiceSettings):
    model_config = SettingsConfigDict(env_prefix="AGENT_", extra="ignore")

    port: int = 8000
    """Port of the HTTP API."""
    shutdown_grace_seconds: float = 125
    """After SIGTERM, in-flight runs may finish for this long: past a run's 120 s deadline, so that none is cut."""
    completion_url: Annotated[str, AfterValidator(http_url)] = "http://127.0.0.1:8001"
    """Base URL of completion-service."""
    mcp_client_url: Annotated[str, AfterValidator(http_url)] = "http://127.0.0.1:8002"
    """Base URL of mcp-client-service."""
    mcp_service_secret: SecretStr = Field(default=SecretStr(""), validate_default=True)
    """The shared secret mcp-client-service expects; required."""

    @field_validator("mcp_service_secret")
    @classmethod
    def _require_secret(cls, secret: SecretStr) -> SecretStr:
        if not secret.get_secret_value().strip():
            raise ValueError("must be set to the shared secret of mcp-client-service (its MCP_CLIENT_SERVICE_SECRET)")
        return secret

    mcp_secret_header: str = "X-MCP-Service-Secret"
    """Header that carries the shared secret."""
    default_model: str = ""
    """The model of a run whose request names none (nor its persona); empty: such a request is a 400."""
    max_iterations: int = Field(default=HARD_MAX_ITERATIONS, ge=1, le=HARD_MAX_ITERATIONS)
    """LLM calls per run at most; a request may ask for fewer, never more."""
    run_deadline_seconds: float = Field(default=120.0, gt=0)
    """Wall-clock limit of a run; a request may ask for less, never more."""
    tool_result_max_chars: int = Field(default=20_000, ge=100)
    """A tool result longer than this is cut, with a visible marker, before the model sees it."""
    catalog_cache_seconds: float = Field(default=2.0, ge=0)
    """How long each tenant's tool catalog and the known model names are reused between runs (0: every run asks): a
    tenant's server switched on or off on any replica reaches this one's runs within it."""
    connect_timeout_seconds: float = Field(default=5.0, gt=0)
    """Timeout to open a connection to completion-service or mcp-client-service."""
    database_url: str = "sqlite:///.data/agent.db"
    """Where runs, their messages and events, and conversations are stored: ``sqlite:///path`` (one replica; the
    folder is created) or ``postgresql://user:password@host:port/database`` (any number of replicas). Empty: runs
    are not stored (nothing to read back, resume or re-attach to)."""

    @field_validator("database_url")
    @classmethod
    def _known_database(cls, url: str) -> str:
        url = url.strip()
        if url and not url.startswith(("sqlite:///", "postgresql://", "postgres://")):
            raise ValueError("must be empty, sqlite:///path or postgresql://user:password@host:port/database")
        return url

    database_pool_size: int = Field(default=0, ge=0, le=1000)
    """PostgreSQL connections a replica keeps for its runs' writes (each step, each new run), opened as needed and then
    kept. 0: as many as one tenant may have runs in progress at once (the largest of
    ``AGENT_MAX_CONCURRENT_RUNS_PER_TENANT`` and the callers file's ``max_concurrent_runs``), so that a tenant at its
    cap never waits for a connection nor opens one per burst; at least 16 when a tenant's runs are not capped (a cap
    of 0, or none of its own with the default 0: the uncapped tenants share the pool), at most 64 (set it to go
    beyond: a cap of 500 would otherwise keep 500 connections per replica). Writes beyond it wait for a
    free connection (a write takes about a millisecond). The store's other work (reads, leases) has a pool of its own
    of up to 20. Mind PostgreSQL's ``max_connections`` over all replicas."""
    database_migrate: bool = True
    """Bring the database schema to the newest revision at start (replicas take turns). Off: run
    ``python -m agent_service.store.migrate`` before starting."""
    conversation_max_bytes: int = Field(default=2 * 1024 * 1024, ge=1024)
    """What one conversation's messages may hold, in bytes of their stored JSON. Every run sends the model its whole
    conversation, which a replica holds in memory meanwhile: a run whose input would take its conversation past this
    is refused before anything of it is stored (413 ``conversation_too_large``). Keep it well under completion-service's
    request body limit (8 MiB), which the conversation, the tools and the system prompt share."""
    conversation_max_runs: int = Field(default=1000, ge=1)
    """Runs one conversation may have (every run started in it counts); one more is refused before anything of it is
    stored (409 ``conversation_full``)."""
    run_images_max_bytes: int = Field(default=DEFAULT_RUN_IMAGES_MAX_BYTES, ge=0)
    """What the images of one run may hold together, in bytes (decoded): its request's (over: 413
    ``images_too_large``) and its tool results' (an image past it reaches the model as a note that it was left out).
    A stored run keeps each image once by content, its messages refer to it (``/api/v1/agent/images/<sha256>``)."""
    lease_seconds: float = Field(default=15.0, ge=1)
    """A replica holds each run it executes for this long, renewed every third of it; when a replica dies, another
    takes its runs over once their lease has expired."""
    abandon_after_seconds: float = Field(default=300.0, gt=0)
    """An active run whose lease has expired for this long is marked failed (``abandoned``), no longer resumed."""
    max_resumes: int = Field(default=3, ge=0)
    """How many times a run is taken over after a crash before it is failed: a run that kills its replica
    every time must not take down the next one too."""
    redis_url: str = ""
    """Redis that the replicas share for the per-tenant run slots and the monthly spend of tenants and users
    (``redis://host:6379/0``, ``rediss://`` for TLS). Empty: each replica counts its own runs and spend in memory
    (right for one replica, ``make run``)."""

    @field_validator("redis_url")
    @classmethod
    def _known_redis(cls, url: str) -> str:
        url = url.strip()
        if url and not url.startswith(("redis://", "rediss://", "unix://")):
            raise ValueError("must be empty, redis://host:port/db, rediss://host:port/db or unix:///path")
        return url

    redis_key_prefix: str = "agent:"
    """Prefix of the Redis keys of the run slots (``<prefix>run-slots:<tenant>``) and the monthly spend
    (``<prefix>spend:<YYYY-MM>:<tenant>[:user:<user>]``): deployments sharing one Redis keep apart by it."""
    max_concurrent_runs_per_tenant: int = Field(default=16, ge=0)
    """Runs of one tenant in progress at once, over all replicas; one more is refused with 429 ``too_many_runs``
    and ``Retry-After``. A run's slot lasts ``AGENT_LEASE_SECONDS`` and is renewed with its lease, so the slots
    of a replica that died come back by themselves. A tenant's ``max_concurrent_runs`` in the callers file
    overrides it for that tenant. 0: no cap, nothing counted (Redis unused) unless some tenant has a cap."""
    max_users_per_tenant_month: int = Field(default=10_000, ge=0)
    """Distinct end users (``X-User-Id``) one tenant with per-user monthly budgets may have in a calendar month, over
    all replicas; a new one past it is refused with 429 ``too_many_users`` until the month ends. Each such user has a
    spend counter (in Redis when it is shared): this bounds how many a caller can make by inventing user ids.
    0: no bound."""
    events_poll_seconds: float = Field(default=0.5, gt=0)
    """How often a client following a run that another replica executes is sent the newly stored events."""
    callers_file: Path | None = None
    """The callers file (TOML): the caller keys (as sha256, or the name of the variable that holds each), their
    tenants, which may name the end user (``X-User-Id``, ``X-User-Role``) and the keys' roles (``admin``,
    ``operator``); see docs/callers.md. Unset: the API is open, every
    request is the caller ``anonymous`` of the tenant ``default`` (a laptop), unless ``AGENT_CALLER_KEYS_IN_STORE``
    is on. With store keys on, a file of ``[tenants.*]`` only (no ``[[keys]]``) is fine: it gives store keys' tenants
    their rules."""
    console_suggestions_file: Path | None = None
    """The console's suggestion cards (TOML: ``[[suggestions]]`` tables of ``title`` and ``prompt``, at most 12),
    offered by an empty conversation (docs/agent-api.md, "Tools and the console"). Unset: a set of questions the
    demo corpus answers. A file without ``[[suggestions]]``: no cards. A file that cannot be read or parsed refuses
    the start."""
    caller_keys_in_store: bool = False
    """Caller keys are also kept in the run store (``python -m agent_service.keys add|list|revoke``), beside the
    callers file's; on, every request to the API needs a key even without a callers file. Needs
    ``AGENT_DATABASE_URL``. A store key's tenant has the rules of its ``[tenants.<name>]`` in the callers file, if
    any, else none."""
    caller_keys_cache_seconds: float = Field(default=5.0, ge=0)
    """How long the answer of the store for one key (found, or not) is reused: a revoked key is refused at most this
    long after ``revoke``, on every replica (0: the store is asked on every request)."""

    @model_validator(mode="after")
    def _keys_need_a_store(self) -> AgentSettings:
        if self.caller_keys_in_store and not self.database_url:
            raise ValueError("AGENT_CALLER_KEYS_IN_STORE needs the run store: set AGENT_DATABASE_URL")
        return self

    openai_stream_mode: Literal["live", "final_only", "disabled"] = "live"
    """How ``POST /v1/chat/completions`` answers ``stream: true`` (header ``X-Agent-Stream-Mode`` per request): the
    answer's text as it is generated, the final answer in pieces once the run has ended, or one JSON object."""
    tool_cache_seconds: float = Field(default=0.0, ge=0, allow_inf_nan=False)
    """How long the result of a tool annotated ``readOnlyHint: true`` is reused for an identical call (same tenant,
    server, tool and arguments) instead of calling the tool again; see docs/tool-cache.md. 0: no such tool is cached.
    Off by default: a read-only tool's answer may still change (a search, a status, the time), and serving an
    earlier one is a choice an operator makes per deployment, with a TTL their tools allow."""
    tool_cache_ttls: ToolTtls = Field(default_factory=dict)
    """The TTL of the cache per server or tool, a JSON object of pattern → seconds, where a pattern is a tool's
    name, ``<server>:<tool>`` or ``<server>:*``: ``{"web:*": 60, "search_documents": 300, "web:fetch_url": 0}``.
    A listed tool is cached even without ``readOnlyHint``; 0 never caches it. The most specific pattern wins
    (``<server>:<tool>``, then the name, then ``<server>:*``); a tool no pattern names gets
    ``AGENT_TOOL_CACHE_SECONDS`` if it is read-only."""
    tool_cache_max_entries: int = Field(default=10_000, ge=1)
    """Results the cache keeps in this process's memory at most (without ``AGENT_REDIS_URL``), the least recently
    used dropped first. With Redis, Redis's own ``maxmemory`` policy bounds it."""
    tool_cache_pepper: Annotated[SecretStr | None, BeforeValidator(blank_as_none)] = None
    """The key every cached result is signed with (HMAC-SHA256 over the cache key and the result): a value written
    to Redis by anyone without it, or moved to another key, is never served. Changing it invalidates the whole
    cache. Required when the cache is on and ``AGENT_REDIS_URL`` is set (every replica must have the same one,
    e.g. ``openssl rand -hex 32``); at least 32 characters. In memory, unset means a random key per process."""

    @property
    def tool_cache_on(self) -> bool:
        """Whether any tool can be cached at all."""
        return self.tool_cache_seconds > 0 or any(seconds > 0 for seconds in self.tool_cache_ttls.values())

    @model_validator(mode="after")
    def _pepper_shared_by_replicas(self) -> Self:
        pepper = self.tool_cache_pepper.get_secret_value().strip() if self.tool_cache_pepper is not None else ""
        if self.redis_url and self.tool_cache_on and not pepper:
            raise ValueError(
                "AGENT_TOOL_CACHE_PEPPER must be set when the tool-result cache (AGENT_TOOL_CACHE_SECONDS or "
                "AGENT_TOOL_CACHE_TTLS) is on with AGENT_REDIS_URL: every replica signs and checks the results "
                "they share with it"
            )
        if pepper and len(pepper) < MIN_PEPPER_CHARS:
            raise ValueError(
                f"AGENT_TOOL_CACHE_PEPPER must be at least {MIN_PEPPER_CHARS} characters (got {len(pepper)}): it is "
                "the only thing between a Redis writer and a forged result; make one with openssl rand -hex 32"
            )
        return self
