"""What completion-service knows of a model: its context window and whether it takes images, by its id or its
catalog entry, as ``GET /api/v1/models`` and ``/api/v1/models/{model}`` tell them."""

from __future__ import annotations

import pytest

from completion_service.catalog import CatalogModel
from completion_service.model_facts import UNKNOWN, ModelFacts, facts_by_name
from completion_service.providers.base import Provider
from completion_service.providers.demo import DemoProvider
from completion_service.routing import ModelRouter


class _Named:
    def __init__(self, name: str) -> None:
        self.name = name


@pytest.mark.parametrize(
    ("kind", "model", "window", "images"),
    [
        ("openai", "gpt-4o-2024-08-06", 128_000, True),
        ("openai", "gpt-4.1-mini", 1_047_576, True),
        ("openai-responses", "gpt-5", 400_000, True),
        ("openai", "o3", 200_000, True),
        ("openai", "o3-mini", 200_000, False),
        ("openai", "gpt-3.5-turbo", 16_385, False),
        ("anthropic", "claude-sonnet-4-5", 200_000, True),
        ("anthropic", "claude-3-5-haiku-latest", 200_000, True),
        ("bedrock", "us.anthropic.claude-3-7-sonnet-20250219-v1:0", 200_000, True),
        ("bedrock", "amazon.nova-micro-v1:0", 128_000, False),
        ("gemini", "gemini-2.5-flash", 1_048_576, True),
        ("vertex", "gemini-1.5-pro-002", 2_097_152, True),
    ],
)
def test_the_providers_known_models_have_their_window(kind: str, model: str, window: int, images: bool) -> None:
    assert facts_by_name(kind, model) == ModelFacts(window, images)


@pytest.mark.parametrize(("kind", "model"), [("openai", "llama3.1:8b"), ("gemini", "gpt-4o"), ("anthropic", "x")])
def test_a_model_the_table_does_not_know_has_no_window(kind: str, model: str) -> None:
    assert facts_by_name(kind, model) == UNKNOWN


def test_a_catalog_entry_sets_its_own_window_and_keeps_the_known_rest() -> None:
    entry = CatalogModel.model_validate(
        {"name": "small", "provider": "openai", "model": "gpt-4o", "contextTokens": 32_768}
    )
    openai: Provider = _Named("openai")  # type: ignore[assignment]
    router = ModelRouter(demo=DemoProvider(), providers={"openai": openai}, catalog={"small": (entry, openai)})
    assert router.route("small").facts == ModelFacts(32_768, True)
    listed = {str(model["id"]): model for model in router.available()}
    assert (listed["small"]["contextTokens"], listed["small"]["images"]) == (32_768, True)
    assert listed["demo"]["contextTokens"] == 32_768
    assert "contextTokens" not in listed["openai/*"]


def test_a_catalog_window_must_be_positive() -> None:
    with pytest.raises(ValueError, match="greater than 0"):
        CatalogModel.model_validate({"name": "m", "provider": "openai", "model": "gpt-4o", "contextTokens": 0})
