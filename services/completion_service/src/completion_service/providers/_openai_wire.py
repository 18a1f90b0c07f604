"""What OpenAI's two wire formats share: Chat Completions (``openai``) and the Responses API
(``openai_responses``) name tools, take reasoning and keys, and report errors the same way (their tool
call arguments, JSON text in both, are read and written by ``suite_common.openai_chat``), and are called
the same way (``OpenAIEndpoint``: a JSON body posted to one URL)."""

from __future__ import annotations

import functools
import json
import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import httpx

from completion_service.controls import controls_by_name
from completion_service.providers._adapter import Outbound
from completion_service.providers._errors import MAX_MESSAGE_CHARS, provider_error
from completion_service.providers._transport import Upstream
from completion_service.providers.tool_names import NameRule
from suite_common.errors import ApiError
from suite_common.wire import CompletionRequest, JsonSchemaFormat, ReasoningEffort

__all__ = [
    "TOOL_NAMES",
    "OpenAIEndpoint",
    "auth_headers",
    "error_detail",
    "json_schema_format",
    "reasoning_effort",
    "reasons",
    "temperature_warnings",
    "translate_error",
]

TOOL_NAMES = NameRule("a-zA-Z0-9_-", 64)
"""OpenAI's function ``name``: ``^[a-zA-Z0-9_-]{1,64}$`` (compatible servers accept at least these)."""


_TAKES_MINIMAL = re.compile(r"(^|[/.])gpt-5(-|$)")
"""The models whose effort has ``minimal``: GPT-5 itself (``gpt-5``, ``gpt-5-mini``, ``gpt-5-2025-08-07``), not
gpt-5.1 and later (none, low, medium, high) nor o1, o3, o4 and gpt-oss (low, medium, high)."""


def reasoning_effort(effort: ReasoningEffort, upstream_model: str) -> str:
    """``effort`` as ``upstream_model`` takes it: ``minimal`` becomes ``low`` where the model has no ``minimal``."""
    if effort == "minimal" and not _TAKES_MINIMAL.search(upstream_model.lower()):
        return "low"
    return effort


def reasons(request: CompletionRequest, upstream_model: str) -> bool:
    """The model reasons: ``reasoning`` reached the adapter (``controls.fitted`` lets it through only to a model
    that reasons), or the model's family reasons (a request without ``reasoning`` still reaches a reasoning model)."""
    return request.reasoning is not None or controls_by_name("openai", upstream_model).reasoning


def temperature_warnings(request: CompletionRequest, reasoning: bool) -> list[str]:
    """OpenAI's reasoning models refuse ``temperature`` (400 "Unsupported parameter"): it is left out, and said so."""
    if reasoning and request.temperature is not None:
        return ["temperature ignored: OpenAI's reasoning models take no temperature."]
    return []


def json_schema_format(schema: JsonSchemaFormat) -> dict[str, Any]:
    """A schema as both formats name it (``response_format.json_schema`` in Chat Completions, ``text.format``
    beside ``type`` in Responses): ``name``, ``schema``, and ``strict`` and ``description`` where given."""
    shape: dict[str, Any] = {"name": schema.name, "schema": schema.schema_}
    if schema.strict is not None:
        shape["strict"] = schema.strict
    if schema.description:
        shape["description"] = schema.description
    return shape


def auth_headers(api_key: str | None, header: str) -> dict[str, str]:
    """The key as ``header`` takes it: Azure OpenAI takes its keys bare, in ``api-key``; everyone else as a bearer
    token in ``Authorization``. No key, no header (local servers)."""
    if not api_key:
        return {}
    return {header: f"Bearer {api_key}" if header.lower() == "authorization" else api_key}


def error_detail(payload: Any) -> tuple[str | None, str | None]:
    """``(message, code)`` of an error body: OpenAI's ``{"error": {...}}``, a stream's error event, the usual
    variants."""
    if not isinstance(payload, dict):
        return None, None
    error = payload.get("error", payload)
    if isinstance(error, str):
        return error[:MAX_MESSAGE_CHARS], None
    if not isinstance(error, dict):
        return None, None
    message = error.get("message") or error.get("detail")
    code = error.get("code") or error.get("type")
    return (
        message[:MAX_MESSAGE_CHARS] if isinstance(message, str) else None,
        code if isinstance(code, str) else None,
    )


def translate_error(status: int, content: bytes, headers: Mapping[str, str], *, upstream_model: str) -> ApiError:
    """The caller's view of a provider's HTTP error (``status`` >= 400)."""
    try:
        message, code = error_detail(json.loads(content))
    except ValueError:
        message, code = None, None
    if status == 404 and message is None:
        message = "is COMPLETION_OPENAI_BASE_URL right (it usually ends in /v1)?"
    return provider_error(
        status,
        provider="The OpenAI-compatible provider",
        message=message,
        headers=headers,
        upstream_model=upstream_model,
        credentials_hint="COMPLETION_OPENAI_API_KEY",
        context_length_exceeded=code == "context_length_exceeded",
        # A 429 for a spent budget: waiting does not help (OpenAI's code, and the type some servers copy).
        quota_exhausted=code in ("insufficient_quota", "billing_hard_limit_reached"),
    )


@dataclass(frozen=True)
class OpenAIEndpoint:
    """Where a provider of either format posts its calls (``url``), with the key as its header takes it, through
    the ``upstream`` that retries them and scrubs the key from what it logs."""

    url: str
    headers: Mapping[str, str]
    upstream: Upstream

    @functools.cached_property
    def _parsed_url(self) -> httpx.URL:
        # Parsed once: from a string, httpx parses and checks the URL (its host through ``ipaddress``) for every
        # request, a few percent of the service's CPU per call.
        return httpx.URL(self.url)

    @classmethod
    def at(
        cls,
        http: httpx.AsyncClient,
        base_url: str,
        path: str,
        api_key: str | None,
        *,
        provider: str,
        auth_header: str,
        max_retries: int,
    ) -> OpenAIEndpoint:
        """``path`` (``/chat/completions``, ``/responses``) under ``base_url``."""
        upstream = Upstream(http, provider=provider, base_url=base_url, secrets=[api_key], max_retries=max_retries)
        return cls(base_url.rstrip("/") + path, auth_headers(api_key, auth_header), upstream)

    def post(self, body: dict[str, Any], *, stream: bool, upstream_model: str, warnings: list[str]) -> Outbound:
        """One call of ``body``; its errors read by ``translate_error``."""
        headers = {"Accept": "text/event-stream" if stream else "application/json", **self.headers}

        def build() -> httpx.Request:
            return self.upstream.http.build_request("POST", self._parsed_url, json=body, headers=headers)

        def translate(status: int, content: bytes, response_headers: httpx.Headers) -> ApiError:
            return translate_error(status, content, response_headers, upstream_model=upstream_model)

        return Outbound(self.upstream, build, translate, warnings)
