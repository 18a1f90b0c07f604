"""The servers file (``mcpServers`` format) and the settings: good input parsed, bad input named."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from mcp_client_service.__main__ import main
from mcp_client_service.config import (
    ConfigError,
    HttpServerConfig,
    StdioServerConfig,
    load_servers_config,
    parse_servers_config,
)
from mcp_client_service.settings import MCPClientSettings


def test_a_claude_desktop_style_file_keeps_servers_in_file_order(tmp_path: Path) -> None:
    path = tmp_path / "servers.json"
    path.write_text(
        json.dumps(
            {
                "globalShortcut": "Ctrl+Space",  # other keys of a client's config are ignored
                "mcpServers": {
                    "zeta": {"command": "mcp-rag-tool", "args": ["--transport", "stdio"], "env": {"K": "v"}},
                    "alpha": {"url": "https://search.internal/mcp", "headers": {"Authorization": "Bearer t"}},
                    "mid": {"type": "streamable-http", "url": "http://127.0.0.1:8102/mcp", "enabled": False},
                    "explicit": {"type": "stdio", "command": "uvx", "cwd": "/srv/tools"},
                },
            }
        )
    )

    servers = load_servers_config(path).servers

    assert list(servers) == ["zeta", "alpha", "mid", "explicit"]
    zeta, alpha, mid, explicit = servers.values()
    assert isinstance(zeta, StdioServerConfig)
    assert (zeta.command, zeta.args, zeta.env, zeta.enabled) == (
        "mcp-rag-tool",
        ["--transport", "stdio"],
        {"K": "v"},
        True,
    )
    assert isinstance(alpha, HttpServerConfig)
    assert (alpha.url, alpha.headers, alpha.transport) == (
        "https://search.internal/mcp",
        {"Authorization": "Bearer t"},
        "streamable-http",
    )
    assert isinstance(mid, HttpServerConfig)
    assert not mid.enabled
    assert isinstance(explicit, StdioServerConfig)
    assert explicit.cwd == Path("/srv/tools")


@pytest.mark.parametrize(
    ("servers", "expected"),
    [
        ({"rag": {"command": "x", "args": "--stdio"}}, 'server "rag": field "args": Input should be a valid list'),
        ({"rag": {"command": ""}}, 'server "rag": field "command": String should have at least 1 character'),
        ({"rag": {"command": "x", "env": {"PORT": 8101}}}, 'server "rag": field "env.PORT": Input should be a valid'),
        ({"web": {"url": "ftp://host/mcp"}}, 'server "web": field "url": Value error, must be an http:// or https://'),
        ({"web": {"url": "http://h/mcp", "autoApprove": []}}, 'server "web": field "autoApprove": Extra inputs'),
        ({"web": {"args": ["x"]}}, 'server "web": a server is an object with either "command" (stdio) or "url"'),
        ({"web": {"command": "x", "url": "http://h/mcp"}}, 'server "web": a server is an object with either'),
        ({"web": {"type": "sse", "url": "http://h/mcp"}}, '"type", if given, is "stdio", "http" or "streamable-http"'),
        ({"web": {"type": "stdio", "url": "http://h/mcp"}}, 'server "web": field "command": Field required'),
    ],
)
def test_a_bad_server_entry_is_an_error_naming_the_server_and_the_field(servers: object, expected: str) -> None:
    with pytest.raises(ConfigError) as raised:
        parse_servers_config(json.dumps({"mcpServers": servers}), source="servers.json")
    assert str(raised.value).startswith("servers.json: ")
    assert expected in str(raised.value)


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("{not json", "servers.json is not valid JSON"),
        ('{"servers": {}}', 'must be a JSON object with an "mcpServers" object'),
        ('["mcpServers"]', 'must be a JSON object with an "mcpServers" object'),
        ('{"mcpServers": []}', '"mcpServers": Input should be a valid dictionary'),
        ('{"mcpServers": {" ": {"command": "x"}}}', "a server name must not be empty"),
    ],
)
def test_a_malformed_file_is_an_error_saying_what_is_wrong(text: str, expected: str) -> None:
    with pytest.raises(ConfigError, match=r"servers\.json") as raised:
        parse_servers_config(text, source="servers.json")
    assert expected in str(raised.value)


def test_a_missing_file_is_an_error_naming_the_path(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match=r"cannot read the servers config .*nope\.json"):
        load_servers_config(tmp_path / "nope.json")


def test_settings_come_from_mcp_client_variables(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("MCP_CLIENT_SERVICE_SECRET", "s3cret")
    monkeypatch.setenv("MCP_CLIENT_SERVERS_CONFIG", "/etc/mcp/servers.json")
    monkeypatch.setenv("MCP_CLIENT_CALL_TIMEOUT_SECONDS", "5")

    settings = MCPClientSettings()

    assert settings.service_secret.get_secret_value() == "s3cret"
    assert settings.servers_config == Path("/etc/mcp/servers.json")
    assert (settings.port, settings.call_timeout_seconds, settings.secret_header) == (8002, 5.0, "X-MCP-Service-Secret")
    assert "s3cret" not in repr(settings)


@pytest.mark.parametrize("secret", [None, "", "   "])
def test_the_service_refuses_to_start_without_a_secret(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path, secret: str | None
) -> None:
    monkeypatch.chdir(tmp_path)
    if secret is None:
        monkeypatch.delenv("MCP_CLIENT_SERVICE_SECRET", raising=False)
    else:
        monkeypatch.setenv("MCP_CLIENT_SERVICE_SECRET", secret)

    with pytest.raises(SystemExit) as exited:
        main()

    assert "MCP_CLIENT_SERVICE_SECRET must be set" in str(exited.value.code)


def test_the_service_refuses_to_start_with_a_bad_servers_file(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    path = tmp_path / "servers.json"
    path.write_text('{"mcpServers": {"rag": {"command": 7}}}')
    monkeypatch.setenv("MCP_CLIENT_SERVICE_SECRET", "s3cret")
    monkeypatch.setenv("MCP_CLIENT_SERVERS_CONFIG", str(path))

    with pytest.raises(SystemExit) as exited:
        main()

    assert f'{path}: server "rag": field "command": Input should be a valid string' in str(exited.value.code)
