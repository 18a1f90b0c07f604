"""The provider factory: settings and catalog entries to provider adapters, with their keys and endpoints.

``ProviderRegistry`` builds one adapter per distinct endpoint (kind, URL, key, API), shared by every
name that reaches it; ``routing.build_router`` puts them behind model names. Provider modules are
imported only when a provider is configured, so botocore and friends cost nothing to a service that
does not use them. A new provider kind is built here.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from pathlib import Path

import httpx
from pydantic import SecretStr

from completion_service.catalog import (
    RESPONSES_KIND,
    CatalogError,
    CatalogModel,
    ProviderKind,
    WireApi,
    resolve_secret,
)
from completion_service.providers.base import Provider
from completion_service.settings import DEFAULT_OPENAI_BASE_URL, CompletionSettings

__all__ = ["ProviderRegistry"]


def _is_openai_itself(base_url: str) -> bool:
    host = httpx.URL(base_url).host
    return host == "api.openai.com" or host.endswith(".openai.azure.com")


def _key(value: SecretStr | None, path: Path | None, setting: str) -> str | None:
    """A key from its setting, else from the file its ``_FILE`` setting names."""
    if value is not None:
        return value.get_secret_value()
    if path is None:
        return None
    try:
        key = path.read_text().strip()
    except OSError as error:
        raise CatalogError(f"{setting}_FILE: cannot read {path}: {error.strerror or error}") from None
    return key or None


@dataclass(frozen=True)
class _Endpoint:
    """What distinguishes two adapters of one kind: where they call, with which key, in which of its APIs."""

    kind: ProviderKind
    base_url: str | None
    api_key: str | None
    api: WireApi = "chat"


class ProviderRegistry:
    """The adapters of the providers the settings configure and of the catalog's entries, one per endpoint.

    Raises ``CatalogError`` on a configuration that cannot work (a key file that cannot be read, a catalog
    entry of a provider that is not configured, a Vertex AI project or location that would change the URL).
    """

    def __init__(self, settings: CompletionSettings, http: httpx.AsyncClient) -> None:
        self._settings = settings
        self._http = http
        self._built: dict[_Endpoint, Provider] = {}
        self._defaults = _default_endpoints(settings)

    def defaults(self) -> dict[str, Provider]:
        """The providers the settings configure on their own, by kind (``<kind>/<model>``)."""
        return {kind: self._get(endpoint) for kind, endpoint in self._defaults.items()}

    def for_entry(self, entry: CatalogModel) -> Provider:
        """The adapter a catalog entry calls: its provider's, or one of its own URL or key."""
        return self._get(_catalog_endpoint(entry, self._defaults, self._settings))

    def _get(self, endpoint: _Endpoint) -> Provider:
        if endpoint not in self._built:
            self._built[endpoint] = self._build(endpoint)
        return self._built[endpoint]

    def _build(self, endpoint: _Endpoint) -> Provider:
        settings, http, retries = self._settings, self._http, self._settings.max_retries
        if endpoint.kind == "openai" and endpoint.api == "responses":
            from completion_service.providers.openai_responses import ResponsesProvider

            base_url = endpoint.base_url or DEFAULT_OPENAI_BASE_URL
            return ResponsesProvider(
                http, base_url, endpoint.api_key, max_retries=retries, auth_header=settings.openai_auth_header
            )
        if endpoint.kind == "openai":
            from completion_service.providers.openai import OpenAIProvider

            base_url = endpoint.base_url or DEFAULT_OPENAI_BASE_URL
            return OpenAIProvider(
                http,
                base_url,
                endpoint.api_key,
                max_retries=retries,
                auth_header=settings.openai_auth_header,
                # OpenAI's own API and Azure's refuse max_tokens for reasoning models; compatible servers
                # (vLLM, Ollama, LM Studio) know max_tokens best.
                max_tokens_field="max_completion_tokens" if _is_openai_itself(base_url) else "max_tokens",
            )
        if endpoint.kind == "anthropic":
            from completion_service.providers.anthropic import AnthropicProvider

            return AnthropicProvider(
                http,
                base_url=endpoint.base_url or settings.anthropic_base_url,
                api_key=endpoint.api_key,
                max_retries=retries,
                thinking_budget_tokens=settings.anthropic_thinking_budget_tokens,
            )
        if endpoint.kind == "gemini":
            from completion_service.providers.gemini import GeminiProvider

            return GeminiProvider(
                http,
                base_url=endpoint.base_url or settings.gemini_base_url,
                api_key=endpoint.api_key,
                max_retries=retries,
                include_thoughts=settings.gemini_include_thoughts,
            )
        if endpoint.kind == "vertex":
            return self._vertex(endpoint)
        return self._bedrock(endpoint)

    def _vertex(self, endpoint: _Endpoint) -> Provider:
        from completion_service.providers.gemini import GeminiProvider

        settings = self._settings
        token, token_file = settings.vertex_access_token, settings.vertex_access_token_file
        fixed = endpoint.api_key or (token.get_secret_value() if token is not None else None)

        def token_source() -> str:
            # Re-read at every call: a sidecar or CronJob refreshes short-lived tokens in place.
            if fixed:
                return fixed
            return _key(None, token_file, "COMPLETION_VERTEX_ACCESS_TOKEN") or ""

        try:
            return GeminiProvider.vertex(
                self._http,
                project=settings.vertex_project or "",
                location=settings.vertex_location,
                base_url=endpoint.base_url or settings.vertex_base_url,
                token_source=token_source,
                max_retries=settings.max_retries,
                include_thoughts=settings.gemini_include_thoughts,
            )
        except ValueError as error:  # a project or location that would change the URL
            raise CatalogError(f"Vertex AI: {error}") from None

    def _bedrock(self, endpoint: _Endpoint) -> Provider:
        from completion_service.providers.bedrock import BedrockProvider

        settings = self._settings

        def secret(value: SecretStr | None) -> str | None:
            return value.get_secret_value() if value is not None else None

        return BedrockProvider(
            self._http,
            region=settings.bedrock_region or "",
            endpoint_url=endpoint.base_url or settings.bedrock_endpoint_url,
            access_key_id=secret(settings.aws_access_key_id),
            secret_access_key=secret(settings.aws_secret_access_key),
            session_token=secret(settings.aws_session_token),
            max_retries=settings.max_retries,
        )


