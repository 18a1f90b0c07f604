"""Images in messages reach each provider in its own wire format: completion-service served for real in front of
the scripted OpenAI, Anthropic, Gemini and Bedrock servers, the image given as a data: URL or as an https URL served
on loopback over TLS (the egress policy opened to loopback for that, and only in those tests)."""

from __future__ import annotations

import base64
import ssl
from collections.abc import AsyncIterator, Callable
from contextlib import AsyncExitStack, asynccontextmanager
from dataclasses import dataclass
from typing import Any

import anyio
import httpx
import pytest
import trustme
import uvicorn
from pydantic import SecretStr
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import Route

from completion_service.app import create_app
from completion_service.images import ImageFetcher, admit_images
from completion_service.settings import CompletionSettings
from suite_common.errors import ApiError
from suite_common.wire import CompletionRequest
from support import fake_anthropic, fake_gemini, fake_openai
from support.fake_bedrock import ACCESS_KEY_ID, REGION, SECRET_ACCESS_KEY, BedrockReply, ScriptedBedrock
from support.servers import serve_app

pytestmark = pytest.mark.anyio

PNG = base64.b64decode(
    "iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAYAAAAfFcSJAAAADUlEQVR42mNk+M9QDwADhgGAWjR9awAAAABJRU5ErkJggg=="
)
DATA_URL = "data:image/png;base64," + base64.b64encode(PNG).decode()
SNAPSHOT = {"name": "snapshot", "description": "Take a snapshot.", "inputSchema": {"type": "object", "properties": {}}}


def _conversation(url: str) -> list[dict[str, Any]]:
    """A user message with an image, a tool call, and its result with an image: both places images go."""
    image = {"type": "image_url", "image_url": {"url": url}}
    return [
        {"role": "user", "content": [{"type": "text", "text": "What is in this picture?"}, image]},
        {"role": "assistant", "toolCalls": [{"id": "call_1", "name": "snapshot", "arguments": {}}]},
        {"role": "tool", "toolCallId": "call_1", "content": [{"type": "text", "text": "Here it is."}, image]},
    ]


# --- each provider's fake, and the images its recorded request carried ----------------------------------------

Sent = tuple[str, Any]
"""An image as the provider received it: ``("bytes", <decoded bytes>)`` or ``("url", <the URL it fetches>)``."""


def _from_url(url: str) -> Sent:
    if url.startswith("data:image/png;base64,"):
        return "bytes", base64.b64decode(url.partition(",")[2])
    return "url", url


def _openai_images(body: dict[str, Any]) -> list[Sent]:
    # The tool's image follows the tool messages in a user message (Chat Completions has none in tool messages).
    assert [message["role"] for message in body["messages"]] == ["user", "assistant", "tool", "user"]
    assert body["messages"][2]["content"] == "Here it is."
    assert body["messages"][3]["content"][0] == {"type": "text", "text": "Images returned by the tool call call_1:"}
    lists = [message["content"] for message in body["messages"] if isinstance(message["content"], list)]
    parts = [part for content in lists for part in content]
    return [_from_url(part["image_url"]["url"]) for part in parts if part["type"] == "image_url"]


def _anthropic_source(block: dict[str, Any]) -> Sent:
    source = block["source"]
    if source["type"] == "base64":
        assert source["media_type"] == "image/png"
        return "bytes", base64.b64decode(source["data"])
    return "url", source["url"]


def _anthropic_images(body: dict[str, Any]) -> list[Sent]:
    user, _, results = body["messages"]
    assert [block["type"] for block in user["content"]] == ["text", "image"]
    result = results["content"][0]
    assert result["type"] == "tool_result"  # the image inside the tool result, after its text
    assert [block["type"] for block in result["content"]] == ["text", "image"]
    return [_anthropic_source(user["content"][1]), _anthropic_source(result["content"][1])]


def _gemini_images(body: dict[str, Any]) -> list[Sent]:
    parts = [part for content in body["contents"] for part in content["parts"]]
    blobs = [part["inlineData"] for part in parts if "inlineData" in part]
    assert all(blob["mimeType"] == "image/png" for blob in blobs)
    last = body["contents"][-1]["parts"]
    assert "functionResponse" in last[0]
    assert last[1] == {"text": "Images returned by the tool snapshot:"}
    return [("bytes", base64.b64decode(blob["data"])) for blob in blobs]


