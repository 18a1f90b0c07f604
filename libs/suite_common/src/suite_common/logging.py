"""structlog set up once per process: JSON lines in production, readable lines on a laptop.

Services log to stdout (the container's log stream). MCP tool servers log to stderr, because over
stdio their stdout carries the protocol (over HTTP too: the same whatever the transport). Every line
written inside a span carries its ``trace_id`` and ``span_id``; every line written while a run is
known carries its ``run_id``, in the service that runs it and in those it calls (``X-Run-Id``, see
``LogContextMiddleware``).
"""

from __future__ import annotations

import logging
import re
import sys
from collections.abc import Mapping, MutableMapping
from contextvars import ContextVar, Token
from typing import Any, TextIO

import structlog
from opentelemetry import trace
from starlette.types import ASGIApp, Receive, Scope, Send

__all__ = [
    "RUN_ID_HEADER",
    "LogContextMiddleware",
    "add_trace_context",
    "bound_run_id",
    "configure_logging",
    "get_logger",
    "logged_with",
]

RUN_ID_HEADER = "x-run-id"
"""The run a call belongs to, sent by agent-service with each call it makes for a run."""

_RUN_ID = re.compile(r"[A-Za-z0-9_.:-]{1,128}")
"""What a run id may look like: anything else in the header is the caller's noise, never logged."""
_TRACEPARENT = re.compile(r"[0-9a-f]{2}-([0-9a-f]{32})-[0-9a-f]{16}-[0-9a-f]{2}")


def add_trace_context(_: Any, __: str, event_dict: MutableMapping[str, Any]) -> MutableMapping[str, Any]:
    """structlog processor: the current span's trace and span ids, so a line can be found from its trace."""
    context = trace.get_current_span().get_span_context()
    if context.is_valid:
        event_dict.setdefault("trace_id", format(context.trace_id, "032x"))
        event_dict.setdefault("span_id", format(context.span_id, "016x"))
    return event_dict


def configure_logging(level: str = "info", fmt: str = "json", *, stream: TextIO | None = None) -> None:
    """Route structlog and the standard library (uvicorn, mcp) to ``stream`` (stdout) in one format."""
    output = stream or sys.stdout
    numeric_level = logging.getLevelName(level.upper())
    renderer: Any = (
        structlog.processors.JSONRenderer() if fmt == "json" else structlog.dev.ConsoleRenderer(colors=False)
    )
    shared: list[Any] = [
        structlog.contextvars.merge_contextvars,
        add_trace_context,
        structlog.processors.add_log_level,
        structlog.processors.TimeStamper(fmt="iso", utc=True),
    ]
    structlog.configure(
        processors=[*shared, structlog.processors.format_exc_info, renderer],
        wrapper_class=structlog.make_filtering_bound_logger(numeric_level),
        logger_factory=structlog.PrintLoggerFactory(file=output),
        cache_logger_on_first_use=True,
    )
    handler = logging.StreamHandler(output)
    handler.setFormatter(structlog.stdlib.ProcessorFormatter(foreign_pre_chain=shared, processor=renderer))
    root = logging.getLogger()
    root.handlers[:] = [handler]
    root.setLevel(numeric_level)
    # uvicorn installs its own handlers; send its records through ours instead.
    for name in ("uvicorn", "uvicorn.error", "uvicorn.access"):
        logging.getLogger(name).handlers.clear()
        logging.getLogger(name).propagate = True
    logging.getLogger("uvicorn.access").setLevel(max(numeric_level, logging.WARNING))
    # httpx logs every request at INFO: noise here, and a cost on the hot path of every run.
    for name in ("httpx", "httpcore", "httpx2", "httpcore2"):
        logging.getLogger(name).setLevel(max(numeric_level, logging.WARNING))


def get_logger(name: str) -> Any:
    return structlog.get_logger(name)


_run_id_var: ContextVar[Any] | None = None
"""structlog's context variable of ``run_id``, once ``logged_with`` has bound it: read straight, where
``get_contextvars`` copies every variable of the context."""


def bound_run_id() -> str | None:
    """The run the current code works for, if one is bound (agent-service binds it for a run's length)."""
    # Read for every call agent-service makes: straight from the variable when known (unbound, it holds ``...``).
    run_id = _run_id_var.get(None) if _run_id_var is not None else structlog.contextvars.get_contextvars().get("run_id")
    return run_id if isinstance(run_id, str) else None


class logged_with:
    """``with logged_with(run_id=...):`` binds these to every line logged inside, as structlog's
    ``bound_contextvars`` does, and puts back what was bound before on leaving; for the hot path (a run's rounds and
    tool calls): about half its cost, since it restores through the variables' tokens instead of reading the whole
    context first. Enter and leave it in the same task, as any ``with`` block is."""

    __slots__ = ("_tokens", "_values")

    def __init__(self, **values: Any) -> None:
        self._values = values
        self._tokens: Mapping[str, Token[Any]] = {}

    def __enter__(self) -> None:
        global _run_id_var
        self._tokens = tokens = structlog.contextvars.bind_contextvars(**self._values)
        if _run_id_var is None and "run_id" in tokens:
            _run_id_var = tokens["run_id"].var

    def __exit__(self, *_: object) -> None:
        structlog.contextvars.reset_contextvars(**self._tokens)


class LogContextMiddleware:
    """Binds the caller's run (``X-Run-Id``) and trace (from ``traceparent``) to every line logged while serving
    the request, so that a run can be followed from agent-service into the services it calls, even in one
    whose own tracing is off. Malformed values are ignored."""

    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        context: dict[str, str] = {}
        for key, value in scope["headers"]:
            if key == b"x-run-id":
                run_id = value.decode("latin-1")
                if _RUN_ID.fullmatch(run_id):
                    context["run_id"] = run_id
            elif key == b"traceparent":
                match = _TRACEPARENT.fullmatch(value.decode("latin-1"))
                if match and match.group(1) != "0" * 32:
                    context["trace_id"] = match.group(1)
        if not context:
            await self.app(scope, receive, send)
            return
        if "run_id" in context:
            # The request's server span too (current here when tracing is on): traces are searchable by run.
            trace.get_current_span().set_attribute("agent.run_id", context["run_id"])
        with logged_with(**context):
            await self.app(scope, receive, send)
