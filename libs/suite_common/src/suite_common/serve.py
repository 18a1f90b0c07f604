"""Running a service's ASGI app under uvicorn with the suite's logging."""

from __future__ import annotations

import uvicorn
from starlette.types import ASGIApp

from suite_common.logging import configure_logging
from suite_common.settings import ServiceSettings

__all__ = ["serve"]


def serve(app: ASGIApp, settings: ServiceSettings) -> None:
    configure_logging(settings.log_level, settings.log_format)
    uvicorn.run(
        app,
        host=settings.host,
        port=settings.port,
        log_config=None,  # keep the handlers configure_logging installed
        access_log=False,
        timeout_graceful_shutdown=5,
    )
