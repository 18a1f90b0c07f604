"""Settings every service shares; each service subclasses with its own env prefix.

Validators for the field shapes that recur across services live here too; use them as
``Annotated[SecretStr | None, BeforeValidator(blank_as_none)]`` or
``Annotated[str, AfterValidator(http_url)]``.
"""

from __future__ import annotations

from typing import Annotated, Literal

from pydantic import BeforeValidator, Field
from pydantic_settings import BaseSettings, SettingsConfigDict

__all__ = ["ServiceSettings", "blank_as_none", "http_url"]


def blank_as_none(value: object) -> object:
    """An empty variable (``FOO=``) is how compose files and shells say "none": treat it as unset."""
    if isinstance(value, str) and not value.strip():
        return None
    return value


def http_url(value: str | None) -> str | None:
    """An ``http://`` or ``https://`` URL, without a trailing slash (paths are appended to it)."""
    if value is None:
        return None
    value = value.strip().rstrip("/")
    if not value.startswith(("http://", "https://")):
        raise ValueError(f"must be an http:// or https:// URL, got {value!r}")
    return value


class ServiceSettings(BaseSettings):
    """Where a service listens and how it logs.

    Subclasses set ``model_config = SettingsConfigDict(env_prefix="AGENT_")`` and so on,
    so every field is an environment variable such as ``AGENT_PORT``.
    """

    # A field's docstring is its description: docs/configuration.md is generated from them.
    model_config = SettingsConfigDict(extra="ignore", use_attribute_docstrings=True)

    host: str = "127.0.0.1"
    """Listen address; 0.0.0.0 in a container."""
    port: int = 8000
    """Port of the HTTP API (each service and tool has its own default)."""
    log_level: Literal["debug", "info", "warning", "error"] = "info"
    """Least severity that is logged."""
    log_format: Literal["json", "console"] = "json"
    """``json``: one object per line, for machines; ``console``: for people (``make run`` uses it)."""
    otlp_endpoint: Annotated[str | None, BeforeValidator(blank_as_none)] = None
    """OpenTelemetry collector (OTLP over HTTP, e.g. ``http://otel-collector:4318``); unset: no traces."""
    shutdown_grace_seconds: float = Field(default=30, ge=0)
    """After SIGTERM, how long in-flight work may go on before it is interrupted."""
    request_head_timeout_seconds: float = Field(default=10, gt=0)
    """How long a client may take to send a request's line and headers (from connecting, or from its
    first byte on a kept-alive connection); then 408 and the connection is closed."""
    request_body_timeout_seconds: float = Field(default=60, gt=0)
    """How long a client may take to send a request's body once its head is in; then 408, closed."""
    max_connections: int = Field(default=1024, ge=1)
    """Open client connections at most; a request on one past the limit is answered 503."""
