"""The two places Gemini's ``generateContent`` is served: the Gemini API (an API key) and Vertex AI (a bearer token).

Both take the same body; an ``Endpoint`` says the URL of a model's method and the credentials of one call.
The provider names and the tool name rule of the two are here, where every other module of the package
takes them from.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass
from typing import Protocol

from completion_service.providers.tool_names import NameRule
from suite_common.echo import clip
from suite_common.errors import ApiError

__all__ = [
    "DEFAULT_BASE_URL",
    "PROVIDER_NAME",
    "TOOL_NAMES",
    "VERTEX_PROVIDER_NAME",
    "Endpoint",
    "GeminiApi",
    "VertexAi",
]

PROVIDER_NAME = "gemini"
TOOL_NAMES = NameRule("a-zA-Z0-9_.-", 64, first="a-zA-Z_")
"""``FunctionDeclaration.name`` as both the Gemini API and Vertex AI accept it: a letter or ``_`` first, then
letters, digits, ``_``, ``.`` and ``-``, 64 at most (the Gemini API also takes ``:``, Vertex AI does not say so)."""
VERTEX_PROVIDER_NAME = "vertex"
DEFAULT_BASE_URL = "https://generativelanguage.googleapis.com"

_MODEL_ID = re.compile(r"[A-Za-z0-9][A-Za-z0-9._@-]*")
_LOCATION = re.compile(r"[a-z0-9-]+")
_PROJECT = re.compile(r"[a-z0-9][a-z0-9.:-]*")


class Endpoint(Protocol):
    """Where and with which credentials ``generateContent`` is called."""

    @property
    def label(self) -> str: ...

    @property
    def credentials_hint(self) -> str: ...

    @property
    def sends_call_ids(self) -> bool: ...

    @property
    def base_url(self) -> str: ...

    def url(self, model: str, *, stream: bool) -> str: ...

    def credentials(self) -> tuple[dict[str, str], str | None]:
        """``(headers, secret to scrub)`` for one call."""
        ...


def _method(stream: bool) -> str:
    return ":streamGenerateContent?alt=sse" if stream else ":generateContent"


def _invalid_model(model: str, label: str) -> ApiError:
    return ApiError(400, "invalid_request", f"{clip(model)!r} is not a {label} model id.")


@dataclass(frozen=True)
class GeminiApi:
    """The Gemini API: ``v1beta/models/{model}`` (or ``tunedModels/``), the key in ``x-goog-api-key``."""

    base_url: str
    api_key: str | None
    label: str = "Gemini"
    credentials_hint: str = "COMPLETION_GEMINI_API_KEY"
    sends_call_ids: bool = True

    def url(self, model: str, *, stream: bool) -> str:
        collection, slash, name = model.partition("/")
        if not slash:
            collection, name = "models", model
        if collection not in ("models", "tunedModels") or not _MODEL_ID.fullmatch(name):
            raise _invalid_model(model, self.label)
        return f"{self.base_url}/v1beta/{collection}/{name}{_method(stream)}"

    def credentials(self) -> tuple[dict[str, str], str | None]:
        return ({"x-goog-api-key": self.api_key} if self.api_key else {}), self.api_key


@dataclass(frozen=True)
class VertexAi:
    """Vertex AI: a project's and location's publisher model, an OAuth2 bearer token asked for at every call."""

    base_url: str
    project: str
    location: str
    token_source: Callable[[], str]
    label: str = "Vertex AI"
    credentials_hint: str = "COMPLETION_VERTEX_ACCESS_TOKEN (or its _FILE) and the IAM roles of the token's account"
    sends_call_ids: bool = False

    def url(self, model: str, *, stream: bool) -> str:
        if not _MODEL_ID.fullmatch(model):
            raise _invalid_model(model, self.label)
        return (
            f"{self.base_url}/v1/projects/{self.project}/locations/{self.location}"
            f"/publishers/google/models/{model}{_method(stream)}"
        )

    def credentials(self) -> tuple[dict[str, str], str | None]:
        try:
            token = self.token_source().strip()
        except Exception as error:  # a token file being rewritten, unreadable, gone
            raise ApiError(
                502, "auth_failed", f"The Vertex AI access token could not be read: {type(error).__name__}."
            ) from None
        if not token:
            raise ApiError(
                502, "auth_failed", "There is no Vertex AI access token: check COMPLETION_VERTEX_ACCESS_TOKEN(_FILE)."
            )
        return {"Authorization": f"Bearer {token}"}, token

    @classmethod
    def at(cls, project: str, location: str, token_source: Callable[[], str], base_url: str | None) -> VertexAi:
        """The endpoint of ``project`` in ``location``; a ``ValueError`` for either that would change the URL."""
        if not _PROJECT.fullmatch(project):
            raise ValueError(f"{project!r} is not a Google Cloud project id (COMPLETION_VERTEX_PROJECT)")
        if not _LOCATION.fullmatch(location):
            raise ValueError(f"{location!r} is not a Vertex AI location (COMPLETION_VERTEX_LOCATION)")
        # The global endpoint has no region in its host name.
        host = "aiplatform.googleapis.com" if location == "global" else f"{location}-aiplatform.googleapis.com"
        return cls((base_url or f"https://{host}").rstrip("/"), project, location, token_source)
