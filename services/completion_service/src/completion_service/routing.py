"""Model names to providers: catalog aliases, ``<provider>/<model>``, ``demo``, and bare names.

A name resolves, in order, to: a catalog entry; ``demo``; ``<provider>/<model>`` for a configured
provider (``openai``, ``anthropic``, ``gemini``, ``vertex``, ``bedrock``, and ``openai-responses``: the
OpenAI provider in the Responses API); any other name to the
OpenAI-compatible endpoint when one is configured. A catalog entry's fallbacks come with its route.
``build_router`` makes the router of the settings, its providers built by ``providers.registry``.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field

import httpx

from completion_service.catalog import RESPONSES_KIND, ROUTE_KINDS, CatalogError, CatalogModel, load_catalog
from completion_service.controls import NO_CONTROLS, ModelControls, controls_by_name
from completion_service.model_facts import DEMO_FACTS, UNKNOWN, ModelFacts, facts_by_name, with_overrides
from completion_service.providers.base import Provider
from completion_service.providers.demo import DemoProvider
from completion_service.providers.registry import ProviderRegistry
from completion_service.settings import CompletionSettings
from suite_common.echo import clip
from suite_common.errors import ApiError
from suite_common.wire import ModelPrices

__all__ = ["ModelRoute", "ModelRouter", "build_router", "facts_fields"]

_CONFIGURE = (
    "Configure a provider to use other models: COMPLETION_OPENAI_API_KEY or COMPLETION_OPENAI_BASE_URL "
    "(OpenAI and compatible servers), COMPLETION_ANTHROPIC_API_KEY, COMPLETION_GEMINI_API_KEY, "
    "COMPLETION_VERTEX_PROJECT, COMPLETION_BEDROCK_REGION, or a model catalog (COMPLETION_MODELS)."
)

_DEMO_DESCRIPTION = (
    "A deterministic stand-in that is not an LLM: calls the tools that share the most words with the question, "
    "then cites what they returned."
)


@dataclass(frozen=True)
class ModelRoute:
    """Who answers a model name, under which name the provider knows it, and who answers when it cannot."""

    name: str
    """The name reported back as ``model`` (the caller's, or the fallback's that answered)."""
    provider: Provider
    upstream_model: str
    fallbacks: tuple[ModelRoute, ...] = field(default=())
    prices: ModelPrices | None = None
    """The catalog entry's prices, at which this route's answers are priced; ``None``: not a priced entry."""
    controls: ModelControls = NO_CONTROLS
    """The generation controls the model takes; the others are taken out of its requests, with a warning."""
    facts: ModelFacts = UNKNOWN
    """Its context window and whether it takes images: the catalog entry's, else the known ones (``model_facts``)."""

    def chain(self) -> list[ModelRoute]:
        """This route, then its fallbacks in order."""
        return [self, *self.fallbacks]


@dataclass(frozen=True)
class _Alias:
    entry: CatalogModel
    provider: Provider


