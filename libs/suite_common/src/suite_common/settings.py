"""Settings every service shares; each service subclasses with its own env prefix."""

from __future__ import annotations

from typing import Literal

from pydantic_settings import BaseSettings, SettingsConfigDict

__all__ = ["ServiceSettings"]


class ServiceSettings(BaseSettings):
    """Where a service listens and how it logs.

    Subclasses set ``model_config = SettingsConfigDict(env_prefix="AGENT_")`` and so on,
    so every field is an environment variable such as ``AGENT_PORT``.
    """

    model_config = SettingsConfigDict(extra="ignore")

    host: str = "127.0.0.1"
    port: int = 8000
    log_level: Literal["debug", "info", "warning", "error"] = "info"
    log_format: Literal["json", "console"] = "json"
