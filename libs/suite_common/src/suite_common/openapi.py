"""``GET /openapi.json``: each service's OpenAPI 3.1 document, built at start-up from its routes.

A route declares its wire models where it is declared, so that adding a route and documenting it
are one edit::

    ApiRoute("/api/v1/agent/run", run_agent, method="POST", operation=Operation(
        "Run the agent loop", body=AgentRunRequest, answer=AgentRunResult, events=RunEvent))

``add_openapi(app, ...)`` then walks the app's routes once and serves the document from memory.
Schemas come from the pydantic models (JSON Schema 2020-12, as OpenAPI 3.1 takes it): request
bodies as they are validated, answers as they are written. Every operation answers errors with
``ErrorResponse`` (``{"error": {"code", "message"}}``); an SSE answer is ``text/event-stream``,
its ``schema`` describing one event, whose ``data`` is JSON (``contentSchema``). A plain ``Route`` is
still listed, without schemas; an ASGI app mounted as a route (``/mcp``, which speaks MCP, not this
API) is left out.

Authentication is documented from the paths the service's middleware protects, given once (``security``):
a shared-secret header (``SharedSecretScheme``) or a bearer key (``BearerScheme``, with what its middleware
answers); every operation under those paths gets the security requirement and those errors, the others none.
"""

from __future__ import annotations

import inspect
import json
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from pydantic import TypeAdapter
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import BaseRoute, Route

from suite_common.wire import ErrorResponse

__all__ = [
    "OPENAPI_PATH",
    "ApiRoute",
    "BearerScheme",
    "Operation",
    "SharedSecretScheme",
    "add_openapi",
    "openapi_document",
]

OPENAPI_PATH = "/openapi.json"
_REF_TEMPLATE = "#/components/schemas/{model}"
_PATH_PARAMETER = re.compile(r"{(\w+)(:\w+)?}")
_BODY_ERRORS = {
    400: "The body is not valid JSON, or not a valid request (the message names the field).",
    413: "The body is larger than the service accepts.",
    415: "The body is not JSON.",
}


@dataclass(frozen=True)
class Operation:
    """What one route takes and answers, for its OpenAPI operation."""

    summary: str
    body: Any = None
    """The type of the JSON request body (a wire model); ``None``: no body."""
    answer: Any = None
    """The type of the JSON answer (``status``); ``None``: a JSON value not described further."""
    events: Any = None
    """The type of each SSE event's ``data``, when the answer may be ``text/event-stream``."""
    events_end: str | None = None
    """The ``data`` of a last event that is not JSON (OpenAI's ``[DONE]``), if the stream ends with one."""
    status: int = 200
    media_type: str = "application/json"
    """Of ``answer``; anything else than JSON is described as text."""
    answers: Mapping[int, Any] = field(default_factory=dict)
    """Other statuses answered with a body of their own shape (not the error shape): ``{503: Readiness}``."""
    errors: Mapping[int, str] = field(default_factory=dict)
    """Statuses answered with the error body, and when."""
    example: Mapping[str, Any] | None = None
    """An example request body."""
    error: Any = ErrorResponse
    """The shape of the operation's error bodies (a front speaking another API's wire format has its own)."""
    error_media_type: str = "application/json"
    """Of the error bodies: a page a browser shows (``text/html``) is described as text."""


class ApiRoute(Route):
    """A starlette ``Route`` for one method, with the ``Operation`` that documents it."""

    def __init__(self, path: str, endpoint: Any, *, method: str, operation: Operation) -> None:
        super().__init__(path, endpoint, methods=[method])
        self.operation = operation


@dataclass(frozen=True)
class SharedSecretScheme:
    """The shared-secret header that ``suite_common.auth.SharedSecretMiddleware`` requires under ``prefix``."""

    header: str
    prefix: str


