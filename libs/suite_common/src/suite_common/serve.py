"""Running a service's ASGI app under uvicorn with the suite's logging and graceful shutdown."""

from __future__ import annotations

import signal
import time
from types import FrameType
from typing import TextIO

import uvicorn
from starlette.types import ASGIApp

from suite_common.lifecycle import Lifecycle
from suite_common.logging import configure_logging, get_logger
from suite_common.settings import ServiceSettings
from suite_common.slow_clients import ReceiveLimits, receive_limited_protocol

__all__ = ["DrainingServer", "serve", "uvicorn_config"]

_log = get_logger("suite_common.serve")

_INTERRUPT_SECONDS = 2.0
"""After the grace period, how long interrupted work has to send its last words (a final SSE event)."""


class DrainingServer(uvicorn.Server):
    """uvicorn, except that SIGTERM drains (see ``suite_common.lifecycle``) instead of closing at once.

    The listening socket stays open while draining, so readiness probes see the 503. A second
    SIGTERM, or SIGINT (Ctrl-C), shuts down the uvicorn way.
    """

    def __init__(self, config: uvicorn.Config, lifecycle: Lifecycle) -> None:
        super().__init__(config)
        self.lifecycle = lifecycle
        self._drain_started: float | None = None
        self._interrupted_at: float | None = None

    def handle_exit(self, sig: int, frame: FrameType | None) -> None:
        if sig == signal.SIGTERM and not self.lifecycle.draining:
            self.lifecycle.begin_draining()  # the event loop does the rest, in on_tick
            return
        super().handle_exit(sig, frame)

    async def on_tick(self, counter: int) -> bool:
        if self.lifecycle.draining and not self.should_exit:
            self._drain(time.monotonic())
        return await super().on_tick(counter)

    def _drain(self, now: float) -> None:
        lifecycle = self.lifecycle
        if self._drain_started is None:
            self._drain_started = now
            _log.info("draining", in_flight=lifecycle.in_flight, grace_seconds=lifecycle.grace_seconds)
        if lifecycle.in_flight == 0:
            _log.info("drained", seconds=round(now - self._drain_started, 2))
            self.should_exit = True
        elif self._interrupted_at is None and now - self._drain_started >= lifecycle.grace_seconds:
            _log.warning("drain_grace_exceeded", in_flight=lifecycle.in_flight)
            self._interrupted_at = now
            lifecycle.interrupt()
        elif self._interrupted_at is not None and now - self._interrupted_at >= _INTERRUPT_SECONDS:
            self.should_exit = True


def uvicorn_config(app: ASGIApp, settings: ServiceSettings) -> uvicorn.Config:
    """How every service runs under uvicorn, slow clients bounded (``suite_common.slow_clients``)."""
    limits = ReceiveLimits(
        head_timeout_seconds=settings.request_head_timeout_seconds,
        body_timeout_seconds=settings.request_body_timeout_seconds,
        max_connections=settings.max_connections,
        env_prefix=str(settings.model_config.get("env_prefix") or ""),
    )
    return uvicorn.Config(
        app,
        host=settings.host,
        port=settings.port,
        http=receive_limited_protocol(limits),
        log_config=None,  # keep the handlers configure_logging installed
        access_log=False,
        timeout_graceful_shutdown=5,
    )


def serve(app: ASGIApp, settings: ServiceSettings, *, log_stream: TextIO | None = None) -> None:
    """Serve ``app`` until SIGTERM; logs go to ``log_stream`` (stdout)."""
    configure_logging(settings.log_level, settings.log_format, stream=log_stream)
    config = uvicorn_config(app, settings)
    lifecycle = getattr(getattr(app, "state", None), "lifecycle", None)
    if isinstance(lifecycle, Lifecycle):
        DrainingServer(config, lifecycle).run()
    else:
        uvicorn.Server(config).run()