def _bedrock_images(body: dict[str, Any]) -> list[Sent]:
    user, _, results = body["messages"]
    tool_result = results["content"][0]["toolResult"]
    images = [user["content"][1]["image"], tool_result["content"][1]["image"]]
    assert all(image["format"] == "png" for image in images)
    return [("bytes", base64.b64decode(image["source"]["bytes"])) for image in images]


@dataclass(frozen=True)
class Case:
    name: str
    model: str
    takes_urls: bool
    """The provider fetches https images itself; the others get the bytes."""
    images: Callable[[dict[str, Any]], list[Sent]]


CASES = [
    Case("openai", "openai/gpt-4o", True, _openai_images),
    Case("anthropic", "anthropic/claude-sonnet-4-5", True, _anthropic_images),
    Case("gemini", "gemini/gemini-2.5-flash", False, _gemini_images),
    Case("bedrock", "bedrock/anthropic.claude-3-5-haiku-20241022-v1:0", False, _bedrock_images),
]


@dataclass
class Upstream:
    """A provider's scripted server and what it received."""

    app: Starlette
    settings: Callable[[str], dict[str, Any]]
    requests: Callable[[], list[dict[str, Any]]]


def _upstream(name: str) -> Upstream:
    if name == "openai":
        openai = fake_openai.ScriptedOpenAI([fake_openai.text("A dot.")])
        settings = {"openai_base_url": "{}/v1", "openai_api_key": SecretStr("test-key")}
        return Upstream(openai.app, lambda url: _at(settings, url), lambda: openai.requests)
    if name == "anthropic":
        anthropic = fake_anthropic.ScriptedAnthropic([fake_anthropic.text("A dot.")])
        settings = {"anthropic_base_url": "{}", "anthropic_api_key": SecretStr("test-key")}
        return Upstream(anthropic.app, lambda url: _at(settings, url), lambda: anthropic.requests)
    if name == "gemini":
        gemini = fake_gemini.ScriptedGemini([fake_gemini.text("A dot.")])
        settings = {"gemini_base_url": "{}", "gemini_api_key": SecretStr(gemini.api_key)}
        return Upstream(gemini.app, lambda url: _at(settings, url), lambda: [seen.body for seen in gemini.requests])
    bedrock = ScriptedBedrock([BedrockReply(text="A dot.")])
    settings = {
        "bedrock_region": REGION,
        "bedrock_endpoint_url": "{}",
        "aws_access_key_id": SecretStr(ACCESS_KEY_ID),
        "aws_secret_access_key": SecretStr(SECRET_ACCESS_KEY),
    }
    return Upstream(bedrock.app, lambda url: _at(settings, url), lambda: [seen["body"] for seen in bedrock.requests])


def _at(settings: dict[str, Any], url: str) -> dict[str, Any]:
    return {key: value.format(url) if isinstance(value, str) else value for key, value in settings.items()}


# --- an image host on loopback, over TLS -----------------------------------------------------------------------


@dataclass(frozen=True)
class ImageHost:
    base: str
    """``https://127.0.0.1:<port>``"""
    trust: ssl.SSLContext
    """A client context that trusts the host's certificate authority."""
    fetched: list[str]


@asynccontextmanager
async def image_host() -> AsyncIterator[ImageHost]:
    fetched: list[str] = []

    async def image(request: Request) -> Response:
        fetched.append(request.url.path)
        return Response(PNG, media_type="image/png")

    async def page(request: Request) -> Response:
        fetched.append(request.url.path)
        return Response("<html>not an image</html>", media_type="text/html")

    app = Starlette(routes=[Route("/dot.png", image), Route("/page", page)])
    authority = trustme.CA()
    trust = ssl.create_default_context()
    authority.configure_trust(trust)
    with authority.issue_cert("127.0.0.1").private_key_and_cert_chain_pem.tempfile() as pem:
        config = uvicorn.Config(app, log_config=None, access_log=False, ssl_certfile=pem, ssl_keyfile=pem)
        async with serve_app(app, config=config) as url:
            yield ImageHost(url.replace("http://", "https://"), trust, fetched)


@asynccontextmanager
async def service(
    upstream: Upstream | None, *, trust: ssl.SSLContext | None = None, **settings: Any
) -> AsyncIterator[httpx.AsyncClient]:
    """completion-service in front of ``upstream`` (none: the demo only), its image client trusting ``trust``."""
    async with AsyncExitStack() as stack:
        configured: dict[str, Any] = {"demo_enabled": upstream is None, **settings}
        if upstream is not None:
            configured.update(upstream.settings(await stack.enter_async_context(serve_app(upstream.app))))
        config = CompletionSettings(**configured)
        fetcher = ImageFetcher.from_settings(config, verify=trust or True)
        stack.push_async_callback(fetcher.aclose)
        url = await stack.enter_async_context(serve_app(create_app(config, image_fetcher=fetcher)))
        yield await stack.enter_async_context(httpx.AsyncClient(base_url=url, timeout=10))


