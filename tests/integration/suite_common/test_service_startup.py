"""Every service and tool starts through suite_common.startup: real processes, started the way operators start them.

Bad settings end the process with exit status 1 and one line on stderr naming the setting, never a
traceback; the log format a service is given applies from its very first line.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import anyio
import pytest

_PREFIXES = ("AGENT_", "COMPLETION_", "MCP_CLIENT_", "WEB_SEARCH_", "RAG_")


def _environment(tmp_path: Path, **settings: str) -> dict[str, str]:
    """Ours without any of the suite's settings, then ``settings``; ports that cannot collide if one starts."""
    env = {name: value for name, value in os.environ.items() if not name.startswith(_PREFIXES)}
    env.update({f"{prefix}PORT": "0" for prefix in _PREFIXES})
    env["HOME"] = str(tmp_path)
    return {**env, **settings}


def _start(module: str, tmp_path: Path, **settings: str) -> subprocess.CompletedProcess[str]:
    """``python -m module`` to its end (bounded), with ``settings`` as its only suite settings."""
    return subprocess.run(
        [sys.executable, "-m", module],
        env=_environment(tmp_path, **settings),
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )


@pytest.mark.parametrize(
    ("module", "settings", "expected"),
    [
        pytest.param(
            "agent_service",
            {},
            "agent-service: invalid AGENT_* settings: AGENT_MCP_SERVICE_SECRET: must be set to the shared secret "
            "of mcp-client-service (its MCP_CLIENT_SERVICE_SECRET)",
            id="agent-service without its secret",
        ),
        pytest.param(
            "agent_service",
            {"AGENT_MCP_SERVICE_SECRET": "s3cret", "AGENT_MAX_ITERATIONS": "99"},
            "agent-service: invalid AGENT_* settings: AGENT_MAX_ITERATIONS: Input should be less than or equal to 15",
            id="agent-service with too many iterations",
        ),
        pytest.param(
            "completion_service",
            {"COMPLETION_MAX_RETRIES": "-1"},
            "completion-service: invalid COMPLETION_* settings: COMPLETION_MAX_RETRIES: "
            "Input should be greater than or equal to 0",
            id="completion-service with negative retries",
        ),
        pytest.param(
            "completion_service",
            {"COMPLETION_MODELS": '[{"name": "smart", "provider": "openai", "model": "m", "apiKey": "${env:NO_KEY}"}]'},
            "completion-service: catalog model 'smart': the environment variable NO_KEY is not set",
            id="completion-service with a catalog it cannot use",
        ),
        pytest.param(
            "mcp_client_service",
            {},
            "mcp-client-service: invalid MCP_CLIENT_* settings: MCP_CLIENT_SERVICE_SECRET: "
            "MCP_CLIENT_SERVICE_SECRET must be set to a non-empty shared secret",
            id="mcp-client-service without its secret",
        ),
        pytest.param(
            "mcp_web_search",
            {"WEB_SEARCH_TIMEOUT_SECONDS": "0", "WEB_SEARCH_SEARXNG_URL": "searx.example:8888"},
            "mcp-web-search: invalid WEB_SEARCH_* settings: WEB_SEARCH_SEARXNG_URL: must be an http:// or https:// "
            "URL, got 'searx.example:8888'; WEB_SEARCH_TIMEOUT_SECONDS: Input should be greater than 0",
            id="mcp-web-search with two bad settings",
        ),
    ],
)
def test_bad_settings_end_the_process_with_one_line_naming_the_setting(
    tmp_path: Path, module: str, settings: dict[str, str], expected: str
) -> None:
    finished = _start(module, tmp_path, **settings)
    assert finished.returncode == 1
    assert "Traceback" not in finished.stderr
    assert finished.stderr.splitlines() == [expected]


def test_a_servers_file_the_gateway_cannot_use_ends_it_with_one_line_naming_the_file(tmp_path: Path) -> None:
    servers = tmp_path / "servers.json"
    servers.write_text('{"mcpServers": {"rag": {"command": 7}}}')
    finished = _start(
        "mcp_client_service", tmp_path, MCP_CLIENT_SERVICE_SECRET="s3cret", MCP_CLIENT_SERVERS_FILE=str(servers)
    )
    assert finished.returncode == 1
    assert finished.stderr.splitlines() == [
        f'mcp-client-service: {servers}: server "rag": field "command": Input should be a valid string'
    ]


@pytest.mark.anyio
async def test_json_logging_applies_from_the_first_line_a_service_logs(tmp_path: Path) -> None:
    # Reading the servers file is the first thing the gateway logs about, before uvicorn even starts.
    servers = tmp_path / "servers.json"
    servers.write_text(json.dumps({"mcpServers": {"echo": {"command": "true", "autoApprove": []}}}))
    env = _environment(
        tmp_path,
        MCP_CLIENT_SERVICE_SECRET="s3cret",
        MCP_CLIENT_SERVERS_FILE=str(servers),
        MCP_CLIENT_LOG_FORMAT="json",
    )
    async with await anyio.open_process([sys.executable, "-m", "mcp_client_service"], env=env, cwd=tmp_path) as process:
        try:
            assert process.stdout is not None  # a service's logs go to stdout
            received = b""
            with anyio.fail_after(60):
                while b"\n" not in received:
                    received += await process.stdout.receive()
        finally:
            process.terminate()
    first = json.loads(received.split(b"\n", 1)[0])
    assert (first["event"], first["key"], first["level"]) == ("mcp_server_config_key_ignored", "autoApprove", "warning")
