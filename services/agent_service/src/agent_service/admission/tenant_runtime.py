"""A tenant's runtime: what its admin set (``PATCH /api/v1/admin/runtime``, kept in the run store) within the
operator's caps, as every run and every request of the OpenAI front applies it.

- ``maxIterations``: at most the lower of the service's ``AGENT_MAX_ITERATIONS`` and the tenant's ``max_iterations``
  (the callers file); default that cap. A run's own ``maxIterations`` is capped by it too.
- ``toolCacheSeconds``: how long a cached tool result may serve this tenant's runs, at most the longest lifetime the
  operator's cache policy gives any tool (``AGENT_TOOL_CACHE_SECONDS``, ``AGENT_TOOL_CACHE_TTLS``); default that cap,
  which leaves the policy as it is; 0 turns the cache off for the tenant. The policy still decides which tools are
  cached at all: the tenant can only shorten a lifetime, never cache a tool the operator does not.
- ``streamMode``: the OpenAI front's, default the service's ``AGENT_OPENAI_STREAM_MODE``; no cap.
- ``agentEnabled``: default true; false makes every request a plain completion that never asks the gateway.

A value above a cap is refused (422 ``above_cap``, naming the cap); a cap the operator lowers after the admin set a
higher value lowers the value in force too. ``TenantRuntimes`` reads each tenant's settings from the store at most
once per ``RUNTIME_CACHE_SECONDS`` per replica, so every replica applies a change within that time.
"""

from __future__ import annotations

import time
from collections import OrderedDict
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from pydantic import ValidationError

from agent_service.core.tenancy import TenantRules
from agent_service.settings import AgentSettings
from agent_service.store import RunStore, StoreError
from suite_common.errors import ApiError
from suite_common.logging import get_logger
from suite_common.wire import StreamMode, TenantRuntimeCaps, TenantRuntimePatch, TenantRuntimeView

__all__ = ["RUNTIME_CACHE_SECONDS", "TenantRuntime", "TenantRuntimes", "runtime_caps", "runtime_in_force"]

_log = get_logger("agent_service.tenant_runtime")

RUNTIME_CACHE_SECONDS = 2.0
"""How long a replica reuses a tenant's stored runtime: the longest a change takes to reach every replica."""
_MAX_CACHED_TENANTS = 10_000
"""Tenants whose runtime a replica remembers at most (store keys let tenants be many): the oldest read dropped first."""


@dataclass(frozen=True, slots=True)
class TenantRuntime:
    """A tenant's runtime in force (``runtime_in_force``)."""

    max_iterations: int
    tool_cache_seconds: float
    stream_mode: StreamMode
    agent_enabled: bool
    caps: TenantRuntimeCaps
    set_by_admin: tuple[str, ...] = ()
    """The wire names of the fields its admin set."""

    def view(self, tenant: str) -> TenantRuntimeView:
        return TenantRuntimeView(
            tenant=tenant,
            max_iterations=self.max_iterations,
            tool_cache_seconds=self.tool_cache_seconds,
            stream_mode=self.stream_mode,
            agent_enabled=self.agent_enabled,
            caps=self.caps,
            set_by_admin=list(self.set_by_admin),
        )


def runtime_caps(settings: AgentSettings, rules: TenantRules) -> TenantRuntimeCaps:
    """The operator's caps of a tenant's runtime: from the service's settings and the tenant's rules."""
    iterations = settings.max_iterations
    if rules.max_iterations is not None:
        iterations = min(iterations, rules.max_iterations)
    cache = max([settings.tool_cache_seconds, *settings.tool_cache_ttls.values()])
    return TenantRuntimeCaps(max_iterations=iterations, tool_cache_seconds=cache)


def _stored_fields(stored: Mapping[str, Any]) -> TenantRuntimePatch:
    """What the store holds, checked again: a row no version of this service wrote is the operator's defaults."""
    try:
        return TenantRuntimePatch.model_validate(stored)
    except ValidationError:
        _log.warning("tenant_runtime_unreadable", fields=sorted(stored))
        return TenantRuntimePatch()


def runtime_in_force(stored: Mapping[str, Any], settings: AgentSettings, rules: TenantRules) -> TenantRuntime:
    """``stored`` (what the admin set, wire names) within the caps, each field it did not set the operator's
    default."""
    caps = runtime_caps(settings, rules)
    fields = _stored_fields(stored)
    iterations = fields.max_iterations if fields.max_iterations is not None else caps.max_iterations
    cache = fields.tool_cache_seconds if fields.tool_cache_seconds is not None else caps.tool_cache_seconds
    return TenantRuntime(
        max_iterations=min(iterations, caps.max_iterations),
        tool_cache_seconds=min(cache, caps.tool_cache_seconds),
        stream_mode=fields.stream_mode or settings.openai_stream_mode,
        agent_enabled=fields.agent_enabled if fields.agent_enabled is not None else True,
        caps=caps,
        set_by_admin=tuple(sorted(fields.model_dump(by_alias=True, exclude_none=True))),
    )