@dataclass(frozen=True)
class BearerScheme:
    """A key sent as ``Authorization: Bearer <key>``, required under ``prefixes`` by the service's middleware, which
    answers ``errors`` (status -> when) there, besides what each operation answers itself."""

    prefixes: tuple[str, ...]
    errors: Mapping[int, str]
    open_paths: tuple[str, ...] = ()
    """Paths under ``prefixes`` the middleware serves without a key (a browser's redirect back from elsewhere)."""


Security = SharedSecretScheme | BearerScheme
_SCHEME_NAMES = {SharedSecretScheme: "sharedSecret", BearerScheme: "callerKey"}


def _protects(security: Security | None, path: str) -> bool:
    if isinstance(security, SharedSecretScheme):
        return path.startswith(security.prefix)
    return security is not None and path.startswith(security.prefixes) and path not in security.open_paths


def _scheme(security: Security) -> dict[str, Any]:
    if isinstance(security, SharedSecretScheme):
        return {"type": "apiKey", "in": "header", "name": security.header}
    return {
        "type": "http",
        "scheme": "bearer",
        "description": "The caller key. Required when the service has caller keys (an open service takes any request).",
    }


class _Schemas:
    """Collects the types an app's operations refer to, then makes their schemas in one pass."""

    def __init__(self) -> None:
        self._inputs: list[tuple[tuple[int, str], Any, TypeAdapter[Any]]] = []
        self._seen: set[tuple[int, str]] = set()

    def ref(self, type_: Any, mode: str) -> dict[str, Any]:
        """A placeholder for ``type_``'s schema in ``mode`` (validation for bodies, serialization for answers)."""
        key = (id(type_), mode)
        if key not in self._seen:
            self._seen.add(key)
            self._inputs.append((key, mode, TypeAdapter(type_)))
        return {"$schema_key": key}

    def resolve(self, document: Any) -> tuple[Any, dict[str, Any]]:
        """``document`` with each placeholder replaced by its schema, and the shared definitions."""
        schemas, definitions = TypeAdapter.json_schemas(self._inputs, by_alias=True, ref_template=_REF_TEMPLATE)
        by_key = {key: schema for (key, _), schema in schemas.items()}

        def replace(value: Any) -> Any:
            if isinstance(value, dict):
                if "$schema_key" in value:
                    return by_key[value["$schema_key"]]
                return {name: replace(item) for name, item in value.items()}
            if isinstance(value, list):
                return [replace(item) for item in value]
            return value

        return replace(document), definitions.get("$defs", {})


def _error(
    schemas: _Schemas, description: str, model: Any = ErrorResponse, media_type: str = "application/json"
) -> dict[str, Any]:
    if media_type != "application/json":
        return {"description": description, "content": {media_type: {"schema": {"type": "string"}}}}
    schema = schemas.ref(model, "serialization")
    return {"description": description, "content": {"application/json": {"schema": schema}}}


def _sse_event(data: dict[str, Any], end: str | None) -> dict[str, Any]:
    """One Server-Sent Event whose ``data`` is JSON of the schema ``data`` (as OpenAPI 3.1 tools read the
    ``schema`` of ``text/event-stream``: per event; 3.2 would call it ``itemSchema``), or the text ``end``."""
    payload: dict[str, Any] = {"type": "string", "contentMediaType": "application/json", "contentSchema": data}
    if end is not None:
        payload = {"anyOf": [payload, {"const": end}]}
    return {
        "type": "object",
        "required": ["data"],
        "properties": {
            "event": {"type": "string", "description": "The event's type, as in its data."},
            "id": {"type": "string"},
            "data": payload,
        },
    }


def _with_refusals(security: Security, errors: Mapping[int, str]) -> dict[int, str]:
    """An operation's errors with its middleware's refusals: a status both answer says both reasons."""
    if isinstance(security, SharedSecretScheme):
        return {401: f"The {security.header} header is missing or wrong.", **errors}
    refusals = dict(security.errors)
    merged = {status: f"{when} {errors[status]}" if status in errors else when for status, when in refusals.items()}
    return merged | {status: when for status, when in errors.items() if status not in refusals}


