"""Settings every service shares; each service subclasses with its own env prefix.

Validators for the field shapes that recur across services live here too; use them as
``Annotated[SecretStr | None, BeforeValidator(blank_as_none)]`` or
``Annotated[str, AfterValidator(http_url)]``. Lists (``StringList``, ``CidrList``) are read the same way in
every service: a JSON array or a comma-separated string. A renamed setting keeps its old
environment name as a deprecated alias (``renamed``); ``deprecated_names_in_use`` lists those
still set, which start-up logs.

Environment names follow one convention: a duration ends in ``_SECONDS`` (a time limit in
``_TIMEOUT_SECONDS``, how long something is cached in ``_CACHE_SECONDS``), a file to read in ``_FILE``
(docs/configuration.md names the few that are neither and keep their names).
"""

from __future__ import annotations

import ipaddress
import json
import os
from collections.abc import Mapping
from typing import Annotated, Literal

from pydantic import AfterValidator, AliasChoices, BeforeValidator, Field
from pydantic_settings import BaseSettings, NoDecode, SettingsConfigDict

__all__ = [
    "CidrList",
    "ServiceSettings",
    "StringList",
    "blank_as_none",
    "cidrs",
    "deprecated_names_in_use",
    "http_url",
    "renamed",
    "split_list",
]


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


def split_list(value: object) -> object:
    """A list from a JSON array (``'["a","b"]'``) or from a comma-separated string (``a, b``); blanks dropped."""
    if not isinstance(value, str):
        return value
    text = value.strip()
    if text.startswith("["):
        return json.loads(text)
    return [item.strip() for item in text.split(",") if item.strip()]


def cidrs(values: list[str]) -> list[str]:
    """Each entry a network in CIDR notation (a single address counts as its /32 or /128)."""
    for value in values:
        try:
            ipaddress.ip_network(value, strict=False)
        except ValueError as error:
            raise ValueError(f"{value!r} is not a network in CIDR notation (10.20.0.0/16): {error}") from None
    return values


StringList = Annotated[list[str], NoDecode, BeforeValidator(split_list)]
"""A list of strings, from the environment as a JSON array or comma-separated."""

CidrList = Annotated[StringList, AfterValidator(cidrs)]
"""A list of networks in CIDR notation (``10.1.0.0/16, fd00:1::/64``), checked at start-up."""


def renamed(new: str, *old: str) -> AliasChoices:
    """The ``validation_alias`` of a renamed setting: its environment name ``new`` first, then the ``old``
    names it had, still read (deprecated; start-up logs each one that is set). Set ``populate_by_name`` on
    the settings class so that code can still pass the field by its name."""
    return AliasChoices(new, *old)


def deprecated_names_in_use(
    settings_type: type[BaseSettings], environ: Mapping[str, str] | None = None
) -> list[tuple[str, str]]:
    """``(old, new)`` for each deprecated environment name (see ``renamed``) set in ``environ``."""
    present = {name.upper() for name in (os.environ if environ is None else environ)}
    found: list[tuple[str, str]] = []
    for field in settings_type.model_fields.values():
        alias = field.validation_alias
        if isinstance(alias, AliasChoices) and len(alias.choices) > 1:
            new, *olds = (str(choice) for choice in alias.choices)
            found.extend((old, new) for old in olds if old.upper() in present)
    return found


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
