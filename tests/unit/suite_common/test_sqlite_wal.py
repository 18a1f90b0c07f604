"""Connections opening a new SQLite store together: each one gets WAL mode, none is refused "locked"."""

from __future__ import annotations

import sqlite3
import threading
from pathlib import Path

from suite_common.sql import SQLITE_BUSY_TIMEOUT_SECONDS, configure_sqlite

ROUNDS = 100
"""Before the switch to WAL was asked again, about one new file in five refused one of its four connections."""


def _open_together(path: Path, connections: int) -> list[str]:
    """``connections`` threads open ``path`` at the same moment as the store does; the errors they met."""
    start = threading.Barrier(connections)
    errors: list[str] = []

    def open_one() -> None:
        connection = sqlite3.connect(path, timeout=SQLITE_BUSY_TIMEOUT_SECONDS, check_same_thread=False)
        try:
            start.wait()
            configure_sqlite(connection, busy_timeout_seconds=SQLITE_BUSY_TIMEOUT_SECONDS)
            assert connection.execute("PRAGMA journal_mode").fetchone()[0] == "wal"
        except (sqlite3.OperationalError, AssertionError) as error:
            errors.append(repr(error))
        finally:
            connection.close()

    threads = [threading.Thread(target=open_one) for _ in range(connections)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    return errors


def test_replicas_opening_a_new_sqlite_file_together_all_get_wal_mode(tmp_path: Path) -> None:
    errors = [error for i in range(ROUNDS) for error in _open_together(tmp_path / f"store-{i}.db", connections=4)]
    assert errors == []
