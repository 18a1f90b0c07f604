"""``python -m agent_service.keys``: the caller keys kept in the run store (``AGENT_CALLER_KEYS_IN_STORE``).

::

    python -m agent_service.keys add --name acme-platform --tenant acme [--trusted]   # prints the new key, once
    python -m agent_service.keys list                                                 # names, never keys
    python -m agent_service.keys revoke --name acme-platform

Reads ``AGENT_DATABASE_URL`` (and ``AGENT_DATABASE_MIGRATE``) like the service, so it runs wherever agent-service
does (``kubectl exec``, a Job, the compose container). ``add`` makes a random key (256 bits), stores only its
sha256 and prints the key on stdout, alone (``KEY=$(python -m agent_service.keys add ...)``); it cannot be shown
again. A revoked key is refused by every replica within ``AGENT_CALLER_KEYS_CACHE_SECONDS``.

Exit status: 0 done, 1 the store or the key says no (the message on stderr), 2 a wrong command line.
"""

from __future__ import annotations

import argparse
import asyncio
import secrets
import sys
from collections.abc import Sequence
from datetime import datetime

from agent_service.callers import hash_key
from agent_service.names import is_name
from agent_service.store import RunStore, StoredCallerKey, StoreError
from agent_service.store.migrate import DatabaseSettings

__all__ = ["main", "new_key"]

_KEY_BYTES = 32


def new_key() -> str:
    """A new caller key: 256 random bits, URL-safe text (43 characters)."""
    return secrets.token_urlsafe(_KEY_BYTES)


def _name(text: str) -> str:
    if not is_name(text):
        raise argparse.ArgumentTypeError(f"{text!r}: letters, digits, '.', '_' or '-' (at most 64)")
    return text


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="python -m agent_service.keys", description="The caller keys kept in agent-service's run store."
    )
    commands = parser.add_subparsers(dest="command", required=True)
    add = commands.add_parser("add", help="make a key, store its sha256, print the key (once)")
    add.add_argument("--name", type=_name, required=True, help="shown in logs and in list; unique, never reused")
    add.add_argument("--tenant", type=_name, required=True, help="the tenant the key's runs belong to")
    add.add_argument("--trusted", action="store_true", help="the key may name the end user (X-User-Id)")
    commands.add_parser("list", help="the stored keys: name, tenant, trusted, created, revoked (never a key)")
    revoke = commands.add_parser("revoke", help="revoke a key: refused from then on")
    revoke.add_argument("--name", type=_name, required=True)
    return parser


def _when(moment: datetime | None) -> str:
    return "-" if moment is None else moment.strftime("%Y-%m-%dT%H:%M:%SZ")


def _table(keys: Sequence[StoredCallerKey]) -> str:
    rows = [("NAME", "TENANT", "TRUSTED", "CREATED", "REVOKED")]
    rows += [
        (key.name, key.tenant, "yes" if key.trusted else "no", _when(key.created_at), _when(key.revoked_at))
        for key in keys
    ]
    widths = [max(len(row[column]) for row in rows) for column in range(len(rows[0]))]
    return "\n".join(
        "  ".join(cell.ljust(width) for cell, width in zip(row, widths, strict=True)).rstrip() for row in rows
    )


async def _execute(arguments: argparse.Namespace, settings: DatabaseSettings) -> int:
    store = await RunStore.open(settings.database_url, migrate=settings.database_migrate)
    try:
        keys = store.caller_keys
        if arguments.command == "add":
            key = new_key()
            await keys.add(hash_key(key), name=arguments.name, tenant=arguments.tenant, trusted=arguments.trusted)
            print(key)
            trust = "trusted (may send X-User-Id)" if arguments.trusted else "not trusted"
            print(
                f"Added the caller key {arguments.name!r} of tenant {arguments.tenant!r}, {trust}. It is printed "
                "above once: only its sha256 is stored.",
                file=sys.stderr,
            )
        elif arguments.command == "list":
            print(_table(await keys.list_keys()))
        else:
            revoked = await keys.revoke(arguments.name)
            if revoked is None:
                print(f"No caller key is named {arguments.name!r}.", file=sys.stderr)
                return 1
            print(f"The caller key {arguments.name!r} is revoked (since {_when(revoked.revoked_at)}).", file=sys.stderr)
    finally:
        await store.aclose()
    return 0


def main(argv: Sequence[str] | None = None) -> int:
    arguments = _parser().parse_args(argv)
    settings = DatabaseSettings()
    if not settings.database_url.strip():
        print("AGENT_DATABASE_URL is empty: there is no run store to keep caller keys in.", file=sys.stderr)
        return 2
    try:
        return asyncio.run(_execute(arguments, settings))
    except (ValueError, StoreError) as error:
        print(str(error), file=sys.stderr)
        return 1


if __name__ == "__main__":
    sys.exit(main())
