"""Row helpers shared by the accounting repositories: dict rows into dataclasses.

The caller's connection may use any row factory; these helpers open their own cursor
with ``dict_row`` so that ``Model(**row)`` works everywhere.
"""

from __future__ import annotations

from collections.abc import Mapping
from datetime import UTC, datetime
from decimal import Decimal
from typing import Any, TypeVar

import psycopg
from psycopg.rows import dict_row

T = TypeVar("T")


def fetch_one(conn: psycopg.Connection, sql: str, params: Mapping[str, Any], model: type[T]) -> T | None:
    """Run ``sql`` and return its first row as ``model`` (or None when no row)."""
    with conn.cursor(row_factory=dict_row) as cur:
        row = cur.execute(sql, params).fetchone()
    return None if row is None else model(**row)


def fetch_all(conn: psycopg.Connection, sql: str, params: Mapping[str, Any], model: type[T]) -> list[T]:
    """Run ``sql`` and return every row as ``model``."""
    with conn.cursor(row_factory=dict_row) as cur:
        rows = cur.execute(sql, params).fetchall()
    return [model(**row) for row in rows]


def fetch_value(conn: psycopg.Connection, sql: str, params: Mapping[str, Any]) -> Any:
    """Run ``sql`` and return the first column of its first row (None when no row)."""
    with conn.cursor(row_factory=dict_row) as cur:
        row = cur.execute(sql, params).fetchone()
    return None if row is None else next(iter(row.values()))


def execute(conn: psycopg.Connection, sql: str, params: Mapping[str, Any]) -> int:
    """Run a write and return its row count."""
    with conn.cursor() as cur:
        cur.execute(sql, params)
        return cur.rowcount


def money(amount: Decimal | int | str) -> Decimal:
    """Return ``amount`` as a Decimal with at most two places; raises ``ValueError`` otherwise."""
    value = Decimal(str(amount))
    if not value.is_finite() or value.normalize().as_tuple().exponent < -2:  # type: ignore[operator]
        raise ValueError(f"amount {amount!r} must be a finite number with at most two decimal places")
    return value


def utc_now(now: datetime | None) -> datetime:
    """Return ``now`` (which must be aware) or, when None, the wall clock in UTC."""
    if now is None:
        return datetime.now(UTC)
    if now.tzinfo is None:
        raise ValueError("instants must be aware UTC datetimes")
    return now
