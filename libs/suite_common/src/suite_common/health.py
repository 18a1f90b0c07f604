"""``GET /healthz`` (the process is alive) and ``GET /readyz`` (its dependencies answer)."""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Any, Literal

from starlette.requests import Request
from starlette.responses import JSONResponse
from starlette.routing import Route

from suite_common.lifecycle import Lifecycle
from suite_common.openapi import ApiRoute, Operation
from suite_common.wire import WireModel

__all__ = ["Alive", "Readiness", "ReadinessCheck", "health_routes", "readiness_operation"]


class Alive(WireModel):
    status: Literal["ok"]


class Readiness(WireModel):
    status: Literal["ready", "not_ready", "shutting_down"]
    checks: dict[str, Any]
    """A status per dependency: ``"ok"`` or why it is not ready."""


def readiness_operation() -> Operation:
    return Operation(
        "Whether the service's dependencies answer (503 while they do not, or while it shuts down)",
        answer=Readiness,
        answers={503: Readiness},
    )


ReadinessCheck = Callable[[Request], Awaitable[dict[str, str]]]
"""Returns a status per dependency: ``"ok"`` or a short reason it is not ready."""


def health_routes(readiness: ReadinessCheck | None = None, lifecycle: Lifecycle | None = None) -> list[Route]:
    """``/readyz`` answers 503 ``shutting_down`` as soon as ``lifecycle`` drains, so no new work comes in."""

    async def healthz(_: Request) -> JSONResponse:
        return JSONResponse({"status": "ok"})

    async def readyz(request: Request) -> JSONResponse:
        if lifecycle is not None and lifecycle.draining:
            return JSONResponse({"status": "shutting_down", "checks": {}}, status_code=503)
        checks = await readiness(request) if readiness else {}
        ready = all(value == "ok" for value in checks.values())
        return JSONResponse(
            {"status": "ready" if ready else "not_ready", "checks": checks},
            status_code=200 if ready else 503,
        )

    return [
        ApiRoute("/healthz", healthz, method="GET", operation=Operation("Whether the process is alive", answer=Alive)),
        ApiRoute("/readyz", readyz, method="GET", operation=readiness_operation()),
    ]
