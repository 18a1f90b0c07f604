"""A store's database: which URLs it takes, how each backend's connections are set up and its transactions run,
how failures read. Shared by the stores of the services (agent-service's run store, the gateway's tenant servers).

A transaction of a store is a plain function of a SQLAlchemy ``Connection``, run whole:

- PostgreSQL (``postgresql://``, ``postgres://``): asyncpg, through SQLAlchemy's asyncio engine
  (``AsyncConnection.run_sync``); a bounded pool, timeouts on connecting, on each statement and on waiting for a
  pooled connection. A store's hot path written in the driver's own terms (``on_driver``) has a pool of asyncpg
  connections of its own (``driver_pool``: ``driver_pool_size`` connections, opened when first needed and kept): a
  checkout from SQLAlchemy's asyncio pool costs about 0.1 ms of CPU (its greenlet hops), from asyncpg's pool 0.1 to
  0.25 ms (its tasks and timers), from this one a few microseconds.
- SQLite (``sqlite:///path``): the standard library's driver, the whole transaction on a worker thread (one thread
  hop per transaction). An asyncio driver (aiosqlite) hops threads for every cursor call, three or more per
  statement: it made a run step's write 2.5 times slower (measured: ``python -m bench.run_store``).

Every failure of the database or its driver becomes one ``StoreError`` here, at the edge, saying which store, what
it was doing and what the database answered (never the URL, which may hold a password, nor the SQL's parameters,
which hold the data).
"""

from __future__ import annotations

import asyncio
import json
import sqlite3
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import AbstractAsyncContextManager, asynccontextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TypeVar

import anyio
import asyncpg
import sqlalchemy as sa
from sqlalchemy import event
from sqlalchemy.engine import URL, make_url
from sqlalchemy.exc import ArgumentError, DBAPIError, SQLAlchemyError
from sqlalchemy.ext.asyncio import AsyncEngine, create_async_engine

from suite_common.sql.driver_pool import DriverPool
from suite_common.sql.errors import StoreError

__all__ = [
    "SQLITE_BUSY_TIMEOUT_SECONDS",
    "STATEMENT_TIMEOUT_SECONDS",
    "Database",
    "PostgresDatabase",
    "SqliteDatabase",
    "StoreName",
    "compact_json",
    "configure_sqlite",
    "database_url",
    "open_database",
    "translate_errors",
]

T = TypeVar("T")


@dataclass(frozen=True)
class StoreName:
    """Who a store is, in its messages and to the database server."""

    label: str
    """How its messages name it: "run store" gives "The run store could not ..."."""
    application: str
    """PostgreSQL's ``application_name`` of its connections (``pg_stat_activity`` shows who holds what)."""
    example_file: str
    """The file name its URL examples use (``agent.db``)."""


def compact_json(value: Any) -> str:
    """How a JSON column is written: compact, non-ASCII as itself (UTF-8), as pydantic's ``model_dump_json``
    writes, so that a value takes the same bytes however it was stored."""
    return json.dumps(value, separators=(",", ":"), ensure_ascii=False)


SQLITE_BUSY_TIMEOUT_SECONDS = 10.0
"""How long a SQLite writer waits for another to finish (SQLite has one writer at a time)."""
STATEMENT_TIMEOUT_SECONDS = 10.0
"""How long PostgreSQL may take for one statement (asyncpg's ``command_timeout``) or to connect."""
_SQLITE_THREADS = 4
"""SQLite transactions running at once (each on a thread with its own connection): one writes, the others read."""
_POOL_SIZE = 10
_POOL_OVERFLOW = 10
_POOL_TIMEOUT_SECONDS = 10.0
"""How long a caller waits for a free pooled connection before the store reports itself unavailable."""
_DRIVER_POOL_SIZE = 10
"""Connections of the driver's pool (``on_driver``) when the store names no number of its own."""
_DRIVER_POOL_IDLE_SECONDS = 1800.0
"""A connection of the driver's pool unused this long is closed (SQLAlchemy's pool recycles its own as often)."""

_WRITE_OPTION = "suite_store_write"
"""Execution option of a connection whose transaction writes: SQLite starts it with ``BEGIN IMMEDIATE``."""