def _default_endpoints(settings: CompletionSettings) -> dict[str, _Endpoint]:
    """The providers the settings configure on their own, usable as ``<kind>/<model>`` (a ``ROUTE_KINDS`` kind)."""
    endpoints: dict[str, _Endpoint] = {}
    openai_key = _key(settings.openai_api_key, settings.openai_api_key_file, "COMPLETION_OPENAI_API_KEY")
    if openai_key is not None or settings.openai_base_url != DEFAULT_OPENAI_BASE_URL:
        endpoints["openai"] = _Endpoint("openai", settings.openai_base_url, openai_key)
        # The same endpoint and key in the Responses API (OpenAI's own, Azure's; compatible servers rarely have it).
        endpoints[RESPONSES_KIND] = _Endpoint("openai", settings.openai_base_url, openai_key, "responses")
    anthropic_key = _key(settings.anthropic_api_key, settings.anthropic_api_key_file, "COMPLETION_ANTHROPIC_API_KEY")
    if anthropic_key is not None:
        endpoints["anthropic"] = _Endpoint("anthropic", settings.anthropic_base_url, anthropic_key)
    gemini_key = _key(settings.gemini_api_key, settings.gemini_api_key_file, "COMPLETION_GEMINI_API_KEY")
    if gemini_key is not None:
        endpoints["gemini"] = _Endpoint("gemini", settings.gemini_base_url, gemini_key)
    has_vertex_token = settings.vertex_access_token is not None or settings.vertex_access_token_file is not None
    if settings.vertex_project and has_vertex_token:
        endpoints["vertex"] = _Endpoint("vertex", settings.vertex_base_url, None)
    if settings.bedrock_region:
        endpoints["bedrock"] = _Endpoint("bedrock", settings.bedrock_endpoint_url, None)
    return endpoints


def _catalog_endpoint(entry: CatalogModel, defaults: dict[str, _Endpoint], settings: CompletionSettings) -> _Endpoint:
    what = f"catalog model {entry.name!r}"
    key = resolve_secret(entry.api_key, what=what) if entry.api_key else None
    default = defaults.get(entry.provider)
    if key is None and entry.base_url is None:
        if default is None:
            raise CatalogError(
                f"{what} uses the provider {entry.provider!r}, which is not configured: set its settings "
                "or give the entry an apiKey"
            )
        return replace(default, api=entry.api)
    if entry.provider == "bedrock" and not settings.bedrock_region:
        raise CatalogError(f"{what} uses Bedrock: set COMPLETION_BEDROCK_REGION")
    if entry.provider == "vertex" and not settings.vertex_project:
        raise CatalogError(f"{what} uses Vertex AI: set COMPLETION_VERTEX_PROJECT")
    return _Endpoint(
        entry.provider,
        entry.base_url or (default.base_url if default else None),
        key if key is not None else (default.api_key if default else None),
        entry.api,
    )
