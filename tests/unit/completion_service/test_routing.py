"""Model names to providers, and what an unknown name tells the caller."""

from __future__ import annotations

from typing import Any

import pytest
from pydantic import ValidationError

from completion_service.catalog import CatalogModel
from completion_service.providers.base import Provider
from completion_service.providers.demo import DemoProvider
from completion_service.routing import ModelRouter
from completion_service.settings import CompletionSettings
from suite_common.errors import ApiError


class _Named:
    def __init__(self, name: str) -> None:
        self.name = name


def _providers(*kinds: str) -> dict[str, Provider]:
    return {kind: _Named(kind) for kind in kinds}  # type: ignore[misc]


def _entry(**fields: Any) -> CatalogModel:
    return CatalogModel.model_validate(fields)


def test_demo_routes_to_the_demo_model() -> None:
    route = ModelRouter(demo=DemoProvider()).route("demo")
    assert (route.provider.name, route.upstream_model) == ("demo", "demo")


@pytest.mark.parametrize(("model", "upstream"), [("openai/gpt-4o-mini", "gpt-4o-mini"), ("gpt-4o", "gpt-4o")])
def test_prefixed_and_bare_names_route_to_a_configured_openai(model: str, upstream: str) -> None:
    route = ModelRouter(demo=DemoProvider(), providers=_providers("openai")).route(model)
    assert (route.provider.name, route.upstream_model, route.name) == ("openai", upstream, model)


@pytest.mark.parametrize(
    ("model", "provider", "upstream"),
    [
        ("anthropic/claude-sonnet-4-5", "anthropic", "claude-sonnet-4-5"),
        ("gemini/gemini-2.5-flash", "gemini", "gemini-2.5-flash"),
        ("vertex/gemini-2.5-pro", "vertex", "gemini-2.5-pro"),
        ("bedrock/anthropic.claude-3-5-haiku-20241022-v1:0", "bedrock", "anthropic.claude-3-5-haiku-20241022-v1:0"),
    ],
)
def test_a_provider_prefix_routes_to_that_provider(model: str, provider: str, upstream: str) -> None:
    router = ModelRouter(providers=_providers("openai", "anthropic", "gemini", "vertex", "bedrock"))
    route = router.route(model)
    assert (route.provider.name, route.upstream_model) == (provider, upstream)


def test_a_prefix_of_a_provider_that_is_not_configured_is_not_sent_to_openai() -> None:
    router = ModelRouter(providers=_providers("openai"))
    with pytest.raises(ApiError) as caught:
        router.route("anthropic/claude-sonnet-4-5")
    assert caught.value.code == "model_not_found"
    assert "'anthropic' is not configured" in caught.value.message
    assert "COMPLETION_ANTHROPIC_API_KEY" in caught.value.message


@pytest.mark.parametrize("model", ["gpt-4o", "openai/gpt-4o"])
def test_without_openai_a_model_is_a_400_listing_the_models_and_how_to_configure(model: str) -> None:
    with pytest.raises(ApiError) as caught:
        ModelRouter(demo=DemoProvider()).route(model)
    assert (caught.value.status, caught.value.code) == (400, "model_not_found")
    assert "Available models: demo." in caught.value.message
    assert "COMPLETION_OPENAI_API_KEY" in caught.value.message
    assert "COMPLETION_OPENAI_BASE_URL" in caught.value.message


def test_find_gives_the_same_route_as_route_and_none_where_route_fails() -> None:
    router = ModelRouter(demo=DemoProvider())
    assert router.find("demo") == router.route("demo")
    assert router.find("gpt-4o") is None
    with_openai = ModelRouter(providers=_providers("openai"))
    assert with_openai.find("openai/meta-llama/Llama-3.1-8B") == with_openai.route("openai/meta-llama/Llama-3.1-8B")
    assert with_openai.find("openai/") is None


