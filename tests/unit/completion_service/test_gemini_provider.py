"""GeminiProvider's I/O edge on an in-memory transport: URLs, credentials, retries, the SSE framing."""

from __future__ import annotations

import json
from collections.abc import Awaitable, Callable
from typing import Any

import httpx
import pytest

from completion_service.providers.gemini import GeminiProvider
from suite_common.errors import ApiError
from suite_common.wire import CompletionDone, CompletionEvent, CompletionRequest, Message, TextDelta, ToolCall

pytestmark = pytest.mark.anyio

REQUEST = CompletionRequest(model="gemini/gemini-2.5-flash", messages=[Message(role="user", content="hi")])
WITH_CALLS = CompletionRequest(
    model="vertex/gemini-2.5-pro",
    messages=[
        Message(role="user", content="hi"),
        Message(role="assistant", tool_calls=[ToolCall(id="call_1", name="now", arguments={}, signature="sig")]),
        Message(role="tool", tool_call_id="call_1", content="noon"),
    ],
)

Handler = Callable[[httpx.Request], Awaitable[httpx.Response]]


def _answer(text: str) -> dict[str, Any]:
    return {
        "candidates": [{"content": {"parts": [{"text": text}], "role": "model"}, "finishReason": "STOP", "index": 0}],
        "usageMetadata": {"promptTokenCount": 3, "candidatesTokenCount": 1, "totalTokenCount": 4},
        "modelVersion": "gemini-2.5-flash",
        "responseId": "r1",
    }


class Upstream:
    """Answers each request with the next scripted response, recording what it received."""

    def __init__(self, *responses: httpx.Response | Handler) -> None:
        self.responses = list(responses)
        self.requests: list[httpx.Request] = []

    async def __call__(self, request: httpx.Request) -> httpx.Response:
        self.requests.append(request)
        response = self.responses.pop(0)
        return response if isinstance(response, httpx.Response) else await response(request)

    def client(self) -> httpx.AsyncClient:
        return httpx.AsyncClient(transport=httpx.MockTransport(self), timeout=httpx.Timeout(30, connect=5))

    def gemini(self, *, api_key: str | None = "AIza-test-key", max_retries: int = 2) -> GeminiProvider:
        return GeminiProvider(
            self.client(), base_url="https://gemini.example/", api_key=api_key, max_retries=max_retries
        )

    def vertex(self, token_source: Callable[[], str] = lambda: "ya29.token", **options: Any) -> GeminiProvider:
        return GeminiProvider.vertex(
            self.client(), project="my-project", location="europe-west4", token_source=token_source, **options
        )


async def test_the_gemini_api_is_called_with_the_key_in_x_goog_api_key() -> None:
    upstream = Upstream(httpx.Response(200, json=_answer("hello")))
    response = await upstream.gemini().complete(REQUEST, "gemini-2.5-flash", 5)
    assert (response.message.content, response.provider, response.model) == (
        "hello",
        "gemini",
        "gemini/gemini-2.5-flash",
    )
    [sent] = upstream.requests
    assert str(sent.url) == "https://gemini.example/v1beta/models/gemini-2.5-flash:generateContent"
    assert sent.headers["x-goog-api-key"] == "AIza-test-key"
    assert "authorization" not in sent.headers
    assert json.loads(sent.content) == {"contents": [{"role": "user", "parts": [{"text": "hi"}]}]}


async def test_a_tuned_model_and_a_models_prefix_keep_their_collection() -> None:
    upstream = Upstream(httpx.Response(200, json=_answer("a")), httpx.Response(200, json=_answer("b")))
    provider = upstream.gemini()
    await provider.complete(REQUEST, "models/gemini-2.5-flash", 5)
    await provider.complete(REQUEST, "tunedModels/my-model-123", 5)
    assert [request.url.path for request in upstream.requests] == [
        "/v1beta/models/gemini-2.5-flash:generateContent",
        "/v1beta/tunedModels/my-model-123:generateContent",
    ]


@pytest.mark.parametrize("model", ["../../v1/files", "gemini?key=x", "a b", "other/gemini", ""])
async def test_a_model_id_that_could_change_the_url_is_a_400_without_a_call(model: str) -> None:
    upstream = Upstream()
    with pytest.raises(ApiError) as caught:
        await upstream.gemini().complete(REQUEST, model, 5)
    assert (caught.value.status, caught.value.code) == (400, "invalid_request")
    assert upstream.requests == []


