"""``python -m agent_service.keys``: the caller keys kept in the run store (``AGENT_CALLER_KEYS_IN_STORE``).

::

    python -m agent_service.keys add --name acme-platform --tenant acme [--trusted]   # prints the new key, once
    python -m agent_service.keys add --name acme-admin --tenant acme --role admin      # may use acme's admin API
    python -m agent_service.keys add --name trial-1 --tenant trial --allow-unlisted-tenant   # a tenant with no rules
    python -m agent_service.keys list                                 # names, tenants, roles, never keys
    python -m agent_service.keys revoke --name acme-platform

Reads ``AGENT_DATABASE_URL`` (and ``AGENT_DATABASE_MIGRATE``) like the service, so it runs wherever agent-service
does (``kubectl exec``, a Job, the compose container). ``add`` makes a random key (256 bits), stores only its
sha256 and prints the key on stdout, alone (``KEY=$(python -m agent_service.keys add ...)``); it cannot be shown
again. A revoked key is refused by every replica within ``AGENT_CALLER_KEYS_CACHE_SECONDS``.

``add`` also reads the callers file (``AGENT_CALLERS_FILE``, as the service does: its keys' variables must be set)
and refuses a name one of its keys has (logs and the usage log name a key: one name, one key), and a tenant it has
no ``[tenants.<name>]`` table for, unless ``--allow-unlisted-tenant``: such a key's runs have no rules at all (every
model and tool, no budget, the global cap of runs), so a typo in ``--tenant`` must not make one silently.

Exit status: 0 done, 1 the store or the key says no (the message on stderr), 2 a wrong command line.
"""

from __future__ import annotations

import argparse
import asyncio
import secrets
import sys
from collections.abc import Sequence
from datetime import datetime
from pathlib import Path

from agent_service.access.callers_file import KEY_ROLES, hash_key, load_callers
from agent_service.core.names import is_name
from agent_service.settings import AgentSettings
from agent_service.store import RunStore, StoredCallerKey, StoreError
from agent_service.store.migrate import DatabaseSettings

__all__ = ["KeysSettings", "main", "new_key"]


class KeysSettings(DatabaseSettings):
    """What the command reads: the store's settings, and the callers file whose names and tenants ``add`` checks."""

    callers_file: Path | None = AgentSettings.model_fields["callers_file"].default


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
    add.add_argument(
        "--trusted", action="store_true", help="the key may name the end user (X-User-Id) and its role (X-User-Role)"
    )
    add.add_argument(
        "--role",
        choices=KEY_ROLES,
        default=None,
        help="admin: may use its tenant's admin API (/api/v1/admin/*); operator: any tenant's, with ?tenant= "
        "(default: neither, the key runs and reads only)",
    )
    add.add_argument(
        "--allow-unlisted-tenant",
        action="store_true",
        help="a tenant the callers file has no [tenants.<name>] table for: its runs then have no rules at all",
    )
    commands.add_parser("list", help="the stored keys: name, tenant, trusted, role, created, revoked (never a key)")
    revoke = commands.add_parser("revoke", help="revoke a key: refused from then on")
    revoke.add_argument("--name", type=_name, required=True)
    return parser


def _when(moment: datetime | None) -> str:
    return "-" if moment is None else moment.strftime("%Y-%m-%dT%H:%M:%SZ")


def _table(keys: Sequence[StoredCallerKey]) -> str:
    rows = [("NAME", "TENANT", "TRUSTED", "ROLE", "CREATED", "REVOKED")]
    rows += [
        (
            key.name,
            key.tenant,
            "yes" if key.trusted else "no",
            key.role or "-",
            _when(key.created_at),
            _when(key.revoked_at),
        )
        for key in keys
    ]
    widths = [max(len(row[column]) for row in rows) for column in range(len(rows[0]))]
    return "\n".join(
        "  ".join(cell.ljust(width) for cell, width in zip(row, widths, strict=True)).rstrip() for row in rows
    )


class Refused(Exception):
    """The command line asks for something the command does not do (the message says why and what to do)."""


def _check_new_key(arguments: argparse.Namespace, callers_file: Path | None) -> None:
    """Refuse a name a key of the callers file has, and a tenant the file has no table for (unless allowed)."""
    callers = load_callers(callers_file, keys_required=False) if callers_file is not None else None
    if callers is not None and any(key.name == arguments.name for key in callers.keys):
        raise Refused(
            f"A key of the callers file ({callers_file}) is named {arguments.name!r}: a name tells one key apart in "
            "logs and the usage log, choose another."
        )
    if not arguments.allow_unlisted_tenant and (callers is None or arguments.tenant not in callers.tenants):
        where = (
            f"The callers file ({callers_file}) has no [tenants.{arguments.tenant}] table"
            if callers is not None
            else "AGENT_CALLERS_FILE is not set, so no tenant has a [tenants.<name>] table"
        )
        raise Refused(
            f"{where}: a key of tenant {arguments.tenant!r} would run with no rules at all (every model and tool, no "
            "budget, the global cap of runs). Check the name, add the table, or pass --allow-unlisted-tenant."
        )


async def _execute(arguments: argparse.Namespace, settings: KeysSettings) -> int:
    if arguments.command == "add":
        _check_new_key(arguments, settings.callers_file)
    store = await RunStore.open(settings.database_url, migrate=settings.database_migrate)
    try:
        keys = store.caller_keys
        if arguments.command == "add":
            key = new_key()
            await keys.add(
                hash_key(key),
                name=arguments.name,
                tenant=arguments.tenant,
                trusted=arguments.trusted,
                role=arguments.role,
            )
            print(key)
            trust = "trusted (may send X-User-Id and X-User-Role)" if arguments.trusted else "not trusted"
            role = f", role {arguments.role}" if arguments.role else ""
            print(
                f"Added the caller key {arguments.name!r} of tenant {arguments.tenant!r}, {trust}{role}. It is "
                "printed above once: only its sha256 is stored.",
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
    settings = KeysSettings()
    if not settings.database_url.strip():
        print("AGENT_DATABASE_URL is empty: there is no run store to keep caller keys in.", file=sys.stderr)
        return 2
    try:
        return asyncio.run(_execute(arguments, settings))
    except (ValueError, StoreError, Refused) as error:  # ValueError: a bad callers file or database URL too
        print(str(error), file=sys.stderr)
        return 1


if __name__ == "__main__":
    sys.exit(main())