class ModelRouter:
    """``providers`` maps a provider kind to its configured adapter; ``catalog`` maps aliases to theirs
    (an entry with its own key or endpoint has its own adapter)."""

    def __init__(
        self,
        *,
        demo: Provider | None = None,
        providers: Mapping[str, Provider] | None = None,
        catalog: Mapping[str, tuple[CatalogModel, Provider]] | None = None,
    ) -> None:
        self._demo = demo
        self._providers = dict(providers or {})
        self._aliases = {name: _Alias(entry, provider) for name, (entry, provider) in (catalog or {}).items()}

    @property
    def has_models(self) -> bool:
        return self._demo is not None or bool(self._providers) or bool(self._aliases)

    def find(self, model: str) -> ModelRoute | None:
        """The route of ``model`` with its fallbacks, or ``None`` when no available provider answers it."""
        alias = self._aliases.get(model)
        if alias is None:
            return self._direct(model)
        fallbacks = []
        for name in alias.entry.fallbacks:
            # A fallback's own fallbacks are not followed: a chain stays as short as the operator wrote it.
            target = self._aliases.get(name)
            route = self._alias_route(name, target) if target is not None else self._direct(name)
            if route is not None:
                fallbacks.append(route)
        return self._alias_route(model, alias, tuple(fallbacks))

    @staticmethod
    def _alias_route(name: str, alias: _Alias, fallbacks: tuple[ModelRoute, ...] = ()) -> ModelRoute:
        entry = alias.entry
        family = controls_by_name(entry.provider, entry.model)
        controls = ModelControls(
            reasoning=family.reasoning if entry.reasoning is None else entry.reasoning,
            verbosity=family.verbosity if entry.verbosity is None else entry.verbosity,
        )
        facts = with_overrides(
            facts_by_name(entry.provider, entry.model), context_tokens=entry.context_tokens, images=entry.images
        )
        return ModelRoute(name, alias.provider, entry.model, fallbacks, entry.prices, controls, facts)

    def _direct(self, model: str) -> ModelRoute | None:
        if model == "demo" and self._demo is not None:
            return ModelRoute(model, self._demo, model, facts=DEMO_FACTS)  # the demo takes no generation controls
        kind, slash, upstream = model.partition("/")
        if slash and kind in ROUTE_KINDS:
            provider = self._providers.get(kind)
            if provider is None or not upstream:
                return None
            return ModelRoute(
                model,
                provider,
                upstream,
                controls=controls_by_name(kind, upstream),
                facts=facts_by_name(kind, upstream),
            )
        openai = self._providers.get("openai")
        if openai is None:
            return None
        return ModelRoute(
            model, openai, model, controls=controls_by_name("openai", model), facts=facts_by_name("openai", model)
        )

    def route(self, model: str, *, not_found_status: int = 400) -> ModelRoute:
        """The route of ``model``, or a ``model_not_found`` error (``not_found_status``) that says what is
        available and how to configure more."""
        found = self.find(model)
        if found is None:
            raise ApiError(not_found_status, "model_not_found", self._not_found_message(model))
        return found

    def _not_found_message(self, model: str) -> str:
        names = ", ".join(str(entry["id"]) for entry in self.available()) or "none"
        message = f"Unknown model {clip(model)!r}. Available models: {names}."
        kind = model.partition("/")[0]
        if kind in ROUTE_KINDS and kind not in self._providers:
            message += f" The provider {kind!r} is not configured."  # one of ROUTE_KINDS
        if len(self._providers) < len(ROUTE_KINDS):
            message += " " + _CONFIGURE
        return message

    def available(self) -> list[dict[str, object]]:
        """What ``GET /api/v1/models`` lists: catalog entries, ``demo``, then one pattern per provider."""
        models: list[dict[str, object]] = []
        for name, alias in self._aliases.items():
            listed: dict[str, object] = {
                "id": name,
                "provider": alias.provider.name,
                "upstreamModel": alias.entry.model,
            }
            if alias.entry.fallbacks:
                listed["fallbacks"] = list(alias.entry.fallbacks)
            if alias.entry.description:
                listed["description"] = alias.entry.description
            if alias.entry.prices is not None:
                listed["prices"] = alias.entry.prices.model_dump(by_alias=True)
            models.append(listed | facts_fields(self._alias_route(name, alias).facts))
        if self._demo is not None:
            demo = {"id": "demo", "provider": self._demo.name, "description": _DEMO_DESCRIPTION}
            models.append(demo | facts_fields(DEMO_FACTS))
        for kind, provider in self._providers.items():
            description = f"Any model of the configured {kind} provider, as {kind}/<model id>"
            if kind == "openai":
                description += " or by its bare name (gpt-4o, llama3.1, ...)"
            elif kind == RESPONSES_KIND:
                description = f"Any model of the configured openai provider in the Responses API, as {kind}/<model id>"
            models.append({"id": f"{kind}/*", "provider": provider.name, "description": description + "."})
        return models


def facts_fields(facts: ModelFacts) -> dict[str, object]:
    """``facts`` as the fields of ``ModelInfo`` and ``ModelTarget`` (``contextTokens``, ``images``), the known ones."""
    fields: dict[str, object] = {}
    if facts.context_tokens is not None:
        fields["contextTokens"] = facts.context_tokens
    if facts.images is not None:
        fields["images"] = facts.images
    return fields


def build_router(settings: CompletionSettings, http: httpx.AsyncClient) -> ModelRouter:
    """Every configured provider and catalog entry; raises ``CatalogError`` on a configuration that cannot work."""
    registry = ProviderRegistry(settings, http)
    catalog = {
        entry.name: (entry, registry.for_entry(entry)) for entry in load_catalog(settings.models, settings.models_file)
    }
    router = ModelRouter(
        demo=DemoProvider() if settings.demo_enabled else None,
        providers=registry.defaults(),
        catalog=catalog,
    )
    for name, (entry, _) in catalog.items():
        for fallback in entry.fallbacks:
            if router.find(fallback) is None:
                raise CatalogError(f"the fallback {fallback!r} of {name!r} is not an available model")
    return router
