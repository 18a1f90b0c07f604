"""The store's images on both backends: kept once by content per tenant, read back by their tenant only."""

from __future__ import annotations

import uuid
from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from agent_service.core.images import DecodedImage
from agent_service.store import NewRun, RunStore
from suite_common.wire import Message

pytestmark = pytest.mark.anyio

PNG = DecodedImage("image/png", b"\x89PNG\r\n\x1a\n" + uuid.uuid4().bytes)
GIF = DecodedImage("image/gif", b"GIF89a" + uuid.uuid4().bytes)


@pytest.fixture(params=["sqlite", "postgresql"])
async def store(request: pytest.FixtureRequest, tmp_path: Path) -> AsyncIterator[RunStore]:
    url = f"sqlite:///{tmp_path}/agent.db" if request.param == "sqlite" else request.getfixturevalue("postgres_url")
    store = await RunStore.open(url)
    try:
        yield store
    finally:
        await store.aclose()


async def test_an_image_is_kept_once_per_tenant_and_read_back_by_that_tenant_only(store: RunStore) -> None:
    await store.put_images("acme", [PNG, PNG])
    await store.put_images("acme", [PNG, GIF])  # again: left as it is
    found = await store.images("acme", [PNG.sha256, GIF.sha256, "0" * 64])
    assert found == {PNG.sha256: PNG, GIF.sha256: GIF}
    assert await store.images("globex", [PNG.sha256]) == {}
    assert await store.images("acme", []) == {}


async def test_a_runs_images_are_kept_as_its_tenants(store: RunStore) -> None:
    run = NewRun(
        run_id=f"run_{uuid.uuid4().hex}",
        model="scripted",
        plan={},
        input_messages=[Message(role="user", content="hi")],
        tenant="initech",
    )
    await store.create_run(run, owner="me", lease_seconds=30)
    await store.put_run_images(run.run_id, [GIF])
    assert await store.images("initech", [GIF.sha256]) == {GIF.sha256: GIF}
