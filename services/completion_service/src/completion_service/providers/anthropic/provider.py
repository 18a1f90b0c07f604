"""``AnthropicProvider``: how a call to ``{base_url}/v1/messages`` is made; the shared ``HttpAdapter`` makes it
(retries, deadline, the event stream read)."""

from __future__ import annotations

from typing import Any

import httpx

from completion_service.controls import thinking_budget
from completion_service.providers._adapter import HttpAdapter, Outbound
from completion_service.providers._anthropic_shape import thinking_warnings
from completion_service.providers._transport import Upstream
from completion_service.providers.anthropic.errors import translate_error
from completion_service.providers.anthropic.request import PROVIDER_NAME, TOOL_NAMES, build_request_body
from completion_service.providers.anthropic.response import StreamAssembler, parse_response
from suite_common.errors import ApiError
from suite_common.wire import CompletionRequest, CompletionResponse

__all__ = ["ANTHROPIC_VERSION", "AnthropicProvider"]

ANTHROPIC_VERSION = "2023-06-01"


class AnthropicProvider(HttpAdapter):
    """Calls ``{base_url}/v1/messages`` through the service's shared ``httpx.AsyncClient``."""

    tool_names = TOOL_NAMES
    answers_through_tool = True  # no JSON mode: a response_format is a forced final tool

    def __init__(
        self,
        http: httpx.AsyncClient,
        *,
        base_url: str,
        api_key: str | None,
        max_retries: int = 2,
        name: str = PROVIDER_NAME,
        thinking_budget_tokens: int | None = None,
    ) -> None:
        self.name = name
        self.thinking_budget_tokens = thinking_budget_tokens
        self._url = base_url.rstrip("/") + "/v1/messages"
        self._api_key = api_key or None
        self._upstream = Upstream(http, provider=name, base_url=base_url, secrets=[api_key], max_retries=max_retries)

    def request_body(
        self, request: CompletionRequest, upstream_model: str, *, stream: bool
    ) -> tuple[dict[str, Any], list[str]]:
        """The body, and the controls of the request it could not carry (the answer's ``warnings``)."""
        budget = thinking_budget(request, self.thinking_budget_tokens)
        body = build_request_body(
            request, upstream_model, stream=stream, thinking_budget_tokens=budget, provider=self.name
        )
        return body, thinking_warnings(request, body.get("thinking") is not None, budget, upstream_model)

    def _parse(self, body: Any, model: str) -> CompletionResponse:
        # Also a compatible server's answer to a stream as one message object: that is the whole answer.
        return parse_response(body, model, provider=self.name)

    def _decoder(self, model: str) -> StreamAssembler:
        return StreamAssembler(model=model, provider=self.name)

    async def _outbound(self, request: CompletionRequest, upstream_model: str, *, stream: bool) -> Outbound:
        body, warnings = self.request_body(request, upstream_model, stream=stream)
        headers = {
            "anthropic-version": ANTHROPIC_VERSION,
            "accept": "text/event-stream" if stream else "application/json",
        }
        if self._api_key:
            headers["x-api-key"] = self._api_key

        def build() -> httpx.Request:
            return self._upstream.http.build_request("POST", self._url, json=body, headers=headers)

        def translate(status: int, content: bytes, response_headers: httpx.Headers) -> ApiError:
            return translate_error(status, content, response_headers, upstream_model=upstream_model)

        return Outbound(self._upstream, build, translate, warnings)