def database_url(url: str, name: StoreName) -> URL:
    """The SQLAlchemy URL with the store's driver; ``ValueError`` (one sentence) for anything a store does not
    take."""
    try:
        parsed = make_url(url.strip())
    except ArgumentError:
        parsed = None
    if parsed is None:
        raise ValueError(_unsupported(url, name))
    if parsed.drivername in ("sqlite", "sqlite+pysqlite"):
        database = parsed.database or ""
        if not database or database == ":memory:" or database.startswith("file:"):
            raise ValueError(
                f"The {name.label}'s SQLite URL must name a database file, e.g. sqlite:///.data/{name.example_file} "
                f"(relative) or sqlite:////var/lib/store/{name.example_file} (absolute)."
            )
        return parsed.set(drivername="sqlite+pysqlite")
    if parsed.drivername in ("postgresql", "postgres", "postgresql+asyncpg"):
        return parsed.set(drivername="postgresql+asyncpg")
    raise ValueError(_unsupported(url, name))


def _unsupported(url: str, name: StoreName) -> str:
    scheme = url.split(":", 1)[0] if ":" in url else url
    database = name.example_file.rsplit(".", 1)[0]
    return (
        f"The {name.label}'s database URL must start with sqlite:/// or postgresql:// (got {scheme!r}: "
        f"e.g. sqlite:///.data/{name.example_file} or postgresql://user:password@host:5432/{database})."
    )


class Database:
    """One database of a store's: runs its transactions, each a function of a ``Connection``, to the end."""

    def __init__(self, url: URL, name: StoreName) -> None:
        self.url = url
        self.name = name
        self.backend = url.get_backend_name()

    async def run(self, what: str, body: Callable[[sa.Connection], T], *, write: bool) -> T:
        """Run ``body`` in one transaction (committed when it returns, rolled back when it raises); ``what`` names
        it in a ``StoreError``. ``write``: the transaction writes (SQLite takes its write lock at once)."""
        raise NotImplementedError

    async def migrate(self, what: str, body: Callable[[sa.Connection], T]) -> T:
        """Run ``body``, a change of the schema, in one writing transaction. SQLite's: with foreign keys off, as
        SQLite's own procedure for rebuilding a table says (a table dropped with them on deletes its rows first,
        cascading to every table that refers to it), and checked before the commit (a violation: ``StoreError``,
        nothing changed)."""
        return await self.run(what, body, write=True)

    def errors(self, what: str) -> AbstractAsyncContextManager[None]:
        """``translate_errors`` for this store."""
        return translate_errors(what, self.name.label)

    async def dispose(self) -> None:
        raise NotImplementedError


def open_database(url: URL, name: StoreName, *, driver_pool_size: int | None = None) -> Database:
    """The database at ``url`` (from ``database_url``); connections are opened when first needed.
    ``driver_pool_size``: PostgreSQL's connections for ``on_driver`` (``None``: ten); SQLite has no such pool."""
    if url.get_backend_name() == "sqlite":
        return SqliteDatabase(url, name)
    return PostgresDatabase(url, name, driver_pool_size=driver_pool_size or _DRIVER_POOL_SIZE)


def _in_transaction(connection: sa.Connection, body: Callable[[sa.Connection], T], write: bool) -> T:
    if write:
        connection = connection.execution_options(**{_WRITE_OPTION: True})
    with connection.begin():
        return body(connection)


class PostgresDatabase(Database):
    def __init__(self, url: URL, name: StoreName, *, driver_pool_size: int = _DRIVER_POOL_SIZE) -> None:
        super().__init__(url, name)
        self.driver_pool_size = driver_pool_size
        # None opened ahead, each kept once opened (up to the pool's size): a burst of writes within it opens nothing
        # new, a burst beyond it waits for a connection to come back.
        self._driver_pool = DriverPool(
            self._connect_driver,
            size=driver_pool_size,
            idle_seconds=_DRIVER_POOL_IDLE_SECONDS,
            acquire_timeout=_POOL_TIMEOUT_SECONDS,
        )
        self._engine: AsyncEngine = create_async_engine(
            url,
            pool_size=_POOL_SIZE,
            max_overflow=_POOL_OVERFLOW,
            pool_timeout=_POOL_TIMEOUT_SECONDS,
            # Connections are replaced before proxies' idle timeouts close them under the store's feet.
            pool_recycle=1800,
            json_serializer=compact_json,
            connect_args={
                "timeout": STATEMENT_TIMEOUT_SECONDS,
                "command_timeout": STATEMENT_TIMEOUT_SECONDS,
                "server_settings": {"application_name": name.application},
            },
        )

    async def run(self, what: str, body: Callable[[sa.Connection], T], *, write: bool) -> T:
        async with self.errors(what), self._engine.connect() as connection:
            return await connection.run_sync(_in_transaction, body, write)

    async def on_driver(self, what: str, body: Callable[[Any], Awaitable[T]]) -> T:
        """Run ``body`` on an asyncpg connection of the driver's pool, for a hot path written in the driver's own terms
        (one prepared statement instead of SQLAlchemy's building and adapting). ``body`` says BEGIN and COMMIT
        itself, if it needs them (a single statement is atomic without)."""
        async with self.errors(what):
            pool = self._driver_pool
            connection = await pool.acquire()
            try:
                result = await body(connection)
            except BaseException:
                pool.discard(connection)
                raise
            pool.release(connection)
            return result

    def driver_connections(self) -> int:
        """The connections the driver's pool holds open now (0 before its first use)."""
        return self._driver_pool.size()

    async def _connect_driver(self) -> asyncpg.Connection:
        connection: asyncpg.Connection = await asyncpg.connect(
            self.url.set(drivername="postgresql").render_as_string(hide_password=False),
            timeout=STATEMENT_TIMEOUT_SECONDS,
            command_timeout=STATEMENT_TIMEOUT_SECONDS,
            server_settings={"application_name": self.name.application},
        )
        return connection

    async def dispose(self) -> None:
        await self._driver_pool.close()
        await self._engine.dispose()


