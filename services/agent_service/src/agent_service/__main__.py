"""``agent-service``: serve the agent loop on AGENT_HOST:AGENT_PORT."""

from __future__ import annotations

from agent_service.app import create_app
from agent_service.settings import AgentSettings
from suite_common.startup import run_service


def main() -> None:
    run_service(AgentSettings, create_app, prog="agent-service")


if __name__ == "__main__":
    main()
