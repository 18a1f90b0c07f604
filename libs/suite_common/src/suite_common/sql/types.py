"""Column types a store's schema shares across SQLite and PostgreSQL."""

from __future__ import annotations

from datetime import UTC, datetime

import sqlalchemy as sa
from sqlalchemy.engine import Dialect

__all__ = ["UtcDateTime", "sqlite_time", "store_metadata"]


class UtcDateTime(sa.TypeDecorator[datetime]):
    """A timezone-aware UTC datetime on both backends.

    PostgreSQL keeps ``timestamptz``; SQLite has no time zones and would hand back naive datetimes, so values are
    stored there as naive UTC (the same text format throughout, so comparisons and ordering hold) and read back
    as UTC.
    """

    impl = sa.DateTime(timezone=True)
    cache_ok = True

    def process_bind_param(self, value: datetime | None, dialect: Dialect) -> datetime | None:
        if value is None:
            return None
        if value.tzinfo is None:
            raise ValueError("The store takes timezone-aware datetimes only.")
        value = value.astimezone(UTC)
        return value.replace(tzinfo=None) if dialect.name == "sqlite" else value

    def process_result_value(self, value: datetime | None, dialect: Dialect) -> datetime | None:
        if value is None:
            return None
        return value.replace(tzinfo=UTC) if value.tzinfo is None else value.astimezone(UTC)


def sqlite_time(moment: datetime) -> str:
    """How ``UtcDateTime`` stores a time on SQLite (SQLAlchemy's format, naive UTC), for SQL written by hand."""
    return moment.astimezone(UTC).strftime("%Y-%m-%d %H:%M:%S.%f")


def store_metadata() -> sa.MetaData:
    """A store's schema's metadata, with constraint names fixed so that its migrations and its metadata name them
    alike on both backends."""
    return sa.MetaData(
        naming_convention={
            "ix": "ix_%(table_name)s_%(column_0_N_name)s",
            "uq": "uq_%(table_name)s_%(column_0_N_name)s",
            "ck": "ck_%(table_name)s_%(constraint_name)s",
            "fk": "fk_%(table_name)s_%(column_0_name)s_%(referred_table_name)s",
            "pk": "pk_%(table_name)s",
        }
    )
