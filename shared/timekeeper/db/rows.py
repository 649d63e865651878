"""Rows into frozen dataclasses: the one way repositories hand database rows to callers.

A repository's row type is a frozen dataclass whose fields are its query's column names,
so ``model(**row)`` builds it from a dict row. Every repository builds its row types here
(:func:`fetch_one`, :func:`fetch_all`, or :func:`from_row` on a row it already holds),
never with psycopg's ``class_row`` or by hand. Parameters are a mapping for the named
``%(name)s`` placeholders or a sequence for positional ``%s`` ones. The helpers here open their own cursor with
``dict_row``, so the caller's connection may use any row factory; instants
(``timestamptz``) come back as aware UTC datetimes whatever the session's ``TimeZone``.
Naive datetimes (``timestamp`` columns, e.g. a local wall time) are left as they are.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from datetime import UTC, datetime
from typing import Any, TypeVar

import psycopg
from psycopg.rows import dict_row

T = TypeVar("T")

#: The type OID of ``timestamptz`` (an instant).
_TIMESTAMPTZ_OID = 1184

#: Bound parameters: by name (``%(name)s``) or by position (``%s``).
Params = Mapping[str, Any] | Sequence[Any]


def _utc(value: Any) -> Any:
    if isinstance(value, datetime) and value.tzinfo is not None and value.utcoffset():
        return value.astimezone(UTC)
    return value


def from_row(model: type[T], row: Mapping[str, Any]) -> T:
    """Build ``model`` from a dict row (column name -> value), aware instants in UTC.

    Raises ``TypeError`` when the row's columns are not exactly the model's fields."""
    return model(**{name: _utc(value) for name, value in row.items()})


def _model_rows(model: type[T]) -> Callable[[psycopg.Cursor[Any]], Callable[[Sequence[Any]], T]]:
    """A psycopg row factory building ``model`` from each row: the column names and which
    columns are instants (``timestamptz``, brought to UTC) are read once per statement, so
    a row costs what psycopg's ``class_row`` costs plus the instants' conversion."""

    def factory(cursor: psycopg.Cursor[Any]) -> Callable[[Sequence[Any]], T]:
        description = cursor.description or []
        names = [column.name for column in description]
        instants = [i for i, column in enumerate(description) if column.type_code == _TIMESTAMPTZ_OID]

        def make(values: Sequence[Any]) -> T:
            if instants:
                values = list(values)
                for i in instants:
                    values[i] = _utc(values[i])
            return model(**dict(zip(names, values, strict=True)))

        return make

    return factory


def fetch_one(conn: psycopg.Connection, sql: str, params: Params, model: type[T]) -> T | None:
    """Run ``sql`` and return its first row as ``model`` (or None when no row)."""
    with conn.cursor(row_factory=_model_rows(model)) as cur:
        return cur.execute(sql, params).fetchone()


def fetch_all(conn: psycopg.Connection, sql: str, params: Params, model: type[T]) -> list[T]:
    """Run ``sql`` and return every row as ``model``, in the statement's order."""
    with conn.cursor(row_factory=_model_rows(model)) as cur:
        return cur.execute(sql, params).fetchall()


def fetch_row(conn: psycopg.Connection, sql: str, params: Params) -> dict[str, Any] | None:
    """Run ``sql`` and return its first row as a dict (column name -> value, aware instants
    in UTC), or None when no row: for a row a function reads itself rather than hands on."""
    with conn.cursor(row_factory=dict_row) as cur:
        row = cur.execute(sql, params).fetchone()
    return None if row is None else {name: _utc(value) for name, value in row.items()}


def fetch_rows(conn: psycopg.Connection, sql: str, params: Params) -> list[dict[str, Any]]:
    """Run ``sql`` and return every row as a dict (as :func:`fetch_row`), in the statement's order."""
    with conn.cursor(row_factory=dict_row) as cur:
        rows = cur.execute(sql, params).fetchall()
    return [{name: _utc(value) for name, value in row.items()} for row in rows]


def fetch_value(conn: psycopg.Connection, sql: str, params: Params) -> Any:
    """Run ``sql`` and return the first column of its first row (None when no row)."""
    with conn.cursor(row_factory=dict_row) as cur:
        row = cur.execute(sql, params).fetchone()
    return None if row is None else next(iter(row.values()))


def execute(conn: psycopg.Connection, sql: str, params: Params) -> int:
    """Run a write and return its row count."""
    with conn.cursor() as cur:
        cur.execute(sql, params)
        return cur.rowcount
