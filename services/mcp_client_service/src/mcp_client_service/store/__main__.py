"""``python -m mcp_client_service.store COMMAND``: the tenant server store's operations.

- ``migrate``: bring the schema to the newest revision, then print it (for deployments that start the gateway with
  ``MCP_CLIENT_DATABASE_MIGRATE=false`` and migrate in a release job).
- ``rotate-key``: encrypt every server's header values again with the first key of ``MCP_CLIENT_SECRETS_KEY``
  (docs/gateway.md, "Rotating the secrets key").
- ``generate-key``: print a new random Fernet key.

Reads the store's settings from the environment as the gateway does (only those: the job needs neither the service
secret nor the servers file).
"""

from __future__ import annotations

import argparse
import asyncio
import sys
from collections.abc import Sequence
from pathlib import Path

from pydantic import SecretStr, ValidationError
from pydantic_settings import BaseSettings

from mcp_client_service.settings import MCPClientSettings
from mcp_client_service.store.secrets import SecretsBox, new_key
from mcp_client_service.store.tenant_servers import MIGRATIONS, STORE_NAME, open_tenant_store
from suite_common.sql import StoreError, database_url, open_database

__all__ = ["StoreSettings", "main"]

_DEFAULTS = MCPClientSettings.model_fields


class StoreSettings(BaseSettings):
    """The part of ``MCPClientSettings`` the store's commands need, read the same way."""

    model_config = MCPClientSettings.model_config
    database_url: str = _DEFAULTS["database_url"].default
    secrets_key: SecretStr = SecretStr("")
    secrets_key_file: Path | None = None


async def _migrate(url: str) -> str:
    database = open_database(database_url(url, STORE_NAME), STORE_NAME)
    try:
        return await MIGRATIONS.upgrade(database)
    finally:
        await database.dispose()


async def _rotate(settings: StoreSettings) -> int:
    secrets = SecretsBox.configured(settings.secrets_key, settings.secrets_key_file)
    store = await open_tenant_store(settings.database_url, secrets=secrets, migrate=False)
    try:
        return await store.rotate_secrets()
    finally:
        await store.close()


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m mcp_client_service.store", description=__doc__.split("\n")[0])
    commands = parser.add_subparsers(dest="command", required=True)
    commands.add_parser("migrate", help="bring the store's schema to the newest revision")
    commands.add_parser("rotate-key", help="re-encrypt every server's header values with the first key")
    commands.add_parser("generate-key", help="print a new Fernet key")
    command = parser.parse_args(argv).command
    if command == "generate-key":
        print(new_key())
        return 0
    try:
        settings = StoreSettings()
        if command == "migrate":
            revision = asyncio.run(_migrate(settings.database_url))
            print(f"The tenant server store's schema is at revision {revision}.")
        else:
            rotated = asyncio.run(_rotate(settings))
            print(f"Header values of {rotated} servers re-encrypted with the first key.")
    except (ValidationError, ValueError, StoreError) as error:
        print(str(error), file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
