"""Starting a service or a tool: settings, then logging, then the app, and one line instead of a traceback.

Every service's and tool's ``__main__`` starts through here, so that they all start, log and fail alike:

- settings come from the environment (and the command line, on top); invalid ones end the process
  with exit status 1 and ONE line on stderr, ``<prog>: invalid AGENT_* settings: AGENT_MAX_ITERATIONS:
  Input should be less than or equal to 15``, naming every bad variable (never its value: it may be a
  secret). One line, because a log pipeline makes one record of each line;
- logging is configured from those settings before the app is built, so the very first line the
  process logs (a config file's ignored key, say) is already in its ``LOG_FORMAT``;
- building the app may still refuse (a config file, settings that contradict each other): the
  ``refusals`` it raises end the process the same way, with their message.

A start-up failure is plain text whatever the log format: the format may be the bad setting.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any, TextIO, TypeVar

from pydantic import ValidationError
from starlette.types import ASGIApp

from suite_common.logging import configure_logging, get_logger
from suite_common.serve import serve
from suite_common.settings import ServiceSettings, deprecated_names_in_use

__all__ = ["build_or_exit", "describe_settings_error", "env_prefix", "load_settings", "run_service", "start"]

SettingsT = TypeVar("SettingsT", bound=ServiceSettings)
BuiltT = TypeVar("BuiltT")

_MAX_REPORTED_ERRORS = 10

_log = get_logger("suite_common.startup")

_PYDANTIC_PREFIXES = ("Value error, ", "Assertion failed, ")
"""What pydantic puts before a validator's own message; the message reads better without it."""


def env_prefix(settings_type: type[ServiceSettings]) -> str:
    return str(settings_type.model_config.get("env_prefix", ""))


def describe_settings_error(error: ValidationError, prefix: str) -> str:
    """``AGENT_MAX_ITERATIONS: Input should be ...; AGENT_X: ...``: each problem named by its variable.

    Inputs are left out: a setting may be a secret.
    """
    problems = []
    for item in error.errors(include_url=False, include_input=False)[:_MAX_REPORTED_ERRORS]:
        message = str(item["msg"])
        for noise in _PYDANTIC_PREFIXES:
            message = message.removeprefix(noise)
        field, *rest = item["loc"] or ("",)
        if field:  # else settings checked together, whose message names them
            where = f"{prefix}{str(field).upper()}" + "".join(f"[{part}]" for part in rest)
            message = f"{where}: {message}"
        problems.append(message)
    return _one_line("; ".join(problems))


def load_settings(
    settings_type: type[SettingsT], *, prog: str, overrides: Mapping[str, Any] | None = None
) -> SettingsT:
    """The settings from the environment with ``overrides`` on top; ``SystemExit`` (one line) if invalid."""
    try:
        return settings_type(**dict(overrides or {}))
    except ValidationError as error:
        prefix = env_prefix(settings_type)
        raise SystemExit(f"{prog}: invalid {prefix}* settings: {describe_settings_error(error, prefix)}") from None


def build_or_exit(
    build: Callable[[], BuiltT], *, prog: str, refusals: tuple[type[Exception], ...] = (ValueError,)
) -> BuiltT:
    """``build()``; one of ``refusals`` (a bad config file, contradicting settings) ends the process in one line.

    Anything else is a bug and keeps its traceback.
    """
    try:
        return build()
    except refusals as error:
        raise SystemExit(f"{prog}: {_one_line(str(error))}") from None


def start(
    settings_type: type[SettingsT],
    build: Callable[[SettingsT], BuiltT],
    *,
    prog: str,
    overrides: Mapping[str, Any] | None = None,
    refusals: tuple[type[Exception], ...] = (ValueError,),
    log_stream: TextIO | None = None,
) -> tuple[SettingsT, BuiltT]:
    """Settings, then logging (to ``log_stream``, stdout by default), then ``build(settings)``: the steps every
    service and tool starts with."""
    settings = load_settings(settings_type, prog=prog, overrides=overrides)
    configure_logging(settings.log_level, settings.log_format, stream=log_stream)
    for old, new in deprecated_names_in_use(settings_type):
        _log.warning("deprecated_setting", setting=old, replaced_by=new)
    return settings, build_or_exit(lambda: build(settings), prog=prog, refusals=refusals)


def run_service(
    settings_type: type[SettingsT],
    create_app: Callable[[SettingsT], ASGIApp],
    *,
    prog: str,
    refusals: tuple[type[Exception], ...] = (ValueError,),
) -> None:
    """Start a service (``start``) and serve it until it is stopped."""
    settings, app = start(settings_type, create_app, prog=prog, refusals=refusals)
    serve(app, settings)


def _one_line(text: str) -> str:
    return " ".join(text.split())
