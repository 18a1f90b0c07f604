"""A tenant's runtime: what its admin sets through agent-service's ``/api/v1/admin/runtime``, within the operator's
caps (the callers file's ``[tenants.<name>]`` and the service's settings); docs/tenants.md.

``PATCH`` takes ``TenantRuntimePatch`` (a field left out stays as it is; ``null`` clears it, so the operator's default
applies again); ``GET`` and ``PATCH`` answer ``TenantRuntimeView``: the values in force and the caps they live under.
"""

from __future__ import annotations

from typing import Literal

from pydantic import ConfigDict, Field

from suite_common.wire.base import WireModel

__all__ = ["StreamMode", "TenantRuntimeCaps", "TenantRuntimePatch", "TenantRuntimeView"]

StreamMode = Literal["live", "final_only", "disabled"]
"""How the OpenAI front answers ``stream: true``: the text as it is generated, the final answer in pieces once the run
has ended, or one JSON object."""


class TenantRuntimePatch(WireModel):
    """The fields to change; an unknown field is a mistake (400)."""

    model_config = ConfigDict(**{**WireModel.model_config, "extra": "forbid"})

    max_iterations: int | None = Field(default=None, ge=1)
    """LLM calls per run at most (and the default of a run that names none); at most the tenant's and the service's
    cap."""
    tool_cache_seconds: float | None = Field(default=None, ge=0, allow_inf_nan=False)
    """How long a cached tool result may be reused for this tenant's runs; 0: never (the cache is off for it). At most
    the longest lifetime the operator's cache policy gives any tool."""
    stream_mode: StreamMode | None = None
    """The OpenAI front's stream mode for this tenant (a request's ``X-Agent-Stream-Mode`` still chooses its own)."""
    agent_enabled: bool | None = None
    """False: every request is a plain completion, the suite's tools never offered nor listed."""


class TenantRuntimeCaps(WireModel):
    """The operator's caps a tenant's runtime lives under."""

    max_iterations: int
    """The lower of the service's ``AGENT_MAX_ITERATIONS`` and the tenant's ``max_iterations``."""
    tool_cache_seconds: float
    """The longest lifetime the service's tool cache gives any tool (``AGENT_TOOL_CACHE_SECONDS``,
    ``AGENT_TOOL_CACHE_TTLS``); 0: the cache is off."""


class TenantRuntimeView(WireModel):
    """A tenant's runtime in force: each value the admin's, else the operator's default, never above a cap."""

    tenant: str
    max_iterations: int
    tool_cache_seconds: float
    stream_mode: StreamMode
    agent_enabled: bool
    caps: TenantRuntimeCaps
    set_by_admin: list[str] = Field(default_factory=list)
    """The fields the tenant's admin set (camelCase names); the others are the operator's defaults."""
