"""``agent-service``: serve the agent loop on AGENT_HOST:AGENT_PORT."""

from __future__ import annotations

from agent_service.app import create_app
from agent_service.settings import AgentSettings
from suite_common.serve import serve


def main() -> None:
    settings = AgentSettings()
    serve(create_app(settings), settings)


if __name__ == "__main__":
    main()
