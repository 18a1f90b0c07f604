"""``mcp-web-search``'s command line, which is the shared ``suite_common.mcp_tool`` runner: arguments,
settings errors, and logging set up before the server runs. tests/integration/mcp_web_search runs it
for real over stdio and HTTP."""

from __future__ import annotations

import logging
import sys
from collections.abc import Iterator

import pytest
import structlog
from mcp.server.mcpserver import MCPServer

from mcp_web_search.__main__ import main
from mcp_web_search.server import WebSearchState, build_server
from mcp_web_search.settings import WebSearchSettings
from suite_common.mcp_tool import CommandLine, load_settings, parse_command_line, run_tool_server


def _parse(*argv: str) -> CommandLine:
    return parse_command_line(WebSearchSettings, list(argv), prog="mcp-web-search", description="test")


def test_the_command_line_defaults_to_stdio_and_leaves_the_address_to_the_environment(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("WEB_SEARCH_HOST", "0.0.0.0")
    monkeypatch.setenv("WEB_SEARCH_PORT", "9102")

    settings = load_settings(WebSearchSettings, _parse(), prog="mcp-web-search")

    assert _parse() == CommandLine(transport="stdio", host=None, port=None)
    assert (settings.host, settings.port) == ("0.0.0.0", 9102)


def test_host_and_port_flags_override_the_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("WEB_SEARCH_PORT", "9102")
    command_line = _parse("--transport", "streamable-http", "--host", "::1", "--port", "8111")

    settings = load_settings(WebSearchSettings, command_line, prog="mcp-web-search")

    assert command_line.transport == "streamable-http"
    assert (settings.host, settings.port) == ("::1", 8111)


def test_invalid_settings_end_the_process_with_one_line_naming_each_bad_variable(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("WEB_SEARCH_SEARXNG_URL", "searx.example:8888")
    monkeypatch.setenv("WEB_SEARCH_TIMEOUT_SECONDS", "0")

    with pytest.raises(SystemExit) as exit_info:
        main([])

    assert exit_info.value.code == (
        "mcp-web-search: invalid WEB_SEARCH_* settings: "
        "WEB_SEARCH_SEARXNG_URL: must be an http:// or https:// URL, got 'searx.example:8888'; "
        "WEB_SEARCH_TIMEOUT_SECONDS: Input should be greater than 0"
    )


def test_help_is_shown_even_when_the_settings_are_invalid(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setenv("WEB_SEARCH_SEARXNG_URL", "not a url")

    with pytest.raises(SystemExit) as exit_info:
        main(["--help"])

    assert exit_info.value.code == 0
    help_text = capsys.readouterr().out
    assert "--transport {stdio,streamable-http}" in help_text
    assert "WEB_SEARCH_PORT, else 8102" in help_text


@pytest.fixture
def restored_logging() -> Iterator[None]:
    """run_tool_server configures the process's logging; put the test runner's back afterwards."""
    root = logging.getLogger()
    handlers, level, structlog_config = root.handlers[:], root.level, structlog.get_config()
    yield
    root.handlers[:] = handlers
    root.setLevel(level)
    structlog.configure(**structlog_config)


@pytest.mark.usefixtures("restored_logging")
def test_over_stdio_the_suite_log_handler_on_stderr_is_the_only_one(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("WEB_SEARCH_LOG_LEVEL", "debug")
    running: list[tuple[str, list[logging.Handler]]] = []

    def run(transport: str) -> None:  # instead of serving: note what the server would log through
        running.append((transport, logging.getLogger().handlers[:]))

    def build(settings: WebSearchSettings) -> MCPServer[WebSearchState]:
        server = build_server(settings)  # the SDK offers its own (rich) log handler here
        monkeypatch.setattr(server, "run", run)
        return server

    run_tool_server(build, WebSearchSettings, [], prog="mcp-web-search", description="test")

    ((transport, handlers),) = running
    assert transport == "stdio"
    (handler,) = handlers
    assert isinstance(handler, logging.StreamHandler)
    assert handler.stream is sys.stderr  # stdout is the protocol's
    assert isinstance(handler.formatter, structlog.stdlib.ProcessorFormatter)
    assert logging.getLogger().level == logging.DEBUG
