"""``GeminiProvider``: how a call to ``generateContent`` is made, on either endpoint; the shared ``HttpAdapter``
makes it (retries, deadline, the event stream read)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import httpx

from completion_service.providers._adapter import HttpAdapter, Outbound
from completion_service.providers._transport import Upstream
from completion_service.providers.gemini.endpoints import (
    DEFAULT_BASE_URL,
    PROVIDER_NAME,
    TOOL_NAMES,
    VERTEX_PROVIDER_NAME,
    Endpoint,
    GeminiApi,
    VertexAi,
)
from completion_service.providers.gemini.errors import translate_error
from completion_service.providers.gemini.request import build_request_body
from completion_service.providers.gemini.response import StreamAssembler, parse_response
from suite_common.deadline import Deadline
from suite_common.errors import ApiError
from suite_common.wire import CompletionEvent, CompletionRequest, CompletionResponse

__all__ = ["GeminiProvider"]


class GeminiProvider(HttpAdapter):
    """Calls ``generateContent`` through the service's shared ``httpx.AsyncClient``: on the Gemini API
    (``GeminiProvider(...)``) or on Vertex AI (``GeminiProvider.vertex(...)``)."""

    tool_names = TOOL_NAMES
    image_input = "bytes"  # inlineData only: https images are fetched first

    def __init__(
        self,
        http: httpx.AsyncClient,
        *,
        base_url: str = DEFAULT_BASE_URL,
        api_key: str | None,
        max_retries: int = 2,
        name: str = PROVIDER_NAME,
        include_thoughts: bool = False,
    ) -> None:
        self._setup(http, GeminiApi(base_url.rstrip("/"), api_key or None), max_retries, name, include_thoughts)

    @classmethod
    def vertex(
        cls,
        http: httpx.AsyncClient,
        *,
        project: str,
        location: str,
        token_source: Callable[[], str],
        base_url: str | None = None,
        max_retries: int = 2,
        name: str = VERTEX_PROVIDER_NAME,
        include_thoughts: bool = False,
    ) -> GeminiProvider:
        """Gemini on Vertex AI; ``token_source`` gives the OAuth2 bearer token, asked again for every call
        so that whatever refreshes it (a file rewritten by a sidecar) is picked up."""
        endpoint = VertexAi.at(project, location, token_source, base_url)
        provider = cls.__new__(cls)
        provider._setup(http, endpoint, max_retries, name, include_thoughts)
        return provider

    def _setup(
        self, http: httpx.AsyncClient, endpoint: Endpoint, max_retries: int, name: str, include_thoughts: bool
    ) -> None:
        self.name = name
        self._http = http
        self._endpoint = endpoint
        self._max_retries = max_retries
        self._include_thoughts = include_thoughts

    def _parse(self, body: Any, model: str) -> CompletionResponse:
        return parse_response(body, model, provider=self.name)

    def _decoder(self, model: str) -> StreamAssembler:
        return StreamAssembler(model=model, provider=self.name)

    async def _whole_stream(
        self, upstream: Upstream, response: httpx.Response, deadline: Deadline, model: str
    ) -> list[CompletionEvent]:
        # Some servers answer ``alt=sse`` with JSON: one GenerateContentResponse, or the array of them that
        # streamGenerateContent gives without ``alt=sse``. Both are whole answers, folded as a stream is.
        assembler = self._decoder(model)
        with upstream.scrubbed():
            whole = await upstream.read_json(response, deadline)
            chunks = whole if isinstance(whole, list) else [whole]
            events = [event for chunk in chunks for event in assembler.feed(chunk)]
            return [*events, *assembler.finish()]

    async def _outbound(self, request: CompletionRequest, upstream_model: str, *, stream: bool) -> Outbound:
        endpoint = self._endpoint
        body = build_request_body(
            request,
            provider=self.name,
            send_call_ids=endpoint.sends_call_ids,
            include_thoughts=self._include_thoughts,
            upstream_model=upstream_model,
        )
        url = endpoint.url(upstream_model, stream=stream)
        headers, secret = endpoint.credentials()
        headers["Accept"] = "text/event-stream" if stream else "application/json"
        # One per call: a Vertex token changes, and every message that leaves must be scrubbed of it.
        upstream = Upstream(
            self._http, provider=self.name, base_url=endpoint.base_url, secrets=[secret], max_retries=self._max_retries
        )

        def build() -> httpx.Request:
            return self._http.build_request("POST", url, json=body, headers=headers)

        def translate(status: int, content: bytes, response_headers: httpx.Headers) -> ApiError:
            return translate_error(
                status,
                content,
                response_headers,
                upstream_model=upstream_model,
                provider_label=endpoint.label,
                credentials_hint=endpoint.credentials_hint,
            )

        return Outbound(upstream, build, translate)
