"""agent-service's /openapi.json documents the caller key where ``CallerMiddleware`` asks for it, and only there."""

from __future__ import annotations

from typing import Any

import pytest
from pydantic import SecretStr
from starlette.testclient import TestClient

from agent_service.api.auth import is_protected
from agent_service.app import create_app
from agent_service.settings import AgentSettings

RUN_ROUTES = {("post", "/api/v1/agent/run"), ("post", "/v1/chat/completions")}
"""The operations that start a run: the tenant's cap of runs in progress applies (429)."""
OPEN_PATHS = {"/healthz", "/readyz", "/metrics", "/openapi.json", "/api/v1/agent/oauth/callback"}


@pytest.fixture(scope="module")
def document() -> dict[str, Any]:
    app = create_app(AgentSettings(mcp_service_secret=SecretStr("s3cret"), database_url=""))
    response = TestClient(app).get("/openapi.json")  # no lifespan needed: the document is built at creation
    assert response.status_code == 200
    body: dict[str, Any] = response.json()
    return body


def _operations(document: dict[str, Any]) -> list[tuple[str, str, dict[str, Any]]]:
    return [(method, path, operation) for path, item in document["paths"].items() for method, operation in item.items()]


def test_the_caller_key_is_a_bearer_security_scheme(document: dict[str, Any]) -> None:
    assert document["components"]["securitySchemes"]["callerKey"]["type"] == "http"
    assert document["components"]["securitySchemes"]["callerKey"]["scheme"] == "bearer"


def test_every_protected_operation_requires_the_key_and_documents_the_refusals(document: dict[str, Any]) -> None:
    protected = [(m, p, o) for m, p, o in _operations(document) if is_protected(p)]
    assert len(protected) >= 9
    for method, path, operation in protected:
        where = f"{method} {path}"
        assert operation["security"] == [{"callerKey": []}], where
        responses = operation["responses"]
        assert "unauthorized" in responses["401"]["description"], where
        assert "user_not_allowed" in responses["403"]["description"], where
        assert ("too_many_runs" in responses.get("429", {}).get("description", "")) is ((method, path) in RUN_ROUTES)


def test_the_operations_own_refusals_are_kept_beside_the_middlewares(document: dict[str, Any]) -> None:
    run = document["paths"]["/api/v1/agent/run"]["post"]["responses"]
    for code in ("user_not_allowed", "model_not_allowed", "model_not_priced", "tool_not_allowed"):
        assert code in run["403"]["description"]
    assert "shutting down" in run["503"]["description"]
    assert "store_unavailable" in run["503"]["description"]
    chat = document["paths"]["/v1/chat/completions"]["post"]["responses"]
    assert "model_not_allowed" in chat["403"]["description"]
    assert "model_not_priced" in chat["403"]["description"]
    assert chat["401"]["content"]["application/json"]["schema"] == {"$ref": "#/components/schemas/OpenAIError"}


def test_the_open_routes_need_no_key(document: dict[str, Any]) -> None:
    open_operations = [(m, p, o) for m, p, o in _operations(document) if not is_protected(p)]
    assert {path for _, path, _ in open_operations} == OPEN_PATHS
    for method, path, operation in open_operations:
        assert "security" not in operation, f"{method} {path}"
        assert "401" not in operation["responses"], f"{method} {path}"
