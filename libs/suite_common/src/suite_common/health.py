"""``GET /healthz`` (the process is alive) and ``GET /readyz`` (its dependencies answer)."""

from __future__ import annotations

from collections.abc import Awaitable, Callable

from starlette.requests import Request
from starlette.responses import JSONResponse
from starlette.routing import Route

from suite_common.lifecycle import Lifecycle

__all__ = ["ReadinessCheck", "health_routes"]

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

    return [Route("/healthz", healthz, methods=["GET"]), Route("/readyz", readyz, methods=["GET"])]