async def test_vertex_is_called_at_its_regional_endpoint_with_the_bearer_token_and_no_call_ids() -> None:
    upstream = Upstream(httpx.Response(200, json=_answer("hello")))
    response = await upstream.vertex().complete(WITH_CALLS, "gemini-2.5-pro", 5)
    assert (response.provider, response.model) == ("vertex", "vertex/gemini-2.5-pro")
    [sent] = upstream.requests
    assert str(sent.url) == (
        "https://europe-west4-aiplatform.googleapis.com/v1/projects/my-project/locations/europe-west4"
        "/publishers/google/models/gemini-2.5-pro:generateContent"
    )
    assert sent.headers["authorization"] == "Bearer ya29.token"
    assert "x-goog-api-key" not in sent.headers
    contents = json.loads(sent.content)["contents"]
    assert contents[1]["parts"] == [{"functionCall": {"name": "now", "args": {}}, "thoughtSignature": "sig"}]
    assert contents[2]["parts"] == [{"functionResponse": {"name": "now", "response": {"result": "noon"}}}]


async def test_the_global_location_has_no_region_in_the_host_and_a_base_url_replaces_the_host() -> None:
    upstream = Upstream(httpx.Response(200, json=_answer("a")), httpx.Response(200, json=_answer("b")))
    global_vertex = GeminiProvider.vertex(upstream.client(), project="p", location="global", token_source=lambda: "t")
    proxied = GeminiProvider.vertex(
        upstream.client(), project="p", location="us-central1", token_source=lambda: "t", base_url="http://proxy:8080/"
    )
    await global_vertex.complete(REQUEST, "gemini-3-pro-preview", 5)
    await proxied.complete(REQUEST, "gemini-2.5-flash", 5)
    assert [str(request.url) for request in upstream.requests] == [
        "https://aiplatform.googleapis.com/v1/projects/p/locations/global/publishers/google/models/"
        "gemini-3-pro-preview:generateContent",
        "http://proxy:8080/v1/projects/p/locations/us-central1/publishers/google/models/gemini-2.5-flash:generateContent",
    ]


@pytest.mark.parametrize(("project", "location"), [("p/../x", "us-central1"), ("p", "us-central1.evil.com")])
def test_a_project_or_location_that_could_change_the_url_is_refused_at_start(project: str, location: str) -> None:
    with pytest.raises(ValueError, match="COMPLETION_VERTEX_"):
        GeminiProvider.vertex(httpx.AsyncClient(), project=project, location=location, token_source=lambda: "t")


async def test_the_vertex_token_is_asked_for_at_every_call_so_a_refreshed_one_is_used() -> None:
    tokens = iter(["ya29.first", "ya29.second"])
    upstream = Upstream(httpx.Response(200, json=_answer("a")), httpx.Response(200, json=_answer("b")))
    provider = upstream.vertex(lambda: next(tokens) + "\n")
    await provider.complete(REQUEST, "gemini-2.5-flash", 5)
    await provider.complete(REQUEST, "gemini-2.5-flash", 5)
    assert [request.headers["authorization"] for request in upstream.requests] == [
        "Bearer ya29.first",
        "Bearer ya29.second",
    ]


def _unreadable() -> str:
    raise FileNotFoundError("/var/run/secrets/vertex/token")


@pytest.mark.parametrize("token_source", [_unreadable, lambda: "  "])
async def test_a_missing_vertex_token_is_a_502_auth_failed_without_a_call(token_source: Callable[[], str]) -> None:
    upstream = Upstream()
    with pytest.raises(ApiError) as caught:
        await upstream.vertex(token_source).complete(REQUEST, "gemini-2.5-flash", 5)
    assert (caught.value.status, caught.value.code) == (502, "auth_failed")
    assert upstream.requests == []