def _operation(route: Route, method: str, schemas: _Schemas, security: Security | None) -> dict[str, Any]:
    spec = route.operation if isinstance(route, ApiRoute) else Operation(summary=route.name.replace("_", " "))
    description = inspect.getdoc(route.endpoint)
    operation: dict[str, Any] = {"operationId": f"{method.lower()}_{route.name}", "summary": spec.summary}
    if description:
        operation["description"] = description
    parameters = [
        {"name": name, "in": "path", "required": True, "schema": {"type": "string"}}
        for name, _ in _PATH_PARAMETER.findall(route.path)
    ]
    if parameters:
        operation["parameters"] = parameters
    responses: dict[str, Any] = {}
    content: dict[str, Any] = {}
    if spec.media_type == "application/json":
        answer = schemas.ref(spec.answer, "serialization") if spec.answer is not None else {}
        content["application/json"] = {"schema": answer}
    else:
        content[spec.media_type] = {"schema": {"type": "string"}}
    if spec.events is not None:
        content["text/event-stream"] = {
            "schema": _sse_event(schemas.ref(spec.events, "serialization"), spec.events_end)
        }
    # 204 No Content has no body to describe.
    responses[str(spec.status)] = {"description": spec.summary, **({"content": content} if spec.status != 204 else {})}
    for status, type_ in spec.answers.items():
        schema = schemas.ref(type_, "serialization")
        responses[str(status)] = {"description": f"HTTP {status}", "content": {"application/json": {"schema": schema}}}
    if spec.body is not None:
        media: dict[str, Any] = {"schema": schemas.ref(spec.body, "validation")}
        if spec.example is not None:
            media["example"] = dict(spec.example)
        operation["requestBody"] = {"required": True, "content": {"application/json": media}}
        for status, when in _BODY_ERRORS.items():
            responses[str(status)] = _error(schemas, when, spec.error, spec.error_media_type)
    errors = dict(spec.errors)
    if security is not None and _protects(security, route.path):
        operation["security"] = [{_SCHEME_NAMES[type(security)]: []}]
        errors = _with_refusals(security, errors)
    for status, when in sorted(errors.items()):
        responses[str(status)] = _error(schemas, when, spec.error, spec.error_media_type)
    responses["default"] = _error(schemas, "Any other error, with its status.", spec.error, spec.error_media_type)
    operation["responses"] = responses
    return operation


def openapi_document(
    routes: Sequence[BaseRoute], *, title: str, version: str, security: Security | None = None
) -> dict[str, Any]:
    """The OpenAPI 3.1 document of ``routes`` (see the module's docstring)."""
    schemas = _Schemas()
    paths: dict[str, dict[str, Any]] = {}
    for route in routes:
        if not isinstance(route, Route) or route.methods is None:
            continue  # an ASGI app (such as the MCP endpoint), not an operation of this API
        if not route.include_in_schema:
            continue  # a route that only says "not here" in another API's words
        path = _PATH_PARAMETER.sub(r"{\1}", route.path)
        for method in sorted(route.methods - {"HEAD"}):
            paths.setdefault(path, {})[method.lower()] = _operation(route, method, schemas, security)
    resolved_paths, definitions = schemas.resolve(paths)
    components: dict[str, Any] = {"schemas": definitions}
    if security is not None:
        components["securitySchemes"] = {_SCHEME_NAMES[type(security)]: _scheme(security)}
    return {
        "openapi": "3.1.0",
        "info": {"title": title, "version": version},
        "paths": resolved_paths,
        "components": components,
    }


def add_openapi(app: Starlette, *, title: str, version: str = "1", security: Security | None = None) -> dict[str, Any]:
    """Serve ``GET /openapi.json`` on ``app``: its routes' document, built once, here."""

    async def openapi(_: Request) -> Response:
        """This document."""
        return Response(body, media_type="application/json")

    route = ApiRoute(OPENAPI_PATH, openapi, method="GET", operation=Operation("The service's OpenAPI document"))
    document = openapi_document([*app.routes, route], title=title, version=version, security=security)
    body = json.dumps(document).encode()
    app.router.routes.append(route)
    return document
