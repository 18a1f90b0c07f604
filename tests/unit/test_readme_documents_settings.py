"""Every setting a service or tool reads is documented in the README."""

from __future__ import annotations

from pathlib import Path

import pytest
from pydantic_settings import BaseSettings

from agent_service.settings import AgentSettings
from completion_service.settings import CompletionSettings
from mcp_client_service.settings import MCPClientSettings
from mcp_rag_tool.settings import RagSettings
from mcp_web_search.settings import WebSearchSettings
from suite_common.settings import ServiceSettings

README = (Path(__file__).resolve().parents[2] / "README.md").read_text()
COMMON = set(ServiceSettings.model_fields)


@pytest.mark.parametrize(
    "settings", [AgentSettings, CompletionSettings, MCPClientSettings, RagSettings, WebSearchSettings]
)
def test_every_setting_is_in_the_readme(settings: type[BaseSettings]) -> None:
    prefix = settings.model_config.get("env_prefix", "")
    missing = [
        f"{prefix}{name.upper()}"
        for name in settings.model_fields
        if name not in COMMON and f"`{prefix}{name.upper()}`" not in README
    ]
    assert missing == [], f"document these settings in README.md: {missing}"


def test_the_settings_every_service_shares_are_in_the_readme() -> None:
    for name in COMMON:
        assert f"`<PREFIX>{name.upper()}`" in README