def test_an_unknown_model_can_be_reported_with_another_status() -> None:
    with pytest.raises(ApiError) as caught:
        ModelRouter(demo=DemoProvider()).route("gpt-4o", not_found_status=404)
    assert (caught.value.status, caught.value.code) == (404, "model_not_found")
    assert "Available models: demo." in caught.value.message


def test_a_disabled_demo_model_is_not_routed() -> None:
    router = ModelRouter(demo=None)
    assert not router.has_models
    with pytest.raises(ApiError):
        router.route("demo")


def test_a_catalog_alias_routes_to_its_provider_with_its_fallbacks_in_order() -> None:
    anthropic, openai = _Named("anthropic"), _Named("openai")
    catalog = {
        "smart": (
            _entry(name="smart", provider="anthropic", model="claude-sonnet-4-5", fallbacks=["backup", "demo"]),
            anthropic,
        ),
        "backup": (_entry(name="backup", provider="openai", model="gpt-4o", fallbacks=["smart"]), openai),
    }
    router = ModelRouter(demo=DemoProvider(), catalog=catalog)  # type: ignore[arg-type]
    route = router.route("smart")
    assert [(r.name, r.provider.name, r.upstream_model) for r in route.chain()] == [
        ("smart", "anthropic", "claude-sonnet-4-5"),
        ("backup", "openai", "gpt-4o"),
        ("demo", "demo", "demo"),
    ]
    # A fallback's own fallbacks are not followed.
    assert route.fallbacks[0].fallbacks == ()


def test_the_model_list_shows_aliases_demo_and_one_pattern_per_provider() -> None:
    catalog = {
        "smart": (_entry(name="smart", provider="anthropic", model="claude-x", fallbacks=["demo"]), _Named("anthropic"))
    }
    router = ModelRouter(demo=DemoProvider(), providers=_providers("openai", "gemini"), catalog=catalog)  # type: ignore[arg-type]
    listed = router.available()
    assert [entry["id"] for entry in listed] == ["smart", "demo", "openai/*", "gemini/*"]
    assert listed[0] == {
        "id": "smart",
        "provider": "anthropic",
        "upstreamModel": "claude-x",
        "fallbacks": ["demo"],
        "images": True,  # Claude's known default (model_facts)
    }


@pytest.mark.parametrize(
    ("fields", "configured"),
    [
        ({}, False),
        ({"openai_api_key": ""}, False),
        ({"openai_api_key": "sk-x"}, True),
        ({"openai_base_url": "http://127.0.0.1:11434/v1/"}, True),
        ({"openai_base_url": "https://api.openai.com/v1/"}, False),
    ],
)
def test_openai_counts_as_configured_with_a_key_or_another_base_url(fields: dict[str, str], configured: bool) -> None:
    assert CompletionSettings(**fields).openai_configured is configured  # type: ignore[arg-type]


@pytest.mark.parametrize("key", ["", "   ", "\t\n"])
def test_a_blank_api_key_means_no_key(key: str) -> None:
    assert CompletionSettings(openai_api_key=key).openai_api_key is None  # type: ignore[arg-type]


def test_the_base_url_loses_its_spaces_and_trailing_slash() -> None:
    settings = CompletionSettings(openai_base_url=" http://127.0.0.1:8000/v1/ ")
    assert settings.openai_base_url == "http://127.0.0.1:8000/v1"


@pytest.mark.parametrize("url", ["127.0.0.1:11434/v1", "ftp://llm.example/v1", ""])
def test_a_base_url_that_is_not_http_is_refused_at_start_up(url: str) -> None:
    with pytest.raises(ValidationError) as caught:
        CompletionSettings(openai_base_url=url)
    assert "http:// or https://" in str(caught.value)


def test_settings_are_read_from_completion_environment_variables(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("COMPLETION_OPENAI_API_KEY", "")
    monkeypatch.setenv("COMPLETION_OPENAI_BASE_URL", "http://127.0.0.1:11434/v1/")
    settings = CompletionSettings()
    assert (settings.openai_api_key, settings.openai_base_url) == (None, "http://127.0.0.1:11434/v1")
    assert settings.openai_configured
