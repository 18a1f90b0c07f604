"""Settings of the web search tool, read once at start-up from ``WEB_SEARCH_*`` variables."""

from __future__ import annotations

from collections.abc import Iterable
from typing import Annotated, Literal

from pydantic import AfterValidator, BeforeValidator, Field, SecretStr
from pydantic_settings import NoDecode, SettingsConfigDict

from suite_common.egress_settings import EgressSettings
from suite_common.settings import CidrList, StringList, blank_as_none, http_url, renamed, split_list
from suite_common.ssrf import EgressPolicy

__all__ = ["BACKEND_NAMES", "BackendName", "WebSearchSettings"]

BackendName = Literal["searxng", "brave", "tavily", "ddgs"]
BACKEND_NAMES: tuple[BackendName, ...] = ("searxng", "brave", "tavily", "ddgs")


def _formerly(name: str, old: str) -> str:
    """The shared description of an outbound-policy setting, naming the deprecated name it had here."""
    shared = EgressSettings.model_fields[name].description or ""
    return f"{shared} Formerly `{old}` (still read, deprecated)."


def _unique(values: list[BackendName]) -> list[BackendName]:
    return list(dict.fromkeys(values))


class WebSearchSettings(EgressSettings):
    """Where the tool listens (over streamable HTTP), which search backends it uses, and what fetch_url may reach.

    Every field is an environment variable: ``WEB_SEARCH_SEARXNG_URL``, ``WEB_SEARCH_PORT`` ...
    """

    model_config = SettingsConfigDict(env_prefix="WEB_SEARCH_", extra="ignore", populate_by_name=True)

    port: int = Field(default=8102, description="Port of the streamable HTTP transport (MCP at /mcp).")

    backends: Annotated[list[BackendName], NoDecode, BeforeValidator(split_list), AfterValidator(_unique)] = Field(
        default=list(BACKEND_NAMES),
        min_length=1,
        description=(
            'The order in which web_search tries its backends, as JSON (`["brave","ddgs"]`) or '
            "comma-separated. A backend without its URL or key is skipped; `ddgs` needs none."
        ),
    )
    searxng_url: Annotated[str | None, BeforeValidator(blank_as_none), AfterValidator(http_url)] = Field(
        default=None,
        description=(
            "Base URL of a SearXNG instance, e.g. http://127.0.0.1:8888 (the tool calls <url>/search). "
            "The instance must allow the JSON format: `search.formats` in its settings.yml lists `json`. "
            "Unset or empty: no SearXNG backend."
        ),
    )
    brave_api_key: Annotated[SecretStr | None, BeforeValidator(blank_as_none)] = Field(
        default=None, description="Brave Search API subscription token. Unset: no Brave backend."
    )
    brave_url: Annotated[str, AfterValidator(http_url)] = Field(
        default="https://api.search.brave.com/res/v1/web/search",
        description="Brave's web search endpoint (change it only for a proxy or a test server).",
    )
    tavily_api_key: Annotated[SecretStr | None, BeforeValidator(blank_as_none)] = Field(
        default=None, description="Tavily API key (`tvly-...`). Unset: no Tavily backend."
    )
    tavily_url: Annotated[str, AfterValidator(http_url)] = Field(
        default="https://api.tavily.com/search",
        description="Tavily's search endpoint (change it only for a proxy or a test server).",
    )
    ddgs_engines: str = Field(
        default="duckduckgo",
        min_length=1,
        description=(
            "Engines the keyless `ddgs` backend queries (the ddgs package's `backend`): `duckduckgo`, "
            "a comma-separated list such as `duckduckgo,brave,mojeek`, or `auto`."
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
    cache_seconds: float = Field(
        default=300,
        ge=0,
        validation_alias=renamed("WEB_SEARCH_CACHE_SECONDS", "WEB_SEARCH_CACHE_TTL_SECONDS"),
        description=(
            "How long a search's results are reused for the same query, in seconds; 0 turns the cache off. "
            "Formerly `WEB_SEARCH_CACHE_TTL_SECONDS` (still read, deprecated)."
        ),
    )
    cache_max_entries: int = Field(default=256, ge=1, description="Searches kept in the cache at most.")

    fetch_timeout_seconds: float = Field(
        default=15, gt=0, description="Deadline of one fetch_url call (DNS, redirects and download), in seconds."
    )
    fetch_max_bytes: int = Field(
        default=2_000_000,
        ge=1024,
        description="fetch_url reads at most this many bytes of a page; the rest is left unread.",
    )
    fetch_max_redirects: int = Field(default=5, ge=0, description="Redirects fetch_url follows at most.")
    fetch_max_chars_cap: int = Field(
        default=100_000, ge=1000, description="The largest `max_chars` a caller may ask of fetch_url."
    )
    # The egress guard's settings are the shared ones (``EgressSettings``); these four keep the
    # ``WEB_SEARCH_FETCH_ALLOW*`` names they had, still read, deprecated.
    ssrf_allow_loopback: bool = Field(
        default=False,
        validation_alias=renamed("WEB_SEARCH_SSRF_ALLOW_LOOPBACK", "WEB_SEARCH_FETCH_ALLOW_LOOPBACK"),
        description=_formerly("ssrf_allow_loopback", "WEB_SEARCH_FETCH_ALLOW_LOOPBACK"),
    )
    ssrf_allow_private: bool = Field(
        default=False,
        validation_alias=renamed("WEB_SEARCH_SSRF_ALLOW_PRIVATE", "WEB_SEARCH_FETCH_ALLOW_PRIVATE"),
        description=_formerly("ssrf_allow_private", "WEB_SEARCH_FETCH_ALLOW_PRIVATE"),
    )
    ssrf_allowed_networks: CidrList = Field(
        default_factory=list,
        validation_alias=renamed("WEB_SEARCH_SSRF_ALLOWED_NETWORKS", "WEB_SEARCH_FETCH_ALLOWED_NETWORKS"),
        description=_formerly("ssrf_allowed_networks", "WEB_SEARCH_FETCH_ALLOWED_NETWORKS"),
    )
    ssrf_allowed_hosts: StringList = Field(
        default_factory=list,
        validation_alias=renamed("WEB_SEARCH_SSRF_ALLOWED_HOSTS", "WEB_SEARCH_FETCH_ALLOWED_HOSTS"),
        description=(
            "Host names fetch_url may reach whatever they resolve to (JSON list or comma-separated). "
            "Formerly `WEB_SEARCH_FETCH_ALLOWED_HOSTS` (still read, deprecated)."
        ),
    )

    def egress_policy(self, *, trusted_hosts: Iterable[str] = ()) -> EgressPolicy:
        """What fetch_url may connect to: the public internet, plus what these settings open."""
        return super().egress_policy(trusted_hosts=[*self.ssrf_allowed_hosts, *trusted_hosts])
