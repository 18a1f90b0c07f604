"""Alembic's environment for the tenant server store: migrations run on a connection the store hands over.

There is no ``alembic.ini`` and no URL here: see ``mcp_client_service.store.tenant_servers`` (at start) and
``python -m mcp_client_service.store migrate``.
"""

from __future__ import annotations

from mcp_client_service.store.schema import metadata
from suite_common.sql import run_on_store_connection

run_on_store_connection(metadata, command_hint="python -m mcp_client_service.store migrate")
