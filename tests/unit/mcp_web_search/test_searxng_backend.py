"""SearxngBackend against httpx.MockTransport: the request it sends and every failure it explains."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import httpx
import pytest

from mcp_web_search.backends.base import SearchBackendError
from mcp_web_search.backends.searxng import SearxngBackend
from support.fake_searxng import DEFAULT_RESULTS

Handler = Callable[[httpx.Request], httpx.Response]


def _answer(results: list[dict[str, Any]], unresponsive: list[list[str]] | None = None) -> Handler:
    def handler(request: httpx.Request) -> httpx.Response:
        return httpx.Response(
            200,
            json={
                "query": request.url.params["q"],
                "number_of_results": 0,
                "results": results,
                "answers": [],
                "corrections": [],
                "infoboxes": [],
                "suggestions": [],
                "unresponsive_engines": unresponsive or [],
            },
        )

    return handler


async def _search(handler: Handler, *, base_url: str = "http://searx.test", max_results: int = 5) -> list[Any]:
    async with httpx.AsyncClient(transport=httpx.MockTransport(handler)) as http:
        return await SearxngBackend(http, base_url).search("model context protocol", max_results)


async def _failure(handler: Handler, *, base_url: str = "http://searx.test") -> str:
    with pytest.raises(SearchBackendError) as caught:
        await _search(handler, base_url=base_url)
    assert caught.value.backend == "searxng"
    return caught.value.message


@pytest.mark.anyio
async def test_sends_the_query_with_format_json_to_the_search_endpoint() -> None:
    seen: list[httpx.Request] = []

    def handler(request: httpx.Request) -> httpx.Response:
        seen.append(request)
        return _answer(DEFAULT_RESULTS)(request)

    results = await _search(handler, base_url="https://search.example/searxng/")

    (request,) = seen
    assert request.method == "GET"
    assert request.url.path == "/searxng/search"
    assert dict(request.url.params) == {"q": "model context protocol", "format": "json"}
    assert [r.url for r in results] == [entry["url"] for entry in DEFAULT_RESULTS]


@pytest.mark.anyio
async def test_results_are_capped_at_max_results() -> None:
    many = [{"url": f"https://example.org/{n}", "title": f"Page {n}", "content": ""} for n in range(12)]

    results = await _search(_answer(many), max_results=4)

    assert [r.title for r in results] == ["Page 0", "Page 1", "Page 2", "Page 3"]


@pytest.mark.anyio
async def test_403_says_the_json_format_is_disabled_and_how_to_enable_it() -> None:
    message = await _failure(lambda _: httpx.Response(403, text="Forbidden"))

    assert "HTTP 403" in message
    assert "JSON format" in message
    assert "search.formats" in message


@pytest.mark.anyio
async def test_429_says_rate_limited_with_retry_after() -> None:
    message = await _failure(lambda _: httpx.Response(429, headers={"Retry-After": "30"}, text="Too Many Requests"))

    assert "rate limiting" in message
    assert "retry after 30 s" in message


@pytest.mark.anyio
@pytest.mark.parametrize("status", [500, 502, 503])
async def test_server_errors_name_the_status(status: int) -> None:
    message = await _failure(lambda _: httpx.Response(status, text="oops"))

    assert f"failed with HTTP {status}" in message


@pytest.mark.anyio
async def test_404_says_the_url_is_not_the_instance_base_url() -> None:
    message = await _failure(lambda _: httpx.Response(404, text="Not Found"))

    assert "no /search endpoint" in message
    assert "WEB_SEARCH_SEARXNG_URL" in message


@pytest.mark.anyio
async def test_redirect_names_where_to_point_instead() -> None:
    message = await _failure(lambda _: httpx.Response(301, headers={"Location": "https://searx.test/search"}))

    assert "redirected to https://searx.test/search" in message


@pytest.mark.anyio
async def test_timeout_is_reported_with_the_setting_to_raise() -> None:
    def handler(request: httpx.Request) -> httpx.Response:
        raise httpx.ReadTimeout("timed out", request=request)

    message = await _failure(handler)

    assert "did not answer in time" in message
    assert "WEB_SEARCH_TIMEOUT_SECONDS" in message


@pytest.mark.anyio
async def test_connection_error_is_reported_with_the_setting_to_check() -> None:
    def handler(request: httpx.Request) -> httpx.Response:
        raise httpx.ConnectError("[Errno 111] Connection refused", request=request)

    message = await _failure(handler)

    assert "could not reach SearXNG at http://searx.test" in message
    assert "Connection refused" in message


@pytest.mark.anyio
async def test_html_instead_of_json_is_a_clear_error() -> None:
    message = await _failure(lambda _: httpx.Response(200, html="<html>SearXNG</html>"))

    assert "something other than JSON (text/html" in message


@pytest.mark.anyio
async def test_no_results_because_every_engine_failed_is_an_error_naming_them() -> None:
    message = await _failure(_answer([], unresponsive=[["google", "timeout"], ["brave", "too many requests"]]))

    assert "google (timeout), brave (too many requests)" in message


@pytest.mark.anyio
async def test_no_results_with_healthy_engines_is_an_empty_answer() -> None:
    assert await _search(_answer([])) == []


@pytest.mark.anyio
async def test_credentials_in_the_configured_url_never_appear_in_messages() -> None:
    message = await _failure(lambda _: httpx.Response(500), base_url="https://admin:hunter2@searx.test/?token=sekrit")

    assert "https://searx.test" in message
    assert "hunter2" not in message
    assert "sekrit" not in message
