"""The servers file (``mcpServers`` format) and the settings: good input parsed, bad input named."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from pydantic import ValidationError
from structlog.testing import capture_logs

from mcp_client_service.__main__ import main
from mcp_client_service.config.servers_file import (
    ConfigError,
    HttpServerConfig,
    StdioServerConfig,
    load_servers_config,
    parse_servers_config,
)
from mcp_client_service.settings import MCPClientSettings
from suite_common.settings import deprecated_names_in_use


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
        ({"web": {"url": "http://h/mcp", "disabled": "yes"}}, 'server "web": Value error, "disabled" must be true or'),
        (
            {"web": {"url": "http://h/mcp", "enabled": True, "disabled": True}},
            'server "web": Value error, "enabled": true and "disabled": true contradict each other',
        ),
        ({"web": {"url": "http://h/mcp", "timeout": 0}}, 'server "web": field "callTimeoutSeconds": Input should be'),
        ({"web": {"args": ["x"]}}, 'server "web": a server is an object with either "command" (stdio) or "url"'),
        ({"web": {"command": "x", "url": "http://h/mcp"}}, 'server "web": a server is an object with either'),
        (
            {"web": {"type": "websocket", "url": "ws://h/mcp"}},
            '"type", if given, is "stdio", "http", "streamable-http"',
        ),
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
        ('{"tools": {}}', 'must be a JSON object with an "mcpServers" object'),
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
    monkeypatch.setenv("MCP_CLIENT_SERVERS_FILE", "/etc/mcp/servers.json")
    monkeypatch.setenv("MCP_CLIENT_CALL_TIMEOUT_SECONDS", "5")

    settings = MCPClientSettings()

    assert settings.service_secret.get_secret_value() == "s3cret"
    assert settings.servers_file == Path("/etc/mcp/servers.json")
    assert (settings.port, settings.call_timeout_seconds, settings.secret_header) == (8002, 5.0, "X-MCP-Service-Secret")
    assert "s3cret" not in repr(settings)


def test_the_former_names_of_the_servers_file_and_the_catalog_cache_are_still_read_and_logged_as_deprecated(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("MCP_CLIENT_SERVICE_SECRET", "s3cret")
    monkeypatch.setenv("MCP_CLIENT_SERVERS_CONFIG", "/etc/mcp/servers.json")
    monkeypatch.setenv("MCP_CLIENT_CATALOG_TTL_SECONDS", "42")

    settings = MCPClientSettings()

    assert (settings.servers_file, settings.catalog_cache_seconds) == (Path("/etc/mcp/servers.json"), 42.0)
    # What start-up logs as deprecated_setting, one line each.
    assert sorted(deprecated_names_in_use(MCPClientSettings)) == [
        ("MCP_CLIENT_CATALOG_TTL_SECONDS", "MCP_CLIENT_CATALOG_CACHE_SECONDS"),
        ("MCP_CLIENT_SERVERS_CONFIG", "MCP_CLIENT_SERVERS_FILE"),
    ]


def test_the_new_names_win_over_the_former_ones(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("MCP_CLIENT_SERVICE_SECRET", "s3cret")
    monkeypatch.setenv("MCP_CLIENT_SERVERS_CONFIG", "/etc/mcp/old.json")
    monkeypatch.setenv("MCP_CLIENT_SERVERS_FILE", "/etc/mcp/new.json")
    monkeypatch.setenv("MCP_CLIENT_CATALOG_TTL_SECONDS", "42")
    monkeypatch.setenv("MCP_CLIENT_CATALOG_CACHE_SECONDS", "7")

    settings = MCPClientSettings()

    assert (settings.servers_file, settings.catalog_cache_seconds) == (Path("/etc/mcp/new.json"), 7.0)


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
    monkeypatch.setenv("MCP_CLIENT_SERVERS_FILE", str(path))

    with pytest.raises(SystemExit) as exited:
        main()

    assert f'{path}: server "rag": field "command": Input should be a valid string' in str(exited.value.code)


def test_a_vs_code_file_lists_its_servers_under_servers() -> None:
    text = json.dumps(
        {
            "inputs": [{"type": "promptString", "id": "token"}],  # VS Code's prompts: ignored, like other keys
            "servers": {
                "github": {"type": "http", "url": "https://api.example.com/mcp/", "headers": {"X-Team": "core"}},
                "legacy": {"type": "sse", "url": "https://old.example.com/sse"},
                "local": {"type": "stdio", "command": "npx", "args": ["-y", "@scope/server"]},
            },
        }
    )

    servers = parse_servers_config(text, source=".vscode/mcp.json").servers

    assert list(servers) == ["github", "legacy", "local"]
    assert [server.transport for server in servers.values()] == ["streamable-http", "sse", "stdio"]


def test_a_toml_file_holds_the_same_servers_in_file_order(tmp_path: Path) -> None:
    path = tmp_path / "servers.toml"
    path.write_text(
        """