class SqliteDatabase(Database):
    def __init__(self, url: URL, name: StoreName) -> None:
        super().__init__(url, name)
        Path(url.database or "").expanduser().parent.mkdir(parents=True, exist_ok=True)
        # Each connection is used by one thread at a time (checked out for one transaction), never shared.
        self._engine = sa.create_engine(
            url,
            pool_size=_SQLITE_THREADS,
            json_serializer=compact_json,
            connect_args={"timeout": SQLITE_BUSY_TIMEOUT_SECONDS, "check_same_thread": False},
        )
        _set_up_sqlite(self._engine)
        self._threads: anyio.CapacityLimiter | None = None
        """Made at the first transaction: a limiter needs the running event loop."""
        self._on_loop: sqlite3.Connection | None = None

    async def run(self, what: str, body: Callable[[sa.Connection], T], *, write: bool) -> T:
        def transaction() -> T:
            with self._engine.connect() as connection:
                return _in_transaction(connection, body, write)

        return await self._in_thread(what, transaction)

    async def migrate(self, what: str, body: Callable[[sa.Connection], T]) -> T:
        def checked(connection: sa.Connection) -> T:
            result = body(connection)
            violation = connection.exec_driver_sql("PRAGMA foreign_key_check").first()
            if violation is not None:
                raise StoreError(
                    f"The {self.name.label} could not {what}: a row of table {violation[0]} lost its reference."
                )
            return result

        def transaction() -> T:
            with self._engine.connect() as connection:
                # Outside any transaction (inside one SQLite ignores the pragma); the pooled connection gets them back.
                driver: sqlite3.Connection = connection.connection.driver_connection  # type: ignore[assignment]
                driver.execute("PRAGMA foreign_keys=OFF")
                try:
                    return _in_transaction(connection, checked, True)
                finally:
                    driver.execute("PRAGMA foreign_keys=ON")

        return await self._in_thread(what, transaction)

    async def _in_thread(self, what: str, transaction: Callable[[], T]) -> T:
        if self._threads is None:
            self._threads = anyio.CapacityLimiter(_SQLITE_THREADS)
        async with self.errors(what):
            # Not abandoned when the caller is cancelled: the transaction ends (committed or not) first.
            return await anyio.to_thread.run_sync(transaction, limiter=self._threads)

    async def on_driver(self, what: str, body: Callable[[sqlite3.Connection], T]) -> T:
        """Run ``body`` on a sqlite3 connection in autocommit mode (``body`` says BEGIN and COMMIT itself), for a
        hot path written in the driver's own terms.

        On the event loop first: a short write takes about 0.1 ms there, less than the hop to a worker thread and
        back costs (about 0.3 ms, measured under load). Without waiting for SQLite's write lock, though: when
        another writer holds it (a transaction on a worker thread, a migration), ``body`` runs again on a thread,
        where it waits. So ``body`` must leave nothing done when it fails with SQLITE_BUSY (it rolls back)."""
        async with self.errors(what):
            try:
                return body(self._loop_connection())
            except sqlite3.OperationalError as error:
                if error.sqlite_errorcode & 0xFF != sqlite3.SQLITE_BUSY:  # SQLITE_BUSY and its extended codes
                    raise

        def transaction() -> T:
            raw = self._engine.raw_connection()
            try:
                driver: sqlite3.Connection = raw.driver_connection  # type: ignore[assignment]  # pysqlite's own
                return body(driver)
            finally:
                raw.close()

        return await self._in_thread(what, transaction)

    def _loop_connection(self) -> sqlite3.Connection:
        """The event loop's own connection (only its thread uses it), which never waits for the write lock."""
        if self._on_loop is None:
            connection = sqlite3.connect(str(Path(self.url.database or "").expanduser()), timeout=0)
            configure_sqlite(connection, busy_timeout_seconds=0)
            self._on_loop = connection
        return self._on_loop

    async def dispose(self) -> None:
        if self._on_loop is not None:
            self._on_loop.close()
            self._on_loop = None
        await anyio.to_thread.run_sync(self._engine.dispose)