def _body(model: str, url: str, **fields: Any) -> dict[str, Any]:
    return {"model": model, "messages": _conversation(url), "tools": [SNAPSHOT], **fields}


@pytest.mark.parametrize("case", CASES, ids=lambda case: case.name)
async def test_a_data_url_image_reaches_the_provider_as_the_same_bytes(case: Case) -> None:
    upstream = _upstream(case.name)
    async with service(upstream) as client:
        response = await client.post("/api/v1/completions", json=_body(case.model, DATA_URL))
    assert response.status_code == 200, response.text
    assert response.json()["message"]["content"] == "A dot."
    (sent,) = upstream.requests()
    assert case.images(sent) == [("bytes", PNG), ("bytes", PNG)]


@pytest.mark.parametrize("case", CASES, ids=lambda case: case.name)
@pytest.mark.parametrize("stream", [False, True], ids=["whole", "streamed"])
async def test_an_https_image_reaches_the_provider_as_its_url_or_as_the_fetched_bytes(case: Case, stream: bool) -> None:
    upstream = _upstream(case.name)
    async with image_host() as host, service(upstream, trust=host.trust, ssrf_allow_loopback=True) as client:
        url = f"{host.base}/dot.png"
        response = await client.post("/api/v1/completions", json=_body(case.model, url, stream=stream))
        assert response.status_code == 200, response.text
    (sent,) = upstream.requests()
    if case.takes_urls:
        assert case.images(sent) == [("url", url), ("url", url)]
        assert host.fetched == []  # the provider fetches it: completion-service only checked the address
    else:
        assert case.images(sent) == [("bytes", PNG), ("bytes", PNG)]
        assert host.fetched == ["/dot.png"]  # once for the request, though it is sent twice


@pytest.mark.parametrize("case", CASES, ids=lambda case: case.name)
async def test_an_image_url_the_egress_policy_blocks_is_refused_before_any_call(case: Case) -> None:
    upstream = _upstream(case.name)
    async with image_host() as host, service(upstream, trust=host.trust) as client:  # loopback not allowed
        response = await client.post("/api/v1/completions", json=_body(case.model, f"{host.base}/dot.png"))
        metadata = await client.post("/api/v1/completions", json=_body(case.model, "https://169.254.169.254/x.png"))
    assert response.status_code == 400
    assert response.json()["error"]["code"] == "image_url_not_allowed"
    assert "loopback" in response.json()["error"]["message"]
    assert metadata.json()["error"]["code"] == "image_url_not_allowed"
    assert upstream.requests() == []
    assert host.fetched == []


@pytest.mark.parametrize(
    "url", ["http://example.com/dot.png", "/api/v1/agent/images/" + "0" * 64, "ftp://example.com/dot.png"]
)
async def test_an_image_url_that_is_not_https_or_data_is_refused(url: str) -> None:
    upstream = _upstream("openai")
    async with service(upstream) as client:
        response = await client.post("/api/v1/completions", json=_body("openai/gpt-4o", url))
    assert (response.status_code, response.json()["error"]["code"]) == (400, "image_url_not_allowed")
    assert upstream.requests() == []


async def test_a_malformed_data_url_is_a_bad_request() -> None:
    upstream = _upstream("anthropic")
    async with service(upstream) as client:
        svg = await client.post("/api/v1/completions", json=_body(CASES[1].model, "data:image/svg+xml;base64,PHN2Zy8+"))
        broken = await client.post("/api/v1/completions", json=_body(CASES[1].model, "data:image/png;base64,%%%"))
    assert (svg.status_code, svg.json()["error"]["code"]) == (400, "invalid_request")
    assert "PNG, JPEG, GIF or WebP" in svg.json()["error"]["message"]
    assert (broken.status_code, broken.json()["error"]["code"]) == (400, "invalid_request")
    assert upstream.requests() == []


async def test_a_fetched_url_that_is_not_an_image_or_too_large_is_refused() -> None:
    upstream = _upstream("gemini")
    async with (
        image_host() as host,
        service(upstream, trust=host.trust, ssrf_allow_loopback=True, image_fetch_max_bytes=32) as client,
    ):
        page = await client.post("/api/v1/completions", json=_body(CASES[2].model, f"{host.base}/page"))
        large = await client.post("/api/v1/completions", json=_body(CASES[2].model, f"{host.base}/dot.png"))
    assert (page.status_code, page.json()["error"]["code"]) == (400, "image_fetch_failed")
    assert "text/html" in page.json()["error"]["message"]
    assert (large.status_code, large.json()["error"]["code"]) == (413, "image_too_large")
    assert upstream.requests() == []


