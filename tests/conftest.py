"""Test-wide fixtures: every async test runs on asyncio (uvicorn and the services need it)."""

from __future__ import annotations

import os
from collections.abc import Iterator

import pytest


@pytest.fixture(scope="session")
def anyio_backend() -> str:
    return "asyncio"


@pytest.fixture(scope="session", autouse=True)
def _runs_stored_apart(tmp_path_factory: pytest.TempPathFactory) -> Iterator[None]:
    """agent-service stores its runs in one SQLite file of this session's, never in the checkout's ``.data``;
    a test that needs another database says so in its own settings."""
    previous = os.environ.get("AGENT_DATABASE_URL")
    os.environ["AGENT_DATABASE_URL"] = f"sqlite:///{tmp_path_factory.mktemp('agent-store')}/agent.db"
    yield
    if previous is None:
        os.environ.pop("AGENT_DATABASE_URL", None)
    else:
        os.environ["AGENT_DATABASE_URL"] = previous