def _shown(value: float) -> str:
    return f"{value:g}"


def checked_changes(patch: TenantRuntimePatch, settings: AgentSettings, rules: TenantRules) -> dict[str, Any]:
    """The changes ``patch`` asks for (wire names; ``None``: back to the operator's default), each within its cap
    (422 ``above_cap`` naming the cap otherwise)."""
    caps = runtime_caps(settings, rules)
    iterations_cap = (
        "the tenant's cap (max_iterations in the callers file)"
        if rules.max_iterations is not None and rules.max_iterations < settings.max_iterations
        else "the service's cap (AGENT_MAX_ITERATIONS)"
    )
    if patch.max_iterations is not None and patch.max_iterations > caps.max_iterations:
        message = f"maxIterations may be at most {caps.max_iterations}, {iterations_cap} (got {patch.max_iterations})."
        raise ApiError(422, "above_cap", message)
    if patch.tool_cache_seconds is not None and patch.tool_cache_seconds > caps.tool_cache_seconds:
        message = (
            f"toolCacheSeconds may be at most {_shown(caps.tool_cache_seconds)}, the longest lifetime the service's "
            f"tool cache gives any tool (AGENT_TOOL_CACHE_SECONDS, AGENT_TOOL_CACHE_TTLS) "
            f"(got {_shown(patch.tool_cache_seconds)})."
        )
        raise ApiError(422, "above_cap", message)
    return patch.model_dump(mode="json", by_alias=True, exclude_unset=True)


def _store_unavailable() -> ApiError:
    message = "The run store, which keeps the tenants' runtime settings, is unavailable; try again shortly."
    return ApiError(503, "store_unavailable", message, headers={"Retry-After": "1"})


class TenantRuntimes:
    """Each tenant's runtime, read from ``store`` (``None``: runs are not stored, every tenant has the operator's
    defaults and none can change them), reused for ``cache_seconds``."""

    def __init__(
        self, store: RunStore | None, settings: AgentSettings, *, cache_seconds: float = RUNTIME_CACHE_SECONDS
    ) -> None:
        self.store = store
        self.settings = settings
        self.cache_seconds = cache_seconds
        self._read: OrderedDict[str, tuple[float, dict[str, Any]]] = OrderedDict()

    async def of(self, tenant: str, rules: TenantRules) -> TenantRuntime:
        """``tenant``'s runtime in force. The store unreachable: the last one read, however old (an admin's
        ``agentEnabled: false`` must not turn into agent runs while the store is away); none read yet: 503."""
        return runtime_in_force(await self._stored(tenant), self.settings, rules)

    async def change(
        self, tenant: str, rules: TenantRules, patch: TenantRuntimePatch, *, updated_by: str | None
    ) -> TenantRuntime:
        """Store ``patch``'s changes (checked against the caps first); answers the runtime now in force."""
        changes = checked_changes(patch, self.settings, rules)
        if self.store is None:
            message = "Runs are not stored (AGENT_DATABASE_URL is empty), so a tenant's runtime cannot be changed."
            raise ApiError(404, "runtime_not_stored", message)
        try:
            stored = await self.store.change_tenant_runtime(tenant, changes, updated_by=updated_by)
        except StoreError as error:
            _log.warning("tenant_runtime_unavailable", tenant=tenant, error=str(error))
            raise _store_unavailable() from None
        self._remember(tenant, stored)
        return runtime_in_force(stored, self.settings, rules)

    async def _stored(self, tenant: str) -> dict[str, Any]:
        if self.store is None:
            return {}
        known = self._read.get(tenant)
        if known is not None and time.monotonic() - known[0] < self.cache_seconds:
            return known[1]
        try:
            stored = await self.store.tenant_runtime(tenant)
        except StoreError as error:
            _log.warning("tenant_runtime_unavailable", tenant=tenant, error=str(error))
            if known is not None:
                return known[1]
            raise _store_unavailable() from None
        self._remember(tenant, stored)
        return stored

    def _remember(self, tenant: str, stored: dict[str, Any]) -> None:
        self._read[tenant] = (time.monotonic(), stored)
        self._read.move_to_end(tenant)
        while len(self._read) > _MAX_CACHED_TENANTS:
            self._read.popitem(last=False)