async def test_the_token_is_scrubbed_from_any_upstream_message() -> None:
    body = {"error": {"code": 400, "message": "Bad header: Bearer ya29.token", "status": "INVALID_ARGUMENT"}}
    upstream = Upstream(httpx.Response(400, json=body))
    with pytest.raises(ApiError) as caught:
        await upstream.vertex().complete(REQUEST, "gemini-2.5-flash", 5)
    assert "ya29.token" not in caught.value.message
    assert "Bad header" in caught.value.message


def _busy() -> httpx.Response:
    return httpx.Response(
        503, json={"error": {"code": 503, "message": "The model is overloaded.", "status": "UNAVAILABLE"}}
    )


async def test_an_overloaded_model_is_retried_until_it_answers() -> None:
    upstream = Upstream(_busy(), _busy(), httpx.Response(200, json=_answer("at last")))
    response = await upstream.gemini(max_retries=2).complete(REQUEST, "gemini-2.5-flash", 10)
    assert response.message.content == "at last"
    assert len(upstream.requests) == 3


async def test_an_invalid_key_is_never_retried() -> None:
    invalid = {
        "error": {
            "code": 400,
            "message": "API key not valid. Please pass a valid API key.",
            "status": "INVALID_ARGUMENT",
            "details": [{"@type": "type.googleapis.com/google.rpc.ErrorInfo", "reason": "API_KEY_INVALID"}],
        }
    }
    upstream = Upstream(httpx.Response(400, json=invalid), httpx.Response(200, json=_answer("never")))
    with pytest.raises(ApiError) as caught:
        await upstream.gemini().complete(REQUEST, "gemini-2.5-flash", 5)
    assert (caught.value.status, caught.value.code) == (502, "auth_failed")
    assert len(upstream.requests) == 1


def _sse(*chunks: dict[str, Any]) -> httpx.Response:
    # Google separates events with CRLF pairs.
    body = "".join(f"data: {json.dumps(chunk)}\r\n\r\n" for chunk in chunks)
    return httpx.Response(200, headers={"content-type": "text/event-stream"}, content=body.encode())


def _chunk(text: str, finish: str | None = None) -> dict[str, Any]:
    candidate: dict[str, Any] = {"content": {"parts": [{"text": text}], "role": "model"}, "index": 0}
    if finish:
        candidate["finishReason"] = finish
    return {"candidates": [candidate], "usageMetadata": {"promptTokenCount": 2, "candidatesTokenCount": 2}}


async def _collect(provider: GeminiProvider, model: str = "gemini-2.5-flash") -> list[CompletionEvent]:
    return [event async for event in provider.stream(REQUEST, model, 5)]


async def test_a_stream_is_asked_for_as_server_sent_events_and_read_in_crlf_framing() -> None:
    upstream = Upstream(_sse(_chunk("Hel"), _chunk("lo", "STOP")))
    events = await _collect(upstream.gemini())
    assert events[:2] == [TextDelta(delta="Hel"), TextDelta(delta="lo")]
    assert isinstance(events[2], CompletionDone)
    [sent] = upstream.requests
    assert str(sent.url) == "https://gemini.example/v1beta/models/gemini-2.5-flash:streamGenerateContent?alt=sse"
    assert sent.headers["accept"] == "text/event-stream"


async def test_a_stream_cut_before_the_finish_reason_is_a_502_after_the_text_so_far() -> None:
    events: list[CompletionEvent] = []

    async def consume() -> None:
        async for event in Upstream(_sse(_chunk("It"))).gemini().stream(REQUEST, "gemini-2.5-flash", 5):
            events.append(event)

    with pytest.raises(ApiError) as caught:
        await consume()
    assert events == [TextDelta(delta="It")]
    assert (caught.value.status, caught.value.code) == (502, "bad_upstream_response")


async def test_a_stream_request_answered_with_json_gives_the_events_of_that_answer() -> None:
    events = await _collect(Upstream(httpx.Response(200, json=_answer("hi"))).gemini())
    assert [type(event).__name__ for event in events] == ["TextDelta", "CompletionDone"]
    assert events[0] == TextDelta(delta="hi")


async def test_a_stream_request_answered_with_a_json_body_that_is_no_answer_is_a_502() -> None:
    with pytest.raises(ApiError) as caught:
        await _collect(Upstream(httpx.Response(200, json={"unexpected": True})).gemini())
    assert (caught.value.status, caught.value.code) == (502, "bad_upstream_response")
