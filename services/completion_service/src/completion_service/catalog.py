"""The model catalog: aliases an operator gives to provider models, with credentials and fallbacks.

Read once at start-up from ``COMPLETION_MODELS`` (JSON) and ``COMPLETION_MODELS_FILE`` (JSON or
TOML), in that order. An entry::

    {"name": "smart", "provider": "anthropic", "model": "claude-sonnet-4-5",
     "apiKey": "${env:TEAM_ANTHROPIC_KEY}", "fallbacks": ["openai/gpt-4o"],
     "prices": {"inputPerMillionUsd": 3, "outputPerMillionUsd": 15}, "reasoning": true,
     "contextTokens": 200000}

Credentials are references (``${env:NAME}`` or ``${file:/path}``), resolved when the service
starts; a literal key is accepted too, for local files that are never committed.
"""

from __future__ import annotations

import json
import os
import re
import tomllib
from pathlib import Path
from typing import Annotated, Any, Literal

from pydantic import AfterValidator, Field, TypeAdapter, ValidationError, field_validator, model_validator

from suite_common.settings import http_url
from suite_common.wire import ModelPrices, WireModel

__all__ = [
    "PROVIDER_KINDS",
    "RESPONSES_KIND",
    "ROUTE_KINDS",
    "CatalogError",
    "CatalogModel",
    "ProviderKind",
    "WireApi",
    "load_catalog",
    "resolve_secret",
]

ProviderKind = Literal["openai", "anthropic", "gemini", "vertex", "bedrock"]
PROVIDER_KINDS: tuple[ProviderKind, ...] = ("openai", "anthropic", "gemini", "vertex", "bedrock")
RESPONSES_KIND = "openai-responses"
"""``openai-responses/<model>``: the OpenAI provider's settings, spoken to in the Responses API."""
ROUTE_KINDS: tuple[str, ...] = (*PROVIDER_KINDS, RESPONSES_KIND)
"""Every ``<kind>/<model>`` prefix a model name may start with."""
WireApi = Literal["chat", "responses"]

_REFERENCE = re.compile(r"^\$\{(env|file):(.+)\}$")


class CatalogError(ValueError):
    """The catalog cannot be used; the message says where and why, never a secret."""


class CatalogModel(WireModel):
    name: str = Field(min_length=1)
    """What callers put in ``model``."""
    provider: ProviderKind
    model: str = Field(min_length=1)
    """The provider's own id of the model."""
    api_key: str | None = None
    """``${env:NAME}``, ``${file:/path}`` or the key itself; unset: the provider's key from settings."""
    base_url: Annotated[str | None, AfterValidator(http_url)] = None
    """Another endpoint than the provider's default (an OpenAI-compatible server, a proxy)."""
    fallbacks: list[str] = Field(default_factory=list)
    """Model names tried in order when this one fails with a retryable error after its retries."""
    description: str = ""
    api: WireApi = "chat"
    """For ``provider: openai`` only: ``responses`` speaks OpenAI's Responses API (``/responses``) rather than
    Chat Completions (``/chat/completions``), for reasoning summaries and reasoning kept between rounds."""
    prices: ModelPrices | None = None
    """US dollars per million input and output tokens; the completions this entry answers carry their
    ``usage.costUsd`` at them. Unset: its completions have no cost."""
    reasoning: bool | None = None
    """The model can reason, so a request's ``reasoning`` reaches it; unset: said by the model's family
    (``controls.controls_by_name``). A model that cannot ignores it, with a warning in the answer."""
    verbosity: bool | None = None
    """The model takes OpenAI's ``verbosity``; unset: said by the model's family (OpenAI's gpt-5)."""
    context_tokens: int | None = Field(default=None, gt=0)
    """The model's context window in tokens (input and output together); unset: the provider's known window for
    the model (``model_facts``), else unknown."""
    images: bool | None = None
    """The model takes images in messages; unset: as ``model_facts`` knows the model, else unknown."""

    @field_validator("name")
    @classmethod
    def _no_slash_prefix_clash(cls, name: str) -> str:
        kind = name.split("/", 1)[0]
        if "/" in name and kind in ROUTE_KINDS:
            raise ValueError(f"{name!r} would hide the {kind}/<model> names; pick a name without that prefix")
        return name

    @model_validator(mode="after")
    def _api_of_openai_only(self) -> CatalogModel:
        if self.api != "chat" and self.provider != "openai":
            raise ValueError(f"api {self.api!r} is for provider 'openai' only")
        return self


_Entries = TypeAdapter(list[CatalogModel])


def resolve_secret(reference: str, *, what: str) -> str:
    """The value ``reference`` points at (``${env:NAME}``, ``${file:/path}``), or ``reference`` itself."""
    match = _REFERENCE.match(reference.strip())
    if match is None:
        return reference
    kind, target = match.groups()
    if kind == "env":
        value = os.environ.get(target)
        if not value:
            raise CatalogError(f"{what}: the environment variable {target} is not set")
        return value
    try:
        value = Path(target).read_text().strip()
    except OSError as error:
        raise CatalogError(f"{what}: cannot read {target}: {error.strerror or error}") from None
    if not value:
        raise CatalogError(f"{what}: {target} is empty")
    return value


def _entries(raw: Any, source: str) -> list[CatalogModel]:
    if isinstance(raw, dict):
        raw = raw.get("models", [])
    try:
        return _Entries.validate_python(raw)
    except ValidationError as error:
        problems = "; ".join(
            f"{'.'.join(str(part) for part in problem['loc']) or 'models'}: {problem['msg']}"
            for problem in error.errors(include_url=False, include_input=False)
        )
        raise CatalogError(f"{source}: {problems}") from None


def _parse_file(path: Path) -> Any:
    try:
        text = path.read_text()
    except OSError as error:
        raise CatalogError(f"COMPLETION_MODELS_FILE: cannot read {path}: {error.strerror or error}") from None
    try:
        return tomllib.loads(text) if path.suffix == ".toml" else json.loads(text)
    except (ValueError, tomllib.TOMLDecodeError) as error:
        raise CatalogError(
            f"COMPLETION_MODELS_FILE: {path} is not valid {path.suffix[1:] or 'JSON'}: {error}"
        ) from None


def load_catalog(inline: str | None, path: Path | None) -> list[CatalogModel]:
    """The entries of ``COMPLETION_MODELS`` then of ``COMPLETION_MODELS_FILE``; names are unique and every
    fallback names a catalog entry or a ``<provider>/<model>`` name."""
    entries: list[CatalogModel] = []
    if inline:
        try:
            raw = json.loads(inline)
        except ValueError as error:
            raise CatalogError(f"COMPLETION_MODELS is not valid JSON: {error}") from None
        entries += _entries(raw, "COMPLETION_MODELS")
    if path is not None:
        entries += _entries(_parse_file(path), f"COMPLETION_MODELS_FILE ({path})")
    names: set[str] = set()
    for entry in entries:
        if entry.name in names:
            raise CatalogError(f"the model {entry.name!r} is in the catalog twice")
        names.add(entry.name)
    for entry in entries:
        for fallback in entry.fallbacks:
            if fallback == entry.name:
                raise CatalogError(f"the model {entry.name!r} lists itself as a fallback")
            if fallback not in names and "/" not in fallback and fallback != "demo":
                raise CatalogError(
                    f"the fallback {fallback!r} of {entry.name!r} is neither in the catalog nor a "
                    "<provider>/<model> name"
                )
    return entries
