"""WebSearchSettings: read from WEB_SEARCH_* variables, validated at start-up."""

from __future__ import annotations

import io
import json

import pydantic
import pytest

from mcp_web_search.settings import WebSearchSettings
from suite_common.settings import deprecated_names_in_use
from suite_common.ssrf import EgressPolicy
from suite_common.startup import start


def test_defaults_listen_on_8102_with_every_backend_in_order_and_a_strict_fetch_policy(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.delenv("WEB_SEARCH_SEARXNG_URL", raising=False)

    settings = WebSearchSettings()

    assert (settings.port, settings.searxng_url, settings.timeout_seconds, settings.max_results_cap) == (
        8102,
        None,
        10,
        20,
    )
    assert settings.backends == ["searxng", "brave", "tavily", "ddgs"]
    assert (settings.brave_api_key, settings.tavily_api_key, settings.ddgs_engines) == (None, None, "duckduckgo")
    assert settings.cache_seconds == 300
    assert settings.egress_policy() == EgressPolicy()


@pytest.mark.parametrize("value", ['["brave", "ddgs"]', "brave,ddgs", " brave , ddgs ", '["brave","ddgs","brave"]'])
def test_the_backend_order_is_json_or_comma_separated(monkeypatch: pytest.MonkeyPatch, value: str) -> None:
    monkeypatch.setenv("WEB_SEARCH_BACKENDS", value)

    assert WebSearchSettings().backends == ["brave", "ddgs"]


@pytest.mark.parametrize("value", ['["bing"]', "searxng,google", "[]"])
def test_an_unknown_or_empty_backend_order_is_refused(monkeypatch: pytest.MonkeyPatch, value: str) -> None:
    monkeypatch.setenv("WEB_SEARCH_BACKENDS", value)

    with pytest.raises(pydantic.ValidationError, match="backends"):
        WebSearchSettings()


def test_api_keys_are_secrets_and_blank_means_unset(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("WEB_SEARCH_BRAVE_API_KEY", "BSA-secret")
    monkeypatch.setenv("WEB_SEARCH_TAVILY_API_KEY", " ")

    settings = WebSearchSettings()

    assert settings.brave_api_key is not None
    assert settings.brave_api_key.get_secret_value() == "BSA-secret"
    assert "BSA-secret" not in repr(settings)
    assert settings.tavily_api_key is None


def test_the_fetch_policy_comes_from_its_settings(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("WEB_SEARCH_SSRF_ALLOW_LOOPBACK", "true")
    monkeypatch.setenv("WEB_SEARCH_SSRF_ALLOWED_NETWORKS", "10.1.0.0/16, fd00:1::/64")
    monkeypatch.setenv("WEB_SEARCH_SSRF_ALLOWED_HOSTS", '["Wiki.Internal"]')

    policy = WebSearchSettings().egress_policy()

    assert policy == EgressPolicy.create(
        allow_loopback=True, allowed_cidrs=["10.1.0.0/16", "fd00:1::/64"], allowed_hosts=["wiki.internal"]
    )


def test_the_former_fetch_names_still_set_the_policy_and_are_logged_as_deprecated(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("WEB_SEARCH_FETCH_ALLOW_LOOPBACK", "true")
    monkeypatch.setenv("WEB_SEARCH_FETCH_ALLOW_PRIVATE", "true")
    monkeypatch.setenv("WEB_SEARCH_FETCH_ALLOWED_NETWORKS", "10.1.0.0/16, fd00:1::/64")
    monkeypatch.setenv("WEB_SEARCH_FETCH_ALLOWED_HOSTS", '["Wiki.Internal"]')

    log = io.StringIO()
    settings, _ = start(WebSearchSettings, lambda settings: None, prog="mcp-web-search", log_stream=log)
    logs = [json.loads(line) for line in log.getvalue().splitlines()]

    assert settings.egress_policy() == EgressPolicy.create(
        allow_loopback=True,
        allow_private=True,
        allowed_cidrs=["10.1.0.0/16", "fd00:1::/64"],
        allowed_hosts=["wiki.internal"],
    )
    deprecated = {entry["setting"]: entry["replaced_by"] for entry in logs if entry["event"] == "deprecated_setting"}
    assert deprecated == {
        "WEB_SEARCH_FETCH_ALLOW_LOOPBACK": "WEB_SEARCH_SSRF_ALLOW_LOOPBACK",
        "WEB_SEARCH_FETCH_ALLOW_PRIVATE": "WEB_SEARCH_SSRF_ALLOW_PRIVATE",
        "WEB_SEARCH_FETCH_ALLOWED_NETWORKS": "WEB_SEARCH_SSRF_ALLOWED_NETWORKS",
        "WEB_SEARCH_FETCH_ALLOWED_HOSTS": "WEB_SEARCH_SSRF_ALLOWED_HOSTS",
    }


def test_the_new_name_wins_over_the_former_one(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("WEB_SEARCH_FETCH_ALLOW_LOOPBACK", "true")
    monkeypatch.setenv("WEB_SEARCH_SSRF_ALLOW_LOOPBACK", "false")

    assert WebSearchSettings().ssrf_allow_loopback is False


def test_the_former_name_of_the_cache_lifetime_is_still_read_and_logged_as_deprecated(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("WEB_SEARCH_CACHE_TTL_SECONDS", "60")

    assert WebSearchSettings().cache_seconds == 60
    # What start-up logs as deprecated_setting.
    assert deprecated_names_in_use(WebSearchSettings) == [("WEB_SEARCH_CACHE_TTL_SECONDS", "WEB_SEARCH_CACHE_SECONDS")]

    monkeypatch.setenv("WEB_SEARCH_CACHE_SECONDS", "0")
    assert WebSearchSettings().cache_seconds == 0


def test_a_malformed_allowed_network_is_refused() -> None:
    with pytest.raises(pydantic.ValidationError, match="does not appear to be an IPv4 or IPv6 network"):
        WebSearchSettings(ssrf_allowed_networks=["10.0.0.0/40"])


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
