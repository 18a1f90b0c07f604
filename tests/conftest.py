"""Test-wide fixtures: every async test runs on asyncio (uvicorn and the services need it)."""

from __future__ import annotations

import os
from collections.abc import Iterator

import pytest

from support.databases import fresh_postgres_database


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


@pytest.fixture(scope="session")
def postgres_url() -> Iterator[str]:
    """A PostgreSQL database of this test session's (created empty, dropped at the end); fails when PostgreSQL
    is unreachable."""
    with fresh_postgres_database() as url:
        yield url
