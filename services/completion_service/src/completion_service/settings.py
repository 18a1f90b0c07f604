"""completion-service settings, read once at start-up from ``COMPLETION_*`` environment variables."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

from pydantic import AfterValidator, BeforeValidator, Field, SecretStr
from pydantic_settings import SettingsConfigDict

from suite_common.egress_settings import EgressSettings
from suite_common.settings import blank_as_none, http_url

__all__ = [
    "DEFAULT_ANTHROPIC_BASE_URL",
    "DEFAULT_GEMINI_BASE_URL",
    "DEFAULT_OPENAI_BASE_URL",
    "CompletionSettings",
]

DEFAULT_OPENAI_BASE_URL = "https://api.openai.com/v1"
DEFAULT_ANTHROPIC_BASE_URL = "https://api.anthropic.com"
DEFAULT_GEMINI_BASE_URL = "https://generativelanguage.googleapis.com"

_Key = Annotated[SecretStr | None, BeforeValidator(blank_as_none)]
_OptionalPath = Annotated[Path | None, BeforeValidator(blank_as_none)]
_OptionalText = Annotated[str | None, BeforeValidator(blank_as_none)]


class CompletionSettings(EgressSettings):
    """Where completion-service listens and which providers it may call.

    Every field is an environment variable: ``COMPLETION_PORT``, ``COMPLETION_OPENAI_API_KEY`` ... The outbound
    policy (``COMPLETION_SSRF_*``, ``COMPLETION_HOSTS_FILE``: the shared ``EgressSettings``) applies to the
    ``https`` image URLs of messages: each is checked before any call, and fetched through it where a provider
    needs the bytes. Provider endpoints are the operator's own and are not subject to it.
    """

    model_config = SettingsConfigDict(env_prefix="COMPLETION_", extra="ignore")

    port: int = Field(default=8001, description="Port of the HTTP API.")

    openai_api_key: _Key = Field(
        default=None,
        description=(
            "API key of the OpenAI-compatible endpoint, sent as `Authorization: Bearer <key>`. "
            "Setting it makes bare model names (`gpt-4o`) route to that endpoint. "
            "Unset or empty: no key is sent (fine for a local vLLM or Ollama)."
        ),
    )
    openai_base_url: Annotated[str, AfterValidator(http_url)] = Field(
        default=DEFAULT_OPENAI_BASE_URL,
        description=(
            "Base URL of the Chat Completions API (the service calls <url>/chat/completions): OpenAI, "
            "or any OpenAI-compatible server such as vLLM (http://host:8000/v1), Ollama "
            "(http://127.0.0.1:11434/v1) or LM Studio (http://127.0.0.1:1234/v1). Changing it from the "
            "default enables the endpoint even without an API key. openai-responses/<model> names call "
            "<url>/responses (OpenAI's Responses API) with the same key."
        ),
    )
    openai_auth_header: str = Field(
        default="Authorization",
        min_length=1,
        description=(
            "The header that carries the OpenAI-compatible key: `Authorization` (as `Bearer <key>`), or `api-key` "
            "for Azure OpenAI, which takes the key bare."
        ),
    )
    openai_api_key_file: _OptionalPath = Field(
        default=None,
        description="A file holding the OpenAI-compatible key (a mounted secret); used when the key itself is unset.",
    )

    anthropic_api_key: _Key = Field(
        default=None,
        description="Anthropic API key (sent as `x-api-key`). Setting it makes `anthropic/<model>` available.",
    )
    anthropic_api_key_file: _OptionalPath = Field(
        default=None, description="A file holding the Anthropic key; used when the key itself is unset."
    )
    anthropic_base_url: Annotated[str, AfterValidator(http_url)] = Field(
        default=DEFAULT_ANTHROPIC_BASE_URL,
        description="Base URL of the Anthropic Messages API (the service calls <url>/v1/messages).",
    )
    anthropic_thinking_budget_tokens: Annotated[int | None, BeforeValidator(blank_as_none)] = Field(
        default=None,
        ge=1024,
        description=(
            "Turn on Anthropic extended thinking with this many tokens of budget (at least 1024) for requests "
            "that give no `reasoning.effort` (an effort has its own budget, docs/providers.md). Thinking "
            "streams as `reasoning` events; the blocks are sent back, signatures included, during tool use."
        ),
    )

    gemini_api_key: _Key = Field(
        default=None,
        description="Gemini API key (sent as `x-goog-api-key`). Setting it makes `gemini/<model>` available.",
    )
    gemini_api_key_file: _OptionalPath = Field(
        default=None, description="A file holding the Gemini key; used when the key itself is unset."
    )
    gemini_base_url: Annotated[str, AfterValidator(http_url)] = Field(
        default=DEFAULT_GEMINI_BASE_URL,
        description="Base URL of the Gemini API (the service calls <url>/v1beta/models/<model>:generateContent).",
    )
    gemini_include_thoughts: bool = Field(
        default=False,
        description=(
            "Ask Gemini (and Vertex AI) thinking models for thought summaries, streamed as `reasoning` events, "
            "when a request's `reasoning.summary` does not say. Off by default: models without thinking reject "
            "the setting."
        ),
    )
    vertex_project: _OptionalText = Field(
        default=None,
        description=(
            "Google Cloud project of Vertex AI. Set with `COMPLETION_VERTEX_LOCATION` and an access token to "
            "make `vertex/<model>` (Gemini on Vertex AI) available."
        ),
    )
    vertex_location: str = Field(default="us-central1", description="Vertex AI region, e.g. `us-central1`.")
    vertex_access_token: _Key = Field(
        default=None,
        description="OAuth2 bearer token for Vertex AI (`gcloud auth print-access-token`, refreshed by the operator).",
    )
    vertex_access_token_file: _OptionalPath = Field(
        default=None,
        description="A file holding the Vertex AI token, re-read at every call (a token refresher can rewrite it).",
    )
    vertex_base_url: _OptionalText = Field(
        default=None,
        description="Base URL of Vertex AI; default `https://<location>-aiplatform.googleapis.com`.",
    )

    bedrock_region: _OptionalText = Field(
        default=None,
        description=(
            "AWS region of Amazon Bedrock (e.g. `us-east-1`). Setting it makes `bedrock/<model id>` available; "
            "credentials come from the settings below or, unset, from botocore's usual chain "
            "(environment, profile, container or instance role)."
        ),
    )
    aws_access_key_id: _Key = Field(default=None, description="AWS access key id for Bedrock (optional).")
    aws_secret_access_key: _Key = Field(default=None, description="AWS secret access key for Bedrock (optional).")
    aws_session_token: _Key = Field(default=None, description="AWS session token for Bedrock (optional).")
    bedrock_endpoint_url: _OptionalText = Field(
        default=None,
        description="Bedrock runtime endpoint; default `https://bedrock-runtime.<region>.amazonaws.com`.",
    )

    models: _OptionalText = Field(
        default=None,
        description=(
            'The model catalog as JSON: a list (or {"models": [...]}) of entries {name, provider (openai, '
            "anthropic, gemini, vertex, bedrock), model, apiKey? (${env:NAME}, ${file:/path} or the key), baseUrl?, "
            "fallbacks?, description?, prices? {inputPerMillionUsd, outputPerMillionUsd}, api? (chat or responses, "
            "openai only), reasoning?, verbosity?, contextTokens? (its context window), images?}. Callers use the "
            "names; `<provider>/<model>` works without an entry."
        ),
    )
    models_file: _OptionalPath = Field(
        default=None,
        description="The model catalog in a JSON or TOML file (`[[models]]` tables), read after `COMPLETION_MODELS`.",
    )

    request_timeout_seconds: float = Field(
        default=120,
        gt=0,
        description=(
            "The longest one completion may take upstream, streamed or not, retries included. A caller's "
            "X-Deadline-Ms header can only shorten it."
        ),
    )
    connect_timeout_seconds: float = Field(
        default=5, gt=0, description="Timeout to open a connection to the provider, in seconds."
    )
    max_retries: int = Field(
        default=2,
        ge=0,
        le=10,
        description=(
            "Retries of one completion after a connection failure, HTTP 429 or a 5xx, with exponential "
            "backoff and jitter. A Retry-After (or retry-after-ms) is honoured: a wait of up to 4 s is "
            "waited for, a longer one or one past the deadline is not retried and the caller gets the "
            "error with its Retry-After at once. Never after the first byte of a stream reached the "
            "caller; never for other errors."
        ),
    )
    image_fetch_max_bytes: int = Field(
        default=10 * 1024 * 1024,
        gt=0,
        description=(
            "The largest image, in bytes, a message may carry (a data: URL) or completion-service fetches from an "
            "https URL for a provider that takes only bytes (Gemini, Bedrock); larger: 413 `image_too_large`."
        ),
    )
    image_max_count: int = Field(
        default=20,
        ge=1,
        description=(
            "The most images one request may carry (its messages' image parts together); more: 400 "
            "`too_many_images`. The https images of one request together may bring at most 4 times "
            "COMPLETION_IMAGE_FETCH_MAX_BYTES (else 413 `image_too_large`)."
        ),
    )
    image_fetch_timeout_seconds: float = Field(
        default=10,
        gt=0,
        description="The longest the fetch of one https image may take, redirects included (then 400).",
    )
    image_fetch_max_redirects: int = Field(
        default=3, ge=0, le=10, description="Redirects followed when fetching an image, each hop checked again."
    )
    demo_enabled: bool = Field(
        default=True,
        description=(
            "Serve the model `demo`: a deterministic stand-in that is not an LLM, so the suite runs "
            "without any account. Turn it off in production."
        ),
    )

    @property
    def openai_configured(self) -> bool:
        """A key is set, or the base URL points somewhere else (a local server may need no key)."""
        return self.openai_api_key is not None or self.openai_base_url != DEFAULT_OPENAI_BASE_URL
