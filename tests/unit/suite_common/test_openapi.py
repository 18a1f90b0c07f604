"""The OpenAPI document a service builds from its routes: schemas from the wire models, errors, SSE, security."""

from __future__ import annotations

from typing import Any

import httpx
import pytest
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse
from starlette.routing import Route
from starlette.types import Receive, Scope, Send

from suite_common.openapi import ApiRoute, Operation, SharedSecretScheme, add_openapi
from suite_common.wire import CallToolRequest, CallToolResponse, CompletionEvent, CompletionRequest


async def _endpoint(_: Request) -> JSONResponse:
    """What the endpoint does, for people."""
    return JSONResponse({})


class _McpEndpoint:
    """An ASGI app as a route (as mcp-client-service mounts its MCP face): every method, not this API's."""

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        raise AssertionError("never called")


def _app() -> Starlette:
    completion = Operation("Complete", body=CompletionRequest, events=CompletionEvent, example={"model": "demo"})
    call = Operation("Call", body=CallToolRequest, answer=CallToolResponse, errors={404: "No such tool."})
    return Starlette(
        routes=[
            ApiRoute("/complete", _endpoint, method="POST", operation=completion),
            ApiRoute("/private/call", _endpoint, method="POST", operation=call),
            Route("/plain/{item:int}", _endpoint, methods=["GET"]),
            Route("/mcp", _McpEndpoint()),
        ]
    )


def _refs(value: Any) -> set[str]:
    if isinstance(value, dict):
        found = {value["$ref"]} if "$ref" in value else set()
        return found.union(*(_refs(item) for item in value.values()))
    if isinstance(value, list):
        return set().union(*(_refs(item) for item in value))
    return set()


@pytest.fixture
def document() -> dict[str, Any]:
    return add_openapi(_app(), title="test-service", security=SharedSecretScheme("X-Secret", "/private"))


def test_every_route_with_methods_is_an_operation_and_an_asgi_app_is_left_out(document: dict[str, Any]) -> None:
    assert document["openapi"] == "3.1.0"
    assert set(document["paths"]) == {"/complete", "/private/call", "/plain/{item}", "/openapi.json"}
    assert document["paths"]["/plain/{item}"]["get"]["parameters"] == [
        {"name": "item", "in": "path", "required": True, "schema": {"type": "string"}}
    ]
    assert document["paths"]["/plain/{item}"]["get"]["description"] == "What the endpoint does, for people."


def test_bodies_answers_and_errors_refer_to_the_wire_models(document: dict[str, Any]) -> None:
    call = document["paths"]["/private/call"]["post"]
    body = call["requestBody"]["content"]["application/json"]["schema"]
    answer = call["responses"]["200"]["content"]["application/json"]["schema"]
    assert body == {"$ref": "#/components/schemas/CallToolRequest"}
    assert answer == {"$ref": "#/components/schemas/CallToolResponse"}
    error = {"$ref": "#/components/schemas/ErrorResponse"}
    for status in ("400", "404", "413", "415", "default"):
        assert call["responses"][status]["content"]["application/json"]["schema"] == error
    schemas = document["components"]["schemas"]
    assert schemas["ErrorResponse"]["required"] == ["error"]
    assert set(schemas["ErrorDetail"]["required"]) == {"code", "message"}
    assert "isError" in schemas["CallToolResponse"]["properties"]  # camelCase, as on the wire
    assert {ref.rsplit("/", 1)[1] for ref in _refs(document)} <= set(schemas)  # every reference resolves


def test_a_streamed_answer_is_an_event_stream_whose_data_follow_the_event_models(document: dict[str, Any]) -> None:
    complete = document["paths"]["/complete"]["post"]
    content = complete["responses"]["200"]["content"]
    event = content["text/event-stream"]["schema"]
    assert event["required"] == ["data"]
    data = event["properties"]["data"]
    assert data["contentMediaType"] == "application/json"
    assert {option["$ref"] for option in data["contentSchema"]["oneOf"]} >= {
        "#/components/schemas/TextDelta",
        "#/components/schemas/CompletionDone",
        "#/components/schemas/StreamError",
    }
    assert complete["requestBody"]["content"]["application/json"]["example"] == {"model": "demo"}


def test_the_shared_secret_is_a_security_scheme_of_the_protected_paths_only(document: dict[str, Any]) -> None:
    assert document["components"]["securitySchemes"] == {
        "sharedSecret": {"type": "apiKey", "in": "header", "name": "X-Secret"}
    }
    assert document["paths"]["/private/call"]["post"]["security"] == [{"sharedSecret": []}]
    assert "401" in document["paths"]["/private/call"]["post"]["responses"]
    assert "security" not in document["paths"]["/complete"]["post"]


@pytest.mark.anyio
async def test_the_app_serves_the_document_at_openapi_json() -> None:
    app = _app()
    document = add_openapi(app, title="test-service")
    async with httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url="http://test") as client:
        response = await client.get("/openapi.json")

    assert response.status_code == 200
    assert response.headers["content-type"] == "application/json"
    assert response.json() == document
    assert response.json()["info"] == {"title": "test-service", "version": "1"}


def test_a_front_of_another_api_documents_its_own_errors_its_end_of_stream_and_hides_what_it_hides() -> None:
    class OtherError(CallToolRequest):
        """Stands for another API's error body (OpenAI's, for the OpenAI-compatible front)."""

    chat = Operation("Chat", body=CompletionRequest, events=CompletionEvent, events_end="[DONE]", error=OtherError)
    app = Starlette(
        routes=[
            ApiRoute("/v1/chat", _endpoint, method="POST", operation=chat),
            Route("/v1/{path:path}", _endpoint, methods=["GET"], include_in_schema=False),
        ]
    )
    document = add_openapi(app, title="front")

    assert set(document["paths"]) == {"/v1/chat", "/openapi.json"}
    responses = document["paths"]["/v1/chat"]["post"]["responses"]
    assert responses["default"]["content"]["application/json"]["schema"] == {"$ref": "#/components/schemas/OtherError"}
    data = responses["200"]["content"]["text/event-stream"]["schema"]["properties"]["data"]
    assert data["anyOf"][1] == {"const": "[DONE]"}
    assert data["anyOf"][0]["contentMediaType"] == "application/json"
