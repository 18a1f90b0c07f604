"""Fixtures shared by agent-service's integration tests of tenant limits (run slots, budgets)."""

from __future__ import annotations

from collections.abc import AsyncIterator

import pytest

from support.stacks import Upstreams, running_upstreams


@pytest.fixture
async def upstreams() -> AsyncIterator[Upstreams]:
    async with running_upstreams() as running:
        yield running
