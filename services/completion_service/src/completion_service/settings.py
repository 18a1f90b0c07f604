"""completion-service settings, read once at start-up from ``COMPLETION_*`` environment variables."""

from __future__ import annotations

from typing import Annotated

from pydantic import AfterValidator, BeforeValidator, Field, SecretStr
from pydantic_settings import SettingsConfigDict

from suite_common.settings import ServiceSettings, blank_as_none, http_url

__all__ = ["DEFAULT_OPENAI_BASE_URL", "CompletionSettings"]

DEFAULT_OPENAI_BASE_URL = "https://api.openai.com/v1"


class CompletionSettings(ServiceSettings):
    """Where completion-service listens and which providers it may call.

    Every field is an environment variable: ``COMPLETION_PORT``, ``COMPLETION_OPENAI_API_KEY`` ...
    """

    model_config = SettingsConfigDict(env_prefix="COMPLETION_", extra="ignore")

    port: int = Field(default=8001, description="Port of the HTTP API.")

    openai_api_key: Annotated[SecretStr | None, BeforeValidator(blank_as_none)] = Field(
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
            "default enables the endpoint even without an API key."
        ),
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