def configure_sqlite(connection: sqlite3.Connection, *, busy_timeout_seconds: float) -> None:
    """Set up a new SQLite connection the way every store's are."""
    # The driver's own implicit transactions are off: the store says BEGIN itself, so that a writing transaction
    # takes SQLite's write lock at once and two writers cannot both read and then both write.
    connection.isolation_level = None
    cursor = connection.cursor()
    # WAL: readers do not block the writer nor the writer readers; NORMAL: WAL's commits are not synced to
    # disk one by one, yet a crash of the process (not of the machine) loses nothing.
    _use_wal(cursor, patience_seconds=busy_timeout_seconds)
    cursor.execute("PRAGMA synchronous=NORMAL")
    cursor.execute("PRAGMA foreign_keys=ON")
    cursor.execute(f"PRAGMA busy_timeout={int(busy_timeout_seconds * 1000)}")
    cursor.close()


def _use_wal(cursor: sqlite3.Cursor, *, patience_seconds: float) -> None:
    """Put the database in WAL mode, which the file keeps: the first connection to a new file sets it.

    Switching needs the file to itself, and while other connections open the same new file (replicas starting
    together) SQLite may answer "database is locked" at once, without waiting in its busy handler (it refuses
    what could deadlock). So the mode is read first (already WAL: nothing to do) and the switch asked again
    every 10 ms, for at most ``patience_seconds``.
    """
    give_up_at = time.monotonic() + patience_seconds
    while True:
        try:
            if cursor.execute("PRAGMA journal_mode").fetchone()[0] != "wal":
                cursor.execute("PRAGMA journal_mode=WAL")
            return
        except sqlite3.OperationalError as error:
            if error.sqlite_errorcode & 0xFF != sqlite3.SQLITE_BUSY or time.monotonic() >= give_up_at:
                raise
        time.sleep(0.01)  # on a worker thread or in a connect: never the event loop's (its patience is 0)


def _set_up_sqlite(engine: sa.Engine) -> None:
    @event.listens_for(engine, "connect")
    def _on_connect(dbapi_connection: Any, _record: Any) -> None:
        configure_sqlite(dbapi_connection, busy_timeout_seconds=SQLITE_BUSY_TIMEOUT_SECONDS)

    @event.listens_for(engine, "begin")
    def _on_begin(connection: sa.Connection) -> None:
        immediate = connection.get_execution_options().get(_WRITE_OPTION, False)
        connection.exec_driver_sql("BEGIN IMMEDIATE" if immediate else "BEGIN")


@asynccontextmanager
async def translate_errors(what: str, label: str) -> AsyncIterator[None]:
    """Turn a failure of the database or its driver into ``StoreError("The <label> could not <what>: ...")``.
    A ``StoreError`` raised inside (a store's own kinds of it) passes as it is."""
    try:
        yield
    except StoreError:
        raise
    except (
        SQLAlchemyError,
        sqlite3.Error,
        OSError,
        asyncpg.PostgresError,
        asyncpg.InterfaceError,
        TimeoutError,
    ) as exc:
        raise StoreError(f"The {label} could not {what}: {_describe(exc)}") from exc


def _describe(exc: BaseException) -> str:
    # A DBAPIError's text carries the SQL and its parameters (the data); the driver's own error is enough.
    if isinstance(exc, DBAPIError) and exc.orig is not None:
        exc = exc.orig
    if isinstance(exc, (TimeoutError, asyncio.TimeoutError)):
        return "the database did not answer in time."
    text = str(exc).strip().splitlines()[0] if str(exc).strip() else ""
    name = type(exc).__name__
    return f"{name}: {text}" if text else name
