"""Model names to providers, and what an unknown name tells the caller."""

from __future__ import annotations

import pytest

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
