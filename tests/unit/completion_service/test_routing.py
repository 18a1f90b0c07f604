"""Model names to providers, and what an unknown name tells the caller."""

from __future__ import annotations

import pytest
from pydantic import ValidationError

from completion_service.providers.demo import DemoProvider
from completion_service.routing import ModelRouter
from completion_service.settings import CompletionSettings
from suite_common.errors import ApiError


class _OpenAI:
    name = "openai"


def test_demo_routes_to_the_demo_model() -> None:
    route = ModelRouter(demo=DemoProvider()).route("demo")
    assert (route.provider.name, route.upstream_model) == ("demo", "demo")


@pytest.mark.parametrize(("model", "upstream"), [("openai/gpt-4o-mini", "gpt-4o-mini"), ("gpt-4o", "gpt-4o")])
def test_prefixed_and_bare_names_route_to_a_configured_openai(model: str, upstream: str) -> None:
    route = ModelRouter(demo=DemoProvider(), openai=_OpenAI()).route(model)  # type: ignore[arg-type]
    assert (route.provider.name, route.upstream_model) == ("openai", upstream)


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
    with_openai = ModelRouter(openai=_OpenAI())  # type: ignore[arg-type]
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
