"""Model names to providers: ``demo``, ``openai/<id>``, and bare names once OpenAI is configured."""

from __future__ import annotations

from dataclasses import dataclass

from completion_service.providers.base import Provider
from suite_common.errors import ApiError

__all__ = ["OPENAI_PREFIX", "ModelRoute", "ModelRouter"]

OPENAI_PREFIX = "openai/"

_CONFIGURE = (
    "Set COMPLETION_OPENAI_API_KEY (OpenAI) or COMPLETION_OPENAI_BASE_URL (any OpenAI-compatible "
    "server: vLLM, Ollama, LM Studio) to use other models."
)


@dataclass(frozen=True)
class ModelRoute:
    """Who answers a model name, and under which name the provider knows it."""

    provider: Provider
    upstream_model: str


class ModelRouter:
    """``demo`` -> the demo model; ``openai/<id>`` -> ``<id>`` at the OpenAI-compatible endpoint;
    any other name -> that endpoint too, when it is configured.

    A provider passed as ``None`` is not available (demo disabled, OpenAI not configured).
    """

    def __init__(self, *, demo: Provider | None = None, openai: Provider | None = None) -> None:
        self._demo = demo
        self._openai = openai

    @property
    def has_models(self) -> bool:
        return self._demo is not None or self._openai is not None

    def find(self, model: str) -> ModelRoute | None:
        """The route of ``model``, or ``None`` when no available provider answers it."""
        if model == "demo" and self._demo is not None:
            return ModelRoute(self._demo, model)
        if self._openai is not None:
            upstream = model.removeprefix(OPENAI_PREFIX)
            if upstream:
                return ModelRoute(self._openai, upstream)
        return None

    def route(self, model: str, *, not_found_status: int = 400) -> ModelRoute:
        """The route of ``model``, or a ``model_not_found`` error (``not_found_status``) that says what is
        available and how to configure more."""
        found = self.find(model)
        if found is None:
            raise ApiError(not_found_status, "model_not_found", self._not_found_message(model))
        return found

    def _not_found_message(self, model: str) -> str:
        names = ", ".join(entry["id"] for entry in self.available()) or "none"
        message = f"Unknown model {model!r}. Available models: {names}."
        if self._openai is None:
            message += " " + _CONFIGURE
        return message

    def available(self) -> list[dict[str, str]]:
        """What ``GET /api/v1/models`` lists."""
        models = []
        if self._demo is not None:
            models.append(
                {
                    "id": "demo",
                    "provider": self._demo.name,
                    "description": "A deterministic stand-in that is not an LLM: calls the tools that share a "
                    "word with the question, then cites what they returned.",
                }
            )
        if self._openai is not None:
            models.append(
                {
                    "id": OPENAI_PREFIX + "*",
                    "provider": self._openai.name,
                    "description": "Any model of the configured OpenAI-compatible endpoint, as openai/<model> "
                    "or by its bare name (gpt-4o, llama3.1, ...).",
                }
            )
        return models
