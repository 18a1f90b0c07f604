"""Test-wide fixtures: every async test runs on asyncio (uvicorn and the services need it)."""

from __future__ import annotations

import pytest


@pytest.fixture(scope="session")
def anyio_backend() -> str:
    return "asyncio"
