"""Settings of the web search tool, read once at start-up from ``WEB_SEARCH_*`` variables."""

from __future__ import annotations

from typing import Annotated

from pydantic import AfterValidator, BeforeValidator, Field
from pydantic_settings import SettingsConfigDict

from suite_common.settings import ServiceSettings, blank_as_none, http_url

__all__ = ["WebSearchSettings"]


class WebSearchSettings(ServiceSettings):
    """Where the tool listens (over streamable HTTP) and which search backends it may use.

    Every field is an environment variable: ``WEB_SEARCH_SEARXNG_URL``, ``WEB_SEARCH_PORT`` ...
    """

    model_config = SettingsConfigDict(env_prefix="WEB_SEARCH_", extra="ignore")

    port: int = Field(default=8102, description="Port of the streamable HTTP transport (MCP at /mcp).")

    searxng_url: Annotated[str | None, BeforeValidator(blank_as_none), AfterValidator(http_url)] = Field(
        default=None,
        description=(
            "Base URL of a SearXNG instance, e.g. http://127.0.0.1:8888 (the tool calls <url>/search). "
            "The instance must allow the JSON format: `search.formats` in its settings.yml lists `json`. "
            "Unset or empty: no SearXNG backend."
        ),
    )
    timeout_seconds: float = Field(
        default=10,
        gt=0,
        description="Deadline of one search against one backend, connection included, in seconds.",
    )
    max_results_cap: int = Field(
        default=20,
        ge=1,
        description="The largest `max_results` a caller may ask of web_search; larger requests are refused.",
    )
