"""Test-wide fixtures: every async test runs on asyncio (uvicorn and the services need it)."""

from __future__ import annotations

import os
from collections.abc import AsyncIterator, Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest

from support.databases import fresh_postgres_database, redis_key_prefix


@pytest.fixture(scope="session")
def anyio_backend() -> str:
    return "asyncio"


@contextmanager
def _runs_stored_in(folder: Path) -> Iterator[None]:
    urls = {
        "AGENT_DATABASE_URL": f"sqlite:///{folder}/agent.db",
        "MCP_CLIENT_DATABASE_URL": f"sqlite:///{folder}/mcp_client.db",
    }
    previous = {name: os.environ.get(name) for name in urls}
    os.environ.update(urls)
    try:
        yield
    finally:
        for name, value in previous.items():
            if value is None:
                os.environ.pop(name, None)
            else:
                os.environ[name] = value


# agent-service stores its runs (and the gateway its tenant servers) in a SQLite file of the test's own, never in
# the checkout's ``.data``: any agent-service on a database takes over the runs another one left behind (a test that
# shut one down midway), and would run them against this test's scripted LLM. A service made by a module's fixture
# gets the module's file, one made during a test the test's. A test that needs another database says so in its own
# settings.


@pytest.fixture(scope="module", autouse=True)
def _module_runs_stored_apart(tmp_path_factory: pytest.TempPathFactory) -> Iterator[None]:
    with _runs_stored_in(tmp_path_factory.mktemp("agent-store")):
        yield


@pytest.fixture(autouse=True)
def _test_runs_stored_apart(tmp_path_factory: pytest.TempPathFactory) -> Iterator[None]:
    with _runs_stored_in(tmp_path_factory.mktemp("agent-store")):
        yield


@pytest.fixture(scope="session")
def postgres_url() -> Iterator[str]:
    """A PostgreSQL database of this test session's (created empty, dropped at the end); fails when PostgreSQL
    is unreachable."""
    with fresh_postgres_database() as url:
        yield url


@pytest.fixture
def own_postgres_url() -> Iterator[str]:
    """A PostgreSQL database of this test's alone (created empty, dropped after). An agent-service takes over every
    run it finds in its database whose lease has expired: on one shared with other tests it would run theirs."""
    with fresh_postgres_database() as url:
        yield url


"""The real Redis the tests of what replicas share in it use (a test fails when it is unreachable)."""


@pytest.fixture
async def redis_prefix() -> AsyncIterator[str]:
    """A Redis key prefix of this test's own (``test-<uuid>:``); its keys are deleted at the end. Fails (never skips)
    without Redis at ``REDIS_URL``."""
    async with redis_key_prefix() as prefix:
        yield prefix
