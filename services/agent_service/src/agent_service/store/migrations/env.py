"""Alembic's environment for the run store: migrations run on a connection the store hands over.

The store opens its own engine and runs Alembic on one of its connections, so there is no ``alembic.ini`` and no
URL here: see ``agent_service.store.migrate``.
"""

from __future__ import annotations

from agent_service.store.schema import metadata
from suite_common.sql import run_on_store_connection

run_on_store_connection(metadata, command_hint="python -m agent_service.store.migrate")
