"""Caller keys kept in the run store (``RunStore.caller_keys``) on both backends: SQLite (a file of the test's) and
PostgreSQL (a database of the test's own, so that the list holds only its keys)."""

from __future__ import annotations

import hashlib
from collections.abc import AsyncIterator
from pathlib import Path

import pytest
import sqlalchemy as sa

from agent_service.store import KeyNameTaken, RunStore
from agent_service.store.schema import caller_keys

pytestmark = pytest.mark.anyio


def _digest(key: str) -> bytes:
    return hashlib.sha256(key.encode()).digest()


@pytest.fixture(params=["sqlite", "postgresql"])
async def store(request: pytest.FixtureRequest, tmp_path: Path) -> AsyncIterator[RunStore]:
    url = f"sqlite:///{tmp_path}/agent.db" if request.param == "sqlite" else request.getfixturevalue("own_postgres_url")
    opened = await RunStore.open(url)
    try:
        yield opened
    finally:
        await opened.aclose()


async def test_an_added_key_is_found_by_its_digest_with_its_tenant_and_trust(store: RunStore) -> None:
    keys = store.caller_keys
    added = await keys.add(_digest("key-one"), name="acme-platform", tenant="acme", trusted=True)
    found = await keys.find(_digest("key-one"))
    assert found == added
    assert (found.name, found.tenant, found.trusted, found.revoked_at) == ("acme-platform", "acme", True, None)
    assert found.created_at.tzinfo is not None
    assert await keys.find(_digest("key-two")) is None


async def test_a_keys_role_is_stored_and_found_with_it_and_listed(store: RunStore) -> None:
    keys = store.caller_keys
    await keys.add(_digest("admin-key"), name="acme-admin", tenant="acme", trusted=False, role="admin")
    await keys.add(_digest("plain-key"), name="acme-plain", tenant="acme", trusted=False)
    admin, plain = await keys.find(_digest("admin-key")), await keys.find(_digest("plain-key"))
    assert admin is not None
    assert plain is not None
    assert (admin.role, plain.role) == ("admin", None)
    assert [(key.name, key.role) for key in await keys.list_keys()] == [("acme-admin", "admin"), ("acme-plain", None)]


async def test_only_the_digest_is_stored_never_the_key(store: RunStore) -> None:
    await store.caller_keys.add(_digest("the-secret-key"), name="k", tenant="acme", trusted=False)
    rows = await store._db.run("read", lambda c: [tuple(r) for r in c.execute(sa.select(caller_keys))], write=False)
    assert "the-secret-key" not in str(rows)
    assert rows[0][0] == _digest("the-secret-key").hex()


async def test_a_name_is_used_once_even_after_its_key_is_revoked(store: RunStore) -> None:
    keys = store.caller_keys
    await keys.add(_digest("a"), name="acme-app", tenant="acme", trusted=False)
    with pytest.raises(KeyNameTaken):
        await keys.add(_digest("b"), name="acme-app", tenant="acme", trusted=False)
    await keys.revoke("acme-app")
    with pytest.raises(KeyNameTaken):
        await keys.add(_digest("c"), name="acme-app", tenant="acme", trusted=False)
    assert await keys.find(_digest("b")) is None


async def test_a_revoked_key_is_no_longer_found_but_stays_listed(store: RunStore) -> None:
    keys = store.caller_keys
    await keys.add(_digest("a"), name="b-key", tenant="globex", trusted=False)
    await keys.add(_digest("b"), name="a-key", tenant="acme", trusted=True)
    revoked = await keys.revoke("b-key")
    assert revoked is not None
    assert revoked.revoked_at is not None
    assert await keys.find(_digest("a")) is None
    assert await keys.find(_digest("b")) is not None
    listed = await keys.list_keys()
    assert [(key.name, key.tenant, key.revoked_at is not None) for key in listed] == [
        ("a-key", "acme", False),
        ("b-key", "globex", True),
    ]
    again = await keys.revoke("b-key")  # a second revocation keeps the first time
    assert again is not None
    assert again.revoked_at == revoked.revoked_at


async def test_revoking_an_unknown_name_says_so(store: RunStore) -> None:
    assert await store.caller_keys.revoke("nobody") is None