[mcpServers.zeta]
command = "mcp-rag-tool"
args = ["--transport", "stdio"]
callTimeoutSeconds = 12.5

[mcpServers.zeta.env]
RAG_DOCS_PATHS = '["docs"]'

[mcpServers.alpha]
url = "https://search.internal/mcp"
toolPrefix = "web_"
allowedTools = ["search*"]
deniedTools = ["search_admin"]

[mcpServers.alpha.headers]
Authorization = "Bearer ${env:SEARCH_TOKEN}"

[mcpServers.off]
type = "sse"
url = "http://old:8000/sse"
enabled = false
"""
    )

    loaded = load_servers_config(path)
    zeta, alpha, off = loaded.servers.values()

    assert list(loaded.servers) == ["zeta", "alpha", "off"]
    assert loaded.base_dir == tmp_path
    assert isinstance(zeta, StdioServerConfig)
    assert (zeta.args, zeta.env, zeta.call_timeout_seconds) == (
        ["--transport", "stdio"],
        {"RAG_DOCS_PATHS": '["docs"]'},
        12.5,
    )
    assert isinstance(alpha, HttpServerConfig)
    assert alpha.headers == {"Authorization": "Bearer ${env:SEARCH_TOKEN}"}  # resolved only when connecting
    assert alpha.tool_prefix == "web_"
    assert [alpha.offers(name) for name in ("search", "search_news", "search_admin", "delete")] == [
        True,
        True,
        False,
        False,
    ]
    assert (off.transport, off.enabled) == ("sse", False)


def test_without_tool_lists_a_server_offers_every_tool() -> None:
    server = StdioServerConfig(command="x", deniedTools=("rm_*",))

    assert server.offers("ls")
    assert not server.offers("rm_rf")


@pytest.mark.parametrize(
    ("servers", "expected"),
    [
        (
            {"gh": {"url": "https://h/mcp", "headers": {"Authorization": "Bearer ${input:token}"}}},
            'server "gh": field "headers.Authorization": Value error, ${input:token} asks a person for a value',
        ),
        (
            {"gh": {"command": "x", "env": {"S": "${env:MCP_CLIENT_SERVICE_SECRET}"}}},
            "the gateway's own settings are never passed to MCP servers",
        ),
        ({"gh": {"command": "x", "args": ["${env:not a name}"]}}, "an environment variable name is letters"),
        ({"gh": {"command": "x", "args": ["${file: }"]}}, "the file path is missing"),
        ({"gh": {"command": "x", "toolPrefix": "git hub"}}, 'field "toolPrefix": Value error, a tool prefix is'),
        ({"gh": {"command": "x", "callTimeoutSeconds": 0}}, 'field "callTimeoutSeconds": Input should be greater'),
    ],
)
def test_bad_references_and_options_are_errors_naming_the_field(servers: object, expected: str) -> None:
    with pytest.raises(ConfigError) as raised:
        parse_servers_config(json.dumps({"mcpServers": servers}), source="servers.json")
    assert expected in str(raised.value)


def test_an_argument_that_only_looks_like_a_reference_is_kept_as_written() -> None:
    server = parse_servers_config(json.dumps({"mcpServers": {"sh": {"command": "sh", "args": ["-c", "echo ${HOME}"]}}}))

    assert server.servers["sh"].args == ["-c", "echo ${HOME}"]  # type: ignore[union-attr]


@pytest.mark.parametrize(
    ("text", "file_format", "expected"),
    [
        ("[mcpServers.x\ncommand = 1", "toml", "servers.toml is not valid TOML"),
        ('[other]\nkey = "value"', "toml", "servers.toml must have [mcpServers.<name>] tables"),
        ('{"mcpServers": {}, "servers": {}}', "json", 'has both "mcpServers" and "servers"'),
    ],
)
def test_a_malformed_toml_or_ambiguous_file_is_an_error(text: str, file_format: str, expected: str) -> None:
    source = "servers.toml" if file_format == "toml" else "servers.json"
    with pytest.raises(ConfigError) as raised:
        parse_servers_config(text, source=source, file_format=file_format)  # type: ignore[arg-type]
    assert expected in str(raised.value)


def test_the_make_run_servers_file_is_valid() -> None:
    root = Path(__file__).resolve().parents[3]

    servers = load_servers_config(root / "deploy" / "local" / "mcp_servers.json").servers

    assert {name: server.transport for name, server in servers.items()} == {"rag": "stdio", "web-search": "stdio"}


def test_list_settings_are_comma_separated_and_the_gateways_own_variables_never_pass(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("MCP_CLIENT_SERVICE_SECRET", "s3cret")
    monkeypatch.setenv("MCP_CLIENT_STDIO_INHERIT_ENV", "PATH, HOME,LANG")
    monkeypatch.setenv("MCP_CLIENT_SSRF_ALLOWED_NETWORKS", '["10.20.0.0/16", "fd00::/8"]')

    settings = MCPClientSettings()

    assert settings.stdio_inherit_env == ["PATH", "HOME", "LANG"]
    assert settings.ssrf_allowed_networks == ["10.20.0.0/16", "fd00::/8"]
    assert (settings.catalog_cache_seconds, settings.tool_name_collision, settings.ssrf_allow_loopback) == (
        600.0,
        "first_wins",
        False,
    )

    monkeypatch.setenv("MCP_CLIENT_STDIO_INHERIT_ENV", "PATH,MCP_CLIENT_SERVICE_SECRET")
    with pytest.raises(ValidationError, match="never passed to MCP servers: MCP_CLIENT_SERVICE_SECRET"):
        MCPClientSettings()

    monkeypatch.setenv("MCP_CLIENT_STDIO_INHERIT_ENV", "PATH")
    monkeypatch.setenv("MCP_CLIENT_SSRF_ALLOWED_NETWORKS", "10.0.0.0/33")
    with pytest.raises(ValidationError, match="not a network in CIDR notation"):
        MCPClientSettings()


def test_keys_of_other_clients_are_ignored_and_logged_and_clines_fields_are_understood() -> None:
    text = json.dumps(
        {
            "mcpServers": {
                # VS Code: envFile; Cline: disabled, autoApprove, timeout (seconds), type streamableHttp.
                "vscode": {"type": "stdio", "command": "uvx", "args": ["tool"], "envFile": "${workspaceFolder}/.env"},
                "cline": {"type": "streamableHttp", "url": "https://h/mcp", "autoApprove": ["search"], "timeout": 30},
                "off": {"command": "node", "args": ["server.js"], "disabled": True, "alwaysAllow": []},
                "typo": {"url": "https://h/mcp", "allowedTool": ["a"], "required": True},
            }
        }
    )

    with capture_logs() as logs:
        servers = parse_servers_config(text, source="cline_mcp_settings.json").servers

    vscode, cline, off, typo = servers.values()
    assert isinstance(vscode, StdioServerConfig)
    assert (vscode.command, vscode.enabled, vscode.required) == ("uvx", True, False)
    assert isinstance(cline, HttpServerConfig)
    assert (cline.transport, cline.call_timeout_seconds) == ("streamable-http", 30.0)
    assert off.enabled is False
    assert typo.required is True
    assert typo.allowed_tools is None  # a misspelt key is not read as the real one
    ignored = {(log["server"], log["key"]): log for log in logs if log["event"] == "mcp_server_config_key_ignored"}
    assert set(ignored) == {
        ("vscode", "envFile"),
        ("cline", "autoApprove"),
        ("off", "alwaysAllow"),
        ("typo", "allowedTool"),
    }
    assert all(log["log_level"] == "warning" and log["source"] == "cline_mcp_settings.json" for log in ignored.values())
    assert "reads no env file" in ignored[("vscode", "envFile")]["detail"]
    assert "a typo?" in ignored[("typo", "allowedTool")]["detail"]


def test_an_explicit_call_timeout_wins_over_clines_timeout() -> None:
    text = json.dumps({"mcpServers": {"s": {"url": "https://h/mcp", "timeout": 30, "callTimeoutSeconds": 5}}})

    (server,) = parse_servers_config(text).servers.values()

    assert server.call_timeout_seconds == 5.0


@pytest.mark.parametrize(
    ("auth", "problem"),
    [
        ({"type": "oauth", "grant": "client_credentials"}, 'needs \\"clientId\\" and \\"clientSecret\\"'),
        (
            {"type": "oauth", "grant": "client_credentials", "tokens": "perUser", "clientId": "a", "clientSecret": "b"},
            "machine",
        ),
        ({"type": "oauth", "clientSecret": "b"}, "without"),
        ({"type": "oauth", "tokens": "everyone"}, "tokens"),
    ],
)
def test_an_auth_block_that_cannot_work_is_refused_saying_why(auth: dict[str, Any], problem: str) -> None:
    text = json.dumps({"mcpServers": {"s": {"url": "https://mcp.example/mcp", "auth": auth}}})
    with pytest.raises(ConfigError, match=problem):
        parse_servers_config(text)


def test_an_auth_blocks_client_secret_is_never_shown() -> None:
    text = json.dumps(
        {"mcpServers": {"s": {"url": "https://mcp.example/mcp", "auth": {"clientId": "a", "clientSecret": "s3cr3t"}}}}
    )
    assert "s3cr3t" not in repr(parse_servers_config(text))
