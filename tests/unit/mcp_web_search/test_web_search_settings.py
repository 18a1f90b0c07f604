"""WebSearchSettings: read from WEB_SEARCH_* variables, validated at start-up."""

from __future__ import annotations

import pydantic
import pytest

from mcp_web_search.settings import WebSearchSettings


def test_defaults_listen_on_8102_without_a_backend(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("WEB_SEARCH_SEARXNG_URL", raising=False)

    settings = WebSearchSettings()

    assert (settings.port, settings.searxng_url, settings.timeout_seconds, settings.max_results_cap) == (
        8102,
        None,
        10,
        20,
    )


def test_values_come_from_prefixed_variables(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("WEB_SEARCH_SEARXNG_URL", " http://127.0.0.1:8888/ ")
    monkeypatch.setenv("WEB_SEARCH_TIMEOUT_SECONDS", "2.5")
    monkeypatch.setenv("WEB_SEARCH_MAX_RESULTS_CAP", "50")

    settings = WebSearchSettings()

    assert settings.searxng_url == "http://127.0.0.1:8888"
    assert settings.timeout_seconds == 2.5
    assert settings.max_results_cap == 50


def test_an_empty_searxng_url_means_no_backend(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("WEB_SEARCH_SEARXNG_URL", "")

    assert WebSearchSettings().searxng_url is None


@pytest.mark.parametrize("url", ["127.0.0.1:8888", "ftp://searx.example"])
def test_a_searxng_url_that_is_not_http_is_refused(url: str) -> None:
    with pytest.raises(pydantic.ValidationError, match="must be an http:// or https:// URL"):
        WebSearchSettings(searxng_url=url)


def test_a_timeout_must_be_positive() -> None:
    with pytest.raises(pydantic.ValidationError):
        WebSearchSettings(timeout_seconds=0)