async def test_a_model_that_takes_no_images_is_refused_before_any_call() -> None:
    upstream = _upstream("openai")
    catalog = '[{"name": "text-only", "provider": "openai", "model": "my-llm", "images": false}]'
    async with service(upstream, models=catalog) as client:
        known = await client.post("/api/v1/completions", json=_body("openai/gpt-3.5-turbo", DATA_URL))
        entry = await client.post("/api/v1/completions", json=_body("text-only", DATA_URL))
        listed = (await client.get("/api/v1/models/text-only")).json()
        vision = (await client.get("/api/v1/models/openai/gpt-4o")).json()
    for response in (known, entry):
        assert (response.status_code, response.json()["error"]["code"]) == (400, "images_not_supported")
    assert upstream.requests() == []
    assert listed["images"] is False
    assert vision["images"] is True


async def test_the_demo_model_says_which_images_it_received() -> None:
    async with service(None) as client:
        asked = await client.post(
            "/api/v1/completions", json={"model": "demo", "messages": _conversation(DATA_URL)[:1]}
        )
        models = (await client.get("/api/v1/models")).json()["models"]
    assert asked.status_code == 200, asked.text
    assert f"You sent 1 image (image/png, {len(PNG)} bytes)." in asked.json()["message"]["content"]
    assert {"id": "demo", "images": True}.items() <= next(m for m in models if m["id"] == "demo").items()


def _images_body(model: str, urls: list[str]) -> dict[str, Any]:
    parts = [
        {"type": "text", "text": "Compare these."},
        *({"type": "image_url", "image_url": {"url": u}} for u in urls),
    ]
    return {"model": model, "messages": [{"role": "user", "content": parts}]}


async def test_more_images_than_a_request_may_carry_are_refused_before_any_call() -> None:
    upstream = _upstream("openai")
    async with service(upstream, image_max_count=2) as client:
        two = await client.post("/api/v1/completions", json=_images_body("openai/gpt-4o", [DATA_URL] * 2))
        three = await client.post("/api/v1/completions", json=_images_body("openai/gpt-4o", [DATA_URL] * 3))
    assert two.status_code == 200, two.text
    assert (three.status_code, three.json()["error"]["code"]) == (400, "too_many_images")
    assert "COMPLETION_IMAGE_MAX_COUNT" in three.json()["error"]["message"]
    assert len(upstream.requests()) == 1


async def test_the_images_one_request_fetches_are_bounded_together() -> None:
    upstream = _upstream("gemini")
    settings = {"ssrf_allow_loopback": True, "image_fetch_max_bytes": len(PNG)}  # together: 4 of them at most
    async with image_host() as host, service(upstream, trust=host.trust, **settings) as client:
        four = await client.post(
            "/api/v1/completions", json=_images_body(CASES[2].model, [f"{host.base}/dot.png?n={n}" for n in range(4)])
        )
        five = await client.post(
            "/api/v1/completions", json=_images_body(CASES[2].model, [f"{host.base}/dot.png?n={n}" for n in range(5)])
        )
    assert four.status_code == 200, four.text
    assert (five.status_code, five.json()["error"]["code"]) == (413, "image_too_large")
    assert "together" in five.json()["error"]["message"]
    assert len(upstream.requests()) == 1


async def test_image_url_checks_run_together_within_the_requests_deadline() -> None:
    started: list[str] = []

    async def hanging(host: str, port: int) -> list[str]:
        started.append(host)
        await anyio.sleep_forever()
        return []

    config = CompletionSettings(demo_enabled=True)
    fetcher = ImageFetcher(
        config.egress_policy(), resolver=hanging, max_bytes=1 << 20, timeout_seconds=10, max_redirects=3
    )
    request = CompletionRequest.model_validate(
        _images_body("demo", [f"https://host{n}.example/a.png" for n in range(8)])
    )
    with anyio.fail_after(5):
        with pytest.raises(ApiError) as refused:
            await admit_images(request, fetcher, within=0.3)
    assert (refused.value.status, refused.value.code) == (504, "upstream_timeout")
    assert len(started) == 4  # a few at a time, not one after another
    await fetcher.aclose()
